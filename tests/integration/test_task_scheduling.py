"""Scheduling without a server, on the shared 3-node task world: claims that hold when many
submitters act at once, and runs that supervise themselves when nobody is attached.

Uses tests/integration/task_world.py's fleet; every run is named with SUFFIX.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from datetime import datetime

from ansible_collections.gpufleet.cluster.plugins.module_utils.backends import local

from .task_world import CPU, FLEET, SUFFIX


def gpufleet(*args, timeout=300):
    """The gpufleet command in its own process, as a user's shell would run it."""
    command = os.path.join(os.path.dirname(sys.executable), "gpufleet")
    return subprocess.Popen([command] + list(args),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=dict(os.environ))


def moment(text):
    """Docker's RFC 3339 time with nanoseconds, as seconds since the epoch."""
    if not text or text.startswith("0001-"):
        return None
    head, _dot, rest = text.rstrip("Z").partition(".")
    fraction = float("0." + rest) if rest else 0.0
    return datetime.strptime(head, "%Y-%m-%dT%H:%M:%S").timestamp() + fraction


def run_spans(world, prefix):
    """{node: [(run, started, finished)]} of every task container whose run starts with
    ``prefix``, read from each node's own Docker engine."""
    spans = {}
    for num in range(3):
        node = local.container_name(FLEET, num)
        ids = world["docker"].run("exec", node, "docker", "ps", "-aq", "--filter",
                                  "label=gpufleet.run").split()
        found = []
        if ids:
            for item in json.loads(world["docker"].run("exec", node, "docker", "inspect", *ids)):
                run = item["Config"]["Labels"].get("gpufleet.run", "")
                if run.startswith(prefix):
                    state = item["State"]
                    found.append((run, moment(state["StartedAt"]),
                                  moment(state["FinishedAt"]) or time.time()))
        spans[node] = found
    return spans


def test_ten_submissions_at_once_never_share_a_host(world, tmp_path):
    """Ten `gpufleet apply -y -d` of a 2-node task started at the same moment: each host runs
    one run at a time, and every submission either started or was refused with no capacity."""
    prefix = "conc-%s-" % SUFFIX
    task = tmp_path / "conc.dstack.yml"
    task.write_text("type: task\nimage: %s\nnodes: 2\n%scommands: [sleep 6]\n"
                    % (world["base_image"], CPU))
    procs = [gpufleet("apply", "-f", str(task), "-y", "-d", "--name", prefix + str(i),
                      "--fleet", FLEET) for i in range(10)]
    outcomes = []
    for proc in procs:
        out, err = proc.communicate(timeout=600)
        outcomes.append((proc.returncode, out + err))
    started = [text for rc, text in outcomes if rc == 0]
    refused = [text for rc, text in outcomes if rc != 0]
    assert started, outcomes
    for text in started:
        assert "submitted" in text, text
    for text in refused:
        assert "no capacity" in text, text
    # Wait for the started runs to end, then compare what ran on each host and when.
    deadline = time.time() + 120
    while True:
        spans = run_spans(world, prefix)
        alive = [s for found in spans.values() for s in found if s[2] >= time.time() - 0.5]
        if not alive or time.time() > deadline:
            break
        time.sleep(2)
    runs_seen = set()
    for node, found in spans.items():
        for index, (run, begin, end) in enumerate(found):
            runs_seen.add(run)
            for other, obegin, oend in found[index + 1:]:
                assert end <= obegin or oend <= begin, (
                    "%s ran %s and %s at once: %s" % (node, run, other, found))
    assert len(runs_seen) == len(started)


def run_states(world, run):
    """[(job, running, exit code, finished)] of the run's containers, from the nodes' engines."""
    found = []
    for num in range(3):
        node = local.container_name(FLEET, num)
        ids = world["docker"].run("exec", node, "docker", "ps", "-aq", "--filter",
                                  "label=gpufleet.run=" + run).split()
        if ids:
            for item in json.loads(world["docker"].run("exec", node, "docker", "inspect", *ids)):
                state = item["State"]
                found.append((int(item["Config"]["Labels"]["gpufleet.job"]), state["Running"],
                              state["ExitCode"], moment(state["FinishedAt"])))
    return sorted(found)


def wait_until_stopped(world, run, seconds=90):
    deadline = time.time() + seconds
    while time.time() < deadline:
        states = run_states(world, run)
        if states and not any(running for _job, running, _code, _end in states):
            return states
        time.sleep(1)
    raise AssertionError("run %s still has running containers: %s" % (run, states))


def ps_record(capsys, run):
    from gpufleet import cli

    capsys.readouterr()
    assert cli.main(["ps", "--json"]) == 0
    return next(r for r in json.loads(capsys.readouterr().out) if r["name"] == run)


def submit_detached(tmp_path, name, text):
    from gpufleet import cli

    task = tmp_path / (name + ".dstack.yml")
    task.write_text(text)
    assert cli.main(["apply", "-f", str(task), "-y", "-d", "--fleet", FLEET]) == 0


def test_a_detached_run_whose_rank_fails_stops_every_rank_by_itself(world, tmp_path, capsys):
    """Rank 1 exits 3 after 3 s while rank 0 sleeps; apply -d has returned, and no gpufleet
    command runs until every container has stopped: the run's own containers did it."""
    name = "selfstop-" + SUFFIX
    submit_detached(tmp_path, name, (
        "type: task\nname: %s\nimage: %s\nnodes: 2\n%s"
        "commands:\n"
        "  - if [ \"$DSTACK_NODE_RANK\" = 1 ]; then sleep 3; exit 3; fi\n"
        "  - sleep 600\n" % (name, world["base_image"], CPU)))
    states = wait_until_stopped(world, name)
    failed = next(s for s in states if s[0] == 1)
    assert failed[2] == 3
    last = max(end for _job, _running, _code, end in states)
    assert last - failed[3] <= 10, states
    record = ps_record(capsys, name)
    assert (record["status"], record["reason"]) == ("failed", "job_failed")
    assert [(j["job_num"], j["status"], j["reason"], j["exit_code"]) for j in record["jobs"]] == [
        (0, "terminated", "terminated_by_server", 143),
        (1, "failed", "container_exited_with_error", 3)]


def test_a_detached_master_done_run_ends_done_when_its_master_does(world, tmp_path, capsys):
    name = "masterdone-" + SUFFIX
    submit_detached(tmp_path, name, (
        "type: task\nname: %s\nimage: %s\nnodes: 2\nstop_criteria: master-done\n%s"
        "commands:\n"
        "  - if [ \"$DSTACK_NODE_RANK\" = 0 ]; then sleep 3; exit 0; fi\n"
        "  - sleep 600\n" % (name, world["base_image"], CPU)))
    states = wait_until_stopped(world, name)
    master = next(s for s in states if s[0] == 0)
    assert max(end for _job, _running, _code, end in states) - master[3] <= 10, states
    record = ps_record(capsys, name)
    assert record["status"] == "done"
    assert [(j["job_num"], j["status"], j["reason"]) for j in record["jobs"]] == [
        (0, "done", None), (1, "done", "done_by_runner")]
