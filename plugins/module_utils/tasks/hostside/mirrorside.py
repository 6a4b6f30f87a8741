# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Copies of another host's queue entries, so that a lost queue host loses no waiting run.

This file travels to the hosts after tasks.hostside.booking (tasks.ssh.host_source) and runs in
the helper's namespace: standard library only, Python 3.6+, every top-level name its own
(``mirror`` prefixes).

A fleet's queue host keeps its entries in ``book/queue``; the fleet's next host keeps a copy
of each waiting one in ``book/queue-mirror/<run>.json`` (with the run's repo archive beside
it), written by the controller that changed the entry (tasks.queue_mirror). The copy says
``queued_on``: the host whose entry it copies. A survey (``status`` without a run) answers
the copies' summaries as ``queue_mirror``. When the queue host is gone, ``mirror_adopt``
makes the copy this host's own entry, under the booking lock, unless an entry of that run
waits here already, and notes that it did (``queue-mirror/handed/<run>.json``, listed with
the copies as state ``handed`` for MIRROR_HANDED_KEPT): the old queue host, back, then loses
its stale entry of that run.
"""

import os
import time

try:  # imported as part of the collection (tests, the controller)
    from .booking import (BOOK_OPS, BOOK_ROOT, _drop_entry, _entry_path, _folder,
                          _held_archive, _Lock, _name, _read_all, _read_entry, _read_json,
                          _remove, _write_json, summary)
    from .nodeside import Failure
except ImportError:  # on a host: the files sent before this one run in the same namespace
    pass

MIRROR_WAITING = ("pending", "active", "scheduled")
# How long a host remembers an entry it adopted (``handed``): an old queue host that comes
# back within that time has its stale entry of the run dropped (tasks.queue_mirror).
MIRROR_HANDED_KEPT = 7 * 86400


def _mirror_dir():
    return os.path.join(BOOK_ROOT, "queue-mirror")


def _mirror_path(run):
    return os.path.join(_mirror_dir(), _name(run) + ".json")


def _mirror_archive(run):
    return os.path.join(_mirror_dir(), _name(run) + ".tar.gz")


def _mirror_handed(run):
    return os.path.join(_mirror_dir(), "handed", _name(run) + ".json")


def _mirror_note(run):
    return _read_json(_mirror_handed(run))


def _mirror_read(run):
    return _read_json(_mirror_path(run))


def _mirror_link(source, target):
    """Hard-link ``source`` as ``target`` (the repos folder's pruning then keeps it)."""
    _remove(target)
    try:
        os.link(source, target)
    except OSError as exc:
        raise Failure("cannot keep the run's repo archive %s: %s" % (source, exc)) from exc
    return target


def op_queue_read(payload):
    """The whole entry of ``run`` on this host (the config, its secrets...), or None: what
    the controller copies to the mirror host."""
    return {"entry": _read_entry(payload["run"])}


def op_mirror_put(payload):
    """Keep ``entry`` (another host's) as its copy here; ``archive``: the run's repo archive,
    shipped here already."""
    entry = dict(payload["entry"])
    if entry.get("state") not in MIRROR_WAITING:
        raise Failure("run %s is %s: only waiting entries are copied"
                      % (entry.get("run"), entry.get("state")))
    with _Lock():
        own = _read_entry(entry["run"])
        handed = _mirror_note(entry["run"])
        if (own and own.get("run_id") == entry.get("run_id")) or (
                handed and handed.get("run_id") == entry.get("run_id")):
            return {"kept": False, "reason": "run %s was handed over here" % entry["run"]}
        _folder(_mirror_dir())
        if payload.get("archive"):
            entry["held_archive"] = _mirror_link(payload["archive"],
                                                 _mirror_archive(entry["run"]))
        else:
            entry.pop("held_archive", None)
            _remove(_mirror_archive(entry["run"]))
        entry.pop("taken_by", None)
        entry.pop("taken_until", None)
        _write_json(_mirror_path(entry["run"]), entry)
    return {"kept": True}


def op_mirror_drop(payload):
    """Forget the copy of ``run`` (of ``run_id`` only, when given)."""
    with _Lock():
        entry = _mirror_read(payload["run"])
        if entry is None or payload.get("run_id") not in (None, entry.get("run_id")):
            return {"dropped": False}
        _remove(_mirror_path(payload["run"]))
        _remove(_mirror_archive(payload["run"]))
    return {"dropped": True}


def op_mirror_adopt(payload):
    """Make the copy of ``run`` (``run_id``) this host's entry: its queue host ``from`` is
    lost. ``host`` names this host; ``changes`` (the state a survey saw) go into the entry.
    Refused when an entry of that run waits here already."""
    with _Lock():
        copy = _mirror_read(payload["run"])
        if copy is None or copy.get("run_id") != payload.get("run_id"):
            return {"adopted": False, "reason": "no copy of run %s here" % payload["run"]}
        own = _read_entry(payload["run"])
        handed = _mirror_note(payload["run"])
        if (own and own.get("run_id") == copy.get("run_id")) or (
                handed and handed.get("run_id") == copy.get("run_id")):
            # Adopted before (a copy written again late): the run went on from here.
            _remove(_mirror_path(payload["run"]))
            _remove(_mirror_archive(payload["run"]))
            return {"adopted": False, "dropped": True,
                    "reason": "run %s was handed over here before" % payload["run"]}
        if own and own.get("state") in MIRROR_WAITING:
            return {"adopted": False, "reason": "run %s is %s here already" % (
                payload["run"], own.get("state"))}
        if own:
            _drop_entry(payload["run"])
        now = time.time()
        entry = dict(copy, queued_on=payload["host"], handed_from=payload["from"],
                     handed_at=now, written_at=now, **(payload.get("changes") or {}))
        _folder(os.path.dirname(_entry_path(payload["run"])))
        if copy.get("held_archive"):
            entry["held_archive"] = _mirror_link(copy["held_archive"],
                                                 _held_archive(payload["run"]))
        _write_json(_entry_path(payload["run"]), entry)
        _write_json(_mirror_handed(payload["run"]), {
            "run": payload["run"], "run_id": payload["run_id"], "state": "handed",
            "handed_from": payload["from"], "queued_on": payload["host"],
            "ended_at": entry["handed_at"]})
        _remove(_mirror_path(payload["run"]))
        _remove(_mirror_archive(payload["run"]))
    return {"adopted": True, "entry": summary(entry)}


_MIRROR_STATUS_BEFORE = BOOK_OPS["status"]


def op_status_mirror(payload):
    """A survey also answers the copies kept here (``queue_mirror``)."""
    answer = _MIRROR_STATUS_BEFORE(payload)
    if not payload.get("run"):
        handed = []
        for note in _read_all(os.path.join(_mirror_dir(), "handed")):
            if time.time() - float(note.get("ended_at") or 0) > MIRROR_HANDED_KEPT:
                _remove(_mirror_handed(note.get("run")))
            else:
                handed.append(note)
        answer["queue_mirror"] = [summary(e) for e in _read_all(_mirror_dir())] + [
            summary(note) for note in handed]
    return answer


BOOK_OPS.update({
    "status": op_status_mirror,
    "queue_read": op_queue_read,
    "mirror_put": op_mirror_put,
    "mirror_drop": op_mirror_drop,
    "mirror_adopt": op_mirror_adopt,
})
