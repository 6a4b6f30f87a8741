# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Where a task runs: the fleet, the host of every job and its rank, or why nothing fits.

Pure Python (no Ansible imports). The input is the normalized task config
(docs/config-json.md), the fleet records with their instance records, the ``gpufleet_host`` fact
of every measured host (docs/host-facts.md) and what already runs on each host. The rules are
dstack's (matching: docs/reference/dstack-files.md#resource-grammar; then
docs/reference/dstack-runtime.md#blocks, docs/reference/dstack-runtime.md#health,
docs/reference/dstack-runtime.md#jobs and docs/reference/dstack-runtime.md#placement):

    jobs = job_requirements(config)          # one entry per job, rank order
    plan = place(config, fleets, facts, busy)   # {"fleet", "placement", "jobs": [...]}

Whether a host (or a share of its blocks) satisfies a job's resources is decided by
offers/match.py, the matcher cloud offers use too.

``place`` raises NoHostFits, whose message names every fleet considered and why each host was
turned down; input that is not what these functions take raises PlacementError. (A cloud that
has no capacity for an instance is another error: backends.errors.NoCapacity.)
"""

from __future__ import annotations

from collections import deque

from ..core.text import shorten
from ..fleets.status import InstanceStatus
from ..offers.match import (
    MatchError,
    block_offer,
    host_capacity,
    matches,
    require_mapping,
    resolve_arch,
    short_number,
    type_name,
    uses_default_image,
    whole_number,
)

# DCGM health that keeps a host out of scheduling; "warning" hosts are still used
# (docs/reference/dstack-runtime.md#health).
EXCLUDED_HEALTH = frozenset(("failure",))
# An SSH fleet instance has backend "ssh"; dstack calls that backend "remote"
# (docs/reference/dstack-files.md#ssh-hosts).
SSH_BACKEND_NAMES = frozenset(("ssh", "remote"))
SPOT_POLICIES = ("spot", "on-demand", "auto")
NO_FACTS = "no host facts (apply the fleet first)"
ADVICE = "apply a fleet with enough hosts, free busy hosts, or relax resources"
MAX_HOST_REASONS = 5
MAX_FLEET_REASONS = 10


# Input that cannot be placed at all: not a task config, a malformed fleet record or fact.
PlacementError = MatchError


class NoHostFits(PlacementError):
    """No fleet has enough free matching hosts for the run now. str(exc) is the whole
    user-facing message; exc.reasons is a list of short per-fleet/per-host reasons."""

    def __init__(self, message, reasons=None):
        super().__init__(message)
        self.reasons = list(reasons or [])


# ---------------------------------------------------------------------------------------------
# Small readers
# ---------------------------------------------------------------------------------------------


def _short_name(reference):
    """``project/name`` and ``name`` both name the fleet ``name`` (fleets are per project)."""
    return str(reference).rsplit("/", 1)[-1]


def _price(instance):
    price = instance.get("price")
    if price is None:
        return 0.0
    if isinstance(price, bool) or not isinstance(price, (int, float)):
        raise PlacementError(
            "instance %s: price must be a number or null, got %r" % (instance.get("name"), price)
        )
    return float(price)


# ---------------------------------------------------------------------------------------------
# Jobs
# ---------------------------------------------------------------------------------------------


def job_requirements(config):
    """One entry per job in rank order: {"job_num", "group", "resources"}
    (docs/reference/dstack-runtime.md#jobs).

    ``nodes: N`` gives N jobs with the task's resources; ``groups`` are expanded in order, each
    job with its group's resources (groups do not inherit the task's). Job 0 is the master.
    """
    config = require_mapping(config, "the task config")
    groups = config.get("groups")
    jobs = []
    if groups:
        if not isinstance(groups, list):
            raise PlacementError("groups must be a list of node groups, got %s" % type_name(groups))
        for index, group in enumerate(groups):
            group = require_mapping(group, "groups[%d]" % index)
            name = group.get("name")
            name = str(index) if name is None else str(name)
            count = whole_number(group.get("nodes", 1), "groups[%d].nodes" % index, 1)
            resources = require_mapping(group.get("resources"), "groups[%d].resources" % index)
            for _copy in range(count):
                jobs.append({"job_num": len(jobs), "group": name, "resources": resources})
        return jobs
    nodes = config.get("nodes")
    nodes = 1 if nodes is None else whole_number(nodes, "nodes", 1)
    resources = require_mapping(config.get("resources"), "resources")
    return [{"job_num": num, "group": None, "resources": resources} for num in range(nodes)]


# ---------------------------------------------------------------------------------------------
# Offers and matching
# ---------------------------------------------------------------------------------------------


# ---------------------------------------------------------------------------------------------
# Hosts
# ---------------------------------------------------------------------------------------------


def _selected(selector, instance):
    if isinstance(selector, str):
        return instance.get("name") == selector
    if not isinstance(selector, dict):
        raise PlacementError("an instances selector must be a name or a mapping, got %r"
                             % (selector,))
    if "name" in selector:
        return instance.get("name") == selector["name"]
    if "hostname" in selector:
        return instance.get("hostname") == selector["hostname"]
    if "fleet" in selector and "instance" in selector:
        return (_short_name(selector["fleet"]) == instance.get("fleet")
                and instance.get("num") == selector["instance"])
    raise PlacementError("an instances selector needs name, hostname, or fleet and instance; "
                         "got %r" % (selector,))


def _listed(value, allowed):
    return value is not None and str(value).lower() in [str(a).lower() for a in allowed]


def _profile_reason(instance, config):
    """Why the run's profile (instances, backends, regions, prices...) rules the instance out."""
    status = instance.get("status")
    # dstack schedules only available instances, i.e. idle or busy
    # (docs/reference/dstack-runtime.md#instance-statuses); unreachable hosts would fail the
    # job at once.
    if status in InstanceStatus.unavailable_statuses():
        return "status %s" % status
    selectors = config.get("instances")
    if selectors and not any(_selected(sel, instance) for sel in selectors):
        return "not selected by instances"
    backends = config.get("backends")
    backend = instance.get("backend")
    if backends is not None:
        wanted = set(str(b).lower() for b in backends)
        backend_name = str(backend).lower()
        if backend_name in SSH_BACKEND_NAMES:
            ok = bool(wanted & SSH_BACKEND_NAMES)
        else:
            ok = backend_name in wanted
        if not ok:
            return "backend %s not in [%s]" % (backend, ", ".join(backends))
    regions = config.get("regions")
    if regions is not None and not _listed(instance.get("region"), regions):
        return "region %s not in [%s]" % (instance.get("region"), ", ".join(regions))
    zones = config.get("availability_zones")
    if zones is not None and not _listed(instance.get("zone"), zones):
        return "zone %s not in [%s]" % (instance.get("zone") or "none", ", ".join(zones))
    types = config.get("instance_types")
    if types is not None and not _listed(instance.get("instance_type"), types):
        return "instance type %s not in [%s]" % (instance.get("instance_type"), ", ".join(types))
    max_price = config.get("max_price")
    price = _price(instance)
    if max_price is not None and price > max_price:
        return "price $%s > max_price $%s" % (short_number(price, 4), short_number(max_price, 4))
    policy = config.get("spot_policy") or "on-demand"
    if policy not in SPOT_POLICIES:
        raise PlacementError("spot_policy must be one of %s, got %r"
                             % (", ".join(SPOT_POLICIES), policy))
    spot = bool(instance.get("spot"))
    if spot and policy == "on-demand":
        return "spot instance; spot_policy is on-demand"
    if not spot and policy == "spot":
        return "on-demand instance; spot_policy is spot"
    return None


def _device_key(device):
    return device.get("id") if device.get("id") is not None else device.get("index")


class _Host(object):
    """One candidate instance of a fleet with its measured resources and what is busy on it."""

    def __init__(self, instance, fact, busy):
        self.instance = instance
        self.name = instance["name"]
        self.fact = fact
        self.resources = host_capacity(fact, self.name)
        busy = busy or {}
        if not isinstance(busy, dict):
            raise PlacementError("busy[%s] must be a mapping with blocks and gpu_ids" % self.name)
        self.busy_blocks = whole_number(busy.get("blocks") or 0, "busy blocks of %s" % self.name)
        self.busy_ids = set(busy.get("gpu_ids") or [])
        self.total = self.resources["total_blocks"]
        self.free_devices = [
            d for d in self.resources["devices"] if _device_key(d) not in self.busy_ids
        ]

    def fit(self, resources, whole):
        """(allocation, None) when the host can take a job with ``resources``, else (None, why).

        A multi-node job takes the whole host, which must be entirely free
        (docs/reference/dstack-runtime.md#blocks); a single job takes the fewest blocks whose offer
        matches.
        """
        total = self.total
        if whole:
            if self.busy_blocks:
                return None, ("busy (%d of %d blocks in use); multi-node tasks need whole free "
                              "hosts" % (self.busy_blocks, total))
            if self.busy_ids:
                return None, ("busy (%d GPUs in use); multi-node tasks need whole free hosts"
                              % len(self.busy_ids))
            choices = [total]
        else:
            free = total - self.busy_blocks
            if free <= 0:
                return None, "busy (all %d blocks in use)" % total
            choices = range(1, free + 1)
        reasons = []
        for blocks in choices:
            offer = block_offer(self.resources, blocks, total)
            reason = matches(resources, offer)
            if reason is None and len(self.free_devices) < offer["gpu_count"]:
                reason = "only %d of %d GPUs free" % (
                    len(self.free_devices), self.resources["gpu_count"])
            if reason is None:
                return self._allocation(offer, blocks), None
            reasons.append(reason)
        # The reason for the most blocks says what even the largest share lacks, unless it
        # overshoots a maximum; then the smallest share says it better.
        reason = reasons[-1]
        if " > " in reason:
            reason = reasons[0]
        return None, reason

    def take(self, allocation):
        """Count ``allocation`` (a job placed here) as busy, for the next job of the run."""
        self.busy_blocks += allocation["blocks"]
        self.busy_ids.update(_device_key(d) for d in allocation["gpus"])
        self.free_devices = [
            d for d in self.resources["devices"] if _device_key(d) not in self.busy_ids
        ]

    def _allocation(self, offer, blocks):
        instance = self.instance
        return {
            "host": self.name,
            "hostname": instance.get("hostname"),
            "fleet": instance.get("fleet"),
            "instance_num": instance.get("num"),
            "backend": instance.get("backend"),
            "region": instance.get("region"),
            "instance_type": instance.get("instance_type"),
            "price": _price(instance),
            "spot": bool(instance.get("spot")),
            "internal_ip": instance.get("internal_ip") or self.fact.get("internal_ip"),
            "whole_host": blocks == self.total,
            "blocks": blocks,
            "total_blocks": self.total,
            "cpus": offer["cpus"],
            "memory_mib": offer["memory_mib"],
            "disk_mib": offer["disk_mib"],
            "arch": offer["arch"],
            "gpu_vendor": offer["gpu_vendor"],
            "gpu_name": offer["gpu_name"],
            "gpu_memory_mib": offer["gpu_memory_mib"],
            "gpus": [dict(d) for d in self.free_devices[: offer["gpu_count"]]],
        }


# ---------------------------------------------------------------------------------------------
# Assignment
# ---------------------------------------------------------------------------------------------


def _assign(candidates, job_count):
    """Give every job its own host: {job: host index} or None.

    ``candidates[j]`` lists, in host order, the hosts job ``j`` fits. Jobs take hosts in rank
    order, each the first free host it fits (the cheapest: hosts come sorted by price). Only
    when no such host is left is an earlier job moved to another host it fits (an augmenting
    path), so a heterogeneous run is placed whenever an assignment exists.
    """
    owner = {}
    for job in range(job_count):
        free = [h for h in candidates[job] if h not in owner]
        if free:
            owner[free[0]] = job
            continue
        if not _augment(job, candidates, owner):
            return None
    return dict((job, host) for host, job in owner.items())


def _augment(root, candidates, owner):
    came_from = {root: None}  # job -> the host through which the search reached it
    reached_by = {}  # host -> the job that reached it
    queue = deque([root])
    while queue:
        job = queue.popleft()
        for host in candidates[job]:
            if host in reached_by:
                continue
            reached_by[host] = job
            if host not in owner:
                while host is not None:
                    taker = reached_by[host]
                    owner[host] = taker
                    host = came_from[taker]
                return True
            holder = owner[host]
            if holder not in came_from:
                came_from[holder] = host
                queue.append(holder)
    return False


# ---------------------------------------------------------------------------------------------
# Placement
# ---------------------------------------------------------------------------------------------


def _effective_jobs(config):
    """The jobs with their resources resolved as the dstack server resolves them."""
    default_image = uses_default_image(config)
    return [dict(job, resources=resolve_arch(job["resources"], default_image))
            for job in job_requirements(config)]


def _job_key(job):
    return job["group"]


def _host_reason(reasons_by_group):
    distinct = []
    for group, reason in reasons_by_group:
        if reason not in [r for _g, r in distinct]:
            distinct.append((group, reason))
    if len(distinct) == 1 or distinct[0][0] is None:
        return distinct[0][1]
    return ", ".join("%s [group %s]" % (reason, group) for group, reason in distinct)


def _try_fleet(fleet, jobs, config, facts, busy):
    """(plan, None) when ``fleet`` holds every job, else (None, (summary, host reasons))."""
    name = fleet["name"]
    placement = fleet.get("placement") or "any"
    # A service's replicas are independent jobs (services.replicas): any fleet, a share of a
    # host each, several on one host when it holds them.
    service = isinstance(config.get("service"), dict)
    multinode = len(jobs) >= 2 and not service
    # Multi-node runs only go to cluster fleets (docs/reference/dstack-runtime.md#placement).
    if multinode and placement != "cluster":
        return None, ("placement is any; multi-node tasks need placement: cluster", [])
    instances = fleet.get("instances") or []
    if not isinstance(instances, list):
        raise PlacementError(
            "fleet %s: instances must be a list, got %s" % (name, type_name(instances)))
    records = []
    for position, instance in enumerate(instances):
        instance = require_mapping(instance, "fleet %s: instances[%d]" % (name, position))
        if not instance.get("name"):
            raise PlacementError("fleet %s: instances[%d] has no name" % (name, position))
        num = instance.get("num")
        records.append(dict(instance, num=position if num is None else num,
                            fleet=instance.get("fleet") or name))
    if not records:
        return None, ("no instances", [])
    # Cheapest first, then by instance number: the first eligible host becomes rank 0
    # (docs/reference/dstack-runtime.md#placement).
    records.sort(key=lambda r: (_price(r), r["num"]))

    rejected = []
    hosts = []
    for record in records:
        reason = _profile_reason(record, config)
        fact = facts.get(record["name"]) if reason is None else None
        if reason is None and not fact:
            reason = NO_FACTS
        if reason is None:
            health = fact.get("health") or "healthy"
            if health in EXCLUDED_HEALTH:
                reason = "health %s" % health
                if fact.get("health_message"):
                    reason += " (%s)" % fact["health_message"]
        if reason is not None:
            rejected.append((record["name"], reason))
            continue
        try:
            hosts.append(_Host(record, fact, busy.get(record["name"])))
        except PlacementError as exc:
            rejected.append((record["name"], str(exc)))

    groups = []
    for job in jobs:
        if _job_key(job) not in [g for g, _r in groups]:
            groups.append((_job_key(job), job["resources"]))
    fits = dict((key, []) for key, _r in groups)
    matching = []
    for index, host in enumerate(hosts):
        reasons = []
        for key, resources in groups:
            allocation, reason = host.fit(resources, multinode)
            fits[key].append(allocation)
            if allocation is None:
                reasons.append((key, reason))
        if len(reasons) == len(groups):
            rejected.append((host.name, _host_reason(reasons)))
        else:
            matching.append(index)

    if service:
        plan_jobs = _pack(jobs, [hosts[index] for index in matching])
        if plan_jobs is not None:
            return {"fleet": name, "placement": placement, "jobs": plan_jobs}, None
    # The other jobs stay with the master's backend and region
    # (docs/reference/dstack-runtime.md#placement): try each backend/region
    # in the order of its cheapest matching host.
    zones = []
    for index in matching if not service else ():
        zone = (hosts[index].instance.get("backend"), hosts[index].instance.get("region"))
        if zone not in zones:
            zones.append(zone)
    for zone in zones:
        in_zone = [
            index for index in matching
            if (hosts[index].instance.get("backend"), hosts[index].instance.get("region")) == zone
        ]
        candidates = [
            [index for index in in_zone if fits[_job_key(job)][index] is not None]
            for job in jobs
        ]
        assignment = _assign(candidates, len(jobs))
        if assignment is not None:
            plan_jobs = []
            for num, job in enumerate(jobs):
                allocation = dict(fits[_job_key(job)][assignment[num]])
                entry = {"job_num": job["job_num"], "group": job["group"]}
                entry.update(allocation)
                entry["resources"] = job["resources"]
                plan_jobs.append(entry)
            return {"fleet": name, "placement": placement, "jobs": plan_jobs}, None

    summary = "%d of %d host%s match" % (
        len(matching), len(records), "" if len(records) == 1 else "s")
    if service and matching:
        summary += ", but they do not hold all %d replicas" % len(jobs)
    elif len(matching) >= len(jobs):
        if len(zones) > 1:
            summary += ", but no single backend and region has enough of them"
        else:
            summary += ", but not one for each job of every group"
    return None, (summary, rejected)


def _pack(jobs, hosts):
    """A service's replicas, each on the cheapest matching host that still holds it once the
    replicas before it are counted there, as dstack places each replica's job; None when one
    does not fit."""
    plan_jobs = []
    for job in jobs:
        for host in hosts:
            allocation, _reason = host.fit(job["resources"], False)
            if allocation is not None:
                host.take(allocation)
                entry = {"job_num": job["job_num"], "group": job["group"]}
                entry.update(allocation)
                entry["resources"] = job["resources"]
                plan_jobs.append(entry)
                break
        else:
            return None
    return plan_jobs


def _fleet_text(name, summary, rejected):
    text = "fleet %s: %s" % (name, summary)
    if rejected:
        shown = ["%s: %s" % item for item in rejected[:MAX_HOST_REASONS]]
        if len(rejected) > MAX_HOST_REASONS:
            shown.append("and %d more" % (len(rejected) - MAX_HOST_REASONS))
        text += " (%s)" % "; ".join(shown)
    return text


def _needs(jobs):
    count = len(jobs)
    text = "needs %d node%s" % (count, "" if count == 1 else "s")
    groups = []
    for job in jobs:
        if job["group"] is None:
            continue
        if groups and groups[-1][0] == job["group"]:
            groups[-1][1] += 1
        else:
            groups.append([job["group"], 1])
    if groups:
        text += " (%s)" % ", ".join("group %s: %d" % (g, n) for g, n in groups)
    return text


def place(config, fleets, facts, busy=None):
    """Pick the fleet and the host of every job of a task, or raise NoHostFits.

    ``config`` is the normalized task config, ``fleets`` the fleet records (each with its
    instance records), ``facts`` maps instance names to ``gpufleet_host`` facts and ``busy``
    maps instance names to {"blocks", "gpu_ids"} already in use. Returns {"fleet", "placement",
    "jobs"}, the jobs in rank order; job 0 is the master. Same input, same plan.
    """
    config = require_mapping(config, "the task config")
    jobs = _effective_jobs(config)
    if fleets is None:
        fleets = []
    if not isinstance(fleets, list):
        raise PlacementError("fleets must be a list of fleet records, got %s" % type_name(fleets))
    facts = require_mapping(facts if facts is not None else {}, "facts")
    busy = require_mapping(busy if busy is not None else {}, "busy")
    for index, fleet in enumerate(fleets):
        require_mapping(fleet, "fleets[%d]" % index)
        if not fleet.get("name"):
            raise PlacementError("fleets[%d] has no name" % index)

    wanted = config.get("fleets")
    notes = []
    gateways = set(fleet["name"] for fleet in fleets if fleet.get("gateway"))
    if wanted:
        names = [_short_name(ref) for ref in wanted]
        candidates = [fleet for fleet in fleets if fleet["name"] in names
                      and fleet["name"] not in gateways]
        known = set(fleet["name"] for fleet in fleets)
        for ref in wanted:
            if _short_name(ref) in gateways:
                notes.append("fleet %s: it is a gateway's host, which runs no jobs"
                             % shorten(ref))
            elif _short_name(ref) not in known:
                notes.append("fleet %s: no such fleet" % shorten(ref))
    else:   # a gateway's host runs no jobs (spec.gateway)
        candidates = [fleet for fleet in fleets if fleet["name"] not in gateways]

    fleet_texts = []
    reasons = list(notes)
    for fleet in candidates:
        plan, failure = _try_fleet(fleet, jobs, config, facts, busy)
        if plan is not None:
            return plan
        summary, rejected = failure
        fleet_texts.append(_fleet_text(fleet["name"], summary, rejected))
        reasons.append("fleet %s: %s" % (fleet["name"], summary))
        reasons.extend("%s: %s" % item for item in rejected)

    if not [fleet for fleet in fleets if fleet["name"] not in gateways]:
        parts = ["no fleets (apply a fleet first)"]
        reasons = ["no fleets"]
    else:
        parts = notes + fleet_texts
        if len(parts) > MAX_FLEET_REASONS:
            parts = parts[:MAX_FLEET_REASONS] + [
                "and %d more fleets" % (len(parts) - MAX_FLEET_REASONS)]
        if notes:
            parts.append("known fleets: %s" % ", ".join(f["name"] for f in fleets))
    name = config.get("name")
    message = "no capacity for task%s: %s; %s. To run it, %s." % (
        " " + name if name else "", _needs(jobs), "; ".join(parts), ADVICE)
    raise NoHostFits(message, reasons)
