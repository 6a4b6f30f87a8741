# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""What gpufleet.cluster.fleet does, in one function the module and its action plugin share:
converge a fleet to its file (``state=present``) or delete it or some of its instances
(``state=absent``).

The action plugin calls ``converge`` in the controller's own process when the task runs there
anyway (a local connection, no become, the controller's Python): a module payload costs more
than a no-change apply's own work. Anywhere else the module runs and calls the same function.
"""

from __future__ import annotations

import sys
from typing import Any, Callable

from ..backends import base, local
from ..backends.docker_cli import Docker
from ..core.errors import GpufleetError
from ..core.module import state_options
from ..spec import HAS_YAML, parse_hosts_data, parse_hosts_file
from ..spec.naming import fleet_name
from . import apply, idle, lookup, records, state

# The module's options, declared once for the module and its action plugin.
FLEET_ARGS = dict(
    path=dict(type="path"),
    config=dict(type="dict"),
    name=dict(type="str"),
    state=dict(type="str", choices=["present", "absent"], default="present"),
    instances=dict(type="list", elements="int"),
    refuse_busy=dict(type="bool", default=False),
    at_least=dict(type="int"),
    made_for=dict(type="dict", options=dict(
        run=dict(type="str", required=True),
        idle_duration=dict(type="raw"),
    )),
    image=dict(type="str"),
    mirror=dict(type="str", default=local.DEFAULT_MIRROR),
    **state_options(backend_settings=True)
)
MUTUALLY_EXCLUSIVE = [("path", "config", "name")]
REQUIRED_ONE_OF = [("path", "config", "name")]
REQUIRED_IF = [("state", "present", ("path", "config"), True)]


def delete(params, config, path, docker, root, settings, check_mode, runs_alive):
    """state=absent: the whole fleet, or only ``instances``; refused while in use when asked
    (``runs_alive(record, root)``: tasks.listing.runs_alive, the busy instances and those
    that could not be asked). Instances that could not be asked refuse it too, unless
    ``refuse_busy`` is false. Returns the module's result."""
    nums = params["instances"]
    current = None
    if nums is not None or params["refuse_busy"]:
        current = apply.describe(config, path, docker, root, settings=settings)
        using, unknown = runs_alive(current, root)
        lookup.refuse_in_use(current, using, nums,
                             unknown if params["refuse_busy"] else None)
    if nums is not None:
        record, changed = lookup.delete_instances(config, nums, path, docker, root,
                                                  check_mode, settings, current=current)
        released = [i for i in record["instances"] if i["name"] in record["plan"]["release"]]
    else:
        record, changed = apply.delete(config, path, docker, root, check_mode,
                                       settings=settings)
        released = record["instances"] if config["fleet_type"] == "ssh" else []
    return dict(changed=changed, fleet=record, hosts=[], removed=record["removed"],
                state_dir=root, release_vars=_release_vars(config, record, path, root),
                release_hosts=records.host_entries(dict(record, instances=released), root))


def _release_vars(config, record, path, root):
    """An SSH fleet's connection variables for the hosts that left it; None for others."""
    if config["fleet_type"] != "ssh":
        return None
    return records.release_hostvars(config, record["name"], path, root)


def _config(params, root, docker):
    """The fleet's normalized config, its file (None for an inline fleet not saved) and the
    parser's warnings."""
    path = params["path"]
    if params["name"] is not None:
        config, path = lookup.find(params["name"], docker, root, state.backend_settings(
            root, params["backend_settings"]))
        return config, path, []
    if path is None:
        config, warnings = parse_hosts_data(params["config"], "inline config")
        return config, path, warnings
    if not HAS_YAML:
        raise GpufleetError("%s: reading a fleet file needs the Python library PyYAML, which %s "
                            "lacks: install it there (pip install PyYAML)"
                            % (path, sys.executable))
    config, warnings = parse_hosts_file(path)
    return config, path, warnings


def converge(params: dict[str, Any], runs_alive: Callable[..., Any], check_mode: bool = False,
             warn: Callable[[str], Any] | None = None,
             docker: Docker | None = None) -> dict[str, Any]:
    """Do what the module's ``params`` (validated against FLEET_ARGS) ask; returns the module's
    result. ``runs_alive(record, root)`` says which runs a fleet's hosts have alive (the
    tasks package's tasks.listing.runs_alive: this package may not import it), for a delete
    that must refuse a fleet in use. ``warn(text)`` receives the config's warnings. Raises
    GpufleetError with the user's message."""
    docker = docker or Docker()
    root = state.state_dir(params["state_dir"])
    if params["state"] == "present" and params["instances"] is not None:
        raise GpufleetError("instances: only with state=absent (the instances to delete)")

    def build_image(check):
        return local.ensure_node_image(docker, mirror=params["mirror"], check_mode=check)[0]

    config, path, warnings = _config(params, root, docker)
    for warning in warnings:
        if warn is not None:
            warn("%s: %s" % (path or "inline config", warning))
    if path is None and params["config"] is not None:
        relative = records.relative_keys(config)
        if relative:
            raise GpufleetError("inline config: an inline fleet has no directory to take "
                                "relative key paths from; give absolute paths (%s)"
                                % "; ".join(relative))
        if params["state"] == "present" and not check_mode:
            path = state.save_inline(root, fleet_name(config, None), params["config"])
    settings = state.backend_settings(root, params["backend_settings"])
    config = apply.at_least(apply.resolved(config, settings, root), params["at_least"])
    cloud_fleet = (config["fleet_type"] == "backend" and base.select(
        config, fleet_name(config, path)) in base.CLOUD_BACKENDS)
    if config["fleet_type"] == "backend" and not cloud_fleet:
        docker.ping()
    if params["state"] == "absent":
        return delete(params, config, path, docker, root, settings, check_mode, runs_alive)

    def before_remove(going):
        # A smaller nodes count removes instances: never one that runs a task or cannot be
        # checked (busy, idle or unknown), as a delete of them would refuse.
        using, unknown = runs_alive(going, root)
        lookup.refuse_in_use(going, using, None, unknown, shrink=True)

    record, changed = apply.apply(
        config, path, docker, root, check_mode, image=params["image"],
        build_image=build_image, settings=settings,
        made_for=idle.made_for(params["made_for"], config), on_wait=warn,
        before_remove=before_remove if params["refuse_busy"] else None,
    )
    if not check_mode:
        state.ensure_fleet_dir(root, record["name"])
    return dict(changed=changed, fleet=record, hosts=records.host_entries(record, root),
                state_dir=root, release_vars=_release_vars(config, record, path, root),
                last_peers=records.last_peers(record, state.read_facts(root, record["name"])))
