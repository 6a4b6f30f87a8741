# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""``gpufleet event``: the events the fleets' hosts recorded (tasks.hostside.eventside), read
and put in order, with the run events derived from their jobs'.

``gather`` asks every host of the reachable fleets at once (one ``events`` request each); an
event a controller sent to several hosts is one event (the first copy of an id is kept), and
the host it was read from names the instance of a job's events. ``derive`` adds what a
server would have written about the run while its jobs changed: ``Run submitted`` when its
first submission's jobs were made, ``Run resubmitted on retry`` for a later one, and each
change of the run's status, decided from its jobs' statuses by the rules ``ps`` uses
(tasks.lifecycle.decide), at the moment of the job event that changed it. The end of a
multi-node run that its job 0's host recorded (for its webhooks) is the same event; it is
shown only when the jobs' events read here do not decide that end. ``report`` is what
the command shows: the filters of events.query over them, oldest first.
"""

from __future__ import annotations

import time
from datetime import datetime, timezone
from typing import Any, Dict, List, Optional, Tuple

from ..events.query import DEFAULT_LIMIT, Filters, select
from ..events.records import EventKind, message_of, targets_of
from . import lifecycle
from .lifecycle import JobStatus, RunStatus
from .ssh import parallel
from .surveys import nodes_of
from .usage import parse_since, reachable_fleets

# How far before ``--since`` the hosts are asked, so that a run that began earlier still has
# its jobs' first events when its later status changes are derived.
LOOK_BACK = 2 * 86400
_RANKS = ((EventKind.RUN_QUEUED,), (EventKind.JOB_CREATED,),
          (EventKind.RUN_SUBMITTED, EventKind.RUN_RETRIED), (EventKind.JOB_STARTED,),
          (EventKind.JOB_STOPPING,), (EventKind.JOB_ENDED,), (EventKind.RUN_STATUS,))
_ORDER: Dict[str, int] = dict((kind.value, rank) for rank, kinds in enumerate(_RANKS)
                              for kind in kinds)


def gather(fleets, root=None, since=None, run=None, nodes=None
           ) -> Tuple[List[Dict[str, Any]], Dict[str, str]]:
    """``(events, unreachable)``: what the hosts of ``fleets`` recorded after ``since`` (of
    ``run`` only, when given), one copy of each, oldest first; ``{host: error}`` of the hosts
    that did not answer. ``nodes``: ``{host: Node}`` to ask instead of the fleets' own."""
    nodes = nodes_of(fleets, root) if nodes is None else nodes
    payload = {"since": since, "run": run}
    answers = parallel(sorted(nodes), lambda host: nodes[host].call("events", payload))
    found: Dict[str, Dict[str, Any]] = {}
    unreachable: Dict[str, str] = {}
    for host, (answer, error) in sorted(answers.items()):
        if error is not None:
            unreachable[host] = getattr(error, "detail", None) or str(error)
            continue
        for event in (answer or {}).get("events") or []:
            if not isinstance(event, dict) or not isinstance(event.get("at"), (int, float)):
                continue
            key = str(event.get("id"))
            if key in found:
                continue
            event = dict(event, host=host)
            if str(event.get("kind", "")).startswith("job.") and not event.get("instance"):
                event["instance"] = host
            found[key] = event
    return _ordered(list(found.values())), unreachable


def _ordered(events: List[Dict[str, Any]]) -> List[Dict[str, Any]]:
    return sorted(events, key=lambda e: (float(e["at"]), _ORDER.get(str(e.get("kind")), 7),
                                         e.get("job") or 0, str(e.get("id"))))


def ended_status(event: Dict[str, Any]) -> Tuple[str, Optional[str], Optional[int]]:
    """``(status, reason, exit_code)`` of a job from its ``job.ended`` event, by the rules of
    tasks.lifecycle.job_status."""
    code = event.get("exit_code")
    # A container removed while it ran: a task's job was stopped by hand, a service's
    # replica lost, as ps says of them.
    service = (event.get("policy") or {}).get("type") == "service"
    entry = {"state": "gone" if event.get("gone") else "exited", "exit_code": code,
             "labels": {"gpufleet.service": "1"} if service else {},
             "files": {"exit_code": None if code is None else str(code),
                       "reason": event.get("reason"),
                       "running": "1" if event.get("started", True) else None}}
    if event.get("reason") == lifecycle.EXECUTOR_ERROR and not event.get("started", True):
        entry["setup_error"] = "setup failed"
    return lifecycle.job_status(entry)


def derive(events: List[Dict[str, Any]]) -> List[Dict[str, Any]]:
    """``events`` with each ``job.ended`` given its status, and the run events derived from
    the jobs' (see the module's text), oldest first."""
    out: List[Dict[str, Any]] = []
    runs: Dict[Tuple[str, str], Dict[str, Any]] = {}
    waited = set()   # runs first written down as pending: their queue event says submitted
    said = []   # the ends job 0's host recorded of multi-node runs
    for event in _ordered(events):
        kind = event.get("kind")
        if kind == EventKind.RUN_STATUS:
            said.append(event)
            continue
        if kind == EventKind.RUN_QUEUED and event.get("state") == "pending" and not event.get(
                "old_state"):
            waited.add((str(event.get("run")), str(event.get("run_id") or "")))
        if kind == EventKind.JOB_ENDED:
            status, reason, code = ended_status(event)
            event = dict(event, status=status, reason=reason, exit_code=code)
        out.append(event)
        if not str(kind).startswith("job.") or not event.get("run"):
            continue
        key = (str(event["run"]), str(event.get("run_id") or ""))
        run = runs.setdefault(key, {"submission": None, "jobs": {}, "status": None,
                                    "policy": {}, "nodes": 0})
        submission = int(event.get("submission") or 0)
        if run["submission"] is None or submission > run["submission"]:
            if kind != EventKind.JOB_CREATED:
                continue   # a later submission is known by its jobs' creation first
            first = run["submission"] is None and submission == 0
            run.update(submission=submission, jobs={}, status=RunStatus.SUBMITTED.value)
            if (event.get("policy") or {}).get("schedule"):
                # A scheduled task's firing: the run waited for its time (scheduleside).
                out.append(_run_event(event, EventKind.RUN_STATUS,
                                      old_status=RunStatus.PENDING.value,
                                      status=RunStatus.SUBMITTED.value))
            elif first and key in waited:
                # It waited in the queue: its submission is a change of its status.
                out.append(_run_event(event, EventKind.RUN_STATUS,
                                      old_status=RunStatus.PENDING.value,
                                      status=RunStatus.SUBMITTED.value))
            else:
                out.append(_run_event(event, EventKind.RUN_SUBMITTED if first
                                      else EventKind.RUN_RETRIED, actor=event.get("actor")))
        elif submission < run["submission"]:
            continue
        if kind == EventKind.JOB_CREATED:
            run["policy"] = event.get("policy") or run["policy"]
            run["nodes"] = max(run["nodes"], int(event.get("nodes") or 0))
        run["jobs"][int(event.get("job") or 0)] = _job_state(event)
        statuses = dict(run["jobs"])
        for num in range(run["nodes"]):
            statuses.setdefault(num, (JobStatus.SUBMITTED.value, None, None))
        policy = run["policy"]
        decision = lifecycle.decide({"stop_criteria": policy.get("stop_criteria"),
                                     "startup_order": policy.get("startup_order"),
                                     "service": policy.get("type") == "service",
                                     "respawn": bool(policy.get("respawn"))}, statuses)
        if decision.status != run["status"]:
            out.append(_run_event(event, EventKind.RUN_STATUS, old_status=run["status"],
                                  status=decision.status,
                                  reason=decision.reason if decision.final else None))
            run["status"] = decision.status
            if decision.final and policy.get("schedule") and \
                    decision.reason != lifecycle.TERMINATED_BY_USER:
                # Ended by itself, a scheduled run waits for its next time (as ps says).
                out.append(_run_event(event, EventKind.RUN_STATUS, old_status=decision.status,
                                      status=RunStatus.PENDING.value))
                run["status"] = RunStatus.PENDING.value
    for event in _said_ends(said, out, runs):
        # After what happened by its moment, the order of the rest kept.
        at = float(event["at"])
        out.insert(next((i for i, e in enumerate(out) if float(e["at"]) > at), len(out)),
                   event)
    return out


def _said_ends(said: List[Dict[str, Any]], derived: List[Dict[str, Any]],
               runs: Dict[Tuple[str, str], Dict[str, Any]]) -> List[Dict[str, Any]]:
    """The ends job 0's host recorded of multi-node runs (tasks.hostside.eventside) whose
    submission's end could not be derived here: a host of the run did not answer, or its
    record lost the job's end. One that was derived is the same event (its id)."""
    ended = set((e.get("run"), e.get("run_id"), e.get("submission")) for e in derived
                if e.get("kind") == EventKind.RUN_STATUS and e.get("reason"))
    found = []
    for event in said:
        if (event.get("run"), event.get("run_id"), event.get("submission")) in ended:
            continue
        run = runs.get((str(event.get("run")), str(event.get("run_id") or ""))) or {}
        found.append(dict(event, old_status=run.get("status") if run.get(
            "submission") == event.get("submission") else None))
    return found


def _job_state(event: Dict[str, Any]) -> Tuple[str, Optional[str], Optional[int]]:
    kind = event.get("kind")
    if kind == EventKind.JOB_ENDED:
        return event["status"], event.get("reason"), event.get("exit_code")
    if kind == EventKind.JOB_STOPPING:
        return JobStatus.TERMINATING.value, event.get("reason"), None
    if kind == EventKind.JOB_STARTED:
        return JobStatus.RUNNING.value, None, None
    return JobStatus.PROVISIONING.value, None, None


def _run_event(event: Dict[str, Any], kind: EventKind, actor: Optional[str] = None,
               **fields: Any) -> Dict[str, Any]:
    made = {"kind": kind.value, "at": event["at"], "run": event.get("run"),
            "run_id": event.get("run_id"), "fleet": event.get("fleet"),
            "submission": event.get("submission"), "actor": actor, "host": event.get("host")}
    made.update(fields)
    made["id"] = "%s/%s/%s/%s/%s" % (made["run"], made["run_id"], made["submission"],
                                     kind.value, fields.get("status") or "")
    return made


def _finished(event: Dict[str, Any]) -> Dict[str, Any]:
    """The event as the command and the API answer it: with its targets, message and time."""
    done = dict(event)
    done["targets"] = targets_of(done)
    done["message"] = message_of(done)
    done["recorded_at"] = datetime.fromtimestamp(float(done["at"]), timezone.utc).isoformat(
        timespec="microseconds").replace("+00:00", "Z")
    done.pop("policy", None)
    return done


def report(fleets, root=None, since=None, filters: Optional[Filters] = None, fleet=None,
           now=None, nodes=None, limit: Optional[int] = None) -> Dict[str, Any]:
    """What ``gpufleet event`` shows: ``{"since", "now", "events", "unreachable"}``. ``since``
    as ``gpufleet usage --since`` reads it; without it, the last ``limit`` (default 100)
    events. ``fleet``: only that fleet's hosts are asked."""
    now = time.time() if now is None else now
    filters = filters or Filters()
    start = None if since is None else parse_since(since, now)
    chosen = reachable_fleets(fleets, fleet)
    run = filters.one_run()
    # The runs' statuses are derived from their jobs' events from the start: the hosts are
    # asked from a while before ``since`` (all of one run's), and what is older is left out.
    asked = None if start is None or run else start - LOOK_BACK
    events, unreachable = gather(chosen, root, since=asked, run=run, nodes=nodes)
    derived = [e for e in derive(events) if start is None or float(e["at"]) >= start]
    shown = select([_finished(e) for e in derived], filters,
                   limit=(limit or DEFAULT_LIMIT) if start is None else limit)
    return {"since": start, "now": now, "events": shown, "unreachable": unreachable}
