# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The life of a run, as dstack defines it: pure decisions. dstack's rules are in
docs/reference/dstack-runtime.md#startup-order, docs/reference/dstack-runtime.md#stop-criteria,
docs/reference/dstack-runtime.md#failure-and-retry,
docs/reference/dstack-runtime.md#durations-of-a-run and
docs/reference/dstack-runtime.md#job-and-run-statuses.

The supervisor observes the containers of the current submission and asks ``decide`` what to do
next: which jobs may start (startup_order), which must stop and why (a failed node, master-done,
max_duration, a user's stop), whether the run is over and with which status, and whether it is
resubmitted under its retry policy. Nothing here touches a host or a clock of its own.
"""

from __future__ import annotations

from ..core.enums import StrEnum
from .container import SERVICE_LABEL
from .hostside.booking import HOLDING_STATES


class JobStatus(StrEnum):
    """A job's status (dstack's JobStatus), with what each one means to the runner."""

    SUBMITTED = "submitted"
    PROVISIONING = "provisioning"
    PULLING = "pulling"
    RUNNING = "running"
    TERMINATING = "terminating"
    TERMINATED = "terminated"
    ABORTED = "aborted"
    FAILED = "failed"
    DONE = "done"

    @classmethod
    def finished_statuses(cls):
        """The job has ended and will not change again."""
        return (cls.TERMINATED, cls.ABORTED, cls.FAILED, cls.DONE)

    @classmethod
    def up_statuses(cls):
        """Its container is up: created and not ended (provisioning, running, terminating)."""
        return (cls.PROVISIONING, cls.RUNNING, cls.TERMINATING)

    @classmethod
    def started_statuses(cls):
        """Its command has begun (running, or done): what startup_order waits for."""
        return (cls.RUNNING, cls.DONE)

    @classmethod
    def under_way_statuses(cls):
        """Started, or on its way there (provisioning, pulling): the run is provisioning."""
        return cls.started_statuses() + (cls.PROVISIONING, cls.PULLING)

    def is_finished(self):
        return self in self.finished_statuses()

    def is_up(self):
        return self in self.up_statuses()

    def is_started(self):
        return self in self.started_statuses()

    def is_under_way(self):
        return self in self.under_way_statuses()


class RunStatus(StrEnum):
    """A run's status (dstack's RunStatus)."""

    PENDING = "pending"
    SUBMITTED = "submitted"
    PROVISIONING = "provisioning"
    RUNNING = "running"
    TERMINATING = "terminating"
    TERMINATED = "terminated"
    FAILED = "failed"
    DONE = "done"

    @classmethod
    def finished_statuses(cls):
        """The run has ended (a ``pending`` run waits to be submitted again)."""
        return (cls.TERMINATED, cls.FAILED, cls.DONE)

    def is_finished(self):
        return self in self.finished_statuses()


# What tasks.hostside.nodeside's status says of a job whose folder is there and its container is
# not.
CONTAINER_ABSENT = ("gone", "never-created")

# Termination reasons (dstack's JobTerminationReason, lower case).
CONTAINER_EXITED_WITH_ERROR = "container_exited_with_error"
EXECUTOR_ERROR = "executor_error"
MAX_DURATION_EXCEEDED = "max_duration_exceeded"
# A dev environment with no SSH connection for its inactivity_duration: the job ends
# terminated, the run failed, and it is never retried (dstack).
INACTIVITY_DURATION_EXCEEDED = "inactivity_duration_exceeded"
# A job whose GPUs stayed below utilization_policy's least for its time window: terminated
# (the run too), never retried (dstack). Its job's wrapper decides it (tasks.hostside.wrapper).
UTILIZATION_POLICY = "terminated_due_to_utilization_policy"
TERMINATED_BY_USER = "terminated_by_user"
# A task with ``schedule`` between its firings: the run is pending, its hosts keep it ready
# (tasks.hostside.scheduleside); not one of dstack's reasons, which says "waiting for schedule"
# in its status message.
WAITING_FOR_SCHEDULE = "waiting_for_schedule"
TERMINATED_BY_SERVER = "terminated_by_server"
DONE_BY_RUNNER = "done_by_runner"
NO_CAPACITY = "failed_to_start_due_to_no_capacity"
# The instance went away under the job (spot reclaimed, terminated, its node gone), or a spot
# instance stopped answering for JOB_DISCONNECTED_GRACE: dstack's interruption. An on-demand
# instance that stops answering for as long is instance_unreachable, an error
# (docs/reference/dstack-runtime.md#failure-and-retry).
INTERRUPTED_BY_NO_CAPACITY = "interrupted_by_no_capacity"
INSTANCE_UNREACHABLE = "instance_unreachable"
JOB_DISCONNECTED_GRACE = 120
# A service's replica taken away when the service was scaled down (services.rolling): its job
# is terminated with dstack's reason, and the run goes on without it (decide).
SCALED_DOWN = "scaled_down"

STOP_REASONS = {
    SCALED_DOWN: JobStatus.TERMINATED.value,
    MAX_DURATION_EXCEEDED: JobStatus.TERMINATED.value,
    INACTIVITY_DURATION_EXCEEDED: JobStatus.TERMINATED.value,
    UTILIZATION_POLICY: JobStatus.TERMINATED.value,
    TERMINATED_BY_USER: JobStatus.TERMINATED.value,
    TERMINATED_BY_SERVER: JobStatus.TERMINATED.value,
    DONE_BY_RUNNER: JobStatus.DONE.value,
}

# Retry events (dstack's RetryEvent) and the reasons that map to them
# (docs/reference/dstack-runtime.md#failure-and-retry).
EVENT_NO_CAPACITY = "no-capacity"
EVENT_INTERRUPTION = "interruption"
EVENT_ERROR = "error"


def _int(value):
    try:
        return int(value)
    except (TypeError, ValueError):
        return None


def job_status(entry):
    """``(status, reason, exit_code)`` of one job from its container (None: not created yet).

    ``entry`` is what tasks.hostside.nodeside's ``status`` answers for the container: its Docker
    state and the files of its state folder (``running``: the command started; ``reason``: why it
    was stopped, written before the stop; ``exit_code``: written by the wrapper when it ends).
    """
    if entry is None:
        return JobStatus.SUBMITTED.value, None, None
    files = entry.get("files") or {}
    reason = files.get("reason")
    state = entry.get("state")
    if state == "scheduled":
        # A scheduled task's job before its first firing (tasks.hostside.scheduleside).
        if reason in STOP_REASONS:
            return STOP_REASONS[reason], reason, None
        return JobStatus.SUBMITTED.value, None, None
    if entry.get("setup_error"):
        # Its container could not be created (tasks.hostside.nodeside's start).
        return JobStatus.FAILED.value, EXECUTOR_ERROR, None
    if state == "gone" and not files.get("exit_code") and reason not in STOP_REASONS:
        # Its container was removed under it, by someone else (docker rm). A task's job was
        # stopped by hand; a service's replica is lost, as when its runner dies under dstack,
        # and is replaced when the service's retry covers errors (decide).
        if (entry.get("labels") or {}).get(SERVICE_LABEL):
            return JobStatus.FAILED.value, EXECUTOR_ERROR, None
        return JobStatus.TERMINATED.value, TERMINATED_BY_USER, None
    if state in ("created", "restarting"):
        return JobStatus.PROVISIONING.value, None, None
    code = _int(files.get("exit_code"))
    if state in ("running", "paused", "removing"):
        if reason:
            return JobStatus.TERMINATING.value, reason, None
        if code is None:
            started = files.get("running")
            return (JobStatus.RUNNING if started else JobStatus.PROVISIONING).value, None, None
        # The command ended on its own (or the wrapper failed before it began) and the wrapper
        # wrote the code: the container only finishes its work (the run's other nodes are told
        # to stop first, then it exits). The job ended now, as dstack's runner says when the
        # command exits, so that a look that already sees those nodes stopped sees why. Its
        # host is still held until the container is gone (holds_host).
    if code is None:
        code = _int(entry.get("exit_code"))
    if reason in STOP_REASONS:
        return STOP_REASONS[reason], reason, code
    if code == 0:
        return JobStatus.DONE.value, None, 0
    if not files.get("running"):
        # The wrapper failed before the command began: the image lacks a shell, a volume is
        # missing, the user does not exist...
        return JobStatus.FAILED.value, EXECUTOR_ERROR, code
    return JobStatus.FAILED.value, CONTAINER_EXITED_WITH_ERROR, code


def armed(entry):
    """Whether a job's host keeps it for firings to come (a scheduled task's job whose schedule
    was not stopped, tasks.hostside.scheduleside): its host is not idle, though no container
    holds it between firings."""
    kept = ((entry or {}).get("files") or {}).get("schedule")
    return isinstance(kept, dict) and not kept.get("stopped")


def holds_host(entry):
    """Whether a job's container still holds its host: it has not ended (a job that is alive,
    or one that has ended while its wrapper still tells the run's other nodes to stop). The
    Docker state decides, as it does for tasks.hostside.booking's claims: every alive job's
    container is in one of those states."""
    return entry is not None and entry.get("state") in HOLDING_STATES


# The failures of a service's replica that leave its host answering: it is made again there.
RESPAWNED_ON = (CONTAINER_EXITED_WITH_ERROR, EXECUTOR_ERROR)


def retry_event(reason):
    """The retry event a termination reason maps to, or None when it is never retried."""
    if reason == NO_CAPACITY:
        return EVENT_NO_CAPACITY
    if reason == INTERRUPTED_BY_NO_CAPACITY:
        return EVENT_INTERRUPTION
    if reason in (CONTAINER_EXITED_WITH_ERROR, EXECUTOR_ERROR, INSTANCE_UNREACHABLE):
        return EVENT_ERROR
    return None


def may_retry(retry, event, now, since):
    """Whether ``retry`` ({on_events, duration} or None) resubmits after ``event``.

    ``since`` is where dstack starts the retry clock
    (docs/reference/dstack-runtime.md#failure-and-retry): the run's submission for no-capacity
    before it ever ran, else the moment the last submission was seen alive.
    """
    if not retry or event is None or event not in (retry.get("on_events") or ()):
        return False
    duration = retry.get("duration")
    if duration is None:
        return True
    return now - since < duration


class Decision(object):
    """What to do after one look at the jobs."""

    def __init__(self):
        self.status = RunStatus.SUBMITTED.value
        self.start = []  # job numbers to start now
        self.stop = {}  # job number -> reason
        self.final = False
        self.resubmit = False
        self.reason = None  # the run's termination reason when final
        self.failed_job = None  # (job_num, reason, exit_code) of the job that ended the run
        # A service's replicas that failed in a way its retry covers: each is started again on
        # its host (its new submission), while the others keep serving, as dstack retries a
        # service's replica on its own.
        self.respawn = []

    def __repr__(self):
        return "Decision(%s)" % ", ".join("%s=%r" % kv for kv in sorted(vars(self).items()))


def _startable(order, statuses):
    waiting = [n for n, s in statuses.items() if s[0] == JobStatus.SUBMITTED]
    if not waiting:
        return []
    up = JobStatus.started_statuses()
    if order == "master-first":
        if 0 in waiting:
            return [0]
        return waiting if statuses[0][0] in up else []
    if order == "workers-first":
        workers = [n for n in waiting if n != 0]
        if workers:
            return workers
        others_up = all(s[0] in up for n, s in statuses.items() if n != 0)
        return [0] if others_up else []
    return waiting


def decide(policy, statuses, now=0.0, retry_since=None):
    """The next step of a run.

    ``policy``: ``startup_order``, ``stop_criteria`` and ``retry`` (the normalized task fields);
    ``service`` for a service's run, and ``respawn`` when its retry covers errors (what its
    replicas' label says, for a look that has no queue entry to read the retry from).
    ``statuses``: ``{job_num: (status, reason, exit_code)}`` from ``job_status``, every job of
    the submission. ``retry_since``: the retry clock's start (see ``may_retry``).
    """
    result = Decision()
    if policy.get("service"):
        # Replicas taken away by a scale-down are no longer part of the service.
        statuses = dict((n, s) for n, s in statuses.items() if s[1] != SCALED_DOWN)
        # A service runs until stopped: a replica whose command ends, even with code 0, failed
        # (retry as the config says).
        statuses = dict((n, (JobStatus.FAILED.value, CONTAINER_EXITED_WITH_ERROR, s[2])
                         if s[0] == JobStatus.DONE and s[1] is None else s)
                        for n, s in statuses.items())
        # A replica whose failure the retry covers is started again by itself, on its host,
        # while the others serve. One whose host is lost or silent is not: the whole run is
        # resubmitted (on other hosts) as a task's is.
        for num, (status, reason, _code) in sorted(statuses.items()):
            if status == JobStatus.FAILED and reason in RESPAWNED_ON and (
                    policy.get("respawn") or may_retry(policy.get("retry"),
                                                       retry_event(reason), now, now)):
                result.respawn.append(num)
        statuses = dict((n, (JobStatus.SUBMITTED.value, None, None)
                         if n in result.respawn else s) for n, s in statuses.items())
    alive = [n for n, s in statuses.items() if s[0] in JobStatus.up_statuses()]

    def by_reason(reason):
        return [n for n, s in sorted(statuses.items()) if s[1] == reason]

    failed = [n for n, s in sorted(statuses.items()) if s[0] == JobStatus.FAILED]
    user = by_reason(TERMINATED_BY_USER)
    expired = by_reason(MAX_DURATION_EXCEEDED) or by_reason(UTILIZATION_POLICY)
    inactive = by_reason(INACTIVITY_DURATION_EXCEEDED)
    # A job the server stopped means the run was ending. When nothing else says why (the job
    # that failed came back: its host was judged after two minutes of silence, and answers
    # again with its job still running), the run ends all the same.
    server = by_reason(TERMINATED_BY_SERVER)
    master = statuses.get(0, (JobStatus.SUBMITTED.value, None, None))

    ending = None
    if user:
        ending = (RunStatus.TERMINATED.value, TERMINATED_BY_USER, TERMINATED_BY_USER)
    elif failed or inactive:
        first = (failed or inactive)[0]
        result.failed_job = (first,) + tuple(statuses[first][1:])
        ending = (RunStatus.FAILED.value, "job_failed", TERMINATED_BY_SERVER)
    elif expired:   # max_duration, or utilization_policy: the run ends terminated, so
        why = statuses[expired[0]][1]
        result.failed_job = (expired[0], why, statuses[expired[0]][2])
        ending = (RunStatus.TERMINATED.value, why, TERMINATED_BY_SERVER)
    elif server:
        ending = (RunStatus.TERMINATED.value, TERMINATED_BY_SERVER, TERMINATED_BY_SERVER)
    elif policy.get("stop_criteria") == "master-done" and master[0] == JobStatus.DONE:
        ending = (RunStatus.DONE.value, "all_jobs_done", DONE_BY_RUNNER)
    elif statuses and all(s[0] == JobStatus.DONE for s in statuses.values()):
        ending = (RunStatus.DONE.value, "all_jobs_done", None)

    if ending is not None:
        result.respawn = []   # a run that ends makes nothing again
        run_status, run_reason, stop_reason = ending
        for num in alive:
            if statuses[num][0] != JobStatus.TERMINATING:
                result.stop[num] = stop_reason or TERMINATED_BY_SERVER
        if alive:
            result.status = RunStatus.TERMINATING.value
            return result
        result.final = True
        result.status = run_status
        result.reason = run_reason
        if run_status == RunStatus.FAILED:
            event = retry_event(result.failed_job[1])
            if may_retry(policy.get("retry"), event, now,
                         now if retry_since is None else retry_since):
                result.final = False
                result.resubmit = True
                result.status = RunStatus.PENDING.value
        return result

    result.start = [n for n in _startable(policy.get("startup_order") or "any", statuses)
                    if n not in result.respawn]
    values = [s[0] for s in statuses.values()]
    if values and all(v in JobStatus.started_statuses() for v in values):
        result.status = RunStatus.RUNNING.value
    elif any(v in JobStatus.under_way_statuses() for v in values):
        result.status = (RunStatus.PROVISIONING if not any(v == JobStatus.RUNNING for v in values)
                         else RunStatus.RUNNING).value
    else:
        result.status = RunStatus.SUBMITTED.value
    return result
