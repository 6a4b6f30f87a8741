# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The queue's records as every part of the runner reads them: the states of an entry
(tasks.runbook writes entries, tasks.hostside.booking keeps them on their queue host), the order
pending entries are tried in, and the host that keeps a run's entry. The pass that acts on them is
tasks.queue; the run index (tasks.runindex), ps (tasks.listing) and the runner (tasks.runs) read the
same states from here.
"""

from __future__ import annotations

from typing import Iterable

from ..fleets.status import InstanceStatus
from . import lifecycle
from .records import QueueSummary

PENDING = "pending"
ACTIVE = "active"
FAILED = "failed"
TERMINATED = "terminated"
WAITING = (PENDING, ACTIVE)
# A task with ``schedule`` kept ready on its hosts (tasks.hostside.scheduleside): its entry
# holds what re-arms it elsewhere when one of its hosts is lost (tasks.queue).
SCHEDULED = "scheduled"
# The entries a lost queue host must not lose: each has a copy on its mirror host
# (tasks.queue_mirror).
KEPT = WAITING + (SCHEDULED,)
# Why a pending run waits when its owner is at a per-user cap (tasks.admission): it is not a
# failure, and it waits whatever its retry policy says.
USER_LIMIT = "user limit"
RESUBMITTED_ON = (lifecycle.EVENT_ERROR, lifecycle.EVENT_INTERRUPTION)


def entries_of(queues: dict[str, list[QueueSummary]]) -> list[tuple[str, QueueSummary]]:
    """``[(host, summary)]`` of every queue entry the survey found."""
    return [(host, entry) for host, found in sorted(queues.items()) for entry in found]


def priority_order(entries: Iterable[tuple[str, QueueSummary]], usage=None
                   ) -> list[tuple[str, QueueSummary]]:
    """Pending entries in the order they are tried: higher priority first; among equal
    priorities, the user who used fewer GPU-seconds in the last 24 h (``usage``: ``{user:
    seconds}``, the fleet's hosts' ``usage_24h`` summed; fair share), then first submitted."""
    usage = usage or {}
    return sorted((item for item in entries if item[1].get("state") == PENDING),
                  key=lambda item: (-int(item[1].get("priority") or 0),
                                    float(usage.get(item[1].get("user")) or 0),
                                    float(item[1].get("submitted_epoch") or 0),
                                    item[1].get("run") or ""))


def fleet_usage(per_host) -> dict:
    """``{user: GPU-seconds}`` summed over the hosts' ``usage_24h`` (``{host: {user:
    seconds}}``); what a host does not say counts 0."""
    total: dict = {}
    for found in (per_host or {}).values():
        for user, seconds in (found or {}).items():
            try:
                total[user] = total.get(user, 0.0) + float(seconds or 0)
            except (TypeError, ValueError):
                continue
    return total


def positions(entries: Iterable[tuple[str, QueueSummary]], usage=None) -> dict[str, int]:
    """``{run: place in the queue}`` of the pending runs (1 is tried first)."""
    return dict((entry["run"], index + 1)
                for index, (_host, entry) in enumerate(priority_order(entries, usage)))


def keeps_entry(config):
    """Whether a started run keeps an entry: so that retry can submit it again, or so that a
    pass can add replicas to an autoscaled service (services.autoscale) from it."""
    retry = config.get("retry") or {}
    if autoscaled(config):
        return True
    return any(event in RESUBMITTED_ON for event in retry.get("on_events") or ())


def autoscaled(config):
    """Whether ``config`` (a runnable config) is a service whose replica count follows its
    request rate (services.replicas.scaling_of put the rules in its service key)."""
    service = config.get("service")
    return isinstance(service, dict) and bool(service.get("scaling"))


def queue_host(fleets, names, errors):
    """The host that keeps a run's entry: the reachable ready instance with the lowest number
    of the first of its fleets that has one."""
    for fleet in fleets:
        if names and fleet.get("name") not in names:
            continue
        for inst in sorted(fleet.get("instances") or [], key=lambda i: i.get("num") or 0):
            if inst.get("hostname") and (
                    inst.get("status") in InstanceStatus.available_statuses()) and (
                    inst["name"] not in errors):
                return inst["name"]
    return None


def mirror_host(fleets, primary):
    """The host that keeps copies of ``primary``'s queue entries (tasks.queue_mirror): the
    instance with the lowest number of ``primary``'s fleet other than it that has an address
    and that its backend does not say is gone, or None (a fleet of one host). Read from the
    backends' records alone (not from facts a controller cached), so that every controller
    names the same host."""
    for fleet in fleets:
        if not any(i.get("name") == primary for i in fleet.get("instances") or []):
            continue
        for inst in sorted(fleet.get("instances") or [], key=lambda i: i.get("num") or 0):
            if inst.get("name") != primary and inst.get("hostname") and (
                    inst.get("status") not in InstanceStatus.gone_statuses()):
                return inst["name"]
        return None
    return None


def candidate_fleets(config, fleets):
    gateways = set(f["name"] for f in fleets if f.get("gateway"))   # they run no jobs
    wanted = [str(ref).rsplit("/", 1)[-1] for ref in config.get("fleets") or []]
    return [name for name in wanted or [f["name"] for f in fleets] if name not in gateways]
