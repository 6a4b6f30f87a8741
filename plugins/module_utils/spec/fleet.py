# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""``type: fleet``: backend fleets (``nodes``) and SSH fleets (``ssh_config``)."""

from __future__ import annotations

import ipaddress
from typing import Any

from ..core.text import shorten
from . import common, grammar
from ._errors import INVALID, Ctx, Invalid, describe, show
from ._types import (
    list_of,
    parse_fields,
    parse_object,
    want_choice,
    want_int,
    want_mapping,
    want_nonempty_str,
    want_str,
)
from .env import parse_env

PLACEMENTS = ("any", "cluster")
DEFAULT_FLEET_IDLE_DURATION = 3 * 24 * 3600

# Fields only a backend fleet (one with `nodes`) may set.
BACKEND_ONLY = (
    "nodes", "reservation", "resources", "backends", "regions", "availability_zones",
    "instance_types", "spot_policy", "retry", "max_price", "idle_duration", "tags",
    "backend_options",
)


def parse_placement(value: object, ctx: Ctx) -> str:
    if value is None:
        return "any"
    return want_choice(value, PLACEMENTS)


def parse_blocks(value: object, ctx: Ctx) -> int | str:
    if value == "auto":
        return "auto"
    if isinstance(value, str) and not value.strip().lstrip("+").isdigit():
        raise Invalid("blocks must be a whole number of at least 1 or auto, got %s" % show(value))
    try:
        return want_int(value, minimum=1, what="a whole number of at least 1, or auto")
    except Invalid as exc:
        raise Invalid("blocks: " + exc.message) from exc


def _node_count(value, name):
    if value is None:
        return None
    try:
        return want_int(value, what="a whole number")
    except Invalid as exc:
        raise Invalid("nodes.%s: %s" % (name, exc.message)) from exc


def parse_nodes(value: object, ctx: Ctx) -> Any:
    """``nodes: 2``, ``"1..4"``, ``"..2"``, ``"1.."`` or ``{min, target, max}``."""
    if value is None:
        return None
    if isinstance(value, bool) or isinstance(value, float):
        raise Invalid(
            "expected a number of nodes, a range such as 1..4, or {min, target, max}, got %s"
            % describe(value)
        )
    if isinstance(value, str) and ".." in value:
        parts = value.replace(" ", "").split("..")
        if len(parts) != 2:
            raise Invalid("invalid range %s: write min..max, min.. or ..max" % show(value))
        low = _node_count(parts[0] or None, "min")
        high = _node_count(parts[1] or None, "max")
        spec = {"min": low, "target": None, "max": high}
    elif isinstance(value, (str, int)):
        count = _node_count(value, "min")
        spec = {"min": count, "target": None, "max": count}
    elif isinstance(value, dict):
        data = want_mapping(value)
        fields = {
            key: (lambda v, c, k=key: _node_count(v, k))
            for key in ("min", "target", "max")
        }
        parsed = parse_fields(data, ctx, fields)
        if any(v is INVALID for v in parsed.values()):
            return INVALID
        spec = {"min": parsed.get("min"), "target": parsed.get("target"), "max": parsed.get("max")}
    else:
        raise Invalid(
            "expected a number of nodes, a range such as 1..4, or {min, target, max}, got %s"
            % describe(value)
        )
    if spec["min"] is None:
        spec["min"] = 0
    if spec["target"] is None:
        spec["target"] = spec["min"]
    low, target, high = spec["min"], spec["target"], spec["max"]
    if low < 0:
        raise Invalid("min cannot be negative, got %d" % low)
    if target < low:
        raise Invalid("target must not be less than min (target %d, min %d)" % (target, low))
    if high is not None and high < low:
        raise Invalid("max must not be less than min (max %d, min %d)" % (high, low))
    if high is not None and high < target:
        raise Invalid("max must not be less than target (max %d, target %d)" % (high, target))
    return spec


def _port(value, ctx):
    if value is None:
        return None
    return want_int(value, minimum=1, maximum=65535, what="a port number")


def _no_ssh_key(value, ctx):
    raise Invalid(
        "ssh_key is filled in by the dstack CLI from identity_file; set identity_file instead"
    )


def _opt_str(value, ctx):
    return None if value is None else want_nonempty_str(value)


def parse_proxy_jump(value: object, ctx: Ctx) -> Any:
    if value is None:
        return None
    data = want_mapping(value, "a mapping with hostname, user, identity_file and optional port")
    fields = {
        "hostname": lambda v, c: want_nonempty_str(v),
        "port": _port,
        "user": lambda v, c: want_nonempty_str(v),
        "identity_file": lambda v, c: want_nonempty_str(v),
        "ssh_key": _no_ssh_key,
    }
    parsed = parse_object(
        data, ctx, fields, ("hostname", "user", "identity_file"), owner="proxy_jump"
    )
    if parsed is INVALID:
        return INVALID
    return {
        "hostname": parsed["hostname"],
        "port": parsed.get("port") or 22,
        "user": parsed["user"],
        "identity_file": parsed["identity_file"],
    }


def parse_internal_ip(value: object, ctx: Ctx) -> str | None:
    if value is None:
        return None
    text = want_str(value, "an IP address")
    try:
        address = ipaddress.ip_address(text)
    except ValueError as exc:
        raise Invalid("invalid IP address %s" % show(text)) from exc
    if not address.is_private:
        raise Invalid(
            "IP address %s is not private: internal_ip is the address hosts use to reach each "
            "other on a private network" % text
        )
    return text


def parse_network(value: object, ctx: Ctx) -> str | None:
    if value is None:
        return None
    text = want_str(value, "a network such as 10.0.0.0/24")
    try:
        network = ipaddress.ip_network(text, strict=False)
    except ValueError as exc:
        raise Invalid("failed to parse network %s: write <ip>/<mask>, e.g. 10.0.0.0/24" % show(text)) from exc
    if not network.is_private:
        raise Invalid(
            "public network %s is specified when a private network is required" % text
        )
    return text


HOST_FIELDS = {
    "hostname": lambda v, c: want_nonempty_str(v),
    "port": _port,
    "user": _opt_str,
    "identity_file": _opt_str,
    "proxy_jump": parse_proxy_jump,
    "internal_ip": parse_internal_ip,
    "blocks": lambda v, c: None if v is None else parse_blocks(v, c),
    "ssh_key": _no_ssh_key,
}


def parse_host(value: object, ctx: Ctx) -> Any:
    if isinstance(value, str):
        if not value:
            raise Invalid("a host must not be an empty string")
        return {"hostname": value}
    data = want_mapping(value, "a hostname or a mapping with hostname and its settings")
    return parse_object(data, ctx, HOST_FIELDS, ("hostname",), owner="a host given as a mapping")


SSH_FIELDS = {
    "user": _opt_str,
    "port": _port,
    "identity_file": _opt_str,
    "proxy_jump": parse_proxy_jump,
    "network": parse_network,
    # A lambda because _parse_hosts is defined below.
    "hosts": list_of(parse_host, "a list of hosts"),
    "ssh_key": _no_ssh_key,
}


def _copy(mapping):
    return dict(mapping) if mapping is not None else None


def parse_ssh_config(value: object, ctx: Ctx, blocks: int | str) -> Any:
    """Parse ``ssh_config`` and merge each host with the fleet-wide defaults.

    Each host in the result has every connection setting resolved as dstack resolves it: its own
    value, else the ssh_config value (port then 22), and ``blocks`` from the host or the fleet.
    """
    data = want_mapping(value, "a mapping with hosts and connection settings")
    parsed = parse_object(
        data, ctx, SSH_FIELDS, ("hosts",), owner="ssh_config",
        hint=": the list of servers to add to the fleet",
    )
    if parsed is INVALID:
        return INVALID
    hosts = parsed["hosts"]
    if not hosts:
        raise Invalid("ssh_config.hosts must list at least one host", ("hosts",))
    merged = []
    seen: dict[tuple[str, int], int] = {}
    mark = ctx.mark()
    for index, host in enumerate(hosts):
        host_ctx = ctx.child("hosts").child(index)
        name = host["hostname"]
        port = host.get("port") or parsed.get("port") or 22
        user = host.get("user") or parsed.get("user")
        key = host.get("identity_file") or parsed.get("identity_file")
        # One address may front several servers on different ports (port-forwarded VMs), so only
        # the same address and port twice is the same server twice.
        if (name, port) in seen:
            host_ctx.error(
                "host %s port %d is listed twice (also at hosts[%d]); each server can be in a "
                "fleet once" % (shorten(name), port, seen[(name, port)])
            )
        seen.setdefault((name, port), index)
        if not user:
            host_ctx.error(
                "no SSH user for host %s: set user on the host or ssh_config.user" % shorten(name)
            )
        if not key:
            host_ctx.error(
                "no SSH key for host %s: set identity_file on the host or "
                "ssh_config.identity_file" % shorten(name)
            )
        merged.append(
            {
                "hostname": name,
                "port": port,
                "user": user,
                "identity_file": key,
                "proxy_jump": _copy(host.get("proxy_jump") or parsed.get("proxy_jump")),
                "internal_ip": host.get("internal_ip"),
                "blocks": host["blocks"] if host.get("blocks") is not None else blocks,
            }
        )
    with_ip = [h for h in merged if h["internal_ip"]]
    if with_ip and len(with_ip) != len(merged):
        missing = [h["hostname"] for h in merged if not h["internal_ip"]]
        ctx.error(
            "internal_ip must be specified for all hosts or none; missing on %s"
            % ", ".join(missing),
            ("hosts",),
        )
    if with_ip and parsed.get("network"):
        ctx.error(
            "internal_ip is mutually exclusive with network: pick addresses per host or by network",
            ("network",),
        )
    if ctx.failed_since(mark):
        return INVALID
    return {
        "user": parsed.get("user"),
        "port": parsed.get("port"),
        "identity_file": parsed.get("identity_file"),
        "proxy_jump": parsed.get("proxy_jump"),
        "network": parsed.get("network"),
        "hosts": merged,
    }


def _fleet_resources(value, ctx):
    if value is None:
        return None
    return grammar.parse_resources(value, ctx, default_image=False)


FIELDS = {
    "type": lambda v, c: v,
    "name": common.parse_name,
    "placement": parse_placement,
    "blocks": parse_blocks,
    "nodes": parse_nodes,
    "reservation": common.parse_optional_str,
    "resources": _fleet_resources,
    "backends": common.parse_backends,
    "regions": common.parse_optional_str_list,
    "availability_zones": common.parse_optional_str_list,
    "instance_types": common.parse_optional_str_list,
    "spot_policy": common.parse_spot_policy,
    "retry": common.parse_retry,
    "max_price": common.parse_max_price,
    "idle_duration": grammar.idle_duration(None),
    "tags": common.parse_tags,
    "backend_options": common.parse_backend_options,
    "env": parse_env,
    # ssh_config is parsed below, once `blocks` is known.
    "ssh_config": lambda v, c: v,
}


def parse_fleet(data: dict[str, Any], ctx: Ctx) -> dict[str, Any]:
    parsed = parse_fields(data, ctx, FIELDS, unknown=common.explain_removed)
    blocks = parsed.get("blocks", 1)
    has_ssh = data.get("ssh_config") is not None
    has_nodes = data.get("nodes") is not None

    if has_ssh and has_nodes:
        ctx.child("nodes").error(
            "ssh_config and nodes are mutually exclusive: a fleet either adopts the SSH hosts "
            "listed in ssh_config or provisions nodes from backends"
        )
    elif not has_ssh and not has_nodes:
        ctx.error(
            "no ssh_config or nodes specified: set nodes (e.g. nodes: 2) to provision a backend "
            "fleet, or ssh_config.hosts to adopt existing servers"
        )

    if has_ssh and not has_nodes:
        for key in BACKEND_ONLY:
            if data.get(key) is not None:
                ctx.child(key).error(
                    "SSH fleet configuration does not support %s: it applies to fleets that "
                    "provision nodes from backends; remove it" % key
                )
    if has_nodes and parsed.get("env"):
        ctx.child("env").error(
            "env is supported for SSH fleets only (fleets with ssh_config); remove it"
        )

    ssh_config = None
    if has_ssh:
        ssh_config = ctx.run(
            "ssh_config",
            lambda v, c: parse_ssh_config(v, c, blocks if blocks is not INVALID else 1),
            data["ssh_config"],
        )

    fleet = {
        "type": "fleet",
        "name": parsed.get("name"),
        "fleet_type": "ssh" if has_ssh else "backend",
        "placement": parsed.get("placement", "any"),
        "blocks": blocks,
        "nodes": parsed.get("nodes"),
        "ssh_config": ssh_config,
        "env": parsed.get("env", {}),
    }
    if has_ssh:
        for key in BACKEND_ONLY:
            fleet.setdefault(key, None)
    else:
        fleet.update(
            {
                "resources": parsed.get("resources") or grammar.unconstrained_resources(),
                "backends": parsed.get("backends"),
                "regions": parsed.get("regions"),
                "availability_zones": parsed.get("availability_zones"),
                "instance_types": parsed.get("instance_types"),
                "spot_policy": parsed.get("spot_policy", "on-demand"),
                "retry": parsed.get("retry"),
                "max_price": parsed.get("max_price"),
                # None when unset: the fleet's own instances then keep
                # DEFAULT_FLEET_IDLE_DURATION, those a run makes the run's (fleets/idle.py).
                "idle_duration": parsed.get("idle_duration"),
                "reservation": parsed.get("reservation"),
                "tags": parsed.get("tags"),
                "backend_options": parsed.get("backend_options"),
            }
        )
    return fleet
