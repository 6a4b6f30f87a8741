# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Backend fleets in the clouds: from a normalized config to live EC2 or Compute Engine
instances.

apply.py hands here the fleets whose backend (backends/base.py's ``select``) is a cloud one.
The instances are planned as local nodes are (plan.py: the lowest free numbers up to
``nodes.target``, stopped ones started, only those above ``nodes.max`` removed); new ones are
launched from the fleet's offers, cheapest first (offers/select.py). A cluster stays in the
zone, instance type and placement group of the instances it has. When no offer has capacity,
the fleet's ``retry`` policy decides: with ``no-capacity`` among its events, the launch is
tried again after growing waits (``retry_delays`` in the backend settings) until
``retry.duration`` runs out.
"""

from __future__ import annotations

import time
from typing import Any, Callable, Iterable

from ..backends import base
from ..backends.errors import BackendError, NoCapacity
from ..core.errors import GpufleetError
from ..offers import catalog
from ..offers.select import OfferError, disk_gb, no_offers_message, select
from . import state
from .creator import creator_name
from ..spec.naming import instance_name
from .plan import has_changes, plan_backend

DEFAULT_RETRY_DELAYS = (60, 120, 300, 600, 1800)


class CloudError(GpufleetError):
    """The fleet cannot be provisioned as written or right now; the message says why."""


def _backend(config, name):
    """The cloud backend that provisions the fleet: backends.base.select's choice, which for
    a fleet handed here is one of base.CLOUD_BACKENDS."""
    try:
        backend = base.select(config, name)
    except BackendError as exc:
        raise CloudError(str(exc)) from exc
    if backend not in base.CLOUD_BACKENDS:
        raise CloudError("fleet %s: its backends (%s) make it a %s fleet, not a cloud one"
                         % (name, ", ".join(config.get("backends") or ()), backend))
    return backend


def _settings(settings, backend):
    try:
        return base.settings_section(settings, backend)
    except BackendError as exc:
        raise CloudError(str(exc)) from exc


def regions(config: dict[str, Any], settings: dict[str, Any] | None, backend: str = "aws",
            catalog_dir: str | None = None) -> list[str]:
    """The regions to look for the fleet's instances in and to launch in, lower-case."""
    data, _source = catalog.load(backend, catalog_dir)
    known = sorted(set(o["region"] for e in data["instance_types"] for o in e["offers"]))
    allowed = _settings(settings, backend).get("regions")
    wanted = config.get("regions")
    chosen = [r.lower() for r in (wanted or allowed or known)]
    if wanted and allowed:
        chosen = [r for r in chosen if r in [a.lower() for a in allowed]]
        if not chosen:
            raise CloudError("regions %s are not among the %s backend's regions (%s)"
                             % (", ".join(wanted), backend, ", ".join(allowed)))
    return chosen


def offer_regions(config: dict[str, Any], settings: dict[str, Any] | None, backends: Iterable[str],
                  catalog_dir: str | None = None) -> tuple[dict[str, list[str]], dict[str, str]]:
    """``({backend: regions}, {backend: why none})``: the regions where each of the cloud
    ``backends`` takes offers for ``config``, as a fleet applied from it launches in them
    (``regions``: the config's, within the backend settings' ``regions``, else the catalog's).
    A backend whose settings and config share no region has none, and says why."""
    found = {}
    errors = {}
    for backend in backends:
        if backend not in base.CLOUD_BACKENDS:
            continue
        try:
            found[backend] = regions(config, settings, backend, catalog_dir)
        except CloudError as exc:
            found[backend] = []
            errors[backend] = str(exc)
    return found, errors


def _client(settings, backend, client):
    if client is not None:
        return client
    try:
        return base.client(backend, settings)
    except BackendError as exc:
        raise CloudError(str(exc)) from exc


def describe(config: dict[str, Any], name: str, key_file: str, settings: dict[str, Any] | None,
             client: Any = None, catalog_dir: str | None = None) -> list[dict[str, Any]]:
    """The fleet's instance records as the cloud has them."""
    backend = _backend(config, name)
    client = _client(settings, backend, client)
    try:
        placed = client.fleet_instances(name, regions(config, settings, backend, catalog_dir))
    except BackendError as exc:
        raise CloudError(str(exc)) from exc
    return client.records(placed, name, key_file)


def _offers(config, name, backend, catalog_dir, alive, region_list, reservation=None):
    data, _source = catalog.load(backend, catalog_dir)
    try:
        found = select(config, {backend: data}, reservation, {backend: region_list})
    except OfferError as exc:
        raise CloudError("fleet %s: %s" % (name, exc)) from exc
    offers = found["offers"]
    if config.get("placement") == "cluster" and alive:
        # New nodes of a cluster join the instances it has: same zone, same instance type.
        first = alive[0]
        offers = [dict(o, zones=[first["zone"]]) for o in offers
                  if o["region"] == first["region"] and first["zone"] in o["zones"]
                  and o["instance_type"] == first["instance_type"]]
        if not offers:
            raise CloudError(
                "fleet %s: no offer matches its running cluster (%s in %s); the file's "
                "resources or profile no longer allow it, so new nodes cannot join: delete "
                "the fleet to move it" % (name, first["instance_type"], first["zone"]))
    if not offers:
        raise CloudError(no_offers_message("fleet " + name, found["rejected"]))
    return offers


def _retry_delays(config, settings, backend):
    retry = config.get("retry") or {}
    if "no-capacity" not in (retry.get("on_events") or ()):
        return []
    budget = retry.get("duration") or 0
    delays = list(_settings(settings, backend).get("retry_delays") or DEFAULT_RETRY_DELAYS)
    chosen = []
    spent = 0
    index = 0
    while True:
        delay = delays[min(index, len(delays) - 1)]
        if spent + delay > budget:
            return chosen
        chosen.append(delay)
        spent += delay
        index += 1


def _launch(client, config, name, nums, offers, public_key, disk, delays, sleep):
    attempt = 0
    while True:
        try:
            return client.launch_group(name, nums, offers, config, public_key, disk,
                                       all_at_once=config.get("placement") == "cluster")
        except NoCapacity as exc:
            if attempt >= len(delays):
                raise CloudError("%s%s" % (exc, "; gave up after %d retries (retry.duration)"
                                           % attempt if attempt else
                                           "; the fleet's retry policy does not retry "
                                           "no-capacity, so nothing was retried")) from exc
            sleep(delays[attempt])
            attempt += 1
        except BackendError as exc:
            raise CloudError(str(exc)) from exc


def apply(
        config: dict[str, Any], name: str, root: str, settings: dict[str, Any] | None,
        check_mode: bool = False, client: Any = None, catalog_dir: str | None = None,
        sleep: Callable[[float], Any] = time.sleep,
) -> tuple[list[dict[str, Any]], dict[str, Any], bool, list[dict[str, Any]]]:
    """Converge a cloud fleet. Returns ``(instances, plan, changed, offers)``: ``offers`` are
    those new instances were (in check mode: would be) launched from, cheapest first."""
    backend = _backend(config, name)
    client = _client(settings, backend, client)
    region_list = regions(config, settings, backend, catalog_dir)
    try:
        placed = client.fleet_instances(name, region_list)
    except BackendError as exc:
        raise CloudError(str(exc)) from exc
    placement = config.get("placement") or "any"
    views = [(item, client.view(item)) for item in placed]
    current = set(view["placement"] for _item, view in views)
    if current and current != set([placement]):
        raise CloudError(
            "fleet %s exists with placement %s; the file says %s. Changing placement "
            "re-creates the fleet: delete it first (gpufleet delete -f FILE, or "
            "playbooks/delete.yml) and apply again" % (name, ", ".join(sorted(current)),
                                                       placement))
    by_num = dict((view["num"], (item, view)) for item, view in views
                  if view["num"] is not None)
    existing = [{"num": num, "state": view["state"]} for num, (_item, view) in by_num.items()]
    nums = plan_backend(config["nodes"], existing)
    plan = {
        "create": [instance_name(name, n) for n in nums["create"]],
        "start": [instance_name(name, n) for n in nums["start"]],
        "keep": [instance_name(name, n) for n in nums["keep"] if n not in nums["start"]],
        "remove": [instance_name(name, n) for n in nums["remove"]],
        "release": [],
    }
    changed = has_changes(plan)
    key_file = state.key_path(root, name)
    offers = []
    if nums["create"]:
        alive = [by_num[n][1] for n in sorted(by_num) if n in nums["keep"]]
        reserved = None
        if config.get("reservation"):
            try:
                reserved = client.reservation(config["reservation"], region_list)
            except BackendError as exc:
                raise CloudError("fleet %s: %s" % (name, exc)) from exc
            config = dict(config, capacity_block=reserved.get("capacity_block"))
        offers = _offers(config, name, backend, catalog_dir, alive, region_list, reserved)
    if changed and not check_mode:
        try:
            if nums["remove"]:
                client.terminate([by_num[n][0] for n in nums["remove"]])
            if nums["start"]:
                client.start([by_num[n][0] for n in nums["start"]])
        except BackendError as exc:
            raise CloudError(str(exc)) from exc
        if nums["create"]:
            key_file, public_key, _made = state.ensure_key(root, name)
            disk = disk_gb(config, backend)
            _launch(client, dict(config, creator=creator_name()), name, nums["create"], offers,
                    public_key, disk, _retry_delays(config, settings, backend), sleep)
        try:
            placed = client.fleet_instances(name, region_list)
            placed = client.wait_running([p for p in placed
                                          if client.view(p)["state"] == "running"])
            if nums["create"] and _copy_members(client, name, placed):
                placed = client.wait_running(
                    [p for p in client.fleet_instances(name, region_list)
                     if client.view(p)["state"] == "running"])
        except BackendError as exc:
            raise CloudError(str(exc)) from exc
    instances = client.records(placed, name, key_file)
    if check_mode and nums["create"]:
        first = offers[0]
        instances += [{
            "name": instance_name(name, num), "num": num, "fleet": name, "backend": backend,
            "region": first["region"], "zone": first["zones"][0],
            "instance_type": first["instance_type"], "instance_id": None,
            "price": first["price"], "spot": first["spot"], "status": "pending",
            "error": None, "created": None, "hostname": None, "port": 22,
            "user": client.settings.get("ssh_user") or "ubuntu", "identity_file": key_file,
            "proxy_jump": None,
            "internal_ip": None, "network": None, "blocks": config.get("blocks", 1),
            "placement": placement,
            "made_for_run": (config.get("made_for") or {}).get("run"),
            "idle_duration": (config.get("made_for") or {}).get("idle_duration"),
        } for num in nums["create"]]
    return instances, plan, changed, offers


def _copy_members(client, name, placed):
    """Give the fleet's new instances the members its other instances publish
    (fleets/access.py), so that a member reaches every instance, new ones included. Returns
    whether any instance was changed."""
    changed = False
    for user, mark in sorted(client.fleet_members(name, placed).items()):
        changed = client.set_member(name, placed, user, mark) or changed
    return changed


def discover(
    settings: dict[str, Any] | None, root: str, catalog_dir: str | None = None,
) -> list[tuple[str, str, str, bool, list[dict[str, Any]]]]:
    """Every cloud fleet the configured backends hold, from tags and labels alone (no files):
    ``[(backend, fleet name, placement, gateway, instance records)]`` (``gateway``: whether it
    is a gateway's host, spec.gateway.GATEWAY_TAG). Only backends with a section in the
    settings are asked."""
    found = []
    for backend in base.CLOUD_BACKENDS:
        if backend not in (settings or {}):
            continue
        try:
            client = base.client(backend, settings)
            held = client.all_fleet_instances(regions({}, settings, backend, catalog_dir))
        except BackendError as exc:
            raise CloudError(str(exc)) from exc
        for name in sorted(held):
            view = client.view(held[name][0])
            found.append((backend, name, view["placement"], bool(view.get("gateway")),
                          client.records(held[name], name, state.key_path(root, name))))
    return found


def remove(config: dict[str, Any], name: str, nums: Iterable[int], settings: dict[str, Any] | None,
           client: Any = None, catalog_dir: str | None = None) -> int:
    """Terminate the fleet's instances numbered ``nums``."""
    backend = _backend(config, name)
    client = _client(settings, backend, client)
    try:
        placed = client.fleet_instances(name, regions(config, settings, backend, catalog_dir))
        chosen = [item for item in placed if client.view(item)["num"] in nums]
        if chosen:
            client.terminate(chosen)
    except BackendError as exc:
        raise CloudError(str(exc)) from exc
    return len(chosen)


def delete(config: dict[str, Any], name: str, settings: dict[str, Any] | None,
           check_mode: bool = False, client: Any = None,
           catalog_dir: str | None = None) -> tuple[dict[str, Any], bool]:
    """Remove the fleet's instances and what it created. Returns (removed, changed)."""
    backend = _backend(config, name)
    client = _client(settings, backend, client)
    try:
        removed = client.delete_fleet(name, regions(config, settings, backend, catalog_dir),
                                      check_mode=check_mode)
    except BackendError as exc:
        raise CloudError(str(exc)) from exc
    return removed, any(removed.values())
