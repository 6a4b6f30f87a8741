# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""AWS Elastic Fabric Adapter: does the efa role apply, and what did the EFA installer leave?

``detect`` looks for EFA devices on the PCI bus (Amazon's vendor id 1d0f, device ids
efa0..efa3) and asks the EC2 instance metadata service (IMDSv2) for the instance type, which
it looks up in the table of EFA-capable instance types. The role applies when an EFA device is
attached or when the instance type supports EFA (so a machine image built on an instance
launched without EFA interfaces still gets the software).

``verify`` reads what the role and aws-efa-installer set up: the installer's record
(/opt/amazon/efa_installed_packages), libfabric and ``fi_info --version``, the OFI NCCL plugin
(aws-ofi-nccl) under /opt/amazon/ofi-nccl, the role's environment profile, the dynamic linker's
configuration and the ptrace sysctl. With ``probe_hardware`` it also checks the EFA device
count, the efa kernel module, the live ptrace_scope, and runs ``fi_info -p efa -t FI_EP_RDM``.

``expect`` keys (each checked only when given): ``installer_version`` (str),
``kernel_module`` (true: the installer's efa kernel module package is installed, and with
hardware, loaded), ``libfabric`` (true: libfabric and fi_info are installed and libfabric's
directory is known to the dynamic linker), ``ofi_nccl`` (true: the plugin is installed and its
directory is known to the dynamic linker), ``profile_env`` (dict: values the profile must
export; a null value must not be exported), ``ptrace_scope`` (int), ``efa_devices`` (int: EFA
interfaces the hardware must show).

``settings`` keys (defaults in DEFAULT_SETTINGS): ``installed_packages_file``, ``efa_prefix``,
``efa_lib_dir``, ``openmpi_prefix``, ``ofi_nccl_prefix``, ``profile``, ``ld_conf_dir``,
``sysctl_file``, ``infiniband_root``.

PRIVATE to gpufleet.cluster.
"""

from __future__ import annotations

import os
import re
import shlex
from typing import Any

from . import CheckError, Detection, result
from ._system import (
    AWS_IMDS_URL, PCI_ROOT, VENDOR_AMAZON, NodeSystem, aws_instance_type, pci_devices,
)

# PCI device ids of the EFA generations; the installer matches any "1d0f:efa"
# (EFA_PCI_PREFIX in efa_installer.sh).
EFA_PCI_DEVICE_IDS = ("efa0", "efa1", "efa2", "efa3")


def _instance_types():
    """EC2 instance types that support EFA: (EFA interfaces the type attaches at most, or None
    where the count is not recorded; whether it does GPUDirect RDMA over EFA, where
    FI_EFA_USE_DEVICE_RDMA=1 is set).

    Counts: docs/reference/interconnect.md#efa-instance-types (ADT instance-profiles.conf, AWS "EFA
    supported instance types"); types with a single network card attach one EFA. The types follow
    dstack's _AWS_EFA_ENABLED_INSTANCE_TYPE_PATTERNS. A type missing here still gets the role when
    its EFA devices show on the PCI bus."""
    table = {
        "p6e-gb200.36xlarge": (4, True),
        "p6-b300.48xlarge": (None, True),
        "p6-b200.48xlarge": (8, True),
        "p5en.48xlarge": (16, True),
        "p5e.48xlarge": (32, True),
        "p5.48xlarge": (32, True),
        "p5.4xlarge": (1, True),
        "p4de.24xlarge": (4, True),
        "p4d.24xlarge": (4, True),
        "p3dn.24xlarge": (1, False),
        "gr6.8xlarge": (1, False),
        "g6e.8xlarge": (1, False),
        "g6e.12xlarge": (1, False),
        "g6e.16xlarge": (1, False),
        "g6e.24xlarge": (None, False),
        "g6e.48xlarge": (None, False),
    }
    for family in ("g5", "g6"):
        for size in ("8xlarge", "12xlarge", "16xlarge", "24xlarge", "48xlarge"):
            table["%s.%s" % (family, size)] = (1, False)
    for size in ("8xlarge", "12xlarge", "16xlarge", "metal"):
        table["g4dn.%s" % size] = (1, False)
    return table


EFA_INSTANCE_TYPES = _instance_types()

DEFAULT_SETTINGS = {
    "installed_packages_file": "/opt/amazon/efa_installed_packages",
    "efa_prefix": "/opt/amazon/efa",
    "efa_lib_dir": None,  # <efa_prefix>/lib64 where it exists (EL), else <efa_prefix>/lib
    "openmpi_prefix": "/opt/amazon/openmpi",
    "ofi_nccl_prefix": "/opt/amazon/ofi-nccl",
    "profile": "/etc/profile.d/gpufleet-efa.sh",
    "ld_conf_dir": "/etc/ld.so.conf.d",
    "sysctl_file": "/etc/sysctl.d/90-gpufleet-efa.conf",
    "infiniband_root": "/sys/class/infiniband",
}

PTRACE_SCOPE_KEY = "kernel.yama.ptrace_scope"
PTRACE_SCOPE_PROC = "/proc/sys/kernel/yama/ptrace_scope"
EFA_MODULE_SYSFS = "/sys/module/efa"
FI_INFO_ARGS = ("-p", "efa", "-t", "FI_EP_RDM")

_VERSION_LINE = re.compile(r"^#\s*EFA installer version:\s*(\S+)", re.M)
_DEBUG_LINE = re.compile(r"^#\s*Debug packages installed:\s*(\S+)", re.M)
_RPM_NAME = re.compile(r"^(.+?)-\d")
_RPM_ARCH = re.compile(r"\.(x86_64|aarch64|noarch|i686)$")
_EXPORT = re.compile(r"^\s*export\s+([A-Za-z_][A-Za-z0-9_]*)=(.*)$")
_SHELL_EXPANSION = re.compile(r"\$\{[^}]*\}|\$[A-Za-z_][A-Za-z0-9_]*")
_PLUGIN_NAMES = ("libnccl-net-ofi.so", "libnccl-net.so")
_INSTALLER_EXPECTATIONS = ("installer_version", "kernel_module", "libfabric", "ofi_nccl")


def instance_type_efa(instance_type: str | None) -> dict[str, Any] | None:
    """``{"interfaces": n or None, "device_rdma": bool}`` for an EFA-capable instance type,
    None for any other."""
    found = EFA_INSTANCE_TYPES.get((instance_type or "").strip().lower())
    if found is None:
        return None
    return {"interfaces": found[0], "device_rdma": found[1]}


def efa_pci_devices(system: NodeSystem, root: str = PCI_ROOT) -> list[str]:
    """The PCI addresses of the EFA devices (vendor 1d0f, device efa0..efa3)."""
    return [d["address"] for d in pci_devices(system, root)
            if d["vendor"] == VENDOR_AMAZON and d["device"] in EFA_PCI_DEVICE_IDS]


def _plural(count, word):
    return "%d %s%s" % (count, word, "" if count == 1 else "s")


def _interfaces(capability):
    count = capability["interfaces"]
    return _plural(count, "interface") if count is not None else "interface count not recorded"


def detect(system: NodeSystem, params: dict[str, Any]) -> Detection:
    """Applies when an EFA device is attached or the instance type supports EFA."""
    devices = efa_pci_devices(system, params.get("pci_root") or PCI_ROOT)
    instance_type, why = aws_instance_type(system, params.get("aws_imds_url") or AWS_IMDS_URL)
    capability = instance_type_efa(instance_type) if instance_type else None
    details = {
        "efa_devices": devices,
        "efa_device_count": len(devices),
        "instance_type": instance_type,
        "efa_capable": capability is not None,
        "expected_interfaces": capability["interfaces"] if capability else None,
        "device_rdma": capability["device_rdma"] if capability else False,
    }
    if why:
        details["imds_error"] = why
    if devices:
        where = ("instance type %s" % instance_type) if instance_type else "not on EC2: %s" % why
        if capability:
            where += ", EFA %s" % _interfaces(capability)
        return Detection(True, "%s on the PCI bus (%s)" % (
            _plural(len(devices), "EFA device"), where), details)
    if capability:
        return Detection(True, "instance type %s supports EFA (%s); no EFA device is attached "
                         "yet" % (instance_type, _interfaces(capability)), details)
    if instance_type:
        return Detection(False, "instance type %s does not support EFA and no EFA device is "
                         "attached" % instance_type, details)
    return Detection(False, "no EFA device is attached and the host is not on EC2: %s" % why,
                     details)


def package_name(entry: str) -> str:
    """The package name in an installed-packages entry: ``libfabric-aws-bin_1.22.0_amd64``
    (deb) or ``libfabric-aws-1.22.0-1.amzn2.x86_64`` (rpm)."""
    if not _RPM_ARCH.search(entry):
        return entry.split("_", 1)[0]
    match = _RPM_NAME.match(entry)
    return match.group(1) if match else entry


def parse_installed_packages(text: str) -> dict[str, Any]:
    """The installer's record: ``# EFA installer version: X``, ``# Debug packages installed:
    yes|no``, ``# Packages installed:`` then the package file names, space separated."""
    version = _VERSION_LINE.search(text)
    if not version:
        raise CheckError("the EFA installer's record has no '# EFA installer version:' line")
    debug = _DEBUG_LINE.search(text)
    packages = []
    for line in text.splitlines():
        if not line.strip().startswith("#"):
            packages.extend(line.split())
    return {
        "installer_version": version.group(1),
        "debug_packages": bool(debug and debug.group(1).lower() == "yes"),
        "packages": packages,
    }


def parse_fi_info(text: str) -> list[dict[str, str]]:
    """``fi_info`` listing -> one dict per provider block (provider, fabric, domain, type...)."""
    blocks = []
    for line in text.splitlines():
        if ":" not in line:
            continue
        key, value = line.split(":", 1)
        key = key.strip()
        if key == "provider":
            blocks.append({"provider": value.strip()})
        elif blocks and key and " " not in key:
            blocks[-1].setdefault(key, value.strip())
    return blocks


def parse_fi_info_version(text: str) -> dict[str, str]:
    """``fi_info --version`` -> {"fi_info": v, "libfabric": v, "libfabric api": v}."""
    found = {}
    for line in text.splitlines():
        if ":" in line:
            key, value = line.split(":", 1)
            found[key.strip()] = value.strip()
    if "libfabric" not in found:
        raise CheckError("fi_info --version printed no 'libfabric:' line: %r" % text[:200])
    return found


def parse_profile(text: str) -> dict[str, str]:
    """``export NAME=VALUE`` lines of a profile script -> {NAME: VALUE} (shell quoting removed,
    expansions kept as written)."""
    env = {}
    for number, line in enumerate(text.splitlines(), 1):
        match = _EXPORT.match(line)
        if not match:
            continue
        try:
            words = shlex.split(match.group(2), comments=True)
        except ValueError as exc:
            raise CheckError("line %d of the profile cannot be read: %s" % (number, exc)) from exc
        env[match.group(1)] = " ".join(words)
    return env


def path_entries(value: str | None) -> list[str]:
    """The directories of a PATH-like value, without shell expansions such as
    ``${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}``."""
    return [entry for entry in _SHELL_EXPANSION.sub("", value or "").split(":") if entry]


def parse_ld_conf(text: str) -> list[str]:
    """Directories listed in an ld.so.conf file (comments and include lines left out)."""
    dirs = []
    for line in text.splitlines():
        line = line.split("#", 1)[0].strip()
        if line and not line.startswith("include "):
            dirs.append(line)
    return dirs


def parse_sysctl(text: str) -> dict[str, str]:
    """``key = value`` lines of a sysctl.d file -> dict."""
    found = {}
    for line in text.splitlines():
        line = line.strip()
        if not line or line[0] in "#;" or "=" not in line:
            continue
        key, value = line.split("=", 1)
        found[key.strip().lstrip("-")] = value.strip()
    return found


def _read(system, path):
    try:
        return system.read_text(path)
    except OSError:
        return None


def _settings(params):
    settings = dict(DEFAULT_SETTINGS)
    settings.update({k: v for k, v in (params.get("settings") or {}).items() if v is not None})
    return settings


def ofi_nccl_library(system: NodeSystem, prefix: str) -> str | None:
    """The OFI NCCL plugin library under ``prefix``: in lib/ (installer 1.44 and later),
    lib/<arch>-linux-gnu/ (earlier installers) or lib64/; None when there is none."""
    lib = os.path.join(prefix, "lib")
    candidates = [lib, os.path.join(prefix, "lib64")]
    candidates += [os.path.join(lib, name) for name in system.listdir(lib)
                   if name.endswith("-linux-gnu")]
    for directory in candidates:
        for name in _PLUGIN_NAMES:
            path = os.path.join(directory, name)
            if system.exists(path):
                return path
    return None


def efa_rdma_devices(system: NodeSystem, root: str) -> list[str]:
    """The RDMA devices under /sys/class/infiniband that EFA provides: bound to the efa
    driver, of Amazon's vendor id, or named efa_N."""
    found = []
    for name in system.listdir(root):
        device = os.path.join(root, name, "device")
        driver = system.resolve(os.path.join(device, "driver"))
        vendor = (_read(system, os.path.join(device, "vendor")) or "").strip().lower()
        if (driver and os.path.basename(driver) == "efa") or vendor == "0x" + VENDOR_AMAZON \
                or name.startswith("efa"):
            found.append(name)
    return found


def _linker_dirs(system, ld_conf_dir):
    dirs = []
    for name in system.listdir(ld_conf_dir):
        if name.endswith(".conf"):
            dirs.extend(parse_ld_conf(_read(system, os.path.join(ld_conf_dir, name)) or ""))
    return dirs


def _installer(system, settings, expect, problems):
    record_path = settings["installed_packages_file"]
    record = _read(system, record_path)
    facts = {"installed": record is not None, "installer_version": None,
             "debug_packages": False, "installed_packages": []}
    if record is None:
        if any(expect.get(key) for key in _INSTALLER_EXPECTATIONS):
            problems.append("the EFA installer's record %s is missing: the EFA software is not "
                            "installed" % record_path)
    else:
        parsed = parse_installed_packages(record)
        facts.update(installer_version=parsed["installer_version"],
                     debug_packages=parsed["debug_packages"],
                     installed_packages=parsed["packages"])
        wanted = expect.get("installer_version")
        if wanted and str(wanted) != parsed["installer_version"]:
            problems.append("EFA installer %s is installed, not %s" % (
                parsed["installer_version"], wanted))
    names = [package_name(p) for p in facts["installed_packages"]]
    facts["kernel_module_package"] = "efa" in names
    if expect.get("kernel_module") and record is not None and "efa" not in names:
        problems.append("the EFA installer did not install its efa kernel module package "
                        "(did it run with --skip-kmod?)")
    return facts


def _libraries(system, settings, expect, problems):
    prefix = settings["efa_prefix"]
    lib_dir = settings["efa_lib_dir"] or os.path.join(
        prefix, "lib64" if system.exists(os.path.join(prefix, "lib64")) else "lib")
    fi_info = os.path.join(prefix, "bin", "fi_info")
    facts = {"efa_lib_dir": lib_dir, "fi_info": fi_info if system.exists(fi_info) else None,
             "libfabric_version": None}
    facts["libfabric"] = facts["fi_info"] is not None
    if facts["libfabric"]:
        status, out, err = system.run([fi_info, "--version"])
        if status != 0:
            problems.append("%s --version failed with exit status %d: %s" % (
                fi_info, status, (err or out or "").strip()[:200]))
        else:
            facts["libfabric_version"] = parse_fi_info_version(out).get("libfabric")
    elif expect.get("libfabric"):
        problems.append("libfabric is not installed (no %s)" % fi_info)
    facts["openmpi"] = system.exists(os.path.join(settings["openmpi_prefix"], "bin", "mpirun"))

    library = ofi_nccl_library(system, settings["ofi_nccl_prefix"])
    facts["ofi_nccl"] = library is not None
    facts["ofi_nccl_library"] = library
    facts["ofi_nccl_lib_dir"] = os.path.dirname(library) if library else None
    if expect.get("ofi_nccl") and not library:
        problems.append("the OFI NCCL plugin (aws-ofi-nccl) is not installed under %s" % (
            settings["ofi_nccl_prefix"]))
    return facts


def _environment(system, settings, expect, facts, problems):
    path = settings["profile"]
    profile = _read(system, path)
    env = parse_profile(profile) if profile is not None else {}
    ld_library_path = path_entries(env.get("LD_LIBRARY_PATH"))
    facts.update(profile=path if profile is not None else None, profile_env=env,
                 profile_ld_library_path=ld_library_path)
    wanted_env = expect.get("profile_env")
    if wanted_env is not None and profile is None:
        problems.append("the EFA environment profile %s is missing" % path)
    elif wanted_env is not None:
        for key, value in sorted(wanted_env.items()):
            if value is None and key in env:
                problems.append("%s exports %s=%s, which it should not" % (path, key, env[key]))
            elif value is not None and env.get(key) != str(value):
                problems.append("%s sets %s to %s, not %s" % (
                    path, key, env.get(key, "nothing"), value))

    linker = _linker_dirs(system, settings["ld_conf_dir"])
    facts["ld_conf_dirs"] = linker
    known = set(linker) | set(ld_library_path)
    for name, wanted, directory in (("the OFI NCCL plugin", "ofi_nccl", facts["ofi_nccl_lib_dir"]),
                                    ("libfabric", "libfabric", facts["efa_lib_dir"])):
        if expect.get(wanted) and facts[wanted] and directory not in known:
            problems.append("%s's directory %s is neither in %s nor in the profile's "
                            "LD_LIBRARY_PATH" % (name, directory, settings["ld_conf_dir"]))

    sysctl = _read(system, settings["sysctl_file"])
    configured = parse_sysctl(sysctl).get(PTRACE_SCOPE_KEY) if sysctl is not None else None
    if configured is not None and configured.isdigit():
        configured = int(configured)
    facts["ptrace_scope_configured"] = configured
    wanted = expect.get("ptrace_scope")
    if wanted is not None and str(configured) != str(wanted):
        problems.append("%s sets %s to %s, not %s" % (
            settings["sysctl_file"], PTRACE_SCOPE_KEY,
            configured if configured is not None else "nothing", wanted))


def _hardware(system, settings, expect, facts, problems):
    loaded = system.exists(EFA_MODULE_SYSFS)
    facts["kernel_module_loaded"] = loaded
    if expect.get("kernel_module") and not loaded:
        problems.append("the efa kernel module is not loaded")

    live = (_read(system, PTRACE_SCOPE_PROC) or "").strip()
    facts["ptrace_scope"] = int(live) if live.isdigit() else None
    wanted = expect.get("ptrace_scope")
    if wanted is not None and facts["ptrace_scope"] is not None \
            and facts["ptrace_scope"] != int(wanted):
        problems.append("%s is %d, not %s (the sysctl setting was not applied)" % (
            PTRACE_SCOPE_KEY, facts["ptrace_scope"], wanted))

    expected = expect.get("efa_devices")
    count = facts["efa_pci_devices"]
    if expected is not None and count != int(expected):
        problems.append("%s on the PCI bus, the instance type has %d" % (
            _plural(count, "EFA device"), int(expected)))
    if count and facts["efa_rdma_devices"] != count:
        problems.append("%s on the PCI bus but %d in %s (is the efa driver bound?)" % (
            _plural(count, "EFA device"), facts["efa_rdma_devices"],
            settings["infiniband_root"]))

    facts["fi_info_domains"] = []
    facts["efa_provider"] = False
    if not facts["fi_info"]:
        if count or expected:
            problems.append("fi_info is not installed, so the EFA provider cannot be checked")
        return
    status, out, err = system.run([facts["fi_info"]] + list(FI_INFO_ARGS))
    if status != 0:
        said = (err or out or "").strip().splitlines()
        problems.append("fi_info -p efa found no EFA provider (exit status %d%s)" % (
            status, ": " + said[0][:200] if said else ""))
        return
    blocks = [b for b in parse_fi_info(out) if b.get("provider", "").split(";")[0] == "efa"]
    if not blocks:
        raise CheckError("fi_info -p efa exited 0 without any 'provider: efa' block: %r"
                         % out[:200])
    domains = sorted({b["domain"] for b in blocks if b.get("domain")})
    facts["efa_provider"] = True
    facts["fi_info_domains"] = domains
    if expected is not None and len(domains) != int(expected):
        problems.append("fi_info -p efa lists %s, the instance type has %d EFA interfaces" % (
            _plural(len(domains), "EFA domain"), int(expected)))


def verify(system: NodeSystem, params: dict[str, Any]) -> dict[str, Any]:
    """The EFA facts (see the module docstring), ``ok`` and ``problems``."""
    settings = _settings(params)
    expect = params.get("expect") or {}
    problems: list[Any] = []
    facts = _installer(system, settings, expect, problems)
    facts.update(_libraries(system, settings, expect, problems))
    _environment(system, settings, expect, facts, problems)
    facts["efa_pci_devices"] = len(efa_pci_devices(system, params.get("pci_root") or PCI_ROOT))
    facts["efa_devices"] = facts["efa_pci_devices"]  # the count the fleet summary shows
    facts["efa_rdma_devices"] = len(efa_rdma_devices(system, settings["infiniband_root"]))
    facts["expected_efa_devices"] = expect.get("efa_devices")
    facts["hardware_probed"] = bool(params.get("probe_hardware"))
    if params.get("probe_hardware"):
        _hardware(system, settings, expect, facts, problems)
    return result(problems=problems, **facts)
