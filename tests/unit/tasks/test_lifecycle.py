# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""A run's life: job statuses from containers, startup order, stop criteria, failure, retry."""

from __future__ import annotations

import pytest

from ansible_collections.gpufleet.cluster.plugins.module_utils.tasks import lifecycle as lc


def box(state, running=True, reason=None, exit_code=None, docker_code=None):
    return {"state": state, "exit_code": docker_code,
            "files": {"running": "1700000000" if running else None, "reason": reason,
                      "exit_code": None if exit_code is None else str(exit_code)}}


SUB = (lc.JobStatus.SUBMITTED, None, None)
RUN = (lc.JobStatus.RUNNING, None, None)
DONE = (lc.JobStatus.DONE, None, 0)


@pytest.mark.parametrize("entry, expected", [
    (None, SUB),
    (box("created", running=False), (lc.JobStatus.PROVISIONING, None, None)),
    (box("running", running=False), (lc.JobStatus.PROVISIONING, None, None)),
    (box("running"), RUN),
    (box("running", reason="terminated_by_user"),
     (lc.JobStatus.TERMINATING, "terminated_by_user", None)),
    # The command ended; its wrapper wrote the code and is still telling the other nodes.
    (box("running", exit_code=3), (lc.JobStatus.FAILED, lc.CONTAINER_EXITED_WITH_ERROR, 3)),
    (box("running", exit_code=0), DONE),
    (box("running", reason="terminated_by_server", exit_code=143),
     (lc.JobStatus.TERMINATING, "terminated_by_server", None)),
    # The wrapper failed before the command began (it tells the other nodes too).
    (box("running", running=False, exit_code=1), (lc.JobStatus.FAILED, lc.EXECUTOR_ERROR, 1)),
    (box("exited", exit_code=0), DONE),
    (box("exited", exit_code=3), (lc.JobStatus.FAILED, lc.CONTAINER_EXITED_WITH_ERROR, 3)),
    (box("exited", running=False, docker_code=127), (lc.JobStatus.FAILED, lc.EXECUTOR_ERROR, 127)),
    (box("exited", reason="max_duration_exceeded", exit_code=143),
     (lc.JobStatus.TERMINATED, lc.MAX_DURATION_EXCEEDED, 143)),
    (box("exited", reason="done_by_runner", docker_code=137),
     (lc.JobStatus.DONE, "done_by_runner", 137)),
    (box("exited", reason="terminated_by_server", docker_code=143),
     (lc.JobStatus.TERMINATED, "terminated_by_server", 143)),
])
def test_job_status(entry, expected):
    assert lc.job_status(entry) == expected


def test_a_container_removed_under_it_is_a_stop_for_a_task_and_a_loss_for_a_replica():
    gone = box("gone")
    assert lc.job_status(gone) == (lc.JobStatus.TERMINATED, lc.TERMINATED_BY_USER, None)
    replica = dict(gone, labels={"gpufleet.service": "{}"})
    assert lc.job_status(replica) == (lc.JobStatus.FAILED, lc.EXECUTOR_ERROR, None)
    # A replica stopped by gpufleet stop keeps the stop's reason.
    stopped = dict(box("gone", reason="terminated_by_user"), labels=replica["labels"])
    assert lc.job_status(stopped)[:2] == (lc.JobStatus.TERMINATED, lc.TERMINATED_BY_USER)


def test_a_service_replica_that_fails_under_retry_is_respawned_alone():
    service = {"service": True, "retry": {"on_events": ["error"], "duration": 60}}
    statuses = {0: RUN, 1: (lc.JobStatus.FAILED, lc.EXECUTOR_ERROR, None)}
    decision = lc.decide(service, statuses, now=100.0, retry_since=0.0)
    # However long the service ran: the clock starts when the replica is seen failed.
    assert decision.respawn == [1] and decision.stop == {} and not decision.final
    assert not decision.resubmit and decision.start == []
    assert decision.status == lc.RunStatus.RUNNING
    # A command that ended with 0 failed too; every replica may be respawned at once.
    both = {0: DONE, 1: (lc.JobStatus.FAILED, lc.CONTAINER_EXITED_WITH_ERROR, 2)}
    assert lc.decide(service, both, now=1.0).respawn == [0, 1]
    # Not covered (no retry, or another event): the service fails, as under dstack.
    for policy in ({"service": True},
                   {"service": True, "retry": {"on_events": ["interruption"]}}):
        decision = lc.decide(policy, statuses, now=100.0)
        assert decision.respawn == [] and decision.stop == {0: lc.TERMINATED_BY_SERVER}
    # A task's job never is.
    task = {"retry": {"on_events": ["error"], "duration": 60}}
    assert lc.decide(task, statuses, now=100.0).respawn == []
    # A look with no queue entry reads it from the replicas' label.
    assert lc.decide({"service": True, "respawn": True}, statuses).respawn == [1]


def test_a_service_that_ends_respawns_nothing():
    service = {"service": True, "respawn": True}
    failed = (lc.JobStatus.FAILED, lc.EXECUTOR_ERROR, None)
    stopping = (lc.JobStatus.TERMINATING, lc.TERMINATED_BY_USER, None)
    decision = lc.decide(service, {0: stopping, 1: failed})
    assert decision.respawn == [] and decision.status == lc.RunStatus.TERMINATING
    stopped = (lc.JobStatus.TERMINATED, lc.TERMINATED_BY_USER, 143)
    decision = lc.decide(service, {0: stopped, 1: failed})
    assert decision.respawn == [] and decision.final


@pytest.mark.parametrize("entry, holds", [
    (None, False),
    (box("running"), True),
    (box("running", exit_code=3), True),    # ended, its container finishing
    (box("created", running=False), True),
    (box("exited", exit_code=3), False),
    (dict(box("gone", exit_code=0)), False),
])
def test_a_container_holds_its_host_until_it_has_ended(entry, holds):
    assert lc.holds_host(entry) is holds


def test_the_wrappers_exit_code_wins_over_dockers():
    assert lc.job_status(box("exited", exit_code=5, docker_code=0))[2] == 5


@pytest.mark.parametrize("order, statuses, start", [
    ("any", {0: SUB, 1: SUB, 2: SUB}, [0, 1, 2]),
    ("master-first", {0: SUB, 1: SUB}, [0]),
    ("master-first", {0: (lc.JobStatus.PROVISIONING, None, None), 1: SUB}, []),
    ("master-first", {0: RUN, 1: SUB, 2: SUB}, [1, 2]),
    ("workers-first", {0: SUB, 1: SUB, 2: SUB}, [1, 2]),
    ("workers-first", {0: SUB, 1: RUN, 2: (lc.JobStatus.PROVISIONING, None, None)}, []),
    ("workers-first", {0: SUB, 1: RUN, 2: RUN}, [0]),
])
def test_startup_order_gates_on_running(order, statuses, start):
    decision = lc.decide({"startup_order": order}, statuses)
    assert sorted(decision.start) == start
    assert not decision.final


def test_all_done_waits_for_every_job():
    decision = lc.decide({"stop_criteria": "all-done"}, {0: DONE, 1: RUN})
    assert not decision.final and not decision.stop
    decision = lc.decide({"stop_criteria": "all-done"}, {0: DONE, 1: DONE})
    assert decision.final and decision.status == lc.RunStatus.DONE


def test_master_done_stops_the_workers_and_ends_done():
    policy = {"stop_criteria": "master-done"}
    decision = lc.decide(policy, {0: DONE, 1: RUN, 2: RUN})
    assert decision.stop == {1: lc.DONE_BY_RUNNER, 2: lc.DONE_BY_RUNNER}
    assert decision.status == lc.RunStatus.TERMINATING and not decision.final
    stopped = (lc.JobStatus.DONE, lc.DONE_BY_RUNNER, 137)
    decision = lc.decide(policy, {0: DONE, 1: stopped, 2: stopped})
    assert decision.final and decision.status == lc.RunStatus.DONE


def test_one_failed_job_stops_the_others_and_fails_the_run():
    failed = (lc.JobStatus.FAILED, lc.CONTAINER_EXITED_WITH_ERROR, 3)
    decision = lc.decide({}, {0: RUN, 1: failed, 2: RUN})
    assert decision.stop == {0: lc.TERMINATED_BY_SERVER, 2: lc.TERMINATED_BY_SERVER}
    assert not decision.final
    gone = (lc.JobStatus.TERMINATED, lc.TERMINATED_BY_SERVER, 143)
    decision = lc.decide({}, {0: gone, 1: failed, 2: gone})
    assert decision.final and decision.status == lc.RunStatus.FAILED
    assert decision.failed_job == (1, lc.CONTAINER_EXITED_WITH_ERROR, 3)


def test_the_failed_job_still_telling_the_others_fails_the_run():
    """One rank failed: its wrapper wrote its code, then stopped the other nodes over SSH, and
    is not done yet. A look that sees the others stopped already sees why: the run fails, and
    the failed job is not stopped (its failure would read as a stop)."""
    stopped = (lc.JobStatus.TERMINATED, lc.TERMINATED_BY_SERVER, 143)
    telling = lc.job_status(box("running", exit_code=3))
    decision = lc.decide({}, {0: stopped, 1: telling, 2: stopped})
    assert decision.stop == {}
    assert (decision.final, decision.status) == (True, lc.RunStatus.FAILED)
    assert decision.failed_job == (1, lc.CONTAINER_EXITED_WITH_ERROR, 3)


def test_a_job_that_outlived_its_runs_end_is_stopped_and_the_run_ends_terminated():
    """Its host was judged after two minutes of silence and the server stopped the others;
    the host answers again with its job still running. Nothing says why any more but the
    others' stops, and those are enough: the run ends, without a retry."""
    retry = {"retry": {"on_events": ["error", "no-capacity", "interruption"], "duration": 3600}}
    stopped = (lc.JobStatus.TERMINATED, lc.TERMINATED_BY_SERVER, 143)
    decision = lc.decide(retry, {0: stopped, 1: RUN, 2: stopped})
    assert decision.stop == {1: lc.TERMINATED_BY_SERVER}
    assert decision.status == lc.RunStatus.TERMINATING and not decision.final
    decision = lc.decide(retry, {0: stopped, 1: stopped, 2: stopped})
    assert decision.final and not decision.resubmit
    assert (decision.status, decision.reason) == (lc.RunStatus.TERMINATED, lc.TERMINATED_BY_SERVER)


def test_jobs_not_started_yet_are_never_started_after_a_failure():
    failed = (lc.JobStatus.FAILED, lc.CONTAINER_EXITED_WITH_ERROR, 1)
    decision = lc.decide({"startup_order": "workers-first"}, {0: SUB, 1: failed})
    assert decision.start == [] and decision.final and decision.status == lc.RunStatus.FAILED


def test_retry_on_error_resubmits_and_other_events_do_not():
    failed = {0: (lc.JobStatus.FAILED, lc.CONTAINER_EXITED_WITH_ERROR, 1), 1: DONE}
    on_error = {"retry": {"on_events": ["error"], "duration": 3600}}
    decision = lc.decide(on_error, failed, now=100.0, retry_since=90.0)
    assert decision.resubmit and not decision.final and decision.status == lc.RunStatus.PENDING
    only_capacity = {"retry": {"on_events": ["no-capacity"], "duration": 3600}}
    decision = lc.decide(only_capacity, failed, now=100.0)
    assert decision.final and not decision.resubmit


def test_retry_window_closes_after_duration():
    retry = {"on_events": ["no-capacity"], "duration": 60}
    assert lc.may_retry(retry, lc.EVENT_NO_CAPACITY, now=159.0, since=100.0)
    assert not lc.may_retry(retry, lc.EVENT_NO_CAPACITY, now=160.0, since=100.0)
    assert not lc.may_retry(None, lc.EVENT_ERROR, now=0.0, since=0.0)


def test_max_duration_and_user_stop_end_terminated_without_retry():
    retry = {"retry": {"on_events": ["error", "no-capacity", "interruption"], "duration": 3600}}
    expired = (lc.JobStatus.TERMINATED, lc.MAX_DURATION_EXCEEDED, 143)
    decision = lc.decide(retry, {0: expired, 1: RUN})
    assert decision.stop == {1: lc.TERMINATED_BY_SERVER}
    decision = lc.decide(retry, {0: expired,
                                 1: (lc.JobStatus.TERMINATED, lc.TERMINATED_BY_SERVER, 143)})
    assert decision.final and decision.status == lc.RunStatus.TERMINATED and not decision.resubmit
    assert decision.reason == lc.MAX_DURATION_EXCEEDED
    user = (lc.JobStatus.TERMINATED, lc.TERMINATED_BY_USER, 143)
    decision = lc.decide(retry, {0: user, 1: user})
    assert decision.final and decision.status == lc.RunStatus.TERMINATED
    assert decision.reason == lc.TERMINATED_BY_USER


def test_a_job_stopped_for_its_gpu_utilization_ends_the_run_terminated_without_retry():
    retry = {"retry": {"on_events": ["error", "no-capacity", "interruption"], "duration": 3600}}
    idle = (lc.JobStatus.TERMINATED, lc.UTILIZATION_POLICY, 143)
    assert lc.job_status(box("exited", reason="terminated_due_to_utilization_policy",
                             exit_code=143)) == idle
    decision = lc.decide(retry, {0: RUN, 1: idle})
    assert decision.stop == {0: lc.TERMINATED_BY_SERVER}
    decision = lc.decide(retry, {0: (lc.JobStatus.TERMINATED, lc.TERMINATED_BY_SERVER, 143),
                                 1: idle})
    assert decision.final and decision.status == lc.RunStatus.TERMINATED and not decision.resubmit
    assert decision.reason == "terminated_due_to_utilization_policy"
    assert lc.retry_event(lc.UTILIZATION_POLICY) is None


def test_event_mapping():
    assert lc.retry_event(lc.CONTAINER_EXITED_WITH_ERROR) == "error"
    assert lc.retry_event(lc.NO_CAPACITY) == "no-capacity"
    assert lc.retry_event(lc.MAX_DURATION_EXCEEDED) is None
    assert lc.retry_event(lc.TERMINATED_BY_USER) is None
