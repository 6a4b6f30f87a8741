# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""What the cloud backends (aws.py, gcp.py) share: their settings over the defaults, the
launch loop (offers cheapest first, each zone in turn, until every instance is launched), the
NoCapacity it ends with, and the instance record made of what a backend read off an instance.
"""

from __future__ import annotations

from typing import Any, Callable

from ..spec.naming import instance_name
from .made_for import read as read_made_for
from .errors import CapacityError, NoCapacity


def launch_in_turn(fleet: str, nums: list[int], offers: list[dict[str, Any]],
                   launch: Callable[..., list[dict[str, Any]]],
                   number: Callable[[dict[str, Any]], int | None]) -> list[dict[str, Any]]:
    """Launch instances numbered ``nums`` from the first offers and zones that have capacity.

    ``launch(missing, offer, zone)`` makes one call for the numbers still missing and returns
    the instances it made (raising CapacityError when the zone has none); ``number(item)`` is
    an instance's number. Raises NoCapacity, naming every attempt, when numbers remain.
    """
    missing = list(nums)
    launched: list[Any] = []
    attempts = []
    for offer in offers:
        for zone in offer["zones"]:
            if not missing:
                return launched
            try:
                made = launch(list(missing), offer, zone)
            except CapacityError as exc:
                attempts.append({"instance_type": offer["instance_type"],
                                 "region": offer["region"], "zone": zone,
                                 "spot": offer["spot"], "error": exc.code})
                continue
            for item in made:
                num = number(item)
                if num in missing:
                    missing.remove(num)
                launched.append(item)
    if missing:
        raise no_capacity(fleet, len(missing), attempts)
    return launched


def merged_settings(backend: str, defaults: dict[str, Any], settings: dict[str, Any] | None,
                    error: type[Exception]) -> dict[str, Any]:
    """A backend's settings over its defaults; ``error`` (the backend's error class) names an
    unknown key with the known ones. None leaves a default as it is."""
    merged = dict(defaults)
    for key, value in (settings or {}).items():
        if key not in defaults:
            raise error("%s settings: unknown key %s (known: %s)"
                        % (backend, key, ", ".join(sorted(defaults))))
        if value is not None:
            merged[key] = value
    return merged


def instance_record(fleet, num, backend, found, key_file, user, public_ips=True):
    """The instance record (fleets.records) of one cloud instance. ``found`` has what the
    backend read off it: region, zone, instance_type, instance_id, spot, status, created,
    public and private addresses, and the price and blocks text it stored at launch."""
    try:
        price = float(found.get("price"))
    except (TypeError, ValueError):
        price = None
    try:
        blocks = int(found.get("blocks") or 1)
    except ValueError:
        blocks = 1
    public, private = found.get("public"), found.get("private")
    return {
        "name": instance_name(fleet, num), "num": num, "fleet": fleet, "backend": backend,
        "region": found["region"], "zone": found.get("zone"),
        "instance_type": found.get("instance_type"), "instance_id": found.get("instance_id"),
        "price": price, "spot": bool(found.get("spot")), "status": found["status"],
        "error": found.get("error"), "created": found.get("created"),
        "hostname": public if public_ips and public else private, "port": 22, "user": user,
        "identity_file": key_file, "proxy_jump": None, "internal_ip": private,
        "network": None, "blocks": blocks, "placement": found.get("placement") or "any",
        **read_made_for(found.get("made_for_run"), found.get("idle_duration")),
        **_who(found)
    }


def _who(found):
    """``creator`` and ``members`` ({user: mark}) of an instance, as far as it says them."""
    who = {}
    if found.get("creator"):
        who["creator"] = found["creator"]
    if found.get("members"):
        who["members"] = dict(found["members"])
    return who


def no_capacity(fleet: str, missing: int, attempts: list[dict[str, Any]]) -> NoCapacity:
    """The NoCapacity of a launch that left ``missing`` instances, naming the attempts."""
    return NoCapacity(
        "fleet %s: no capacity for %d instance(s) in %d offer(s) tried: %s"
        % (fleet, missing, len(attempts), "; ".join(
            "%s %s%s in %s (%s)" % (a["instance_type"], "spot " if a["spot"] else "",
                                    a["region"], a["zone"], a["error"])
            for a in attempts[:10]) or "none matched"), attempts)
