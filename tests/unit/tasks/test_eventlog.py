# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Reading the hosts' event records (tasks.eventlog): one copy of each event, the host named,
a job's end given its status by the rules of ps, and the run's own events derived from its
jobs' in order."""

from __future__ import annotations

import pytest
from ansible_collections.gpufleet.cluster.plugins.module_utils.tasks import eventlog

from ansible_collections.gpufleet.cluster.plugins.module_utils.tasks.usage import UsageError

from .fakes import RecordsNode

NOW = 1780000000.0


def ev(kind, at, run="train", job=0, submission=0, **fields):
    made = {"id": "%s/%s/%s/%s" % (run, job, submission, kind), "kind": kind, "at": NOW + at,
            "run": run, "run_id": "id-" + run, "job": job, "submission": submission,
            "fleet": "gpus"}
    if kind == "job.created":
        made.update(nodes=fields.pop("nodes", 1), policy=fields.pop("policy", {}),
                    actor=fields.pop("actor", "ann"))
    made.update(fields)
    return made


def FakeNode(items=(), error=None):
    return RecordsNode("events", items, error, NOW)


def derived(events):
    return [(e["kind"], e.get("old_status"), e.get("status"), e.get("reason"))
            for e in eventlog.derive(events) if e["kind"].startswith("run.")]


def test_a_run_that_ends_well_is_submitted_runs_and_is_done():
    events = [ev("job.created", 0), ev("job.started", 2),
              ev("job.ended", 9, exit_code=0, started=True)]
    assert derived(events) == [
        ("run.submitted", None, None, None),
        ("run.status", "submitted", "provisioning", None),
        ("run.status", "provisioning", "running", None),
        ("run.status", "running", "done", "all_jobs_done")]
    ended = [e for e in eventlog.derive(events) if e["kind"] == "job.ended"][0]
    assert (ended["status"], ended["reason"], ended["exit_code"]) == ("done", None, 0)


def test_a_two_node_run_runs_when_both_jobs_run_and_fails_when_one_fails():
    events = [ev("job.created", 0, job=0, nodes=2), ev("job.created", 0, job=1, nodes=2),
              ev("job.started", 1, job=0), ev("job.started", 3, job=1),
              ev("job.ended", 5, job=1, exit_code=1, started=True),
              ev("job.stopping", 6, job=0, reason="terminated_by_server"),
              ev("job.ended", 7, job=0, exit_code=143, reason="terminated_by_server",
                 started=True)]
    steps = derived(events)
    assert steps[0] == ("run.submitted", None, None, None)
    assert [s[2] for s in steps[1:]] == ["provisioning", "running", "terminating", "failed"]
    assert steps[-1][3] == "job_failed"


def said_end(at, status, reason, run="train", submission=0):
    """A multi-node run's end as its job 0's host records it (tasks.hostside.eventside)."""
    return {"id": "%s/id-%s/%s/run.status/%s" % (run, run, submission, status),
            "kind": "run.status", "at": NOW + at, "run": run, "run_id": "id-" + run,
            "submission": submission, "fleet": "gpus", "status": status, "reason": reason,
            "nodes": 2}


def test_a_multi_node_runs_end_said_by_its_job_0s_host_is_the_derived_one_or_stands_in():
    both = [ev("job.created", 0, job=0, nodes=2), ev("job.created", 0, job=1, nodes=2),
            ev("job.started", 1, job=0), ev("job.started", 1, job=1),
            ev("job.ended", 4, job=0, exit_code=0, started=True)]
    last = ev("job.ended", 5, job=1, exit_code=0, started=True)
    # Both jobs' ends read: the end is derived once; the host's is the same event.
    found = eventlog.derive(both + [last, said_end(6, "done", "all_jobs_done")])
    ends = [e for e in found if e["kind"] == "run.status" and e.get("reason")]
    assert [(e["status"], e["at"]) for e in ends] == [("done", NOW + 5)]
    # Job 1's host did not answer: the host's word says how the run ended, after the rest.
    found = eventlog.derive(both + [said_end(6, "done", "all_jobs_done")])
    assert [(e["kind"], e.get("old_status"), e.get("status")) for e in found][-1] == (
        "run.status", "running", "done")
    assert found[-1]["id"] == "train/id-train/0/run.status/done"


def test_a_retry_is_a_resubmission_and_a_stop_by_a_user_ends_it_terminated():
    events = [ev("job.created", 0), ev("job.started", 1),
              ev("job.ended", 2, exit_code=1, started=True),
              ev("job.created", 10, submission=1), ev("job.started", 11, submission=1),
              ev("job.stopping", 12, submission=1, reason="terminated_by_user", actor="bob"),
              ev("job.ended", 13, submission=1, exit_code=143, reason="terminated_by_user",
                 started=True)]
    steps = derived(events)
    assert ("run.retried", None, None, None) in steps
    assert steps[-1] == ("run.status", "terminating", "terminated", "terminated_by_user")


def test_a_run_that_waited_in_the_queue_is_not_said_submitted_twice():
    queued = {"id": "q1", "kind": "run.queued", "at": NOW - 5, "run": "train",
              "run_id": "id-train", "state": "pending", "reason": "dependency"}
    taken = dict(queued, id="q2", at=NOW - 1, state="active", old_state="pending")
    steps = [(e["kind"], e.get("old_status"), e.get("status"))
             for e in eventlog.derive([queued, taken, ev("job.created", 0)])]
    assert steps == [("run.queued", None, None), ("run.queued", None, None),
                     ("job.created", None, None), ("run.status", "pending", "submitted"),
                     ("run.status", "submitted", "provisioning")]


def test_each_firing_of_a_scheduled_run_comes_from_pending_and_goes_back_to_it():
    cron = {"schedule": ["* * * * *"]}
    first, second = 29933961, 29933962   # each firing is the submission of its cron minute
    events = [ev("job.created", 0, submission=first, policy=cron),
              ev("job.started", 1, submission=first),
              ev("job.ended", 2, submission=first, exit_code=0, started=True),
              ev("job.created", 60, submission=second, policy=cron),
              ev("job.started", 61, submission=second),
              ev("job.stopping", 62, submission=second, reason="terminated_by_user"),
              ev("job.ended", 63, submission=second, exit_code=143,
                 reason="terminated_by_user", started=True)]
    assert derived(events) == [
        ("run.status", "pending", "submitted", None),
        ("run.status", "submitted", "provisioning", None),
        ("run.status", "provisioning", "running", None),
        ("run.status", "running", "done", "all_jobs_done"),
        ("run.status", "done", "pending", None),
        ("run.status", "pending", "submitted", None),
        ("run.status", "submitted", "provisioning", None),
        ("run.status", "provisioning", "running", None),
        ("run.status", "running", "terminating", None),
        ("run.status", "terminating", "terminated", "terminated_by_user")]   # stopped for good
    ids = [e["id"] for e in eventlog.derive(events)]
    assert len(ids) == len(set(ids))


def test_a_job_that_never_started_failed_on_setup():
    events = [ev("job.created", 0, detail="no such image"),
              ev("job.ended", 1, reason="executor_error", started=False)]
    ended = eventlog.derive(events)[-2:]
    assert [(e["kind"], e.get("status"), e.get("reason")) for e in ended] == [
        ("job.ended", "failed", "executor_error"), ("run.status", "failed", "job_failed")]


def test_the_hosts_are_asked_at_once_each_event_kept_once_and_the_silent_named():
    applied = {"id": "x/fleet", "kind": "fleet.applied", "at": NOW - 50, "fleet": "gpus",
               "actor": "ann", "detail": "Instances added: gpus-1"}
    nodes = {"gpus-0": FakeNode([applied, ev("job.created", 0), ev("job.started", 1)]),
             "gpus-1": FakeNode([applied]),
             "gpus-2": FakeNode(error="ssh: connect timed out")}

    found = eventlog.report([{"name": "gpus"}], now=NOW + 100, nodes=nodes)

    assert nodes["gpus-0"].asked == [("events", {"since": None, "run": None})]
    assert found["unreachable"] == {"gpus-2": "ssh: connect timed out"}
    kinds = [e["kind"] for e in found["events"]]
    assert kinds == ["fleet.applied", "job.created", "run.submitted", "run.status",
                     "job.started", "run.status"]
    created = found["events"][1]
    assert created["instance"] == "gpus-0" and created["host"] == "gpus-0"
    assert created["targets"] == [{"type": "job", "name": "train-0-0"},
                                  {"type": "instance", "name": "gpus-0"}]
    assert created["recorded_at"] == "2026-05-28T20:26:40.000000Z"
    assert "policy" not in created
    assert found["events"][0]["message"] == "Fleet applied. Instances added: gpus-1"


def test_since_asks_from_earlier_to_derive_and_shows_only_what_is_newer():
    nodes = {"gpus-0": FakeNode([ev("job.created", -7200), ev("job.started", -7100),
                                 ev("job.ended", -60, exit_code=0, started=True)])}

    found = eventlog.report([{"name": "gpus"}], since="10m", now=NOW, nodes=nodes)

    assert nodes["gpus-0"].asked == [("events", {"since": NOW - 600 - eventlog.LOOK_BACK,
                                                 "run": None})]
    assert [(e["kind"], e.get("status")) for e in found["events"]] == [
        ("job.ended", "done"), ("run.status", "done")]


def test_one_run_is_asked_for_alone_and_the_last_events_are_kept_without_since():
    nodes = {"gpus-0": FakeNode([ev("job.created", i, job=i, run="r%d" % i)
                                 for i in range(5)])}
    found = eventlog.report([{"name": "gpus"}], now=NOW, nodes=nodes, limit=3,
                            filters=eventlog.Filters.of({"within_runs": ["r4"]}))
    assert nodes["gpus-0"].asked == [("events", {"since": None, "run": "r4"})]
    assert [e["kind"] for e in found["events"]] == ["job.created", "run.submitted",
                                                    "run.status"]


def test_a_bad_since_is_named():
    with pytest.raises(UsageError, match="--since soon"):
        eventlog.report([{"name": "gpus"}], since="soon", now=NOW, nodes={})


def test_a_services_replica_that_respawns_leaves_the_service_running():
    policy = {"type": "service", "respawn": True}
    events = [ev("job.created", 0, job=0, nodes=2, policy=policy),
              ev("job.created", 0, job=1, nodes=2, policy=policy),
              ev("job.started", 1, job=0), ev("job.started", 1, job=1),
              ev("job.ended", 5, job=1, exit_code=1, started=True)]
    assert derived(events)[-1] == ("run.status", "provisioning", "running", None)


def test_the_same_name_run_again_is_another_run():
    first = [ev("job.created", 0), ev("job.ended", 1, exit_code=0, started=True)]
    again = [dict(e, run_id="id-again", id="again/" + e["id"], at=e["at"] + 10)
             for e in first]
    steps = [(e["kind"], e.get("status")) for e in eventlog.derive(first + again)
             if e["kind"] in ("run.submitted", "run.status")]
    assert steps.count(("run.submitted", None)) == 2
    ids = [e["id"] for e in eventlog.derive(first + again)]
    assert len(ids) == len(set(ids))


def test_a_container_removed_under_its_job_ends_as_ps_says():
    task = ev("job.ended", 5, exit_code=None, started=True, gone=True)
    assert eventlog.ended_status(task)[:2] == ("terminated", "terminated_by_user")
    replica = dict(task, policy={"type": "service"})
    assert eventlog.ended_status(replica)[:2] == ("failed", "executor_error")
