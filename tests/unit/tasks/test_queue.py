# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The queue without a server (tasks.queue): pending runs kept on a fleet host, started in
priority order by whatever pass comes next, and detached runs resubmitted under retry.

The fake hosts of fakes.py keep claims and queue entries as tasks.hostside.booking does.
"""

from __future__ import annotations

from ansible_collections.gpufleet.cluster.plugins.module_utils.tasks import lifecycle as lc
from ansible_collections.gpufleet.cluster.plugins.module_utils.tasks import queue, queue_records, runs, surveys

from ..configs import task
from .fakes import JOB_LABEL, RUN_LABEL, STARTED, SUB_LABEL, container, fleet_with_facts

WAIT = {"on_events": ["no-capacity"], "duration": "10m"}


def occupy(cluster, hosts, run="first"):
    """A run of another submitter alive on ``hosts``."""
    for num, host in enumerate(hosts):
        cluster.nodes[host].containers.append(container(
            "%s-%d-0" % (run, num), {RUN_LABEL: run, JOB_LABEL: str(num), SUB_LABEL: "0",
                                     "gpufleet.blocks": "1"},
            state="running", running=STARTED))


def free(cluster, run="first"):
    for node in cluster.nodes.values():
        for box in node.containers:
            if box["labels"][RUN_LABEL] == run:
                box["state"] = "exited"
                box["files"]["exit_code"] = "0"


def submit_detached(fake_hosts, cluster, config, fleets):
    runner = runs.Runner(config, fleets, emit=cluster.emit, clock=cluster.clock,
                         sleep=cluster.sleep, poll=1.0, environ={})
    return runner.run(wait=False)


def a_pass(cluster, fleets):
    return queue.QueuePass(fleets, runner_of=runs.runner_of, clock=cluster.clock,
                           sleep=cluster.sleep, poll=1.0, emit=cluster.emit).run()


def test_a_detached_run_without_capacity_waits_in_the_queue_of_its_fleet(fake_hosts):
    fleets = [fleet_with_facts()]
    runner, cluster = fake_hosts(task(nodes=2, retry=WAIT), fleets)
    occupy(cluster, ["gpus-0"])
    result = runner.run(wait=False)
    assert result["status"] == lc.RunStatus.PENDING
    assert result["message"] == "waiting for capacity (queue position 1, kept on gpus-0)"
    entry = cluster.nodes["gpus-0"].queue["train"]
    assert (entry["state"], entry["priority"], entry["run_id"]) == ("pending", 0, runner.run_id)
    assert "gpus-0: busy" in entry["reason"]
    assert cluster.ops("start") == []


def test_a_pass_starts_the_higher_priority_first_and_keeps_the_other_waiting(fake_hosts):
    fleets = [fleet_with_facts()]
    _runner, cluster = fake_hosts(task(), fleets, program=lambda job: (None, None))
    occupy(cluster, ["gpus-0", "gpus-1"])
    low = task(name="low", nodes=2, priority=10, retry=WAIT)
    high = task(name="high", nodes=2, priority=90, retry=WAIT)
    assert submit_detached(fake_hosts, cluster, low, fleets)["status"] == lc.RunStatus.PENDING
    cluster.now += 1
    assert submit_detached(fake_hosts, cluster, high, fleets)["status"] == lc.RunStatus.PENDING
    # Nothing fits yet: the pass leaves both waiting.
    assert a_pass(cluster, fleets)["started"] == []
    free(cluster)
    report = a_pass(cluster, fleets)
    assert report["started"] == ["high"]
    assert sorted(set(p["job"]["run"] for _h, p in cluster.ops("start"))) == ["high"]
    queued = cluster.nodes["gpus-0"].queue
    assert "high" not in queued   # no retry on error: nothing to keep once started
    assert queued["low"]["state"] == "pending"
    assert queue_records.positions(queue_records.entries_of(
        {"gpus-0": list(queued.values())})) == {"low": 1}


def test_a_detached_run_with_retry_on_error_is_resubmitted_by_the_next_pass(fake_hosts):
    fleets = [fleet_with_facts()]
    config = task(nodes=2, retry={"on_events": ["error"], "duration": "1h"})
    runner, cluster = fake_hosts(config, fleets, program=lambda job: (
        (1, 3) if job["submission"] == 0 and job["job_num"] == 1 else (None, None)))
    result = runner.run(wait=False)
    assert result["status"] not in (lc.RunStatus.FAILED, lc.RunStatus.PENDING)
    entry = cluster.nodes["gpus-0"].queue["train"]
    assert (entry["state"], entry["hosts"]) == ("active", ["gpus-0", "gpus-1"])
    cluster.sleep(1)
    cluster.sleep(1)   # rank 1 exits 3; rank 0 still runs (its peers' stop is the wrapper's)
    report = a_pass(cluster, fleets)
    assert report["resubmitted"] == ["train"] and report["started"] == ["train"]
    subs = sorted((c["labels"][SUB_LABEL], c["labels"][JOB_LABEL])
                  for n in cluster.nodes.values() for c in n.containers)
    assert subs == [("1", "0"), ("1", "1")]   # the failed submission's containers went
    entry = cluster.nodes["gpus-0"].queue["train"]
    assert (entry["state"], entry["submissions"]) == ("active", 1)


def test_a_pass_does_not_take_a_stop_for_a_job_that_ended_by_itself(fake_hosts):
    """Rank 1 failed; rank 0 ran when the pass looked, and ended by itself (code 0) just before
    the pass's stop reached it. Its status is its own, not the stop's: the pass decides
    nothing more on a guess, and the next one reads it and resubmits."""
    fleets = [fleet_with_facts()]
    config = task(nodes=2, retry={"on_events": ["error"], "duration": "1h"})
    runner, cluster = fake_hosts(config, fleets, program=lambda job: (
        (1, 3) if job["submission"] == 0 and job["job_num"] == 1 else (None, None)))
    runner.run(wait=False)
    cluster.sleep(1)
    cluster.sleep(1)   # rank 1 exits 3; rank 0 still runs

    def ends_by_itself(node):
        box = next(c for c in node.containers if c["name"] == "train-0-0")
        box["state"], box["files"]["exit_code"] = "exited", "0"

    cluster.nodes["gpus-0"].before_stop = ends_by_itself
    report = a_pass(cluster, fleets)
    assert report["stopped"] == ["train-0-0"] and report["resubmitted"] == []
    box = next(c for c in cluster.nodes["gpus-0"].containers if c["name"] == "train-0-0")
    assert box["files"]["reason"] is None
    assert lc.job_status(box) == (lc.JobStatus.DONE, None, 0)
    report = a_pass(cluster, fleets)
    assert report["resubmitted"] == ["train"]


def test_a_pending_run_past_its_retry_duration_fails_with_no_capacity(fake_hosts):
    fleets = [fleet_with_facts()]
    _runner, cluster = fake_hosts(task(), fleets)
    occupy(cluster, ["gpus-0", "gpus-1"])
    config = task(name="late", retry={"on_events": ["no-capacity"], "duration": "1m"})
    assert submit_detached(fake_hosts, cluster, config, fleets)["status"] == lc.RunStatus.PENDING
    cluster.now += 61
    assert a_pass(cluster, fleets)["expired"] == ["late"]
    entry = cluster.nodes["gpus-0"].queue["late"]
    assert (entry["state"], entry["reason"]) == ("failed", lc.NO_CAPACITY)


def test_a_stop_while_a_pass_submits_the_entry_wins(fake_hosts):
    fleets = [fleet_with_facts()]
    _runner, cluster = fake_hosts(task(), fleets, program=lambda job: (None, None))
    occupy(cluster, ["gpus-0", "gpus-1"])
    config = task(name="late", retry=WAIT)
    assert submit_detached(fake_hosts, cluster, config, fleets)["status"] == lc.RunStatus.PENDING
    free(cluster)

    def user_stops(node):   # between the pass's take and its start
        entry = cluster.nodes["gpus-0"].queue["late"]
        entry.update(state="terminated", taken_by=None, taken_until=None)

    cluster.nodes["gpus-0"].before_claim = user_stops
    report = a_pass(cluster, fleets)
    assert report["started"] == []
    assert cluster.ops("start") == []
    assert all(c["run"] != "late" for n in cluster.nodes.values() for c in n.claims)
    assert cluster.nodes["gpus-0"].queue["late"]["state"] == "terminated"


def test_ps_lists_one_record_when_a_name_is_queued_on_two_hosts():
    from ansible_collections.gpufleet.cluster.plugins.module_utils.tasks import listing

    old = {"run": "r", "run_id": "a", "state": "failed", "submitted_epoch": 1.0,
           "submitted_at": "2026-01-01T00:00:00Z", "reason": "x"}
    new = dict(old, run_id="b", state="pending", submitted_epoch=2.0,
               submitted_at="2026-01-02T00:00:00Z")
    records = [{"name": "r", "run_id": "c", "submitted": "2025-12-31T00:00:00Z", "jobs": []}]
    out = listing.with_queue(records, {"h0": [old], "h1": [new]})
    assert [(r["name"], r["run_id"], r["status"]) for r in out] == [("r", "b", "pending")]


def test_logs_of_a_queued_run_are_empty_and_follow_waits_for_its_wait_to_end(fake_hosts):
    from ansible_collections.gpufleet.cluster.plugins.module_utils.tasks import listing

    fleets = [fleet_with_facts()]
    _runner, cluster = fake_hosts(task(), fleets)
    occupy(cluster, ["gpus-0", "gpus-1"])
    config = task(name="late", retry=WAIT)
    assert submit_detached(fake_hosts, cluster, config, fleets)["status"] == lc.RunStatus.PENDING
    record, lines = listing.run_logs(cluster.nodes, "late")
    assert (record["status"], list(lines)) == (lc.RunStatus.PENDING, [])
    said, naps = [], []

    def nap(seconds):   # the user stops it while follow waits
        naps.append(seconds)
        cluster.nodes["gpus-0"].queue["late"].update(state="terminated",
                                                     reason=lc.TERMINATED_BY_USER)

    ended = listing.follow_logs(cluster.nodes, "late", said.append, sleep=nap)
    assert ended["status"] == lc.RunStatus.TERMINATED and naps == [listing.QUEUE_POLL]
    assert [e["message"] for e in said] == [
        "pending (queue position 1 on gpus-0): waiting for it to start"]


def test_attach_to_a_queued_run_says_it_is_not_running_yet_and_ps_finds_it(
        fake_hosts, tmp_path):
    from ansible_collections.gpufleet.cluster.plugins.module_utils.attach import session
    from ansible_collections.gpufleet.cluster.plugins.module_utils.tasks import listing

    fleets = [fleet_with_facts()]
    _runner, cluster = fake_hosts(task(), fleets)
    occupy(cluster, ["gpus-0", "gpus-1"])
    config = task(name="late", retry=WAIT)
    assert submit_detached(fake_hosts, cluster, config, fleets)["status"] == lc.RunStatus.PENDING
    containers, _claims, queues, errors = surveys.survey_with_queues(cluster.nodes)
    record, mine = listing.find_run(cluster.nodes, "late", (containers, errors), queues)
    assert (record["status"], mine) == (lc.RunStatus.PENDING, {})
    try:
        session.attach({"name": "late"}, cluster.nodes, str(tmp_path / "state"))
    except session.AttachError as exc:
        # gpufleet attach waits on these words, as dstack's attach waits for a run to start.
        assert "run late is pending (queue position 1 on gpus-0)" in str(exc)
        assert "not running yet" in str(exc)
    else:
        raise AssertionError("attach to a queued run did not refuse")
    # Without its queue entry nothing has that name (what attach says once it stopped waiting).
    try:
        listing.find_run(cluster.nodes, "late", (containers, errors))
    except Exception as exc:
        assert "no run named late" in str(exc)
    else:
        raise AssertionError("a queued run was found among containers")
