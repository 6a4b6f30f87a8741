"""How long does the task runner take to get every container of a run going, compared with
starting the same containers by hand with parallel ``ssh node docker run``?

An 8-node local fleet (``placement: cluster``) is brought up once with ``playbooks/fleet.yml``
and the task image is put on every node by one untimed run. Then, for 2, 4 and 8 nodes and
alternately in the same run (so the ratio holds on a noisy machine):

- runner: ``ansible-playbook playbooks/task.yml -e task=<file> -e gpufleet_task_wait=false``, a
  ``nodes: N`` task whose command sleeps; the clock stops when the playbook returns, which it does
  once every job's container is started (placement, the run key, the image check on each node,
  the job files, ``docker run``);
- user path: ``gpufleet apply -y -d -f <file>``, as a user types it: the planning play, the
  submission's play, the command's own start; the clock stops when the command returns;
- user path, image named: the same with ``image:`` set to the task image. A task without
  ``image`` gets dstack's default-image setup, ``uv venv --seed`` before its commands (about a
  CPU-second per container, here on cores all nodes share, while later nodes still start); a
  task that names its image runs just its commands, as the baseline's containers do, so this
  one compares like with like;
- baseline: one ``ssh node docker run -d --network host IMAGE sleep`` per node, all at once,
  with the same key and options but a fresh connection each (no multiplexing), as someone would
  script it; the clock stops when the last ``ssh`` returns.

Both leave N running containers, removed (untimed) before the next round. For scale, the time
ansible-playbook takes to run a play that does nothing (one ``debug`` task on localhost) is
measured too: the runner's own cost is its time less that. The fleet is deleted at the end,
whatever happens.

Re-runs (``--reruns N``, issue 32): a ``--rerun-nodes``-node task (4 by default, ``image:``
named) is submitted N times under one name with ``gpufleet apply -y -d``, each time after
``gpufleet stop -x -y`` of the run before, as a user re-applies the same file all day. Nothing
of that series is cleaned by hand: what ``stop -x`` leaves behind stays. With ``--reference``,
each same-name submission is followed by one under a name never used before (the reference at
the same load), whose leftovers are removed by hand after its ``stop -x``, so that the hosts
hold no more than the same-name series leaves them. The target is the last same-name
submission within 1.2x of the first; the script prints that ratio and the mean of the last
five against the first five (one run on a shared machine is noisy), and exits 1 when the mean
ratio is over 1.2. ``--sizes ''`` skips the size rounds.

Growth: with more than two sizes, the cost of each node added beyond the smallest size is the
slope of a least-squares line through the medians, for the runner and for the baseline; the
target is the runner's slope at most 1.2 times the baseline's. ``--plot FILE`` draws both
(and the user path) against the number of nodes into a PNG (needs matplotlib: pip install -e
'.[bench]').

    .venv/bin/python bench/task_start.py [--rounds 3] [--sizes 2,4,8] [--plot bench/task_start.png]
    .venv/bin/python bench/task_start.py --sizes '' --reruns 20
"""

from __future__ import annotations

import argparse
import os
import platform
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from gpufleet._collection import collections_path, ensure_importable  # noqa: E402

ensure_importable()
from ansible_collections.gpufleet.cluster.plugins.module_utils.backends import task_image  # noqa: E402,E501
from ansible_collections.gpufleet.cluster.plugins.module_utils.backends.docker_cli import Docker  # noqa: E402,E501
from ansible_collections.gpufleet.cluster.plugins.module_utils.fleets import apply  # noqa: E402

BIN = Path(sys.executable).parent
FLEET = "benchtask"


def run(argv, env, timeout=900):
    return subprocess.run(argv, capture_output=True, text=True, env=env, timeout=timeout,
                          check=False)


def playbook(name, env, *extra):
    argv = [str(BIN / "ansible-playbook"), str(ROOT / "playbooks" / name)]
    for item in extra:
        argv += ["-e", item]
    return run(argv, env)


def node_docker(container, *args):
    return subprocess.run(["docker", "exec", container, "docker"] + list(args),
                          capture_output=True, text=True, check=False)


def fleet_instances(env, work, fleet, name):
    """Apply the fleet file ``fleet`` with playbooks/fleet.yml; its instance records."""
    proc = playbook("fleet.yml", env, "fleet=" + str(fleet))
    if proc.returncode != 0:
        raise RuntimeError("fleet.yml failed:\n" + proc.stdout[-3000:])
    record = apply.discover(Docker(), work / "state")
    return next(f for f in record if f["name"] == name)["instances"]


def clean(instances):
    """Remove what a round started, and the runs' claims: their runs ended (a claim outlives
    a container removed behind gpufleet's back until its lease runs out)."""
    for inst in instances:
        ids = node_docker(inst["container"], "ps", "-aq", "--filter", "label=bench").stdout.split()
        ids += node_docker(inst["container"], "ps", "-aq", "--filter",
                           "label=gpufleet.run").stdout.split()
        if ids:
            node_docker(inst["container"], "rm", "-f", *ids)
            subprocess.run(["docker", "exec", inst["container"], "sh", "-c",
                            "rm -f /var/lib/gpufleet/book/claims/*.json"],
                           capture_output=True, check=False)


def ssh_argv(inst, command):
    return ["ssh", "-T", "-o", "BatchMode=yes", "-o", "StrictHostKeyChecking=no",
            "-o", "UserKnownHostsFile=/dev/null", "-o", "LogLevel=ERROR",
            "-i", inst["identity_file"], "-p", str(inst["port"]),
            "%s@%s" % (inst["user"], inst["hostname"]), command]


def baseline(instances, image):
    def one(inst):
        proc = subprocess.run(ssh_argv(inst, "docker run -d --label bench=1 --network host %s "
                                             "sleep 600" % image),
                              capture_output=True, text=True, check=False)
        if proc.returncode != 0:
            raise RuntimeError("baseline docker run on %s failed: %s" % (inst["name"],
                                                                         proc.stderr))

    start = time.monotonic()
    with ThreadPoolExecutor(max_workers=len(instances)) as pool:
        list(pool.map(one, instances))
    return time.monotonic() - start


def runner(task_path, env):
    start = time.monotonic()
    proc = playbook("task.yml", env, "task=" + task_path, "gpufleet_task_wait=false")
    took = time.monotonic() - start
    if proc.returncode != 0:
        raise RuntimeError("task.yml failed:\n" + proc.stdout[-3000:])
    return took


def user_path(task_path, env):
    start = time.monotonic()
    proc = run([str(BIN / "gpufleet"), "apply", "-y", "-d", "-f", task_path], env)
    took = time.monotonic() - start
    if proc.returncode != 0:
        raise RuntimeError("gpufleet apply failed:\n" + proc.stdout[-2000:] + proc.stderr[-2000:])
    return took


def stop_abort(name, env):
    proc = run([str(BIN / "gpufleet"), "stop", "-x", "-y", name], env)
    if proc.returncode != 0:
        raise RuntimeError("gpufleet stop -x failed:\n" + proc.stdout[-2000:] + proc.stderr[-2000:])


def forget(name, instances):
    """Remove what run ``name`` left on the nodes (containers, job folders), as a later run of
    its name would: the reference runs must not leave the hosts more to list than the
    same-name series does (each request lists every task container of its host)."""
    for inst in instances:
        ids = node_docker(inst["container"], "ps", "-aq", "--filter",
                          "label=gpufleet.run=" + name).stdout.split()
        if ids:
            node_docker(inst["container"], "rm", "-f", *ids)
        subprocess.run(["docker", "exec", inst["container"], "rm", "-rf",
                        "/var/lib/gpufleet/runs/" + name], capture_output=True, check=False)


def reruns(work, env, image, instances, nodes, count, reference=False):
    """``count`` submissions of one name, each after ``stop -x`` of the one before, each
    followed by a submission under a new name with ``reference``; ``(same-name times,
    new-name times)``."""
    body = ("nodes: %d\nimage: %s\nresources:\n  cpu: 1..\n  memory: 1GB..\n  disk: 1GB..\n"
            "commands:\n  - sleep 600\n" % (nodes, image))
    same = work / "rerun.dstack.yml"
    same.write_text("type: task\nname: rerun\n" + body)
    fresh = work / "fresh.dstack.yml"
    ours, theirs = [], []
    for number in range(count):
        ours.append(user_path(str(same), env))
        stop_abort("rerun", env)
        if reference:
            fresh.write_text("type: task\nname: fresh%d\n" % number + body)
            theirs.append(user_path(str(fresh), env))
            stop_abort("fresh%d" % number, env)
            forget("fresh%d" % number, instances)
        print("re-run %2d: same name %.2f s%s" % (
            number + 1, ours[-1], (", new name %.2f s" % theirs[-1]) if reference else ""),
            flush=True)
    return ours, theirs


def noop(work, env):
    play = work / "noop.yml"
    if not play.exists():
        play.write_text("- hosts: localhost\n  gather_facts: false\n  tasks:\n"
                        "    - ansible.builtin.debug:\n        msg: hi\n")
    start = time.monotonic()
    proc = run([str(BIN / "ansible-playbook"), str(play)], env)
    took = time.monotonic() - start
    if proc.returncode != 0:
        raise RuntimeError("the no-op play failed:\n" + proc.stdout[-2000:])
    return took


def bench_env(work):
    """The environment the timed commands run in (and this process's state dir).

    PYTHONDONTWRITEBYTECODE is dropped: an installed Python package has its bytecode, and
    without it every command compiles the collection's modules again (0.13 s of each ``ps``
    on this VM, whose shell sets the variable)."""
    env = dict(os.environ, GPUFLEET_STATE_DIR=str(work / "state"),
               ANSIBLE_COLLECTIONS_PATH=str(collections_path()), ANSIBLE_NOCOLOR="1",
               ANSIBLE_LOCALHOST_WARNING="0", ANSIBLE_INVENTORY_UNPARSED_WARNING="0")
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    os.environ["GPUFLEET_STATE_DIR"] = env["GPUFLEET_STATE_DIR"]
    return env


def _terminated(_signum, _frame):
    raise SystemExit("terminated")   # the fleet is still deleted (main's finally)


def main():
    signal.signal(signal.SIGTERM, _terminated)
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--sizes", default="2,4,8")
    parser.add_argument("--plot", metavar="PNG", help="draw the medians against the nodes")
    parser.add_argument("--reruns", type=int, default=0, metavar="N",
                        help="also submit one name N times, each after stop -x (issue 32)")
    parser.add_argument("--rerun-nodes", type=int, default=4, metavar="N")
    parser.add_argument("--reference", action="store_true",
                        help="with --reruns, a submission under a new name after each re-run")
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",") if s.strip()]
    if subprocess.run(["docker", "info"], capture_output=True, check=False).returncode != 0:
        subprocess.run(["make", "-C", str(ROOT), "engine"], check=True)
    work = Path(tempfile.mkdtemp(prefix="gpufleet-bench-"))
    env = bench_env(work)
    fleet = work / "fleet.dstack.yml"
    fleet.write_text("type: fleet\nname: %s\nnodes: %d\nplacement: cluster\nbackends: [local]\n"
                     % (FLEET, max(sizes + [args.rerun_nodes if args.reruns else 0])))
    image, _built = task_image.ensure_task_image(Docker())
    results = {}
    noops = []
    again = None
    try:
        instances = fleet_instances(env, work, fleet, FLEET)
        tasks = {}
        named_tasks = {}
        for size in sizes:
            path = work / ("bench%d.dstack.yml" % size)
            path.write_text("type: task\nname: bench%d\nnodes: %d\nresources:\n  cpu: 1..\n"
                            "  memory: 1GB..\n  disk: 1GB..\ncommands:\n  - sleep 600\n"
                            % (size, size))
            tasks[size] = str(path)
            named = work / ("bench%d-image.dstack.yml" % size)
            named.write_text(path.read_text().replace("commands:", "image: %s\ncommands:"
                                                      % image))
            named_tasks[size] = str(named)
        if sizes:
            # Untimed: the image goes to every node, connections and caches warm up.
            runner(tasks[max(sizes)], env)
            clean(instances)
            baseline(instances[:max(sizes)], image)
            clean(instances)
        for size in sizes:
            ours, users, named, theirs = [], [], [], []
            for _round in range(args.rounds):
                ours.append(runner(tasks[size], env))
                clean(instances)
                users.append(user_path(tasks[size], env))
                clean(instances)
                named.append(user_path(named_tasks[size], env))
                clean(instances)
                theirs.append(baseline(instances[:size], image))
                clean(instances)
                noops.append(noop(work, env))
            results[size] = (statistics.median(theirs), statistics.median(ours),
                             statistics.median(users), statistics.median(named))
        if args.reruns:
            if not sizes:   # untimed: the image goes to the nodes, caches warm up
                warm = work / "warm.dstack.yml"
                warm.write_text("type: task\nname: warm\nnodes: %d\nresources:\n  cpu: 1..\n"
                                "  memory: 1GB..\n  disk: 1GB..\ncommands:\n  - sleep 600\n"
                                % args.rerun_nodes)
                user_path(str(warm), env)
                stop_abort("warm", env)
            again = reruns(work, env, image, instances, args.rerun_nodes, args.reruns,
                           args.reference)
    finally:
        playbook("delete.yml", env, "fleet=" + str(fleet))
    print("machine: %s, %d CPUs, load %s, Python %s"
          % (platform.node(), os.cpu_count(), os.getloadavg()[0], platform.python_version()))
    if again is not None:
        missed = report_reruns(*again)
        if not sizes:
            sys.exit(1 if missed else 0)
    empty = statistics.median(noops)
    print("ansible-playbook with a no-op play: %.2f s (median of %d)" % (empty, len(noops)))
    print("%5s  %12s  %12s  %6s  %16s  %14s  %6s  %14s  %6s" % (
        "nodes", "baseline (s)", "runner (s)", "ratio", "runner - no-op", "apply -y -d (s)",
        "ratio", "image named (s)", "ratio"))
    for size in sizes:
        base, ours, users, named = results[size]
        row = (size, base, ours, ours / base, ours - empty, users, users / base, named,
               named / base)
        print("%5d  %12.2f  %12.2f  %5.2fx  %14.2f s  %14.2f  %5.2fx  %14.2f  %5.2fx" % row)
    if len(sizes) > 2:
        slopes = [slope(sizes, [results[n][i] for n in sizes]) for i in range(4)]
        print("per added node: baseline %.3f s, runner %.3f s (%.2fx), apply -y -d %.3f s "
              "(%.2fx), image named %.3f s (%.2fx); target: runner <= 1.2x"
              % (slopes[0], slopes[1], slopes[1] / slopes[0], slopes[2],
                 slopes[2] / slopes[0], slopes[3], slopes[3] / slopes[0]))
    if args.plot:
        draw(args.plot, sizes, results, empty)


def report_reruns(ours, theirs):
    """Print the re-run summary; whether the target (mean of the last five same-name
    submissions within 1.2x of the first five's) is missed."""
    five = min(5, len(ours))
    head, tail = statistics.mean(ours[:five]), statistics.mean(ours[-five:])
    print("%d re-runs of one name, each after stop -x: first %.2f s, last %.2f s (%.2fx); "
          "mean of the first %d %.2f s, of the last %d %.2f s (%.2fx; target <= 1.2x)"
          % (len(ours), ours[0], ours[-1], ours[-1] / ours[0], five, head, five, tail,
             tail / head))
    if theirs:
        print("a new name each time: %.2f s to %.2f s; mean of the last %d over the first %d: "
              "%.2fx" % (theirs[0], theirs[-1], five, five,
                         statistics.mean(theirs[-five:]) / statistics.mean(theirs[:five])))
    return tail / head > 1.2


def slope(xs, ys):
    """The least-squares slope of ys against xs."""
    mx, my = statistics.mean(xs), statistics.mean(ys)
    return (sum((x - mx) * (y - my) for x, y in zip(xs, ys))
            / sum((x - mx) ** 2 for x in xs))


def draw(path, sizes, results, empty):
    try:
        import matplotlib
    except ImportError:
        print("no plot: matplotlib is missing (pip install -e '.[bench]')")
        return
    matplotlib.use("Agg")
    from matplotlib import pyplot

    figure, axes = pyplot.subplots(figsize=(7, 4.5))
    for index, label, style in ((0, "baseline: parallel ssh docker run", "o-"),
                                (1, "runner: ansible-playbook task.yml", "s-"),
                                (2, "user path: gpufleet apply -y -d", "^-"),
                                (3, "user path, image named (no venv setup)", "v--")):
        axes.plot(sizes, [results[n][index] for n in sizes], style, label=label)
    axes.axhline(empty, color="grey", linestyle=":", label="ansible-playbook, no-op play")
    axes.set_xlabel("nodes")
    axes.set_ylabel("seconds until every container is started (median)")
    axes.set_xticks(sizes)
    axes.set_ylim(bottom=0)
    axes.grid(alpha=0.3)
    axes.legend(fontsize=8)
    axes.set_title("Task start on local nodes, %s, %d CPUs" % (platform.node(), os.cpu_count()),
                   fontsize=9)
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    print("plot: %s" % path)


if __name__ == "__main__":
    main()
