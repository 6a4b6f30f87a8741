"""Scheduling without a server, on the shared 3-node task world: claims that hold when many
submitters act at once, and runs that supervise themselves when nobody is attached.

Uses tests/integration/task_world.py's fleet; every run is named with SUFFIX.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from datetime import datetime

import pytest
from ansible_collections.gpufleet.cluster.plugins.module_utils.backends import local

from .task_world import CPU, FLEET, SUFFIX, restore_node


def gpufleet(*args, timeout=300):
    """The gpufleet command in its own process, as a user's shell would run it."""
    command = os.path.join(os.path.dirname(sys.executable), "gpufleet")
    return subprocess.Popen([command] + list(args),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=dict(os.environ))


def finish(proc, timeout):
    """``proc.communicate(timeout=...)``; past it the process is killed and the assertion
    shows what it had printed (a bare TimeoutExpired shows nothing)."""
    try:
        return proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate()
        raise AssertionError("%s still ran after %d s:\n%s\n%s" % (
            " ".join(proc.args[1:]), timeout, out[-3000:], err[-3000:])) from None


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


def ps_all(capsys):
    from gpufleet import cli

    capsys.readouterr()
    assert cli.main(["ps", "--json"]) == 0
    return dict((r["name"], r) for r in json.loads(capsys.readouterr().out))


def test_waiting_runs_start_by_priority_when_capacity_frees(world, tmp_path, capsys):
    """A 2-node run fills the fleet (3 nodes; a second 2-node run cannot fit); B (priority 10)
    and C (priority 90) are submitted detached and wait in the queue. Stopping the first starts
    C before B, with no gpufleet process running in between but the test's own commands."""
    from gpufleet import cli

    first, low, high = ("q%s-%s" % (n, SUFFIX) for n in ("first", "low", "high"))
    body = ("image: %s\nnodes: 2\n%scommands: [sleep infinity]\nstop_duration: 1\n"
            % (world["base_image"], CPU))
    submit_detached(tmp_path, first, "type: task\nname: %s\n%s" % (first, body))
    waiting = "retry:\n  on_events: [no-capacity]\n  duration: 10m\n"
    for name, priority in ((low, 10), (high, 90)):
        submit_detached(tmp_path, name, "type: task\nname: %s\npriority: %d\n%s%s"
                        % (name, priority, waiting, body))
        assert "waiting for capacity (queue position" in capsys.readouterr().out
    listed = ps_all(capsys)
    assert listed[first]["status"] == "running"
    assert [(listed[n]["status"], listed[n]["queue_position"]) for n in (high, low)] == [
        ("pending", 1), ("pending", 2)]
    # Nothing else moves the queue: after a while both still wait.
    time.sleep(3)
    assert [r["status"] for n, r in ps_all(capsys).items() if n in (low, high)] == [
        "pending", "pending"]

    assert cli.main(["stop", "-y", first]) == 0
    listed = ps_all(capsys)
    assert listed[high]["status"] in ("provisioning", "running"), listed[high]
    assert (listed[low]["status"], listed[low]["queue_position"]) == ("pending", 1)
    assert sorted(j["host"] for j in listed[high]["jobs"]) == sorted(
        j["host"] for j in listed[first]["jobs"])

    assert cli.main(["stop", "-y", high]) == 0
    listed = ps_all(capsys)
    assert listed[low]["status"] in ("provisioning", "running"), listed[low]
    assert cli.main(["stop", "-y", low]) == 0
    assert ps_all(capsys)[low]["status"] == "terminated"


def test_a_waiting_run_can_be_stopped_before_it_ever_runs(world, tmp_path, capsys):
    from gpufleet import cli

    blocker, waiter = "qblock-" + SUFFIX, "qwait-" + SUFFIX
    body = ("image: %s\nnodes: 3\n%scommands: [sleep infinity]\nstop_duration: 1\n"
            % (world["base_image"], CPU))
    submit_detached(tmp_path, blocker, "type: task\nname: %s\n%s" % (blocker, body))
    submit_detached(tmp_path, waiter, "type: task\nname: %s\nretry:\n  on_events: "
                    "[no-capacity]\n  duration: 10m\n%s" % (waiter, body))
    assert ps_all(capsys)[waiter]["status"] == "pending"
    assert cli.main(["stop", "-y", waiter]) == 0
    record = ps_all(capsys)[waiter]
    assert (record["status"], record["reason"]) == ("terminated", "terminated_by_user")
    assert cli.main(["stop", "-y", blocker]) == 0
    assert ps_all(capsys)[waiter]["status"] == "terminated"   # stopped: it never starts


def test_a_detached_run_with_retry_on_error_is_resubmitted_by_the_next_command(
        world, tmp_path, capsys):
    """The first submission exits 3 (a marker in an instance volume says it was tried); with
    nobody attached, the next gpufleet command (here ps) resubmits it, and it ends done."""
    name = "retry-" + SUFFIX
    host = local.container_name(FLEET, 0).replace("gpufleet-", "")
    submit_detached(tmp_path, name, (
        "type: task\nname: %s\nimage: %s\n%s"
        "instances: [%s]\n"
        "volumes: [/tmp/%s:/state]\n"
        "retry:\n  on_events: [error]\n  duration: 10m\n"
        "commands:\n"
        "  - if [ -e /state/tried ]; then echo second; exit 0; fi\n"
        "  - touch /state/tried; sleep 2; exit 3\n"
        % (name, world["base_image"], CPU, host, name)))
    states = wait_until_stopped(world, name)
    assert [code for _job, _running, code, _end in states] == [3]
    record = ps_record(capsys, name)   # ps moved the queue: resubmitted
    assert record["submission"] == 1, record
    deadline = time.time() + 60
    while record["status"] != "done" and time.time() < deadline:
        time.sleep(1)
        record = ps_record(capsys, name)
    assert (record["status"], record["submission"]) == ("done", 1), record


def interrupted_task(world, fleet, run):
    """A 2-node task with retry on interruption: rank 1 sleeps 15 s; rank 0 sleeps until its
    run is resubmitted (a marker in an instance volume says it ran once), then ends."""
    return ("type: task\nname: %s\nimage: %s\nnodes: 2\nfleets: [%s]\n%s"
            "volumes: [/tmp/%s:/state]\n"
            # The job left on the surviving node stops at once for the resubmission (the
            # default stop_duration, 5 minutes, would take most of the test's time).
            "stop_duration: 1\n"
            "retry:\n  on_events: [interruption]\n  duration: 10m\n"
            "commands:\n"
            "  - if [ \"$DSTACK_NODE_RANK\" = 1 ]; then sleep 15; exit 0; fi\n"
            "  - if [ -e /state/first ]; then exit 0; fi\n"
            "  - touch /state/first; sleep 600\n" % (run, world["base_image"], fleet, CPU, run))


def remove_rank_1_node(world, nodes, run, proc, seconds=300):
    """Wait until rank 1 of ``run`` runs, then remove its node container (the instance is
    gone). A killed node would restart (its restart policy), like a rebooted host."""
    deadline = time.time() + seconds
    while time.time() < deadline:
        for node in nodes(running=True):
            _rc, out, _err = world["docker"].run(
                "exec", node, "docker", "ps", "-q", "--filter", "label=gpufleet.run=" + run,
                "--filter", "label=gpufleet.job=1", check=False)
            if out.strip():   # (a node still starting has no engine to ask yet)
                world["docker"].run("rm", "-f", node)
                return node
        time.sleep(1)
    raise AssertionError("rank 1 of %s never ran: %s" % (run, proc.communicate(timeout=5)))


@pytest.fixture(scope="module")
def elastic(world, tmp_path_factory):
    """A local fleet with nodes: 0..3 and no idle_duration (its own nodes would stay 3 days),
    made by the first test that needs it, deleted at the module's end. The tasks that grow it
    set idle_duration: 0s, which their new nodes keep (fleets/idle.py)."""
    from gpufleet.runner import run_playbook

    name = "el-" + SUFFIX
    fleet = tmp_path_factory.mktemp("elastic") / (name + ".dstack.yml")
    fleet.write_text("type: fleet\nname: %s\nnodes: 0..3\nplacement: cluster\n"
                     "backends: [local]\n" % name)

    def nodes(running=False):
        args = ["ps", "-q", "--filter", "label=gpufleet.fleet=" + name]
        return world["docker"].run(*(args if running else args[:1] + ["-a"] + args[1:])).split()

    from gpufleet import cli

    assert cli.main(["apply", "-f", str(fleet), "-y"]) == 0
    yield {"name": name, "file": fleet, "nodes": nodes}
    run_playbook("delete.yml", {"fleet": str(fleet), "gpufleet_refuse_busy": False})


def test_an_elastic_fleet_grows_for_a_run_and_shrinks_once_idle(world, elastic, tmp_path,
                                                                capsys):
    """nodes: 0..3. The apply makes no node; a 2-node task makes two, marked as made for it,
    runs and ends; a 4-node task is refused at plan time (max 3); reconcile removes both after
    the run's idle_duration (0s), where the fleet's own limit (unset: 3d) would keep them."""
    from gpufleet import cli
    from gpufleet.runner import run_playbook

    name, fleet, nodes = elastic["name"], elastic["file"], elastic["nodes"]
    assert nodes() == []   # applied (by the fixture) with no node
    task = tmp_path / "el-task.dstack.yml"
    task.write_text("type: task\nimage: %s\nnodes: 2\nfleets: [%s]\n%s"
                    "idle_duration: 0s\n"
                    "commands: [echo node $DSTACK_NODE_RANK of $DSTACK_NODES_NUM]\n"
                    % (world["base_image"], name, CPU))
    capsys.readouterr()
    # --name, as a sweep names its runs: the nodes are made for the name the run gets.
    assert cli.main(["apply", "-f", str(task), "-y", "--name", name + "-run"]) == 0
    out = capsys.readouterr().out
    assert "2 new instances in fleet %s (local, $0/h each; removed after 0s idle)" % name in out, \
        out
    assert "Run %s-run done" % name in out, out
    assert len(nodes()) == 2
    for node in nodes():
        labels = json.loads(world["docker"].run(
            "inspect", "--format", "{{json .Config.Labels}}", node))
        assert (labels["gpufleet.made-for-run"], labels["gpufleet.idle-duration"]) == (
            name + "-run", "0"), labels
    assert cli.main(["fleet", "-v"]) == 0
    table = capsys.readouterr().out
    assert table.count("idle (for run %s-run, idle_duration 0s)" % name) == 2, table

    big = tmp_path / "el-big.dstack.yml"
    big.write_text("type: task\nname: %s-big\nimage: %s\nnodes: 4\nfleets: [%s]\n%s"
                   "commands: [\"true\"]\n" % (name, world["base_image"], name, CPU))
    assert cli.main(["apply", "-f", str(big), "-y"]) == 1
    err = capsys.readouterr().err
    assert "may grow by 1 instance (nodes.max), not enough" in err, err
    assert len(nodes()) == 2

    result = run_playbook("reconcile.yml", {"fleets": [str(fleet)]})
    assert result.ok, result.stdout[-3000:]
    assert nodes() == []


def test_a_node_gone_mid_run_interrupts_its_run(world, elastic, tmp_path, capsys):
    """A node container removed mid-run. With retry on interruption, the attached run is
    submitted again on the fleet's free node; without retry, ps (whose pass stops the other
    rank) says the run failed, naming the host and why."""
    from gpufleet import cli

    name, nodes = elastic["name"], elastic["nodes"]
    # Three nodes first (a 3-node run grows the fleet to its max), so the resubmission has a
    # free one to go to.
    three = tmp_path / "el-three.dstack.yml"
    three.write_text("type: task\nname: %s-three\nimage: %s\nnodes: 3\nfleets: [%s]\n%s"
                     "idle_duration: 0s\ncommands: [\"true\"]\n"
                     % (name, world["base_image"], name, CPU))
    assert cli.main(["apply", "-f", str(three), "-y"]) == 0
    assert len(nodes(running=True)) == 3
    retried = tmp_path / "el-retry.dstack.yml"
    retried.write_text(interrupted_task(world, name, name + "-int"))
    proc = gpufleet("apply", "-f", str(retried), "-y")
    remove_rank_1_node(world, nodes, name + "-int", proc, seconds=240)
    out, err = proc.communicate(timeout=400)
    assert proc.returncode == 0, out + err
    assert "interrupted_by_no_capacity" in out + err, out + err
    assert "Run %s-int done" % name in out, out + err

    once = tmp_path / "el-once.dstack.yml"
    once.write_text("type: task\nname: %s-once\nimage: %s\nnodes: 2\nfleets: [%s]\n%s"
                    "commands: [sleep infinity]\nstop_duration: 1\n"
                    % (name, world["base_image"], name, CPU))
    assert cli.main(["apply", "-f", str(once), "-y", "-d"]) == 0
    record = ps_record(capsys, name + "-once")
    host = record["jobs"][1]["host"]
    world["docker"].run("rm", "-f", local.container_name(name, int(host.rsplit("-", 1)[1])))
    record = ps_record(capsys, name + "-once")
    assert (record["status"], record["reason"]) == ("failed", "job_failed"), record
    assert [(j["job_num"], j["status"], j["reason"]) for j in record["jobs"]] == [
        (0, "terminated", "terminated_by_server"), (1, "failed", "interrupted_by_no_capacity")]
    assert record["message"] == "host %s: the instance is gone (its backend no longer has it)" % (
        host)


def test_a_resubmission_grows_the_fleet_that_lost_a_node(world, elastic, tmp_path):
    """The fleet shrinks to nothing; an attached 2-node run with retry on interruption makes it
    grow to two; one node is removed mid-run; the resubmission makes the fleet grow again (the
    fleet playbook, run by the runner) and ends done."""
    from gpufleet.runner import run_playbook

    name, nodes = elastic["name"], elastic["nodes"]
    result = run_playbook("reconcile.yml", {"fleets": [str(elastic["file"])]})
    assert result.ok, result.stdout[-3000:]
    assert nodes() == []
    task = tmp_path / "el-regrow.dstack.yml"
    task.write_text(interrupted_task(world, name, name + "-regrow"))
    proc = gpufleet("apply", "-f", str(task), "-y")
    remove_rank_1_node(world, nodes, name + "-regrow", proc)
    out, err = proc.communicate(timeout=600)
    assert proc.returncode == 0, out + err
    assert "grows by 1 instance for this run" in out + err, out + err
    assert "Run %s-regrow done" % name in out, out + err
    assert len(nodes(running=True)) == 2


def pinned_retry_task(world, run, node_num):
    """A 1-node task pinned to one node of the world's fleet, with retry on interruption and
    no-capacity: its first submission sleeps (a marker in an instance volume says it ran), the
    next one ends at once."""
    return ("type: task\nname: %s\nimage: %s\nfleets: [%s]\ninstances: [%s-%d]\n%s"
            "volumes: [/tmp/%s:/state]\nstop_duration: 1\n"
            "retry:\n  on_events: [interruption, no-capacity]\n  duration: 10m\n"
            "commands:\n"
            "  - if [ -e /state/first ]; then exit 0; fi\n"
            "  - touch /state/first; sleep 600\n"
            % (run, world["base_image"], FLEET, FLEET, node_num, CPU, run))


def kill_node_when_running(world, node, run, proc, seconds=240):
    """Once ``run``'s commands run on ``node`` (its marker is in the instance volume: killed
    before, the next submission would sleep too), kill the node's container, keeping it from
    restarting by itself (as a stopped instance); ``restore_node`` starts it again."""
    deadline = time.time() + seconds
    while time.time() < deadline:
        marked = world["docker"].run("exec", node, "test", "-e", "/tmp/%s/first" % run,
                                     check=False)[0] == 0
        out = world["docker"].run("exec", node, "docker", "ps", "-q", "--filter",
                                  "label=gpufleet.run=" + run, check=False)[1]
        if marked and out.strip():
            world["docker"].run("update", "--restart", "no", node)
            world["docker"].run("kill", node)
            return
        if proc.poll() is not None:
            break
        time.sleep(1)
    proc.kill()
    raise AssertionError("%s never ran on %s: %s" % (run, node, proc.communicate()))


def leave_node(world, node, run, proc):
    """After a test of ``attached_pinned_retry``: its node back, and the run stopped if the
    test left it going (the next tests on this world need the node free)."""
    if proc.poll() is None:
        proc.kill()
        proc.communicate()
    restore_node(world, node)
    gpufleet("stop", "-y", run).communicate(timeout=300)


def wait_for_ps_status(capsys, run, wanted, seconds=150):
    deadline = time.time() + seconds
    seen = []
    while time.time() < deadline:
        try:
            record = ps_record(capsys, run)
        except StopIteration:
            record = {"status": None}
        seen.append(record["status"])
        if record["status"] == wanted:
            return record
        assert record["status"] not in ("failed", "terminated", "done"), (seen, record)
        time.sleep(2)
    raise AssertionError("ps never said %s for %s: %s" % (wanted, run, seen))


def attached_pinned_retry(world, tmp_path, run):
    """``gpufleet apply -y`` of ``pinned_retry_task`` on node 2, attached (the process)."""
    task = tmp_path / (run + ".dstack.yml")
    task.write_text(pinned_retry_task(world, run, 2))
    return gpufleet("apply", "-f", str(task), "-y")


def test_an_attached_retry_sees_its_node_come_back(world, tmp_path, capsys):
    """Issue 32, defect 4. A 1-node run pinned to a node, retry on interruption and
    no-capacity, attached. Its node is killed: ps says the run is pending (not failed) while the
    attached apply waits; the node is started again, and the attached apply, which asks the
    backend again on each try, runs it there and ends done."""
    run, node = "rback-" + SUFFIX, local.container_name(FLEET, 2)
    proc = attached_pinned_retry(world, tmp_path, run)
    try:
        kill_node_when_running(world, node, run, proc)
        record = wait_for_ps_status(capsys, run, "pending")
        assert record.get("queued_on"), record
        restore_node(world, node)
        out, err = finish(proc, 150)
    finally:
        leave_node(world, node, run, proc)
    assert proc.returncode == 0, out + err
    assert "Run %s done" % run in out, out + err
    record = ps_record(capsys, run)
    assert (record["status"], record["submission"]) == ("done", 1), record


def test_ctrl_c_of_an_attached_retry_that_waits_leaves_it_pending(world, tmp_path, capsys):
    """The same run; Ctrl-C while it waits for its node: the apply detaches (docs/tasks.md),
    the run stays pending in ps, and gpufleet stop ends it terminated."""
    from gpufleet import cli

    run, node = "rint-" + SUFFIX, local.container_name(FLEET, 2)
    proc = attached_pinned_retry(world, tmp_path, run)
    try:
        kill_node_when_running(world, node, run, proc)
        wait_for_ps_status(capsys, run, "pending")
        proc.send_signal(signal.SIGINT)
        out, err = finish(proc, 60)
        assert "detached; the run %s goes on" % run in err, out + err
        assert "Run %s failed" % run not in out + err, out + err
        assert ps_record(capsys, run)["status"] == "pending"
        assert cli.main(["stop", "-y", run]) == 0
        record = ps_record(capsys, run)
        assert (record["status"], record["reason"]) == ("terminated", "terminated_by_user"), \
            record
    finally:
        leave_node(world, node, run, proc)
