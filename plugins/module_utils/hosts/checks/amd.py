# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The amd component: AMD Instinct / Radeon GPUs, the amdgpu kernel driver and ROCm.

``detect`` looks for AMD GPUs and accelerators among the host's PCI devices (vendor 1002; VGA,
3D, display and processing-accelerator classes: Radeon cards are VGA controllers, Instinct
MI100/MI200 display controllers, MI300 processing accelerators). AMD's HDMI audio functions
and the CPUs' own devices (vendor 1022) are not GPUs and are not counted.

``verify`` reads what the amd role set up. Without the hardware: the packages and their
versions, which of them are held, the users' video and render group membership, the ROCm
version in ``<rocm_path>/.info/version``, the environment profile and the dynamic linker
configuration. With ``probe_hardware``: the amdgpu kernel module, ``/dev/kfd`` and what
``amd-smi static`` reports (GPU count, names, driver version), compared with the PCI devices.

Options read from the module's ``settings``:
    ``rocm_path`` (``/opt/rocm``), ``profile`` (``/etc/profile.d/gpufleet-rocm.sh``),
    ``ld_conf`` (``/etc/ld.so.conf.d/gpufleet-rocm.conf``), ``groups`` (``[video, render]``),
    ``versionlock_list`` (``/etc/dnf/plugins/versionlock.list``).
and from ``expect`` (each one optional):
    ``packages`` (a list of names, or a dict of name to a version pattern such as
    ``*.60401-*``; an empty pattern accepts any version), ``held`` (names that must be held),
    ``users`` (users that must be in every group of ``groups``), ``rocm_version``
    (``6.4.1``), ``gpu_count`` (with ``probe_hardware``).

PRIVATE to gpufleet.cluster.
"""

from __future__ import annotations

import fnmatch
import os
import re
from typing import Any

from ..facts.probe import System
from ..facts import ToolOutputError, parse_amd_smi
from ..facts.parsers import AMD_SMI_ARGS, AMD_SMI_DRIVER_ARG
from . import CheckError, Detection, result
from ._system import PCI_ROOT, VENDOR_AMD, devices_of, pci_devices

# PCI classes (class/subclass) of AMD GPUs: VGA, 3D, display controller, processing accelerator.
GPU_CLASSES = ("0300", "0302", "0380", "1200")

DEFAULT_ROCM_PATH = "/opt/rocm"
DEFAULT_PROFILE = "/etc/profile.d/gpufleet-rocm.sh"
DEFAULT_LD_CONF = "/etc/ld.so.conf.d/gpufleet-rocm.conf"
DEFAULT_GROUPS = ("video", "render")
DEFAULT_VERSIONLOCK = "/etc/dnf/plugins/versionlock.list"
MODULE_DIR = "/sys/module/amdgpu"
KFD = "/dev/kfd"

# dpkg-query's ${Status}: "<want> <error flag> <state>", e.g. "hold ok installed".
DPKG_FORMAT = "${Package}\t${Status}\t${Version}\n"
# rpm: the epoch only where there is one, as dpkg shows it.
RPM_FORMAT = "%{NAME}\t%|EPOCH?{%{EPOCH}:}|%{VERSION}-%{RELEASE}\n"


def _gpu_devices(system, params):
    root = params.get("pci_root") or PCI_ROOT
    devices = pci_devices(system, root)
    return root, devices, devices_of(devices, VENDOR_AMD, GPU_CLASSES)


def detect(system: System, params: dict[str, Any]) -> Detection:
    """Applies when the host has at least one AMD GPU or accelerator on PCI."""
    root, devices, gpus = _gpu_devices(system, params)
    if not gpus:
        return Detection(
            False,
            "no AMD GPU or accelerator (PCI vendor %s, class %s) among the %d PCI devices "
            "under %s" % (VENDOR_AMD, "/".join(GPU_CLASSES), len(devices), root),
            {"gpu_count": 0, "device_ids": [], "devices": []},
        )
    device_ids = sorted(set(d["device"] for d in gpus if d["device"]))
    return Detection(
        True,
        "%d AMD GPU(s) or accelerator(s) on PCI (device id %s)" % (
            len(gpus), ", ".join(device_ids) or "unknown"),
        {
            "gpu_count": len(gpus),
            "device_ids": device_ids,
            "devices": [
                {key: d[key] for key in ("address", "device", "class", "driver")} for d in gpus
            ],
        },
    )


# --- software --------------------------------------------------------------------------------


def _settings(params):
    settings = dict(params.get("settings") or {})
    settings.setdefault("rocm_path", DEFAULT_ROCM_PATH)
    settings.setdefault("profile", DEFAULT_PROFILE)
    settings.setdefault("ld_conf", DEFAULT_LD_CONF)
    settings.setdefault("groups", list(DEFAULT_GROUPS))
    settings.setdefault("versionlock_list", DEFAULT_VERSIONLOCK)
    if not isinstance(settings["groups"], (list, tuple)):
        raise CheckError("settings.groups must be a list of group names")
    return settings


def _expected_packages(expect):
    packages = expect.get("packages") or {}
    if isinstance(packages, (list, tuple)):
        return dict((name, "") for name in packages)
    if not isinstance(packages, dict):
        raise CheckError("expect.packages must be a list of names or a dict of name: version")
    return dict((name, "" if pattern is None else str(pattern))
                for name, pattern in packages.items())


def parse_dpkg_query(text: str) -> dict[str, tuple[str, str, str]]:
    """{package: (want, state, version)} from ``dpkg-query -W -f`` with DPKG_FORMAT."""
    found = {}
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        fields = line.split("\t")
        status = fields[1].split() if len(fields) == 3 else []
        if len(status) != 3:
            raise CheckError("dpkg-query output, line %d: expected 'package<TAB>want flag "
                             "state<TAB>version', got %r" % (number, line[:120]))
        found[fields[0]] = (status[0], status[2], fields[2])
    return found


def parse_rpm_query(text: str) -> dict[str, str]:
    """{package: version} from ``rpm -q --qf`` with RPM_FORMAT; missing packages are absent."""
    found = {}
    for number, line in enumerate(text.splitlines(), 1):
        missing = line.startswith("package ") and line.endswith(" is not installed")
        if not line.strip() or missing:
            continue
        fields = line.split("\t")
        if len(fields) != 2 or not fields[0] or not fields[1]:
            raise CheckError("rpm -q output, line %d: expected 'name<TAB>version', got %r"
                             % (number, line[:120]))
        found[fields[0]] = fields[1]
    return found


def versionlocked(text: str, name: str) -> bool:
    """Whether dnf's versionlock list (``name-[epoch:]version-release.arch`` per line) locks
    ``name``."""
    pattern = re.compile(r"^%s-(\d+:)?\d" % re.escape(name))
    return any(pattern.match(line.strip()) for line in text.splitlines()
               if line.strip() and not line.lstrip().startswith(("#", "!")))


def _packages(system, names, settings, problems):
    """(package manager, {name: version or None}, [held names])."""
    versions = dict((name, None) for name in names)
    held = []
    if not names:
        return None, versions, held
    dpkg = system.which("dpkg-query")
    if dpkg:
        # dpkg-query exits 1 when a name is unknown, and still prints the others.
        status, out, err = system.run([dpkg, "-W", "-f=" + DPKG_FORMAT] + list(names))
        if status not in (0, 1):
            raise CheckError("dpkg-query failed with exit status %d: %s" % (
                status, (err or out).strip()[:200]))
        for name, (want, state, version) in parse_dpkg_query(out).items():
            if name not in versions:
                continue
            if state == "installed":
                versions[name] = version
                if want == "hold":
                    held.append(name)
            elif state != "not-installed":
                problems.append("package %s is %s, not installed" % (name, state))
        return "dpkg", versions, sorted(held)
    rpm = system.which("rpm")
    if rpm:
        _status, out, _err = system.run([rpm, "-q", "--qf", RPM_FORMAT] + list(names))
        for name, version in parse_rpm_query(out).items():
            if name in versions:
                versions[name] = version
        try:
            locks = system.read_text(settings["versionlock_list"])
        except (OSError, IOError):
            locks = ""
        held = [name for name in names if versions[name] and versionlocked(locks, name)]
        return "rpm", versions, sorted(held)
    raise CheckError("neither dpkg-query nor rpm is on PATH; cannot read the installed packages")


def _group_members(system, users, groups, problems):
    """{user: [the groups of ``groups`` the user is in]} from ``id -nG``."""
    found = {}
    idcmd = system.which("id") or "id"
    for user in users:
        status, out, err = system.run([idcmd, "-nG", user])
        if status != 0:
            problems.append("user %s does not exist (%s)" % (
                user, (err or out).strip() or "id -nG failed"))
            found[user] = []
            continue
        member_of = set(out.split())
        found[user] = [group for group in groups if group in member_of]
        missing = [group for group in groups if group not in member_of]
        if missing:
            problems.append("user %s is not in the group(s) %s" % (user, ", ".join(missing)))
    return found


def _read(system, path):
    try:
        return system.read_text(path)
    except (OSError, IOError):
        return None


def _file_mentions(system, path, needle, what, problems):
    text = _read(system, path)
    if text is None:
        problems.append("%s %s is missing" % (what, path))
        return {"path": path, "present": False, "mentions": needle, "found": False}
    found = needle in text
    if not found:
        problems.append("%s %s does not mention %s" % (what, path, needle))
    return {"path": path, "present": True, "mentions": needle, "found": found}


def parse_rocm_version(text: str) -> tuple[str, str] | None:
    """("6.4.1", "83") from the text of ``/opt/rocm/.info/version`` (``6.4.1-83``)."""
    value = (text or "").strip()
    match = re.match(r"^(\d+(?:\.\d+)*)(?:-(\S+))?$", value)
    if not match:
        raise CheckError("the ROCm version file holds %r, not a version like 6.4.1-83"
                         % value[:60])
    return match.group(1), match.group(2)


def _same_release(found, wanted):
    """Whether ROCm ``found`` (6.4.1) is release ``wanted`` (6.4.1, or 6.4 for any 6.4.x)."""
    wanted_parts = str(wanted).split(".")
    return found.split(".")[:len(wanted_parts)] == wanted_parts


def _software(system, params, problems):
    settings = _settings(params)
    expect = params.get("expect") or {}
    wanted = _expected_packages(expect)
    must_hold = list(expect.get("held") or [])
    names = sorted(set(wanted) | set(must_hold))
    manager, versions, held = _packages(system, names, settings, problems)
    for name in names:
        version = versions[name]
        pattern = wanted.get(name, "")
        if version is None:
            problems.append("package %s is not installed" % name)
        elif pattern and not fnmatch.fnmatchcase(version, pattern):
            problems.append("package %s is at version %s, not %s" % (name, version, pattern))
    for name in must_hold:
        if versions[name] is not None and name not in held:
            problems.append("package %s is not held at its version" % name)

    groups = list(settings["groups"])
    users = _group_members(system, list(expect.get("users") or []), groups, problems)

    rocm_path = settings["rocm_path"].rstrip("/") or "/"
    version_text = _read(system, os.path.join(rocm_path, ".info", "version"))
    rocm_version = rocm_build = None
    if version_text is not None:
        rocm_version, rocm_build = parse_rocm_version(version_text)
    if expect.get("rocm_version"):
        if rocm_version is None:
            problems.append("ROCm is not installed: %s/.info/version is missing" % rocm_path)
        elif not _same_release(rocm_version, expect["rocm_version"]):
            problems.append("ROCm %s is installed, not %s" % (rocm_version, expect["rocm_version"]))

    return {
        "package_manager": manager,
        "packages": versions,
        "held": held,
        "groups": groups,
        "users": users,
        "rocm_path": rocm_path,
        "rocm_version": rocm_version,
        "rocm_build": rocm_build,
        "profile": _file_mentions(system, settings["profile"], rocm_path + "/bin",
                                  "the environment profile", problems),
        "ld_conf": _file_mentions(system, settings["ld_conf"], rocm_path + "/lib",
                                  "the dynamic linker configuration", problems),
    }


# --- hardware --------------------------------------------------------------------------------


def _amd_smi(system, rocm_path):
    smi = system.which("amd-smi")
    if smi is None and system.exists(os.path.join(rocm_path, "bin", "amd-smi")):
        smi = os.path.join(rocm_path, "bin", "amd-smi")
    return smi


def _run_amd_smi(system, smi, problems):
    """The GPUs amd-smi reports, or None (with a problem) when it fails."""
    argv = [smi] + list(AMD_SMI_ARGS)
    status, out, err = system.run(argv + [AMD_SMI_DRIVER_ARG])
    if status != 0:  # amd-smi before the --driver option
        status, out, err = system.run(argv)
    if status != 0:
        said = [line.strip() for line in (err or "").splitlines() + (out or "").splitlines()]
        said = [line for line in said if line]
        problems.append("amd-smi failed with exit status %d%s" % (
            status, ": " + said[0][:200] if said else ""))
        return None
    try:
        return parse_amd_smi(out)
    except ToolOutputError as exc:
        raise CheckError(str(exc)) from exc


def _hardware(system, params, facts, problems):
    expect = params.get("expect") or {}
    _root, _devices, pci_gpus = _gpu_devices(system, params)
    facts["pci_gpu_count"] = len(pci_gpus)
    facts["pci_device_ids"] = sorted(set(d["device"] for d in pci_gpus if d["device"]))
    unbound = ["%s (%s)" % (d["address"], d["driver"] or "no driver") for d in pci_gpus
               if d["driver"] != "amdgpu"]
    facts["pci_not_amdgpu"] = unbound
    if unbound:
        problems.append("%d AMD GPU(s) on PCI are not bound to the amdgpu driver: %s"
                        % (len(unbound), ", ".join(unbound)))

    loaded = system.exists(MODULE_DIR)
    module_version = _read(system, os.path.join(MODULE_DIR, "version"))
    facts["kernel_module_loaded"] = loaded
    facts["kernel_module_version"] = module_version.strip() if module_version else None
    facts["kfd"] = system.exists(KFD)
    if not loaded:
        problems.append("the amdgpu kernel module is not loaded")
    if not facts["kfd"]:
        problems.append("%s is missing: the ROCm compute interface is not available" % KFD)

    smi = _amd_smi(system, facts["rocm_path"])
    facts["amd_smi"] = smi
    gpus = None
    if smi is None:
        problems.append("amd-smi is neither on PATH nor in %s/bin" % facts["rocm_path"])
    else:
        gpus = _run_amd_smi(system, smi, problems)
        if gpus is not None and not gpus:
            problems.append("amd-smi lists no GPU")
    gpus = gpus or []
    facts["gpu_count"] = len(gpus)
    facts["gpus"] = [
        {key: item[key] for key in ("name", "reported_name", "memory_mib", "bus_id",
                                    "driver_version")}
        for item in gpus
    ]
    facts["gpu_names"] = sorted(set(item["reported_name"] for item in gpus))
    driver_versions = [item["driver_version"] for item in gpus if item["driver_version"]]
    facts["driver_version"] = (driver_versions[0] if driver_versions
                               else facts["kernel_module_version"])
    if gpus and len(gpus) < len(pci_gpus):
        problems.append("amd-smi lists %d GPU(s) but the host has %d AMD GPU(s) on PCI"
                        % (len(gpus), len(pci_gpus)))
    wanted = expect.get("gpu_count")
    if wanted is not None and gpus and len(gpus) != int(wanted):
        problems.append("amd-smi lists %d GPU(s), expected %d" % (len(gpus), int(wanted)))


def verify(system: System, params: dict[str, Any]) -> dict[str, Any]:
    """The state the amd role leaves: software always, the GPUs with ``probe_hardware``."""
    problems: list[Any] = []
    facts = _software(system, params, problems)
    facts["hardware_probed"] = bool(params.get("probe_hardware"))
    if params.get("probe_hardware"):
        _hardware(system, params, facts, problems)
    return result(problems=problems, **facts)
