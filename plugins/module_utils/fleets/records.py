# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Instance records (one dict per fleet instance) and the Ansible host variables made from them.

An instance record is what every part of gpufleet says about one host of a fleet:

    name, num, fleet, backend, region, instance_type, price, spot, status, error, created,
    hostname, port, user, identity_file, proxy_jump, internal_ip, network, blocks, placement

``hostvars()`` turns it into the variables a play needs to reach and use the host, and
``host_entry()`` into a whole host (name, groups, variables): the one builder behind both the
inventory plugin and the fleet module's ``hosts`` return, so a host has the same variables
whichever way it reaches a play.
"""

from __future__ import annotations

import hashlib
import os
import shlex
from typing import Any, cast

from . import state
from .types import FleetRecord, InstanceRecord
from ..spec.naming import group_name, instance_name

# The host key policy of a host gpufleet itself created (a backend node, a task container): a
# fresh host key each time, so keys are not recorded.
OWN_HOST_KEYS = (("StrictHostKeyChecking", "no"), ("UserKnownHostsFile", "/dev/null"))


# The node image's Python (Debian's python3); other hosts have theirs discovered.
LOCAL_NODE_PYTHON = "/usr/bin/python3"


def resolve_path(path: str | None, base_dir: str | None = None) -> str | None:
    """``~`` expanded; a relative path is taken relative to the fleet file's directory."""
    if not path:
        return path
    path = os.path.expanduser(path)
    if not os.path.isabs(path) and base_dir:
        path = os.path.join(base_dir, path)
    return os.path.normpath(path)


def relative_keys(config: dict[str, Any]) -> list[str]:
    """The field paths of an SSH fleet's relative ``identity_file`` paths, with their values.

    A fleet file's relative paths are taken from the file's directory; a fleet given inline has
    no directory, so such paths are refused rather than guessed."""
    ssh = config.get("ssh_config") or {}
    found = []

    def note(where, value):
        if value and not os.path.isabs(os.path.expanduser(value)):
            found.append("%s: %s" % (where, value))

    note("ssh_config.identity_file", ssh.get("identity_file"))
    note("ssh_config.proxy_jump.identity_file", (ssh.get("proxy_jump") or {}).get("identity_file"))
    for index, host in enumerate(ssh.get("hosts") or []):
        if host.get("identity_file") != ssh.get("identity_file"):
            note("ssh_config.hosts[%d].identity_file" % index, host.get("identity_file"))
    return found


def fleet_record(config: dict[str, Any], name: str, path: str | None = None) -> FleetRecord:
    """The fleet part of a fleet record (without instances), from a normalized config."""
    ssh = config.get("ssh_config")
    return {
        "name": name,
        "file": os.path.abspath(path) if path else None,
        "fleet_type": config["fleet_type"],
        "placement": config.get("placement") or "any",
        "nodes": config.get("nodes"),
        "hosts": len(ssh["hosts"]) if ssh else None,
        "backends": config.get("backends"),
        "spot_policy": config.get("spot_policy"),
        "max_price": config.get("max_price"),
        "resources": config.get("resources"),
        "blocks": config.get("blocks"),
        # As the file says it (None: unset); fleets/idle.py says what applies to an instance.
        "idle_duration": config.get("idle_duration"),
        # An SSH fleet's env: dstack passes it to every job on the fleet's hosts (under the
        # run's own env) and to its shim, whose pulls use it (proxies).
        "env": dict(config.get("env") or {}),
        # A gateway's host (spec.gateway.host_fleet): what the gateway file says of it; None for
        # every other fleet. No run is placed on it.
        "gateway": config.get("gateway"),
        "status": "active",
        "created": None,
        "plan": None,
        "instances": [],
    }


def ssh_instances(config: dict[str, Any], name: str,
                  base_dir: str | None = None) -> list[InstanceRecord]:
    """The instances of an SSH fleet, numbered by their place in ``ssh_config.hosts``."""
    ssh = config["ssh_config"]
    records: list[InstanceRecord] = []
    for num, host in enumerate(ssh["hosts"]):
        jump = host.get("proxy_jump")
        if jump:
            jump = dict(jump, identity_file=resolve_path(jump.get("identity_file"), base_dir))
        records.append({
            "name": instance_name(name, num),
            "num": num,
            "fleet": name,
            "backend": "ssh",
            "region": "remote",
            "instance_type": None,
            "price": None,
            "spot": False,
            "status": "pending",
            "error": None,
            "created": None,
            "hostname": host["hostname"],
            "port": host.get("port") or 22,
            "user": host.get("user"),
            "identity_file": resolve_path(host.get("identity_file"), base_dir),
            "proxy_jump": jump,
            "internal_ip": host.get("internal_ip"),
            "network": ssh.get("network"),
            "blocks": host.get("blocks", config.get("blocks", 1)),
            "placement": config.get("placement") or "any",
        })
    return records


def host_key_options(backend: str, known_hosts: str | None = None) -> list[tuple[str, str]]:
    """The host key policy for a host of ``backend`` as ``(option, value)`` pairs: SSH fleet
    hosts and jump hosts (``"ssh"``) are trusted on first use and remembered in the fleet's
    ``known_hosts``; hosts gpufleet created are not recorded (OWN_HOST_KEYS)."""
    if backend != "ssh":
        return list(OWN_HOST_KEYS)
    policy = [("StrictHostKeyChecking", "accept-new")]
    if known_hosts:
        policy.append(("UserKnownHostsFile", known_hosts))
    return policy


def _options(pairs):
    return [word for key, value in pairs for word in ("-o", "%s=%s" % (key, value))]


def _proxy_command(jump, known_hosts):
    argv = ["ssh", "-W", "%h:%p", "-q", "-p", str(jump.get("port") or 22)]
    if jump.get("identity_file"):
        argv += ["-i", jump["identity_file"], "-o", "IdentitiesOnly=yes"]
    argv += ["-o", "BatchMode=yes"] + _options(host_key_options("ssh", known_hosts))
    argv.append("%s@%s" % (jump["user"], jump["hostname"]))
    return " ".join(shlex.quote(a) for a in argv)


def ssh_common_args(record: InstanceRecord, known_hosts: str | None = None) -> str:
    """The ``ansible_ssh_common_args`` for an instance: host key policy and the jump host.

    SSH fleet hosts are trusted on first use and remembered in the fleet's own known_hosts
    (``known_hosts``); a jump host is reached with its own user, port and key through
    ``ProxyCommand`` (``ProxyJump`` cannot name the jump host's key).
    """
    args = _options(host_key_options(record["backend"], known_hosts))
    if record.get("identity_file"):
        args += ["-o", "IdentitiesOnly=yes"]
    if record.get("proxy_jump"):
        args += ["-o", "ProxyCommand=" + _proxy_command(record["proxy_jump"], known_hosts)]
    return " ".join(shlex.quote(a) for a in args)


def control_path(record: InstanceRecord, common_args: str) -> str:
    """The ``ansible_control_path`` of an instance: Ansible keys its multiplexed SSH connections
    by address, port and user alone, so two fleets that reach one address differently (a jump
    host, another key or known_hosts) would share a connection, and the second would run over
    the first one's route. The route is part of this path."""
    route = "\0".join(str(part) for part in (
        record["hostname"], record["port"], record["user"], record.get("identity_file"),
        common_args))
    # Short: a Unix socket's path has a limit of about 100 bytes, and ssh adds a suffix while
    # it makes one.
    return "%(directory)s/gf-" + hashlib.sha256(route.encode("utf-8")).hexdigest()[:12]


def hostvars(record: InstanceRecord, root: str | None = None) -> dict[str, Any]:
    """Host variables for an instance record. ``root`` is the state dir (for known_hosts)."""
    known_hosts = state.known_hosts_path(root, record["fleet"]) if root else None
    common_args = ssh_common_args(record, known_hosts)
    variables: dict[str, Any] = {
        "ansible_host": record["hostname"],
        "ansible_port": record["port"],
        "ansible_user": record["user"],
        "ansible_ssh_common_args": common_args,
        "ansible_control_path": control_path(record, common_args),
        "gpufleet_fleet": record["fleet"],
        "gpufleet_instance": record["name"],
        "gpufleet_instance_num": record["num"],
        "gpufleet_backend": record["backend"],
        "gpufleet_region": record["region"],
        "gpufleet_instance_type": record["instance_type"],
        "gpufleet_price": record["price"],
        "gpufleet_spot": record["spot"],
        "gpufleet_internal_ip": record["internal_ip"],
        "gpufleet_network": record.get("network"),
        "gpufleet_blocks": record["blocks"],
        "gpufleet_placement": record["placement"],
        "gpufleet_proxy_jump": record.get("proxy_jump"),
        "gpufleet_created": record.get("created"),
    }
    if record.get("identity_file"):
        variables["ansible_ssh_private_key_file"] = record["identity_file"]
    if record["backend"] == "ssh":
        # The host key policy travels with the host: with Ansible's host_key_checking off (its
        # ansible.cfg, ANSIBLE_HOST_KEY_CHECKING, which ansible-runner turns off when unset),
        # Ansible puts StrictHostKeyChecking=no before the common args, and OpenSSH keeps the
        # first value it reads. Checked per host, Ansible adds nothing and accept-new holds.
        variables["ansible_host_key_checking"] = True
    if record["backend"] == "local":
        variables["ansible_python_interpreter"] = LOCAL_NODE_PYTHON
    return variables


def fleet_group(fleet: str) -> str:
    """The group of a fleet's hosts: ``fleet_<name>``."""
    return group_name("fleet", fleet)


def groups(record: InstanceRecord, gpu_vendor: str | None = None) -> list[str]:
    """The groups an instance belongs to (besides ``all``)."""
    names = [
        "gpufleet",
        fleet_group(record["fleet"]),
        group_name("backend", record["backend"]),
    ]
    if record.get("placement") == "cluster":
        names.append("cluster")
    if gpu_vendor and gpu_vendor != "none":
        names.append(group_name("gpu", gpu_vendor))
    return names


def host_entry(record: InstanceRecord, root: str | None = None, gpu_vendor: str | None = None,
               facts: dict[str, Any] | None = None) -> dict[str, Any]:
    """One instance as a host: ``{"name", "groups", "vars"}``.

    The inventory plugin adds its hosts from these, and the fleet module returns them for
    ``ansible.builtin.add_host``, which takes ``vars`` whole. ``gpu_vendor`` is the vendor the
    fleet's resources ask for. ``facts`` are the host's cached facts, if any: they become
    ``gpufleet_host`` and their GPU vendor, when they name one, picks the ``gpu_<vendor>`` group.
    Variables with no value to give (a key file, the Python interpreter) are left out, not null.
    """
    variables = hostvars(record, root)
    if facts is not None:
        variables["gpufleet_host"] = facts
        gpu_vendor = (facts.get("gpu") or {}).get("vendor") or gpu_vendor
    return {"name": record["name"], "groups": groups(record, gpu_vendor), "vars": variables}


def host_entries(fleet: FleetRecord, root: str | None = None) -> list[dict[str, Any]]:
    """``host_entry`` for each instance of a fleet record that has an address, without cached
    facts (a play measures its hosts afresh)."""
    vendor = spec_gpu_vendor(fleet)
    return [host_entry(i, root, vendor) for i in fleet["instances"] if i.get("hostname")]


def last_peers(fleet: FleetRecord, facts: dict[str, Any]) -> list[dict[str, Any]]:
    """The peers (``{name, address, port}``, as preflight takes them) of a fleet record's
    instances that were ready at the last apply, at the internal IP measured then (``facts``:
    the facts cache, ``{instance name: facts}``)."""
    peers = []
    for inst in fleet.get("instances") or []:
        address = (facts.get(inst.get("name")) or {}).get("internal_ip")
        if address and isinstance(address, str):
            peers.append({"name": inst["name"], "address": address,
                          "port": int(inst.get("port") or 22)})
    return peers


def ready_facts(fleet: FleetRecord) -> dict[str, Any]:
    """``{instance name: resources}`` for the instances of a fleet record that are ready (status
    ``idle``) and were measured: what the facts cache keeps (``state.write_facts``)."""
    return dict((i["name"], i["resources"]) for i in fleet.get("instances") or []
                if i.get("status") == "idle" and i.get("resources"))


def spec_gpu_vendor(config: dict[str, Any] | FleetRecord) -> str | None:
    """The GPU vendor a fleet's resources ask for, or None."""
    resources = config.get("resources") or {}
    gpu = resources.get("gpu") or {}
    count = gpu.get("count") or {}
    maximum = count.get("max")
    if gpu.get("vendor") and (maximum is None or maximum > 0):
        return gpu["vendor"]
    return None


def release_hostvars(config: dict[str, Any], name: str, path: str | None = None,
                     root: str | None = None) -> dict[str, Any]:
    """Connection variables for a host that left an SSH fleet's file: the fleet-level settings.

    A host removed from ``ssh_config.hosts`` is released (its marker removed) with the
    fleet's top-level ``user``, ``port``, ``identity_file`` and ``proxy_jump``, the only ones left.
    """
    ssh = config["ssh_config"]
    base_dir = os.path.dirname(os.path.abspath(path)) if path else None
    jump = ssh.get("proxy_jump")
    if jump:
        jump = dict(jump, identity_file=resolve_path(jump.get("identity_file"), base_dir))
    record = {
        "name": None, "num": None, "fleet": name, "backend": "ssh", "region": "remote",
        "instance_type": None, "price": None, "spot": False, "hostname": None,
        "port": ssh.get("port") or 22, "user": ssh.get("user"),
        "identity_file": resolve_path(ssh.get("identity_file"), base_dir),
        "proxy_jump": jump, "internal_ip": None, "network": None, "blocks": 1,
        "placement": config.get("placement") or "any",
    }
    # Only the connection fields matter here: the host has no name, number or address.
    variables = hostvars(cast(InstanceRecord, record), root)
    return dict((k, v) for k, v in variables.items()
                if k.startswith("ansible_") and k not in ("ansible_host", "ansible_control_path"))
