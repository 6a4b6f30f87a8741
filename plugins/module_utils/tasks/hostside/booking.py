# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Booking a host, on the host: claims on its capacity and the fleet's queue of pending runs.

This file travels to the hosts with tasks.hostside.nodeside (tasks.ssh.Node.call sends both sources
and runs them in one namespace), so it uses the standard library only and the Python 3.6+ of any
Ansible-managed host. Every operation that reads and then writes the booking folder holds an
exclusive ``flock`` on ``BOOK_ROOT/lock`` for the whole read-check-write, so two controllers (or ten
``gpufleet apply`` at once) asking the same host are served one after the other: the second sees the
first's claim. That lock is the only point of serialisation gpufleet has.

Claims (``claims/<run>.json``): a run's share of this host (blocks, GPU ids, whole host) from the
moment a controller chose the host until the run's container here ends. A claim is live while a
container of its run and submission exists and is alive; before its container exists, until its
lease runs out (a controller that died between claiming and starting frees the host by itself).

The queue (``queue/<run>.json``, on the fleet's queue host, see tasks.queue): pending runs with
everything needed to submit them later from any controller, 0600 and owned by root (it holds the
run's resolved environment). A controller ``take``s an entry before submitting it, with a lease,
so two controllers never start the same pending run.
"""

import json
import os
import time

try:  # imported as part of the collection (tests, the controller)
    from .nodeside import Failure, op_image_info, op_remove, op_start, op_status
except ImportError:  # on a host: nodeside's source runs first in the same namespace
    pass

BOOK_ROOT = "/var/lib/gpufleet/book"
CLAIM_LEASE = 900
TAKE_LEASE = 600
# Docker states of a container that still holds its host (it has not ended).
HOLDING_STATES = ("created", "running", "paused", "restarting", "removing")
_SAFE = set("abcdefghijklmnopqrstuvwxyz0123456789-_.")


class _Lock(object):
    """An exclusive flock on ``<folder>/lock`` (``BOOK_ROOT`` by default), held for a
    read-check-write; the usage records (tasks.hostside.usageside), the members document
    (memberside) and the proxy's routes (proxyside) take it on their folders. ``private``:
    the folder is made 0700 even where it was there with another mode."""

    def __init__(self, folder=None, private=False):
        self.folder = folder
        self.private = private
        self.handle = None

    def __enter__(self):
        import fcntl

        folder = _folder(self.folder or BOOK_ROOT)
        if self.private:
            os.chmod(folder, 0o700)
        self.handle = open(os.path.join(folder, "lock"), "a")
        fcntl.flock(self.handle.fileno(), fcntl.LOCK_EX)
        return self

    def __exit__(self, *exc):
        import fcntl

        fcntl.flock(self.handle.fileno(), fcntl.LOCK_UN)
        self.handle.close()
        return False


def _folder(path):
    os.makedirs(path, 0o700, exist_ok=True)  # two requests may make it at once
    return path


def is_run_name(run):
    """Whether ``run`` may name a file in the booking folder."""
    return bool(run) and not run.startswith(".") and all(c in _SAFE for c in run.lower())


def _name(run):
    run = str(run or "")
    if not is_run_name(run):
        raise Failure("not a run name: %r" % (run,))
    return run


def _read_all(folder):
    found = []
    if not os.path.isdir(folder):
        return found
    for entry in sorted(os.listdir(folder)):
        if not entry.endswith(".json"):
            continue
        try:
            with open(os.path.join(folder, entry)) as handle:
                value = json.load(handle)
        except (IOError, OSError, ValueError):
            continue  # half-written by a host that lost power: ignored, replaced on next write
        if isinstance(value, dict):
            found.append(value)
    return found


def _write_json(path, value):
    """Write whole or not at all: a temporary file renamed over the old one."""
    _folder(os.path.dirname(path))
    temp = "%s.%d.tmp" % (path, os.getpid())
    with open(temp, "w") as handle:
        os.chmod(temp, 0o600)
        json.dump(value, handle, sort_keys=True)
    os.rename(temp, path)


def _remove(path):
    try:
        os.remove(path)
    except OSError:
        pass


# ---------------------------------------------------------------------------------------------
# Claims


def book_path(*parts):
    """A path under BOOK_ROOT (read when called: tests point it elsewhere)."""
    return os.path.join(BOOK_ROOT, *parts)


def _claims_dir():
    return book_path("claims")


def _claim_path(run):
    return os.path.join(_claims_dir(), _name(run) + ".json")


def _containers_by_submission(containers):
    """``{(run, submission): [docker states]}`` of the task containers on this host."""
    out = {}
    for entry in containers:
        labels = entry.get("labels") or {}
        run = labels.get("gpufleet.run")
        if run:
            key = (run, str(labels.get("gpufleet.submission") or "0"))
            out.setdefault(key, []).append(entry.get("state"))
    return out


def claim_live(claim, by_submission, now):
    """A claim holds while its run's container here is alive, or, before that container
    exists, until its lease ends."""
    states = by_submission.get((claim.get("run"), str(claim.get("submission") or 0)))
    if states:
        return any(s in HOLDING_STATES for s in states)
    return now < float(claim.get("expires") or 0)


def _job_states(containers):
    """``{(run, submission, job): [docker states]}`` of the task containers on this host."""
    out = {}
    for entry in containers:
        labels = entry.get("labels") or {}
        if labels.get("gpufleet.run"):
            key = (labels["gpufleet.run"], str(labels.get("gpufleet.submission") or "0"),
                   str(labels.get("gpufleet.job") or "0"))
            out.setdefault(key, []).append(entry.get("state"))
    return out


def live_part(claim, jobs, now):
    """``claim`` with the shares that hold (None when none does): a share holds while its
    job's container here is alive, or, before that container exists, until its own lease
    ends, so a job that ended, or one whose start never came, frees its share while the run's
    other jobs here go on. A claim written before shares holds as a whole (``claim_live``).
    ``jobs``: ``_job_states``."""
    run, submission = claim.get("run"), str(claim.get("submission") or 0)
    if not isinstance(claim.get("shares"), dict):
        by_submission = {}
        for (other, number, _job), states in jobs.items():
            by_submission.setdefault((other, number), []).extend(states)
        return claim if claim_live(claim, by_submission, now) else None
    shares = {}
    for num, share in _shares_of(claim).items():
        states = jobs.get((run, submission, str(num)))
        if states:
            live = any(state in HOLDING_STATES for state in states)
        else:
            live = now < float(share.get("expires") or claim.get("expires") or 0)
        if live:
            shares[num] = share
    return with_shares(claim, shares) if shares else None


def usage(claims, containers, now, exclude_run=None):
    """``(blocks, gpu ids, runs)`` in use on this host: the live shares of claims, plus alive
    task containers that no claim covers (started by an earlier gpufleet, which did not
    claim)."""
    jobs = _job_states(containers)
    blocks = 0
    ids = set()
    runs = set()
    covered = set()
    for claim in claims:
        covered |= claim_covers(claim)
        live = live_part(claim, jobs, now) if claim.get("run") != exclude_run else None
        if live is None:
            continue
        blocks += int(live.get("blocks") or 0)
        ids.update(live.get("gpu_ids") or [])
        runs.add(claim.get("run"))
    for entry in containers:
        labels = entry.get("labels") or {}
        key = (labels.get("gpufleet.run"), str(labels.get("gpufleet.submission") or "0"))
        if covered_by(labels, covered) or key[0] == exclude_run or (
                entry.get("state") not in HOLDING_STATES):
            continue
        try:
            blocks += int(labels.get("gpufleet.blocks") or 0)
        except ValueError:
            pass
        ids.update(i for i in (labels.get("gpufleet.gpus") or "").split(",") if i)
        runs.add(key[0])
    return blocks, ids, runs


def claim_covers(claim):
    """What of the host's containers ``claim`` stands for: ``(run, submission, job)`` of each
    of its shares, or ``(run, submission)`` for a claim written before shares (all its jobs).
    tasks.claiming's busy map counts the same way."""
    key = (claim.get("run"), str(claim.get("submission") or 0))
    if isinstance(claim.get("shares"), dict):
        return set(key + (str(num),) for num in claim["shares"])
    return {key}


def covered_by(labels, covered):
    """Whether a container (its ``labels``) is one of what ``claim_covers`` answered."""
    key = (labels.get("gpufleet.run"), str(labels.get("gpufleet.submission") or "0"))
    return key in covered or key + (str(labels.get("gpufleet.job") or "0"),) in covered


def _shares_of(claim):
    """A claim's shares, one per job (``{job number: {"blocks", "gpu_ids", "whole"}}``); a
    claim written before claims had shares is one share for all its jobs."""
    shares = claim.get("shares")
    if isinstance(shares, dict) and shares:
        return dict((str(k), v) for k, v in shares.items())
    jobs = claim.get("jobs") or [0]
    return {str(jobs[0]): {"blocks": int(claim.get("blocks") or 0),
                           "gpu_ids": list(claim.get("gpu_ids") or []),
                           "whole": bool(claim.get("whole"))}}


def with_shares(claim, shares):
    """``claim`` holding ``shares``: its jobs, blocks, GPU ids and ``whole`` are theirs."""
    ids = []
    for share in shares.values():
        ids += [i for i in share.get("gpu_ids") or [] if i not in ids]
    return dict(claim, shares=shares, jobs=sorted(int(k) for k in shares),
                blocks=sum(int(s.get("blocks") or 0) for s in shares.values()),
                gpu_ids=ids, whole=any(s.get("whole") for s in shares.values()))


def conflict(claim, claims, containers, now):
    """Why ``claim`` cannot be granted on this host now, or None."""
    run = claim["run"]
    by_submission = _containers_by_submission(containers)
    jobs = _job_states(containers)
    for other in claims:
        if other.get("run") != run or live_part(other, jobs, now) is None:
            continue
        if other.get("run_id") != claim.get("run_id"):
            return "run %s is already running here (submitted by another controller)" % run
        if claim.get("add") and other.get("submission") == claim.get("submission"):
            continue   # a share added beside the submission's others (services.rolling)
        if other.get("by") and claim.get("by") and other.get("by") != claim.get("by"):
            # The same run, submitted again by a second controller (a queue entry whose take
            # lapsed): one submission only.
            return "run %s is being started here by %s" % (run, other["by"])
    for (other_run, _submission), states in by_submission.items():
        if other_run == run and any(s in HOLDING_STATES for s in states) and not any(
                c.get("run") == run and c.get("run_id") == claim.get("run_id") for c in claims):
            return "run %s is already running here" % run
    blocks, ids, runs = usage(claims, containers, now, exclude_run=run)
    total = int(claim.get("total_blocks") or 1)
    wanted = int(claim.get("blocks") or 0)
    taken = sorted(set(claim.get("gpu_ids") or []) & ids)
    holders = ", ".join(sorted(r for r in runs if r)) or "another run"
    if claim.get("whole") and (blocks or ids):
        return "busy (%d of %d blocks held by %s)" % (blocks, total, holders)
    if blocks + wanted > total:
        return "busy (%d of %d blocks held by %s, %d more wanted)" % (
            blocks, total, holders, wanted)
    if taken:
        return "GPU %s held by %s" % (",".join(str(t) for t in taken), holders)
    return None


def _claim_locked(payload, now):
    path = _claim_path(payload["run"])
    claims = _read_all(_claims_dir())
    containers = op_status({})["containers"]
    jobs = _job_states(containers)
    held = []   # (claim, its live part)
    for other in claims:  # claims that ended are forgotten here, under the lock
        live = live_part(other, jobs, now)
        if other.get("run") != payload["run"] and live is None:
            _remove(_claim_path(other.get("run")))
        held.append((other, live))
    claim = {
        "run": payload["run"],
        "run_id": payload.get("run_id"),
        "submission": int(payload.get("submission") or 0),
        "total_blocks": int(payload.get("total_blocks") or 1),
        "by": payload.get("by"),
        "add": bool(payload.get("add")),
        "claimed_at": now,
        "expires": now + float(payload.get("lease") or CLAIM_LEASE),
    }
    shares = dict((num, dict(share, expires=claim["expires"]))
                  for num, share in _shares_of(payload).items())
    for other, live in held:
        # The same submission claiming again (a job's start renewing its share, a replica
        # added or replaced): its other jobs' live shares stay. A new submission starts
        # afresh.
        if other.get("run") == claim["run"] and other.get("run_id") == claim["run_id"] and (
                int(other.get("submission") or 0) == claim["submission"]) and live:
            shares = dict(_shares_of(live), **shares)
            if claim["add"]:
                claim["by"] = other.get("by")   # still the submitting controller's claim
    claim = with_shares(claim, shares)
    why = conflict(claim, claims, containers, now)
    claim.pop("add")
    if why is not None:
        return {"claimed": False, "reason": why}
    _write_json(path, claim)
    return {"claimed": True, "claim": claim}


def op_claim(payload):
    """Claim a share of this host for a run, or say who holds it. Claiming again with the same
    run id renews the lease (and moves the claim to a new submission).

    What the submission needs next from the host comes with the answer, so that it costs no
    request of its own: with ``replace``, a granted claim also removes what an earlier run of
    the same name left here (its containers and folders: the new run takes the name, as
    dstack's apply does); with ``image``, the answer's ``image`` is that image's
    ``image_info``; with ``queue``, the answer's ``queue`` is this host's queue
    (``queue_summaries``). They happen after the lock is let go: the claim already keeps the
    host."""
    with _Lock():
        answer = _claim_locked(payload, time.time())
    if answer["claimed"]:
        if payload.get("replace"):
            answer["replaced"] = op_remove({"run": payload["run"]})["removed"]
        if payload.get("image"):
            answer["image"] = op_image_info({"image": payload["image"]})
        if payload.get("queue"):
            answer["queue"] = queue_summaries()
    return answer


def _drop_claim(run, drop):
    """Remove ``run``'s claim on this host when ``drop(claim)`` says so, under the lock."""
    run = _name(run)
    with _Lock():
        for claim in _read_all(_claims_dir()):
            if claim.get("run") == run and drop(claim):
                _remove(_claim_path(run))
                return True
    return False


def op_release(payload):
    """Drop the claim of ``run`` (only ``run_id``'s, when given; only the shares of ``jobs``,
    when given: the claim goes with its last share)."""
    wanted = payload.get("run_id")
    jobs = payload.get("jobs")
    if jobs is None:
        return {"released": _drop_claim(payload["run"], lambda claim: wanted in (
            None, claim.get("run_id")))}
    with _Lock():
        return {"released": _drop_shares(payload["run"], wanted, jobs)}


def _drop_shares(run, run_id, jobs):
    """Take the shares of ``jobs`` out of ``run``'s claim here (of ``run_id``, when given), the
    claim itself with its last share; the caller holds the lock."""
    run = _name(run)
    for claim in _read_all(_claims_dir()):
        if claim.get("run") != run or run_id not in (None, claim.get("run_id")):
            continue
        shares = dict((k, v) for k, v in _shares_of(claim).items()
                      if k not in [str(j) for j in jobs])
        if shares:
            _write_json(_claim_path(run), with_shares(claim, shares))
        else:
            _remove(_claim_path(run))
        return True
    return False


def live_claims(containers, now=None):
    """The claims that hold on this host (read without the lock: a snapshot for planning)."""
    now = time.time() if now is None else now
    jobs = _job_states(containers)
    return [live for live in (live_part(c, jobs, now) for c in _read_all(_claims_dir()))
            if live is not None]


BOOK_OPS = {
    "claim": op_claim,
    "release": op_release,
}


# ---------------------------------------------------------------------------------------------
# The queue: run entries (tasks.runbook) that something must act on later. ``pending`` waits for
# capacity; ``active`` was submitted and is kept so that retry can submit it again; ``failed``
# and ``terminated`` (a pending run whose retry duration ran out, or that was stopped) stay a
# day, so that ``gpufleet ps`` can say what became of them.

ENDED_KEPT = 86400
SUMMARY_FIELDS = ("run", "run_id", "user", "priority", "submitted_at", "submitted_epoch", "state",
                  "reason", "message", "fleets", "nodes", "taken_by", "taken_until",
                  "submissions", "retry_since", "retry", "array", "hosts", "ended_at",
                  "queued_on", "policy", "after", "handed_from", "written_at", "rearm")


def _queue_dir():
    return os.path.join(BOOK_ROOT, "queue")


def _entry_path(run):
    return os.path.join(_queue_dir(), _name(run) + ".json")


def _held_archive(run):
    return os.path.join(_queue_dir(), _name(run) + ".tar.gz")


def _read_json(path):
    """The JSON object in ``path``, or None (no file, or not an object)."""
    try:
        with open(path) as handle:
            value = json.load(handle)
    except (IOError, OSError, ValueError):
        return None
    return value if isinstance(value, dict) else None


def _read_entry(run):
    return _read_json(_entry_path(run))


def _drop_entry(run):
    _remove(_entry_path(run))
    _remove(_held_archive(run))


def _prune(now):
    for entry in _read_all(_queue_dir()):
        if entry.get("state") in ("failed", "terminated") and (
                now - float(entry.get("ended_at") or now) > ENDED_KEPT):
            _drop_entry(entry["run"])


# What differs between an entry and its copy on another host (tasks.hostside.mirrorside) and
# so is left out of its digest: the lease of a take, and where the repo archive lies.
_UNMIRRORED = ("taken_by", "taken_until", "held_archive", "written_at")


def entry_digest(entry):
    """16 hex digits that change whenever what the entry says changes (not its lease)."""
    import hashlib

    kept = dict((k, v) for k, v in entry.items() if k not in _UNMIRRORED)
    text = json.dumps(kept, sort_keys=True, default=str)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]


def summary(entry):
    found = dict((k, entry.get(k)) for k in SUMMARY_FIELDS)
    found["digest"] = entry_digest(entry)
    return found


def queue_summaries():
    """Every entry on this host, without what it carries to be submitted (the config, its
    environment and secrets)."""
    return [summary(e) for e in _read_all(_queue_dir())]


def op_enqueue(payload):
    """Put a run's entry here (a new one, or a run of that name that ended); refused while
    another submission of that name is pending or active."""
    entry = payload["entry"]
    now = time.time()
    with _Lock():
        _prune(now)
        old = _read_entry(entry["run"])
        if old and old.get("run_id") != entry.get("run_id") and old.get("state") in (
                "pending", "active"):
            return {"queued": False, "reason": "run %s is already %s (submitted %s)" % (
                entry["run"], old.get("state"), old.get("submitted_at"))}
        archive = payload.get("archive")
        if archive:
            # Hard-linked so the repos folder's pruning keeps it while the entry waits. On a
            # host that never queued a run, the queue folder is made here first.
            _folder(_queue_dir())
            _remove(_held_archive(entry["run"]))
            try:
                os.link(archive, _held_archive(entry["run"]))
            except OSError as exc:
                raise Failure("cannot keep the run's repo archive %s: %s" % (archive, exc)) from exc
            entry["held_archive"] = _held_archive(entry["run"])
        if entry.get("state") in ("failed", "terminated") and not entry.get("ended_at"):
            entry["ended_at"] = now   # one that ended as it was written down (kept a day)
        entry["written_at"] = now   # which of two copies is newer (tasks.queue_mirror)
        _write_json(_entry_path(entry["run"]), entry)
    return {"queued": True}


def op_take(payload):
    """Take a pending entry to submit it (for ``lease`` seconds), unless someone else holds it;
    answers the whole entry."""
    now = time.time()
    with _Lock():
        entry = _read_entry(payload["run"])
        if not entry or entry.get("run_id") != payload.get("run_id"):
            return {"taken": False, "reason": "gone"}
        if entry.get("state") != payload.get("state", "pending"):
            return {"taken": False, "reason": "now %s" % entry.get("state")}
        if float(entry.get("taken_until") or 0) > now and entry.get("taken_by") != payload["by"]:
            return {"taken": False, "reason": "taken by %s" % entry.get("taken_by")}
        entry["taken_by"] = payload["by"]
        entry["taken_until"] = now + float(payload.get("lease") or TAKE_LEASE)
        _write_json(_entry_path(entry["run"]), entry)
    return {"taken": True, "entry": entry}


def op_update(payload):
    """Change an entry's fields (its state, reason, submission...) and let it go; only while
    it still is as ``expect`` says (a pass's update never undoes a user's stop)."""
    with _Lock():
        entry = _read_entry(payload["run"])
        if not entry or entry.get("run_id") != payload.get("run_id"):
            return {"updated": False}
        expect = payload.get("expect") or {}
        if any(entry.get(k) != v for k, v in expect.items()):
            return {"updated": False, "entry": summary(entry)}
        entry.update(payload.get("changes") or {})
        entry["taken_by"] = None
        entry["taken_until"] = None
        if payload.get("changes"):
            entry["written_at"] = time.time()
        if entry.get("state") in ("failed", "terminated") and not entry.get("ended_at"):
            entry["ended_at"] = time.time()
        _write_json(_entry_path(entry["run"]), entry)
    return {"updated": True}


def op_dequeue(payload):
    """Remove a run's entry (of ``run_id`` only, when given; only while it is as ``expect``
    says)."""
    with _Lock():
        entry = _read_entry(payload["run"])
        if not entry or payload.get("run_id") not in (None, entry.get("run_id")):
            return {"removed": False}
        if any(entry.get(k) != v for k, v in (payload.get("expect") or {}).items()):
            return {"removed": False}
        _drop_entry(payload["run"])
    return {"removed": True}


BOOK_OPS.update({
    "enqueue": op_enqueue,
    "take": op_take,
    "update": op_update,
    "dequeue": op_dequeue,
})


# ---------------------------------------------------------------------------------------------
# The node-side operations that book: status shows the claims, start claims (or renews) under
# the lock before its container exists, remove drops the run's claim.


def op_status_booked(payload):
    answer = op_status(payload)
    if not payload.get("run"):  # a survey: every container is known, so liveness is exact
        answer["claims"] = live_claims(answer["containers"])
        answer["queue"] = queue_summaries()
    return answer


def _replace_earlier(claim):
    """Remove what an earlier run of the claim's name left on this host (its containers and
    folders), unless this submission's container is already here (a start asked again).
    Only after the claim is granted, which shows that no run of that name is alive here."""
    mine = (str(claim.get("run_id") or ""), str(claim.get("submission") or 0))
    for entry in op_status({"run": claim["run"]})["containers"]:
        labels = entry.get("labels") or {}
        if (labels.get("gpufleet.run-id"), str(labels.get("gpufleet.submission") or 0)) == mine:
            return []
    return op_remove({"run": claim["run"]})["removed"]


def op_start_booked(payload):
    """Claim (or renew the claim) under the lock, then start. With the claim's ``replace``, an
    earlier run of the name is cleared first: on a host the controller took as free without
    asking it (tasks.runs), the clearing waits for the start, when every host of the
    placement has granted its claim and so shown that no run of that name is alive on it."""
    claim = payload["job"].get("claim")
    if claim:
        with _Lock():
            answer = _claim_locked(claim, time.time())
        if not answer["claimed"]:
            raise Failure("cannot start %s: this host was taken meanwhile: %s"
                          % (payload["job"]["container"], answer["reason"]))
        if claim.get("replace"):
            _replace_earlier(claim)
    try:
        return op_start(payload)
    except Failure:
        if claim:   # this job's share: the run's other jobs here keep theirs
            op_release({"run": claim["run"], "run_id": claim.get("run_id"),
                        "jobs": [payload["job"]["job_num"]]})
        raise


def op_remove_booked(payload):
    """Remove a run's containers, and its claim here unless it is ``keep``'s (the run id of a
    new submission that claimed the host before the old one's leftovers went)."""
    answer = op_remove(payload)
    if payload.get("jobs") is None and payload.get("run"):
        _drop_claim(payload["run"], lambda claim: claim.get("run_id") != payload.get("keep"))
    return answer


BOOK_OPS.update({
    "status": op_status_booked,
    "start": op_start_booked,
    "remove": op_remove_booked,
})
