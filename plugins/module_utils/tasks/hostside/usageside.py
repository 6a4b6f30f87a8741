# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Usage accounting on a fleet host: one durable record per job and submission.

This file travels to the hosts after tasks.hostside.nodeside, booking, healthside, logside and
indexside (tasks.ssh.host_source) and runs in their namespace: standard library only, Python
3.6+, every top-level name its own (``usage``/``_usage`` prefixes).

``USAGE_ROOT/<run>/<job>-<submission>.json`` (root, 0600 in 0700 folders) says who ran what
here and for how long: fleet, run, run_id, job, submission, user (the ``gpufleet.user`` label,
None for a run made before it), host, nodes, gpus, start and end (epoch seconds, from the
container's own start and finish times; end None while it runs), exit_code and price (per hour
of the share this job held: the instance's price times its blocks over the host's). It is
written when the job's container starts (``start``) and completed when this helper sees the
container ended: in any ``status`` request, before ``remove`` takes the container away, after
``stop``. Nothing of it lives on the controller or in the container, so it outlives both.
Records are kept USAGE_KEEP seconds after their end, then pruned (once a day at most, at a
start).

``USAGE_ROOT/recent.json`` keeps, for the sums, the records that can still count in the last
day (running, or ended within it): ``status`` answers ``usage_24h`` ({user: GPU-seconds over the
last 24 hours}, a running job counting until now) from that one small file, not from every
record. ``usage`` (``{"since", "user", "run"}``) answers the records that overlap ``since``..now.
"""

import json
import os
import re
import time

try:  # imported as part of the collection (tests, the controller)
    from .booking import BOOK_OPS, HOLDING_STATES, _Lock
    from .nodeside import OPS, RUN_ROOT, _RUN_NAME, Failure, _json_file, _listdir, op_status
except ImportError:  # on a host: the files sent before this one run in the same namespace
    pass

USAGE_ROOT = "/var/lib/gpufleet/usage"
USAGE_DAY = 86400
USAGE_KEEP = 400 * USAGE_DAY
USAGE_USER_LABEL = "gpufleet.user"
# Docker's times: 2026-11-29T08:14:11.123456789Z (a zero time is 0001-01-01T00:00:00Z).
_USAGE_TIME = re.compile(r"(\d{4})-(\d\d)-(\d\d)T(\d\d):(\d\d):(\d\d)(\.\d+)?"
                         r"(Z|[+-]\d\d:?\d\d)?\Z")


def usage_epoch(text):
    """Epoch seconds of a Docker time (RFC 3339), or None (empty, zero or unreadable)."""
    import calendar

    match = _USAGE_TIME.match(str(text or "").strip())
    if not match or match.group(1) == "0001":
        return None
    parts = [int(match.group(i)) for i in range(1, 7)]
    value = calendar.timegm((parts[0], parts[1], parts[2], parts[3], parts[4], parts[5]))
    if match.group(7):
        value += float(match.group(7))
    zone = match.group(8)
    if zone and zone != "Z":
        sign = -1 if zone[0] == "+" else 1
        digits = zone[1:].replace(":", "")
        value += sign * (int(digits[:2]) * 3600 + int(digits[2:]) * 60)
    return round(float(value), 3)


def _usage_number(text):
    try:
        return float(text)
    except (TypeError, ValueError):
        return None


def usage_price(labels):
    """The price per hour of the share a job holds: the instance's price (the run-spec label)
    times its blocks over the host's; None when the instance has no price (an SSH host)."""
    try:
        spec = json.loads(labels.get("gpufleet.run-spec") or "{}")
    except ValueError:
        spec = {}
    price = _usage_number(spec.get("price")) if isinstance(spec, dict) else None
    if price is None:
        return None
    blocks = _usage_number(labels.get("gpufleet.blocks"))
    total = _usage_number(labels.get("gpufleet.total-blocks"))
    if blocks and total and 0 < blocks < total:
        price = price * blocks / total
    return round(price, 6)


def usage_record(entry, now):
    """A new usage record from a status entry of a task container (its labels and times), or
    None when it is no job's container or has not started."""
    labels = entry.get("labels") or {}
    run = labels.get("gpufleet.run")
    job = labels.get("gpufleet.job")
    start = usage_epoch(entry.get("started_at"))
    if not run or not _RUN_NAME.match(run) or not str(job or "").isdigit() or start is None:
        return None
    if entry.get("state") == "never-created":
        return None
    gpus = [g for g in str(labels.get("gpufleet.gpus") or "").split(",") if g.strip()]
    try:
        submission = int(labels.get("gpufleet.submission") or 0)
        nodes = int(labels.get("gpufleet.nodes") or 1)
    except ValueError:
        submission, nodes = 0, 1
    record = {
        "fleet": labels.get("gpufleet.fleet") or None,
        "run": run, "run_id": labels.get("gpufleet.run-id") or None,
        "job": int(job), "submission": submission,
        "user": labels.get(USAGE_USER_LABEL) or None,
        "host": labels.get("gpufleet.instance") or None,
        "nodes": nodes, "gpus": len(gpus),
        "start": start, "end": None, "exit_code": None,
        "price": usage_price(labels),
    }
    usage_settle(record, entry, now)
    return record


def usage_settle(record, entry, now):
    """Complete ``record`` from its container's entry once the container has ended (its own
    finish time; ``now`` when Docker has none). True when it changed."""
    if record.get("end") is not None or entry.get("state") in HOLDING_STATES:
        return False
    end = usage_epoch(entry.get("finished_at"))
    record["end"] = max(record["start"], end if end is not None else now)
    code = entry.get("exit_code")
    record["exit_code"] = code if isinstance(code, int) else None
    return True


def usage_path(run, job, submission):
    return os.path.join(USAGE_ROOT, run, "%s-%s.json" % (job, submission))


def _usage_key(record):
    return "%s/%s-%s" % (record["run"], record["job"], record["submission"])


def _usage_write(path, value):
    """Whole or not at all, 0600 in 0700 folders."""
    folder = os.path.dirname(path)
    os.makedirs(folder, 0o700, exist_ok=True)
    temp = "%s.%d.tmp" % (path, os.getpid())
    with open(temp, "w") as handle:
        os.chmod(temp, 0o600)
        json.dump(value, handle, sort_keys=True)
    os.rename(temp, path)


def _usage_recent_path():
    return os.path.join(USAGE_ROOT, "recent.json")


def usage_recent():
    """``{key: {user, gpus, start, end}}``: the records that may count in the last day; None
    when the file is missing or unreadable (it is then rebuilt from the records)."""
    found = _json_file(_usage_recent_path())
    return found if isinstance(found, dict) else None


def _usage_recent_rebuilt(now):
    recent = {}
    for record in usage_records(now - USAGE_DAY):
        recent[_usage_key(record)] = dict((k, record.get(k))
                                          for k in ("user", "gpus", "start", "end"))
    return recent


def usage_store(records, now, rebuild=False):
    """Write new or completed records, and note them in recent.json (ended more than a day
    ago ones are dropped from it), under the lock. ``rebuild``: write recent.json even with
    no record to write (it was missing)."""
    if not records and not rebuild:
        return
    with _Lock(USAGE_ROOT):
        recent = usage_recent()
        if recent is None:
            recent = _usage_recent_rebuilt(now)
        for record in records:
            path = usage_path(record["run"], record["job"], record["submission"])
            held = _json_file(path)
            if isinstance(held, dict) and held.get("end") is not None:
                continue   # completed already (by another request)
            _usage_write(path, record)
            recent[_usage_key(record)] = dict((k, record.get(k))
                                              for k in ("user", "gpus", "start", "end"))
        for key in [k for k, v in recent.items()
                    if v.get("end") is not None and v["end"] < now - USAGE_DAY]:
            del recent[key]
        _usage_write(_usage_recent_path(), recent)


def usage_seen(containers, now, gone=False):
    """Records for the task containers of a status answer: a new one for a started container
    that has none, the end for one that ended. ``gone``: these containers are about to be
    removed, so one still running ends now."""
    recent = usage_recent() or {}
    changed = []
    for entry in containers:
        labels = entry.get("labels") or {}
        run, job = labels.get("gpufleet.run"), labels.get("gpufleet.job")
        if not run or not _RUN_NAME.match(run) or not str(job or "").isdigit():
            continue
        key = "%s/%s-%s" % (run, job, labels.get("gpufleet.submission") or 0)
        noted = recent.get(key)
        if noted is not None and (noted.get("end") is not None or (
                not gone and entry.get("state") in HOLDING_STATES)):
            continue   # ended and written, or still running as written
        path = usage_path(run, job, labels.get("gpufleet.submission") or 0)
        if noted is None and os.path.exists(path):
            held = _json_file(path)
            if not isinstance(held, dict) or held.get("end") is not None:
                continue
            record = held
        elif noted is not None:
            record = _json_file(path)
            if not isinstance(record, dict):
                record = usage_record(entry, now)
        else:
            record = usage_record(entry, now)
            if record is not None:
                if gone and record["end"] is None:
                    record["end"] = max(record["start"], now)
                changed.append(record)
                continue
        if record is None:
            continue
        if gone and entry.get("state") in HOLDING_STATES:
            record["end"] = max(record["start"], now)
            changed.append(record)
        elif usage_settle(record, entry, now):
            changed.append(record)
    usage_store(changed, now)


def usage_orphans(containers, now):
    """Running records whose container is gone from a whole-host status (removed by hand or
    by Docker): ended when the job's wrapper wrote its exit code, else now."""
    names = set()
    for entry in containers:
        labels = entry.get("labels") or {}
        names.add("%s/%s-%s" % (labels.get("gpufleet.run"), labels.get("gpufleet.job"),
                                labels.get("gpufleet.submission") or 0))
    recent = usage_recent() or {}
    changed = []
    for key, noted in sorted(recent.items()):
        if noted.get("end") is not None or key in names:
            continue
        run, _sep, rest = key.partition("/")
        job, _sep, submission = rest.partition("-")
        record = _json_file(usage_path(run, job, submission))
        if not isinstance(record, dict) or record.get("end") is not None:
            continue
        try:
            end = os.stat(os.path.join(RUN_ROOT, run, job, "state", "exit_code")).st_mtime
        except OSError:
            end = now
        record["end"] = max(record["start"], min(end, now))
        changed.append(record)
    usage_store(changed, now)


def usage_sums(recent, now, window=USAGE_DAY):
    """``{user: GPU-seconds}`` within the last ``window`` seconds (a running job counts until
    ``now``); a record without a user counts under ``"-"``."""
    since = now - window
    sums = {}
    for noted in (recent or {}).values():
        start = noted.get("start")
        end = noted.get("end")
        end = now if end is None else end
        gpus = noted.get("gpus") or 0
        if start is None or end <= since or not gpus:
            continue
        seconds = (min(end, now) - max(start, since)) * gpus
        if seconds > 0:
            user = noted.get("user") or "-"
            sums[user] = round(sums.get(user, 0) + seconds, 3)
    return sums


def usage_records(since=None, user=None, run=None):
    """Every usage record on this host that overlaps ``since``..now, of ``user`` and ``run``
    when given."""
    found = []
    runs = [run] if run else _listdir(USAGE_ROOT)
    for name in runs:
        if not _RUN_NAME.match(name or ""):
            continue
        for item in _listdir(os.path.join(USAGE_ROOT, name)):
            if not item.endswith(".json"):
                continue
            record = _json_file(os.path.join(USAGE_ROOT, name, item))
            if not isinstance(record, dict) or "start" not in record:
                continue
            if since is not None and record.get("end") is not None and record["end"] < since:
                continue
            if user is not None and record.get("user") != user:
                continue
            found.append(record)
    return found


def usage_prune(now):
    """Remove the records that ended more than USAGE_KEEP seconds ago (once a day at most)."""
    stamp = os.path.join(USAGE_ROOT, "pruned")
    try:
        if now - os.stat(stamp).st_mtime < USAGE_DAY:
            return []
    except OSError:
        pass
    removed = []
    with _Lock(USAGE_ROOT):
        for name in _listdir(USAGE_ROOT):
            folder = os.path.join(USAGE_ROOT, name)
            if not _RUN_NAME.match(name) or not os.path.isdir(folder):
                continue
            for item in _listdir(folder):
                path = os.path.join(folder, item)
                record = _json_file(path)
                if (isinstance(record, dict) and record.get("end") is not None
                        and record["end"] < now - USAGE_KEEP):
                    os.remove(path)
                    removed.append(path)
            if not _listdir(folder):
                os.rmdir(folder)
        with open(stamp, "w"):
            pass
        os.utime(stamp, (now, now))
    return removed


def op_usage(payload):
    """The usage records here that overlap ``since``..now (``user``, ``run``: only theirs)."""
    since = payload.get("since")
    if since is not None and (isinstance(since, bool) or not isinstance(since, (int, float))):
        raise Failure("usage: since must be epoch seconds, got %r" % (since,))
    run = payload.get("run")
    if run is not None and not _RUN_NAME.match(str(run)):
        raise Failure("usage: bad run name %r" % (run,))
    return {"records": usage_records(since, payload.get("user"), run),
            "now": time.time()}


_STATUS_BEFORE_USAGE = BOOK_OPS["status"]
_START_BEFORE_USAGE = BOOK_OPS["start"]
_REMOVE_BEFORE_USAGE = BOOK_OPS["remove"]
_STOP_BEFORE_USAGE = BOOK_OPS.get("stop") or OPS["stop"]


def op_status_usage(payload):
    """The host's status, its containers' usage records brought up to date, and
    ``usage_24h``."""
    answer = _STATUS_BEFORE_USAGE(payload)
    now = time.time()
    containers = answer.get("containers") or []
    usage_seen(containers, now)
    if not payload.get("run"):
        usage_orphans(containers, now)
    recent = usage_recent()
    if recent is None and os.path.isdir(USAGE_ROOT):
        usage_store([], now, rebuild=True)
        recent = usage_recent()
    answer["usage_24h"] = usage_sums(recent, now)
    return answer


def op_start_usage(payload):
    """Start a job; its usage record is written as soon as its container runs. An earlier run
    of the name that the start clears first is settled before."""
    job = payload.get("job") or {}
    if job.get("run"):
        usage_seen(op_status({"run": job["run"]})["containers"], time.time())
    answer = _START_BEFORE_USAGE(payload)
    if answer.get("started") and job.get("run"):
        now = time.time()
        mine = [c for c in op_status({"run": job["run"]})["containers"]
                if c.get("name") == job.get("container")]
        usage_seen(mine, now)
        usage_prune(now)
    return answer


def op_remove_usage(payload):
    """Settle the usage records of what is removed (a container that still runs ends now),
    then remove."""
    run = payload.get("run")
    if run and _RUN_NAME.match(str(run)):
        jobs = payload.get("jobs")
        wanted = None if jobs is None else set(str(j) for j in jobs)
        found = [c for c in op_status({"run": run})["containers"]
                 if wanted is None or str((c.get("labels") or {}).get("gpufleet.job")) in wanted]
        usage_seen(found, time.time(), gone=True)
    return _REMOVE_BEFORE_USAGE(payload)


def op_stop_usage(payload):
    """Stop, then settle the stopped containers' usage records with their finish times."""
    answer = _STOP_BEFORE_USAGE(payload)
    runs = sorted(set(str(item.get("run")) for item in payload.get("jobs") or []
                      if _RUN_NAME.match(str(item.get("run")))))
    names = set(answer.get("stopped") or [])
    now = time.time()
    for run in runs:
        usage_seen([c for c in op_status({"run": run})["containers"] if c.get("name") in names],
                   now)
    return answer


BOOK_OPS.update({
    "status": op_status_usage,
    "start": op_start_usage,
    "remove": op_remove_usage,
    "stop": op_stop_usage,
    "usage": op_usage,
})
