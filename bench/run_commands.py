"""How fast do the commands a person types about a running run answer, and how soon does a
run stop once one of its ranks fails?

An 8-node local fleet (``placement: cluster``) is brought up once; the task image is put on
every node by one untimed run. Then, on an 8-node run of ``sleep``, started with ``gpufleet
apply -y -d``:

- ``gpufleet ps`` and ``gpufleet logs RUN``: the command's wall time (target: 0.5 s and
  0.7 s), twice: right after the start, while the eight containers set up (dstack's default
  image makes a virtual environment in each, ``uv venv --seed``, about a CPU-second apiece,
  all on this VM's cores), and again once every rank's command has started (what a fleet
  of separate machines sees: each node sets up on its own CPUs); for scale, one parallel
  round of ``ssh node docker ps`` (a fresh connection each, as task_start.py's baseline) is
  timed in the same round;
- ``gpufleet stop -y RUN``: its wall time against "the stop itself", a baseline of the same
  containers stopped with one parallel round of ``ssh node docker stop`` on a second start of
  the run (target: the command at most 1 s more than the baseline);
- attached failure: ``gpufleet apply -y`` of a 2-node task whose rank 1 exits 3 after 2 s
  while rank 0 sleeps; the time from rank 1's container ending to rank 0's (Docker's
  ``FinishedAt`` of both; target 3 s).

Each measure is taken ``--rounds`` times, alternately, and the medians are printed. The fleet
is deleted at the end, whatever happens.

    .venv/bin/python bench/run_commands.py [--rounds 5]
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import task_start  # noqa: E402  (the same fleet, helpers and environment)
from task_start import (  # noqa: E402
    BIN, clean, fleet_instances, node_docker, playbook, run, ssh_argv,
)

FLEET = "benchcmd"
NODES = 8


def gpufleet(env, *argv, check=True):
    start = time.monotonic()
    proc = run([str(BIN / "gpufleet")] + list(argv), env)
    took = time.monotonic() - start
    if check and proc.returncode != 0:
        raise RuntimeError("gpufleet %s failed:\n%s%s" % (" ".join(argv), proc.stdout[-2000:],
                                                          proc.stderr[-2000:]))
    return took


def run_containers(instances, run, ended_too=False):
    """``(instance, container name)`` of each container of ``run`` on the nodes (running ones,
    or all with ``ended_too``)."""
    for inst in instances:
        argv = ["ps"] + (["-a"] if ended_too else []) + ["--format", "{{.Names}}"]
        for name in node_docker(inst["container"], *argv).stdout.split():
            if name.startswith(run + "-"):
                yield inst, name


def stop_watched(env, instances, run, after=20):
    """``gpufleet stop -y run``, timed; if it has not returned after ``after`` seconds, what
    is still running of the run on each node is printed (a stop that once waited out the whole
    stop_duration, cause unknown: this is to catch it in the act)."""
    import threading

    done = threading.Event()

    def watch():
        if done.wait(after):
            return
        print("stop of %s still going after %d s; what runs of it:" % (run, after))
        for inst, name in run_containers(instances, run):
            top = node_docker(inst["container"], "top", name, "-o", "pid,stat,etime,args")
            state = subprocess.run(
                ["docker", "exec", inst["container"], "sh", "-c",
                 "grep -H . /var/lib/gpufleet/runs/%s/*/state/* 2>/dev/null | "
                 "grep -v output" % run], capture_output=True, text=True, check=False)
            print("--- %s %s\n%s%s" % (inst["name"], name, top.stdout, state.stdout))

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    try:
        return gpufleet(env, "stop", "-y", run)
    finally:
        done.set()
        watcher.join()


def parallel_ssh(instances, command):
    def one(inst):
        subprocess.run(ssh_argv(inst, command(inst)), capture_output=True, check=False)

    start = time.monotonic()
    with ThreadPoolExecutor(max_workers=len(instances)) as pool:
        list(pool.map(one, instances))
    return time.monotonic() - start


def commands_started(instances, run, limit=120):
    """Wait (untimed) until every rank of ``run`` printed its "started on" line: the
    containers' setup is over."""
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        seen = 0
        for inst, name in run_containers(instances, run):
            out = node_docker(inst["container"], "logs", name)
            seen += "started on" in out.stdout + out.stderr
        if seen >= NODES:
            return
        time.sleep(0.5)
    raise RuntimeError("the ranks of %s did not all start within %d s" % (run, limit))


def finished_at(inst, container):
    text = node_docker(inst["container"], "inspect", "-f", "{{.State.FinishedAt}}",
                       container).stdout.strip()
    # Docker writes nanoseconds; Python reads microseconds.
    head, frac = (text.rstrip("Z").split(".", 1) + [""])[:2]
    stamp = datetime.datetime.strptime(head, "%Y-%m-%dT%H:%M:%S")
    return stamp.timestamp() + float("0." + (frac or "0"))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    if subprocess.run(["docker", "info"], capture_output=True, check=False).returncode != 0:
        subprocess.run(["make", "-C", str(task_start.ROOT), "engine"], check=True)
    work = Path(tempfile.mkdtemp(prefix="gpufleet-bench-"))
    env = task_start.bench_env(work)
    fleet = work / "fleet.dstack.yml"
    fleet.write_text("type: fleet\nname: %s\nnodes: %d\nplacement: cluster\nbackends: [local]\n"
                     % (FLEET, NODES))
    resources = "resources:\n  cpu: 1..\n  memory: 1GB..\n  disk: 1GB..\n"
    task = work / "cmd.dstack.yml"
    task.write_text("type: task\nname: cmdbench\nnodes: %d\n%scommands:\n"
                    "  - echo started on $DSTACK_NODE_RANK\n  - sleep 600\n" % (NODES, resources))
    failing = work / "fail.dstack.yml"
    failing.write_text("type: task\nname: failbench\nnodes: 2\n%scommands:\n"
                       "  - if [ \"$DSTACK_NODE_RANK\" = 1 ]; then sleep 2; exit 3; fi\n"
                       "  - sleep 600\n" % resources)
    times = dict((k, []) for k in ("ps", "logs", "ps, commands started",
                                   "logs, commands started", "ssh docker ps", "stop",
                                   "ssh docker stop", "failure to last stop"))
    try:
        instances = fleet_instances(env, work, fleet, FLEET)
        gpufleet(env, "apply", "-y", "-d", "-f", str(task))   # untimed: the image goes out
        gpufleet(env, "stop", "-y", "cmdbench")
        clean(instances)
        for _round in range(args.rounds):
            gpufleet(env, "apply", "-y", "-d", "-f", str(task))
            times["ps"].append(gpufleet(env, "ps"))
            times["logs"].append(gpufleet(env, "logs", "cmdbench"))
            commands_started(instances, "cmdbench")
            times["ps, commands started"].append(gpufleet(env, "ps"))
            times["logs, commands started"].append(gpufleet(env, "logs", "cmdbench"))
            times["ssh docker ps"].append(parallel_ssh(instances, lambda i: "docker ps -a"))
            times["stop"].append(stop_watched(env, instances, "cmdbench"))
            clean(instances)
            gpufleet(env, "apply", "-y", "-d", "-f", str(task))
            times["ssh docker stop"].append(parallel_ssh(
                instances, lambda i: "docker stop $(docker ps -q --filter label=gpufleet.run)"))
            clean(instances)
            gpufleet(env, "apply", "-y", "-f", str(failing), check=False)
            ends = {}
            for inst, name in run_containers(instances, "failbench", ended_too=True):
                for rank in (0, 1):
                    if name == "failbench-%d-0" % rank:
                        ends[rank] = finished_at(inst, name)
            times["failure to last stop"].append(ends[0] - ends[1])
            clean(instances)
    finally:
        playbook("delete.yml", env, "fleet=" + str(fleet))
    print("machine: %s, %d CPUs, load %s, Python %s"
          % (platform.node(), os.cpu_count(), os.getloadavg()[0], platform.python_version()))
    print("%-22s %10s %10s %10s" % ("measure (%d rounds)" % args.rounds, "median", "min", "max"))
    for key, values in times.items():
        row = (key, statistics.median(values), min(values), max(values))
        print("%-22s %9.2fs %9.2fs %9.2fs" % row)
    over = statistics.median(times["stop"]) - statistics.median(times["ssh docker stop"])
    print("stop over the stop itself: %.2f s (target <= 1 s); ps target 0.5 s, logs 0.7 s, "
          "failure to last stop 3 s" % over)
    print("(ps and logs: right after the start, while the containers set up on this VM's "
          "cores; \"commands started\": once every rank's command runs)")


if __name__ == "__main__":
    main()
