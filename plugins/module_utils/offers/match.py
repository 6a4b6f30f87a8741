# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Does an offer satisfy a resources spec: the one matcher for hosts and cloud offers.

Pure Python (no Ansible imports). An offer is what one host, a share of it (blocks,
docs/reference/dstack-runtime.md#blocks) or one cloud instance type gives a job: ``{"cpus",
"memory_mib", "disk_mib", "gpu_vendor", "gpu_name", "gpu_memory_mib", "gpu_count", "arch"}``.
Measured hosts become offers through ``host_offer`` (from a ``gpufleet_host`` fact); catalog
instance types are written in the same fact shape, so task placement and cloud offers are matched by
the same rules, which are dstack's (docs/reference/dstack-files.md#resource-grammar).

    offer = host_offer(fact, 1, 8)     # what 1 of 8 blocks of a host gives
    matches(resources, offer)          # None, or why the offer falls short
"""

from __future__ import annotations

import copy
from typing import Any

from ..core.errors import GpufleetError


class MatchError(GpufleetError):
    """Input that cannot be matched: a malformed fact, offer or range."""


def resolve_arch(resources: dict[str, Any], default_image: bool) -> dict[str, Any]:
    """``resources`` as the dstack server resolves a run's (docs/reference/dstack-files.md#cpu): an
    unset CPU arch on the default image (no image, no docker) is x86; with a custom image it stays
    unset (any), since the image's architectures are not known here. Returns a copy."""
    resources = copy.deepcopy(resources)
    cpu = resources.get("cpu") if isinstance(resources, dict) else None
    if default_image and isinstance(cpu, dict) and cpu.get("arch") is None:
        cpu["arch"] = "x86"
    return resources


def uses_default_image(config: dict[str, Any]) -> bool:
    """Whether a task runs dstack's default image (no ``image``, no ``docker``)."""
    return config.get("image") is None and not config.get("docker")


# How facts spell CPU architectures, as resources specs spell them
# (docs/reference/dstack-files.md#cpu).
ARCH_NAMES = {
    "x86": "x86", "x86_64": "x86", "amd64": "x86", "i386": "x86", "i686": "x86",
    "arm": "arm", "arm64": "arm", "aarch64": "arm",
}


def type_name(value: object) -> str:
    return type(value).__name__


def whole_number(value: Any, what: str, minimum: int = 0) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise MatchError(
            "%s must be a whole number of at least %d, got %r" % (what, minimum, value)
        )
    return value


def require_mapping(value: Any, what: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise MatchError("%s must be a mapping, got %s" % (what, type_name(value)))
    return value


def _fact(facts, path, what_host):
    """The value at dotted ``path`` of a host fact, or MatchError naming what is missing."""
    value = facts
    for key in path.split("."):
        if not isinstance(value, dict) or key not in value:
            raise MatchError(
                "host facts of %s lack %s; gather them again (gpufleet.cluster.host_facts)"
                % (what_host, path)
            )
        value = value[key]
    return value


def short_number(value: float, digits: int) -> str:
    text = "%.*f" % (digits, value)
    if "." in text:
        text = text.rstrip("0").rstrip(".")
    return text


def _shown(value, limit, unit):
    """``value`` and ``limit`` as text, with enough decimals that they read differently."""
    for digits in (1, 2, 3, 4):
        left, right = short_number(value, digits), short_number(limit, digits)
        if left != right:
            break
    return left + unit, right + unit


def _range_reason(label, value, spec, unit=""):
    """Why ``value`` is outside the range ``spec`` ({"min", "max"}, None = open), or None."""
    if spec is None:
        return None
    spec = require_mapping(spec, "the %s range" % label)
    low, high = spec.get("min"), spec.get("max")
    if low is not None and value < low:
        shown, limit = _shown(value, low, unit) if unit else (str(value), str(low))
        return "%s %s < %s" % (label, shown, limit)
    if high is not None and value > high:
        shown, limit = _shown(value, high, unit) if unit else (str(value), str(high))
        return "%s %s > %s" % (label, shown, limit)
    return None


def host_capacity(facts: Any, what_host: str = "the host") -> dict[str, Any]:
    """The parts of a ``gpufleet_host`` fact that placement reads, checked."""
    facts = require_mapping(facts, "host facts of %s" % what_host)
    cpus = whole_number(_fact(facts, "cpus", what_host), "cpus of %s" % what_host)
    memory_mib = whole_number(_fact(facts, "memory.mib", what_host), "memory.mib of %s" % what_host)
    disk_mib = whole_number(
        _fact(facts, "disk.available_mib", what_host), "disk.available_mib of %s" % what_host
    )
    total = whole_number(
        _fact(facts, "blocks.total", what_host), "blocks.total of %s" % what_host, 1)
    gpu = facts.get("gpu") or {}
    gpu = require_mapping(gpu, "gpu of %s" % what_host)
    devices = gpu.get("devices") or []
    if not isinstance(devices, list) or not all(isinstance(d, dict) for d in devices):
        raise MatchError("gpu.devices of %s must be a list of device mappings" % what_host)
    count = gpu.get("count")
    count = len(devices) if count is None else whole_number(count, "gpu.count of %s" % what_host)
    arch_text = facts.get("arch")
    arch = "x86" if arch_text is None else ARCH_NAMES.get(str(arch_text).lower())
    if arch is None:
        raise MatchError(
            "arch of %s is %r; expected x86_64 or aarch64" % (what_host, arch_text))
    return {
        "cpus": cpus,
        "memory_mib": memory_mib,
        "disk_mib": disk_mib,
        "total_blocks": total,
        "gpu_vendor": gpu.get("vendor") or "none",
        "gpu_name": gpu.get("name"),
        "gpu_memory_mib": gpu.get("memory_mib") or 0,
        "gpu_count": count,
        "devices": devices,
        "arch": arch,
    }


def block_offer(host: dict[str, Any], blocks: int, total: int) -> dict[str, Any]:
    # dstack's shared offer (docs/reference/dstack-runtime.md#blocks): CPUs, memory and GPUs
    # floor-divided per block, times the blocks taken; the disk is shared, so every offer sees all
    # of it.
    gpu_count = host["gpu_count"] // total * blocks
    return {
        "cpus": host["cpus"] // total * blocks,
        "memory_mib": host["memory_mib"] // total * blocks,
        "disk_mib": host["disk_mib"],
        "gpu_vendor": host["gpu_vendor"] if gpu_count else "none",
        "gpu_name": host["gpu_name"] if gpu_count else None,
        "gpu_memory_mib": host["gpu_memory_mib"] if gpu_count else 0,
        "gpu_count": gpu_count,
        "arch": host["arch"],
    }


def host_offer(facts: Any, blocks: int | str, total_blocks: int | str) -> dict[str, Any]:
    """What ``blocks`` of ``total_blocks`` blocks of a host give a job
    (docs/reference/dstack-runtime.md#blocks).

    Returns {"cpus", "memory_mib", "disk_mib", "gpu_vendor", "gpu_name", "gpu_memory_mib",
    "gpu_count", "arch"}; the disk is not divided. ``facts`` is a ``gpufleet_host`` fact.
    """
    host = host_capacity(facts)
    total = whole_number(total_blocks, "total_blocks", 1)
    taken = whole_number(blocks, "blocks", 1)
    if taken > total:
        raise MatchError("an offer takes 1 to %d blocks, not %d" % (total, taken))
    return block_offer(host, taken, total)


def matches(resources: dict[str, Any], offer: dict[str, Any]) -> str | None:
    """None when ``offer`` satisfies the resources spec, else a short reason such as
    ``cpu 2 < 4`` or ``gpu name T4 not in [H100]``.

    The checks are gpuhunt's, which dstack runs on every instance offer
    (docs/reference/dstack-files.md#resource-grammar). Sizes in the spec
    are GB; the offer's are MiB and are compared as MiB / 1024.
    """
    resources = require_mapping(resources, "resources")
    offer = require_mapping(offer, "the offer")
    cpu = resources.get("cpu") or {}
    # An unset arch matches any host here; place() first resolves it as the dstack server does
    # (docs/reference/dstack-files.md#cpu: the default image means x86).
    arch = cpu.get("arch")
    if arch is not None and arch != offer["arch"]:
        return "cpu arch %s, not %s" % (offer["arch"], arch)
    reason = _range_reason("cpu", offer["cpus"], cpu.get("count"))
    if reason:
        return reason
    reason = _range_reason("memory", offer["memory_mib"] / 1024, resources.get("memory"), "GB")
    if reason:
        return reason
    gpu = resources.get("gpu")
    if gpu:
        reason = _gpu_reason(require_mapping(gpu, "resources.gpu"), offer)
        if reason:
            return reason
    # shm_size is not matched: it only sizes /dev/shm in the container.
    disk = resources.get("disk")
    if disk:
        return _range_reason("disk", offer["disk_mib"] / 1024, disk.get("size"), "GB")
    return None


def _gpu_reason(gpu, offer):
    count = offer["gpu_count"]
    vendor = gpu.get("vendor")
    # As in gpuhunt, a vendor rules out hosts without GPUs (vendor "none") even when the count
    # range starts at 0: `gpu: nvidia:0..` never lands on a CPU-only host.
    if vendor and vendor != offer["gpu_vendor"]:
        return "gpu vendor %s, not %s" % (offer["gpu_vendor"], vendor)
    # A count range is a plain range: `0..` (the run default) takes hosts with any number of
    # GPUs, none included, and a host with 8 GPUs matches `0..` as it matches `1..`.
    reason = _range_reason("gpu count", count, gpu.get("count"))
    if reason:
        return reason
    names = gpu.get("name")
    if names is not None:
        wanted = [str(name).lower() for name in names]
        have = offer["gpu_name"]
        if have is None or str(have).lower() not in wanted:
            return "gpu name %s not in [%s]" % (have or "none", ", ".join(names))
    # compute_capability is not measured on hosts (the fact has no such field), so it is not
    # checked; dstack looks it up in gpuhunt's catalog by GPU name.
    memory_gb = offer["gpu_memory_mib"] / 1024 if count else 0
    reason = _range_reason("gpu memory", memory_gb, gpu.get("memory"), "GB")
    if reason:
        return reason
    return _range_reason("gpu total memory", count * memory_gb, gpu.get("total_memory"), "GB")
