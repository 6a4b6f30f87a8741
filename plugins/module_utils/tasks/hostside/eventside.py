# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The event record on a fleet host: an append-only file of what happened here.

This file travels to the hosts after the other parts of the helper but the proxy's
(tasks.ssh.host_source) and runs in their namespace: standard library only, Python 3.6+, every
top-level name its own (``event``/``_event`` prefixes).

``EVENTS_ROOT/log.jsonl`` (root, 0600 in a 0700 folder) holds one JSON object per line, only
ever appended to under the folder's lock; past EVENTS_ROTATE bytes it becomes ``log.1.jsonl``
(the one before is dropped). What goes in:

- a job's changes, from the facts its folder keeps (tasks.hostside.nodeside): its container
  made (``created``, or ``state/setup_error``), its command begun (``state/running``, the epoch
  the wrapper wrote), asked to stop (``state/reason``; ``stopped_by`` names who, from the stop
  request), its command ended (``state/exit_code`` and its moment, or the container's own exit
  when the wrapper was killed). A sweep turns the facts not yet recorded into events with the
  moment each happened (the file's time), and notes what it recorded in the job's
  ``events.json``. Every request that lists or changes jobs sweeps first, so nothing is lost
  when no controller asks for a while: the facts wait in the folder, with their times.
- a queue entry's state changing (``enqueue``, ``update``, ``dequeue``), and a member change
  this host applied (``members_change``);
- what a controller sends (``events`` in ``event_add`` or ``members_sync``: a fleet applied,
  its instances created or removed), each with the controller's id, so that the copies on
  several hosts are one event to the reader.

Job events have ids made from what they are about (run, job, submission, kind), so a sweep
that ran twice records nothing twice for the reader (tasks.eventlog keeps the first of an id).
``events`` answers the record, newer than ``since``, of one run or all.
"""

import json
import os
import time
import uuid

try:  # imported as part of the collection (tests, the controller)
    # The parts sent before this one wrap the operations this one wraps again: imported
    # first, so that the order is the hosts' (tasks.ssh.host_source).
    from .admitside import op_status_admit
    from .indexside import op_status_index
    from .replicaside import op_respawn
    from .booking import BOOK_OPS, _Lock, _read_entry, _write_json
    from .memberside import _members_read
    from .nodeside import (OPS, RUN_ROOT, _RUN_NAME, Failure, _json_file, _listdir,
                           _small_file, job_dir, op_status)
    from .usageside import usage_epoch
except ImportError:  # on a host: the files sent before this one run in the same namespace
    pass

EVENTS_ROOT = "/var/lib/gpufleet/events"
EVENTS_ROTATE = 32 * 1024 * 1024
EVENTS_ANSWER_MAX = 20000
# The kinds this file writes, and those a controller may send (events.records.EventKind).
EVENT_HOST_KINDS = ("job.created", "job.started", "job.stopping", "job.ended", "run.queued",
                    "member.granted", "member.revoked", "member.limited")
EVENT_SENT_KINDS = ("fleet.applied", "instance.created", "instance.removed")
_EVENT_FIELDS = ("id", "at", "kind", "actor", "fleet", "instance", "run", "run_id", "job",
                 "job_name", "submission", "status", "old_status", "reason", "exit_code",
                 "state", "old_state", "user", "role", "detail", "started", "nodes", "policy")


def _event_log(old=False):
    return os.path.join(EVENTS_ROOT, "log.1.jsonl" if old else "log.jsonl")


def event_append(items):
    """Append ``items`` (event dicts) to the record, under its lock."""
    if not items:
        return 0
    lines = "".join(json.dumps(item, sort_keys=True) + "\n" for item in items)
    with _Lock(EVENTS_ROOT, private=True):
        path = _event_log()
        try:
            if os.path.getsize(path) > EVENTS_ROTATE:
                os.rename(path, _event_log(old=True))
        except OSError:
            pass
        descriptor = os.open(path, os.O_RDWR | os.O_APPEND | os.O_CREAT, 0o600)
        with os.fdopen(descriptor, "a+") as handle:
            # A line cut short (a write that died half way) is ended first, so that only it
            # is lost, not the line after it.
            if handle.tell() > 0:
                handle.seek(handle.tell() - 1)
                if handle.read(1) != "\n":
                    lines = "\n" + lines
            handle.write(lines)
    return len(items)


def event_read(since=None, run=None):
    """The recorded events newer than ``since`` (epoch seconds), of ``run`` only when given,
    oldest first; lines that cannot be read (a torn last line) are skipped."""
    found = []
    for path in (_event_log(old=True), _event_log()):
        try:
            handle = open(path)
        except (IOError, OSError):
            continue
        with handle:
            for line in handle:
                try:
                    item = json.loads(line)
                except ValueError:
                    continue
                if not isinstance(item, dict) or not isinstance(item.get("at"), (int, float)):
                    continue
                if since is not None and item["at"] < since:
                    continue
                if run is not None and item.get("run") != run:
                    continue
                found.append(item)
    found.sort(key=lambda e: (e["at"], str(e.get("id"))))
    return found[-EVENTS_ANSWER_MAX:]


def _event_int(text):
    try:
        return int(str(text).strip())
    except (TypeError, ValueError):
        return None


def _event_mtime(path):
    """The epoch seconds ``path`` was last written, or None when it is not there."""
    try:
        return os.stat(path).st_mtime
    except OSError:
        return None


def _event_first_line(path):
    text = _small_file(path)
    if text is None:
        return None
    return (text.strip().splitlines() or [""])[0].strip() or None


def _event_job_facts(folder, labels, container):
    """``[(kind, at, fields)]``: what the job's folder (and its container, when the wrapper
    did not say how the command ended) shows happened."""
    state = os.path.join(folder, "state")
    facts = []
    setup_error = _event_first_line(os.path.join(state, "setup_error"))
    created = _event_mtime(os.path.join(folder, "created"))
    if setup_error is not None:
        at = _event_mtime(os.path.join(folder, "record.json")) or _event_mtime(
            os.path.join(state, "setup_error"))
        facts.append(("job.created", at, {"detail": setup_error[:500]}))
        facts.append(("job.ended", _event_mtime(os.path.join(state, "setup_error")) or at,
                      {"reason": "executor_error", "started": False}))
        return facts
    if created is not None:
        # Made when its folder's record was written, just before ``docker run``: ``created``
        # is written once the container already runs, maybe after the command began.
        facts.append(("job.created", _event_mtime(os.path.join(folder, "record.json")) or
                      created, {}))
    running = _event_int(_small_file(os.path.join(state, "running")))
    if running is not None:
        # The wrapper writes the whole second; the file's time is the moment itself.
        facts.append(("job.started", _event_mtime(os.path.join(state, "running")) or
                      float(running), {}))
    reason = _event_first_line(os.path.join(state, "reason"))
    code_path = os.path.join(state, "exit_code")
    code = _event_int(_small_file(code_path))
    if reason is not None and _event_mtime(os.path.join(state, "reason")) is not None:
        by = _event_first_line(os.path.join(folder, "stopped_by"))
        facts.append(("job.stopping", _event_mtime(os.path.join(state, "reason")),
                      {"reason": reason, "actor": by}))
    if code is not None:
        facts.append(("job.ended", _event_mtime(code_path),
                      {"exit_code": code, "reason": reason, "started": running is not None}))
    elif container is not None and container.get("state") in ("exited", "dead"):
        at = usage_epoch(container.get("finished_at")) or time.time()
        facts.append(("job.ended", at, {"exit_code": _event_int(container.get("exit_code")),
                                        "reason": reason, "started": running is not None}))
    return [f for f in facts if f[1] is not None]


def _event_policy(labels):
    """The run's shape a reader needs to decide the run's status from its jobs' events."""
    try:
        asked = json.loads(labels.get("gpufleet.run-spec") or "{}")
    except ValueError:
        asked = {}
    asked = asked if isinstance(asked, dict) else {}
    keys = ("type", "stop_criteria", "startup_order")
    return {"nodes": _event_int(labels.get("gpufleet.nodes")),
            "policy": dict((k, asked.get(k)) for k in keys if asked.get(k))}


def event_sweep(containers=None, run=None):
    """Record what the job folders here (of ``run``, or all) show happened and is not recorded
    yet; ``containers``: what ``status`` answered, for the jobs whose wrapper was killed.
    Answers how many events it recorded."""
    by_name = dict((c.get("name"), c) for c in containers or [] if c.get("name"))
    runs = [run] if run else _listdir(RUN_ROOT)
    found = []
    seen_updates = []
    for name in runs:
        if not _RUN_NAME.match(name or ""):
            continue
        for job in _listdir(os.path.join(RUN_ROOT, name)):
            if not job.isdigit():
                continue
            folder = job_dir(name, int(job))
            record = _json_file(os.path.join(folder, "record.json"))
            if not isinstance(record, dict):
                continue
            labels = record.get("labels") or {}
            submission = _event_int(labels.get("gpufleet.submission")) or 0
            seen_path = os.path.join(folder, "events.json")
            seen = _json_file(seen_path)
            kinds = []
            if isinstance(seen, dict) and seen.get("submission") == submission:
                kinds = [k for k in seen.get("kinds") or [] if isinstance(k, str)]
            if "job.ended" in kinds:
                continue
            new = []
            for kind, at, fields in _event_job_facts(folder, labels,
                                                     by_name.get(record.get("container"))):
                if kind in kinds:
                    continue
                item = {"id": "%s/%s/%s/%s" % (name, job, submission, kind), "at": at,
                        "kind": kind, "run": name, "job": int(job), "submission": submission,
                        "job_name": "%s-%s-%s" % (name, labels.get("gpufleet.replica") or 0,
                                                  job),
                        "run_id": labels.get("gpufleet.run-id"),
                        "fleet": labels.get("gpufleet.fleet"),
                        "actor": labels.get("gpufleet.user") if kind == "job.created" else None}
                if kind == "job.created":
                    item.update(_event_policy(labels))
                item.update(fields)
                new.append(item)
                kinds.append(kind)
            if new:
                found += new
                seen_updates.append((seen_path, {"submission": submission, "kinds": kinds}))
    if found:
        event_append(found)
        for path, value in seen_updates:
            _write_json(path, value)
    return len(found)


def _event_sweep_quietly(answer, containers=None, run=None):
    """Sweep without letting a failure of the record fail the request it rides on; the
    answer says what went wrong (``events_error``)."""
    try:
        event_sweep(containers, run)
    except Exception as exc:  # the record must never stop a job's start, stop or listing
        if isinstance(answer, dict):
            answer["events_error"] = "%s: %s" % (type(exc).__name__, exc)
    return answer


def _event_clean(item, now):
    """A sent event, with only the known fields, a kind a controller may send, and an id."""
    if not isinstance(item, dict) or item.get("kind") not in EVENT_SENT_KINDS:
        raise Failure("events: cannot record %r" % (item,))
    clean = dict((k, item.get(k)) for k in _EVENT_FIELDS if item.get(k) is not None)
    clean["id"] = str(item.get("id") or uuid.uuid4().hex)
    at = item.get("at")
    clean["at"] = float(at) if isinstance(at, (int, float)) and not isinstance(at, bool) else now
    return clean


def _event_sent(payload):
    items = payload.get("events") or []
    if not isinstance(items, list):
        raise Failure("events must be a list")
    now = time.time()
    return event_append([_event_clean(item, now) for item in items])


def op_event_add(payload):
    """Record the events a controller sends."""
    return {"recorded": _event_sent(payload)}


def op_events(payload):
    """The events recorded here newer than ``since`` (of ``run`` only, when given), after a
    sweep of the job folders."""
    since = payload.get("since")
    if since is not None and (isinstance(since, bool) or not isinstance(since, (int, float))):
        raise Failure("events: since must be epoch seconds, got %r" % (since,))
    run = payload.get("run")
    if run is not None and not _RUN_NAME.match(str(run)):
        raise Failure("events: bad run name %r" % (run,))
    answer = {"now": time.time()}
    _event_sweep_quietly(answer, op_status({"run": run} if run else {})["containers"], run)
    answer["events"] = event_read(since, run)
    return answer


# What this file comes after (on a host, these are the namespace's already).
_EVENTS_AFTER = (op_status_admit, op_status_index, op_respawn)
_EVENTS_BEFORE = dict(BOOK_OPS)
_EVENTS_PLAIN = dict(OPS)


def _event_before(name):
    return _EVENTS_BEFORE.get(name) or _EVENTS_PLAIN[name]


def op_status_events(payload):
    answer = _event_before("status")(payload)
    return _event_sweep_quietly(answer, answer.get("containers"), payload.get("run"))


def op_start_events(payload):
    """Record how an earlier submission of the run ended before its folder is written anew."""
    run = (payload.get("job") or {}).get("run")
    if run and _RUN_NAME.match(str(run)):
        _event_sweep_quietly({}, op_status({"run": run})["containers"], run)
    return _event_before("start")(payload)


def op_remove_events(payload):
    run = payload.get("run")
    if run and _RUN_NAME.match(str(run)):
        _event_sweep_quietly({}, op_status({"run": run})["containers"], run)
    return _event_before("remove")(payload)


def op_stop_events(payload):
    """Note who asks the jobs to stop (``by``), for the stop's event, then stop."""
    by = payload.get("by")
    if by:
        for item in payload.get("jobs") or []:
            if not _RUN_NAME.match(str(item.get("run"))):
                continue
            folder = job_dir(item["run"], item.get("job_num"))
            state = os.path.join(folder, "state")
            if os.path.isdir(state) and not os.path.exists(os.path.join(state, "reason")) \
                    and not os.path.exists(os.path.join(state, "exit_code")):
                with open(os.path.join(folder, "stopped_by"), "w") as handle:
                    handle.write(str(by)[:100] + "\n")
    answer = _event_before("stop")(payload)
    return _event_sweep_quietly(answer)


def _event_entry(run):
    entry = _read_entry(run) if _RUN_NAME.match(str(run or "")) else None
    return entry if isinstance(entry, dict) else None


def _event_queue_op(name):
    def op(payload):
        run = payload.get("run") or (payload.get("entry") or {}).get("run")
        before = _event_entry(run)
        answer = _event_before(name)(payload)
        after = _event_entry(run)
        old = (before or {}).get("state")
        new = (after or {}).get("state") if after else ("removed" if before else None)
        if new and (new != old or (after or {}).get("reason") != (before or {}).get("reason")):
            entry = after or before
            fleets = entry.get("fleets") or []
            now = time.time()
            try:
                event_append([{
                    "id": uuid.uuid4().hex, "at": now, "kind": "run.queued", "run": run,
                    "run_id": entry.get("run_id"),
                    "actor": payload.get("by") or (entry.get("user") if not old else None),
                    "fleet": fleets[0] if fleets and isinstance(fleets[0], str) else None,
                    "state": new, "old_state": old, "reason": (after or {}).get("reason"),
                    "detail": (after or {}).get("message") if new != old else None,
                    "submission": entry.get("submissions")}])
            except Exception as exc:  # the queue's change stands; the answer says so
                if isinstance(answer, dict):
                    answer["events_error"] = "%s: %s" % (type(exc).__name__, exc)
        return answer
    return op


_EVENT_MEMBER_KINDS = {"grant": "member.granted", "revoke": "member.revoked",
                       "limit": "member.limited"}


def op_members_change_events(payload):
    answer = _event_before("members_change")(payload)
    change = payload.get("change") or {}
    if isinstance(answer, dict) and answer.get("applied") and isinstance(change, dict):
        kind = _EVENT_MEMBER_KINDS.get(change.get("kind"))
        stamp = change.get("stamp") or [time.time(), ""]
        fleet = ((answer.get("doc") or {}).get("fleet") or
                 (_members_read() or {}).get("fleet"))
        limits = ", ".join("%s=%s" % (k, change[k]) for k in ("runs", "gpus", "nodes")
                           if change.get(k) is not None)
        if kind:
            event_append([{
                "id": "member/%s/%s/%s/%s" % (fleet, change.get("kind"), change.get("user"),
                                              stamp[0]),
                "at": float(stamp[0]), "kind": kind, "fleet": fleet, "user": change.get("user"),
                "actor": change.get("by"), "role": change.get("role"),
                "detail": limits or None}])
    return answer


def op_members_sync_events(payload):
    answer = _event_before("members_sync")(payload)
    if payload.get("events"):
        _event_sent(payload)
    return answer


BOOK_OPS.update({
    "status": op_status_events,
    "start": op_start_events,
    "remove": op_remove_events,
    "stop": op_stop_events,
    "enqueue": _event_queue_op("enqueue"),
    "update": _event_queue_op("update"),
    "dequeue": _event_queue_op("dequeue"),
    "members_change": op_members_change_events,
    "members_sync": op_members_sync_events,
    "events": op_events,
    "event_add": op_event_add,
})
