# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""InfiniBand and RoCE on NVIDIA (Mellanox) ConnectX adapters.

``detect`` looks for ConnectX PCI functions (vendor 15b3, class 0200 Ethernet or 0207
InfiniBand) and for RDMA devices in /sys/class/infiniband, and describes each device's ports
from sysfs: link layer (InfiniBand, or Ethernet for RoCE), state, rate, and for RoCE ports the
index of the RoCE v2 GID. From those it suggests the NCCL and UCX device lists the role writes
into the environment profile.

``verify`` reads what the infiniband role set up (packages, the modules-load.d file, the
memlock limits, the environment profile, the systemd drop-ins) and, with ``probe_hardware``,
the kernel modules in /proc/modules, this process's locked-memory limit and the ports as
``ibstat`` and ``ibv_devinfo`` report them (their output is read by infiniband_tools.py).

PRIVATE to gpufleet.cluster.
"""

from __future__ import annotations

import fnmatch
import os
import re
from typing import Any

from ..facts.probe import System
from . import CheckError, Detection, _packages, result
from .infiniband_tools import (
    parse_ibstat,
    parse_ibv_devinfo,
    parse_limits_conf,
    parse_ofed_info,
    parse_proc_limits,
    parse_proc_modules,
    parse_profile,
    port_state,
    rate_gbps,
)
from ._system import (
    PCI_ROOT,
    VENDOR_AMAZON,
    VENDOR_MELLANOX,
    VENDOR_NVIDIA,
    devices_of,
    pci_devices,
)

SYS_CLASS_INFINIBAND = "/sys/class/infiniband"
PROC_MODULES = "/proc/modules"
PROC_LIMITS = "/proc/self/limits"

# PCI classes of ConnectX functions: 0200 Ethernet controller, 0207 InfiniBand controller.
CONNECTX_CLASSES = ("0200", "0207")
# PCI classes of GPUs: 0300 VGA compatible, 0302 3D controller.
GPU_CLASSES = ("0300", "0302")

INFINIBAND = "InfiniBand"
ETHERNET = "Ethernet"

_NO_DEVICES = "No IB devices found"
_NO_LIST = "Failed to get IB devices list"


def _read(system, path):
    """A sysfs attribute's text, stripped, or None when it cannot be read."""
    try:
        return system.read_text(path).strip()
    except (OSError, IOError, UnicodeDecodeError):
        return None


def _hex_id(text):
    if text is None:
        return None
    text = text.strip().lower()
    return text[2:] if text.startswith("0x") else text


# ---------------------------------------------------------------------------------------------
# Detection (sysfs)


def _gid_index(system, port_dir):
    """The index of the port's RoCE v2 GID, as ``show_gids`` would pick it: the lowest index
    whose type is "RoCE v2" and whose GID is an IPv4-mapped address, else the lowest RoCE v2
    index with any GID. None when the port has no RoCE v2 GID."""
    types_dir = os.path.join(port_dir, "gid_attrs", "types")
    first_v2 = None
    indexes = sorted(int(i) for i in system.listdir(types_dir) if i.isdigit())
    for index in indexes:
        kind = _read(system, os.path.join(types_dir, str(index)))
        if not kind or kind.lower() != "roce v2":
            continue
        gid = _read(system, os.path.join(port_dir, "gids", str(index))) or ""
        digits = gid.replace(":", "").lower()
        if not digits or not digits.strip("0"):
            continue
        if digits.startswith("00000000000000000000ffff"):
            return index
        if first_v2 is None:
            first_v2 = index
    return first_v2


def _sysfs_port(system, device_dir, port):
    port_dir = os.path.join(device_dir, "ports", port)
    link_layer = _read(system, os.path.join(port_dir, "link_layer"))
    phys = _read(system, os.path.join(port_dir, "phys_state"))
    info = {
        "port": int(port),
        "link_layer": link_layer,
        "state": port_state(_read(system, os.path.join(port_dir, "state"))),
        "physical_state": phys.split(":", 1)[-1].strip() if phys else None,
        "rate": rate_gbps(_read(system, os.path.join(port_dir, "rate"))),
    }
    if link_layer == ETHERNET:
        info["roce_v2_gid_index"] = _gid_index(system, port_dir)
    return info


def rdma_devices(system: System, root: str = SYS_CLASS_INFINIBAND) -> list[dict[str, Any]]:
    """The RDMA devices in ``root`` (/sys/class/infiniband): name, kind (``connectx``,
    ``efa``, ``software`` without a PCI device, ``other`` for other vendors' adapters), PCI
    vendor and address, firmware, node GUID and ports."""
    devices = []
    for name in system.listdir(root):
        base = os.path.join(root, name)
        vendor = _hex_id(_read(system, os.path.join(base, "device", "vendor")))
        parent = system.resolve(os.path.join(base, "device"))
        if vendor == VENDOR_MELLANOX:
            kind = "connectx"
        elif vendor == VENDOR_AMAZON or name.startswith("efa"):
            kind = "efa"
        elif vendor is None:
            kind = "software"
        else:
            kind = "other"
        ports = [
            _sysfs_port(system, base, port)
            for port in sorted(system.listdir(os.path.join(base, "ports")),
                               key=lambda p: int(p) if p.isdigit() else 0)
            if port.isdigit()
        ]
        devices.append({
            "name": name,
            "kind": kind,
            "vendor": vendor,
            "pci_address": os.path.basename(parent) if parent else None,
            "firmware": _read(system, os.path.join(base, "fw_ver")),
            "node_guid": _read(system, os.path.join(base, "node_guid")),
            "ports": ports,
        })
    return devices


def nccl_suggestions(devices: list[dict[str, Any]]) -> dict[str, Any]:
    """What the environment profile should say for ``devices`` (the counted RDMA devices):
    ``{"ports": [...], "link_layer", "nccl_ib_hca", "ucx_net_devices", "roce_gid_index"}``.

    The ports are those of the InfiniBand link layer when there are any (a ConnectX port in
    Ethernet mode next to them is the host's front-end network), else the Ethernet (RoCE) ones;
    of those, the active ones when any is active. The GID index is given only for RoCE and only
    when every chosen port has its RoCE v2 GID at the same index."""
    ports = [(device["name"], port) for device in devices for port in device["ports"]]
    infiniband = [p for p in ports if p[1].get("link_layer") == INFINIBAND]
    ethernet = [p for p in ports if p[1].get("link_layer") == ETHERNET]
    chosen = infiniband or ethernet
    link_layer = INFINIBAND if infiniband else (ETHERNET if ethernet else None)
    active = [p for p in chosen if p[1].get("state") == "ACTIVE"]
    chosen = active or chosen
    names = ["%s:%d" % (name, port["port"]) for name, port in chosen]
    gid_index = None
    if link_layer == ETHERNET and chosen:
        indexes = set(port.get("roce_v2_gid_index") for _name, port in chosen)
        if len(indexes) == 1:
            gid_index = indexes.pop()
    return {
        "ports": names,
        "link_layer": link_layer,
        "nccl_ib_hca": ("=" + ",".join(names)) if names else None,
        "ucx_net_devices": ",".join(names) if names else None,
        "roce_gid_index": gid_index,
    }


def detect(system: System, params: dict[str, Any]) -> Detection:
    settings = params.get("settings") or {}
    pci = pci_devices(system, params.get("pci_root") or PCI_ROOT)
    connectx = [
        {key: device[key] for key in ("address", "device", "class", "driver")}
        for device in devices_of(pci, VENDOR_MELLANOX, CONNECTX_CLASSES)
    ]
    gpus = devices_of(pci, VENDOR_NVIDIA, GPU_CLASSES)
    found = rdma_devices(system, settings.get("sys_class_infiniband") or SYS_CLASS_INFINIBAND)
    counted = [d for d in found if d["kind"] in ("connectx", "other")]
    ignored = [d for d in found if d["kind"] not in ("connectx", "other")]
    suggested = nccl_suggestions(counted)
    details = {
        "connectx_pci": connectx,
        "devices": counted,
        "ignored_devices": [{"name": d["name"], "kind": d["kind"]} for d in ignored],
        "link_layers": sorted(set(
            p["link_layer"] for d in counted for p in d["ports"] if p["link_layer"])),
        "roce": suggested["link_layer"] == ETHERNET,
        "nvidia_gpus": len(gpus),
        "nccl_ib_hca": suggested["nccl_ib_hca"],
        "ucx_net_devices": suggested["ucx_net_devices"],
        "roce_gid_index": suggested["roce_gid_index"],
    }
    if counted:
        reason = "found RDMA device(s) %s (%s)" % (
            ", ".join(d["name"] for d in counted),
            ", ".join(details["link_layers"]) or "no ports")
    elif connectx:
        reason = ("found %d ConnectX PCI function(s) (%s) but no RDMA device in %s yet: the "
                  "mlx5_ib driver is not loaded" % (
                      len(connectx), ", ".join(d["address"] for d in connectx),
                      SYS_CLASS_INFINIBAND))
    else:
        reason = ("no ConnectX adapter (PCI vendor %s, class %s) and no RDMA adapter in %s"
                  % (VENDOR_MELLANOX, "/".join(CONNECTX_CLASSES), SYS_CLASS_INFINIBAND))
        if ignored:
            reason += " (not counted: %s)" % ", ".join(
                "%s is %s" % (d["name"], "EFA, see the efa role" if d["kind"] == "efa"
                              else "a software RDMA device") for d in ignored)
    return Detection(bool(counted or connectx), reason, details)


# ---------------------------------------------------------------------------------------------
# Verification


def _read_file(system, path, problems, what):
    if not path:
        return None
    try:
        return system.read_text(path)
    except (OSError, IOError) as exc:
        problems.append("%s %s cannot be read (%s)" % (what, path, exc))
        return None


def _verify_packages(system, settings, facts, problems):
    names = list(settings.get("packages") or [])
    versions = dict(settings.get("package_versions") or {})
    names += [n for n in versions if n not in names]
    if not names:
        facts["packages"] = {}
        return
    dpkg = bool(system.which("dpkg-query"))
    if not dpkg and not system.which("rpm"):
        raise CheckError("neither dpkg-query nor rpm is on the PATH")
    installed = _packages.installed(system, names)
    facts["packages"] = installed
    missing = [n for n in names if n not in installed]
    if missing:
        problems.append("package(s) not installed: %s" % ", ".join(missing))
    for name, want in sorted(versions.items()):
        if name not in installed or not want:
            continue
        have = installed[name]
        if not fnmatch.fnmatchcase(have["version"], str(want) + "*"):
            problems.append("%s %s is installed, not the pinned %s" % (
                name, have["version"], want))
        # dpkg holds; dnf's version lock is not visible to rpm -q.
        if dpkg and not have["held"]:
            problems.append("%s is pinned to %s but not held" % (name, want))


def _verify_files(system, settings, facts, problems):
    path = settings.get("modules_load_file")
    text = _read_file(system, path, problems, "the modules-load.d file")
    if text is not None:
        listed = [line.split("#", 1)[0].strip() for line in text.splitlines()]
        listed = [m for m in listed if m]
        facts["modules_configured"] = listed
        missing = [m for m in settings.get("modules") or [] if m not in listed]
        if missing:
            problems.append("%s does not list %s" % (path, ", ".join(missing)))

    path = settings.get("limits_file")
    text = _read_file(system, path, problems, "the limits file")
    if text is not None:
        memlock = parse_limits_conf(text)
        facts["memlock_configured"] = memlock
        for domain in ("*", "root"):
            values = memlock.get(domain, {})
            if values.get("soft") not in ("unlimited", "-1") or \
                    values.get("hard") not in ("unlimited", "-1"):
                problems.append("%s does not set memlock unlimited (soft and hard) for %s"
                                % (path, domain))

    path = settings.get("profile_file")
    text = _read_file(system, path, problems, "the environment profile")
    if text is not None:
        env = parse_profile(text)
        facts["profile_env"] = env
        for name, want in sorted((settings.get("env") or {}).items()):
            if want is None:
                if name in env:
                    problems.append("%s exports %s, which should be unset" % (path, name))
            elif env.get(name) != str(want):
                problems.append("%s exports %s=%r, expected %r" % (
                    path, name, env.get(name), str(want)))

    dropins = {}
    for path in settings.get("memlock_dropins") or []:
        text = _read_file(system, path, problems, "the systemd drop-in")
        if text is None:
            continue
        ok = bool(re.search(r"^\s*LimitMEMLOCK\s*=\s*infinity\s*$", text, re.M))
        dropins[path] = ok
        if not ok:
            problems.append("%s does not set LimitMEMLOCK=infinity" % path)
    facts["memlock_dropins"] = dropins


def _run_tool(system, name, argv):
    """(status, stdout, stderr) of a tool, or None when it is not installed."""
    path = system.which(name)
    if not path:
        return None
    return system.run([path] + list(argv))


def _verify_hardware(system, settings, expect, facts, problems):
    # Kernel modules.
    try:
        loaded = parse_proc_modules(system.read_text(PROC_MODULES))
    except (OSError, IOError) as exc:
        loaded = None
        problems.append("cannot read %s (%s), so the kernel modules cannot be checked"
                        % (PROC_MODULES, exc))
    if loaded is not None:
        facts["modules_loaded"] = {m: m in loaded for m in settings.get("modules") or []}
        missing = [m for m, ok in facts["modules_loaded"].items() if not ok]
        if missing:
            problems.append("kernel module(s) not loaded: %s" % ", ".join(missing))

    # Locked memory of this (root, login session) process.
    try:
        facts["memlock_limit"] = parse_proc_limits(system.read_text(PROC_LIMITS))
    except (OSError, IOError):
        facts["memlock_limit"] = None
    limit = facts["memlock_limit"]
    if limit and limit["soft"] != "unlimited":
        problems.append("the locked-memory limit is %s bytes, not unlimited (RDMA pins memory)"
                        % limit["soft"])

    # The ports, as the two tools see them.
    devices = {}
    tools = {}
    ran = _run_tool(system, "ibv_devinfo", [])
    if ran is None:
        tools["ibv_devinfo"] = "not installed"
        problems.append("ibv_devinfo is not installed (package ibverbs-utils/libibverbs-utils)")
    else:
        status, out, err = ran
        said = " ".join((err or "").split()) or " ".join((out or "").split())
        if status == 0:
            tools["ibv_devinfo"] = "ok"
            for found in parse_ibv_devinfo(out or ""):
                devices[found["name"]] = {
                    "name": found["name"], "transport": found.get("transport"),
                    "firmware": found.get("fw_ver"), "board_id": found.get("board_id"),
                    "ports": {p["port"]: {
                        "port": p["port"], "state": p.get("state"),
                        "link_layer": p.get("link_layer"), "active_mtu": p.get("active_mtu"),
                        "lid": p.get("port_lid"), "sm_lid": p.get("sm_lid")}
                        for p in found["ports"]},
                }
        elif _NO_DEVICES in said:
            tools["ibv_devinfo"] = "no devices"
        elif _NO_LIST in said:
            tools["ibv_devinfo"] = "no verbs interface: %s" % said
        else:
            tools["ibv_devinfo"] = "failed (exit status %s): %s" % (status, said)
            problems.append("ibv_devinfo failed with exit status %s: %s" % (status, said))

    ran = _run_tool(system, "ibstat", [])
    if ran is None:
        tools["ibstat"] = "not installed"
        problems.append("ibstat is not installed (package infiniband-diags)")
    else:
        status, out, err = ran
        if status == 0:
            tools["ibstat"] = "ok"
            for found in parse_ibstat(out or ""):
                device = devices.setdefault(found["name"], {"name": found["name"], "ports": {}})
                device["ca_type"] = found.get("ca_type")
                device["firmware"] = device.get("firmware") or found.get("firmware")
                for port in found["ports"]:
                    merged = device["ports"].setdefault(port["port"], {"port": port["port"]})
                    for key in ("state", "physical_state", "rate", "link_layer"):
                        if port.get(key) is not None:
                            merged[key] = port[key]
                    if merged.get("lid") is None:
                        merged["lid"] = port.get("base_lid")
        else:
            said = " ".join((err or "").split()) or " ".join((out or "").split())
            tools["ibstat"] = "failed (exit status %s): %s" % (status, said)
            problems.append("ibstat failed with exit status %s: %s" % (status, said))
    facts["tools"] = tools

    listed = []
    for name in sorted(devices):
        device = dict(devices[name])
        device["ports"] = [device["ports"][n] for n in sorted(device["ports"])]
        listed.append(device)
    facts["devices"] = listed
    active = [p for d in listed for p in d["ports"] if p.get("state") == "ACTIVE"]
    facts["active_ports"] = len(active)
    facts["link_layers"] = sorted(set(
        p["link_layer"] for d in listed for p in d["ports"] if p.get("link_layer")))

    if not listed:
        why = tools.get("ibv_devinfo", "")
        problems.append("no RDMA device found (ibv_devinfo: %s)" % why)
    for name, port in ((d["name"], p) for d in listed for p in d["ports"]):
        if port.get("state") != "ACTIVE":
            facts.setdefault("inactive_ports", []).append("%s:%d" % (name, port["port"]))
    _check_expectations(expect, listed, active, problems)


def _check_expectations(expect, listed, active, problems):
    want = expect.get("devices")
    if want is not None and len(listed) < int(want):
        problems.append("%d RDMA device(s) found, expected at least %s" % (len(listed), want))
    want = expect.get("active_ports")
    if want is not None and len(active) < int(want):
        problems.append("%d port(s) ACTIVE, expected at least %s" % (len(active), want))
    want = expect.get("link_layer")
    if want:
        other = sorted(set(p.get("link_layer") for p in active if p.get("link_layer") != want))
        if other or not active:
            problems.append("active ports have link layer %s, expected %s" % (
                ", ".join(str(o) for o in other) or "(no active port)", want))
    want = expect.get("rate")
    if want is not None:
        slow = [p for p in active if p.get("rate") is None or p["rate"] < float(want)]
        if slow:
            problems.append("%d active port(s) run below %s Gb/s (%s)" % (
                len(slow), want, ", ".join(str(p.get("rate")) for p in slow)))


def verify(system: System, params: dict[str, Any]) -> dict[str, Any]:
    settings = params.get("settings") or {}
    expect = params.get("expect") or {}
    unknown = set(expect) - {"devices", "active_ports", "link_layer", "rate"}
    if unknown:
        raise CheckError("unknown expectation(s) for infiniband: %s (known: devices, "
                         "active_ports, link_layer, rate)" % ", ".join(sorted(unknown)))
    stack = settings.get("stack", "inbox")
    if stack not in ("inbox", "doca"):
        raise CheckError("settings.stack must be inbox or doca, not %r" % (stack,))
    problems: list[Any] = []
    facts = {"stack": stack, "probe_hardware": bool(params.get("probe_hardware", True))}
    _verify_packages(system, settings, facts, problems)
    _verify_files(system, settings, facts, problems)
    ofed = _run_tool(system, "ofed_info", ["-s"])
    facts["ofed_version"] = parse_ofed_info(ofed[1] or "") if ofed and ofed[0] == 0 else None
    if facts["probe_hardware"]:
        _verify_hardware(system, settings, expect, facts, problems)
    return result(problems=problems, **facts)
