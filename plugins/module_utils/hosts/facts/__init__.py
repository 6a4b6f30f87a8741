# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Host facts: what a fleet host offers (GPUs, CPUs, memory, disk, addresses) and the rules
dstack applies to it (internal IP, blocks). Used by gpufleet.cluster.host_facts.

Pure Python on the managed host; the readers and rules take text and values and can be tested
anywhere. Everything raises HostFactsError (ToolOutputError for unreadable tool output) and
nothing else. The facts are described in docs/host-facts.md.

    facts, warnings = gather(System(run, which), network="10.0.0.0/24", blocks="auto")
"""

from __future__ import annotations

from ._errors import HostFactsError, ToolOutputError
from .names import amd_short_name, catalog_memory_gib, intel_short_name, nvidia_short_name
from .network import (
    addresses_from_interfaces,
    addresses_from_ip_json,
    parse_if_inet6,
    select_internal_ip,
)
from .parsers import (
    AMD_SMI_ARGS,
    HL_SMI_ARGS,
    NVIDIA_SMI_ARGS,
    TT_SMI_ARGS,
    assign_render_nodes,
    normalize_driver_version,
    parse_amd_smi,
    parse_hl_smi,
    parse_nvidia_smi,
    parse_tt_driver_version,
    parse_tt_smi,
)
from .probe import System, gather, parse_meminfo
from .summary import (
    host_resources,
    parse_blocks,
    resolve_blocks,
    shared_offer,
    summarize_gpus,
)
from .vendor import VENDOR_PROBES, detect_vendor, matching_probe

__all__ = [
    "AMD_SMI_ARGS",
    "HL_SMI_ARGS",
    "HostFactsError",
    "NVIDIA_SMI_ARGS",
    "System",
    "TT_SMI_ARGS",
    "ToolOutputError",
    "VENDOR_PROBES",
    "addresses_from_interfaces",
    "addresses_from_ip_json",
    "amd_short_name",
    "assign_render_nodes",
    "catalog_memory_gib",
    "detect_vendor",
    "gather",
    "host_resources",
    "intel_short_name",
    "matching_probe",
    "normalize_driver_version",
    "nvidia_short_name",
    "parse_amd_smi",
    "parse_blocks",
    "parse_hl_smi",
    "parse_if_inet6",
    "parse_meminfo",
    "parse_nvidia_smi",
    "parse_tt_driver_version",
    "parse_tt_smi",
    "resolve_blocks",
    "select_internal_ip",
    "shared_offer",
    "summarize_gpus",
]
