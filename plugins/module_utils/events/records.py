# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""One event, as a host records it and ``gpufleet event --json`` answers it.

A host's record (tasks.hostside.eventside) holds facts: the kind, the moment (epoch seconds),
the run, job, submission, fleet and instance it is about, the user who acted, and the kind's
own fields (an exit code, a reason, a queue state). The reader (tasks.eventlog) adds the host
it was read from, the run events derived from the jobs' ones, the ``targets`` (dstack's list
of what an event is about) and the ``message`` in dstack's words, made here.

The kinds the hosts write are spelled again in eventside (it runs on the hosts alone);
tests/unit/events/test_records.py holds the two lists together.
"""

from __future__ import annotations

from typing import Any, Dict, List, Optional, TypedDict

from ..core.enums import StrEnum


class EventKind(StrEnum):
    """What an event says happened. ``run.*`` kinds other than ``run.queued`` are derived by
    the reader from the jobs' events; the others are written on the hosts."""

    JOB_CREATED = "job.created"        # its container was made (or could not be)
    JOB_STARTED = "job.started"        # its command began
    JOB_STOPPING = "job.stopping"      # asked to stop (a user, or the run's own rules)
    JOB_ENDED = "job.ended"            # its command ended: exit code and reason
    RUN_SUBMITTED = "run.submitted"    # its first submission's jobs were made
    RUN_RETRIED = "run.retried"        # a later submission's jobs were made
    RUN_STATUS = "run.status"          # its status, decided from its jobs', changed
    RUN_QUEUED = "run.queued"          # its entry in a fleet's queue changed state
    FLEET_APPLIED = "fleet.applied"    # a fleet apply changed its instances
    INSTANCE_CREATED = "instance.created"
    INSTANCE_REMOVED = "instance.removed"
    MEMBER_GRANTED = "member.granted"
    MEMBER_REVOKED = "member.revoked"
    MEMBER_LIMITED = "member.limited"

    @classmethod
    def host_kinds(cls):
        """The kinds a host writes itself (the rest are derived or sent by a controller). A
        multi-node run's end is both: job 0's host records it, for its webhooks, and the
        reader derives it (tasks.eventlog)."""
        return frozenset((cls.JOB_CREATED, cls.JOB_STARTED, cls.JOB_STOPPING, cls.JOB_ENDED,
                          cls.RUN_QUEUED, cls.RUN_STATUS, cls.MEMBER_GRANTED,
                          cls.MEMBER_REVOKED, cls.MEMBER_LIMITED))

    @classmethod
    def sent_kinds(cls):
        """The kinds a controller sends the hosts to record (fleet applies)."""
        return frozenset((cls.FLEET_APPLIED, cls.INSTANCE_CREATED, cls.INSTANCE_REMOVED))

    def is_derived(self):
        return self in (EventKind.RUN_SUBMITTED, EventKind.RUN_RETRIED, EventKind.RUN_STATUS)


class TargetType(StrEnum):
    """dstack's target types that gpufleet's events name."""

    FLEET = "fleet"
    INSTANCE = "instance"
    RUN = "run"
    JOB = "job"
    USER = "user"


class Target(TypedDict):
    type: str
    name: str


class _Event(TypedDict):
    id: str
    at: float
    kind: str


class Event(_Event, total=False):
    """One event. ``at``: epoch seconds; ``recorded_at``: the same as RFC 3339 (UTC)."""

    recorded_at: str
    message: str
    actor: Optional[str]
    targets: List[Target]
    host: Optional[str]
    fleet: Optional[str]
    instance: Optional[str]
    run: Optional[str]
    run_id: Optional[str]
    job: Optional[int]
    job_name: Optional[str]
    submission: Optional[int]
    status: Optional[str]
    old_status: Optional[str]
    reason: Optional[str]
    exit_code: Optional[int]
    state: Optional[str]
    old_state: Optional[str]
    user: Optional[str]
    role: Optional[str]
    detail: Optional[str]
    started: bool
    nodes: Optional[int]
    policy: Dict[str, Any]


def job_name(run: str, job: int, replica: int = 0) -> str:
    """dstack's name of a job (its container's, tasks.container): ``<run>-<job>-<replica>``."""
    return "%s-%d-%d" % (run, job, replica)


def targets_of(event: Dict[str, Any]) -> List[Target]:
    """What the event is about, most specific first, as dstack lists it."""
    kind = event.get("kind")
    found: List[Target] = []
    if kind in (EventKind.JOB_CREATED, EventKind.JOB_STARTED, EventKind.JOB_STOPPING,
                EventKind.JOB_ENDED):
        found.append({"type": TargetType.JOB.value,
                      "name": event.get("job_name") or job_name(str(event.get("run")),
                                                                int(event.get("job") or 0))})
        if kind == EventKind.JOB_CREATED and event.get("instance"):
            found.append({"type": TargetType.INSTANCE.value, "name": str(event["instance"])})
    elif kind in (EventKind.RUN_SUBMITTED, EventKind.RUN_RETRIED, EventKind.RUN_STATUS,
                  EventKind.RUN_QUEUED):
        found.append({"type": TargetType.RUN.value, "name": str(event.get("run"))})
    elif kind in (EventKind.INSTANCE_CREATED, EventKind.INSTANCE_REMOVED):
        found.append({"type": TargetType.INSTANCE.value, "name": str(event.get("instance"))})
    elif kind == EventKind.FLEET_APPLIED:
        found.append({"type": TargetType.FLEET.value, "name": str(event.get("fleet"))})
    elif kind in (EventKind.MEMBER_GRANTED, EventKind.MEMBER_REVOKED, EventKind.MEMBER_LIMITED):
        found.append({"type": TargetType.USER.value, "name": str(event.get("user"))})
        found.append({"type": TargetType.FLEET.value, "name": str(event.get("fleet"))})
    return found


def _upper(text: Any) -> str:
    return str(text or "").upper()


def message_of(event: Dict[str, Any]) -> str:
    """The event's message, in the words dstack's events use where dstack has the event."""
    kind = event.get("kind")
    reason = event.get("reason")
    if kind == EventKind.JOB_CREATED:
        if event.get("detail"):
            return "Job could not be created: %s" % event["detail"]
        where = ("Job created on retry" if int(event.get("submission") or 0) > 0
                 else "Job created on run submission")
        return "%s. Status: SUBMITTED" % where
    if kind == EventKind.JOB_STARTED:
        return "Job status changed PROVISIONING -> RUNNING"
    if kind == EventKind.JOB_STOPPING:
        old = _upper(event.get("old_status") or "running")
        return "Job status changed %s -> TERMINATING. Termination reason: %s" % (
            old, _upper(reason))
    if kind == EventKind.JOB_ENDED:
        old = _upper(event.get("old_status") or "running")
        text = "Job status changed %s -> %s" % (old, _upper(event.get("status")))
        if reason:
            text += ". Termination reason: %s" % _upper(reason)
        if event.get("exit_code") is not None:
            text += ". Exit code: %s" % event["exit_code"]
        return text
    if kind == EventKind.RUN_SUBMITTED:
        return "Run submitted. Status: SUBMITTED"
    if kind == EventKind.RUN_RETRIED:
        return "Run resubmitted on retry (submission %s). Status: SUBMITTED" % (
            event.get("submission"),)
    if kind == EventKind.RUN_STATUS:
        old = _upper(event.get("old_status"))
        text = "Run status changed %s -> %s" % (old, _upper(event.get("status")))
        if reason:
            text += ". Termination reason: %s" % _upper(reason)
        return text
    if kind == EventKind.RUN_QUEUED:
        return _queued_message(event)
    if kind == EventKind.FLEET_APPLIED:
        return "Fleet applied. %s" % (event.get("detail") or "No change")
    if kind == EventKind.INSTANCE_CREATED:
        return "Instance created on fleet apply"
    if kind == EventKind.INSTANCE_REMOVED:
        return "Instance removed on fleet apply"
    if kind == EventKind.MEMBER_GRANTED:
        return "Member granted. Role: %s" % _upper(event.get("role") or "user")
    if kind == EventKind.MEMBER_REVOKED:
        return "Member revoked"
    if kind == EventKind.MEMBER_LIMITED:
        return "Member limits changed. %s" % (event.get("detail") or "")
    return str(event.get("message") or kind)


def _queued_message(event: Dict[str, Any]) -> str:
    state = event.get("state")
    old = event.get("old_state")
    reason = event.get("reason")
    detail = event.get("detail")
    if state == "pending" and not old:
        text = "Run submitted. Status: PENDING"
    elif state == "pending" and old == "pending":
        text = "Run still PENDING" if reason else (
            "Run still PENDING, with nothing left to wait for: it is submitted when it fits")
    elif state == "pending":
        text = "Run waits in the queue again. Status: PENDING"
    elif state == "active" and old in (None, "pending"):
        text = "Run kept in its fleet's queue, to be resubmitted from there"
    elif state == "scheduled":
        # A scheduled task's entry (tasks.rearm): what arms it again if a host of it is lost.
        text = "Run's schedule kept in its fleet's queue, to arm it again if one of its hosts " \
            "is lost"
    elif state == "removed" and old == "scheduled":
        text = "Run's schedule left its fleet's queue"
    elif state == "removed" and old == "pending":
        # A pending entry goes once a pass (or the apply that waited) has submitted its run:
        # its submission is the run's event (tasks.eventlog), at its jobs' creation.
        text = "Run left the queue: it was submitted"
    elif state == "removed":
        text = "Run left the queue (was %s)" % _upper(old)
    else:
        was = old or "active"   # an entry written as it ends: the run was being submitted
        now = _QUEUE_STATUS.get(str(state), state)
        text = "Run status changed %s -> %s" % (_upper(_QUEUE_STATUS.get(was, was)), _upper(now))
    if reason:
        text += (". Termination reason: %s" if state in ("failed", "terminated")
                 else ". Reason: %s") % _upper(reason)
    if detail:
        text += " (%s)" % detail
    return text


# A queue entry's state as the run's status (tasks.queue_records): an entry taken to be
# submitted is the run being submitted.
_QUEUE_STATUS = {"active": "submitted"}


def fleet_events(record: Dict[str, Any], actor: Optional[str], now: float,
                 ident: str) -> List[Dict[str, Any]]:
    """The events of a fleet apply, from its record's ``plan``: one ``fleet.applied`` saying
    what changed and one per instance created or removed (none when nothing changed). Each
    id begins with ``ident``, one per apply, so the copies sent to every host are one."""
    plan = record.get("plan") or {}
    name = record.get("name")
    created = sorted(set(plan.get("create") or []) | set(plan.get("start") or []))
    removed = sorted(set(plan.get("remove") or []) | set(plan.get("release") or []))
    if not (created or removed):
        return []
    parts = []
    if created:
        parts.append("Instances added: %s" % ", ".join(created))
    if removed:
        parts.append("Instances removed: %s" % ", ".join(removed))
    made: List[Dict[str, Any]] = [{"id": "%s/fleet" % ident, "at": now,
                                   "kind": EventKind.FLEET_APPLIED.value, "fleet": name,
                                   "actor": actor, "detail": ". ".join(parts)}]
    for kind, names in ((EventKind.INSTANCE_CREATED, created),
                        (EventKind.INSTANCE_REMOVED, removed)):
        for instance in names:
            made.append({"id": "%s/%s/%s" % (ident, kind.value, instance), "at": now,
                         "kind": kind.value, "fleet": name, "instance": instance,
                         "actor": actor})
    return made
