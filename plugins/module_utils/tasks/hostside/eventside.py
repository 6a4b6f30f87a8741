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
- the end of a multi-node run whose job 0 ran here: once job 0's wrapper has every job's word
  (tasks.hostside.wrapper_peers), its ``state/run_end`` becomes a ``run.status`` event, the
  status decided as tasks.lifecycle.decide decides it (tasks.hostside.runendside), with the id the
  reader gives the same end (tasks.eventlog), so that the hosts can post a run's end;
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
    from .runendside import runend_id, runend_job, runend_read, runend_verdict
    from .nodeside import (OPS, RUN_ROOT, _RUN_NAME, Failure, _json_file, _listdir,
                           _small_file, job_dir, op_status)
    from .usageside import usage_epoch
except ImportError:  # on a host: the files sent before this one run in the same namespace
    pass

EVENTS_ROOT = "/var/lib/gpufleet/events"
EVENTS_ROTATE = 32 * 1024 * 1024
EVENTS_ANSWER_MAX = 20000
EVENTS_TAIL_BYTES = 8 * 1024 * 1024
# The kinds this file writes, and those a controller may send (events.records.EventKind).
EVENT_HOST_KINDS = ("job.created", "job.started", "job.stopping", "job.ended", "run.queued",
                    "run.status", "member.granted", "member.revoked", "member.limited")
EVENT_SENT_KINDS = ("fleet.applied", "instance.created", "instance.removed")
_EVENT_FIELDS = ("id", "at", "kind", "actor", "fleet", "instance", "run", "run_id", "job",
                 "job_name", "submission", "status", "old_status", "reason", "exit_code",
                 "state", "old_state", "user", "role", "detail", "started", "nodes", "policy",
                 "deliver", "gone")


def _event_log(old=False):
    return os.path.join(EVENTS_ROOT, "log.1.jsonl" if old else "log.jsonl")


def event_append(items):
    """Append ``items`` (event dicts) to the record, under its lock."""
    if not items:
        return 0
    with _Lock(EVENTS_ROOT, private=True):
        return _event_append_locked(items)


def _event_append_locked(items):
    """Append ``items`` (under the record's lock, which the caller holds)."""
    recorded = time.time()
    lines = "".join(json.dumps(dict(item, recorded=recorded), sort_keys=True) + "\n"
                    for item in items)
    path = _event_log()
    try:
        if os.path.getsize(path) > EVENTS_ROTATE:
            os.rename(path, _event_log(old=True))
    except OSError:
        pass
    descriptor = os.open(path, os.O_RDWR | os.O_APPEND | os.O_CREAT, 0o600)
    with os.fdopen(descriptor, "a+") as handle:
        # A line cut short (a write that died half way) is ended first, so that only it is
        # lost, not the line after it.
        if handle.tell() > 0:
            handle.seek(handle.tell() - 1)
            if handle.read(1) != "\n":
                lines = "\n" + lines
        handle.write(lines)
    return len(items)


def event_end():
    """Where the record ends now: ``[inode of log.jsonl, its size]`` (see event_tail)."""
    try:
        st = os.stat(_event_log())
    except OSError:
        return [None, 0]
    return [st.st_ino, st.st_size]


def event_tail(cursor):
    """``(events, cursor)``: the whole lines appended since ``cursor`` (what event_end or an
    earlier call answered), in the order they were written, and where the next call starts.
    A record rotated since is read from the cursor to its end, then the new file from its
    start; lost lines (rotated twice) are skipped."""
    ino, offset = (cursor or [None, 0])[:2]
    parts = []
    try:
        old = os.stat(_event_log(old=True))
    except OSError:
        old = None
    current = event_end()
    if ino is not None and ino == current[0]:
        parts.append((_event_log(), offset))
    elif ino is not None and old is not None and ino == old.st_ino:
        parts += [(_event_log(old=True), offset), (_event_log(), 0)]
    else:
        parts.append((_event_log(), 0))
    found = []
    end = current
    for path, start in parts:
        try:
            handle = open(path, "rb")
        except (IOError, OSError):
            continue
        with handle:
            stat = os.fstat(handle.fileno())
            if path == _event_log() and stat.st_ino != current[0]:
                start = 0   # rotated between the look and the opening: all of it is new
            if start > stat.st_size:
                start = 0   # not the file the cursor was in (a number used again)
            handle.seek(start)
            data = handle.read()
        whole = data[:data.rfind(b"\n") + 1]
        for line in whole.splitlines():
            try:
                item = json.loads(line.decode("utf-8"))
            except ValueError:
                continue
            if isinstance(item, dict) and isinstance(item.get("at"), (int, float)):
                found.append(item)
        end = [stat.st_ino, start + len(whole)]
    return found, end


def event_read(since=None, run=None):
    """The recorded events newer than ``since`` (epoch seconds), of ``run`` only when given,
    oldest first; lines that cannot be read (a torn last line) are skipped. Without ``since``
    and ``run``, only the last EVENTS_TAIL_BYTES of the record are read (the latest events)."""
    found = []
    budget = EVENTS_TAIL_BYTES if since is None and run is None else None
    for path in (_event_log(), _event_log(old=True)):
        try:
            handle = open(path, "rb")
        except (IOError, OSError):
            continue
        with handle:
            size = os.fstat(handle.fileno()).st_size
            if budget is not None:
                if budget <= 0:
                    break
                start = max(0, size - budget)
                budget -= size - start
                handle.seek(start)
                if start:
                    handle.readline()   # the part of a line before the start
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
    """A small whole number from a file a job's container may write (None otherwise)."""
    text = str(text if text is not None else "").strip()
    if not text or len(text) > 12:
        return None
    try:
        return int(text)
    except ValueError:
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
    return (text.strip().splitlines() or [""])[0].strip()[:200] or None


def _event_job_facts(folder, container, gone):
    """``[(kind, at, fields)]``: what the job's folder (and its container, when the wrapper
    did not say how the command ended) shows happened. ``gone``: its container is not on
    this host any more. The state folder is the job's own (its container writes there): a
    moment is held between the folder's making and now, a code to a small number."""
    state = os.path.join(folder, "state")
    made = _event_mtime(os.path.join(folder, "record.json")) or 0.0
    now = time.time()

    def moment(value):
        return None if value is None else min(max(float(value), made), now)

    facts = []
    setup_error = _event_first_line(os.path.join(state, "setup_error"))
    if setup_error is not None:
        facts.append(("job.created", made, {"detail": setup_error}))
        facts.append(("job.ended", moment(_event_mtime(os.path.join(state, "setup_error"))),
                      {"reason": "executor_error", "started": False}))
        return facts
    if os.path.exists(os.path.join(folder, "created")):
        # Made when its folder's record was written, just before ``docker run``: ``created``
        # is written once the container already runs, maybe after the command began.
        facts.append(("job.created", made, {}))
    running_path = os.path.join(state, "running")
    running = _event_int(_small_file(running_path))
    if running is not None:
        # The wrapper writes the whole second; the file's time is the moment itself.
        started = _event_mtime(running_path)
        facts.append(("job.started", moment(running if started is None else started), {}))
    reason = _event_first_line(os.path.join(state, "reason"))
    reason_at = _event_mtime(os.path.join(state, "reason"))
    if reason is not None and reason_at is not None:
        by = _event_first_line(os.path.join(folder, "stopped_by"))
        facts.append(("job.stopping", moment(reason_at), {"reason": reason, "actor": by}))
    code_path = os.path.join(state, "exit_code")
    code = _event_int(_small_file(code_path))
    ended = {"reason": reason, "started": running is not None}
    if code is not None:
        facts.append(("job.ended", moment(_event_mtime(code_path)), dict(ended, exit_code=code)))
    elif container is not None and container.get("state") in ("exited", "dead"):
        at = usage_epoch(container.get("finished_at")) or now
        facts.append(("job.ended", moment(at), dict(
            ended, exit_code=_event_int(container.get("exit_code")))))
    elif gone and facts:
        # Removed by hand while it ran: it ended when it was found gone (ps judges it so).
        facts.append(("job.ended", now, dict(ended, exit_code=None, gone=True)))
    return [f for f in facts if f[1] is not None]


def _event_run_status(folder, labels, made):
    """The ``run.status`` fact of a multi-node run from job 0's ``state/run_end`` (None while
    it is not there, or when it does not decide)."""
    path = os.path.join(folder, "state", "run_end")
    nodes = _event_int(labels.get("gpufleet.nodes")) or 1
    ends = runend_read(path, nodes)
    if ends is None:
        return None
    verdict = runend_verdict(ends, _event_policy(labels)["policy"].get("stop_criteria"))
    if verdict is None:
        return None
    status, reason, num = verdict
    fields = {"status": status, "reason": reason, "nodes": nodes}
    end = ends.get(num) or {}
    if num is not None and status != "done":
        fields["detail"] = "job %d %s" % (num, "went without a word (no sshd answered)"
                                          if end.get("lost") else "ended: %s%s" % (
                                              runend_job(end)[1] or "done",
                                              "" if end.get("exit_code") is None else
                                              ", exit code %s" % end["exit_code"]))
    at = min(max(_event_mtime(path) or time.time(), made), time.time())
    return "run.status", at, fields


def _event_policy(labels):
    """The run's shape a reader needs to decide the run's status from its jobs' events."""
    try:
        asked = json.loads(labels.get("gpufleet.run-spec") or "{}")
        service = json.loads(labels.get("gpufleet.service") or "{}")
    except ValueError:
        asked, service = {}, {}
    asked = asked if isinstance(asked, dict) else {}
    keys = ("type", "stop_criteria", "startup_order", "schedule")
    policy = dict((k, asked.get(k)) for k in keys if asked.get(k))
    if isinstance(service, dict) and service.get("respawn"):
        policy["respawn"] = True
    return {"nodes": _event_int(labels.get("gpufleet.nodes")), "policy": policy}


def _event_job(name, job, by_name, known):
    """``(events, seen file, what it notes)`` of one job folder, or None when nothing is new."""
    folder = job_dir(name, int(job))
    record = _json_file(os.path.join(folder, "record.json"))
    if not isinstance(record, dict):
        return None
    labels = record.get("labels") or {}
    container = str(record.get("container") or "")
    submission = _event_int(labels.get("gpufleet.submission")) or 0
    # One container's life: a run of the same name again, a respawned replica and a replaced
    # one are other containers (``created`` holds the container's id).
    life = "%s/%s/%s" % (labels.get("gpufleet.run-id") or "",
                         submission, (_small_file(os.path.join(folder, "created")) or "")
                         .strip()[:12])
    seen_path = os.path.join(folder, "events.json")
    seen = _json_file(seen_path)
    kinds = []
    if isinstance(seen, dict) and seen.get("life") == life:
        kinds = [k for k in seen.get("kinds") or [] if isinstance(k, str)]
    # Job 0 of a multi-node run writes the run's end after its own (once every job told it
    # theirs): its folder is read until that is recorded too.
    judge = job == "0" and (_event_int(labels.get("gpufleet.nodes")) or 1) > 1 and \
        "run.status" not in kinds
    if "job.ended" in kinds and not (judge and os.path.exists(
            os.path.join(folder, "state", "run_end"))):
        return None
    gone = known and (container not in by_name or by_name[container].get("state") == "gone")
    facts = _event_job_facts(folder, by_name.get(container), gone)
    undecided = False
    if judge and "job.ended" in kinds + [f[0] for f in facts]:
        made = _event_mtime(os.path.join(folder, "record.json")) or 0.0
        # Ends that decide nothing are read once: noted as if said, with no event. Whether
        # they are there is asked first: written between the reading and the asking, they
        # would be noted unread.
        there = os.path.exists(os.path.join(folder, "state", "run_end"))
        said = _event_run_status(folder, labels, made)
        undecided = said is None and there
        facts += [said] if said else []
    new = []
    for kind, at, fields in facts:
        if kind in kinds:
            continue
        item = {"id": "%s/%s/%s" % (life, job, kind), "at": at, "kind": kind, "run": name,
                "job": int(job), "submission": submission, "job_name": container,
                "run_id": labels.get("gpufleet.run-id"), "fleet": labels.get("gpufleet.fleet"),
                "actor": labels.get("gpufleet.user") if kind == "job.created" else None}
        if kind == "run.status":
            # The run's, not the job's: the id is the one the reader derives for the same end
            # (tasks.eventlog), so that the two are one event.
            del item["job"], item["job_name"]
            item["id"] = runend_id(name, item["run_id"], submission, fields["status"])
        if kind in ("job.created", "job.ended"):
            item.update(_event_policy(labels))
        item.update(fields)
        new.append(item)
        kinds.append(kind)
    if undecided:
        kinds.append("run.status")
    if not new and not undecided:
        return None
    return new, seen_path, {"life": life, "kinds": kinds}


def event_sweep(containers=None, run=None):
    """Record what the job folders here (of ``run``, or all) show happened and is not recorded
    yet; ``containers``: what ``status`` answered (the jobs whose wrapper was killed, or whose
    container is gone). A folder that cannot be read is passed over, never the others.
    Answers how many events it recorded."""
    known = containers is not None
    by_name = dict((c.get("name"), c) for c in containers or [] if c.get("name"))
    runs = [run] if run else _listdir(RUN_ROOT)
    # Under the record's lock from the reading of what is noted to the noting: two sweeps at
    # once (a tick and a controller's look) never record one fact twice.
    with _Lock(EVENTS_ROOT, private=True):
        return _event_sweep_locked(runs, by_name, known)


def _event_sweep_locked(runs, by_name, known):
    found = []
    notes = []
    for name in runs:
        if not _RUN_NAME.match(name or ""):
            continue
        for job in _listdir(os.path.join(RUN_ROOT, name)):
            if not job.isdigit():
                continue
            try:
                made = _event_job(name, job, by_name, known)
            except Exception:  # one job's odd folder never stops the others' record
                continue
            if made:
                found += made[0]
                notes.append(made[1:])
    if found:
        _event_append_locked(found)
    for path, value in notes:
        if os.path.isdir(os.path.dirname(path)):   # not a folder removed meanwhile
            _write_json(path, value)
    return len(found)


def _event_quietly(answer, work):
    """Do ``work`` (a write to the record) without letting its failure fail the request it
    rides on, which has done what it was asked; the answer says what went wrong
    (``events_error``)."""
    try:
        work()
    except Exception as exc:  # the record must never stop a job's start, stop or listing
        if isinstance(answer, dict):
            answer["events_error"] = "%s: %s" % (type(exc).__name__, exc)
    return answer


def _event_sweep_quietly(answer, containers=None, run=None):
    """A sweep (with ``containers`` of ``status``, or asked here when None)."""
    def sweep():
        found = containers
        if found is None:
            found = op_status({"run": run} if run else {})["containers"]
        event_sweep(found, run)
    return _event_quietly(answer, sweep)


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
    _event_sweep_quietly(answer, None, run)
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
    if run and _RUN_NAME.match(str(run)) and os.path.isdir(os.path.join(RUN_ROOT, run)):
        _event_sweep_quietly({}, None, run)
    return _event_before("start")(payload)


def op_remove_events(payload):
    run = payload.get("run")
    if run and _RUN_NAME.match(str(run)) and os.path.isdir(os.path.join(RUN_ROOT, run)):
        _event_sweep_quietly({}, None, run)
    return _event_before("remove")(payload)


def op_stop_events(payload):
    """Note who asks the jobs to stop (``by``), for the stop's event, then stop."""
    by = payload.get("by")

    def note():
        for item in payload.get("jobs") or []:
            if not _RUN_NAME.match(str(item.get("run"))):
                continue
            folder = job_dir(item["run"], int(item.get("job_num")))
            state = os.path.join(folder, "state")
            if os.path.isdir(state) and not os.path.exists(os.path.join(state, "reason")) \
                    and not os.path.exists(os.path.join(state, "exit_code")):
                with open(os.path.join(folder, "stopped_by"), "w") as handle:
                    handle.write(str(by)[:100] + "\n")
    noted = _event_quietly({}, note) if by else {}
    answer = _event_before("stop")(payload)
    if isinstance(answer, dict) and noted.get("events_error"):
        answer["events_error"] = noted["events_error"]
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
        if before and after and before.get("run_id") != after.get("run_id"):
            before = None   # a new run of the name over one that ended
        old = (before or {}).get("state")
        new = (after or {}).get("state") if after else ("removed" if before else None)
        if new and (new != old or (after or {}).get("reason") != (before or {}).get("reason")):
            entry = after or before
            fleets = entry.get("fleets") or []
            now = time.time()
            reason = (after or {}).get("reason")
            # The same change seen by two controllers at once (each reads the entry around
            # its own request) reads as one event.
            ident = "queue/%s/%s/%s/%s/%s" % (entry.get("run_id"), entry.get("submissions"),
                                              old, new, reason)
            try:
                event_append([{
                    "id": ident, "at": now, "kind": "run.queued", "run": run,
                    "run_id": entry.get("run_id"),
                    "actor": payload.get("by") or (entry.get("user") if not old else None),
                    "fleet": fleets[0] if fleets and isinstance(fleets[0], str) else None,
                    "state": new, "old_state": old, "reason": reason,
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
            _event_quietly(answer, lambda: event_append([{
                "id": "member/%s/%s/%s/%s" % (fleet, change.get("kind"), change.get("user"),
                                              stamp[0]),
                "at": float(stamp[0]), "kind": kind, "fleet": fleet, "user": change.get("user"),
                "actor": change.get("by"), "role": change.get("role"),
                "detail": limits or None, "deliver": payload.get("deliver", True)}]))
    return answer


def op_members_sync_events(payload):
    answer = _event_before("members_sync")(payload)
    if payload.get("events"):
        _event_quietly(answer, lambda: _event_sent(payload))
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
