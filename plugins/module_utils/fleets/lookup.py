# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""A fleet found by its name, and deleting some of a fleet's instances.

``dstack fleet delete NAME [-i N ...]`` names a fleet, not a file. gpufleet has no server to ask,
so the fleet is looked for where tasks and ``gpufleet fleet`` find fleets:

1. the file this controller applied the fleet from, remembered in the state dir
   (``state.remembered_files``; an SSH fleet lives nowhere else);
2. the backends: local nodes by their container labels, cloud instances by their tags and labels
   in the backends the settings configure (a backend fleet applied by another controller, or
   whose file is gone).

    config, path = find("my-fleet", docker, root, settings)          # FleetNotFound if none
    refuse_in_use(record, using, nums)                               # dstack's "in use" refusal
    record, changed = delete_instances(config, [1], path, docker, root, settings=settings)

Deleting instances reuses what is there: a backend fleet's instances go through
``apply.remove_instances`` (the remover reconcile uses), an SSH fleet's hosts are released by
the play (their marker goes, as for a whole fleet) and leave the facts cache here, so tasks do
not place jobs on them until the fleet is applied again.
"""

from __future__ import annotations

from typing import Any, Iterable

from ..backends.docker_cli import Docker
from ..backends import base, local
from ..backends.docker_cli import DockerError
from ..backends.errors import BackendError
from ..core.text import shorten
from ..offers import catalog
from ..spec import SpecError, parse_hosts_file
from ..spec.naming import NamingError, fleet_name
from . import access, apply, cloud, state


class FleetNotFound(apply.ApplyError):
    """No fleet of that name: neither a file this controller applied nor a backend holds it."""


class FleetInUse(apply.ApplyError):
    """The instances to delete still run tasks; the message names the runs."""


def not_found_message(name: str) -> str:
    """What dstack says of a fleet name it does not know."""
    return "Fleet %s does not exist" % shorten(name)


def _from_file(name, root):
    """(config, path) of the remembered file of fleet ``name``, or None; a file that no longer
    reads is an ApplyError naming it."""
    path = state.remembered_files(root).get(name)
    if path is None:
        return None
    try:
        config, _warnings = parse_hosts_file(path)
    except SpecError as exc:
        raise apply.ApplyError("fleet %s was applied from %s, which no longer reads: %s"
                               % (name, path, exc)) from exc
    try:
        if fleet_name(config, path) != name:
            return None  # the file now names another fleet: it is no longer this one's
    except NamingError:
        return None
    return config, path


def _from_local(name, docker, root=None):
    """The config of the local fleet ``name`` from its nodes' labels, or None; its
    ``access`` (fleets.access) is told from the same labels."""
    if docker is None:
        return None
    try:
        nodes = base.client("local", docker=docker).fleet_instances(name)
    except DockerError:
        return None  # no Docker engine here: no local fleet either
    if not nodes:
        return None
    spec = local.spec_from_nodes(nodes) or {}
    config = dict(spec, name=name, fleet_type="backend", ssh_config=None, backends=["local"],
                  placement=spec.get("placement") or local.Local.view(nodes[0])["placement"])
    instances = local.instance_records(nodes, name, 1, state.key_path(root, name))
    config["access"] = access.annotate([{"name": name, "fleet_type": "backend",
                                         "backends": ["local"], "instances": instances}],
                                       root, docker)[0]["access"]
    return config


def _from_clouds(name, root, settings):
    """The config of the cloud fleet ``name`` from its instances' tags or labels, or None.
    Only the backends with a section in ``settings`` are asked, as cloud.discover does."""
    for backend in base.CLOUD_BACKENDS:
        if backend not in (settings or {}):
            continue
        try:
            client = base.client(backend, settings)
            placed = client.fleet_instances(name, cloud.regions({}, settings, backend,
                                                                catalog.directory(root)))
        except BackendError as exc:
            raise apply.ApplyError(str(exc)) from exc
        if placed:
            instances = client.records(placed, name, state.key_path(root, name))
            told = access.annotate([{"name": name, "fleet_type": "backend",
                                     "backends": [backend], "instances": instances}], root)
            return {"name": name, "fleet_type": "backend", "ssh_config": None,
                    "backends": [backend], "placement": client.view(placed[0])["placement"],
                    "access": told[0]["access"]}
    return None


def find(name: str, docker: Docker | None = None, root: str | None = None,
         settings: dict[str, Any] | None = None) -> tuple[dict[str, Any], str | None]:
    """``(config, path)`` of the fleet named ``name``: its remembered file first, else a
    backend fleet found by its labels or tags (``path`` None; the config then holds what a
    deletion needs: name, backends, placement, and ``access`` as fleets.access tells it: a
    member finds a fleet it did not make this way). FleetNotFound when there is none."""
    root = state.state_dir(root)
    found = _from_file(name, root)
    if found is not None:
        return found
    config = _from_local(name, docker, root) or _from_clouds(name, root, settings)
    if config is None:
        raise FleetNotFound(not_found_message(name))
    return config, None


def _listing(nums):
    """Instance numbers as dstack prints them: ``[1, 2]``."""
    return "[%s]" % ", ".join(str(n) for n in nums)


def refuse_in_use(record, using, nums=None, unknown=None, shrink=False):
    """Refuse to delete a fleet (``nums`` None) or its instances numbered ``nums`` while any of
    them runs a task, as dstack refuses: FleetInUse with dstack's message, followed by each busy
    instance and its runs. ``using`` maps instance names to the runs still alive on them.

    ``unknown`` maps instance names to why they could not be asked: such an instance may be
    running a task, so it is never taken as idle, and the deletion is refused naming it and
    the reason (the caller's override, ``--force`` or refuse_busy=false, skips the check).
    ``shrink``: the instances of ``record`` are those a smaller ``nodes`` would remove."""
    chosen = [i for i in record.get("instances") or []
              if nums is None or i.get("num") in nums]
    busy = [(i["name"], sorted(using.get(i["name"]) or [])) for i in chosen
            if (using or {}).get(i["name"])]
    unread = [(i["name"], unknown[i["name"]]) for i in chosen
              if i["name"] in (unknown or {})]
    if not busy and not unread:
        return
    name = record["name"]
    what = "fleet %s" % name if nums is None else "fleet %s instances %s" % (name, _listing(nums))
    if shrink:
        gone = [i["name"] for i in chosen]
        detail = "; ".join(["%s runs %s" % (host, ", ".join(runs)) for host, runs in busy]
                           + ["%s could not be checked (%s)" % (h, r) for h, r in unread])
        raise FleetInUse("Failed to apply fleet %s: the smaller nodes count removes %s, which "
                         "may not be idle: %s. Stop the runs, or make the hosts answer, and "
                         "apply again (the playbook's gpufleet_refuse_busy=false removes them "
                         "anyway)" % (name, ", ".join(gone), detail))
    if busy:
        detail = "; ".join("%s runs %s" % (host, ", ".join(runs)) for host, runs in busy)
        runs = sorted(set(run for _host, names in busy for run in names))
        hint = "stop %s first: %s" % ("it" if len(runs) == 1 else "them",
                                      ", ".join("gpufleet stop " + run for run in runs))
        if unread:
            hint += "; " + _unread(unread)
        if nums is None:
            raise FleetInUse("Failed to delete %s. Fleet is in use: %s (%s)" % (what, detail, hint))
        raise FleetInUse("Failed to delete %s. Fleet instances are in use: %s (%s)"
                         % (what, detail, hint))
    raise FleetInUse("Failed to delete %s. Cannot tell whether it is in use: %s. Make the "
                     "hosts answer, or delete it anyway with --force (the module's "
                     "refuse_busy=false), which also destroys any run still on them"
                     % (what, _unread(unread)))


def _unread(unread):
    return "; ".join("%s could not be checked (%s)" % (host, reason) for host, reason in unread)


def delete_instances(config: dict[str, Any], nums: Iterable[int], path: str | None = None,
                     docker: Docker | None = None, root: str | None = None,
                     check_mode: bool = False, settings: dict[str, Any] | None = None,
                     current: dict[str, Any] | None = None) -> tuple[dict[str, Any], bool]:
    """Delete a fleet's instances numbered ``nums`` and keep the fleet. Returns
    ``(record, changed)``; numbers the fleet does not have are left out, as dstack does.

    A backend fleet's instances are removed (``apply.remove_instances``); an SSH fleet's hosts
    are released by the play and their cached facts go here. The record's ``plan`` says which
    instances were (in check mode: would be) removed or released, and ``removed`` lists the
    removed instances. ``current`` is the fleet's record as ``apply.describe`` gave it, when the
    caller has it already.
    """
    root = state.state_dir(root)
    name = fleet_name(config, path)
    record = current or apply.describe(config, path, docker, root, settings=settings)
    chosen = [i for i in record["instances"] if i["num"] in set(nums)]
    names = [i["name"] for i in chosen]
    ssh = config["fleet_type"] == "ssh"
    plan = {"create": [], "start": [], "remove": [] if ssh else names,
            "keep": [i["name"] for i in record["instances"] if i["name"] not in names],
            "release": names if ssh else []}
    if chosen and not check_mode:
        if ssh:
            state.edit_facts(root, name, lambda facts: dict(
                (host, value) for host, value in facts.items() if host not in names))
        else:
            apply.remove_instances(config, [i["num"] for i in chosen], path, docker, root,
                                   settings)
            record = apply.describe(config, path, docker, root, settings=settings)
    record = dict(record, plan=plan, removed={"instances": [] if ssh else names})
    return record, bool(chosen)
