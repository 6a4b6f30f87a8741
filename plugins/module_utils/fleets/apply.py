# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Applying and deleting a fleet: from a normalized config to live instances.

SSH fleets are not provisioned: their instances come straight from ``ssh_config`` and the hosts
are checked and claimed by the play that follows. Backend fleets are converged here, by the
backend backends/base.py's ``select`` picks: cloud fleets through cloud.py, local fleets
through the local backend's client (backends/local.py ``Local``).
"""

from __future__ import annotations

import contextlib
import datetime
import os
from typing import Any, Callable, Iterable

from ..backends.docker_cli import Docker
from .types import FleetRecord, InstanceRecord
from ..backends import base, local
from ..backends.errors import BackendError
from ..core.errors import GpufleetError
from ..offers import catalog
from .creator import creator_name
from . import cloud, lock, state
from ..spec.naming import fleet_name, instance_name
from .plan import has_changes, lowest_unused, plan_backend
from .records import fleet_record, ssh_instances
from .status import InstanceStatus
from ..spec import SpecError, parse_hosts_file
from ..spec.gateway import gateway_mark
from ..backends.docker_cli import DockerError


class ApplyError(GpufleetError):
    """The fleet cannot be applied as written; the message says why and what to do."""


def utcnow() -> str:
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def _backend(config, name):
    """The backend of a backend fleet (backends.base.select), its refusal as an ApplyError."""
    try:
        return base.select(config, name)
    except BackendError as exc:
        raise ApplyError(str(exc)) from exc


def resolved(config: dict[str, Any], settings: dict[str, Any] | None = None,
             root: str | None = None) -> dict[str, Any]:
    """A backend fleet's config with ``backends`` as gpufleet uses them (base.default_backends:
    without the field, the configured cloud backends, else local); SSH fleets as they are."""
    if config.get("fleet_type") == "ssh" or config.get("backends"):
        return config
    return dict(config, backends=base.default_backends(
        config, settings, catalog.directory(state.state_dir(root))))


def _set_instances(record, instances):
    """Give a fleet record its instances, by number, and the fleet the earliest creation time."""
    record["instances"] = sorted(instances, key=lambda i: i["num"])
    record["created"] = min((i["created"] for i in instances if i["created"]), default=None)
    return record


def _names(fleet, nums):
    return [instance_name(fleet, n) for n in nums]


def describe(config: dict[str, Any], path: str | None = None, docker: Docker | None = None,
             root: str | None = None, settings: dict[str, Any] | None = None,
             local_nodes: dict[str, list[dict[str, Any]]] | None = None) -> FleetRecord:
    """The fleet record as it is now, without changing anything. ``local_nodes`` is the local
    engine's ``{fleet: nodes}`` when the caller listed it already (see ``local_fleet_nodes``)."""
    config = resolved(config, settings, root)
    name = fleet_name(config, path)
    record = fleet_record(config, name, path)
    root = state.state_dir(root)
    if config["fleet_type"] == "ssh":
        base_dir = os.path.dirname(os.path.abspath(path)) if path else None
        record["instances"] = ssh_instances(config, name, base_dir)
        return record
    backend = _backend(config, name)
    if backend in base.CLOUD_BACKENDS:
        try:
            instances = cloud.describe(config, name, state.key_path(root, name), settings,
                                       catalog_dir=catalog.directory(root))
        except cloud.CloudError as exc:
            raise ApplyError(str(exc)) from exc
        _set_instances(record, instances)
        if not instances:
            record["status"] = "terminated"
        return record
    nodes = base.client(backend, docker=docker)
    placed = (nodes.fleet_instances(name) if local_nodes is None
              else local_nodes.get(name) or [])
    _set_instances(record, nodes.records(
        placed, name, state.key_path(root, name), config.get("blocks", 1)
    ))
    if not record["instances"]:
        record["status"] = "terminated"
    return record


def local_fleet_nodes(docker: Docker | None) -> dict[str, list[dict[str, Any]]]:
    """The local engine's nodes of every fleet, ``{fleet: nodes}``, listed once for a caller
    that both describes fleet files and discovers fleets (``describe``/``discover``'s
    ``local_nodes``). Raises DockerError when the engine does not answer."""
    return base.client("local", docker=docker).all_fleet_instances()


def discover(docker: Docker | None, root: str | None = None, settings: dict[str, Any] | None = None,
             local_nodes: dict[str, list[dict[str, Any]]] | None = None) -> list[FleetRecord]:
    """Every fleet the backends hold, from their labels and tags alone (no files): fleet
    records. Cloud fleets are looked for in the backends that ``settings`` configure; without
    a Docker engine (``docker`` None) local fleets are not. ``local_nodes``: the engine's
    nodes when listed already (``local_fleet_nodes``)."""
    root = state.state_dir(root)
    found = []
    try:
        held = cloud.discover(settings, root, catalog.directory(root))
    except cloud.CloudError as exc:
        raise ApplyError(str(exc)) from exc
    for backend, name, placement, gateway, instances in held:
        config = {"fleet_type": "backend", "ssh_config": None, "backends": [backend],
                  "placement": placement, "gateway": gateway_mark({}) if gateway else None}
        found.append(_set_instances(fleet_record(config, name), instances))
    if docker is None:
        return found
    by_fleet = local_fleet_nodes(docker) if local_nodes is None else local_nodes
    nodes = base.client("local", docker=docker)
    for name in sorted(by_fleet):
        spec = local.spec_from_nodes(by_fleet[name]) or {}
        config = dict(spec, fleet_type="backend", ssh_config=None)
        found.append(_set_instances(fleet_record(config, name), nodes.records(
            by_fleet[name], name, state.key_path(root, name), spec.get("blocks", 1)
        )))
    return found


def at_least(config: dict[str, Any], count: int) -> dict[str, Any]:
    """``config`` with ``nodes.target`` raised to ``count`` instances (a run's need, see
    tasks.growth), never above ``nodes.max``; unchanged for SSH fleets or a smaller count."""
    nodes = config.get("nodes")
    if config.get("fleet_type") != "backend" or not isinstance(nodes, dict) or count is None:
        return config
    target = max(int(nodes.get("target") or 0), int(count))
    if nodes.get("max") is not None:
        target = min(target, int(nodes["max"]))
    return dict(config, nodes=dict(nodes, target=target))


def apply(config: dict[str, Any], path: str | None = None, docker: Docker | None = None,
          root: str | None = None, check_mode: bool = False, image: str | None = None,
          build_image: Callable[[bool], str] | None = None, settings: dict[str, Any] | None = None,
          made_for: dict[str, Any] | None = None, on_wait: Callable[..., Any] | None = None,
          before_remove: Callable[[FleetRecord], Any] | None = None) -> tuple[FleetRecord, bool]:
    """Converge a fleet to its config. Returns ``(fleet record, changed)``.

    The record's ``plan`` says what was (in check mode: would be) done, by instance name:
    ``create``, ``start`` (stopped nodes), ``keep`` and ``remove``.
    ``build_image(check_mode)`` returns the node image to use (built when missing); ``settings``
    are the cloud backends' settings (``{"aws": {...}}``, see docs/backends.md). ``made_for``
    (``{"run", "idle_duration"}``, backends/made_for.py) marks the instances this apply creates
    as made for that run, with that idle limit (fleets/idle.py).

    A backend fleet is changed holding its apply lock (lock.py): a second apply of it, from
    this controller or another of this machine, waits (``on_wait(message)`` is told once),
    then finds what the first made. Whatever happened meanwhile, an apply that ends with fewer
    live instances than the file asks for raises ApplyError (``instances_missing``).
    ``before_remove(record)``, when given, is called with a fleet record of the instances a
    smaller ``nodes`` would remove (local backend), before anything changes, in check mode too:
    it raises to refuse (converge's check that they are neither busy nor unknown).
    """
    root = state.state_dir(root)
    config = resolved(config, settings, root)
    name = fleet_name(config, path)
    _same_kind(config, name, path, docker, root)
    if path and not check_mode:
        state.remember_file(root, name, path)
    if config["fleet_type"] == "ssh":
        record = describe(config, path, docker, root)
        record["plan"] = None  # hosts are claimed by the play, which knows their markers
        return record, False
    backend = _backend(config, name)
    held = contextlib.nullcontext(False) if check_mode else lock.fleet_lock(name, on_wait)
    with held:
        record, changed = _apply_backend(config, name, backend, path, docker, root, check_mode,
                                         image, build_image, settings, made_for, before_remove)
    if not check_mode:
        missing = instances_missing(config, record)
        if missing:
            raise ApplyError(
                "fleet %s has %d of the %d instances its file asks for after this apply "
                "(missing: %s): another command removed them meanwhile; apply again"
                % (name, len(live_instances(record)), config["nodes"]["target"],
                   ", ".join(missing)))
    return record, changed


def _same_kind(config, name, path, docker, root):
    """A gateway's host and a fleet never share a name: ApplyError when ``name`` is the other
    kind already, by the file this controller applied it from or by its local nodes' labels."""
    mine = bool(config.get("gateway"))
    others = []
    remembered = state.remembered_files(root).get(name)
    if remembered and (not path or os.path.abspath(remembered) != os.path.abspath(path)):
        try:
            others.append(bool(parse_hosts_file(remembered)[0].get("gateway")))
        except SpecError:
            pass   # a file that no longer reads says nothing of what it was
    if docker is not None and "local" in (config.get("backends") or []):
        try:
            nodes = local_fleet_nodes(docker).get(name)
        except DockerError:
            nodes = None
        if nodes:
            others.append(bool((local.spec_from_nodes(nodes) or {}).get("gateway")))
    if any(other != mine for other in others):
        if mine:
            raise ApplyError("%s is the name of a fleet already: give the gateway another name"
                             % name)
        raise ApplyError("%s is the name of a gateway already: give the fleet another name, "
                         "or delete the gateway first (gpufleet gateway delete %s)"
                         % (name, name))


def live_instances(record: FleetRecord) -> list[InstanceRecord]:
    """The record's instances that are there or coming (not going or gone)."""
    return [i for i in record.get("instances") or []
            if i.get("status") not in InstanceStatus.lost_statuses()]


def instances_missing(config: dict[str, Any], record: FleetRecord) -> list[str]:
    """The names of the instances a backend fleet lacks to have as many live ones as its
    ``nodes.target`` (the lowest free numbers); empty when it has them."""
    target = int((config.get("nodes") or {}).get("target") or 0)
    live = live_instances(record)
    if len(live) >= target:
        return []
    return _names(record["name"], lowest_unused([i["num"] for i in live], target - len(live)))


def _apply_backend(config, name, backend, path, docker, root, check_mode, image, build_image,
                   settings, made_for, before_remove=None):
    """apply's work on a backend fleet (cloud or local), the lock held."""
    if backend in base.CLOUD_BACKENDS:
        if made_for:
            config = dict(config, made_for=made_for)   # what launch_group tags instances with
        try:
            instances, plan, changed, offers = cloud.apply(
                config, name, root, settings, check_mode=check_mode,
                catalog_dir=catalog.directory(root))
        except cloud.CloudError as exc:
            raise ApplyError(str(exc)) from exc
        record = _set_instances(fleet_record(config, name, path), instances)
        record["plan"] = plan
        # The cheapest offers, for the plan's offers table (dstack shows three).
        record["offers"] = offers[:3]
        record["offers_total"] = len(offers)
        record["offers_max_price"] = max([o["price"] for o in offers]) if offers else None
        return record, changed
    client = base.client(backend, docker=docker)
    client.check(config, name)
    nodes = client.fleet_instances(name)
    views = [(node, client.view(node)) for node in nodes]
    placement = config.get("placement") or "any"
    if nodes:
        current = set(view["placement"] for _node, view in views)
        if current != set([placement]):
            raise ApplyError(
                "fleet %s exists with placement %s; the file says %s. Changing placement "
                "re-creates the fleet: delete it first (gpufleet delete -f FILE, or "
                "playbooks/delete.yml) and apply again"
                % (name, ", ".join(sorted(current)), placement)
            )
    by_num = dict((view["num"], node) for node, view in views if view["num"] is not None)
    existing = [{"num": view["num"], "state": view["state"]} for _node, view in views
                if view["num"] is not None]
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
    if nums["remove"] and before_remove is not None:
        going = [by_num[num] for num in nums["remove"]]
        before_remove(_set_instances(fleet_record(config, name, path), client.records(
            going, name, key_file, config.get("blocks", 1))))
    if changed and not check_mode:
        # A node's placement label is the file's here (a change was refused above).
        client.terminate([by_num[num] for num in nums["remove"]])
        client.start([by_num[num] for num in nums["start"]])
        if nums["create"]:
            image = image or build_image(False)
            key_file, public_key, _made = state.ensure_key(root, name)
            client.create(name, nums["create"], placement, image, public_key, utcnow(),
                          spec=local.spec_label(config), made_for=made_for,
                          made_from=os.path.abspath(root), creator=creator_name())
        nodes = client.fleet_instances(name)
    if nodes and not check_mode:
        # Nodes another controller made (its own state dir, its own key) let this one's key
        # in too, so that its checks reach them as theirs do.
        key_file, public_key, _made = state.ensure_key(root, name)
        if client.authorize(nodes, public_key):
            changed = True
    instances = client.records(nodes, name, key_file, config.get("blocks", 1))
    if check_mode:
        # What would be created, without an address yet.
        instances += [{
            "name": instance_name(name, num), "num": num, "fleet": name,
            "backend": backend, "region": backend, "instance_type": "container",
            "price": 0.0, "spot": False, "status": "pending", "error": None,
            "created": None, "hostname": None, "port": local.NODE_SSH_PORT,
            "user": local.NODE_USER, "identity_file": key_file, "proxy_jump": None,
            "internal_ip": None, "network": None, "blocks": config.get("blocks", 1),
            "placement": placement, "made_for_run": (made_for or {}).get("run"),
            "idle_duration": (made_for or {}).get("idle_duration"),
        } for num in nums["create"]]
    record = _set_instances(fleet_record(config, name, path), instances)
    record["plan"] = plan
    return record, changed


def remove_instances(config: dict[str, Any], nums: Iterable[int], path: str | None = None,
                     docker: Docker | None = None, root: str | None = None,
                     settings: dict[str, Any] | None = None) -> int:
    """Remove a backend fleet's instances numbered ``nums`` (reconcile.py's idle ones)."""
    root = state.state_dir(root)
    config = resolved(config, settings, root)
    name = fleet_name(config, path)
    backend = _backend(config, name)
    if backend in base.CLOUD_BACKENDS:
        try:
            return cloud.remove(config, name, nums, settings,
                                catalog_dir=catalog.directory(root))
        except cloud.CloudError as exc:
            raise ApplyError(str(exc)) from exc
    client = base.client(backend, docker=docker)
    with lock.fleet_lock(name):
        chosen = [node for node in client.fleet_instances(name)
                  if client.view(node)["num"] in nums]
        client.terminate(chosen)
    return len(chosen)


def delete(config: dict[str, Any], path: str | None = None, docker: Docker | None = None,
           root: str | None = None, check_mode: bool = False,
           settings: dict[str, Any] | None = None) -> tuple[FleetRecord, bool]:
    """Remove a fleet's nodes, volumes, networks and local files. Returns (record, changed).

    For an SSH fleet only the local files go here; the hosts are released by the play.
    """
    root = state.state_dir(root)
    config = resolved(config, settings, root)
    name = fleet_name(config, path)
    record = describe(config, path, docker, root) if config["fleet_type"] == "ssh" else \
        fleet_record(config, name, path)
    removed: dict[str, Any] = {"containers": [], "volumes": [], "networks": []}
    backend = _backend(config, name) if config["fleet_type"] != "ssh" else None
    if backend in base.CLOUD_BACKENDS:
        try:
            removed, _changed = cloud.delete(config, name, settings, check_mode=check_mode,
                                             catalog_dir=catalog.directory(root))
        except cloud.CloudError as exc:
            raise ApplyError(str(exc)) from exc
    elif backend is not None:
        # As an apply does (lock.py): an apply of the fleet under way ends first.
        with contextlib.nullcontext() if check_mode else lock.fleet_lock(name):
            removed = base.client(backend, docker=docker).delete_fleet(name,
                                                                       check_mode=check_mode)
    files = state.remove_fleet_dir(root, name, check_mode=check_mode)
    changed = bool(files or any(removed.values()))
    record["status"] = "terminated"
    record["removed"] = dict(removed, files=[state.fleet_dir(root, name)] if files else [])
    return record, changed
