# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Scheduled runs that outlive their hosts.

A task with ``schedule`` is kept ready on its hosts, whose tick starts it at each cron time
(tasks.hostside.scheduleside). Its apply also writes a ``scheduled`` entry on the fleet's queue
host (copied to the mirror host as every kept entry is: tasks.queue_mirror) with what re-arms
it: the run's config, secrets, files and code, and the hosts its jobs are kept on.

Each pass over the queue (tasks.queue) looks at those entries. When the backend says one of
a scheduled run's hosts is gone or stopped, the pass takes the entry, removes the run from its
other hosts and arms it again from the entry (a placement of its own, the same run id), whose
apply writes the entry anew with its new hosts. A host that comes back with a job of the run
its entry no longer names has that job removed, so a schedule never fires twice. A run that
cannot be armed again now (no capacity) keeps its entry, and the next pass tries again.
"""

from __future__ import annotations

from typing import Any

from ..core.errors import GpufleetError
from . import interruption, queue_mirror
from .container import RUN_ID_LABEL, RUN_LABEL
from .errors import PlanError, RunError
from .placement import PlacementError
from .lifecycle import RunStatus
from .queue_records import SCHEDULED, entries_of
from .ssh import NodeError, parallel


def _jobs_of(containers, entry):
    """``{host: [its jobs of the entry's run (this run id)]}``: containers, and jobs kept for
    their schedule."""
    found = {}
    for host, boxes in containers.items():
        mine = [c for c in boxes or () if (c.get("labels") or {}).get(RUN_LABEL) == entry.get("run")
                and (c.get("labels") or {}).get(RUN_ID_LABEL) == entry.get("run_id")]
        if mine:
            found[host] = mine
    return found


def replaced(entry, containers):
    """Whether the survey sees the entry's run name held by another run id (applied again
    without its schedule, or with a new one): the entry is stale."""
    return any((c.get("labels") or {}).get(RUN_LABEL) == entry.get("run")
               and (c.get("labels") or {}).get(RUN_ID_LABEL) not in (None, entry.get("run_id"))
               for boxes in containers.values() for c in boxes or ())


def stopped(entry, containers):
    """Whether a host of the entry's run says a user stopped its schedule."""
    return any(((c.get("files") or {}).get("schedule") or {}).get("stopped")
               for boxes in _jobs_of(containers, entry).values() for c in boxes)


def judged(entry, instances):
    """Whether this controller knows every fleet the entry's run may use (``instances``:
    tasks.interruption.instance_map of the fleets it described): only then does a host
    missing from them count as lost."""
    known = set(i.get("fleet") for i in instances.values())
    return all(name in known for name in entry.get("fleets") or ())


def lost_hosts(entry, instances):
    """The hosts of a scheduled entry that their backend says are gone or stopped."""
    return sorted(h for h in entry.get("hosts") or () if interruption.gone(instances.get(h)))


def strays(entry, containers, errors):
    """The answering hosts that keep a job of the entry's run that the entry does not name."""
    kept = set(entry.get("hosts") or ())
    return sorted(h for h in _jobs_of(containers, entry) if h not in kept and h not in errors)


def wanted(entry, instances):
    """Whether the entry's run must be armed again: a host of it is lost, or an earlier try
    left it half done (``rearm``: its jobs on the other hosts went)."""
    return bool(entry.get("rearm")) or (judged(entry, instances) and
                                        bool(lost_hosts(entry, instances)))


def due(entries, containers, errors, instances) -> bool:
    """Whether a pass would arm a scheduled run again, remove a stray job of one, or drop a
    stale entry."""
    for _host, entry in entries:
        if entry.get("state") != SCHEDULED:
            continue
        if replaced(entry, containers) or stopped(entry, containers) or strays(
                entry, containers, errors) or wanted(entry, instances):
            return True
    return False


def keep_schedules(queue_pass: Any, entries, containers, errors) -> None:
    """Act on the ``scheduled`` entries of a pass (tasks.queue.QueuePass): stale ones dropped,
    strays removed, runs that lost a host armed again. What was done goes into the pass's
    report (``rearmed``) and its events."""
    instances = interruption.instance_map(queue_pass.fleets)
    now = queue_pass.clock()
    for host, entry in entries:
        if entry.get("state") != SCHEDULED:
            continue
        if float(entry.get("taken_until") or 0) > now and entry.get("taken_by") != queue_pass.by:
            continue   # another controller arms it again right now
        if stopped(entry, containers) or replaced(entry, containers):
            # A stop that could not reach the entry then, or a new run of the name.
            queue_pass._call(host, "dequeue", {"run": entry["run"], "run_id": entry["run_id"],
                                               "expect": {"state": SCHEDULED}})
            continue
        for stray in strays(entry, containers, errors):
            queue_pass._call(stray, "remove", {"run": entry["run"]})
            queue_pass.emit({"kind": "info", "message": "run %s: its job kept on %s is no "
                             "longer its (it was armed again elsewhere); removed"
                             % (entry["run"], stray)})
        if wanted(entry, instances):
            try:
                _rearm(queue_pass, host, entry, instances)
            except GpufleetError as exc:   # this run's trouble: the pass goes on
                queue_pass.emit({"kind": "info", "message": "run %s: its schedule could not "
                                 "be armed again: %s" % (entry["run"], exc)})


def _release(queue_pass, host, entry, changes=None):
    """Let the entry go (its take), with ``changes``, only while this pass holds it."""
    return ((queue_pass._call(host, "update", {
        "run": entry["run"], "run_id": entry["run_id"], "changes": changes or {},
        "expect": {"state": SCHEDULED, "taken_by": queue_pass.by}}) or {}).get("updated"))


def _rearm(queue_pass, host, summary, instances):
    taken = queue_pass._call(host, "take", {"run": summary["run"], "run_id": summary["run_id"],
                                            "by": queue_pass.by, "state": SCHEDULED})
    if not (taken or {}).get("taken"):
        return
    entry = taken["entry"]
    lost = lost_hosts(entry, instances)   # the entry as it is now: another pass may have acted
    if not wanted(entry, instances):
        _release(queue_pass, host, entry)
        return
    try:
        runner = queue_pass.runner_of(entry, queue_pass.fleets, queue_node=queue_pass.nodes[host],
                                      **queue_pass.options)
    except GpufleetError as exc:
        _release(queue_pass, host, entry, {"message": str(exc)})
        return
    # Its jobs on the other hosts go first: the placement may use those hosts again.
    others = sorted(h for h in entry.get("hosts") or () if h not in lost and h in
                    queue_pass.nodes)
    parallel(others, lambda h: queue_pass.nodes[h].call("remove", {"run": entry["run"]}))
    runner.rearming = True   # its arm leaves the entry to this pass (run_supervision.arm)
    try:
        result = runner.run(wait=False)
    except (RunError, PlanError, NodeError, PlacementError) as exc:
        result = {"status": RunStatus.FAILED.value, "message": str(exc)}
    if result.get("status") == RunStatus.FAILED.value:
        # Its jobs on the other hosts went: it is armed again as a whole once it fits.
        _release(queue_pass, host, entry, {"rearm": True, "message": "its host %s is lost; "
                                           "arming it again failed: %s" % (
                                               ", ".join(lost) or "(none now)",
                                               result.get("message"))})
        queue_pass.emit({"kind": "info", "message": "run %s: its host %s is lost, and its "
                         "schedule could not be kept elsewhere yet: %s (the next pass tries "
                         "again)" % (entry["run"], ", ".join(lost), result.get("message"))})
        return
    hosts = list(getattr(runner, "schedule_hosts", None) or ())
    if not _release(queue_pass, host, entry, {"hosts": hosts, "message": None, "rearm": False}):
        # Stopped (or taken over) meanwhile: what this pass armed goes again.
        parallel(hosts, lambda h: queue_pass.nodes[h].call("remove", {"run": entry["run"]}))
        return
    queue_pass.report.setdefault("rearmed", []).append(entry["run"])
    queue_pass.emit({"kind": "info", "message": "run %s: its host %s is lost; its schedule is "
                     "kept on %s now" % (entry["run"], ", ".join(lost) or "(back now)",
                                         ", ".join(hosts))})


def drop_entries(nodes, fleets, queues, name) -> int:
    """``gpufleet stop`` of a scheduled run: its ``scheduled`` entries (and their copies) go,
    so that nothing arms it again. Returns how many went."""
    dropped = 0
    for host, entry in entries_of(queues):
        if entry.get("run") == name and entry.get("state") == SCHEDULED:
            try:
                answer = nodes[host].call("dequeue", {"run": name, "run_id": entry.get("run_id"),
                                                      "expect": {"state": SCHEDULED}})
            except NodeError:
                continue   # its queue host does not answer: a later stop takes it
            dropped += int(bool(answer.get("removed")))
            queue_mirror.follow(nodes, fleets, host, name)
    return dropped
