"""How long does shipping a task's code (``repos: [.]``) to 8 nodes take, compared with piping
``tar`` over ``ssh`` to each of them?

A 200 MB Git work tree is generated (2,000 source-like text files, ~60 MB, built from a shared
pool of lines so they compress the way code does; 35 files of random bytes, ~140 MB, as model
shards would be), committed, then given a few modified tracked files, a few untracked files and
a few files that ``.gitignore`` or ``.dstackignore`` exclude (about 1 MB). An 8-node local fleet
is brought up once with ``playbooks/fleet.yml`` (not timed). Then, alternately in one run (the
order swapped every round, so the ratio holds on a noisy machine):

- gpufleet: ``repos.local.snapshot(root)`` and ``check_limit`` (dstack's 2 MiB upload limit,
  which the uncommitted part passes), ``repos.local.build_archive`` (a gzip level 1 tar named by
  its SHA-256), ``repos.ship.ship`` to the 8 hosts (all of them must answer ``sent``), then on
  every host at once ``mkdir -p D && tar -xzf /var/lib/gpufleet/repos/<sha>.tar.gz -C D``, as the
  job wrapper unpacks it. One file is edited before each round (untimed), so the archive is a
  new one that every host lacks;
- baseline: for each of the 8 nodes at once, ``tar -cf - --exclude=./.git -C REPO . | ssh node
  'mkdir -p D && tar -xf - -C D'``, with the argv ``tasks.ssh.Node.argv`` gives (same key,
  options and ControlMaster socket, so both sides use warm multiplexed connections). ``.git`` is
  left out (shipping the object store would double what the baseline sends); the ignored files
  are not, as plain tar knows nothing of them.

Before the timed rounds, one untimed round of each checks the result on the first node: the same
files with the same sizes and contents on both sides, less the ignored files, which only the
baseline's copy has, and the gpufleet copy is exactly the snapshot's file list. Every timed round
counts the files unpacked on every node, for both sides. Folders and archives are removed and the
page cache flushed (``sync``) between runs, untimed. The fleet is deleted at the end, whatever
happens.

Target: gpufleet at most 1.5x the baseline (median/median); the script exits 1 when missed.

    .venv/bin/python bench/repo_shipping.py [--rounds 5] [--nodes 8]
"""

from __future__ import annotations

import argparse
import os
import platform
import random
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from bench.local_engine import docker, ensure_engine, pick_name  # noqa: E402
from gpufleet._collection import ensure_importable  # noqa: E402

ensure_importable()
from gpufleet.runner import run_playbook  # noqa: E402
from ansible_collections.gpufleet.cluster.plugins.module_utils.repos import local, ship  # noqa: E402,E501
from ansible_collections.gpufleet.cluster.plugins.module_utils.tasks import surveys  # noqa: E402

FLEET = "benchrepo"
TARGET_RATIO = 1.5
PHASES = ("snapshot", "archive", "ship", "unpack")
WORK_ON_NODE = "/tmp/gpufleet-bench-repo"

TEXT_FILES = 2000
TEXT_BYTES = 60 * 10 ** 6
SHARDS = 35
SHARD_BYTES = 4 * 10 ** 6            # 35 x 4 MB = 140 MB
MODIFIED = ("src/pkg00/mod0000.py", "src/pkg07/mod0712.py", "src/pkg19/mod1999.py")
EDITED_EACH_ROUND = MODIFIED[0]
UNTRACKED = ("notes/todo.md", "src/pkg03/new_module.py", "configs/local.yaml")
IGNORED = ("logs/train.log", "src/pkg00/__pycache__/mod0000.cpython-311.pyc",
           "outputs/checkpoint.bin", "scratch/tmp.txt")


# --- the repo -------------------------------------------------------------------------------

def git(repo, *args):
    done = subprocess.run(["git", "-c", "user.name=bench", "-c", "user.email=bench@invalid",
                           "-c", "commit.gpgsign=false"] + list(args), cwd=repo,
                          capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise SystemExit("git %s failed: %s" % (" ".join(args), done.stderr))
    return done.stdout


def code_lines(rng, count=6000):
    """A pool of source-like lines; files drawn from it repeat one another as code does."""
    words = ["self", "data", "value", "result", "config", "model", "batch", "index", "tensor",
             "layer", "optimizer", "loss", "step", "epoch", "device", "path", "name", "items"]
    lines = []
    for _line in range(count):
        indent = "    " * rng.randint(0, 3)
        a, b, c = rng.choice(words), rng.choice(words), rng.choice(words)
        form = rng.randint(0, 5)
        if form == 0:
            line = "def %s_%s(%s, %s=%d):" % (a, b, c, a, rng.randint(0, 999))
        elif form == 1:
            line = "%s = %s.%s(%s[%d])" % (a, b, c, a, rng.randint(0, 99))
        elif form == 2:
            line = "# %s the %s of %s %08x" % (a, b, c, rng.getrandbits(32))
        elif form == 3:
            line = "if %s_%d > %s:" % (a, rng.randint(0, 99), b)
        elif form == 4:
            line = "return %s(%s, %s=%r)" % (a, b, c, rng.random())
        else:
            line = "%s.append(%s_%s)" % (a, b, c)
        lines.append(indent + line + "\n")
    return lines


def make_repo(repo):
    """The work tree; returns ``{"ignored": [...], "bytes": total}``."""
    rng = random.Random(20261125)
    pool = code_lines(rng)
    repo.mkdir(parents=True)
    git(repo, "init", "-q")
    (repo / ".gitignore").write_text("*.log\n__pycache__/\n/outputs/\n")
    (repo / ".dstackignore").write_text("scratch/\n")
    total = 0
    for num in range(TEXT_FILES):
        path = repo / ("src/pkg%02d/mod%04d.py" % (num // 100, num))
        path.parent.mkdir(parents=True, exist_ok=True)
        size = rng.randint(TEXT_BYTES // TEXT_FILES // 3, TEXT_BYTES // TEXT_FILES * 5 // 3)
        parts, length = [], 0
        while length < size:
            line = rng.choice(pool)
            parts.append(line)
            length += len(line)
        text = "".join(parts)
        path.write_text(text)
        total += len(text)
    for num in range(SHARDS):
        path = repo / ("models/shard-%02d-of-%02d.bin" % (num, SHARDS))
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(rng.randbytes(SHARD_BYTES))
        total += SHARD_BYTES
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "bench tree")
    for rel in MODIFIED:
        with open(repo / rel, "a") as handle:
            handle.write("# changed after the commit\n" + "".join(rng.choice(pool)
                                                                  for _line in range(50)))
    for rel in UNTRACKED:
        path = repo / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("".join(rng.choice(pool) for _line in range(100)))
    for rel in IGNORED:
        path = repo / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(rng.randbytes(500000 if rel.endswith((".bin", ".log")) else 5000))
    return {"ignored": sorted(IGNORED)}


def edit(repo, round_name):
    """A new tree for the round: one already-modified file gets a line more."""
    with open(repo / EDITED_EACH_ROUND, "a") as handle:
        handle.write("# bench round %s\n" % round_name)


# --- the two sides ----------------------------------------------------------------------------

def on_all(nodes, command, timeout=600):
    """``command(host)`` on every node at once; ``{host: stdout}``; raises on any failure."""
    def one(host):
        rc, out, err = nodes[host].run(command(host), timeout=timeout)
        if rc != 0:
            raise SystemExit("%s: %s failed (exit %d): %s" % (host, command(host)[:200], rc,
                                                              (err or out)[-2000:]))
        return out

    with ThreadPoolExecutor(max_workers=len(nodes)) as pool:
        futures = dict((host, pool.submit(one, host)) for host in sorted(nodes))
    return dict((host, future.result()) for host, future in futures.items())


def gpufleet_round(repo, nodes, dest, scratch):
    """snapshot + check_limit, build_archive, ship, unpack on every host; the phases' times."""
    times = {}
    start = time.perf_counter()
    snap = local.snapshot(str(repo))
    snap.check_limit({})
    times["snapshot"] = time.perf_counter() - start
    mark = time.perf_counter()
    archive = local.build_archive(snap, str(scratch))
    times["archive"] = time.perf_counter() - mark
    mark = time.perf_counter()
    done = ship.ship(archive, nodes, sorted(nodes))
    times["ship"] = time.perf_counter() - mark
    mark = time.perf_counter()
    remote = shlex.quote(ship.host_path(archive["sha256"]))
    on_all(nodes, lambda host: "mkdir -p %s && tar -xzf %s -C %s"
           % (shlex.quote(dest), remote, shlex.quote(dest)))
    times["unpack"] = time.perf_counter() - mark
    times["total"] = time.perf_counter() - start
    if sorted(done.items()) != [(host, "sent") for host in sorted(nodes)]:
        raise SystemExit("ship did not send the archive to every host: %s" % done)
    os.unlink(archive["path"])
    return times, snap, archive


def baseline_round(repo, nodes, dest):
    """``tar -cf - | ssh node 'tar -xf -'`` to every node at once; the time."""
    def one(host):
        tar = subprocess.Popen(["tar", "-cf", "-", "--exclude=./.git", "-C", str(repo), "."],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        sshp = subprocess.Popen(nodes[host].argv("mkdir -p %s && tar -xf - -C %s"
                                                 % (shlex.quote(dest), shlex.quote(dest))),
                                stdin=tar.stdout, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        tar.stdout.close()
        _out, ssh_err = sshp.communicate()
        tar_err = tar.stderr.read()
        tar.wait()
        if tar.returncode != 0 or sshp.returncode != 0:
            raise SystemExit("baseline to %s failed: tar exit %d (%s), ssh exit %d (%s)"
                             % (host, tar.returncode, tar_err.decode(errors="replace"),
                                sshp.returncode, ssh_err.decode(errors="replace")))

    start = time.perf_counter()
    with ThreadPoolExecutor(max_workers=len(nodes)) as pool:
        list(pool.map(one, sorted(nodes)))
    return time.perf_counter() - start


# --- checks and cleaning ----------------------------------------------------------------------

def listing(node, folder):
    """``{path: (size, md5)}`` of the files under ``folder`` on ``node``."""
    folder = shlex.quote(folder)
    found = {}
    for command in ("cd %s && find . -type f -printf '%%P\\t%%s\\n'" % folder,
                    "cd %s && find . -type f -printf '%%P\\0' | xargs -0 -r md5sum" % folder):
        rc, out, err = node.run(command, timeout=600)
        if rc != 0:
            raise SystemExit("%s: cannot list %s: %s" % (node.name, folder, err))
        for line in out.splitlines():
            if "\t" in line:
                path, size = line.split("\t")
                found[path] = [int(size), None]
            else:
                digest, path = line.split("  ", 1)
                found[path][1] = digest
    return dict((path, tuple(value)) for path, value in found.items())


def check_trees(node, ours_dir, theirs_dir, snap, ignored):
    ours = listing(node, ours_dir)
    theirs = listing(node, theirs_dir)
    missing = [p for p in ignored if p not in theirs]
    if missing:
        raise SystemExit("check: the baseline's copy lacks %s" % missing)
    leaked = [p for p in ignored if p in ours]
    if leaked:
        raise SystemExit("check: ignored files reached the node: %s" % leaked)
    expected = dict((p, v) for p, v in theirs.items() if p not in ignored)
    if ours != expected:
        only_ours = sorted(set(ours) - set(expected))[:10]
        only_theirs = sorted(set(expected) - set(ours))[:10]
        differ = sorted(p for p in set(ours) & set(expected) if ours[p] != expected[p])[:10]
        raise SystemExit("check: the trees differ on %s: only gpufleet %s, only baseline %s, "
                         "other size or content %s" % (node.name, only_ours, only_theirs, differ))
    if sorted(ours) != sorted(snap.files):
        raise SystemExit("check: the unpacked tree is not the snapshot's file list")
    return len(ours), sum(size for size, _digest in ours.values())


def count_and_clean(nodes, folders, expected, sha=None):
    """Count the files in each folder on every node (must be ``expected[folder]``), then remove
    the folders and the round's archive; untimed."""
    parts = ["find %s -type f | wc -l" % shlex.quote(f) for f in folders]
    parts.append("rm -rf %s" % " ".join(shlex.quote(f) for f in folders))
    if sha:
        parts.append("sudo -n rm -f %s" % shlex.quote(ship.host_path(sha)))
    found = on_all(nodes, lambda host: " && ".join(parts))
    for host, out in found.items():
        counts = [int(x) for x in out.split()]
        want = [expected[f] for f in folders]
        if counts != want:
            raise SystemExit("%s: files unpacked %s, expected %s (folders %s)"
                             % (host, counts, want, folders))
    os.sync()


def settle(nodes):
    """Flush dirty pages so one side's writes are not paid by the other; warm connections."""
    os.sync()
    on_all(nodes, lambda host: "true")


# --- main -------------------------------------------------------------------------------------

def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", maxsplit=1)[0])
    parser.add_argument("--rounds", type=int, default=5, help="timed rounds of each, alternating")
    parser.add_argument("--nodes", type=int, default=8)
    args = parser.parse_args(argv)

    ensure_engine()
    name = pick_name(FLEET)
    load_before = os.getloadavg()
    others = [n for n in docker("ps", "--format", "{{.Names}}").stdout.split()
              if not n.startswith("gpufleet-%s-" % name)]
    work = Path(tempfile.mkdtemp(prefix="gpufleet-bench-repo-"))
    state_dir = work / "state"
    os.environ["GPUFLEET_STATE_DIR"] = str(state_dir)
    os.environ.pop(local.UPLOAD_LIMIT_VARIABLE, None)
    repo = work / "repo"
    scratch = work / "archives"
    scratch.mkdir()
    fleet = work / (name + ".dstack.yml")
    fleet.write_text("type: fleet\nname: %s\nnodes: %d\nplacement: cluster\nbackends: [local]\n"
                     % (name, args.nodes))
    nodes = {}
    ours, theirs = {p: [] for p in PHASES + ("total",)}, []
    try:
        start = time.perf_counter()
        made = make_repo(repo)
        print("repo: generated and committed in %.1f s" % (time.perf_counter() - start))
        snap = local.snapshot(str(repo))
        snap.check_limit({})   # the default 2 MiB limit: RepoError when over it
        print("repo: %d files shipped, %.1f MB; uncommitted part %d files, %s (limit %s)"
              % (len(snap.files), snap.size() / 1e6, len(snap.changed),
                 local.size_text(snap.size(snap.changed)),
                 local.size_text(local.DEFAULT_UPLOAD_LIMIT)))

        start = time.perf_counter()
        result = run_playbook("fleet.yml", {"fleet": str(fleet)})
        if not result.ok:
            why = "\n".join(result.failure_lines())
            raise SystemExit("fleet.yml failed:\n%s\n%s" % (why, result.stdout[-4000:]))
        record = next(f for f in result.stats["gpufleet_fleets"] if f["name"] == name)
        nodes = surveys.nodes_of([record], root=str(state_dir))
        if len(nodes) != args.nodes:
            raise SystemExit("fleet %s has %d nodes with an address, expected %d"
                             % (name, len(nodes), args.nodes))
        print("fleet %s: %d nodes up in %.1f s (not timed against anything)"
              % (name, len(nodes), time.perf_counter() - start))
        on_all(nodes, lambda host: "rm -rf %s && mkdir -p %s"
               % (WORK_ON_NODE, WORK_ON_NODE))   # opens the ControlMaster connections

        # Untimed round of each: warms caches and checks both results on the first node.
        edit(repo, "check")
        ours_dir, theirs_dir = WORK_ON_NODE + "/gf-check", WORK_ON_NODE + "/base-check"
        times, snap, archive = gpufleet_round(repo, nodes, ours_dir, scratch)
        baseline_round(repo, nodes, theirs_dir)
        first = nodes[sorted(nodes)[0]]
        count, size = check_trees(first, ours_dir, theirs_dir, snap, made["ignored"])
        total_files = count + len(made["ignored"])
        print("check on %s: %d files, %.1f MB, same sizes and contents on both sides; the %d "
              "ignored files only in the baseline's copy; archive %s (%.1f MB)"
              % (first.name, count, size / 1e6, len(made["ignored"]),
                 archive["sha256"][:12], archive["size"] / 1e6))
        count_and_clean(nodes, [ours_dir, theirs_dir], {ours_dir: count, theirs_dir: total_files},
                        archive["sha256"])

        for num in range(args.rounds):
            ours_dir = "%s/gf-%d" % (WORK_ON_NODE, num)
            theirs_dir = "%s/base-%d" % (WORK_ON_NODE, num)
            edit(repo, num)
            order = ("ours", "theirs") if num % 2 == 0 else ("theirs", "ours")
            for side in order:
                settle(nodes)
                if side == "ours":
                    times, snap, archive = gpufleet_round(repo, nodes, ours_dir, scratch)
                    for phase, took in times.items():
                        ours[phase].append(took)
                else:
                    theirs.append(baseline_round(repo, nodes, theirs_dir))
            print("round %d (%s first): gpufleet %.2f s (%s), baseline %.2f s"
                  % (num + 1, "gpufleet" if order[0] == "ours" else "baseline",
                     ours["total"][-1], ", ".join("%s %.2f" % (p, ours[p][-1]) for p in PHASES),
                     theirs[-1]))
            count_and_clean(nodes, [ours_dir, theirs_dir],
                            {ours_dir: count, theirs_dir: total_files}, archive["sha256"])
    finally:
        if nodes:
            try:
                on_all(nodes, lambda host: "rm -rf %s" % WORK_ON_NODE)
            except SystemExit as exc:
                print("WARNING: cleaning the nodes: %s" % exc, file=sys.stderr)
            for node in nodes.values():
                node.close()
        done = run_playbook("delete.yml", {"fleet": str(fleet)})
        if not done.ok:
            print("WARNING: deleting fleet %s failed; remove its containers by hand:\n%s"
                  % (name, done.stdout[-3000:]), file=sys.stderr)
        shutil.rmtree(work, ignore_errors=True)
    load_after = os.getloadavg()

    base = statistics.median(theirs)
    total = statistics.median(ours["total"])
    ratio = total / base
    print("machine: %s, %d cores, load before %s, after %s; Python %s"
          % (platform.node(), os.cpu_count(), " ".join("%.2f" % x for x in load_before),
             " ".join("%.2f" % x for x in load_after), platform.python_version()))
    print("other containers running on the engine at the start: %d" % len(others))
    print("%d nodes; %d alternating rounds of each; archive %.1f MB for %.1f MB of files"
          % (len(nodes), args.rounds, archive["size"] / 1e6, size / 1e6))
    print("baseline (tar | ssh, 8 at once):  median %.2f s  min %.2f s  max %.2f s"
          % (base, min(theirs), max(theirs)))
    print("gpufleet (snapshot..unpack):      median %.2f s  min %.2f s  max %.2f s"
          % (total, min(ours["total"]), max(ours["total"])))
    for phase in PHASES:
        took = statistics.median(ours[phase])
        print("  %-9s median %6.2f s  (%4.1f%% of the median total)"
              % (phase, took, 100 * took / total))
    print("ratio (median/median): %.2fx  target <= %.1fx  %s"
          % (ratio, TARGET_RATIO, "pass" if ratio <= TARGET_RATIO else "MISSED"))
    return 0 if ratio <= TARGET_RATIO else 1


if __name__ == "__main__":
    sys.exit(main())
