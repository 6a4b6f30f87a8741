# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""What dstack's server does to backend fleets in the background, as one pass to schedule:
instances idle longer than their ``idle_duration`` go, down to ``nodes.min``; a fleet below
``nodes.min`` gets instances again (docs/reference/dstack-runtime.md#fleet-size-over-time,
docs/reference/dstack-runtime.md#idle-instances). An instance's ``idle_duration`` is
the fleet's, or the one it was made with for a run (fleets/idle.py).

Pure Python. An instance is idle when no task container of gpufleet is alive on it; it has
been idle since the last of its task containers finished, or since it was created when it
never ran one. A host that cannot be asked is never taken for idle.

    decision = decide(config, instances, containers, errors, now)
    # {"remove": [...], "create": n, "keep": [...], "reasons": {name: why}}
"""

from __future__ import annotations

from ..core.times import parse_time
from ..fleets import idle as idle_limits
from ..fleets.idle import OFF, span as _span
from ..fleets.status import InstanceStatus
from . import lifecycle


def idle_since(instance, containers):
    """When the instance became idle (None: busy now). ``containers`` are its task containers
    as tasks.hostside.nodeside's ``status`` lists them."""
    finished = []
    for entry in containers:
        if lifecycle.holds_host(entry) or lifecycle.armed(entry):
            return None   # a run on it, or a schedule it keeps
        moment = parse_time(entry.get("finished_at"))
        if moment is not None:
            finished.append(moment)
    created = parse_time(instance.get("created"))
    candidates = finished + ([created] if created else [])
    return max(candidates) if candidates else None


def _whose(instance):
    """`` (made for run X)`` for an instance that keeps the limit it was made with for run X."""
    run = idle_limits.own_limit_of(instance)
    return " (made for run %s)" % run if run else ""


def decide(config, instances, containers, errors, now, claims=None, queues=None):
    """What one reconcile pass does to a backend fleet.

    ``instances`` are the fleet's instance records, ``containers`` maps host names to their
    task containers, ``errors`` host names to why they could not be asked, ``now`` an aware
    datetime; ``claims`` maps host names to their live claims (tasks.hostside.booking): a host
    claimed by a run about to start is busy, and so is one that keeps queue entries of runs still
    waiting or running (``queues``: host names to tasks.hostside.booking's entry summaries), which
    would go with it. Idle instances go highest number first, never below ``nodes.min``; ``create``
    is how many instances bring the fleet back to ``nodes.min``.
    """
    claims = claims or {}
    queues = queues or {}
    nodes = config.get("nodes") or {}
    minimum = nodes.get("min") or 0
    fleet_idle = config.get("idle_duration")
    alive = [i for i in instances if i.get("status") not in InstanceStatus.finished_statuses()]
    reasons = {}
    idle = []
    for instance in alive:
        name = instance["name"]
        if instance.get("status") not in InstanceStatus.available_statuses():
            reasons[name] = "kept: %s" % instance.get("status")
            continue
        if name in errors or name not in containers:
            # Busy, idle or unknown: a host that was not read is never taken for idle.
            reasons[name] = "kept: cannot be asked whether it is idle (%s)" % (
                errors.get(name) or "not asked: no answer from it in this survey")
            continue
        held = sorted(c.get("run") for c in claims.get(name) or [] if c.get("run"))
        if held:
            reasons[name] = "kept: claimed by run %s" % ", ".join(held)
            continue
        kept = sorted(e.get("run") for e in queues.get(name) or []
                      if e.get("state") in ("pending", "active", "scheduled"))
        if kept:
            reasons[name] = "kept: holds the queue entries of run %s" % ", ".join(kept)
            continue
        since = idle_since(instance, containers.get(name) or [])
        if since is None:
            reasons[name] = "kept: busy" if instance.get("created") else \
                "kept: no creation time to measure idleness from"
            continue
        idle_for = (now - since).total_seconds()
        idle_limit = idle_limits.of_instance(instance, fleet_idle)
        whose = _whose(instance)
        if idle_limit == OFF:
            reasons[name] = "kept: idle %s, idle_duration is off%s" % (_span(idle_for), whose)
        elif idle_for < idle_limit:
            reasons[name] = "kept: idle %s of idle_duration %s%s" % (
                _span(idle_for), _span(idle_limit), whose)
        else:
            idle.append((instance, idle_for, idle_limit))
    removable = max(0, len(alive) - minimum)
    remove = []
    for instance, idle_for, idle_limit in sorted(idle, key=lambda item: -item[0]["num"]):
        name = instance["name"]
        if len(remove) < removable:
            remove.append(name)
            reasons[name] = "remove: idle %s >= idle_duration %s%s" % (
                _span(idle_for), _span(idle_limit), _whose(instance))
        else:
            reasons[name] = "kept: idle %s, but the fleet keeps nodes.min = %d" % (
                _span(idle_for), minimum)
    return {
        "remove": sorted(remove),
        "create": max(0, minimum - len(alive)),
        "keep": sorted(i["name"] for i in alive if i["name"] not in remove),
        "reasons": reasons,
    }
