# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""A second copy of every waiting queue entry, and the handover when a queue host is lost.

A fleet's queue host keeps the entries of its waiting runs (pending for capacity or for the
runs they follow, active while retry may submit them again: tasks.queue) and of its scheduled
runs (what re-arms them when one of their hosts is lost). Each such entry
also has a copy on the fleet's *mirror host* (tasks.queue_records.mirror_host: the next ready
instance by number), kept by tasks.hostside.mirrorside with the run's repo archive. The copy
follows the entry: ``follow`` after a command changed it, and ``sync`` at the start of each
pass over the queue, which compares the digests the survey read.

The same ``sync`` hands entries over. A copy whose queue host is *lost* (the backend says its
instance is gone or stopped, tasks.interruption's rule for jobs: a host that only does not
answer may come back, so its entries are waited for) becomes the entry of the host that kept
it (``mirror_adopt``), and its own copy goes to that host's mirror host on the same pass. A
copy that says ``pending`` while the survey sees containers of that run id is adopted as
``active`` (the copy was older than the start), so the pass settles the run instead of
starting it twice. The host that adopted a copy notes it for a week; when the lost host comes
back with its old entry of that run within that time, the entry is dropped.
"""

from __future__ import annotations

from typing import Any, Callable

from . import interruption
from .container import RUN_ID_LABEL
from .errors import RunError
from .hostside.booking import entry_digest
from .queue_records import ACTIVE, KEPT, PENDING, entries_of, mirror_host
from .runbook import HeldCode
from .ssh import NodeError
from .surveys import mirrors_of


def lost(instances, name):
    """Whether the queue host ``name`` is lost (``instances``: tasks.interruption.instance_map):
    its backend says it is gone or stopped, or no fleet has it any more; an SSH host, which
    no backend judges, only once its fleet no longer lists it."""
    return interruption.gone(instances.get(name))


def _orphans(survey, instances):
    """The copies a survey read whose queue host did not answer and is lost, and whose run
    waits nowhere else: ``[(host, copy)]``. None while a host that is not lost does not
    answer: it may hold the run."""
    queues, errors = survey[2], survey[3]
    if any(not lost(instances, host) for host in errors):
        return []
    kept = set((e.get("run"), e.get("run_id")) for _h, e in entries_of(queues)
               if e.get("state") in KEPT)
    return [(host, copy) for host, copy in entries_of(mirrors_of(survey))
            if copy.get("state") in KEPT
            and host in queues and copy.get("queued_on") not in queues
            and copy.get("queued_on") != host
            and (copy.get("run"), copy.get("run_id")) not in kept
            and lost(instances, copy.get("queued_on"))]


def handover_due(survey, instances) -> bool:
    """Whether a pass would hand an entry over (tasks.queue.is_due)."""
    return bool(_orphans(survey, instances))


def follow(nodes, fleets, host, run, known=None) -> str | None:
    """After a change to ``run``'s entry on ``host``: its copy on the mirror host is written
    anew from the entry (unless ``known``, the digest of the copy there, says it is current),
    or dropped when the entry is no longer kept. Returns why it could not (the next pass's
    ``sync`` tries again), or None."""
    mirror = mirror_host(fleets, host)
    if mirror is None or mirror not in nodes or host not in nodes:
        return None
    try:
        entry = nodes[host].call("queue_read", {"run": run}).get("entry")
        if not entry or entry.get("state") not in KEPT:
            nodes[mirror].call("mirror_drop", {"run": run})
            return None
        if known is not None and known == entry_digest(entry):
            return None
        archive = None
        if (entry.get("repo") or {}).get("kind") == "local" and entry.get("held_archive"):
            code = HeldCode(entry, nodes[host])
            try:
                archive = code.ship(nodes, [mirror])["archive"]
            finally:
                code.close()
        answer = nodes[mirror].call("mirror_put", {"entry": entry, "archive": archive})
    except (NodeError, RunError) as exc:
        return "%s: %s" % (mirror, exc)
    if not answer.get("kept"):
        return "%s: %s" % (mirror, answer.get("reason"))
    return None


def _drop(nodes, host, copy):
    try:
        nodes[host].call("mirror_drop", {"run": copy["run"], "run_id": copy.get("run_id")})
    except NodeError:
        pass   # the next pass tries again


def _seen(survey, run_id):
    """The hosts where a survey sees the run id started: a container, or a claim."""
    containers, claims = survey[0], survey[1]
    return sorted(set(h for h, found in containers.items() for c in found or ()
                      if (c.get("labels") or {}).get(RUN_ID_LABEL) == run_id) |
                  set(h for h, found in claims.items() for c in found or ()
                      if c.get("run_id") == run_id))


def _adopt(nodes, survey, host, copy, emit):
    """Make ``copy`` (on ``host``) the entry there; answers its summary, or None."""
    source = copy.get("queued_on")
    changes = {}
    started = _seen(survey, copy.get("run_id"))
    if copy.get("state") == PENDING and started:
        changes.update(state=ACTIVE, hosts=started)
    try:
        answer = nodes[host].call("mirror_adopt", {"run": copy["run"], "run_id": copy["run_id"],
                                                   "host": host, "from": source,
                                                   "changes": changes})
    except NodeError as exc:
        emit({"kind": "info", "message": "run %s: its queue entry could not be handed over from "
              "%s (gone) to %s: %s" % (copy["run"], source, host, exc)})
        return None
    if not answer.get("adopted"):
        if not answer.get("dropped"):
            # Another run of the name waits there: the copy is of a run that cannot go on.
            _drop(nodes, host, copy)
            emit({"kind": "info", "message": "run %s: the copy of its queue entry on %s was "
                  "dropped: %s" % (copy["run"], host, answer.get("reason"))})
        return None
    emit({"kind": "info", "message": "run %s: its queue host %s is gone; %s keeps its entry now"
          % (copy["run"], source, host)})
    return answer["entry"]


def _without(mirrors, host, copy):
    mirrors[host] = [c for c in mirrors.get(host) or () if c is not copy]


def _dequeue(nodes, queues, host, entry):
    try:
        nodes[host].call("dequeue", {"run": entry["run"], "run_id": entry["run_id"]})
    except NodeError:
        return False
    queues[host] = [e for e in queues[host] if e is not entry]
    return True


def _one_each(nodes, queues, mirrors):
    """One entry per run id: of two (an old queue host back with its stale one, or an entry
    written anew on it since), the one written last counts; an entry that a host adopted from
    this one's host after it was written goes. Returns whether one went."""
    changed = False
    found: dict = {}
    for host, entry in entries_of(queues):
        if entry.get("state") in KEPT:
            found.setdefault((entry.get("run"), entry.get("run_id")), []).append((host, entry))
    for same in found.values():
        same.sort(key=lambda item: (float(item[1].get("written_at") or 0),
                                    bool(item[1].get("handed_from")), item[0]), reverse=True)
        for host, entry in same[1:]:
            changed = _dequeue(nodes, queues, host, entry) or changed
    notes = dict(((c.get("run"), c.get("run_id")), c) for _h, c in entries_of(mirrors)
                 if c.get("state") == "handed")
    for host, entry in entries_of(queues):
        note = notes.get((entry.get("run"), entry.get("run_id")))
        if entry.get("state") in KEPT and note and note.get("handed_from") == host and \
                float(entry.get("written_at") or 0) < float(note.get("ended_at") or 0):
            changed = _dequeue(nodes, queues, host, entry) or changed
    return changed


def sync(fleets, nodes, survey, emit: Callable[[dict], Any] | None = None) -> bool:
    """Keep one entry per run id, hand over the copies of lost queue hosts, and bring every
    kept entry's copy up to date (one copy, on its mirror host). ``survey``
    (tasks.surveys.survey_with_queues's) is changed in place to what the hosts keep now.
    Returns whether anything changed."""
    emit = emit or (lambda event: None)
    _containers, _claims, queues, errors = survey
    mirrors = mirrors_of(survey)
    changed = _one_each(nodes, queues, mirrors)
    kept = set((e.get("run"), e.get("run_id")) for _h, e in entries_of(queues)
               if e.get("state") in KEPT)
    # Copies whose entry answered and no longer waits.
    for host, copy in entries_of(mirrors):
        key = (copy.get("run"), copy.get("run_id"))
        if key in kept or host not in queues or copy.get("state") not in KEPT:
            continue
        if copy.get("queued_on") in queues or copy.get("queued_on") == host:
            _drop(nodes, host, copy)
            _without(mirrors, host, copy)
            changed = True
    # Copies of a lost queue host: the first of each run is adopted, once.
    tried = set()
    for host, copy in _orphans(survey, interruption.instance_map(fleets)):
        key = (copy.get("run"), copy.get("run_id"))
        if key in kept or key in tried:
            continue
        tried.add(key)
        summary = _adopt(nodes, survey, host, copy, emit)
        _without(mirrors, host, copy)
        changed = True
        if summary is not None:
            queues.setdefault(host, []).append(summary)
            kept.add(key)
    # Each kept entry's copy on its mirror host, current; copies elsewhere go once it is.
    for host, entry in entries_of(queues):
        if entry.get("state") not in KEPT:
            continue
        mirror = mirror_host(fleets, host)
        if mirror is None or mirror not in nodes or mirror in errors:
            continue
        key = (entry.get("run"), entry.get("run_id"))
        copies = [(h, c) for h, c in entries_of(mirrors)
                  if (c.get("run"), c.get("run_id")) == key and c.get("state") in KEPT]
        current = any(h == mirror and c.get("digest") == entry.get("digest")
                      for h, c in copies)
        if not current:
            why = follow(nodes, fleets, host, entry["run"])
            current = why is None
            if why:
                emit({"kind": "info", "message": "run %s: its queue entry's copy is not "
                      "written: %s" % (entry["run"], why)})
            changed = True
        if current:
            for other, copy in copies:
                if other not in (mirror, host):
                    _drop(nodes, other, copy)
                    changed = True
    return changed


def copies_of(fleets, survey):
    """``{(queue host, run): digest}`` of the copies a survey saw on each entry's mirror host."""
    found = {}
    for host, entry in entries_of(survey[2]):
        mirror = mirror_host(fleets, host)
        for copy in mirrors_of(survey).get(mirror) or ():
            if copy.get("run") == entry.get("run") and copy.get("run_id") == entry.get(
                    "run_id") and copy.get("state") in KEPT:
                found[(host, entry.get("run"))] = copy.get("digest")
    return found
