"""How much does re-applying an unchanged fleet cost compared with gathering the facts of its
nodes with plain Ansible?

A 4-node local fleet (``placement: cluster``) is brought up once with ``playbooks/fleet.yml``.
Then, alternately and in the same run, the same ``ansible-playbook playbooks/fleet.yml`` (a
no-change re-apply: list the nodes, check, measure and claim each, check the cluster's peers,
report; its PLAY RECAP must show changed=0 everywhere) and ``ansible -i <fleet file> all -m
ansible.builtin.setup`` (the fleet plugin lists the same nodes; every one must answer SUCCESS)
are timed, so the ratio of the medians holds on a noisy machine. Both reach the nodes over SSH
with Ansible's usual ControlPersist connections. The fleet is deleted at the end, whatever
happens.

No target was set when this benchmark was written; RESULTS.md proposes one.

Needs this machine's Docker engine (started with ``make engine`` when ``docker info`` fails) and
the local node image (built by the first apply when missing, which takes minutes).

    .venv/bin/python bench/reapply_speed.py [--rounds 3] [--nodes 4]
"""

from __future__ import annotations

import argparse
import os
import platform
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from bench.local_engine import docker, ensure_engine, pick_name  # noqa: E402
from gpufleet._collection import collections_path  # noqa: E402

BIN = Path(sys.executable).parent
FLEET = "benchre"
PROPOSED_TARGET = 3.0  # not enforced: see RESULTS.md


def run(command, env, timeout=1800):
    start = time.perf_counter()
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=timeout,
                          check=False)
    return time.perf_counter() - start, done


def recap(stdout):
    """{host: {"ok": n, "changed": n, ...}} from ansible-playbook's PLAY RECAP."""
    found = {}
    for line in stdout.split("PLAY RECAP", 1)[-1].splitlines():
        match = re.match(r"^(\S+)\s+:\s+(.*)$", line)
        if match:
            found[match.group(1)] = dict(
                (k, int(v)) for k, v in re.findall(r"(\w+)=(\d+)", match.group(2)))
    return found


def check_reapply(done, hosts):
    output = done.stdout + done.stderr
    if done.returncode != 0:
        raise SystemExit("re-apply failed (rc %d):\n%s" % (done.returncode, output[-4000:]))
    found = recap(done.stdout)
    if set(found) != set(hosts) | {"localhost"}:
        raise SystemExit("re-apply: PLAY RECAP lists %s, expected localhost and %s\n%s"
                         % (sorted(found), hosts, output[-4000:]))
    for host, counts in found.items():
        if counts.get("changed") or counts.get("failed") or counts.get("unreachable"):
            raise SystemExit("re-apply: %s is not unchanged: %s\n%s"
                             % (host, counts, output[-4000:]))


def check_setup(done, hosts):
    output = done.stdout + done.stderr
    if done.returncode != 0:
        raise SystemExit("setup failed (rc %d):\n%s" % (done.returncode, output[-4000:]))
    ok = sorted(re.findall(r"^(\S+) \| SUCCESS", done.stdout, re.M))
    if ok != sorted(hosts):
        raise SystemExit("setup: SUCCESS from %s, expected %s\n%s" % (ok, hosts, output[-4000:]))


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", maxsplit=1)[0])
    parser.add_argument("--rounds", type=int, default=3, help="timed runs of each, alternating")
    parser.add_argument("--nodes", type=int, default=4)
    args = parser.parse_args(argv)

    ensure_engine()
    name = pick_name(FLEET)
    hosts = ["%s-%d" % (name, num) for num in range(args.nodes)]
    load_before = os.getloadavg()
    others = [n for n in docker("ps", "--format", "{{.Names}}").stdout.split()
              if not n.startswith("gpufleet-%s-" % name)]

    with tempfile.TemporaryDirectory(prefix="gpufleet-bench-re-") as tmp:
        tmp = Path(tmp)
        fleet = tmp / (name + ".dstack.yml")
        fleet.write_text("type: fleet\nname: %s\nnodes: %d\nplacement: cluster\n"
                         "backends: [local]\n" % (name, args.nodes))
        env = dict(
            os.environ,
            ANSIBLE_COLLECTIONS_PATH=str(collections_path()),
            GPUFLEET_STATE_DIR=str(tmp / "state"),
            ANSIBLE_INVENTORY_ENABLED="gpufleet.cluster.fleet,yaml",
            ANSIBLE_NOCOLOR="1",
            ANSIBLE_LOCALHOST_WARNING="0",
            ANSIBLE_INVENTORY_UNPARSED_WARNING="0",
        )
        # As installed: with bytecode (see task_start.bench_env).
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        apply_cmd = [str(BIN / "ansible-playbook"), str(ROOT / "playbooks" / "fleet.yml"),
                     "-e", "fleet=" + str(fleet)]
        setup_cmd = [str(BIN / "ansible"), "-i", str(fleet), "all", "-m", "ansible.builtin.setup"]
        delete_cmd = [str(BIN / "ansible-playbook"), str(ROOT / "playbooks" / "delete.yml"),
                      "-e", "fleet=" + str(fleet)]
        try:
            first, done = run(apply_cmd, env)
            if done.returncode != 0:
                raise SystemExit("first apply failed (rc %d):\n%s"
                                 % (done.returncode, (done.stdout + done.stderr)[-4000:]))
            print("fleet %s: %d nodes up in %.1fs (first apply, not timed against anything)"
                  % (name, args.nodes, first))
            # An untimed round first: checks both and opens the SSH control connections.
            check_reapply(run(apply_cmd, env)[1], hosts)
            check_setup(run(setup_cmd, env)[1], hosts)

            reapply_times, setup_times = [], []
            for _round in range(args.rounds):
                elapsed, done = run(apply_cmd, env)
                check_reapply(done, hosts)
                reapply_times.append(elapsed)
                elapsed, done = run(setup_cmd, env)
                check_setup(done, hosts)
                setup_times.append(elapsed)
        finally:
            _elapsed, done = run(delete_cmd, env)
            if done.returncode != 0:
                print("WARNING: deleting fleet %s failed (rc %d); remove its containers by "
                      "hand:\n%s" % (name, done.returncode, (done.stdout + done.stderr)[-3000:]),
                      file=sys.stderr)
        load_after = os.getloadavg()

    base = statistics.median(setup_times)
    ours = statistics.median(reapply_times)
    ratio = ours / base
    print("machine: %d cores, load before %s, after %s; Python %s, ansible-core %s"
          % (os.cpu_count(), " ".join("%.2f" % x for x in load_before),
             " ".join("%.2f" % x for x in load_after), platform.python_version(),
             _ansible_version()))
    print("other containers running on the engine at the start: %d" % len(others))
    print("%d nodes; %d alternating runs of each" % (args.nodes, args.rounds))
    print("ansible all -m setup (fleet plugin): median %.2fs  min %.2fs  max %.2fs"
          % (base, min(setup_times), max(setup_times)))
    print("no-change re-apply (fleet.yml):      median %.2fs  min %.2fs  max %.2fs"
          % (ours, min(reapply_times), max(reapply_times)))
    print("ratio (median/median): %.2fx  (proposed target <= %.1fx, not enforced)"
          % (ratio, PROPOSED_TARGET))
    return 0


def _ansible_version():
    from ansible.release import __version__

    return __version__


if __name__ == "__main__":
    sys.exit(main())
