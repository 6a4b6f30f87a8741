"""Who runs what (issue 34), end to end on the task world's 3-node local fleet: two users
(GPUFLEET_USER=ann and bob, on the world's state dir: who may reach which fleet is another
part's matter) submit detached runs; ``ps`` shows both users and ``--user`` filters; ``ps
--json`` and the containers' labels carry the submitter; bob's stop of ann's run is refused
naming ann and leaves it running, his logs of it work, and ``--force`` stops it.
"""

from __future__ import annotations

import json
import time

import pytest

from gpufleet import api, cli
from gpufleet.runner import run_playbook

from .task_world import CPU, FLEET, SUFFIX, node_containers, task_file

ANN_RUN = "users-a-" + SUFFIX
BOB_RUN = "users-b-" + SUFFIX


# Other files' runs may still hold the worker's shared world: a run waits for capacity (queued,
# started by the next pass, which ps makes) instead of failing.
WAIT = "retry:\n  on_events: [no-capacity]\n  duration: 5m\n"


def sleeper(name):
    return ("type: task\nname: %s\nnodes: 1\n%s%s"
            "commands:\n  - echo started as submitted; sleep infinity\n" % (name, CPU, WAIT))


def records(capsys, *argv):
    capsys.readouterr()
    assert cli.main(["ps", "--json", *argv]) == 0
    return dict((r["name"], r) for r in json.loads(capsys.readouterr().out))


def wait_running(capsys, name):
    deadline = time.time() + 300
    while True:
        found = records(capsys).get(name)
        if found and found["status"] == "running":
            return found
        assert time.time() < deadline, "run %s never ran: %s" % (name, found)
        time.sleep(2)


def test_two_users_runs_ps_and_the_stop_guard(world, capsys, monkeypatch):
    # ann submits from the command line (in the command's own process)...
    monkeypatch.setenv("GPUFLEET_USER", "ann")
    path = task_file(world, ANN_RUN, sleeper(ANN_RUN))
    assert cli.main(["apply", "-f", path, "-y", "-d"]) == 0, capsys.readouterr()
    # ... bob through playbooks/task.yml, as AWX runs it: the action reads $GPUFLEET_USER.
    monkeypatch.setenv("GPUFLEET_USER", "bob")
    result = run_playbook("task.yml", {"task": task_file(world, BOB_RUN, sleeper(BOB_RUN)),
                                       "gpufleet_task_wait": False})
    assert result.ok, result.stdout[-3000:]
    assert result.stats["gpufleet_run"]["user"] == "bob"
    try:
        ann = wait_running(capsys, ANN_RUN)
        bob = wait_running(capsys, BOB_RUN)
        assert (ann["user"], bob["user"], ann["fleet"]) == ("ann", "bob", FLEET)

        # The table has a USER column with both; --user keeps that user's runs.
        capsys.readouterr()
        assert cli.main(["ps"]) == 0
        table = capsys.readouterr().out.splitlines()
        assert table[0].split()[:2] == ["NAME", "USER"]
        rows = dict((line.split()[0], line.split()[1]) for line in table[1:] if line.strip())
        assert rows[ANN_RUN] == "ann" and rows[BOB_RUN] == "bob"
        only_ann = records(capsys, "--user", "ann")
        assert ANN_RUN in only_ann and BOB_RUN not in only_ann
        assert all(r["user"] == "ann" for r in only_ann.values())
        # The same through playbooks/ps.yml (gpufleet_ps_user), as Ansible and AWX list them.
        listed = api.runs(user="bob")["runs"]
        assert BOB_RUN in [r["name"] for r in listed] and ANN_RUN not in [
            r["name"] for r in listed]

        # The submitter is a label of the run's container on its node.
        node = next(n for n, found in node_containers(world, ANN_RUN).items() if found)
        label = world["docker"].run("exec", node, "docker", "inspect", "-f",
                                    '{{index .Config.Labels "gpufleet.user"}}',
                                    "%s-0-0" % ANN_RUN).strip()
        assert label == "ann"

        # bob may read ann's logs, not stop her run: refused in one line naming her.
        deadline = time.time() + 60
        while True:
            capsys.readouterr()
            assert cli.main(["logs", ANN_RUN]) == 0
            if "started as submitted" in capsys.readouterr().out:
                break
            assert time.time() < deadline, "ann's run printed nothing"
            time.sleep(2)
        capsys.readouterr()
        assert cli.main(["stop", "-y", ANN_RUN]) == 1
        out, err = capsys.readouterr()
        assert "belongs to ann" in err and "--force" in err and err.count("\n") == 1, err
        # playbooks/stop.yml (the run_stop module) refuses it too.
        with pytest.raises(api.GpufleetError, match="belongs to ann"):
            api.stop(ANN_RUN)
        assert records(capsys)[ANN_RUN]["status"] == "running"

        # --force stops it; bob stops his own without it.
        assert cli.main(["stop", "-y", "--force", ANN_RUN]) == 0
        assert cli.main(["stop", "-y", BOB_RUN]) == 0
        found = records(capsys)
        assert found[ANN_RUN]["status"] == "terminated" and found[ANN_RUN]["user"] == "ann"
        assert found[BOB_RUN]["status"] == "terminated"
    finally:
        for name in (ANN_RUN, BOB_RUN):
            cli.main(["stop", "-y", "-x", "--force", name])
