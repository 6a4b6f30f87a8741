# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Applying and deleting a fleet: from a normalized config to live instances.

SSH fleets are not provisioned: their instances come straight from ``ssh_config`` and the hosts
are checked and claimed by the play that follows. Backend fleets are converged here.
"""

from __future__ import annotations

import datetime
import os

from ..backends import local
from ..offers import catalog
from . import cloud, state
from ..spec.naming import fleet_name, instance_name
from .plan import has_changes, plan_backend
from .records import fleet_record, ssh_instances

AVAILABLE_BACKENDS = ("local",) + cloud.CLOUD_BACKENDS


class ApplyError(Exception):
    """The fleet cannot be applied as written; the message says why and what to do."""


def utcnow():
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def choose_backend(config, name):
    """The backend that provisions a backend fleet: ``local`` unless ``backends`` rules it out
    (local nodes cost nothing, so a list with ``local`` gets it, as the cheapest offer), else
    the first cloud backend listed that gpufleet provisions."""
    wanted = config.get("backends")
    if not wanted or "local" in wanted:
        return "local"
    for backend in wanted:
        if backend in AVAILABLE_BACKENDS:
            return backend
    raise ApplyError(
        "fleet %s: backends %s cannot provision nodes in this version of gpufleet (available: "
        "%s): add local to backends, or describe existing hosts with ssh_config"
        % (name, ", ".join(wanted), ", ".join(AVAILABLE_BACKENDS))
    )


def _set_instances(record, instances):
    """Give a fleet record its instances, by number, and the fleet the earliest creation time."""
    record["instances"] = sorted(instances, key=lambda i: i["num"])
    record["created"] = min((i["created"] for i in instances if i["created"]), default=None)
    return record


def _names(fleet, nums):
    return [instance_name(fleet, n) for n in nums]


def describe(config, path=None, docker=None, root=None, settings=None):
    """The fleet record as it is now, without changing anything."""
    name = fleet_name(config, path)
    record = fleet_record(config, name, path)
    root = state.state_dir(root)
    if config["fleet_type"] == "ssh":
        base_dir = os.path.dirname(os.path.abspath(path)) if path else None
        record["instances"] = ssh_instances(config, name, base_dir)
        return record
    if choose_backend(config, name) in cloud.CLOUD_BACKENDS:
        try:
            instances = cloud.describe(config, name, state.key_path(root, name), settings,
                                       catalog_dir=catalog.directory(root))
        except cloud.CloudError as exc:
            raise ApplyError(str(exc))
        _set_instances(record, instances)
        if not instances:
            record["status"] = "terminated"
        return record
    nodes = local.list_nodes(docker, name)
    _set_instances(record, local.instance_records(
        nodes, name, config.get("blocks", 1), state.key_path(root, name)
    ))
    if not record["instances"]:
        record["status"] = "terminated"
    return record


def discover(docker, root=None, settings=None):
    """Every fleet the backends hold, from their labels and tags alone (no files): fleet
    records. Cloud fleets are looked for in the backends that ``settings`` configure; without
    a Docker engine (``docker`` None) local fleets are not."""
    root = state.state_dir(root)
    found = []
    try:
        held = cloud.discover(settings, root, catalog.directory(root))
    except cloud.CloudError as exc:
        raise ApplyError(str(exc))
    for backend, name, placement, instances in held:
        config = {"fleet_type": "backend", "ssh_config": None, "backends": [backend],
                  "placement": placement}
        found.append(_set_instances(fleet_record(config, name), instances))
    if docker is None:
        return found
    nodes = local.list_nodes(docker)
    by_fleet = {}
    for node in nodes:
        name = node["labels"].get(local.FLEET_LABEL)
        if name:
            by_fleet.setdefault(name, []).append(node)
    for name in sorted(by_fleet):
        spec = local.spec_from_nodes(by_fleet[name]) or {}
        config = dict(spec, fleet_type="backend", ssh_config=None)
        found.append(_set_instances(fleet_record(config, name), local.instance_records(
            by_fleet[name], name, spec.get("blocks", 1), state.key_path(root, name)
        )))
    return found


def apply(config, path=None, docker=None, root=None, check_mode=False, image=None,
          build_image=None, settings=None):
    """Converge a fleet to its config. Returns ``(fleet record, changed)``.

    The record's ``plan`` says what was (in check mode: would be) done, by instance name:
    ``create``, ``start`` (stopped nodes), ``keep`` and ``remove``.
    ``build_image(check_mode)`` returns the node image to use (built when missing); ``settings``
    are the cloud backends' settings (``{"aws": {...}}``, see docs/backends.md).
    """
    root = state.state_dir(root)
    name = fleet_name(config, path)
    if path and not check_mode:
        state.remember_file(root, name, path)
    if config["fleet_type"] == "ssh":
        record = describe(config, path, docker, root)
        record["plan"] = None  # hosts are claimed by the play, which knows their markers
        return record, False
    backend = choose_backend(config, name)
    if backend in cloud.CLOUD_BACKENDS:
        try:
            instances, plan, changed, offers = cloud.apply(
                config, name, root, settings, check_mode=check_mode,
                catalog_dir=catalog.directory(root))
        except cloud.CloudError as exc:
            raise ApplyError(str(exc))
        record = _set_instances(fleet_record(config, name, path), instances)
        record["plan"] = plan
        # The cheapest offers, for the plan's offers table (dstack shows three).
        record["offers"] = offers[:3]
        record["offers_total"] = len(offers)
        record["offers_max_price"] = max([o["price"] for o in offers]) if offers else None
        return record, changed
    if backend == "local":
        local.check_local_fleet(config, name)
    nodes = local.list_nodes(docker, name)
    placement = config.get("placement") or "any"
    if nodes:
        current = set(n["labels"].get(local.PLACEMENT_LABEL) or "any" for n in nodes)
        if current != set([placement]):
            raise ApplyError(
                "fleet %s exists with placement %s; the file says %s. Changing placement "
                "re-creates the fleet: delete it first (gpufleet delete -f FILE, or "
                "playbooks/delete.yml) and apply again"
                % (name, ", ".join(sorted(current)), placement)
            )
    existing = [{"num": local.node_num(n), "state": n["state"]} for n in nodes
                if local.node_num(n) is not None]
    nums = plan_backend(config["nodes"], existing)
    plan = {
        "create": _names(name, nums["create"]),
        "start": _names(name, nums["start"]),
        "keep": _names(name, [n for n in nums["keep"] if n not in nums["start"]]),
        "remove": _names(name, nums["remove"]),
        "release": [],
    }
    changed = has_changes(plan)
    key_file = state.key_path(root, name)
    if changed and not check_mode:
        by_num = dict((local.node_num(n), n) for n in nodes)
        for num in nums["remove"]:
            local.remove_node(docker, name, num, placement)
        for num in nums["start"]:
            docker.run("start", by_num[num]["name"])
        if nums["create"]:
            image = image or build_image(False)
            key_file, public_key, _made = state.ensure_key(root, name)
            created = utcnow()
            privileged = None
            for num in nums["create"]:
                privileged = local.start_node(
                    docker, name, num, placement, image, public_key, created, privileged,
                    spec=local.spec_label(config),
                )
        nodes = local.list_nodes(docker, name)
    instances = local.instance_records(nodes, name, config.get("blocks", 1), key_file)
    if check_mode:
        # What would be created, without an address yet.
        instances += [{
            "name": instance_name(name, num), "num": num, "fleet": name,
            "backend": backend, "region": backend, "instance_type": "container",
            "price": 0.0, "spot": False, "status": "pending", "error": None,
            "created": None, "hostname": None, "port": local.NODE_SSH_PORT,
            "user": local.NODE_USER, "identity_file": key_file, "proxy_jump": None,
            "internal_ip": None, "network": None, "blocks": config.get("blocks", 1),
            "placement": placement,
        } for num in nums["create"]]
    record = _set_instances(fleet_record(config, name, path), instances)
    record["plan"] = plan
    return record, changed


def remove_instances(config, nums, path=None, docker=None, root=None, settings=None):
    """Remove a backend fleet's instances numbered ``nums`` (reconcile.py's idle ones)."""
    root = state.state_dir(root)
    name = fleet_name(config, path)
    if choose_backend(config, name) in cloud.CLOUD_BACKENDS:
        try:
            return cloud.remove(config, name, nums, settings,
                                catalog_dir=catalog.directory(root))
        except cloud.CloudError as exc:
            raise ApplyError(str(exc))
    placement = config.get("placement") or "any"
    present = set(local.node_num(n) for n in local.list_nodes(docker, name))
    for num in nums:
        if num in present:
            local.remove_node(docker, name, num, placement)
    return len(present & set(nums))


def delete(config, path=None, docker=None, root=None, check_mode=False, settings=None):
    """Remove a fleet's nodes, volumes, networks and local files. Returns (record, changed).

    For an SSH fleet only the local files go here; the hosts are released by the play.
    """
    root = state.state_dir(root)
    name = fleet_name(config, path)
    record = describe(config, path, docker, root) if config["fleet_type"] == "ssh" else \
        fleet_record(config, name, path)
    removed = {"containers": [], "volumes": [], "networks": []}
    if config["fleet_type"] != "ssh" and choose_backend(config, name) in cloud.CLOUD_BACKENDS:
        try:
            removed, _changed = cloud.delete(config, name, settings, check_mode=check_mode,
                                             catalog_dir=catalog.directory(root))
        except cloud.CloudError as exc:
            raise ApplyError(str(exc))
    elif config["fleet_type"] != "ssh":
        removed = local.remove_fleet(docker, name, check_mode=check_mode)
    files = state.remove_fleet_dir(root, name, check_mode=check_mode)
    changed = bool(files or any(removed.values()))
    record["status"] = "terminated"
    record["removed"] = dict(removed, files=[state.fleet_dir(root, name)] if files else [])
    return record, changed
