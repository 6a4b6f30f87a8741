# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The nvidia component: NVIDIA driver, container toolkit, persistenced and fabric manager.

``detect`` looks for NVIDIA GPUs among the PCI devices (vendor 10de, class 0300 VGA or 0302 3D
controller) and for NVSwitches (vendor 10de, class 0680 "other bridge"), which call for the
fabric manager.

``verify`` reads what the gpufleet.cluster.nvidia role leaves behind. Without
``probe_hardware`` only software state is read: packages (``dpkg-query`` or ``rpm``) and their
holds (dpkg selections, the dnf versionlock list), the kernel module's version (``modinfo``),
``/etc/docker/daemon.json``, the nouveau blacklist, the systemd units, and the role's reboot
marker. With ``probe_hardware`` it also runs ``nvidia-smi`` (GPU count, names, driver and CUDA
versions, persistence mode, fabric state).

``settings`` (all optional):
    package_manager         ``apt`` or ``dnf``; default: ``apt`` when dpkg-query is there
    driver_packages         the driver packages the role installed (empty: not managed)
    driver_hold             whether they must be held (dpkg hold / dnf versionlock)
    fabricmanager_packages  the fabric manager packages the role installed
    toolkit_packages        the container toolkit packages the role installed
    toolkit_hold            whether they must be held
    docker_wiring           whether Docker must have the nvidia runtime (when Docker is there)
    docker_config           Docker's daemon.json (default /etc/docker/daemon.json)
    docker_default_runtime  true: nvidia must be the default runtime; false: it must not be;
                            null: either
    nouveau_blacklist       the modprobe.d file that blacklists nouveau ("" : not checked)
    persistenced            whether nvidia-persistenced must be enabled (and, with hardware,
                            persistence mode on)
    fabricmanager           whether nvidia-fabricmanager must be enabled (and, with hardware,
                            active with every GPU's fabric state completed)
    persistenced_service, fabricmanager_service   unit names
    reboot_marker           the file the role writes when a reboot is due

``expect`` (all optional): ``gpu_count`` (hardware), ``driver_branch`` (e.g. "570"),
``driver_version`` (a version prefix), ``toolkit_version`` (a version prefix).

PRIVATE to gpufleet.cluster.
"""

from __future__ import annotations

import json
import re
from typing import Any

from ..facts.probe import System
from ..facts import NVIDIA_SMI_ARGS, ToolOutputError, parse_nvidia_smi
from . import CheckError, Detection, result
from ._system import PCI_ROOT, VENDOR_NVIDIA, devices_of, pci_devices

GPU_CLASSES = ("0300", "0302")  # VGA compatible controller, 3D controller
NVSWITCH_CLASSES = ("0680",)  # bridge, other: how NVSwitches show up on HGX baseboards

DOCKER_CONFIG = "/etc/docker/daemon.json"
NOUVEAU_BLACKLIST = "/etc/modprobe.d/blacklist-nouveau.conf"
REBOOT_MARKER = "/run/gpufleet/nvidia-reboot-required"
VERSIONLOCK_LIST = "/etc/dnf/plugins/versionlock.list"
MODULE_VERSION = "/sys/module/nvidia/version"
NOUVEAU_MODULE = "/sys/module/nouveau"
RUNTIME_PATHS = ("nvidia-container-runtime", "/usr/bin/nvidia-container-runtime")
TOOLKIT_PACKAGE = "nvidia-container-toolkit"

NVIDIA_SMI_Q = ("-q",)


# --- detection ----------------------------------------------------------------------------------


def _device_ids(devices):
    return sorted(set(d["device"] for d in devices if d["device"]))


def detect(system: System, params: dict[str, Any]) -> Detection:
    """NVIDIA GPUs among the PCI devices (and NVSwitches, which call for the fabric manager)."""
    root = params.get("pci_root") or PCI_ROOT
    devices = pci_devices(system, root)
    gpus = devices_of(devices, VENDOR_NVIDIA, GPU_CLASSES)
    switches = devices_of(devices, VENDOR_NVIDIA, NVSWITCH_CLASSES)
    details = {
        "gpu_count": len(gpus),
        "device_ids": _device_ids(gpus),
        "gpus": [{"address": d["address"], "device": d["device"], "driver": d["driver"]}
                 for d in gpus],
        "nvswitch_count": len(switches),
        "nvswitch_device_ids": _device_ids(switches),
        "fabricmanager": bool(switches),
    }
    if not gpus:
        return Detection(False, "no NVIDIA GPU among the host's %d PCI devices (vendor %s, "
                         "class 0300 or 0302) under %s" % (len(devices), VENDOR_NVIDIA, root),
                         details)
    reason = "%d NVIDIA GPU(s) (device id %s)" % (len(gpus), ", ".join(details["device_ids"]))
    if switches:
        reason += " and %d NVSwitch(es), so the fabric manager applies" % len(switches)
    return Detection(True, reason, details)


# --- packages -----------------------------------------------------------------------------------


def _strip_epoch(version):
    return version.split(":", 1)[1] if version and ":" in version else version


def _dpkg_packages(system, names):
    """{name: {"version": installed version or None, "held": bool}} from dpkg-query."""
    found = {name: {"version": None, "held": False} for name in names}
    if not names:
        return found
    status, out, err = system.run(
        ["dpkg-query", "-W", "-f", "${Package}\\t${Version}\\t${Status}\\n"] + list(names))
    if status not in (0, 1):
        raise CheckError("dpkg-query failed with exit status %d: %s" % (status, err.strip()))
    for number, line in enumerate(out.splitlines(), 1):
        if not line.strip():
            continue
        fields = line.split("\t")
        if len(fields) != 3 or len(fields[2].split()) != 3:
            raise CheckError("dpkg-query output, line %d: expected package, version and a "
                             "three-word status separated by tabs, got %r" % (number, line))
        name, version, state = fields
        want, _flag, current = state.split()
        name = name.split(":", 1)[0]  # an architecture qualifier (pkg:amd64)
        if name not in found:
            continue
        found[name] = {"version": version if current == "installed" else None,
                       "held": want == "hold"}
    return found


def _versionlocked(system):
    """The entries of the dnf versionlock list (excluded ``!`` entries left out)."""
    if not system.exists(VERSIONLOCK_LIST):
        return []
    text = system.read_text(VERSIONLOCK_LIST)
    return [line.strip() for line in text.splitlines()
            if line.strip() and not line.strip().startswith(("#", "!"))]


def _rpm_packages(system, names):
    found = {name: {"version": None, "held": False} for name in names}
    if not names:
        return found
    status, out, err = system.run(
        ["rpm", "-q", "--qf", "%{NAME}\\t%{EPOCHNUM}:%{VERSION}-%{RELEASE}\\n"] + list(names))
    if status < 0 or (status and not out):
        raise CheckError("rpm -q failed with exit status %d: %s" % (status, err.strip()))
    for line in out.splitlines():
        fields = line.split("\t")
        if len(fields) == 2 and fields[0] in found:
            version = fields[1][2:] if fields[1].startswith("0:") else fields[1]
            found[fields[0]]["version"] = version
    locks = _versionlocked(system)
    for name in names:
        found[name]["held"] = any(re.match(re.escape(name) + r"-(\d+:)?\d", lock)
                                  for lock in locks)
    return found


def _packages(system, manager, names):
    names = [n for n in (names or []) if n]
    if manager == "dnf":
        return _rpm_packages(system, names)
    return _dpkg_packages(system, names)


def _package_problems(what, packages, hold, expect_version=None, expect_branch=None):
    problems = []
    for name, state in sorted(packages.items()):
        version = _strip_epoch(state["version"])
        if version is None:
            problems.append("%s package %s is not installed" % (what, name))
            continue
        if expect_branch and not version.startswith(str(expect_branch) + "."):
            problems.append("%s package %s is at %s, not on branch %s"
                            % (what, name, version, expect_branch))
        if expect_version and not version.startswith(str(expect_version)):
            problems.append("%s package %s is at %s, not at the pinned %s"
                            % (what, name, version, expect_version))
        if hold and not state["held"]:
            problems.append("%s package %s is not held" % (what, name))
    return problems


# --- files, modules, services -------------------------------------------------------------------


def _read(system, path):
    try:
        return system.read_text(path)
    except (OSError, IOError):
        return None


def module_version(system: System) -> tuple[str | None, str | None]:
    """(installed, loaded): the nvidia kernel module's version as modinfo finds it for the
    running kernel, and the version of the loaded module; None where there is none."""
    installed = None
    modinfo = system.which("modinfo")
    if modinfo:
        status, out, _err = system.run([modinfo, "-F", "version", "nvidia"])
        if status == 0 and out.strip():
            installed = out.strip().splitlines()[0].strip()
    loaded = _read(system, MODULE_VERSION)
    return installed, (loaded.strip() or None) if loaded else None


def docker_state(system: System, path: str, default_wanted: str | None = None) -> dict[str, Any]:
    """Docker's nvidia runtime as daemon.json declares it."""
    state: dict[str, Any] = {"installed": bool(system.which("dockerd")),
                             "config": path, "config_exists": False, "runtime_nvidia": False,
                             "runtime_path": None, "default_runtime": None, "problems": []}
    text = _read(system, path)
    if text is None:
        return state
    state["config_exists"] = True
    try:
        config = json.loads(text) if text.strip() else {}
    except ValueError as exc:
        raise CheckError("%s is not JSON: %s" % (path, exc)) from exc
    if not isinstance(config, dict):
        raise CheckError("%s does not hold a JSON object" % path)
    runtime = (config.get("runtimes") or {}).get("nvidia")
    if isinstance(runtime, dict):
        state["runtime_path"] = runtime.get("path")
        state["runtime_nvidia"] = state["runtime_path"] in RUNTIME_PATHS
    state["default_runtime"] = config.get("default-runtime")
    if not state["runtime_nvidia"]:
        state["problems"].append(
            "%s has no nvidia runtime (runtimes.nvidia.path %s)" % (
                path, "missing" if state["runtime_path"] is None
                else "is %r" % state["runtime_path"]))
    if default_wanted is True and state["default_runtime"] != "nvidia":
        state["problems"].append("%s does not make nvidia the default runtime (it is %s)" % (
            path, state["default_runtime"] or "unset, so runc"))
    if default_wanted is False and state["default_runtime"] == "nvidia":
        state["problems"].append("%s makes nvidia the default runtime, which is not wanted"
                                 % path)
    return state


def nouveau_state(system: System, path: str) -> dict[str, Any]:
    text = _read(system, path) if path else None
    lines = [line.split("#", 1)[0].split() for line in (text or "").splitlines()]
    return {
        "blacklist_file": path,
        "blacklisted": ["blacklist", "nouveau"] in lines,
        "loaded": system.exists(NOUVEAU_MODULE),
    }


def service_state(system: System, name: str) -> dict[str, str]:
    """{"enabled": systemctl is-enabled's word, "active": systemctl is-active's word}."""
    systemctl = system.which("systemctl")
    if not systemctl:
        return {"enabled": "unknown", "active": "unknown"}
    state = {}
    for key, verb in (("enabled", "is-enabled"), ("active", "is-active")):
        _status, out, _err = system.run([systemctl, verb, name])
        words = out.split()
        state[key] = words[0] if words else "not-found"
    return state


def reboot_state(system: System, marker: str, nouveau_loaded: bool) -> dict[str, Any]:
    reasons: list[Any] = []
    text = _read(system, marker) if marker else None
    if text is not None:
        reasons.extend(line.strip() for line in text.splitlines() if line.strip())
        if not reasons:
            reasons.append("the nvidia role left %s" % marker)
    if nouveau_loaded:
        reasons.append("the nouveau module is loaded")
    return {"reboot_required": bool(reasons), "reboot_reasons": reasons}


# --- nvidia-smi -q ------------------------------------------------------------------------------

_Q_LINE = re.compile(r"^( *)([^:]*?)\s*(?::\s?(.*))?$")


def parse_nvidia_smi_q(text: str) -> dict[str, Any]:
    """The parts of ``nvidia-smi -q`` the checks use.

    Returns ``{"driver_version", "cuda_version", "gpus": [{"bus_id", "persistence_mode",
    "fabric_state", "fabric_status", ...}]}``. Sections nest by four spaces; a GPU's section
    starts with ``GPU <bus id>`` at the left margin. Values such as ``N/A`` are kept as printed.
    """
    top: dict[str, Any] = {}
    gpus = []
    current = None
    stack: list[Any] = []  # (indent, section name)
    saw_header = False
    for raw in text.splitlines():
        line = raw.rstrip()
        if not line.strip():
            continue
        if line.startswith("====="):
            saw_header = True
            continue
        if line.startswith("GPU "):
            current = {"bus_id": line[4:].strip()}
            gpus.append(current)
            stack = []
            continue
        match = _Q_LINE.match(line)
        if match is None:   # never: the pattern matches every line
            continue
        indent, key, value = len(match.group(1)), match.group(2).strip(), match.group(3)
        if indent == 0:
            current = None  # a top-level field or section ends the GPU's section
        while stack and stack[-1][0] >= indent:
            stack.pop()
        if value is None:
            stack.append((indent, key))
            continue
        path = ".".join([name for _i, name in stack] + [key])
        (top if current is None else current)[path] = value.strip()
    if not saw_header or "Driver Version" not in top:
        raise ToolOutputError("nvidia-smi -q", "not an NVSMI LOG: no %s" % (
            "driver version" if saw_header else "NVSMI LOG header"))
    out: dict[str, Any] = {
        "driver_version": top.get("Driver Version"), "cuda_version": top.get("CUDA Version"),
        "attached_gpus": top.get("Attached GPUs"), "gpus": []}
    for fields in gpus:
        out["gpus"].append({
            "bus_id": fields["bus_id"],
            "name": fields.get("Product Name"),
            "uuid": fields.get("GPU UUID"),
            "persistence_mode": fields.get("Persistence Mode"),
            "fabric_state": fields.get("Fabric.State"),
            "fabric_status": fields.get("Fabric.Status"),
        })
    return out


def _smi(system, smi, args):
    status, out, err = system.run([smi] + list(args))
    if status != 0:
        said = [s.strip() for s in (err or "").splitlines() + (out or "").splitlines()
                if s.strip()]
        return None, "nvidia-smi %s failed (exit status %d)%s" % (
            " ".join(args[:1]), status, ": " + said[0] if said else "")
    return out, None


def probe_gpus(system: System, settings: dict[str, Any],
               expect: dict[str, Any]) -> tuple[dict[str, Any], list[str]]:
    """(facts, problems) from nvidia-smi."""
    facts: dict[str, Any] = {"gpu_count": None, "gpus": [], "driver_version": None,
                             "cuda_version": None, "persistence_mode": None}
    smi = system.which("nvidia-smi")
    if not smi:
        return facts, ["nvidia-smi is not installed, so the driver cannot be checked"]
    text, failure = _smi(system, smi, NVIDIA_SMI_ARGS)
    if failure:
        return facts, [failure]
    detail, failure = _smi(system, smi, NVIDIA_SMI_Q)
    if failure:
        return facts, [failure]
    try:
        listed = parse_nvidia_smi(text)
        queried = parse_nvidia_smi_q(detail)
    except ToolOutputError as exc:
        raise CheckError(str(exc)) from exc
    by_uuid = dict((g["uuid"], g) for g in queried["gpus"] if g["uuid"])
    for index, gpu in enumerate(listed):
        extra = by_uuid.get(gpu["id"]) or (
            queried["gpus"][index] if index < len(queried["gpus"]) else {})
        facts["gpus"].append({
            "index": index, "name": gpu["name"], "reported_name": gpu["reported_name"],
            "memory_mib": gpu["memory_mib"], "uuid": gpu["id"],
            "bus_id": extra.get("bus_id"), "persistence_mode": extra.get("persistence_mode"),
            "fabric_state": extra.get("fabric_state"),
            "fabric_status": extra.get("fabric_status"),
        })
    facts["gpu_count"] = len(listed)
    versions = sorted(set(g["driver_version"] for g in listed if g["driver_version"]))
    facts["driver_version"] = queried["driver_version"] or (versions[0] if versions else None)
    facts["cuda_version"] = queried["cuda_version"]
    modes = [g["persistence_mode"] for g in facts["gpus"]]
    facts["persistence_mode"] = bool(modes) and all(m == "Enabled" for m in modes)

    problems = []
    if expect.get("gpu_count") is not None and int(expect["gpu_count"]) != len(listed):
        problems.append("nvidia-smi lists %d GPU(s), %s expected"
                        % (len(listed), expect["gpu_count"]))
    branch = expect.get("driver_branch")
    if branch and not (facts["driver_version"] or "").startswith(str(branch) + "."):
        problems.append("the loaded driver is %s, not on branch %s"
                        % (facts["driver_version"], branch))
    if expect.get("driver_version") and not (facts["driver_version"] or "").startswith(
            str(expect["driver_version"]).split("-", 1)[0]):
        problems.append("the loaded driver is %s, not the pinned %s"
                        % (facts["driver_version"], expect["driver_version"]))
    if settings.get("persistenced"):
        off = [g["bus_id"] or str(g["index"]) for g in facts["gpus"]
               if g["persistence_mode"] != "Enabled"]
        if off:
            problems.append("persistence mode is off on GPU(s) %s" % ", ".join(off))
    if settings.get("fabricmanager"):
        waiting = ["%s (%s, %s)" % (g["bus_id"] or g["index"], g["fabric_state"],
                                    g["fabric_status"])
                   for g in facts["gpus"]
                   if g["fabric_state"] not in ("Completed", None)
                   or g["fabric_status"] not in ("Success", None)]
        if waiting:
            problems.append("the fabric is not ready on GPU(s) %s" % ", ".join(waiting))
    return facts, problems


# --- verify -------------------------------------------------------------------------------------


def verify(system: System, params: dict[str, Any]) -> dict[str, Any]:
    settings = params.get("settings") or {}
    expect = params.get("expect") or {}
    manager = settings.get("package_manager") or (
        "apt" if system.which("dpkg-query") else "dnf")
    problems = []

    driver = _packages(system, manager, settings.get("driver_packages"))
    fabric = _packages(system, manager, settings.get("fabricmanager_packages"))
    toolkit_names = list(settings.get("toolkit_packages") or [])
    toolkit = _packages(system, manager, toolkit_names)
    problems += _package_problems("driver", driver, settings.get("driver_hold"),
                                  expect.get("driver_version"), expect.get("driver_branch"))
    problems += _package_problems("fabric manager", fabric, settings.get("driver_hold"),
                                  expect.get("driver_version"), expect.get("driver_branch"))
    problems += _package_problems("container toolkit", toolkit, settings.get("toolkit_hold"),
                                  expect.get("toolkit_version"))

    installed, loaded = module_version(system)
    docker = docker_state(system, settings.get("docker_config") or DOCKER_CONFIG,
                          settings.get("docker_default_runtime"))
    docker_problems = docker.pop("problems")
    if settings.get("docker_wiring") and docker["installed"]:
        problems += docker_problems
    nouveau = nouveau_state(system, settings.get("nouveau_blacklist", NOUVEAU_BLACKLIST))
    if nouveau["blacklist_file"] and not nouveau["blacklisted"]:
        problems.append("%s does not blacklist nouveau" % nouveau["blacklist_file"])
    persistenced = service_state(system, settings.get("persistenced_service")
                                 or "nvidia-persistenced")
    if settings.get("persistenced") and persistenced["enabled"] != "enabled":
        problems.append("nvidia-persistenced is not enabled (%s)" % persistenced["enabled"])
    fabricmanager = service_state(system, settings.get("fabricmanager_service")
                                  or "nvidia-fabricmanager")
    if settings.get("fabricmanager") and fabricmanager["enabled"] != "enabled":
        problems.append("nvidia-fabricmanager is not enabled (%s)" % fabricmanager["enabled"])
    reboot = reboot_state(system, settings.get("reboot_marker", REBOOT_MARKER),
                          nouveau["loaded"])

    facts = {
        "package_manager": manager,
        "driver_packages": driver,
        "fabricmanager_packages": fabric,
        "toolkit_packages": toolkit,
        "toolkit_version": _strip_epoch((toolkit.get(TOOLKIT_PACKAGE) or {}).get("version")),
        "driver_module_version": installed,
        "driver_loaded_version": loaded,
        "nvidia_ctk": system.which("nvidia-ctk"),
        "docker": docker,
        "nouveau": nouveau,
        "persistenced": persistenced,
        "fabricmanager": fabricmanager,
        "hardware_probed": bool(params.get("probe_hardware")),
    }
    facts.update(reboot)
    if params.get("probe_hardware"):
        hardware, found = probe_gpus(system, settings, expect)
        facts.update(hardware)
        problems += found
        if settings.get("fabricmanager") and fabricmanager["active"] != "active":
            problems.append("nvidia-fabricmanager is not running (%s)" % fabricmanager["active"])
        if reboot["reboot_required"]:
            problems.append("a reboot is due: %s" % "; ".join(reboot["reboot_reasons"]))
    return result(problems=problems, **facts)
