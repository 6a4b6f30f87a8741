# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Gather a host's facts: run the GPU tool its devices call for, read CPUs, memory, disk and
addresses, and put it all together with the rules of the other modules in this package.

Everything that touches the host goes through a ``System``; the gpufleet.cluster.host_facts
module gives it Ansible's ``run_command``, tests give it a fake host. Nothing here changes the
host, pulls an image or starts a container.

PRIVATE to gpufleet.cluster: the public surface is the ``hostfacts`` package.
"""

from __future__ import annotations

import os
import re
import socket
import struct
from typing import Any

from ._errors import HostFactsError, excerpt
from .network import (
    addresses_from_interfaces,
    addresses_from_ip_json,
    parse_if_inet6,
    select_internal_ip,
)
from .parsers import (
    AMD_SMI_ARGS,
    AMD_SMI_DRIVER_ARG,
    HL_SMI_ARGS,
    NVIDIA_SMI_ARGS,
    TT_DRIVER_VERSION_PATH,
    TT_SMI_ARGS,
    assign_render_nodes,
    gpu,
    parse_amd_smi,
    parse_hl_smi,
    parse_nvidia_smi,
    parse_tt_driver_version,
    parse_tt_smi,
)
from .summary import host_resources, parse_blocks, resolve_blocks, shared_offer
from .vendor import AMD, INTEL, NONE, NVIDIA, TENSTORRENT, matching_probe

DEFAULT_DOCKER_ROOT = "/var/lib/docker"
WSL_NVIDIA_SMI = "/usr/lib/wsl/lib/nvidia-smi"
MEMINFO = "/proc/meminfo"
IF_INET6 = "/proc/net/if_inet6"

# Where a vendor's devices show up when its tool is missing: (directory, file name pattern,
# how messages name them).
DEVICE_NODES = {
    NVIDIA: ("/dev", re.compile(r"nvidia\d+$"), "/dev/nvidiaN"),
    AMD: ("/dev/dri", re.compile(r"renderD\d+$"), "/dev/dri/renderDN"),
    INTEL: ("/dev/accel", re.compile(r"accel\d+$"), "/dev/accel/accelN"),
    TENSTORRENT: ("/dev/tenstorrent", re.compile(r"\d+$"), "/dev/tenstorrent/N"),
}
TOOLS = {NVIDIA: "nvidia-smi", AMD: "amd-smi", INTEL: "hl-smi", TENSTORRENT: "tt-smi"}

# ioctl requests for an interface's primary IPv4 address and netmask (linux/sockios.h).
_SIOCGIFADDR = 0x8915
_SIOCGIFNETMASK = 0x891B


class System:
    """The host the facts describe, read through the few calls ``gather`` needs.

    ``run(argv)`` runs a command without a shell and returns (exit status, stdout, stderr);
    ``which(name)`` returns the path of a command on PATH, or None.
    """

    def __init__(self, run, which):
        self.run = run
        self.which = which

    def exists(self, path: str) -> bool:
        return os.path.exists(path)

    def read_text(self, path: str) -> str:
        with open(path, encoding="utf-8", errors="replace") as handle:
            return handle.read()

    def listdir(self, path: str) -> list[str]:
        try:
            return sorted(os.listdir(path))
        except OSError:
            return []

    def resolve(self, link: str) -> str | None:
        """The path a symbolic link leads to, or None when it leads nowhere."""
        return os.path.realpath(link) if os.path.exists(link) else None

    def cpu_count(self) -> int:
        """Logical CPUs this process may run on, like Go's runtime.NumCPU (the affinity mask)."""
        if hasattr(os, "sched_getaffinity"):
            return len(os.sched_getaffinity(0))
        return os.cpu_count() or 1

    def available_bytes(self, path: str) -> int:
        """Bytes available to unprivileged users on the file system holding ``path``."""
        stat = os.statvfs(path)
        return stat.f_bavail * stat.f_bsize

    def interfaces(self) -> list[tuple[int, str]]:
        return socket.if_nameindex()

    def ipv4_address(self, name: str) -> tuple[str, int] | None:
        """(ip, prefix length) of an interface's primary IPv4 address, or None."""
        request = struct.pack("256s", name.encode("utf-8")[:15])
        sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        try:
            import fcntl  # pylint: disable=import-outside-toplevel

            address = fcntl.ioctl(sock.fileno(), _SIOCGIFADDR, request)
            netmask = fcntl.ioctl(sock.fileno(), _SIOCGIFNETMASK, request)
        except (OSError, ImportError):
            return None
        finally:
            sock.close()
        mask = struct.unpack("!I", netmask[20:24])[0]
        return socket.inet_ntoa(address[20:24]), bin(mask).count("1")


def _run_tool(system, tool, argv):
    """Stdout of a command that must succeed."""
    status, out, err = system.run(list(argv))
    if status != 0:
        said = [line.strip() for line in (err or "").splitlines() + (out or "").splitlines()]
        said = [line for line in said if line]
        raise HostFactsError(
            "%s failed with exit status %d%s"
            % (tool, status, ": " + excerpt(said[0], 200)[1:-1] if said else "")
        )
    return out


def _device_nodes(system, vendor):
    directory, pattern, _shown = DEVICE_NODES[vendor]
    return [
        os.path.join(directory, name) for name in system.listdir(directory) if pattern.match(name)
    ]


def _counted_from_nodes(system, vendor, why, warnings):
    """GPUs known only by their device nodes: a count, no name and no memory."""
    nodes = _device_nodes(system, vendor)
    warnings.append(
        "%s; counted %d GPU(s) from the device nodes %s, without name or memory"
        % (why, len(nodes), DEVICE_NODES[vendor][2])
    )
    return [gpu(vendor, None, None, 0, index, gpu_id=node) for index, node in enumerate(nodes)]


def _not_on_path(tool, vendor):
    why = "%s is not on PATH" % tool
    if vendor in (AMD, TENSTORRENT):
        why += " (dstack runs it from its own container image; gpufleet pulls no images)"
    return why


def _nvidia_gpus(system, warnings):
    smi = system.which("nvidia-smi")
    if smi is None and system.exists(WSL_NVIDIA_SMI):
        smi = WSL_NVIDIA_SMI
    if smi is None:
        return (
            _counted_from_nodes(system, NVIDIA, _not_on_path("nvidia-smi", NVIDIA), warnings),
            "device-nodes",
        )
    return (
        parse_nvidia_smi(_run_tool(system, "nvidia-smi", [smi] + list(NVIDIA_SMI_ARGS))),
        "nvidia-smi",
    )


def _amd_gpus(system, warnings):
    smi = system.which("amd-smi")
    if smi is None:
        return (
            _counted_from_nodes(system, AMD, _not_on_path("amd-smi", AMD), warnings),
            "device-nodes",
        )
    argv = [smi] + list(AMD_SMI_ARGS)
    status, out, _err = system.run(argv + [AMD_SMI_DRIVER_ARG])
    if status != 0:  # amd-smi before the --driver option
        out = _run_tool(system, "amd-smi", argv)
    gpus, dropped = assign_render_nodes(parse_amd_smi(out), system.resolve)
    for item in dropped:
        warnings.append(
            "amd-smi reports %s at %s, but it has no render node under /dev/dri/by-path; "
            "it is left out" % (item["reported_name"], item["bus_id"] or "an unknown PCI address")
        )
    return gpus, "amd-smi"


def _intel_gpus(system, warnings):
    smi = system.which("hl-smi")
    if smi is None:
        return (
            _counted_from_nodes(system, INTEL, _not_on_path("hl-smi", INTEL), warnings),
            "device-nodes",
        )
    return parse_hl_smi(_run_tool(system, "hl-smi", [smi] + list(HL_SMI_ARGS))), "hl-smi"


def _tenstorrent_gpus(system, warnings):
    smi = system.which("tt-smi")
    if smi is None:
        gpus = _counted_from_nodes(
            system, TENSTORRENT, _not_on_path("tt-smi", TENSTORRENT), warnings
        )
        source = "device-nodes"
    else:
        gpus, source = (
            parse_tt_smi(_run_tool(system, "tt-smi", [smi] + list(TT_SMI_ARGS))),
            "tt-smi",
        )
    try:
        version = parse_tt_driver_version(system.read_text(TT_DRIVER_VERSION_PATH))
    except OSError:
        version = None
    return [dict(item, driver_version=version) for item in gpus], source


_GATHERERS = {
    NVIDIA: _nvidia_gpus,
    AMD: _amd_gpus,
    INTEL: _intel_gpus,
    TENSTORRENT: _tenstorrent_gpus,
}


def gather_gpus(system: System,
                warnings: list[str]) -> tuple[str, tuple[str, ...], list[dict[str, Any]], str]:
    """(detected vendor, device paths that showed it, GPU records, where they came from)."""
    vendor, evidence = matching_probe(system.exists)
    if vendor == NONE:
        return vendor, evidence, [], "none"
    gpus, source = _GATHERERS[vendor](system, warnings)
    return vendor, evidence, gpus, source


def parse_meminfo(text: str) -> int:
    """Total RAM in bytes from /proc/meminfo (``MemTotal``, given there in kB)."""
    for line in text.splitlines():
        key, _sep, rest = line.partition(":")
        if key.strip() == "MemTotal":
            fields = rest.split()
            if fields and fields[0].isdigit() and (len(fields) == 1 or fields[1] == "kB"):
                return int(fields[0]) * 1024
            break
    raise HostFactsError("%s has no readable MemTotal line" % MEMINFO)


def docker_root(system: System, warnings: list[str]) -> tuple[str, str]:
    """(Docker's root directory, ``docker`` or ``default``): what ``docker info`` says, else
    /var/lib/docker."""
    docker = system.which("docker")
    if docker is None:
        warnings.append("docker is not on PATH; the disk is measured on %s" % DEFAULT_DOCKER_ROOT)
        return DEFAULT_DOCKER_ROOT, "default"
    status, out, err = system.run([docker, "info", "-f", "{{.DockerRootDir}}"])
    root = (out or "").strip()
    if status == 0 and root.startswith("/"):
        return root, "docker"
    said = [line.strip() for line in (err or out or "").splitlines() if line.strip()]
    warnings.append(
        "docker info did not name Docker's root directory (exit status %d%s); the disk is "
        "measured on %s" % (status, ": " + said[0] if said else "", DEFAULT_DOCKER_ROOT)
    )
    return DEFAULT_DOCKER_ROOT, "default"


def measure_disk(system: System, root: str, warnings: list[str]) -> tuple[str, int]:
    """(path measured, bytes available): on ``root`` or, if it does not exist yet, on the
    nearest directory above it, which is where it would be created."""
    path = root
    while not system.exists(path) and os.path.dirname(path) != path:
        path = os.path.dirname(path)
    if path != root:
        warnings.append("%s does not exist; the disk is measured on %s" % (root, path))
    try:
        return path, system.available_bytes(path)
    except OSError as exc:
        raise HostFactsError("cannot measure the disk at %s: %s" % (path, exc)) from exc


def gather_addresses(system: System, warnings: list[str]) -> tuple[list[str], str]:
    """(non-loopback addresses as CIDR strings in interface order, ``ip`` or ``kernel``)."""
    ip = system.which("ip")
    if ip is not None:
        status, out, _err = system.run([ip, "-j", "addr"])
        if status == 0:
            return addresses_from_ip_json(out), "ip"
        warnings.append(
            "ip -j addr failed (exit status %d); addresses are read from the kernel" % status
        )
    try:
        inet6 = parse_if_inet6(system.read_text(IF_INET6))
    except OSError:
        inet6 = []
    interfaces = system.interfaces()
    ipv4 = {}
    for _index, name in interfaces:
        found = system.ipv4_address(name)
        if found is not None:
            ipv4[name] = found
    return addresses_from_interfaces(interfaces, ipv4, inet6), "kernel"


def dstack_host_info(facts: dict[str, Any]) -> dict[str, Any]:
    """The host_info.json dstack's shim would write for these facts
    (docs/reference/dstack-runtime.md#host-resources)."""
    gpu_facts = facts["gpu"]
    return {
        "gpu_vendor": gpu_facts["vendor"],
        "gpu_name": gpu_facts["reported_name"] or "",
        "gpu_memory": gpu_facts["reported_memory_mib"],
        "gpu_count": gpu_facts["count"],
        "addresses": list(facts["addresses"]),
        "disk_size": facts["disk"]["available_bytes"],
        "cpus": facts["cpus"],
        "memory": facts["memory"]["bytes"],
    }


def gather(system: System, internal_ip: str | None = None, network: str | None = None,
           blocks: int | str = 1) -> tuple[dict[str, Any], list[str]]:
    """All facts of the host ``system`` reaches, and the warnings gathering them gave.

    ``internal_ip``, ``network`` and ``blocks`` are the fleet settings for this host; they choose
    the internal IP and the block split. Raises HostFactsError when the host breaks a rule dstack
    enforces or a tool's output cannot be read.
    """
    warnings: list[Any] = []
    blocks = parse_blocks(blocks)
    vendor, evidence, gpus, source = gather_gpus(system, warnings)
    try:
        memory_bytes = parse_meminfo(system.read_text(MEMINFO))
    except OSError as exc:
        raise HostFactsError("cannot read %s: %s" % (MEMINFO, exc)) from exc
    root, root_source = docker_root(system, warnings)
    measured, available = measure_disk(system, root, warnings)
    cpus = system.cpu_count()
    facts = host_resources(gpus, cpus, memory_bytes, available)
    facts["gpu"].update(
        detected_vendor=vendor, detected_by=list(evidence), source=source, devices=gpus
    )
    facts["disk"].update(path=root, measured_path=measured, source=root_source)
    facts["addresses"], facts["addresses_source"] = gather_addresses(system, warnings)
    facts["internal_ip"], facts["internal_ip_source"] = select_internal_ip(
        facts["addresses"], internal_ip, network
    )
    total = resolve_blocks(cpus, len(gpus), blocks)
    block = shared_offer(
        {
            "cpus": cpus,
            "memory_mib": facts["memory"]["mib"],
            "gpus": gpus,
            "disk_mib": facts["disk"]["available_mib"],
        },
        1,
        total,
    )
    facts["blocks"] = {
        "requested": blocks,
        "total": total,
        "per_block": {
            "cpus": block["cpus"],
            "memory_mib": block["memory_mib"],
            "gpus": len(block["gpus"]),
            "disk_mib": block["disk_mib"],
        },
    }
    facts["host_info"] = dstack_host_info(facts)
    return facts, warnings
