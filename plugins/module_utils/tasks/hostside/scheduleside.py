# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""A task's ``schedule`` on its hosts: each job kept ready, started by the host's tick at the
cron times, with no controller on.

This file travels to the hosts after tasks.hostside.notifyside (tasks.ssh.host_source), whose
tick it adds a part to, and runs in the helper's namespace: standard library only, Python
3.6+, every top-level name its own (``schedule``/``_schedule``/``cron`` prefixes).

``arm`` writes a job's folder as ``start`` does, without its container, and keeps beside it
``schedule.json``: the cron expressions, the next firing, how many firings there were and
whether a user stopped the schedule. The run's claim on the host (tasks.hostside.booking) is
given back: between firings the host is free for other runs.

The **tick** (notifyside's, every TICK_EVERY seconds) fires each job whose time has come,
under the booking lock: it claims the job's share again (a host another run holds makes the
firing wait for the next tick, ``waiting`` says why), removes the container of the firing
before, empties the state folder and starts the container again from ``start.json``, as a
service's respawn does (tasks.hostside.replicaside). A job whose previous firing still runs
skips that firing, as dstack's scheduled runs do. The next firing is the first cron time after
now. ``status`` adds ``files["schedule"]`` to each such job (and a ``scheduled`` entry for a
job that never fired yet); ``stop`` of such a job ends its schedule for good.

Cron is read as crontab(5) reads it, in UTC: minute, hour, day of month, month, day of week
(0 or 7 is Sunday; names such as ``mon`` and ``jan``), ``*``, lists, ranges and steps; when
both day fields are restricted, a day that matches either one fires.
"""

import os
import time

try:  # imported as part of the collection (tests, the controller)
    from .booking import (BOOK_OPS, HOLDING_STATES, _claim_locked, _drop_shares, _Lock,
                          _write_json)
    from .eventside import _event_sweep_quietly
    from .nodeside import (RUN_ROOT, _RUN_NAME, Failure, _docker, _job_key, _json_file,
                           _listdir, _read_state, _run_container, job_dir, op_status)
    from .notifyside import TICK_PARTS, tick_ensure
    from .usageside import usage_seen
except ImportError:  # on a host: the files sent before this one run in the same namespace
    pass

SCHEDULE_FILE = "schedule.json"
_CRON_LIMITS = ((0, 59), (0, 23), (1, 31), (1, 12), (0, 7))
_CRON_MONTHS = ("jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov",
                "dec")
_CRON_DAYS = ("sun", "mon", "tue", "wed", "thu", "fri", "sat")
CRON_HORIZON_DAYS = 366 * 8 + 2   # long enough for a 29 February


def _cron_value(text, field):
    low, high = _CRON_LIMITS[field]
    if text.isdigit():
        value = int(text)
    elif field == 3 and text in _CRON_MONTHS:
        value = _CRON_MONTHS.index(text) + 1
    elif field == 4 and text in _CRON_DAYS:
        value = _CRON_DAYS.index(text)
    else:
        raise ValueError("%r is not a value of this field" % text)
    if not low <= value <= high:
        raise ValueError("%d is out of range %d-%d" % (value, low, high))
    return value


def cron_field(text, field):
    """The set of values field number ``field`` (0: minute ... 4: day of week, Sunday 0) of
    a cron expression stands for; ValueError when it is not one."""
    low, high = _CRON_LIMITS[field]
    values = set()
    for part in text.lower().split(","):
        step = None
        if "/" in part:
            part, step_text = part.split("/", 1)
            if not step_text.isdigit() or int(step_text) < 1:
                raise ValueError("bad step %r" % step_text)
            step = int(step_text)
        if part == "*":
            first, last = low, high
        elif "-" in part:
            first, last = (_cron_value(p, field) for p in part.split("-", 1))
        else:
            first = _cron_value(part, field)
            last = high if step else first
        if first > last:
            raise ValueError("range %s goes backwards" % part)
        values.update(range(first, last + 1, step or 1))
    if field == 4:
        values = set(v % 7 for v in values)
    return values


def cron_parse(expression):
    """``(minutes, hours, days, months, weekdays, days_any, weekdays_any)`` of a 5-field
    expression; ValueError naming what is wrong."""
    fields = str(expression).split()
    if len(fields) != 5:
        raise ValueError("expected 5 fields (minute hour day month weekday), got %d"
                         % len(fields))
    sets = tuple(cron_field(text, index) for index, text in enumerate(fields))
    return sets + (fields[2].startswith("*"), fields[4].startswith("*"))


def _cron_day(parsed, day):
    _minutes, _hours, days, months, weekdays, days_any, weekdays_any = parsed
    if day.month not in months:
        return False
    on_day, on_weekday = day.day in days, (day.weekday() + 1) % 7 in weekdays
    if days_any or weekdays_any:
        return on_day and on_weekday
    return on_day or on_weekday


def _cron_after(parsed, start):
    """The first minute at or after ``start`` (a naive UTC datetime on a minute) that
    ``parsed`` matches, or None within CRON_HORIZON_DAYS."""
    import datetime

    minutes, hours = sorted(parsed[0]), sorted(parsed[1])
    for offset in range(CRON_HORIZON_DAYS):
        day = start.date() + datetime.timedelta(days=offset)
        if not _cron_day(parsed, day):
            continue
        for hour in hours:
            if offset == 0 and hour < start.hour:
                continue
            for minute in minutes:
                if offset == 0 and hour == start.hour and minute < start.minute:
                    continue
                return datetime.datetime(day.year, day.month, day.day, hour, minute)
    return None


def cron_next(crons, after):
    """The first cron time (epoch seconds, UTC) of any of ``crons`` strictly after ``after``;
    None when none ever comes (``0 0 30 2 *``). ValueError for a bad expression."""
    import calendar
    import datetime

    start = datetime.datetime.utcfromtimestamp((int(after) // 60 + 1) * 60)
    found = [_cron_after(cron_parse(c), start) for c in crons]
    found = [f for f in found if f is not None]
    return calendar.timegm(min(found).timetuple()) if found else None


def _schedule_path(run, num):
    return os.path.join(job_dir(run, num), SCHEDULE_FILE)


def _schedule_jobs(run=None):
    """``(run, job number, schedule)`` of every job folder here that keeps a schedule."""
    for name in [run] if run else _listdir(RUN_ROOT):
        if not _RUN_NAME.match(name or ""):
            continue
        for job in _listdir(os.path.join(RUN_ROOT, name)):
            if job.isdigit():
                kept = _json_file(_schedule_path(name, int(job)))
                if isinstance(kept, dict) and isinstance(kept.get("cron"), list):
                    yield name, int(job), kept


def _schedule_write(run, num, kept):
    _write_json(_schedule_path(run, num), kept)   # whole or not at all


def schedule_submission(moment):
    """The submission number of the firing due at ``moment`` (a cron time): its minute since
    the epoch, the same on every host of the run, so that a run's jobs started for one time
    are one submission (its usage records, events and ``run.status`` are each firing's own)
    wherever and however late each host starts its job."""
    return int(moment) // 60


def _schedule_relabel(job, folder, submission):
    """``job`` (its start.json) as the firing of ``submission`` starts it: the container's
    submission label, and the claim's, are the firing's; ``record.json`` says so too (and its
    time is the firing's: the event record dates the job's making by it)."""
    label = "gpufleet.submission="
    old, args, index = list(job["docker_args"]), [], 0
    while index < len(old):
        following = str(old[index + 1]) if index + 1 < len(old) else ""
        if old[index] == "--label" and following.startswith(label):
            index += 2   # the submission before, replaced below
            continue
        args.append(old[index])
        index += 1
    args += ["--label", label + str(submission)]
    job = dict(job, docker_args=args, submission=submission)
    if job.get("claim"):
        job["claim"] = dict(job["claim"], submission=submission, replace=False)
    record = _json_file(os.path.join(folder, "record.json")) or {}
    labels = dict(record.get("labels") or {})
    labels["gpufleet.submission"] = str(submission)
    _write_json(os.path.join(folder, "record.json"), dict(record, labels=labels))
    os.chmod(os.path.join(folder, "record.json"), 0o644)
    return job


def op_arm(payload):
    """Keep a job ready to be started at the times of ``cron`` (a list of expressions): its
    folder and ``start.json`` written (with its claim renewed and an earlier run of its name
    cleared, as ``start`` does), no container; its share of the run's claim given back until
    the first firing. Answers ``{"armed": True, "next": epoch}``."""
    crons = payload.get("cron")
    job = payload.get("job")
    if not isinstance(job, dict) or not isinstance(crons, list) or not crons:
        raise Failure("arm needs a job and a list of cron expressions")
    run, num = _job_key(job, "arm")
    now = time.time()
    try:
        upcoming = cron_next([str(c) for c in crons], now)
    except ValueError as exc:
        raise Failure("schedule of %s: bad cron expression: %s" % (run, exc)) from exc
    if upcoming is None:
        raise Failure("schedule of %s: %s never comes (no such day)" % (
            run, " or ".join(str(c) for c in crons)))
    answer = BOOK_OPS["start"]({"job": dict(job, hold=True)})
    if not answer.get("held"):
        raise Failure("cannot keep %s ready: its container %s is there"
                      % (run, job.get("container")))
    kept = {"cron": [str(c) for c in crons], "next": upcoming, "armed_at": now, "firings": 0,
            "last": None, "stopped": False, "waiting": None,
            "run_id": (job.get("claim") or {}).get("run_id")}
    with _Lock():
        _schedule_write(run, num, kept)
        _drop_shares(run, kept["run_id"], [num])
    out = {"armed": True, "next": upcoming}
    try:
        out["tick"] = tick_ensure()
    except Exception as exc:  # kept; the answer says why nothing fires it yet
        out["tick_error"] = "%s: %s" % (type(exc).__name__, exc)
    return out


def _schedule_fire_locked(run, num, kept, now, alive):
    """Start a held job again for its firing, under the booking lock, as a new submission
    (schedule_submission): ``fired`` (its container id), ``skipped`` (its previous firing
    still runs), ``waiting`` (why the host cannot hold it now: the next ticks try again until
    the next cron time, when it is ``missed``) or ``failed`` (its container could not be
    made)."""
    import shutil

    folder = job_dir(run, num)
    job = _json_file(os.path.join(folder, "start.json"))
    if not job or not job.get("container") or not isinstance(job.get("docker_args"), list):
        return "failed", "its start.json is missing or spoiled; apply the run again"
    if job["container"] in alive:
        return "skipped", None
    submission = schedule_submission(kept["next"])
    claim = job.get("claim")
    if claim:
        answer = _claim_locked(dict(claim, submission=submission, replace=False), now)
        if not answer["claimed"]:
            return "waiting", answer["reason"]
    # What the firing before left (its end) goes to the event record and the usage records
    # before the folder is emptied: with no controller about, nothing else may have read it.
    _event_sweep_quietly({}, None, run)
    usage_seen(_schedule_container(run, job["container"]), now)
    job = _schedule_relabel(job, folder, submission)
    _docker(["rm", "-f", job["container"]], check=False)
    state = os.path.join(folder, "state")
    shutil.rmtree(state, ignore_errors=True)
    os.makedirs(state, 0o755, exist_ok=True)
    for name in ("created", "stopped_by"):
        if os.path.exists(os.path.join(folder, name)):
            os.remove(os.path.join(folder, name))
    try:
        started = _run_container(job, folder)
    except Failure as exc:
        _drop_shares(run, (job.get("claim") or {}).get("run_id"), [num])
        return "failed", str(exc)
    usage_seen(_schedule_container(run, job["container"]), time.time())   # its record begins
    return "fired", started.get("id")


def _schedule_container(run, name):
    """``status``'s entry of container ``name`` of ``run`` (none when it is not there)."""
    return [c for c in op_status({"run": run})["containers"] if c.get("name") == name]


def schedule_due(kept, now):
    """The firing a held-back job should wait for now: its own time until the next one has
    come, then the latest cron time at or before now (a firing held back past its next time
    is missed, and the latest due one waits instead)."""
    due = kept["next"]
    following = cron_next(kept["cron"], due)
    while following is not None and following <= now:
        due, following = following, cron_next(kept["cron"], following)
    return due


def schedule_tick(now=None):
    """Fire every job here whose time has come; answers what each one did."""
    now = time.time() if now is None else now
    due = [(run, num, kept) for run, num, kept in _schedule_jobs()
           if not kept.get("stopped") and kept.get("next") is not None and now >= kept["next"]]
    if not due:
        return {}
    done = {}
    with _Lock():
        alive = set(item.get("name") for item in op_status({})["containers"]
                    if item.get("state") in HOLDING_STATES)
        for run, num, _old in due:
            kept = _json_file(_schedule_path(run, num))   # as it is under the lock
            if not isinstance(kept, dict) or kept.get("stopped") or now < (
                    kept.get("next") or now + 1):
                continue
            try:
                what, detail = _schedule_fire_locked(run, num, kept, now, alive)
            except Exception as exc:  # one job's trouble never keeps the others from firing
                what, detail = "failed", "%s: %s" % (type(exc).__name__, exc)
            done["%s/%d" % (run, num)] = what
            latest = schedule_due(kept, now)
            if what == "waiting" and latest != kept["next"]:
                # Held until its next time came: that firing is missed (dstack's run ends for
                # want of capacity and waits for its next time); the latest due one waits.
                what = done["%s/%d" % (run, num)] = "missed"
                kept.update(next=latest, waiting=detail, error="the firing of %s was missed: %s"
                            % (time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(kept["next"])),
                               detail))
            elif what == "waiting":
                kept["waiting"] = detail
            else:
                kept.update(waiting=None, last=now if what != "skipped" else kept.get("last"),
                            error=detail if what == "failed" else None,
                            next=cron_next(kept["cron"], now))
                if what in ("fired", "failed"):
                    kept["firings"] = int(kept.get("firings") or 0) + 1
            _schedule_write(run, num, kept)
    for key in sorted(done):   # and the new start, at once
        if done[key] == "fired":
            _event_sweep_quietly({}, None, key.rsplit("/", 1)[0])
    return done


def schedule_wanted():
    """Whether a schedule here still has firings to come (the tick must run)."""
    return any(not kept.get("stopped") for _run, _num, kept in _schedule_jobs())


def schedule_note(kept):
    """What ``status`` says of a job's schedule."""
    return dict((key, kept.get(key)) for key in (
        "cron", "next", "firings", "last", "stopped", "waiting", "error"))


_SCHEDULE_STATUS_BEFORE = BOOK_OPS["status"]


def op_status_schedule(payload):
    """The host's status, each scheduled job with its schedule (``files["schedule"]``); a job
    that never fired yet is an entry of state ``scheduled``."""
    answer = _SCHEDULE_STATUS_BEFORE(payload)
    by_name = dict((item.get("name"), item) for item in answer.get("containers") or [])
    for run, num, kept in _schedule_jobs(payload.get("run")):
        record = _json_file(os.path.join(job_dir(run, num), "record.json")) or {}
        entry = by_name.get(record.get("container"))
        if entry is None:
            if not record.get("container"):
                continue
            entry = {"name": record["container"], "labels": record.get("labels") or {},
                     "state": "scheduled", "exit_code": None, "oom_killed": False,
                     "started_at": None, "finished_at": None, "error": None,
                     "address": None, "files": _read_state(run, num)}
            answer.setdefault("containers", []).append(entry)
        entry.setdefault("files", {})["schedule"] = schedule_note(kept)
    return answer


_SCHEDULE_STOP_BEFORE = BOOK_OPS["stop"]


def op_stop_schedule(payload):
    """``stop``; a user's stop of a scheduled job ends its schedule for good first (no firing
    after it, as dstack's stop of a scheduled run). The run's own stops (its other jobs when
    one failed, master-done) end one firing only."""
    listed = [item for item in payload.get("jobs") or [] if isinstance(item, dict)]
    if payload.get("reason") != "terminated_by_user":
        listed = []
    with _Lock():
        for item in listed:
            run, num = _job_key(item, "stop")
            kept = _json_file(_schedule_path(run, num))
            if isinstance(kept, dict) and not kept.get("stopped"):
                kept.update(stopped=True, stopped_at=time.time(), waiting=None, next=None)
                _schedule_write(run, num, kept)
    return _SCHEDULE_STOP_BEFORE(payload)


_SCHEDULE_REMOVE_BEFORE = BOOK_OPS["remove"]


def op_remove_schedule(payload):
    """``remove``; the schedules of the jobs it removes go first, under the booking lock: a
    firing under way ends before, and none starts after (a run applied again, a scheduled
    run that could not be kept ready on all its hosts)."""
    run = payload.get("run")
    jobs = payload.get("jobs")
    if run and _RUN_NAME.match(str(run)):
        with _Lock():
            for name, num, _kept in list(_schedule_jobs(run)):
                if jobs is None or str(num) in [str(j) for j in jobs]:
                    os.remove(_schedule_path(name, num))
    return _SCHEDULE_REMOVE_BEFORE(payload)


TICK_PARTS["schedule"] = (schedule_wanted, schedule_tick)
BOOK_OPS.update({
    "arm": op_arm,
    "status": op_status_schedule,
    "stop": op_stop_schedule,
    "remove": op_remove_schedule,
})
