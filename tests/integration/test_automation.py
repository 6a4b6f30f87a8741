"""Automation without a server (issue 36) on the shared task world, through the ``gpufleet``
command as a user types it, with no process waiting in between.

Runs that run after others (``gpufleet apply --after``): each ``gpufleet ps`` makes a pass over
the queue, which starts or ends what waits.

A chain: first (done) then second (after first, exits 1) then third (after second: ends
``terminated`` with the reason ``dependency_failed``); a fan-in: fourth after first and
another run (any); a run after one that is stopped ends so too; an unknown run or a cycle in
``--after`` refused with one line naming the option, nothing submitted.

Events (``gpufleet event --json``): the hosts' records list every change of those runs in
order, who stopped the held run, and the instances the world's fleet apply created.

Webhooks (``gpufleet notify``): an HTTP server of the test's own gets the hosts' posts of a
run's end, with no gpufleet command running, also after it was down for 20 s; a run of two
nodes is posted once, by its job 0's host, once both jobs ended.

``schedule``: a task applied with ``* * * * *`` is started by its host twice while the world's
state dir is moved away (no controller can reach the fleet), and a stop ends its schedule.

A lost queue host: node 0, which keeps a run that waits (``--after``) and a scheduled run's
entry and job, is killed; the next ``gpufleet ps`` hands the entries over to node 1, which kept
their copies: the waiting run starts, and the scheduled run is armed again and fires, on the
hosts left; node 0 back, its stale entry and job go.

``utilization_policy``: a run whose (stand-in) GPU reports 0% is terminated by its own job
(``terminated_due_to_utilization_policy``) within its window and 30 s, with no pass or command
needed; it runs while the tests above do.
"""

from __future__ import annotations

import base64
import io
import json
import threading
import time
from datetime import datetime, timezone
from http.server import BaseHTTPRequestHandler, HTTPServer

import pytest

from ansible_collections.gpufleet.cluster.plugins.module_utils.backends import local

from gpufleet import cli
from gpufleet._collection import config_model

from .task_world import CPU, FLEET, SUFFIX, restore_node, task_file

FIRST, SECOND, THIRD = "dfirst-" + SUFFIX, "dsecond-" + SUFFIX, "dthird-" + SUFFIX
OTHER, FOURTH = "dother-" + SUFFIX, "dfourth-" + SUFFIX
HOLD, WAITER = "dhold-" + SUFFIX, "dwaiter-" + SUFFIX


def task(world, name, command):
    # Others' runs may hold the world's hosts: a run placed once its dependencies ended waits
    # for capacity in the queue rather than failing.
    return task_file(world, name, "type: task\nname: %s\n%sretry:\n  on_events: [no-capacity]\n"
                     "  duration: 10m\ncommands:\n  - %s\n" % (name, CPU, command))


def apply(capsys, world, name, command, *after):
    capsys.readouterr()
    code = cli.main(["apply", "-f", task(world, name, command), "-y", "-d"]
                    + [word for run in after for word in ("--after", run)])
    out, err = capsys.readouterr()
    return code, out, err


def records(capsys):
    capsys.readouterr()
    assert cli.main(["ps", "--json"]) == 0   # a pass over the queue first, when one is due
    return dict((r["name"], r) for r in json.loads(capsys.readouterr().out))


def wait_for(capsys, what, check, seconds=240):
    deadline = time.time() + seconds
    while True:
        found = records(capsys)
        if check(found):
            return found
        assert time.time() < deadline, "%s never happened: %s" % (
            what, dict((n, (r["status"], r.get("reason"))) for n, r in found.items()
                       if n.endswith(SUFFIX)))
        time.sleep(3)


IDLE = "didle-" + SUFFIX
WINDOW = 300   # utilization_policy's least time_window (5m)
# An nvidia-smi that reports one GPU, idle.
IDLE_GPU = base64.b64encode(b"#!/bin/sh\necho '0, 0, 81559'\n").decode()


@pytest.fixture(scope="module")
def idle_run(world):
    """A run with utilization_policy whose GPU idles, started first (detached): the tests in
    between run while its window passes."""
    # On node 2: the handover test takes node 0 away and runs on node 1.
    path = task_file(world, IDLE, "type: task\nname: %s\n%sinstances: [%s-2]\n"
                     "utilization_policy:\n"
                     "  min_gpu_utilization: 10\n  time_window: 5m\ncommands:\n"
                     "  - echo %s | base64 -d > /usr/local/bin/nvidia-smi\n"
                     "  - chmod +x /usr/local/bin/nvidia-smi\n  - sleep 1200\n"
                     % (IDLE, CPU, FLEET, IDLE_GPU))
    assert cli.main(["apply", "-f", path, "-y", "-d"]) == 0
    return {"started": time.time()}


def test_a_chain_and_a_fan_in_with_no_process_waiting(world, capsys, idle_run):
    # A run that holds on, and one after it: what --after refuses is tried against them.
    assert apply(capsys, world, HOLD, "sleep 300")[0] == 0
    assert apply(capsys, world, WAITER, "echo ok", HOLD)[0] == 0
    code, _out, err = apply(capsys, world, "dghost-" + SUFFIX, "echo ok", "nothing-" + SUFFIX)
    assert code == 1 and "--after: no run or job array named nothing-%s on any fleet" % (
        SUFFIX) in err, err
    code, _out, err = apply(capsys, world, HOLD, "echo ok", WAITER)
    assert code == 1 and "--after: %s would wait for itself: %s waits for %s waits for %s" % (
        HOLD, HOLD, WAITER, HOLD) in err, err
    assert records(capsys).get("dghost-" + SUFFIX) is None

    code, out, err = apply(capsys, world, FIRST, "sleep 5")
    assert code == 0, out + err
    code, out, err = apply(capsys, world, SECOND, "exit 1", FIRST)
    assert code == 0, out + err
    assert "Run %s is waiting for %s (ok)" % (SECOND, FIRST) in out, out
    code, out, err = apply(capsys, world, THIRD, "echo ok", SECOND)
    assert code == 0, out + err
    assert apply(capsys, world, OTHER, "sleep 2")[0] == 0
    assert apply(capsys, world, FOURTH, "echo ok", FIRST, OTHER + ":any")[0] == 0
    found = records(capsys)
    assert (found[WAITER]["status"], found[WAITER]["reason"]) == ("pending", "dependency")
    assert found[WAITER]["message"] == "waiting for %s (ok)" % HOLD

    # The held run stopped: the one after it can no longer start.
    assert cli.main(["stop", HOLD, "-y"]) == 0

    def settled(found):
        return all(found.get(n, {}).get("status") in ("done", "failed", "terminated")
                   for n in (FIRST, SECOND, THIRD, OTHER, FOURTH, WAITER))

    found = wait_for(capsys, "the chain and the fan-in ending", settled)
    assert found[FIRST]["status"] == "done"
    assert found[SECOND]["status"] == "failed"
    assert (found[THIRD]["status"], found[THIRD]["reason"]) == ("terminated",
                                                                "dependency_failed")
    assert found[THIRD]["message"] == "run %s ended failed, and it runs after %s:ok" % (
        SECOND, SECOND)
    assert (found[WAITER]["status"], found[WAITER]["reason"]) == ("terminated",
                                                                  "dependency_failed")
    assert found[FOURTH]["status"] == "done"
    # The third never ran; the fourth started only once both of its runs had ended.
    assert not found[THIRD].get("jobs") and not found[WAITER].get("jobs")
    started = found[FOURTH]["jobs"][0]["started_at"]
    assert started >= found[FIRST]["jobs"][0]["finished_at"], found[FOURTH]
    assert started >= found[OTHER]["jobs"][0]["finished_at"], found[FOURTH]


def in_order(messages, expected):
    """Whether ``expected`` appear in ``messages`` in that order (others may come between)."""
    rest = iter(messages)
    return all(any(m == wanted for m in rest) for wanted in expected)


def events(capsys, *argv):
    capsys.readouterr()
    assert cli.main(["event", "--json"] + list(argv)) == 0
    found = json.loads(capsys.readouterr().out)["events"]
    moments = [e["at"] for e in found]
    assert moments == sorted(moments)
    return found


def test_the_hosts_record_every_change_of_these_runs_in_order(world, capsys):
    second = [e["message"] for e in events(capsys, "--within-run", SECOND)]
    assert in_order(second, [
        "Run submitted. Status: PENDING. Reason: DEPENDENCY (waiting for %s (ok))" % FIRST,
        "Job created on run submission. Status: SUBMITTED",
        "Run status changed PENDING -> SUBMITTED",
        "Run status changed SUBMITTED -> PROVISIONING",
        "Job status changed PROVISIONING -> RUNNING",
        "Run status changed PROVISIONING -> RUNNING",
        "Job status changed RUNNING -> FAILED. Termination reason: "
        "CONTAINER_EXITED_WITH_ERROR. Exit code: 1",
        "Run status changed RUNNING -> FAILED. Termination reason: JOB_FAILED"]), (
            "\n".join(second))
    assert "Run submitted. Status: SUBMITTED" not in second, "\n".join(second)

    third = events(capsys, "--within-run", THIRD)
    assert [e["message"] for e in third if e["kind"] != "run.queued" or e["state"] != "pending"
            ][-1:] == ["Run status changed PENDING -> TERMINATED. Termination reason: "
                       "DEPENDENCY_FAILED (run %s ended failed, and it runs after %s:ok)"
                       % (SECOND, SECOND)], third
    assert not [e for e in third if e["kind"].startswith("job.")], third

    held = events(capsys, "--within-run", HOLD)
    stopping = [e for e in held if e["kind"] == "job.stopping"]
    assert [(e["reason"], e["targets"]) for e in stopping] == [
        ("terminated_by_user", [{"type": "job", "name": HOLD + "-0-0"}])], held
    assert stopping[0]["actor"] == held[0]["actor"] and held[0]["actor"], held
    assert held[-1]["message"] == (
        "Run status changed TERMINATING -> TERMINATED. Termination reason: TERMINATED_BY_USER")

    made = events(capsys, "--within-fleet", FLEET, "--include-target-type", "instance")
    created = sorted(e["instance"] for e in made if e["kind"] == "instance.created")
    assert created == ["%s-%d" % (FLEET, n) for n in range(3)], made
    capsys.readouterr()
    assert cli.main(["event", "--target-fleet", FLEET]) == 0
    assert "[fleet %s] Fleet applied. Instances added: %s-0, %s-1, %s-2" % (
        FLEET, FLEET, FLEET, FLEET) in capsys.readouterr().out


class Receiver:
    """An HTTP server on every address of this machine that keeps what is posted to it; it
    can be taken down and brought back on the same port."""

    def __init__(self):
        self.posts = []
        self.port = None
        self.server = None

    def up(self):
        posts = self.posts

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                posts.append(json.loads(self.rfile.read(int(self.headers["Content-Length"]))))
                self.send_response(200)
                self.end_headers()

            def log_message(self, *args):
                pass

        self.server = HTTPServer(("0.0.0.0", self.port or 0), Handler)
        self.port = self.server.server_port
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def down(self):
        self.server.shutdown()
        self.server.server_close()

    def ended(self, run):
        return [p["event"] for p in self.posts
                if p["event"].get("run") == run and p["event"]["kind"] == "run.status"]


def gateway(world):
    """This machine's address on the world's nodes' network."""
    from ansible_collections.gpufleet.cluster.plugins.module_utils.backends import local

    config_model()
    networks = json.loads(world["docker"].run(
        "inspect", "--format", "{{json .NetworkSettings.Networks}}",
        local.container_name(FLEET, 0)))
    return next(n["Gateway"] for n in networks.values() if n.get("Gateway"))


def test_the_hosts_post_a_runs_end_to_a_webhook_also_after_it_was_down(
        world, capsys, monkeypatch):
    monkeypatch.setenv("ANSIBLE_VAULT_PASSWORD_FILE", str(world["vault_password"]))
    receiver = Receiver()
    receiver.up()
    url = "http://%s:%d/hook/token-%s" % (gateway(world), receiver.port, SUFFIX)
    name = "it-" + SUFFIX
    monkeypatch.setattr("sys.stdin", io.StringIO(url + "\n"))
    capsys.readouterr()
    assert cli.main(["notify", "add", "--on", "run.status", "--on", "job.ended",
                     "--name", name]) == 0
    out = capsys.readouterr().out
    assert "Hook %s posts run.status, job.ended to http://" % name in out, out
    assert "token-" not in out
    try:
        one, two = "dhook1-" + SUFFIX, "dhook2-" + SUFFIX
        assert apply(capsys, world, one, "echo one")[0] == 0
        deadline = time.time() + 90
        while not receiver.ended(one):
            assert time.time() < deadline, receiver.posts
            time.sleep(2)
        (end,) = receiver.ended(one)
        assert (end["status"], end["reason"], end["fleet"]) == ("done", "all_jobs_done", FLEET)
        assert any(p["event"]["kind"] == "job.ended" and p["event"]["run"] == one
                   and p["event"]["exit_code"] == 0 for p in receiver.posts)

        # Down while a run of two nodes ends, and 20 s more: job 1 fails, job 0 is stopped by
        # it and, once job 1 told it how it ended, its host says the run's end; the hosts keep
        # trying, then it arrives, once.
        receiver.down()
        capsys.readouterr()
        assert cli.main(["apply", "-y", "-d", "-f", task_file(
            world, two, "type: task\nname: %s\nnodes: 2\n%scommands:\n"
            "  - if [ $DSTACK_NODE_RANK = 1 ]; then sleep 8; exit 3; fi; sleep 120\n"
            % (two, CPU))]) == 0, capsys.readouterr()
        wait_for(capsys, "the run of two nodes ending", lambda found: found.get(two, {}).get(
            "status") in ("done", "failed", "terminated"), seconds=120)
        time.sleep(20)   # down for a tick at least once its jobs' ends are there to post
        receiver.up()
        deadline = time.time() + 120
        while not receiver.ended(two):
            assert time.time() < deadline, receiver.posts
            time.sleep(2)
        time.sleep(16)   # a tick more: no other host says it again
        (end,) = receiver.ended(two)
        assert (end["status"], end["reason"], end["nodes"]) == ("failed", "job_failed", 2), end
        assert end["detail"] == "job 1 ended: container_exited_with_error, exit code 3", end
        jobs = [p["event"] for p in receiver.posts if p["event"].get("run") == two
                and p["event"]["kind"] == "job.ended"]
        assert sorted((e["job"], e["reason"]) for e in jobs) == [
            (0, "terminated_by_server"), (1, None)], jobs
        capsys.readouterr()
        assert cli.main(["notify", "list", "--json"]) == 0
        (hook,) = [h for h in json.loads(capsys.readouterr().out)["hooks"] if h["id"] == name]
        assert hook["url"].endswith(":%d/..." % receiver.port)
        hosts = hook["hosts"].values()
        assert sum(h["delivered"] for h in hosts) >= 4
        assert sum(h["failed"] for h in hosts) >= 1
        assert all(h["tick"] == "loop" for h in hosts)
    finally:
        assert cli.main(["notify", "remove", name]) == 0
        receiver.down()


SCHEDULED = "dcron-" + SUFFIX


def kept_schedule(world, host):
    """The schedule the host keeps for the scheduled run's job, read on the node itself."""
    out = world["docker"].run("exec", host, "cat",
                              "/var/lib/gpufleet/runs/%s/0/schedule.json" % SCHEDULED)
    return json.loads(out)


def test_a_scheduled_task_fires_on_its_host_twice_with_no_controller(world, capsys):
    path = task_file(world, SCHEDULED, "type: task\nname: %s\n%sschedule:\n  cron: '* * * * *'"
                     "\ncommands:\n  - echo fired at $(date -u +%%H:%%M:%%S)\n"
                     % (SCHEDULED, CPU))
    capsys.readouterr()
    assert cli.main(["apply", "-f", path, "-y"]) == 0   # attached: it returns at once
    out = capsys.readouterr().out
    assert "Run %s is waiting for schedule, next run " % SCHEDULED in out, out
    found = records(capsys)[SCHEDULED]
    assert (found["status"], found["reason"]) == ("pending", "waiting_for_schedule"), found
    assert found["schedule"]["cron"] == ["* * * * *"] and found["schedule"]["firings"] == 0
    assert found["schedule"]["next"] % 60 == 0 and found["schedule"]["next"] > time.time()
    (job,) = found["jobs"]
    host = local.container_name(FLEET, int(job["host"].rsplit("-", 1)[1]))
    # No controller from here on: the world's state dir, its keys included, is moved away.
    state = world["base"] / "state"
    away = world["base"] / "state-away"
    state.rename(away)
    try:
        deadline = time.time() + 150
        while kept_schedule(world, host)["firings"] < 2:
            assert time.time() < deadline, kept_schedule(world, host)
            time.sleep(3)
    finally:
        away.rename(state)
    kept = kept_schedule(world, host)
    assert kept["next"] - kept["last"] <= 75 and kept["waiting"] is None, kept
    # Each firing was a start of its own: two containers made, the second one's output kept.
    found = events(capsys, "--within-run", SCHEDULED)
    made = [e for e in found if e["kind"] == "job.created"]
    assert len(made) >= 2 and len(set(e["submission"] for e in made)) == len(made), made
    # The run's own changes at each time: from pending, and back to it once the start ended.
    said = [e["message"] for e in found if e["kind"] == "run.status"]
    assert said.count("Run status changed PENDING -> SUBMITTED") >= 2, said
    assert "Run status changed DONE -> PENDING" in said, said
    found = records(capsys)[SCHEDULED]
    assert found["schedule"]["firings"] >= 2, found
    assert found["status"] in ("pending", "running", "provisioning"), found
    capsys.readouterr()
    assert cli.main(["logs", SCHEDULED]) == 0
    assert "fired at " in capsys.readouterr().out
    # A stop ends the schedule for good.
    assert cli.main(["stop", SCHEDULED, "-y"]) == 0
    found = records(capsys)[SCHEDULED]
    assert (found["status"], found["reason"]) == ("terminated", "terminated_by_user"), found
    assert found["schedule"]["stopped"] is True and found["schedule"]["next"] is None
    assert kept_schedule(world, host)["stopped"] is True
    # delete -f of its file removes it from its host: ps no longer lists it.
    capsys.readouterr()
    assert cli.main(["delete", "-f", path, "-y"]) == 0
    assert capsys.readouterr().out == "Run %s deleted.\n" % SCHEDULED
    assert SCHEDULED not in records(capsys)
    assert world["docker"].run("exec", host, "ls", "/var/lib/gpufleet/runs").split().count(
        SCHEDULED) == 0


HELD, HANDED, REARMED = "dheld-" + SUFFIX, "dhanded-" + SUFFIX, "drearm-" + SUFFIX


def book_file(world, node, path):
    """A file of the node's booking folder, as JSON, or None."""
    rc, out, _err = world["docker"].run("exec", node, "cat", "/var/lib/gpufleet/book/" + path,
                                        check=False)
    return json.loads(out) if rc == 0 else None


def test_a_lost_queue_host_hands_its_waiting_and_scheduled_runs_over(world, capsys):
    """Node 0, the fleet's queue host, keeps a run that waits (--after a run on node 1) and a
    scheduled run's entry, whose job it also keeps; their copies are on node 1. Node 0 is
    killed (its backend says stopped): the next ps hands both entries over to node 1. The
    waiting run starts once the run it follows ended, and the scheduled run is armed again
    and fires, both on a host that is not the lost one. Node 0 back, its stale entry
    and its stale job of the scheduled run go, and nothing starts twice."""
    lost, keeper = local.container_name(FLEET, 0), local.container_name(FLEET, 1)
    path = task_file(world, HELD, "type: task\nname: %s\n%sinstances: [%s-1]\ncommands:\n"
                     "  - sleep 45\n" % (HELD, CPU, FLEET))
    assert cli.main(["apply", "-f", path, "-y", "-d"]) == 0
    cron = task_file(world, REARMED, "type: task\nname: %s\n%sschedule:\n  cron: '* * * * *'"
                     "\ncommands:\n  - echo rearmed and fired\n" % (REARMED, CPU))
    assert cli.main(["apply", "-f", cron, "-y"]) == 0
    assert records(capsys)[REARMED]["jobs"][0]["host"] == "%s-0" % FLEET
    assert apply(capsys, world, HANDED, "echo handed over", HELD)[0] == 0
    for run, state in ((HANDED, "pending"), (REARMED, "scheduled")):
        copy = book_file(world, keeper, "queue-mirror/%s.json" % run)
        assert copy and (copy["queued_on"], copy["state"]) == ("%s-0" % FLEET, state), copy
        assert book_file(world, lost, "queue/%s.json" % run)["run_id"] == copy["run_id"]
    world["docker"].run("update", "--restart", "no", lost)
    world["docker"].run("kill", lost)
    try:
        found = records(capsys)   # ps: its pass hands the entries over
        assert (found[HANDED]["status"], found[HANDED]["reason"], found[HANDED]["queued_on"]) \
            == ("pending", "dependency", "%s-1" % FLEET), found[HANDED]
        for run in (HANDED, REARMED):
            assert book_file(world, keeper, "queue/%s.json" % run)["handed_from"] == \
                "%s-0" % FLEET

        # Where the runs go: node 1, or node 2 once the idle run there has ended (the tests
        # before may outlast its window); never the lost node.
        def both(found):
            fired = (found.get(REARMED) or {}).get("schedule") or {}
            return found.get(HANDED, {}).get("status") in ("done", "failed", "terminated") \
                and fired.get("firings", 0) >= 1 and found[REARMED]["jobs"][0]["host"] != \
                "%s-0" % FLEET

        found = wait_for(capsys, "the waiting run done and the schedule fired elsewhere", both)
        assert found[HANDED]["status"] == "done", found[HANDED]
        assert found[HANDED]["jobs"][0]["host"] != "%s-0" % FLEET, found[HANDED]
        rearmed_on = found[REARMED]["jobs"][0]["host"]
        assert book_file(world, keeper, "queue/%s.json" % REARMED)["hosts"] == [rearmed_on]
    finally:
        restore_node(world, lost)
    assert book_file(world, lost, "queue/%s.json" % HANDED)["state"] == "pending"
    found = records(capsys)   # a pass: the stale entry and the stale job go, nothing started
    assert book_file(world, lost, "queue/%s.json" % HANDED) is None
    assert REARMED not in world["docker"].run("exec", lost, "ls", "/var/lib/gpufleet/runs")
    assert found[HANDED]["status"] == "done" and found[HANDED]["submission"] == 0, found
    assert [j["host"] for j in found[REARMED]["jobs"]] == [rearmed_on], found[REARMED]
    capsys.readouterr()
    assert cli.main(["logs", HANDED]) == 0
    assert capsys.readouterr().out.count("handed over") == 1
    assert cli.main(["logs", REARMED]) == 0
    assert "rearmed and fired" in capsys.readouterr().out
    assert cli.main(["delete", "-f", cron, "-y"]) == 0
    assert book_file(world, keeper, "queue/%s.json" % REARMED) is None


def test_a_run_whose_gpu_idles_for_its_window_is_terminated_by_its_own_job(
        world, capsys, idle_run):
    found = records(capsys)[IDLE]
    # The tests above may outlast its window: then it has ended already.
    assert found["status"] in ("running", "terminated"), found
    # Nothing of gpufleet runs meanwhile: only the job's own sampler can end it.
    deadline = idle_run["started"] + WINDOW + 30
    while time.time() < deadline:
        capsys.readouterr()
        assert cli.main(["ps", "--json"]) == 0
        found = dict((r["name"], r) for r in json.loads(capsys.readouterr().out))[IDLE]
        if found["status"] not in ("running", "terminating", "provisioning", "pulling",
                                   "submitted"):
            break
        time.sleep(10)
    assert (found["status"], found["reason"]) == (
        "terminated", "terminated_due_to_utilization_policy"), found
    assert found["jobs"][0]["reason"] == "terminated_due_to_utilization_policy"
    ended = datetime.strptime(found["jobs"][0]["finished_at"][:19], "%Y-%m-%dT%H:%M:%S")
    # Its end is said within the window and 30 s; the container itself ends once stopped.
    assert ended.replace(tzinfo=timezone.utc).timestamp() <= deadline + 30, found["jobs"][0]
    capsys.readouterr()
    cli.main(["logs", IDLE])
    out = capsys.readouterr().out
    assert "The job GPU utilization below 10% for 300 seconds: the command was stopped" in out, (
        out)
