"""gpufleet logs on real local runs: each job's output is kept on its host beside its state,
so it is read after the containers are gone, one job at a time, since a moment, for a run
whose image could not be brought, and 50 MB of it stream through ``logs -f`` without the
command holding them.

On the task world's shared 3-node fleet.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

from ansible_collections.gpufleet.cluster.plugins.module_utils.backends import local

from gpufleet import api

from .task_world import FLEET, SUFFIX, run_task

LINES = 500000   # of 100 bytes each: 50 MB
TALKER = """\
type: task
name: {name}
image: {image}
fleets: [{fleet}]
nodes: 2
resources:
  cpu: 1..
  memory: 0.1GB..
  disk: 1GB..
commands:
  - echo "start $DSTACK_NODE_RANK"
  - echo "err $DSTACK_NODE_RANK" >&2
  - |
    if [ "$DSTACK_NODE_RANK" = 1 ]; then
      i=0
      while [ $i -lt {blocks} ]; do
        yes "$i 012345678901234567890123456789012345678901234567890123456789012345678901234567890123456" | head -n 1000
        i=$((i + 1))
      done
    fi
  - echo "end $DSTACK_NODE_RANK"
"""

# A child Python that runs the command, reads its output a megabyte at a time, and says how
# much came, its last line, and the most memory any process under it used.
MEASURE = r"""
import json, resource, subprocess, sys
proc = subprocess.Popen(sys.argv[1:], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
lines = size = 0
tail = b""
while True:
    chunk = proc.stdout.read(1 << 20)
    if not chunk:
        break
    size += len(chunk)
    lines += chunk.count(b"\n")
    tail = (tail + chunk)[-4096:]
err = proc.stderr.read()
proc.wait()
print(json.dumps({"rc": proc.returncode, "lines": lines, "bytes": size,
                  "tail": tail.decode("utf-8", "replace").splitlines()[-6:],
                  "stderr": err.decode("utf-8", "replace")[-2000:],
                  "max_rss_mb": resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss // 1024}))
"""


def gpufleet(*argv, timeout=300):
    command = os.path.join(os.path.dirname(sys.executable), "gpufleet")
    return subprocess.run([command] + list(argv), stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, text=True, timeout=timeout, check=False)


def wait_for(name, statuses, seconds=180):
    deadline = time.time() + seconds
    record = None
    while time.time() < deadline:
        record = api.status(name)
        if record["status"] in statuses:
            return record
        time.sleep(2)
    raise AssertionError("run %s still %s" % (name, record and record["status"]))


def test_logs_outlive_the_containers_and_50_mb_stream_through_follow(world):
    name = "talk-" + SUFFIX
    result, _record = run_task(world, name, TALKER.format(
        name=name, image=world["base_image"], fleet=FLEET, blocks=LINES // 1000),
        gpufleet_task_wait=False)
    assert result.ok, result.stdout[-3000:]
    record = wait_for(name, ("done", "failed", "terminated"))
    assert record["status"] == "done", record

    # 50 MB through logs -f: all of it arrives, and no process holds it.
    command = os.path.join(os.path.dirname(sys.executable), "gpufleet")
    measured = subprocess.run([sys.executable, "-c", MEASURE, command, "logs", "-f", name],
                              stdout=subprocess.PIPE, text=True, timeout=600, check=True)
    seen = json.loads(measured.stdout)
    assert seen["rc"] == 0, seen
    # 3 lines of job 0, 3 + LINES of job 1, and the jobs' and the run's ends.
    assert seen["lines"] == 3 + 3 + LINES + 3, seen
    assert seen["bytes"] > LINES * 100, seen
    hosts = dict((j["job_num"], j["host"]) for j in record["jobs"])
    assert seen["tail"][-3:] == ["[%s-1] end 1" % name,
                                 "%s job 1 on %s: done" % (name, hosts[1]),
                                 "%s: done" % name], seen
    # ansible-playbook itself takes about 80 MB; holding the output would add 100 MB more.
    assert seen["max_rss_mb"] < 160, seen

    # The containers go (docker rm, a prune): the run and its output stay.
    for job in record["jobs"]:
        node = local.container_name(FLEET, int(job["host"].rsplit("-", 1)[1]))
        world["docker"].run("exec", node, "docker", "rm", "-f", job["container"])
    after = api.status(name)
    assert after["status"] == "done" and [j["status"] for j in after["jobs"]] == ["done"] * 2
    zero = gpufleet("logs", name, "--job", "0")
    assert zero.returncode == 0, zero.stderr
    assert sorted(zero.stdout.splitlines()) == ["end 0", "err 0", "start 0"], zero.stdout
    assert gpufleet("logs", name, "--job", "0", "--since", "2h").stdout == zero.stdout
    later = gpufleet("logs", name, "--since", "2099-01-01T00:00:00Z")
    assert (later.returncode, later.stdout) == (0, ""), later.stderr
    bad = gpufleet("logs", name, "--since", "2026-01-01T00:00:00")
    assert bad.returncode == 1 and "has no offset" in bad.stderr, bad.stderr
    whole = subprocess.run([sys.executable, "-c", MEASURE, command, "logs", name],
                           stdout=subprocess.PIPE, text=True, timeout=600, check=True)
    seen = json.loads(whole.stdout)
    assert (seen["rc"], seen["lines"]) == (0, 6 + LINES), seen
    assert seen["tail"][-1] == "[%s-1] end 1" % name, seen


def test_a_run_whose_image_cannot_be_brought_is_failed_with_its_reason_in_ps_and_logs(world):
    name = "noimage-" + SUFFIX
    result, _record = run_task(world, name, (
        "type: task\nname: %s\nfleets: [%s]\nimage: localhost:1/no-such-image:1\n"
        "resources:\n  cpu: 1..\n  memory: 0.1GB..\n  disk: 1GB..\ncommands:\n  - echo hi\n"
        % (name, FLEET)), gpufleet_task_wait=False)
    assert not result.ok
    record = api.status(name)
    assert (record["status"], record["jobs"][0]["reason"]) == ("failed", "executor_error")
    assert "could not be pulled" in record["message"], record
    shown = gpufleet("logs", name)
    assert shown.returncode == 0, shown.stderr
    assert shown.stdout.startswith("[%s-0] gpufleet: image localhost:1/no-such-image:1 could "
                                   "not be pulled" % name), shown.stdout
