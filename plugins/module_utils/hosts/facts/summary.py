# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""From raw host measurements to the resources dstack offers: the GPU summary
(docs/reference/dstack-runtime.md#host-resources) and the split of a host into blocks
(docs/reference/dstack-runtime.md#blocks).

PRIVATE to gpufleet.cluster: the public surface is the ``hostfacts`` package.
"""

from __future__ import annotations

from typing import Any

from ._errors import HostFactsError
from .names import catalog_memory_gib
from .vendor import NONE

MIB = 1024 * 1024
AUTO = "auto"


def summarize_gpus(gpus: list[dict[str, Any]]) -> dict[str, Any]:
    """What a host offers in GPUs, from the records the tool readers return.

    As in dstack, all GPUs of a host are taken to be alike: the count is the number of records
    and the name and memory are the first GPU's, its memory set to the catalog size when the
    report is close to one (see ``catalog_memory_gib``). GPUs of two vendors are an error.
    """
    vendors = sorted(set(item["vendor"] for item in gpus))
    if len(vendors) > 1:
        raise HostFactsError("multiple GPU vendors detected: %s" % ", ".join(vendors))
    if not gpus:
        return {
            "vendor": NONE,
            "count": 0,
            "name": None,
            "memory_mib": 0,
            "reported_name": None,
            "reported_memory_mib": 0,
            "driver_version": None,
        }
    first = gpus[0]
    memory_mib = first["memory_mib"]
    if first["name"] and memory_mib:
        memory_mib = catalog_memory_gib(first["name"], memory_mib) * 1024
    driver_versions = [item["driver_version"] for item in gpus if item.get("driver_version")]
    return {
        "vendor": vendors[0],
        "count": len(gpus),
        "name": first["name"],
        "memory_mib": memory_mib,
        "reported_name": first["reported_name"],
        "reported_memory_mib": first["memory_mib"],
        "driver_version": driver_versions[0] if driver_versions else None,
    }


def bytes_and_mib(value: int) -> dict[str, int]:
    """A size in bytes together with its whole MiB (rounded down), as dstack stores it."""
    return {"bytes": value, "mib": value // MIB}


def host_resources(gpus: list[dict[str, Any]], cpus: int, memory_bytes: int,
                   disk_available_bytes: int) -> dict[str, Any]:
    """The resources of a host as a fleet offers them.

    ``cpus`` is the number of logical CPUs the agent may use, ``memory_bytes`` the RAM (MemTotal),
    ``disk_available_bytes`` the space available on Docker's root directory (not its size).
    """
    return {
        "cpus": cpus,
        "memory": bytes_and_mib(memory_bytes),
        "disk": {
            "available_bytes": disk_available_bytes,
            "available_mib": disk_available_bytes // MIB,
        },
        "gpu": summarize_gpus(gpus),
    }


def parse_blocks(value: object) -> int | str:
    """A fleet's ``blocks`` value: a whole number of at least 1, or ``auto``."""
    if isinstance(value, str):
        text = value.strip()
        if text.lower() == AUTO:
            return AUTO
        if text.isdigit():
            value = int(text)
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise HostFactsError(
            "blocks must be a whole number of at least 1 or auto, got %r" % (value,)
        )
    return value


def resolve_blocks(cpus: int, gpu_count: int, blocks: int | str, tpu: bool = False) -> int:
    """The number of blocks a host with ``cpus`` CPUs and ``gpu_count`` GPUs is split into.

    ``auto`` means as many as possible: one per GPU (at most one per CPU), or one per CPU on a
    host without GPUs. A number of blocks must divide both the CPUs and the GPUs. TPUs are never
    shared, so a TPU host counts as having one GPU.
    """
    if tpu and gpu_count > 0:
        gpu_count = 1
    requested = parse_blocks(blocks)
    if isinstance(requested, str):   # AUTO
        total = min(cpus, gpu_count) if gpu_count > 0 else cpus
    else:
        total = requested
    if total < 1 or cpus % total or gpu_count % total:
        raise HostFactsError(
            "Cannot split into blocks: %s blocks do not divide %d CPUs and %d GPUs evenly"
            % (requested if requested == AUTO else total, cpus, gpu_count)
        )
    return total


def shared_offer(resources: dict[str, Any], blocks: int, total_blocks: int) -> dict[str, Any]:
    """What ``blocks`` of ``total_blocks`` blocks of a host give a job.

    ``resources`` holds ``cpus``, ``memory_mib``, ``gpus`` (a list) and ``disk_mib``. CPUs, memory
    and GPUs are shared out in whole units per block (rounded down); the disk is shared by all
    blocks, so every offer sees the whole of it.
    """
    if not 1 <= blocks <= total_blocks:
        raise HostFactsError("a shared offer takes 1 to %d blocks, not %d" % (total_blocks, blocks))
    gpus = list(resources["gpus"])
    return {
        "cpus": resources["cpus"] // total_blocks * blocks,
        "memory_mib": resources["memory_mib"] // total_blocks * blocks,
        "gpus": gpus[: len(gpus) // total_blocks * blocks],
        "disk_mib": resources["disk_mib"],
    }
