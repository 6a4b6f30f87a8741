# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Readers of what the InfiniBand tools and files print: ``ibstat``, ``ibv_devinfo``,
``ofed_info``, the memlock limits in limits.d, the environment profile, /proc/self/limits and
/proc/modules; and the one spelling of port states and rates the facts use. The infiniband
check (infiniband.py) reads the host with them.

PRIVATE to gpufleet.cluster.
"""

from __future__ import annotations

import re
import shlex
from typing import Any

from . import CheckError

# Port states as ibstat prints them (infiniband-diags ibstat.c) and as ibv_devinfo prints them
# (libibverbs devinfo.c), and as sysfs shows them ("4: ACTIVE"): one spelling for the facts.
_STATES = {
    "down": "DOWN", "port_down": "DOWN",
    "initializing": "INIT", "init": "INIT", "port_init": "INIT",
    "armed": "ARMED", "port_armed": "ARMED",
    "active": "ACTIVE", "port_active": "ACTIVE",
    "active_defer": "ACTIVE",
}


def port_state(text: str | None) -> str | None:
    """``ACTIVE``, ``DOWN``, ``INIT``, ``ARMED`` from any of the tools' spellings, or the text
    itself (upper case) when it is none of them."""
    word = (text or "").strip()
    if ":" in word:             # sysfs: "4: ACTIVE"
        word = word.split(":", 1)[1].strip()
    word = word.split(" (", 1)[0].strip()   # ibv_devinfo: "PORT_ACTIVE (4)"
    return _STATES.get(word.lower(), word.upper() or None)


def rate_gbps(text: str | None) -> int | float | None:
    """The rate in Gb/s from sysfs ("400 Gb/sec (4X NDR)") or ibstat ("400", "2.5",
    "10 (FDR10)"); an int when whole. None when there is no number."""
    match = re.match(r"\s*([0-9]+(?:\.[0-9]+)?)", text or "")
    if not match:
        return None
    value = float(match.group(1))
    return int(value) if value.is_integer() else value


def parse_ibstat(text: str) -> list[dict[str, Any]]:
    """``ibstat`` output (infiniband-diags) as a list of CAs: ``{"name", "node_type",
    "ca_type", "ports_count", "firmware", "hardware", "node_guid", "system_image_guid",
    "ports": [{"port", "state", "physical_state", "rate", "base_lid", "lmc", "sm_lid",
    "capability_mask", "port_guid", "link_layer"}]}``. Raises CheckError on text that is not
    ibstat's format."""
    cas: list[dict[str, Any]] = []
    ca: Any = None
    port: Any = None
    ca_fields: dict[str, tuple[str, Any]] = {
        "number of ports": ("ports_count", int), "firmware version": ("firmware", str),
        "hardware version": ("hardware", str), "node guid": ("node_guid", str),
        "system image guid": ("system_image_guid", str),
    }
    port_fields: dict[str, tuple[str, Any]] = {
        "state": ("state", port_state), "physical state": ("physical_state", str),
        "rate": ("rate", rate_gbps), "base lid": ("base_lid", int), "lmc": ("lmc", int),
        "sm lid": ("sm_lid", int), "capability mask": ("capability_mask", str),
        "port guid": ("port_guid", str), "link layer": ("link_layer", str),
    }
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line:
            continue
        header = re.match(r"^(CA|Switch|Router|iWARP RNIC|\?\?\?) '([^']+)'$", line)
        if header and not raw[:1].isspace():
            ca = {"name": header.group(2), "node_type": header.group(1), "ports": []}
            cas.append(ca)
            port = None
            continue
        if ca is None:
            raise CheckError("ibstat line %d comes before any CA header: %r" % (number, line))
        port_header = re.match(r"^Port (\d+):$", line)
        if port_header:
            port = {"port": int(port_header.group(1))}
            ca["ports"].append(port)
            continue
        if ":" not in line:
            raise CheckError("ibstat line %d is not 'Key: value': %r" % (number, line))
        key, value = (part.strip() for part in line.split(":", 1))
        key = key.lower()
        if key.endswith(" type") and port is None:
            ca["ca_type"] = value
            continue
        fields, target = (port_fields, port) if port is not None else (ca_fields, ca)
        if key in fields:
            name, convert = fields[key]
            try:
                target[name] = convert(value)
            except ValueError:
                raise CheckError("ibstat line %d: %s is not a number: %r"
                                 % (number, key, value)) from None
    return cas


def parse_ibv_devinfo(text: str) -> list[dict[str, Any]]:
    """``ibv_devinfo`` output (libibverbs, with or without -v) as a list of devices:
    ``{"name", "transport", "fw_ver", "node_guid", "sys_image_guid", "vendor_id",
    "vendor_part_id", "hw_ver", "board_id", "phys_port_cnt", "ports": [{"port", "state",
    "max_mtu", "active_mtu", "sm_lid", "port_lid", "link_layer", ...}]}``. Values with a
    code in parentheses ("PORT_ACTIVE (4)", "4096 (5)") keep the text before it; states are
    normalized (ACTIVE, DOWN, INIT, ARMED). Raises CheckError on text that is not
    ibv_devinfo's format."""
    devices: list[dict[str, Any]] = []
    device: Any = None
    port: Any = None
    numbers = ("phys_port_cnt", "vendor_part_id", "sm_lid", "port_lid", "max_mtu",
               "active_mtu")
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line:
            continue
        if ":" not in line:
            if device is not None:
                continue        # -v prints flags and notes on lines of their own
            raise CheckError("ibv_devinfo line %d is not 'key: value': %r" % (number, line))
        key, value = (part.strip() for part in line.split(":", 1))
        if key == "hca_id":
            device = {"name": value, "ports": []}
            devices.append(device)
            port = None
            continue
        if device is None:
            raise CheckError("ibv_devinfo line %d comes before any hca_id: %r" % (number, line))
        if key == "port":
            try:
                port = {"port": int(value)}
            except ValueError:
                raise CheckError("ibv_devinfo line %d: port is not a number: %r"
                                 % (number, value)) from None
            device["ports"].append(port)
            continue
        if key.startswith("GID["):
            port.setdefault("gids", {})[int(key[4:-1])] = value
            continue
        target = port if port is not None else device
        plain = value.split(" (", 1)[0].strip()
        if key == "state":
            target[key] = port_state(value)
        elif key == "transport":
            target[key] = plain
        elif key in numbers:
            try:
                target[key] = int(plain)
            except ValueError:
                target[key] = plain
        else:
            target[key] = plain if key.endswith("_state") else value
    return devices


def parse_ofed_info(text: str) -> str | None:
    """The version line of ``ofed_info -s`` ("OFED-internal-25.07-0.9.7:",
    "MLNX_OFED_LINUX-24.10-1.1.4.0:") without its colon, or None."""
    for line in text.splitlines():
        line = line.strip()
        if line:
            return line.rstrip(":").strip() or None
    return None


def parse_limits_conf(text: str) -> dict[str, dict[str, str]]:
    """memlock entries of a limits.conf(5) file: {domain: {"soft": value, "hard": value}}
    (``-`` sets both)."""
    found: dict[str, Any] = {}
    for line in text.splitlines():
        line = line.split("#", 1)[0].strip()
        fields = line.split()
        if len(fields) != 4 or fields[2] != "memlock":
            continue
        domain, kind, _item, value = fields
        kinds = ("soft", "hard") if kind == "-" else (kind,)
        for each in kinds:
            found.setdefault(domain, {})[each] = value
    return found


def parse_profile(text: str) -> dict[str, str]:
    """``export NAME=VALUE`` lines of a shell profile (values shell-unquoted): a dict."""
    env = {}
    for line in text.splitlines():
        line = line.strip()
        if not line.startswith("export "):
            continue
        try:
            words = shlex.split(line[len("export "):], comments=True)
        except ValueError as exc:
            raise CheckError("cannot read the profile line %r: %s" % (line, exc)) from exc
        for word in words:
            if "=" in word:
                name, value = word.split("=", 1)
                env[name] = value
    return env


def parse_proc_limits(text: str) -> dict[str, int | str] | None:
    """The locked-memory limit of /proc/<pid>/limits: {"soft", "hard"} each "unlimited" or a
    number of bytes, or None when the line is missing."""
    for line in text.splitlines():
        if line.startswith("Max locked memory"):
            fields = line[len("Max locked memory"):].split()
            if len(fields) >= 2:
                return {k: (v if v == "unlimited" else int(v))
                        for k, v in (("soft", fields[0]), ("hard", fields[1]))}
    return None


def parse_proc_modules(text: str) -> set[str]:
    """Names of the loaded kernel modules in /proc/modules."""
    return set(line.split()[0] for line in text.splitlines() if line.strip())
