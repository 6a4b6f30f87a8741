# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The cloud offers a fleet or task config takes, cheapest first.

Pure Python (no Ansible imports). ``config`` is a normalized fleet or task config (the config
model's output); ``catalogs`` maps backend names to catalogs (catalog.py). An offer is one
instance type in one region, on-demand or spot::

    {"backend": "aws", "region": "us-east-1", "zones": ["us-east-1a", ...],
     "instance_type": "p5.48xlarge", "spot": False, "price": 55.04, "reservation": None,
     "resources": {"cpus": 192, "memory": {"mib": 2097152}, "disk": {"available_mib": 102400},
                   "gpu": {"vendor": "nvidia", "name": "H100", "memory_mib": 81920,
                           "count": 8}, "arch": "x86_64"}}

``resources`` has the shape of a measured host's ``gpufleet_host`` fact, so the fleet table and
the matcher read offers and hosts alike. The rules are dstack's: resources by the spec grammar
(match.py), ``backends``, ``regions`` and ``instance_types`` compared without case,
``availability_zones`` narrowing each offer's zones, ``spot_policy`` (on-demand, spot, or auto
for both), ``max_price`` (USD per hour, inclusive) and ``reservation`` (reserved capacity is
never spot; a known reservation also pins the instance type and zone).
"""

from __future__ import annotations

from typing import Any

from ..core.errors import GpufleetError
from .match import host_offer, matches, resolve_arch, uses_default_image

# The boot disk an instance gets when the spec asks for none (dstack: 100 GB), and the largest
# boot disk each backend makes (EBS gp3: 16 TiB; GCP balanced persistent disk: 64 TiB).
DEFAULT_DISK_GB = 100
MAX_DISK_GB = {"aws": 16384, "gcp": 65536}
ARCH_FACTS = {"x86": "x86_64", "arm": "aarch64"}


class OfferError(GpufleetError):
    """A config whose offers cannot be looked up (say, backends without a catalog)."""


def _lower(values):
    return None if values is None else set(str(v).lower() for v in values)


def disk_gb(config: dict[str, Any], backend: str) -> int | float | None:
    """The boot disk size an offer gets: the spec's minimum, else 100 GB; None when the spec's
    range allows no size the backend makes."""
    disk = (config.get("resources") or {}).get("disk") or {}
    size = disk.get("size") or {}
    low = size.get("min")
    high = size.get("max")
    wanted = DEFAULT_DISK_GB if low is None else low
    if high is not None and wanted > high:
        wanted = high
    limit = MAX_DISK_GB.get(backend)
    if limit is not None and wanted > limit:
        return None
    return wanted


def offer_resources(entry: dict[str, Any], disk: int | float) -> dict[str, Any]:
    """An instance type's resources as a ``gpufleet_host``-shaped fact with ``disk`` GB."""
    gpu = entry.get("gpu")
    return {
        "cpus": entry["cpus"],
        "memory": {"mib": entry["memory_mib"]},
        "disk": {"available_mib": int(round(disk * 1024))},
        "gpu": dict(gpu) if gpu else {"vendor": None, "name": None, "memory_mib": 0,
                                      "count": 0},
        "arch": ARCH_FACTS[entry["arch"]],
    }


def _match_view(resources):
    fact = dict(resources, blocks={"total": 1})
    return host_offer(fact, 1, 1)


def backends_for(config: dict[str, Any], catalogs: dict[str, Any]) -> list[str]:
    """The backends whose catalogs the config's ``backends`` allows (all when unset)."""
    wanted = config.get("backends")
    available = sorted(catalogs)
    if wanted is None:
        return available
    chosen = [b for b in available if b in _lower(wanted)]
    if not chosen:
        raise OfferError(
            "backends %s have no offer catalog (catalogs: %s); offers are listed for cloud "
            "backends only" % (", ".join(wanted), ", ".join(available) or "none"))
    return chosen


def _spot_choices(policy, reserved):
    if reserved:
        return (False,)
    return {"on-demand": (False,), "spot": (True,), "auto": (False, True)}[policy or "on-demand"]


def _profile_reason(config, backend, entry, offer, reservation, regions_by_backend=None):
    regions = _lower(config.get("regions"))
    if regions is not None and offer["region"].lower() not in regions:
        return "region"
    allowed = _lower((regions_by_backend or {}).get(backend))
    if allowed is not None and offer["region"].lower() not in allowed:
        return "region"
    types = _lower(config.get("instance_types"))
    if types is not None and entry["name"].lower() not in types:
        return "instance_types"
    if reservation is not None:
        if reservation.get("backend", backend) != backend:
            return "reservation"
        if reservation.get("instance_type") not in (None, entry["name"]):
            return "reservation"
        if reservation.get("region") not in (None, offer["region"]):
            return "reservation"
    return None


def _zones(config, offer, reservation):
    zones = list(offer["zones"])
    wanted = _lower(config.get("availability_zones"))
    if wanted is not None:
        zones = [z for z in zones if z.lower() in wanted]
    if reservation is not None and reservation.get("zone"):
        zones = [z for z in zones if z == reservation["zone"]]
    return zones


def select(config, catalogs, reservation=None, regions=None):
    """The offers ``config`` takes from ``catalogs``, cheapest first, and why others were not.

    ``reservation`` (optional) is what the backend knows of ``config["reservation"]``:
    ``{"backend", "instance_type", "region", "zone"}``, any of them unknown (None).
    ``regions`` (optional): ``{backend: regions}``, the only regions of a backend where offers
    are taken (fleets.cloud.offer_regions: the backend settings' ``regions``). Returns
    ``{"offers": [...], "rejected": {reason: count}}``; the reasons are ``resources``,
    ``region``, ``availability_zones``, ``instance_types``, ``spot_policy``, ``max_price``,
    ``disk`` and ``reservation``, counted once per instance type and region.
    """
    resources = config.get("resources")
    if config.get("type") in ("task", "dev-environment", "service"):
        resources = resolve_arch(resources, uses_default_image(config))
    max_price = config.get("max_price")
    reserved = bool(config.get("reservation"))
    if reserved and reservation is None:
        reservation = {}
    elif not reserved:
        reservation = None
    spots = _spot_choices(config.get("spot_policy"), reserved)
    offers = []
    rejected = {}

    def reject(reason):
        rejected[reason] = rejected.get(reason, 0) + 1

    for backend in backends_for(config, catalogs):
        disk = disk_gb(config, backend)
        for entry in catalogs[backend]["instance_types"]:
            if disk is None:
                reject("disk")
                continue
            shaped = offer_resources(entry, disk)
            if resources and matches(resources, _match_view(shaped)) is not None:
                reject("resources")
                continue
            for place in entry["offers"]:
                reason = _profile_reason(config, backend, entry, place, reservation, regions)
                if reason:
                    reject(reason)
                    continue
                zones = _zones(config, place, reservation)
                if not zones:
                    reject("reservation" if reservation and reservation.get("zone")
                           else "availability_zones")
                    continue
                taken = 0
                spot_offered = place["spot_price"] is not None
                for spot in spots:
                    if spot and not spot_offered:
                        continue
                    price = place["spot_price"] if spot else place["price"]
                    if max_price is not None and price > max_price:
                        continue
                    taken += 1
                    offers.append({
                        "backend": backend,
                        "region": place["region"],
                        "zones": zones,
                        "instance_type": entry["name"],
                        "spot": spot,
                        "price": price,
                        "reservation": config.get("reservation"),
                        "resources": shaped,
                    })
                if not taken:
                    only_spot = spots == (True,)
                    reject("spot_policy" if only_spot and not spot_offered else "max_price")
    offers.sort(key=lambda o: (o["price"], o["backend"], o["region"], o["instance_type"],
                               o["spot"]))
    return {"offers": offers, "rejected": rejected}


REASON_TEXT = {
    "resources": "do not have the resources",
    "region": "are in other regions",
    "availability_zones": "are not in the availability_zones",
    "instance_types": "are not in instance_types",
    "spot_policy": "are not offered as spot",
    "max_price": "cost more than max_price",
    "disk": "cannot have a boot disk of the size asked for",
    "reservation": "do not fit the reservation",
}


def no_offers_message(name: str, rejected: dict[str, int]) -> str:
    """Why a config has no offers: ``fleet x: no offers: 40 instance types and regions do not
    have the resources, 3 cost more than max_price``; what to relax comes last."""
    parts = ["%d %s" % (count, REASON_TEXT.get(reason, reason))
             for reason, count in sorted(rejected.items(), key=lambda item: -item[1])]
    detail = ("; of the catalog's instance types and regions, " + ", ".join(parts)) \
        if parts else ""
    return ("%s: no offers%s. Relax resources, regions, instance_types, spot_policy or "
            "max_price, or refresh the catalog (docs/offers.md)" % (name, detail))
