# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Instances made on demand: a run that does not fit the hosts a backend fleet has may make the
fleet grow, up to ``nodes.max`` (docs/reference/dstack-runtime.md#fleet-size-over-time: "Runs can
add instances to a backend fleet up to nodes.max"; a fleet whose ``nodes`` range starts at 0 is only
a template until a run needs it).

Pure Python. ``place(config, fleets, facts, busy, settings, catalog_dir)`` first places the run
on the hosts that exist (tasks.placement); when nothing fits and the task's ``creation_policy``
is ``reuse-or-create`` (the default), it tries each backend fleet that may still grow, adding
1, 2, ... up to ``max - instances`` new instances that look like the fleet's own (an existing
instance's measured facts, else the local machine, else the fleet's cheapest cloud offer), and
returns the first plan that fits with ``create = {"fleet", "file", "instances", "at_least",
"price", "backend", "region", "made_for"}``. The fleet then grows through the fleet's own apply
(playbooks/fleet.yml: in its zone and placement group, with its network layout, checked and
measured), its new instances marked as made for the run with their idle limit (``made_for``,
fleets/idle.py), and the run is placed again on what exists.
"""

from __future__ import annotations

import os

from ..fleets import idle
from ..fleets.status import InstanceStatus
from . import placement

NEW_PREFIX = "new:"
GROWABLE = ("local", "aws", "gcp")


def _alive(fleet):
    return [i for i in fleet.get("instances") or []
            if i.get("status") not in InstanceStatus.lost_statuses()]


def room(fleet):
    """How many instances a backend fleet may still get (None: no limit), 0 for SSH fleets."""
    nodes = fleet.get("nodes")
    if fleet.get("fleet_type") != "backend" or not isinstance(nodes, dict):
        return 0
    maximum = nodes.get("max")
    if maximum is None:
        return None
    return max(0, int(maximum) - len(_alive(fleet)))


def _backend(fleet):
    for inst in fleet.get("instances") or []:
        if inst.get("backend"):
            return inst["backend"]
    backends = fleet.get("backends") or []
    clouds = [b for b in backends if b in ("aws", "gcp")]
    return clouds[0] if clouds and "local" not in backends else "local"


def local_machine_fact(blocks=1):
    """What a new local node has: this machine (nodes are containers on its engine, without
    limits)."""
    memory_kib = 0
    try:
        with open("/proc/meminfo") as handle:
            for line in handle:
                if line.startswith("MemTotal:"):
                    memory_kib = int(line.split()[1])
    except (IOError, OSError, ValueError):
        pass
    try:
        stat = os.statvfs("/")
        disk_mib = stat.f_bavail * stat.f_frsize // 2 ** 20
    except OSError:
        disk_mib = 0
    cpus = os.cpu_count() or 1
    return {"cpus": cpus, "memory": {"mib": memory_kib // 1024},
            "disk": {"available_mib": disk_mib},
            "gpu": {"vendor": "none", "count": 0, "name": None, "memory_mib": 0, "devices": []},
            "blocks": {"total": blocks if isinstance(blocks, int) else cpus},
            "internal_ip": None}


def template(fleet, facts, offer_for=None):
    """``(fact, price, backend, region)`` of a new instance of ``fleet``, or None when it cannot
    be known (a cloud fleet with no instance and no offer)."""
    for inst in _alive(fleet):
        if facts.get(inst["name"]):
            return (facts[inst["name"]], inst.get("price") or 0.0, inst.get("backend"),
                    inst.get("region"))
    backend = _backend(fleet)
    if backend == "local":
        return local_machine_fact(fleet.get("blocks") or 1), 0.0, "local", "local"
    offer = offer_for(fleet) if offer_for is not None else None
    if not offer:
        return None
    fact = dict(offer["resources"], blocks={"total": fleet.get("blocks") if isinstance(
        fleet.get("blocks"), int) else 1}, internal_ip=None)
    return fact, offer.get("price") or 0.0, offer.get("backend"), offer.get("region")


def _grown(fleet, facts, count, made):
    fact, price, backend, region = made
    spot = any(i.get("spot") for i in _alive(fleet)) or fleet.get("spot_policy") == "spot"
    instances = list(fleet.get("instances") or [])
    top = max([i.get("num") or 0 for i in instances] + [-1])
    extra = {}
    for index in range(count):
        name = "%s%s-%d" % (NEW_PREFIX, fleet["name"], top + 1 + index)
        instances.append({"name": name, "num": top + 1 + index, "fleet": fleet["name"],
                          "backend": backend, "region": region, "price": price,
                          "spot": spot, "status": "idle", "hostname": None,
                          "instance_type": None})
        extra[name] = fact
    return dict(fleet, instances=instances), dict(facts, **extra)


def place(config, fleets, facts, busy=None, offer_for=None, run=None):
    """A plan on the hosts that exist, else one on a fleet grown by the fewest instances
    (``plan["create"]``, its instances made for ``run``, the run's name); NoHostFits, saying
    how far each fleet may grow, when neither works."""
    try:
        return placement.place(config, fleets, facts, busy)
    except placement.NoHostFits as exc:
        first = exc
    if config.get("creation_policy") == "reuse":
        raise first
    wanted = [str(r).rsplit("/", 1)[-1] for r in config.get("fleets") or []]
    notes = []
    for fleet in fleets:
        if wanted and fleet["name"] not in wanted:
            continue
        space = room(fleet)
        if space == 0:
            if fleet.get("fleet_type") == "backend":
                notes.append("fleet %s has nodes.max = %s instances already"
                             % (fleet["name"], (fleet.get("nodes") or {}).get("max")))
            continue
        if not fleet.get("file"):
            notes.append("fleet %s could grow, but its file is not known on this controller "
                         "(apply it from here, or name it with --fleet-file)" % fleet["name"])
            continue
        made = template(fleet, facts, offer_for)
        if made is None:
            notes.append("fleet %s: no offer for a new instance" % fleet["name"])
            continue
        limit = space if space is not None else max(1, _nodes_of(config))
        for count in range(1, limit + 1):
            grown, grown_facts = _grown(fleet, facts, count, made)
            try:
                plan = placement.place(dict(config, fleets=[fleet["name"]]), [grown],
                                       grown_facts, busy)
            except placement.NoHostFits:
                continue
            plan["create"] = {"fleet": fleet["name"], "file": fleet["file"],
                              "instances": count,
                              "at_least": len(_alive(fleet)) + count,
                              "price": made[1], "backend": made[2], "region": made[3],
                              "made_for": {"run": run or config.get("name"),
                                           "idle_duration": idle.for_run(
                                               fleet.get("idle_duration"),
                                               config.get("idle_duration"))}}
            return plan
        notes.append("fleet %s may grow by %s instance%s (nodes.max), not enough" % (
            fleet["name"], limit, "" if limit == 1 else "s"))
    if notes:
        raise placement.NoHostFits("%s. Growing was tried: %s." % (
            str(first).rstrip("."), "; ".join(notes)), first.reasons + notes)
    raise first


def never_fits(config, fleets):
    """Why no candidate fleet could ever hold the run, even empty and grown to ``nodes.max``
    (so waiting for capacity is pointless), or None. Only the number of nodes is judged."""
    wanted = [str(r).rsplit("/", 1)[-1] for r in config.get("fleets") or []]
    candidates = [f for f in fleets if not wanted or f["name"] in wanted]
    needed = _nodes_of(config)
    if not candidates or needed <= 1:
        return None
    sizes = []
    for fleet in candidates:
        if fleet.get("fleet_type") == "ssh":
            sizes.append(len(fleet.get("instances") or []))
            continue
        maximum = (fleet.get("nodes") or {}).get("max")
        if maximum is None or config.get("creation_policy") == "reuse":
            size = len(_alive(fleet)) if maximum is not None else None
        else:
            size = int(maximum)
        if size is None:
            return None
        sizes.append(size)
    if max(sizes) >= needed:
        return None
    return ("needs %d nodes, and no fleet can ever have that many (%s); waiting for capacity "
            "cannot help: use a fleet with more nodes (nodes.max)" % (needed, ", ".join(
                "%s: at most %d" % (f["name"], n) for f, n in zip(candidates, sizes))))


def _nodes_of(config):
    return len(placement.job_requirements(config))


def new_hosts(plan):
    """The jobs of ``plan`` placed on instances still to be made."""
    return [j for j in plan.get("jobs") or [] if str(j.get("host") or "").startswith(NEW_PREFIX)]
