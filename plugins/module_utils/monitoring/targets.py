# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Prometheus ``file_sd`` target files for the exporters of a fleet's hosts.

One file per fleet, ``gpufleet-<fleet>.json``, holding a list of target groups: one group per
host and exporter it runs (node exporter everywhere, DCGM exporter on NVIDIA hosts), each with
the labels ``fleet``, ``instance``, ``backend``, ``gpu`` and ``exporter``. A group per exporter
rather than one per host keeps ``up`` and the scrape series of the two exporters of one host
apart within one scrape job, since a group's labels apply to every target in it.

Pure Python, no Ansible imports. PRIVATE to gpufleet.cluster.
"""

from __future__ import annotations

import ipaddress
import json
import re
from typing import Any, Iterable

from ..core.errors import GpufleetError

FILE_PREFIX = "gpufleet-"
FILE_SUFFIX = ".json"
# dstack fleet names: lowercase letters, digits and dashes, starting with a letter or digit.
_FLEET_NAME = re.compile(r"^[a-z0-9][a-z0-9-]{0,62}$")
EXPORTERS = ("node", "dcgm")
DEFAULT_PORTS = {"node": 9100, "dcgm": 9400}


class TargetsError(GpufleetError, ValueError):
    """A host cannot be turned into targets; the message names it and what is missing."""


def file_name(fleet: str) -> str:
    """The target file of a fleet: ``gpufleet-<fleet>.json``."""
    if not isinstance(fleet, str) or not _FLEET_NAME.match(fleet):
        raise TargetsError("%r is not a fleet name (lowercase letters, digits and dashes)"
                           % (fleet,))
    return FILE_PREFIX + fleet + FILE_SUFFIX


def fleet_of(name: str) -> str | None:
    """The fleet whose target file ``name`` is, or None for any other file."""
    if not (name.startswith(FILE_PREFIX) and name.endswith(FILE_SUFFIX)):
        return None
    fleet = name[len(FILE_PREFIX):-len(FILE_SUFFIX)]
    return fleet if _FLEET_NAME.match(fleet) else None


def gpu_label(gpu: dict[str, Any] | None = None, vendor: str | None = None) -> str:
    """The ``gpu`` label: the GPU's short name from the host facts (``H100``), else the vendor
    that detection or the fleet's resources name (``nvidia``), else ``none``."""
    gpu = gpu or {}
    if gpu.get("count") and gpu.get("name"):
        return str(gpu["name"])
    if gpu.get("count") and gpu.get("vendor"):
        return str(gpu["vendor"])
    if vendor and vendor != "none":
        return str(vendor)
    return "none"


def address_with_port(address: str, port: int | str) -> str:
    """``host:port``, with an IPv6 address in brackets."""
    try:
        if ipaddress.ip_address(str(address)).version == 6:
            return "[%s]:%d" % (address, int(port))
    except ValueError:
        pass
    return "%s:%d" % (address, int(port))


def _port(value, host, exporter):
    try:
        port = int(value)
    except (TypeError, ValueError):
        port = 0
    if not 0 < port < 65536:
        raise TargetsError("host %s: the %s exporter's port %r is not a port number"
                           % (host, exporter, value))
    return port


def host_exporters(host: dict[str, Any]) -> dict[str, int]:
    """``{exporter: port}`` for what a host runs: the ``exporters`` the monitoring role recorded
    (a port, or null for an exporter it does not run), else the node exporter on its default
    port and, on an NVIDIA host, the DCGM exporter on its default port."""
    name = host.get("name")
    recorded = host.get("exporters")
    if recorded is None:
        recorded = {"node": DEFAULT_PORTS["node"]}
        gpu = host.get("gpu") or {}
        vendor = gpu.get("vendor") if gpu.get("count") else host.get("gpu_vendor")
        if vendor == "nvidia":
            recorded["dcgm"] = DEFAULT_PORTS["dcgm"]
    unknown = sorted(set(recorded) - set(EXPORTERS))
    if unknown:
        raise TargetsError("host %s: unknown exporters %s (known: %s)"
                           % (name, ", ".join(unknown), ", ".join(EXPORTERS)))
    return dict((exporter, _port(port, name, exporter))
                for exporter, port in recorded.items() if port is not None)


def host_groups(host):
    """The target groups of one host, one per exporter it runs, node exporter first.

    ``host``: ``{"name", "fleet", "instance", "backend", "address", "gpu", "gpu_vendor",
    "exporters"}``; ``instance`` defaults to the name, ``gpu`` is the host facts' ``gpu``
    (or None), ``gpu_vendor`` the vendor known without facts."""
    name = host.get("name")
    if not host.get("address"):
        raise TargetsError("host %s has no address to scrape (no gpufleet_internal_ip, host "
                           "facts or ansible_host)" % name)
    file_name(host.get("fleet"))
    labels = {
        "fleet": host["fleet"],
        "instance": str(host.get("instance") or name),
        "backend": str(host.get("backend") or "unknown"),
        "gpu": gpu_label(host.get("gpu"), host.get("gpu_vendor")),
    }
    exporters = host_exporters(host)
    return [{"targets": [address_with_port(host["address"], exporters[exporter])],
             "labels": dict(labels, exporter=exporter)}
            for exporter in EXPORTERS if exporter in exporters]


def fleet_groups(hosts):
    """``{fleet: [target group, ...]}`` for the given hosts, each fleet's groups ordered by
    instance and exporter. Two hosts with the same instance name in one fleet are refused."""
    by_fleet = {}
    seen = {}
    for host in hosts:
        groups = host_groups(host)
        key = (host["fleet"], groups[0]["labels"]["instance"]) if groups else None
        if key in seen:
            raise TargetsError("hosts %s and %s are both instance %s of fleet %s"
                               % (seen[key], host.get("name"), key[1], key[0]))
        seen[key] = host.get("name")
        by_fleet.setdefault(host["fleet"], []).extend(groups)
    order = dict((exporter, num) for num, exporter in enumerate(EXPORTERS))
    for groups in by_fleet.values():
        groups.sort(key=lambda g: (g["labels"]["instance"], order[g["labels"]["exporter"]]))
    return by_fleet


def render(groups: list[dict[str, Any]]) -> str:
    """A target file's text: the groups as indented JSON with sorted keys, newline-ended."""
    return json.dumps(groups, indent=2, sort_keys=True) + "\n"


def wanted_files(hosts: Iterable[dict[str, Any]], existing: dict[str, str],
                 prune: bool = True) -> dict[str, str]:
    """What the target directory should hold: ``{file name: text}``.

    ``existing`` is ``{file name: text or None}`` for the files in the directory now; files of
    no fleet (other names) are left out. A fleet file whose fleet has no host here
    becomes an empty list when ``prune`` (Prometheus then drops its targets), and is left out
    otherwise."""
    wanted = dict((file_name(fleet), render(groups))
                  for fleet, groups in fleet_groups(hosts).items())
    if prune:
        for name in existing:
            if fleet_of(name) is not None and name not in wanted:
                wanted[name] = render([])
    return wanted


def changes(wanted: dict[str, str], existing: dict[str, str]) -> list[str]:
    """The names in ``wanted`` whose text differs from ``existing`` (or is missing), sorted."""
    return sorted(name for name, text in wanted.items() if existing.get(name) != text)
