# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""GPUDirect on Google Cloud: which stack a machine type uses, and what the role set up.

The Compute Engine machine type decides the stack: GPUDirect-TCPX on A3 High and A3 Edge
(4 gVNIC data NICs, a receive-datapath-manager container), GPUDirect-TCPXO on A3 Mega (8 gVNIC
data NICs, its own receive-datapath-manager and the dmabuf import helper), RoCE with the gIB
NCCL plugin on A3 Ultra and A4 (8 RDMA NICs, no receive-datapath-manager).

``settings`` (from the gcp_gpudirect role): ``mode`` (tcpx, tcpxo, roce), ``plugin_dir``,
``plugin_files`` (names that must be in it), ``env_profile`` (the profile file) and ``env`` (the
variables it must export, as written), ``docker`` (the docker binary), ``rxdm_service``,
``rxdm_container``, ``rxdm_ready_line``, ``rxq_configuration`` (TCPX), ``ctrl_interfaces`` and
``data_interfaces`` (checked with the hardware).

``expect``: ``nic_count`` (GPU data NICs; the machine type's count by default) and
``gpu_count``.

PRIVATE to gpufleet.cluster.
"""

from __future__ import annotations

import os
import re
from typing import Any

from . import CheckError, Detection, result
from ._system import (
    GCP_METADATA_URL,
    PCI_ROOT,
    VENDOR_GOOGLE,
    VENDOR_MELLANOX,
    VENDOR_NVIDIA,
    NodeSystem,
    devices_of,
    gcp_machine_type,
    pci_devices,
)

# Machine type -> GPUDirect mode (docs/reference/interconnect.md#gcp-machine-types).
MACHINE_TYPES = {
    "a3-highgpu-8g": "tcpx",
    "a3-edgegpu-8g": "tcpx",
    "a3-megagpu-8g": "tcpxo",
    "a3-ultragpu-8g": "roce",
    "a4-highgpu-8g": "roce",
}

# Per mode: the stack's name, the NICs that carry GPU traffic and how many, the gVNICs the
# machine has in all (primary included), and the interface names of Ubuntu/Debian images.
MODES: dict[str, dict[str, Any]] = {
    "tcpx": {
        "stack": "GPUDirect-TCPX",
        "nic_kind": "gvnic",
        "nic_count": 4,
        "gvnic_count": 5,
        "rxdm": True,
        "ctrl_interfaces": ["enp0s12"],
        "data_interfaces": ["enp6s0", "enp12s0", "enp134s0", "enp140s0"],
    },
    "tcpxo": {
        "stack": "GPUDirect-TCPXO",
        "nic_kind": "gvnic",
        "nic_count": 8,
        "gvnic_count": 9,
        "rxdm": True,
        "ctrl_interfaces": ["enp0s12"],
        "data_interfaces": ["enp6s0", "enp7s0", "enp13s0", "enp14s0",
                            "enp134s0", "enp135s0", "enp141s0", "enp142s0"],
    },
    "roce": {
        "stack": "RoCE with the gIB NCCL plugin",
        "nic_kind": "rdma",
        "nic_count": 8,
        "gvnic_count": 2,
        "rxdm": False,
        "ctrl_interfaces": ["enp0s19", "enp192s20"],
        "data_interfaces": [],
    },
}

GPU_COUNT = 8
# PCI device ids (vendor Google): the gVNIC, and the A3 Mega's LLCM aperture devices.
GVNIC_DEVICE = "0042"
APERTURE_DEVICE = "0084"
ETHERNET_CLASS = "0200"
NVIDIA_GPU_CLASSES = ("0300", "0302")
SYS_CLASS_NET = "/sys/class/net"
DMABUF_DEVICE = "/dev/dmabuf_import_helper"
APERTURE_DIR = "/dev/aperture_devices"

DEFAULTS = {
    "plugin_files": ["libnccl-net.so"],
    "env_profile": "/etc/profile.d/gpufleet-gpudirect.sh",
    "rxdm_service": "gcp-gpudirect-rxdm.service",
    "rxdm_container": "receive-datapath-manager",
    "rxdm_ready_line": "Buffer manager initialization complete",
    "rxdm_log_lines": 2000,
}
PLUGIN_DIRS = {"tcpx": "/var/lib/tcpx/lib64", "tcpxo": "/var/lib/tcpxo/lib64",
               "roce": "/var/lib/gib/lib64"}

_EXPORT = re.compile(r"^\s*export\s+([A-Za-z_][A-Za-z0-9_]*)=(.*)$")


def mode_of(machine_type: str | None) -> str | None:
    """The GPUDirect mode of a machine type (``tcpx``, ``tcpxo``, ``roce``) or None."""
    return MACHINE_TYPES.get((machine_type or "").strip())


def _supported():
    by_mode = {}
    for machine_type in sorted(MACHINE_TYPES):
        by_mode.setdefault(MACHINE_TYPES[machine_type], []).append(machine_type)
    return "; ".join("%s on %s" % (MODES[mode]["stack"], ", ".join(types))
                     for mode, types in sorted(by_mode.items()))


def detect(system: NodeSystem, params: dict[str, Any]) -> Detection:
    base_url = params.get("gcp_metadata_url") or GCP_METADATA_URL
    machine_type, why = gcp_machine_type(system, base_url)
    if machine_type is None:
        return Detection(False, "not a Compute Engine VM with GPUDirect: %s" % why,
                         {"machine_type": None})
    mode = mode_of(machine_type)
    if mode is None:
        return Detection(
            False,
            "machine type %s has no GPUDirect stack (%s)" % (machine_type, _supported()),
            {"machine_type": machine_type})
    info = MODES[mode]
    details = {
        "machine_type": machine_type,
        "mode": mode,
        "stack": info["stack"],
        "nic_kind": info["nic_kind"],
        "expected_nic_count": info["nic_count"],
        "expected_gvnic_count": info["gvnic_count"],
        "rxdm": info["rxdm"],
        "ctrl_interfaces": list(info["ctrl_interfaces"]),
        "data_interfaces": list(info["data_interfaces"]),
    }
    return Detection(
        True,
        "machine type %s uses %s over %d %s NICs" % (
            machine_type, info["stack"], info["nic_count"],
            "gVNIC" if info["nic_kind"] == "gvnic" else "RDMA"),
        details)


def parse_env_profile(text: str) -> dict[str, str]:
    """The variables a profile exports, as ``{name: value}`` with the value as written between
    its quotes (``export NAME="VALUE"``, ``export NAME='VALUE'`` or ``export NAME=VALUE``);
    comments, blank lines and other statements are skipped."""
    env = {}
    for line in text.splitlines():
        match = _EXPORT.match(line)
        if not match:
            continue
        name, value = match.group(1), match.group(2).strip()
        if len(value) >= 2 and value[0] == value[-1] and value[0] in "\"'":
            quote, value = value[0], value[1:-1]
            if quote == '"':
                value = re.sub(r'\\([\\"`$])', r"\1", value)
        env[name] = value
    return env


def _settings(params):
    settings = dict(DEFAULTS)
    settings.update({k: v for k, v in (params.get("settings") or {}).items() if v is not None})
    mode = settings.get("mode")
    if mode not in MODES:
        raise CheckError("settings.mode must be one of %s, not %r"
                         % (", ".join(sorted(MODES)), mode))
    settings.setdefault("plugin_dir", PLUGIN_DIRS[mode])
    for key in ("ctrl_interfaces", "data_interfaces"):
        settings.setdefault(key, list(MODES[mode][key]))
    return settings


def _systemctl(system, verb, unit):
    systemctl = system.which("systemctl")
    if not systemctl:
        return "no systemctl"
    _rc, out, err = system.run([systemctl, verb, unit])
    lines = (out or err or "").strip().splitlines()
    return lines[0].strip() if lines else "unknown"


def _read(system, path):
    try:
        return system.read_text(path)
    except (IOError, OSError):
        return None


def _check_machine(system, params, mode, facts, problems):
    machine_type, why = gcp_machine_type(system, params.get("gcp_metadata_url") or GCP_METADATA_URL)
    facts["machine_type"] = machine_type
    if machine_type is None:
        facts["machine_type_note"] = why
        return
    found = mode_of(machine_type)
    if found is not None and found != mode:
        problems.append("machine type %s uses %s, but the host is set up for %s" % (
            machine_type, MODES[found]["stack"], MODES[mode]["stack"]))


def _check_plugin(system, settings, facts, problems):
    plugin_dir = settings["plugin_dir"]
    present = system.listdir(plugin_dir)
    missing = [name for name in settings["plugin_files"] if name not in present]
    facts["plugin_dir"] = plugin_dir
    facts["plugin_files"] = present
    facts["plugin_missing"] = missing
    if not present:
        problems.append("the NCCL plugin directory %s is missing or empty (the plugin "
                        "installer has not run)" % plugin_dir)
    elif missing:
        problems.append("%s lacks %s" % (plugin_dir, ", ".join(missing)))


def _check_env(system, settings, facts, problems):
    path = settings["env_profile"]
    text = _read(system, path)
    facts["env_profile"] = path
    if text is None:
        facts["env"] = {}
        problems.append("the NCCL environment profile %s is missing" % path)
        return
    env = parse_env_profile(text)
    facts["env"] = env
    for name, value in sorted((settings.get("env") or {}).items()):
        if name not in env:
            problems.append("%s does not export %s" % (path, name))
        elif env[name] != str(value):
            problems.append("%s exports %s=%s, not %s" % (path, name, env[name], value))


def _docker_logs(system, settings):
    docker = settings.get("docker") or system.which("docker")
    if not docker or not system.exists(docker):
        return None, "docker is not installed"
    rc, out, err = system.run([docker, "logs", "--tail", str(settings["rxdm_log_lines"]),
                               settings["rxdm_container"]])
    if rc != 0:
        return None, (err or out or "docker logs exited %d" % rc).strip()
    return (out or "") + (err or ""), None


def _check_rxdm(system, settings, facts, problems):
    service = settings["rxdm_service"]
    active = _systemctl(system, "is-active", service)
    enabled = _systemctl(system, "is-enabled", service)
    facts["rxdm"] = {"service": service, "active": active, "enabled": enabled,
                     "container": settings["rxdm_container"], "ready": False}
    if active != "active":
        problems.append("the receive-datapath-manager unit %s is %s, not active" % (service, active))
    if enabled != "enabled":
        problems.append("the receive-datapath-manager unit %s is %s, not enabled" % (
            service, enabled))
    logs, why = _docker_logs(system, settings)
    if logs is None:
        facts["rxdm"]["log_error"] = why
        problems.append("cannot read the logs of the %s container: %s" % (
            settings["rxdm_container"], why))
        return
    ready = settings["rxdm_ready_line"] in logs
    facts["rxdm"]["ready"] = ready
    if not ready:
        problems.append("the %s container's log lacks %r: the receive-datapath-manager has not "
                        "finished initializing" % (settings["rxdm_container"],
                                                   settings["rxdm_ready_line"]))


def _count(value, what):
    try:
        return int(value)
    except (TypeError, ValueError) as exc:
        raise CheckError("expect.%s must be a number, not %r" % (what, value)) from exc


def _check_hardware(system, params, mode, settings, facts, problems):
    expect = params.get("expect") or {}
    devices = pci_devices(system, params.get("pci_root") or PCI_ROOT)
    gvnics = [d for d in devices_of(devices, VENDOR_GOOGLE, [ETHERNET_CLASS])
              if d["device"] == GVNIC_DEVICE]
    rdma = devices_of(devices, VENDOR_MELLANOX, [ETHERNET_CLASS, "0207"])
    gpus = devices_of(devices, VENDOR_NVIDIA, NVIDIA_GPU_CLASSES)
    info = MODES[mode]
    expected_nics = _count(expect.get("nic_count", info["nic_count"]), "nic_count")
    expected_gpus = _count(expect.get("gpu_count", GPU_COUNT), "gpu_count")
    if info["nic_kind"] == "gvnic":
        nic_count = max(len(gvnics) - (info["gvnic_count"] - info["nic_count"]), 0)
        kind = "gVNIC data NICs (gVNICs besides the primary one)"
    else:
        nic_count = len(rdma)
        kind = "RDMA NICs (Mellanox ConnectX functions)"
    facts.update({"gvnic_count": len(gvnics), "rdma_nic_count": len(rdma), "nic_count": nic_count,
                  "expected_nic_count": expected_nics, "gpu_count": len(gpus),
                  "expected_gpu_count": expected_gpus})
    if nic_count != expected_nics:
        problems.append("found %d %s, expected %d for %s" % (nic_count, kind, expected_nics,
                                                             info["stack"]))
    if len(gpus) != expected_gpus:
        problems.append("found %d NVIDIA GPUs, expected %d" % (len(gpus), expected_gpus))
    interfaces = list(settings["ctrl_interfaces"]) + list(settings["data_interfaces"])
    missing = [name for name in interfaces
               if not system.exists(os.path.join(SYS_CLASS_NET, name))]
    facts["missing_interfaces"] = missing
    if missing:
        problems.append("network interfaces %s are missing (the NCCL environment names them)"
                        % ", ".join(missing))
    if mode == "tcpxo":
        facts["dmabuf_import_helper"] = system.exists(DMABUF_DEVICE)
        if not facts["dmabuf_import_helper"]:
            problems.append("%s is missing: the import-helper kernel module is not loaded"
                            % DMABUF_DEVICE)
        apertures = [d for d in devices_of(devices, VENDOR_GOOGLE)
                     if d["device"] == APERTURE_DEVICE]
        mounted = system.listdir(APERTURE_DIR)
        facts["aperture_devices"] = {"pci": len(apertures), "mounted": len(mounted)}
        if len(mounted) < len(apertures) or not mounted:
            problems.append("%s holds %d of the %d aperture devices (udev rule "
                            "00-a3-megagpu.rules)" % (APERTURE_DIR, len(mounted), len(apertures)))


def verify(system: NodeSystem, params: dict[str, Any]) -> dict[str, Any]:
    settings = _settings(params)
    mode = settings["mode"]
    info = MODES[mode]
    problems: list[Any] = []
    facts = {"mode": mode, "stack": info["stack"]}
    _check_machine(system, params, mode, facts, problems)
    _check_plugin(system, settings, facts, problems)
    if mode == "tcpx" and settings.get("rxq_configuration"):
        facts["rxq_configuration"] = settings["rxq_configuration"]
        if not system.exists(settings["rxq_configuration"]):
            problems.append("the RxDM queue topology %s is missing"
                            % settings["rxq_configuration"])
    if info["rxdm"]:
        _check_rxdm(system, settings, facts, problems)
    _check_env(system, settings, facts, problems)
    if params.get("probe_hardware", True):
        _check_hardware(system, params, mode, settings, facts, problems)
    return result(problems=problems, **facts)
