"""gpufleet usage on real local runs (issue 34, usage accounting): each host keeps a record per
job, ``gpufleet usage`` adds a run's records on several hosts into one line whose times are its
containers', and the records outlive the containers, their job folders and the controller's
state dir.

On the task world's shared 3-node fleet: two short runs, one on 2 nodes.
"""

from __future__ import annotations

import csv
import io
import json
import os
import shutil
import subprocess
import sys

from ansible_collections.gpufleet.cluster.plugins.module_utils.core.times import parse_time
from ansible_collections.gpufleet.cluster.plugins.module_utils.fleets import state

from gpufleet import api

from .task_world import FLEET, SUFFIX, node_containers, run_task

SHORT = """\
type: task
name: {name}
image: {image}
fleets: [{fleet}]
nodes: {nodes}
resources:
  cpu: 1..
  memory: 0.1GB..
  disk: 1GB..
commands:
  - sleep 3
"""


def gpufleet(*argv, env=None):
    command = os.path.join(os.path.dirname(sys.executable), "gpufleet")
    done = subprocess.run([command] + list(argv), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          text=True, timeout=300, check=False, env=env)
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def expected(record):
    """The run's own numbers from its jobs' container times (gpufleet ps)."""
    starts = [parse_time(j["started_at"]).timestamp() for j in record["jobs"]]
    ends = [parse_time(j["finished_at"]).timestamp() for j in record["jobs"]]
    seconds = [e - s for s, e in zip(starts, ends)]
    gpus = [len(j.get("gpus") or []) for j in record["jobs"]]
    return {"nodes": len(set(j["host"] for j in record["jobs"])), "wall": max(ends) - min(starts),
            "gpu_hours": sum(g * s for g, s in zip(gpus, seconds)) / 3600.0}


def lines_of(report, names):
    return dict((line["run"], line) for line in report["runs"] if line["run"] in names)


def test_usage_adds_up_the_runs_and_outlives_the_containers_and_controller(world, tmp_path):
    names = {"use2-" + SUFFIX: 2, "use1-" + SUFFIX: 1}
    runs = {}
    for name, nodes in names.items():
        result, record = run_task(world, name, SHORT.format(
            name=name, image=world["base_image"], fleet=FLEET, nodes=nodes))
        assert result.ok and record["status"] == "done", result.stdout[-3000:]
        runs[name] = expected(api.status(name))

    # Only the world's fleet: other tests' fleets on the engine are not this test's to judge.
    report = json.loads(gpufleet("usage", "--json", "--since", "1h", "--fleet", FLEET))
    found = lines_of(report, names)
    assert sorted(found) == sorted(names), report
    for name, line in found.items():
        assert line["fleet"] == FLEET and line["status"] == "done", line
        assert line["nodes"] == names[name] == runs[name]["nodes"], line
        assert abs(line["wall_seconds"] - runs[name]["wall"]) <= 2, (line, runs[name])
        assert 3 <= line["wall_seconds"] < 60, line
        assert abs(line["gpu_hours"] - runs[name]["gpu_hours"]) * 3600 <= 2, (line, runs[name])
        assert line["cost"] == 0   # the local backend has no price
    users = dict((u["user"], u) for u in report["users"])
    owner = found["use2-" + SUFFIX]["user"]
    assert users[owner]["runs"] >= 1

    # The records are root's alone on the hosts.
    node = next(n for n, held in node_containers(world, "use1-" + SUFFIX).items() if held)
    modes = world["docker"].run("exec", node, "stat", "-c", "%a %U",
                                "/var/lib/gpufleet/usage/use1-" + SUFFIX,
                                "/var/lib/gpufleet/usage/use1-%s/0-0.json" % SUFFIX)
    assert modes.split() == ["700", "root", "600", "root"], modes

    # The containers and the job folders go: the records stay.
    for name in names:
        for node, held in node_containers(world, name).items():
            if held:
                world["docker"].run("exec", node, "docker", "rm", "-f", *[c for c, _s in held])
            # Their claims go with them, as gpufleet's own removal drops them: a claim without
            # a container is taken for one whose container has yet to start, and holds the host
            # until its lease ends (the next files of this worker share these hosts).
            world["docker"].run("exec", node, "rm", "-rf", "/var/lib/gpufleet/runs/" + name,
                                "/var/lib/gpufleet/book/claims/%s.json" % name)
    assert not any(node_containers(world, name)[n] for name in names
                   for n in node_containers(world, name))
    after = lines_of(api.usage(since="1h", fleet=FLEET), names)
    for name in names:
        assert after[name]["wall_seconds"] == found[name]["wall_seconds"], (after, found)
        assert after[name]["end"] == found[name]["end"]

    # A controller with a fresh state dir that holds only the fleet's key reads the same.
    fresh = tmp_path / "fresh-state"
    old_root = state.state_dir(None)
    key = state.key_path(old_root, FLEET)
    os.makedirs(os.path.dirname(state.key_path(str(fresh), FLEET)), mode=0o700)
    for suffix in ("", ".pub"):
        if os.path.exists(key + suffix):
            shutil.copy2(key + suffix, state.key_path(str(fresh), FLEET) + suffix)
    env = dict(os.environ, GPUFLEET_STATE_DIR=str(fresh))
    rows = list(csv.DictReader(io.StringIO(gpufleet("usage", "--csv", "--since", "1h",
                                                    "--fleet", FLEET, env=env))))
    seen = dict((row["run"], row) for row in rows if row["run"] in names)
    assert sorted(seen) == sorted(names), rows
    for name, row in seen.items():
        assert abs(float(row["wall_seconds"]) - runs[name]["wall"]) <= 2, (row, runs[name])
        assert int(row["nodes"]) == names[name] and row["fleet"] == FLEET, row
