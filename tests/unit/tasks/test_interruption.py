# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Interruption (tasks.interruption): a job's host that stops answering is judged from its
backend's record, as an attached runner, ps and the queue's passes see it."""

from __future__ import annotations

import copy
import subprocess
import time

import pytest
from ansible_collections.gpufleet.cluster.plugins.module_utils.tasks import interruption
from ansible_collections.gpufleet.cluster.plugins.module_utils.tasks import lifecycle as lc
from ansible_collections.gpufleet.cluster.plugins.module_utils.tasks import listing, queue, runs, surveys
from ansible_collections.gpufleet.cluster.plugins.module_utils.tasks import ssh, supervisor

from ..configs import task
from .fakes import FakeNode, backend_fleet, facts_of, fleet_with_facts

INTERRUPTED = lc.INTERRUPTED_BY_NO_CAPACITY


def record(status="idle", spot=False, backend="aws", error=None):
    return {"name": "h", "backend": backend, "status": status, "spot": spot, "error": error}


@pytest.mark.parametrize("instance, silent, verdict", [
    (None, 0, INTERRUPTED),                                    # the backend has it no more
    (record("terminated", spot=True,
            error="Server.SpotInstanceTermination"), 0, INTERRUPTED),
    (record("stopped", backend="gcp", spot=True), 0, INTERRUPTED),   # GCE preempted
    (record("stopped", backend="local"), 0, INTERRUPTED),      # a local node killed
    (record("idle", spot=True), 10, None),                     # spot, runs, silent: wait
    (record("idle", spot=True), lc.JOB_DISCONNECTED_GRACE, INTERRUPTED),
    (record("idle"), 10, None),                                # on-demand: wait
    (record("idle"), lc.JOB_DISCONNECTED_GRACE, lc.INSTANCE_UNREACHABLE),
    (record("idle", backend="ssh"), 10, None),
    (record("idle", backend="ssh"), lc.JOB_DISCONNECTED_GRACE, lc.INSTANCE_UNREACHABLE),
])
def test_the_backend_says_whether_a_silent_host_was_interrupted(instance, silent, verdict):
    found = interruption.judge("h", instance, silent)
    assert (found and found[0]) == verdict
    if verdict is not None:
        assert found[1].startswith("host h: ")


@pytest.mark.parametrize("instance, is_gone", [
    (None, True),
    (record("terminated", spot=True), True),
    (record("stopped", backend="local"), True),
    (record("idle", spot=True), False),       # silent, but it runs: it may answer again
    (record("idle"), False),
    (record("idle", backend="ssh"), False),
    ({"backend": "ssh"}, False),              # its fleet could not be described
])
def test_only_an_instance_its_backend_no_longer_runs_is_gone(instance, is_gone):
    assert interruption.gone(instance) is is_gone


def test_the_retry_events_of_the_reasons():
    assert lc.retry_event(INTERRUPTED) == lc.EVENT_INTERRUPTION
    assert lc.retry_event(lc.INSTANCE_UNREACHABLE) == lc.EVENT_ERROR


def gone(fleets, host):
    """The fleets as their backends tell them once ``host``'s instance is gone."""
    fresh = copy.deepcopy(fleets)
    for item in fresh:
        item["instances"] = [i for i in item["instances"] if i["name"] != host]
    return fresh


def test_an_attached_run_whose_host_goes_is_resubmitted_on_interruption(fake_hosts, monkeypatch):
    fleets = [fleet_with_facts(count=3)]
    config = task(nodes=2, retry={"on_events": ["interruption"], "duration": "1h"})
    runner, cluster = fake_hosts(config, fleets, program=lambda job: (
        (None, None) if job["submission"] == 0 else (2, 0)))
    monkeypatch.setattr(surveys, "collect_fleets", lambda *a, **k: gone(fleets, "gpus-1"))

    killed_at = []

    def kill(c):
        if len(c.sleeps) == 3:
            c.nodes["gpus-1"].down = True
            c.nodes["gpus-1"].containers = []
            killed_at.append(len(c.log))

    cluster.hook = kill
    result = runner.run()
    assert (result["status"], result["submissions"]) == (lc.RunStatus.DONE, 2)
    assert sorted(j["host"] for j in result["jobs"]) == ["gpus-0", "gpus-2"]
    lost = [e for e in cluster.job_events(1) if e["status"] == lc.JobStatus.FAILED]
    assert lost[0]["reason"] == INTERRUPTED
    assert lost[0]["message"] == "host gpus-1: the instance is gone (its backend no longer has it)"
    # Once its instance is known gone, the host is not asked again (each request would wait out
    # SSH's connect timeout): not by the watch that stops rank 0, nor by the resubmission.
    assert [op for host, op, _p in cluster.log[killed_at[0]:] if host == "gpus-1"] == ["status"]


def test_a_host_name_that_comes_back_is_a_new_instance_and_is_asked(fake_hosts, monkeypatch):
    """gpus-1 goes; the fleet makes an instance of the same name again, and the resubmission
    runs on it. When gpus-0 goes next, the second resubmission clears gpus-1 as any live host
    (the fleet makes gpus-0 again too, and the third submission ends done)."""
    fleets = [fleet_with_facts()]
    config = task(nodes=2, retry={"on_events": ["interruption"], "duration": "1h"})
    runner, cluster = fake_hosts(config, fleets, program=lambda job: (
        (None, None) if job["submission"] < 2 else (2, 0)))
    lost, marks = [], []

    def described(*_a, **_k):
        """The fleets as the backend tells them: without the host that is down."""
        down = [h for h in lost if cluster.nodes[h].down]
        return gone(fleets, down[0]) if down else copy.deepcopy(fleets)

    def kill(c, host):
        c.nodes[host].down = True
        c.nodes[host].containers = []
        lost.append(host)
        marks.append(len(c.log))

    def refresh():   # the fleet makes an instance of the lost one's name again: a bare host
        for host in lost:
            if cluster.nodes[host].down:
                cluster.nodes[host] = FakeNode(host, cluster)
        runner.fleets = described()
        runner.nodes = surveys.nodes_of(runner.fleets)

    def hook(c):
        if len(c.sleeps) == 3:
            kill(c, "gpus-1")
        elif lost == ["gpus-1"] and len(c.sleeps) > 8:
            kill(c, "gpus-0")

    monkeypatch.setattr(surveys, "collect_fleets", described)
    monkeypatch.setattr(runner, "_refresh_fleets", refresh)
    cluster.hook = hook
    result = runner.run()
    assert (result["status"], result["submissions"]) == (lc.RunStatus.DONE, 3), result["message"]
    after = [op for host, op, _p in cluster.log[marks[1]:] if host == "gpus-1"]
    assert "remove" in after, after


def test_without_retry_the_run_fails_naming_the_host(fake_hosts, monkeypatch):
    fleets = [fleet_with_facts()]
    runner, cluster = fake_hosts(task(nodes=2), fleets)
    monkeypatch.setattr(surveys, "collect_fleets", lambda *a, **k: gone(fleets, "gpus-1"))

    killed_at = []

    def kill(c):
        if len(c.sleeps) == 3:
            c.nodes["gpus-1"].down = True
            killed_at.append(len(c.log))

    cluster.hook = kill
    result = runner.run()
    assert (result["status"], result["reason"]) == (lc.RunStatus.FAILED, "job_failed")
    assert [op for host, op, _p in cluster.log[killed_at[0]:] if host == "gpus-1"] == ["status"]
    assert result["message"] == "job 1: host gpus-1 was interrupted (the instance went away)"
    assert [(j["job_num"], j["status"], j["reason"]) for j in result["jobs"]] == [
        (0, lc.JobStatus.TERMINATED, lc.TERMINATED_BY_SERVER),
        (1, lc.JobStatus.FAILED, INTERRUPTED)]


def test_ps_and_a_pass_see_a_detached_run_whose_host_went(fake_hosts):
    fleets = [fleet_with_facts()]
    runner, cluster = fake_hosts(task(nodes=2), fleets)
    runner.run(wait=False)
    cluster.sleep(1)
    cluster.nodes["gpus-1"].down = True
    instances = interruption.instance_map(gone(fleets, "gpus-1"))
    survey = surveys.survey_with_queues(dict((h, cluster.nodes[h]) for h in cluster.nodes))
    (found,) = listing.run_records(survey[0], survey[3], instances)
    assert found["status"] == lc.RunStatus.TERMINATING   # rank 0 still runs: a pass is due
    assert found["message"] == "host gpus-1: the instance is gone (its backend no longer has it)"
    assert [(j["job_num"], j["host"], j["status"], j["reason"]) for j in found["jobs"]] == [
        (0, "gpus-0", lc.JobStatus.RUNNING, None), (1, "gpus-1", lc.JobStatus.FAILED, INTERRUPTED)]
    assert queue.is_due(survey, instances)
    report = queue.QueuePass(gone(fleets, "gpus-1"), runner_of=runs.runner_of, clock=cluster.clock,
                             sleep=cluster.sleep).run(survey)
    assert report["stopped"] == ["train-0-0"]
    survey = surveys.survey_with_queues(dict((h, cluster.nodes[h]) for h in cluster.nodes))
    (found,) = listing.run_records(survey[0], survey[3], instances)
    assert (found["status"], found["reason"]) == (lc.RunStatus.FAILED, "job_failed")
    assert not queue.is_due(survey, instances)


def test_a_resubmission_grows_its_fleet_when_no_instance_is_free(fake_hosts, monkeypatch):
    """Interrupted on a fleet at its size: the resubmission makes the fleet grow (through the
    grower, the fleet playbook on a controller) and runs on the new instance."""
    full = backend_fleet(name="el", count=3, nodes={"min": 0, "target": 2, "max": 3})
    full["facts"] = facts_of(full)
    config = task(nodes=2, retry={"on_events": ["interruption"], "duration": "1h"})
    runner, cluster = fake_hosts(config, [full], program=lambda job: (
        (None, None) if job["submission"] == 0 else (2, 0)))
    two = dict(full, instances=full["instances"][:2])
    runner.fleets = [two]
    runner.nodes = dict((h, cluster.nodes[h]) for h in ("el-0", "el-1"))
    grown = []
    after = [dict(full, instances=[full["instances"][0], full["instances"][2]])]
    monkeypatch.setattr(surveys, "collect_fleets", lambda *a, **k: copy.deepcopy(
        after if grown else [dict(two, instances=[two["instances"][0]])]))
    runner.grower = grown.append

    def kill(c):
        if len(c.sleeps) == 3:
            c.nodes["el-1"].down = True

    cluster.hook = kill
    result = runner.run()
    assert [(g["fleet"], g["instances"], g["at_least"]) for g in grown] == [("el", 1, 2)]
    assert (result["status"], result["submissions"]) == (lc.RunStatus.DONE, 2)
    assert sorted(j["host"] for j in result["jobs"]) == ["el-0", "el-2"]


def test_the_grower_applies_the_fleet_playbook_with_at_least(tmp_path):
    from ansible_collections.gpufleet.cluster.plugins.module_utils.tasks import grower

    calls = []

    class Proc(object):
        returncode = 0
        stdout = b""

    def run(argv, **kwargs):
        with open(argv[-1][1:]) as handle:
            calls.append((argv[1:-1], __import__("json").load(handle), kwargs["env"]))
        return Proc()

    events = []
    grow = grower.grower(str(tmp_path), events.append, runner=run)
    made_for = {"run": "train", "idle_duration": 600}
    grow({"fleet": "el", "file": "/f/el.dstack.yml", "instances": 2, "at_least": 3,
          "made_for": made_for})
    ((args, extra, env),) = calls
    assert args == ["gpufleet.cluster.fleet", "-e"]
    assert extra == {"fleet": "/f/el.dstack.yml", "gpufleet_fleet_at_least": 3,
                     "gpufleet_fleet_made_for": made_for, "gpufleet_state_dir": str(tmp_path)}
    assert env["GPUFLEET_STATE_DIR"] == str(tmp_path)
    assert events[0]["message"] == "fleet el grows by 2 instances for this run (playbooks/fleet.yml)"
    Proc.returncode = 2
    Proc.stdout = b"TASK [x]\nfatal: no capacity\n"
    with pytest.raises(runs.RunError, match="fleet el could not grow .*fatal: no capacity"):
        grow({"fleet": "el", "file": "/f/el.dstack.yml", "instances": 1, "at_least": 2})


def test_a_host_that_holds_the_status_look_is_silent_after_the_status_timeout(monkeypatch):
    """A host gone without a word (its packets dropped) holds a request on its shared SSH
    connection until OpenSSH's keepalives give up, a minute. The watch's look gives it
    STATUS_TIMEOUT, then counts it as silent, so that its backend is asked; the other hosts'
    answers still count."""
    monkeypatch.setattr(supervisor, "STATUS_TIMEOUT", 0.3)

    def held(argv, input=None, stdout=None, stderr=None, timeout=None, check=False):
        # ssh that gets no answer: a process that outlives the request's time.
        return subprocess.run(["sleep", "30"], stdout=stdout, stderr=stderr, timeout=timeout,
                              check=check)

    class Answering(object):
        def call(self, op, payload=None, timeout=None):
            assert (op, timeout) == ("status", 0.3)
            return {"containers": [{"name": "train-0-0", "state": "running", "labels": {
                supervisor.RUN_LABEL: "train", supervisor.JOB_LABEL: "0",
                supervisor.SUBMISSION_LABEL: "0"}}]}

    silent = ssh.Node({"name": "gpus-1", "backend": "aws", "hostname": "192.0.2.1", "user": "root",
                       "port": 22},
                      runner=held)
    begun = time.monotonic()
    found, errors = supervisor.observe({"gpus-0": Answering(), "gpus-1": silent}, "train", 0)
    assert time.monotonic() - begun < 10
    assert sorted(found) == [0] and found[0]["host"] == "gpus-0"
    assert list(errors) == ["gpus-1"]
    assert "no answer within 0.3 s to: the status request" in str(errors["gpus-1"])


def test_ps_and_the_queues_pass_give_each_host_the_status_timeout(monkeypatch, tmp_path):
    """ps (run_info), the pass it runs (run_queue) and a pass's own look give each host the
    watch's STATUS_TIMEOUT, so a host that went away silently holds them 15 s, not a minute;
    a survey for placement, stop or logs keeps the request's default (a first page of logs
    over a slow link, a slow host that must not drop out of a placement)."""
    from ansible_collections.gpufleet.cluster.plugins.module_utils.tasks import actions

    asked = []

    class Recording(object):
        def __init__(self, name):
            self.name = name

        def call(self, op, payload=None, **kwargs):
            asked.append((self.name, op, kwargs.get("timeout", "default")))
            return {"containers": [], "claims": [], "queue": []}

    nodes = dict((h, Recording(h)) for h in ("a", "b"))
    monkeypatch.setattr(actions, "_fleets", lambda params, host_facts=False: (str(tmp_path), [fleet_with_facts()]))
    monkeypatch.setattr(surveys, "nodes_of", lambda *_a, **_k: nodes)
    actions.run_info({})
    actions.run_queue({})
    queue.QueuePass([fleet_with_facts()], runner_of=runs.runner_of).run()
    assert asked and all(t == supervisor.STATUS_TIMEOUT for _h, _op, t in asked), asked
    del asked[:]
    surveys.survey_with_queues(nodes, probe=["b"], health={})
    surveys.survey_with_queues(nodes, logs={"run": "x"})
    assert [t for _h, _op, t in asked] == ["default"] * 4


def test_an_attached_runs_verdict_on_a_silent_host_stands_when_the_host_comes_back(
        fake_hosts, monkeypatch):
    """gpus-1 goes silent (its backend still runs it: an SSH fleet knows nothing more); after
    two minutes its job fails instance_unreachable. Right after, the host answers again with
    the job still running there: the verdict stands, that container is stopped, and retry on
    error resubmits the run, which ends done."""
    fleets = [fleet_with_facts()]
    config = task(nodes=2, retry={"on_events": ["error"], "duration": "1h"})
    runner, cluster = fake_hosts(config, fleets, program=lambda job: (
        (None, None) if job["submission"] == 0 else (2, 0)))
    monkeypatch.setattr(surveys, "collect_fleets", lambda *a, **k: copy.deepcopy(fleets))

    def partition(c):
        if len(c.sleeps) == 3:
            c.nodes["gpus-1"].down = True
        elif c.nodes["gpus-1"].down and any(e["status"] == lc.JobStatus.FAILED
                                            for e in c.job_events(1)):
            c.nodes["gpus-1"].down = False   # back, its job still running

    cluster.hook = partition
    result = runner.run()
    failed = [e for e in cluster.job_events(1) if e["status"] == lc.JobStatus.FAILED]
    assert failed[0]["reason"] == lc.INSTANCE_UNREACHABLE
    assert (result["status"], result["submissions"]) == (lc.RunStatus.DONE, 2), result["message"]
    stops = [(host, p) for host, op, p in cluster.log if op == "stop" and host == "gpus-1"]
    assert any(j["container"] == "train-1-0" for _h, p in stops for j in p["jobs"])


def local_fleet(stopped=()):
    """Two local nodes as their backend describes them, ``stopped`` ones with their container
    exited (a node killed and not started again)."""
    described = fleet_with_facts()
    for inst in described["instances"]:
        inst.update(backend="local", status="stopped" if inst["name"] in stopped else "idle")
    return described


def ps_status(cluster, name):
    """The status gpufleet ps gives run ``name`` now (tasks.listing, from what the hosts
    hold, queue entries included)."""
    containers, queues, errors = {}, {}, {}
    for host, node in sorted(cluster.nodes.items()):   # one thread: the hook holds the lock
        try:
            answer = node.call("status")
        except ssh.NodeError as exc:
            errors[host] = str(exc)
            continue
        containers[host], queues[host] = answer["containers"], answer["queue"]
    records = listing.with_queue(listing.run_records(containers, errors), queues)
    return next((r["status"] for r in records if r["name"] == name), None)


def test_an_attached_retry_sees_its_killed_node_come_back_and_ps_says_pending(
        fake_hosts, monkeypatch):
    """A one-node run pinned to gpus-1, retry on interruption and no-capacity. gpus-1 is
    killed: the run is interrupted, and its resubmission finds no capacity (gpus-1 is its only
    host). While it waits, it is pending where gpus-1 ps reads it (an entry in gpus-0's
    queue), and each try asks the backend again: once gpus-1 runs again, the run is submitted
    there and ends done, and its entry is gone."""
    config = task(nodes=1, instances=["gpus-1"],
                  retry={"on_events": ["interruption", "no-capacity"], "duration": "1h"})
    runner, cluster = fake_hosts(config, [local_fleet()], program=lambda job: (
        (None, None) if job["submission"] == 0 else (2, 0)))
    state = {"killed": False, "seen": []}
    monkeypatch.setattr(surveys, "collect_fleets", lambda *a, **k: [local_fleet(
        ["gpus-1"] if cluster.nodes["gpus-1"].down else [])])

    def hook(c):
        node = c.nodes["gpus-1"]
        if len(c.sleeps) == 3 and not state["killed"]:
            state["killed"] = True
            node.down, node.containers = True, []
        entry = c.nodes["gpus-0"].queue.get("train")
        if node.down and entry and entry["state"] == "pending":
            state["seen"].append(ps_status(c, "train"))
            if len(state["seen"]) == 3:
                node.down = False   # docker start: the node runs again

    cluster.hook = hook
    result = runner.run()
    assert state["seen"] == [lc.RunStatus.PENDING] * 3
    assert (result["status"], result["submissions"]) == (lc.RunStatus.DONE, 2), result["message"]
    assert [j["host"] for j in result["jobs"]] == ["gpus-1"]
    assert "train" not in cluster.nodes["gpus-0"].queue
    waits = [e["message"] for _t, e in cluster.events
             if e["kind"] == "run" and e["status"] == lc.RunStatus.PENDING]
    assert any(m.startswith("waiting for capacity in the queue (kept on gpus-0)")
               for m in waits), waits


def test_an_attached_retry_that_waits_without_a_queue_host_asks_the_backend_each_try(
        fake_hosts, monkeypatch):
    """The same with one node: no other host can keep the entry, so the command waits itself,
    and still asks the backend again before every try."""
    one = local_fleet()
    one["instances"] = one["instances"][1:]
    config = task(nodes=1,
                  retry={"on_events": ["interruption", "no-capacity"], "duration": "1h"})
    runner, cluster = fake_hosts(config, [one], program=lambda job: (
        (None, None) if job["submission"] == 0 else (2, 0)))
    described = []

    def describe(*_a, **_k):
        fresh = copy.deepcopy(one)
        down = cluster.nodes["gpus-1"].down
        fresh["instances"][0]["status"] = "stopped" if down else "idle"
        described.append(down)
        return [fresh]

    monkeypatch.setattr(surveys, "collect_fleets", describe)

    def hook(c):
        node = c.nodes["gpus-1"]
        if len(c.sleeps) == 3 and not described:
            node.down, node.containers = True, []
        elif node.down and described.count(True) >= 4:
            node.down = False

    cluster.hook = hook
    result = runner.run()
    assert (result["status"], result["submissions"]) == (lc.RunStatus.DONE, 2), result["message"]
