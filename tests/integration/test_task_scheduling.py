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
