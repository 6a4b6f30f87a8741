"""gpufleet metrics on real local runs: each job's container samples its own cgroup, the
command reads every host in one request each, and the chart shows the busy job busy.

On the task world's shared 3-node fleet; the sampling interval is shortened through the task's
env (GPUFLEET_METRICS_INTERVAL, as a user may) so that a test needs seconds, not minutes.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time

from gpufleet import api

from .task_world import FLEET, SUFFIX, run_task

BUSY = """\
type: task
name: {name}
image: {image}
fleets: [{fleet}]
nodes: 2
env:
  - GPUFLEET_METRICS_INTERVAL=2
resources:
  cpu: 1..
  memory: 0.1GB..
  disk: 1GB..
commands:
  - |
    if [ "$DSTACK_NODE_RANK" = 0 ]; then
      timeout 120 sh -c 'while :; do :; done'
    else
      sleep 120
    fi
"""


def test_metrics_show_each_jobs_cpu_and_memory_and_the_busy_one_busy(world):
    name = "busy-" + SUFFIX
    result, record = run_task(world, name, BUSY.format(
        name=name, image=world["base_image"], fleet=FLEET), gpufleet_task_wait=False)
    assert result.ok, result.stdout[-3000:]
    try:
        deadline = time.time() + 90
        seen = None
        while time.time() < deadline:
            seen = api.metrics(name)
            jobs = dict((j["job_num"], j) for j in seen["jobs"])
            if all(len(j["cpu_percent"]) >= 3 for j in jobs.values()):
                break
            time.sleep(2)
        assert sorted(jobs) == [0, 1], seen
        busy, idle = jobs[0], jobs[1]
        assert len(busy["cpu_percent"]) >= 3, seen
        # One busy loop is one CPU's worth when it has the CPU to itself: on a machine that runs
        # other tests at the same time it gets a share, seen at 0.23 of a CPU with six
        # processes on two cores, and at 0.12 with Molecule and the integration tests both
        # busy on them. A percent read as a fraction, or the reverse, is a hundred times off
        # either way, so the bound is far below any share it gets; the sleeping job is far
        # below the busy one.
        cores = [v * busy["cpus"] / 100 for _t, v in busy["cpu_percent"][1:]]
        assert 0.03 < max(cores) <= busy["cpus"] * 1.05, seen
        assert max(v for _t, v in idle["cpu_percent"]) * 3 < max(
            v for _t, v in busy["cpu_percent"]), seen
        for job in (busy, idle):
            assert job["memory_bytes"] and all(v > 0 for _t, v in job["memory_bytes"]), job
            assert job["memory_total_bytes"] > job["memory_bytes"][-1][1]
            assert job["gpus"] == []
            assert job["host"] in [i["name"] for i in world["fleet"]["instances"]]
        # The command: the chart of both jobs, and --job.
        command = os.path.join(os.path.dirname(sys.executable), "gpufleet")
        shown = subprocess.run([command, "metrics", name], stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True, timeout=120, check=False)
        assert shown.returncode == 0, shown.stderr
        lines = shown.stdout.splitlines()
        assert lines[0].split() == ["UTILIZATION", "MEMORY"], shown.stdout
        assert [line.split()[0] for line in lines if line.startswith("job=")] == \
            ["job=0", "job=1"], shown.stdout
        one = api.metrics(name, job=1)
        assert [j["job_num"] for j in one["jobs"]] == [1]
        # gpufleet fleet shows the run's two hosts busy, the third idle, as dstack fleet does.
        (fleet,) = [f for f in api.fleets() if f["name"] == FLEET]
        hosts = set(j["host"] for j in seen["jobs"])
        assert sorted((i["name"], i["status"]) for i in fleet["instances"]) == sorted(
            (i["name"], "busy" if i["name"] in hosts else "idle")
            for i in fleet["instances"]), fleet["instances"]
    finally:
        api.stop(name, abort=True)
