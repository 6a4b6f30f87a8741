# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The run index, on a fleet's record host: on which of the fleet's hosts each run name has, or
may have, containers and claims.

This file travels to the hosts after tasks.hostside.nodeside and tasks.hostside.booking
(tasks.ssh.host_source) and runs in their namespace, so it uses the standard library only and the
Python 3.6+ of any Ansible-managed host. The controller's side, and why the index exists, is
tasks.runindex: with it, a placement asks the record host, the hosts the index names for the run's
name, and the hosts it picks (whose claims guard their capacity), instead of every host of every
fleet.

On the host, under ``BOOK_ROOT/index/<fleet>/``:

- ``<run>.json``: ``{"run", "hosts": {instance: when noted}, "alive": [instances], "user"}``:
  every host where the run has containers (any state) or a claim, those where it may be alive
  (a live container or claim at the last whole survey, or noted since), and who submitted the
  run's latest noted submission (absent when its note named nobody);
- ``complete`` (no ``.json``: it is not an entry): ``{"at": when}``, the last time a
  controller rewrote the index from an answer of every host of the fleet. The index is
  trusted only for a while after that (tasks.runindex.MAX_AGE): what happened while this host
  could not be reached is then corrected by the next whole survey.

Operations (every write holds booking's lock):

- ``status`` with ``{"index": {"fleet": F, "run": R}}`` answers as before and adds
  ``index``: ``{"age": seconds since complete or null, "hosts": [R's hosts], "busy": [hosts
  where any run may be alive], "others": [hosts where a run other than R may be alive]}``;
- ``note`` ``{"fleet", "run", "hosts", "idle", "user"}``: add hosts to a run's entry, alive
  (a submission, before it claims them), keep its submitter (``user``, optional), and no longer
  count as alive the hosts where that submission found nothing alive (``idle``);
- ``reindex`` ``{"fleet", "runs": {run: [hosts]}, "alive": {run: [hosts]}, "answered":
  [hosts], "members": [hosts], "age": seconds since the survey began, "complete"}``: one whole
  survey's view. Every entry becomes the hosts that survey found its run on, plus the hosts it
  did not hear from and those noted since ``NOTE_MARGIN`` seconds before the survey began (a
  submission between its note and its claims, which that survey could not see); the same for
  where it is alive. Hosts that left the fleet go. With ``complete`` (every host of the fleet
  answered), the index is trusted from the survey's start on.
"""

import os
import time

try:  # imported as part of the collection (tests, the controller)
    from .booking import BOOK_OPS, _Lock, _name, _read_all, _remove, _write_json, book_path
except ImportError:  # on a host: nodeside's and booking's sources run first in this namespace
    pass

NOTE_MARGIN = 120
# A note's ``idle`` hosts only say where submitters need not look (a host taken meanwhile
# refuses the claim anyway), so a short margin serves: the time between a submitter's look and
# its note.
IDLE_MARGIN = 10
COMPLETE = "complete"


def _fleet_dir(fleet):
    return book_path("index", _name(fleet))


def _entries(fleet):
    """``{run: {"hosts": {host: noted}, "alive": [hosts]}}`` of a fleet's index."""
    found = {}
    for value in _read_all(_fleet_dir(fleet)):
        run = value.get("run")
        hosts = value.get("hosts")
        if run and isinstance(hosts, dict):
            found[run] = {"hosts": hosts, "alive": list(value.get("alive") or [])}
            if value.get("user"):
                found[run]["user"] = value["user"]
    return found


def _write_entry(fleet, run, entry):
    path = os.path.join(_fleet_dir(fleet), _name(run) + ".json")
    if entry and entry.get("hosts"):
        value = {"run": run, "hosts": entry["hosts"], "alive": sorted(entry.get("alive") or [])}
        if entry.get("user"):
            value["user"] = entry["user"]
        _write_json(path, value)
    else:
        _remove(path)


def _completed_at(fleet):
    try:
        import json

        with open(os.path.join(_fleet_dir(fleet), COMPLETE)) as handle:
            return float(json.load(handle)["at"])
    except (IOError, OSError, ValueError, KeyError, TypeError):
        return None


def view(entries, completed, run, now):
    """An index's answer for ``run``: ``entries`` as ``_entries`` reads them, ``completed``
    the time of its last complete rewrite (or None)."""
    busy = set()
    others = set()
    for name, entry in entries.items():
        busy.update(entry.get("alive") or ())
        if name != run:
            others.update(entry.get("alive") or ())
    # A marker from the future (the host's clock went back) is not trusted.
    return {"age": None if completed is None or completed > now else now - completed,
            "hosts": sorted((entries.get(run) or {}).get("hosts") or {}),
            "busy": sorted(busy), "others": sorted(others)}


def noted(entries, run, hosts, idle, now, user=None):
    """Every entry after a note: ``run`` has ``hosts`` added, alive, and ``user`` (when given)
    as its submitter; the hosts in ``idle`` (the submitter found nothing alive and no claim
    there) are no longer alive for any run, unless they were noted within IDLE_MARGIN (a
    submission the submitter's look came too early for). Returns the entries that changed."""
    idle = set(idle or ())
    changed = {}
    for name, entry in entries.items():
        alive = [h for h in entry.get("alive") or () if h not in idle
                 or now - float((entry.get("hosts") or {}).get(h) or 0) < IDLE_MARGIN]
        if alive != list(entry.get("alive") or ()):
            changed[name] = dict(entry, alive=alive)
    entry = changed.get(run) or entries.get(run) or {}
    found = dict(entry.get("hosts") or {})
    alive = set(entry.get("alive") or ())
    for host in hosts or ():
        found[str(host)] = now
        alive.add(str(host))
    changed[run] = {"hosts": found, "alive": sorted(alive)}
    if user or entry.get("user"):
        changed[run]["user"] = str(user or entry.get("user"))
    return changed


def rewritten(entries, found, alive, answered, now, begun=None, members=None):
    """Every entry as one whole survey leaves it: ``found`` is ``{run: hosts it is on}``,
    ``alive`` ``{run: hosts where it is alive}``, ``answered`` the hosts that answered,
    ``begun`` when the survey began (``now`` if not said). A host the survey did not see stays
    when it did not answer or was noted since NOTE_MARGIN before the survey began; a host that
    is no longer one of the fleet's ``members`` (when given) goes. Runs left with no host are
    dropped."""
    answered = set(answered or ())
    begun = now if begun is None else begun
    result = {}
    for run in set(entries) | set(found):
        old = entries.get(run) or {}
        hosts = old.get("hosts") or {}

        def kept(host):
            if members is not None and host not in members:
                return False
            return host not in answered or float(hosts.get(host) or 0) > begun - NOTE_MARGIN

        new = dict((host, when) for host, when in hosts.items() if kept(host))
        for host in found.get(run) or ():
            new[host] = hosts.get(host, now)
        living = set(h for h in old.get("alive") or () if h in new and kept(h))
        living.update(h for h in (alive or {}).get(run) or () if h in new)
        if new:
            result[run] = {"hosts": new, "alive": sorted(living)}
            if old.get("user"):
                result[run]["user"] = old["user"]
    return result


def index_view(fleet, run, now=None):
    """What a survey reads (without the lock: a snapshot, like live_claims)."""
    return view(_entries(fleet), _completed_at(fleet), _name(run),
                time.time() if now is None else now)


def op_note(payload):
    fleet, run = payload["fleet"], _name(payload["run"])
    with _Lock():
        changed = noted(_entries(fleet), run, payload.get("hosts"), payload.get("idle"),
                        time.time(), payload.get("user"))
        for name, entry in changed.items():
            _write_entry(fleet, name, entry)
    return {"noted": sorted(changed[run]["hosts"])}


def op_reindex(payload):
    fleet = payload["fleet"]
    found = dict((_name(run), hosts) for run, hosts in (payload.get("runs") or {}).items())
    with _Lock():
        now = time.time()
        entries = _entries(fleet)
        begun = now - max(0.0, float(payload.get("age") or 0))
        members = payload.get("members")
        result = rewritten(entries, found, payload.get("alive"), payload.get("answered"), now,
                           begun, None if members is None else set(members))
        for run in set(entries) | set(result):
            if entries.get(run) != result.get(run):
                _write_entry(fleet, run, result.get(run))
        if payload.get("complete"):
            # Dated from the survey's start: what came after it is only known from notes.
            _write_json(os.path.join(_fleet_dir(fleet), COMPLETE), {"at": begun})
    return {"reindexed": True}


_STATUS_BEFORE_INDEX = BOOK_OPS["status"]


def op_status_index(payload):
    answer = _STATUS_BEFORE_INDEX(payload)
    asked = payload.get("index")
    if asked:
        answer["index"] = index_view(asked["fleet"], asked["run"])
    return answer


BOOK_OPS.update({
    "status": op_status_index,
    "note": op_note,
    "reindex": op_reindex,
})
