# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Per-user limits, on the fleet's queue host: the admission ledger.

This file travels to the hosts after tasks.hostside.nodeside and tasks.hostside.booking
(tasks.ssh.host_source) and runs in their namespace, so it uses the standard library only and the
Python 3.6+ of any Ansible-managed host. The controller's side is tasks.admission.

A fleet's members document (``/var/lib/gpufleet/team/members.json``, teams.members describes it)
may cap what one user runs at a time: runs, GPUs, nodes, the user's own caps or the default's
(``"*"``). Before a capped user's run claims its hosts, the controller asks the fleet's queue
host to ``admit`` it. The host reads the caps from its own copy of the document and the user's
current use from its ledger (``BOOK_ROOT/admitted/<run>.json``: user, GPUs, nodes, when, lease)
and from the runs the controller's survey saw alive, all under booking's lock: ten submissions
at once, from any number of controllers, are answered one after the other, so the caps hold.

Operations:

- ``admit`` ``{"run", "run_id", "user", "gpus", "nodes", "alive": [{"run", "user", "gpus",
  "nodes"}], "ended": [runs], "whole": bool, "lease"}``: first forgets the ledger entries of
  runs the caller saw ended, those past their lease that the survey does not show alive, and,
  when the survey asked every host (``whole``), those older than ``ADMIT_GRACE`` that it does not
  show alive (a run holds a claim or a container within seconds of its admission). Then admits
  the run (``{"admitted": true}``, its entry written or renewed) if the user's use plus this run
  stays within every cap, else answers ``{"admitted": false, "reason": "user limit",
  "detail": ...}``. A user without caps is admitted and nothing is written. With ``"probe":
  true`` only the answer is made (a run that found no capacity: would its owner's caps hold it
  back anyway?).
- ``admit_release`` ``{"run", "run_id"}``: forget the run's entry (its submission did not start).
- ``status`` of a survey also answers ``limits``: the document's caps (its ``limits`` section),
  or null without a document; the controller asks ``admit`` only when they cap the user.
"""

import json
import os
import time

try:  # imported as part of the collection (tests, the controller)
    from .booking import BOOK_OPS, _Lock, _name, _read_all, _remove, _write_json, book_path
except ImportError:  # on a host: nodeside's and booking's sources run first in this namespace
    pass

TEAM_ROOT = "/var/lib/gpufleet/team"
ADMIT_LEASE = 900
ADMIT_GRACE = 120
USER_LIMIT = "user limit"
_LIMIT_FIELDS = ("runs", "gpus", "nodes")


def _admitted_dir():
    return book_path("admitted")


def _admitted_path(run):
    return os.path.join(_admitted_dir(), _name(run) + ".json")


def team_limits():
    """The ``limits`` section of this host's members document, or None."""
    try:
        with open(os.path.join(TEAM_ROOT, "members.json")) as handle:
            doc = json.load(handle)
    except (IOError, OSError, ValueError):
        return None
    limits = doc.get("limits") if isinstance(doc, dict) else None
    return limits if isinstance(limits, dict) else None


def caps_of(limits, user):
    """``{runs, gpus, nodes}`` that hold for ``user`` (teams.members.limits_for's rule: the
    user's own field, else the default's, else None)."""
    limits = limits or {}
    default = limits.get("*") or {}
    own = limits.get(user) or {} if user else {}
    caps = {}
    for field in _LIMIT_FIELDS:
        value = own.get(field)
        if value is None:
            value = default.get(field)
        caps[field] = None if value is None else int(value)
    return caps


def admit_use(ledger, alive, user, run):
    """``{runs, gpus, nodes}`` ``user`` holds now, ``run`` left out: the ledger's entries, and
    the runs the survey saw alive that the ledger does not hold."""
    use = {"runs": 0, "gpus": 0, "nodes": 0}
    counted = set([run])
    for entry in list(ledger) + list(alive):
        if entry.get("user") != user or entry.get("run") in counted:
            continue
        counted.add(entry.get("run"))
        use["runs"] += 1
        use["gpus"] += int(entry.get("gpus") or 0)
        use["nodes"] += int(entry.get("nodes") or 0)
    return use


def admit_verdict(caps, use, gpus, nodes):
    """None when a run of ``gpus`` and ``nodes`` fits the caps beside ``use``, else why not."""
    wanted = {"runs": 1, "gpus": int(gpus or 0), "nodes": int(nodes or 0)}
    for field in _LIMIT_FIELDS:
        cap = caps.get(field)
        if cap is not None and use[field] + wanted[field] > cap:
            return "%d of %d %s in use, this run wants %d" % (
                use[field], cap, field, wanted[field])
    return None


def admit_keep(entry, alive_runs, ended, whole, now):
    """Whether a ledger entry still stands for a run that lives."""
    run = entry.get("run")
    if run in ended:
        return False
    if run in alive_runs:
        return True
    if now >= float(entry.get("expires") or 0):
        return False
    return not (whole and now - float(entry.get("admitted_at") or 0) > ADMIT_GRACE)


def admit_decision(ledger, payload, limits, now):
    """The ``admit`` of ``payload`` against ``ledger`` (the entries held) and ``limits`` (the
    members document's): ``(kept, answer, entry)``, where ``kept`` are the ledger's entries
    that still stand (the others are to be forgotten) and ``entry`` is the run's new ledger
    entry, or None when nothing is to be written."""
    run = payload["run"]
    user = payload.get("user")
    caps = caps_of(limits, user)
    if all(value is None for value in caps.values()):
        return list(ledger), {"admitted": True, "caps": caps}, None
    alive = [a for a in payload.get("alive") or [] if isinstance(a, dict)]
    alive_runs = set(a.get("run") for a in alive)
    ended = set(payload.get("ended") or []) - set([run])
    whole = bool(payload.get("whole"))
    kept = []
    for entry in ledger:
        if entry.get("run") == run:
            continue   # the run's own entry (an earlier try of it): replaced when admitted
        if admit_keep(entry, alive_runs, ended, whole, now):
            kept.append(entry)
    use = admit_use(kept, alive, user, run)
    why = admit_verdict(caps, use, payload.get("gpus"), payload.get("nodes"))
    if why is not None:
        return kept, {"admitted": False, "reason": USER_LIMIT, "caps": caps, "use": use,
                      "detail": "user %s: %s" % (user, why)}, None
    entry = {"run": run, "run_id": payload.get("run_id"), "user": user,
             "gpus": int(payload.get("gpus") or 0), "nodes": int(payload.get("nodes") or 0),
             "admitted_at": now, "expires": now + float(payload.get("lease") or ADMIT_LEASE)}
    return kept, {"admitted": True, "caps": caps, "use": use}, entry


def op_admit(payload):
    run = _name(payload["run"])
    limits = team_limits()
    if all(value is None for value in caps_of(limits, payload.get("user")).values()):
        return {"admitted": True, "caps": caps_of(limits, payload.get("user"))}
    with _Lock():
        ledger = _read_all(_admitted_dir())
        kept, answer, entry = admit_decision(ledger, dict(payload, run=run), limits, time.time())
        names = set(e.get("run") for e in kept)
        for old in ledger:
            if old.get("run") not in names and old.get("run") != run:
                _remove(_admitted_path(old.get("run")))
        if entry is not None and not payload.get("probe"):
            _write_json(_admitted_path(run), entry)
    return answer


def op_admit_release(payload):
    run = _name(payload["run"])
    with _Lock():
        for entry in _read_all(_admitted_dir()):
            if entry.get("run") == run and payload.get("run_id") in (None, entry.get("run_id")):
                _remove(_admitted_path(run))
                return {"released": True}
    return {"released": False}


_STATUS_BEFORE_ADMIT = BOOK_OPS["status"]


def op_status_admit(payload):
    answer = _STATUS_BEFORE_ADMIT(payload)
    if not payload.get("run"):   # a survey: the placement learns whether its user is capped
        answer["limits"] = team_limits()
    return answer


BOOK_OPS.update({
    "status": op_status_admit,
    "admit": op_admit,
    "admit_release": op_admit_release,
})
