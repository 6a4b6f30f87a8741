# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Interruption (tasks.interruption): a job's host that stops answering is judged from its
backend's record, as an attached runner, ps and the queue's passes see it."""

from __future__ import annotations

import copy

import pytest
from ansible_collections.gpufleet.cluster.plugins.module_utils.tasks import interruption
from ansible_collections.gpufleet.cluster.plugins.module_utils.tasks import lifecycle as lc
from ansible_collections.gpufleet.cluster.plugins.module_utils.tasks import listing, queue, runs

from . import test_task_runs
from .test_task_runs import fleet, task

fake_hosts = test_task_runs.fake_hosts  # the fixture

INTERRUPTED = lc.INTERRUPTED_BY_NO_CAPACITY


def record(status="idle", spot=False, backend="aws", error=None):
    return {"name": "h", "backend": backend, "status": status, "spot": spot, "error": error}


@pytest.mark.parametrize("instance, silent, verdict", [
    (None, 0, INTERRUPTED),                                    # the backend has it no more
    (record("terminated", spot=True,
            error="Server.SpotInstanceTermination"), 0, INTERRUPTED),
    (record("stopped", backend="gcp", spot=True), 0, INTERRUPTED),   # GCE preempted
    (record("stopped", backend="local"), 0, INTERRUPTED),      # a local node killed
    (record("idle", spot=True), 0, INTERRUPTED),               # spot and silent
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
    fleets = [fleet(count=3)]
    config = task(nodes=2, retry={"on_events": ["interruption"], "duration": "1h"})
    runner, cluster = fake_hosts(config, fleets, program=lambda job: (
        (None, None) if job["submission"] == 0 else (2, 0)))
    monkeypatch.setattr(runs, "collect_fleets", lambda *a, **k: gone(fleets, "gpus-1"))

    killed_at = []

    def kill(c):
        if len(c.sleeps) == 3:
            c.nodes["gpus-1"].down = True
            c.nodes["gpus-1"].containers = []
            killed_at.append(len(c.log))

    cluster.hook = kill
    result = runner.run()
    assert (result["status"], result["submissions"]) == (lc.RUN_DONE, 2)
    assert sorted(j["host"] for j in result["jobs"]) == ["gpus-0", "gpus-2"]
    lost = [e for e in cluster.job_events(1) if e["status"] == lc.FAILED]
    assert lost[0]["reason"] == INTERRUPTED
    assert lost[0]["message"] == "host gpus-1: the instance is gone (its backend no longer has it)"
    # Once its instance is known gone, the host is not asked again (each request would wait out
    # SSH's connect timeout): not by the watch that stops rank 0, nor by the resubmission.
    assert [op for host, op, _p in cluster.log[killed_at[0]:] if host == "gpus-1"] == ["status"]


def test_a_host_name_that_comes_back_is_a_new_instance_and_is_asked(fake_hosts, monkeypatch):
    """gpus-1 goes; the fleet makes an instance of the same name again, and the resubmission
    runs on it. When gpus-0 goes next, the second resubmission clears gpus-1 as any live host
    (the fleet makes gpus-0 again too, and the third submission ends done)."""
    fleets = [fleet()]
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
                cluster.nodes[host] = test_task_runs.FakeNode(host, cluster)
        runner.fleets = described()
        runner.nodes = runs.nodes_of(runner.fleets)

    def hook(c):
        if len(c.sleeps) == 3:
            kill(c, "gpus-1")
        elif lost == ["gpus-1"] and len(c.sleeps) > 8:
            kill(c, "gpus-0")

    monkeypatch.setattr(runs, "collect_fleets", described)
    monkeypatch.setattr(runner, "_refresh_fleets", refresh)
    cluster.hook = hook
    result = runner.run()
    assert (result["status"], result["submissions"]) == (lc.RUN_DONE, 3), result["message"]
    after = [op for host, op, _p in cluster.log[marks[1]:] if host == "gpus-1"]
    assert "remove" in after, after


def test_without_retry_the_run_fails_naming_the_host(fake_hosts, monkeypatch):
    fleets = [fleet()]
    runner, cluster = fake_hosts(task(nodes=2), fleets)
    monkeypatch.setattr(runs, "collect_fleets", lambda *a, **k: gone(fleets, "gpus-1"))

    killed_at = []

    def kill(c):
        if len(c.sleeps) == 3:
            c.nodes["gpus-1"].down = True
            killed_at.append(len(c.log))

    cluster.hook = kill
    result = runner.run()
    assert (result["status"], result["reason"]) == (lc.RUN_FAILED, "job_failed")
    assert [op for host, op, _p in cluster.log[killed_at[0]:] if host == "gpus-1"] == ["status"]
    assert result["message"] == "job 1: host gpus-1 was interrupted (the instance went away)"
    assert [(j["job_num"], j["status"], j["reason"]) for j in result["jobs"]] == [
        (0, lc.TERMINATED, lc.TERMINATED_BY_SERVER), (1, lc.FAILED, INTERRUPTED)]


def test_ps_and_a_pass_see_a_detached_run_whose_host_went(fake_hosts):
    fleets = [fleet()]
    runner, cluster = fake_hosts(task(nodes=2), fleets)
    runner.run(wait=False)
    cluster.sleep(1)
    cluster.nodes["gpus-1"].down = True
    instances = interruption.instance_map(gone(fleets, "gpus-1"))
    survey = runs.survey_with_queues(dict((h, cluster.nodes[h]) for h in cluster.nodes))
    (found,) = listing.run_records(survey[0], survey[3], instances)
    assert found["status"] == lc.RUN_TERMINATING   # rank 0 still runs: a pass is due
    assert found["message"] == "host gpus-1: the instance is gone (its backend no longer has it)"
    assert [(j["job_num"], j["host"], j["status"], j["reason"]) for j in found["jobs"]] == [
        (0, "gpus-0", lc.RUNNING, None), (1, "gpus-1", lc.FAILED, INTERRUPTED)]
    assert queue.is_due(survey, instances)
    report = queue.QueuePass(gone(fleets, "gpus-1"), clock=cluster.clock,
                             sleep=cluster.sleep).run(survey)
    assert report["stopped"] == ["train-0-0"]
    survey = runs.survey_with_queues(dict((h, cluster.nodes[h]) for h in cluster.nodes))
    (found,) = listing.run_records(survey[0], survey[3], instances)
    assert (found["status"], found["reason"]) == (lc.RUN_FAILED, "job_failed")
    assert not queue.is_due(survey, instances)


def test_a_resubmission_grows_its_fleet_when_no_instance_is_free(fake_hosts, monkeypatch):
    """Interrupted on a fleet at its size: the resubmission makes the fleet grow (through the
    grower, the fleet playbook on a controller) and runs on the new instance."""
    from .test_task_growth import backend_fleet, facts_of

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
    monkeypatch.setattr(runs, "collect_fleets", lambda *a, **k: copy.deepcopy(
        after if grown else [dict(two, instances=[two["instances"][0]])]))
    runner.grower = grown.append

    def kill(c):
        if len(c.sleeps) == 3:
            c.nodes["el-1"].down = True

    cluster.hook = kill
    result = runner.run()
    assert [(g["fleet"], g["instances"], g["at_least"]) for g in grown] == [("el", 1, 2)]
    assert (result["status"], result["submissions"]) == (lc.RUN_DONE, 2)
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
