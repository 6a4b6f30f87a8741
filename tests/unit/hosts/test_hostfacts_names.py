# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Host facts: GPU vendor detection, short names and catalog memory
(docs/reference/dstack-runtime.md#host-resources)."""

from __future__ import annotations

import pytest
from ansible_collections.gpufleet.cluster.plugins.module_utils.hosts import facts as hf

# --- vendor detection -------------------------------------------------------------------------

VENDOR_CASES = [
    ([], "none"),
    (["/dev/nvidiactl"], "nvidia"),
    (["/dev/dxg", "/usr/lib/wsl/lib/nvidia-smi"], "nvidia"),
    (["/dev/dxg"], "none"),  # WSL2 without the NVIDIA tools is not an NVIDIA host
    (["/usr/lib/wsl/lib/nvidia-smi"], "none"),
    (["/dev/tenstorrent"], "tenstorrent"),
    (["/dev/kfd"], "amd"),
    (["/dev/accel"], "intel"),
    # An AMD iGPU (/dev/kfd) next to an NVIDIA card: NVIDIA (dstack issue #4085).
    (["/dev/kfd", "/dev/nvidiactl"], "nvidia"),
    (["/dev/kfd", "/dev/dxg", "/usr/lib/wsl/lib/nvidia-smi"], "nvidia"),
    (["/dev/kfd", "/dev/tenstorrent"], "tenstorrent"),
    # An AMD GPU next to an NPU that has /dev/accel: AMD.
    (["/dev/kfd", "/dev/accel"], "amd"),
    (["/dev/accel", "/dev/tenstorrent"], "tenstorrent"),
    (["/dev/nvidia0", "/dev/dri", "/dev/accel0"], "none"),  # only the listed paths count
]


@pytest.mark.parametrize("present, vendor", VENDOR_CASES)
def test_vendor_by_device_paths(present, vendor):
    assert hf.detect_vendor(set(present).__contains__) == vendor


def test_probe_reports_the_paths_that_matched():
    present = {"/dev/dxg", "/usr/lib/wsl/lib/nvidia-smi", "/dev/kfd"}
    assert hf.matching_probe(present.__contains__) == (
        "nvidia",
        ("/dev/dxg", "/usr/lib/wsl/lib/nvidia-smi"),
    )
    assert hf.matching_probe(set().__contains__) == ("none", ())


def test_probes_are_checked_in_dstack_order():
    assert [vendor for vendor, _paths in hf.VENDOR_PROBES] == [
        "nvidia",
        "nvidia",
        "tenstorrent",
        "amd",
        "intel",
    ]


# --- short names ------------------------------------------------------------------------------

NVIDIA_NAMES = [
    # Names nvidia-smi prints, from dstack's test-suite and the real samples in
    # fixtures/hostfacts (README.md), with the short names dstack stores.
    ("NVIDIA H100 80GB HBM3", "H100"),
    ("NVIDIA H100 NVL", "H100NVL"),
    ("NVIDIA A100-SXM4-80GB", "A100"),
    ("NVIDIA A10G", "A10G"),
    ("NVIDIA L4", "L4"),
    ("NVIDIA L40S", "L40S"),
    ("Tesla T4", "T4"),
    ("Tesla V100-SXM2-16GB", "V100"),
    ("NVIDIA GH200 120GB", "GH200"),
    ("NVIDIA GH200 480GB", "GH200"),
    ("NVIDIA RTX A6000", "A6000"),
    ("NVIDIA RTX A4000", "A4000"),
    ("NVIDIA RTX 4000 Ada Generation", "RTX4000Ada"),
    ("NVIDIA RTX 6000 Ada Generation", "RTX6000Ada"),
    ("NVIDIA GeForce RTX 4090", "RTX4090"),
    ("NVIDIA GeForce RTX 4060 Ti", "RTX4060Ti"),
    ("NVIDIA GeForce RTX 4060", "RTX4060"),
    ("NVIDIA GeForce RTX 2070 Super", "RTX2070SUPER"),
    ("NVIDIA GeForce RTX 4070 Ti SUPER", "RTX4070TiSUPER"),
    ("GeForce RTX 2080", "RTX2080"),
    ("GeForce GTX TITAN X", "GTXTITANX"),
    ("Quadro RTX 8000", "RTX8000"),
    ("NVIDIA B200", "B200"),
    ("NVIDIA H200", "H200"),
    ("H100", "H100"),
]


@pytest.mark.parametrize("reported, short", NVIDIA_NAMES)
def test_nvidia_short_names(reported, short):
    assert hf.nvidia_short_name(reported) == short


AMD_NAMES = [
    # asic.market_name values amd-smi printed on real hosts (dstack's tests, dstack issues
    # #1815 and #2900, the ROCm blog, and the issues the fixtures come from).
    ("MI300X-O", "MI300X"),
    ("Instinct MI210", "MI210"),
    ("AMD INSTINCT MI250 (MCM) OAM AC MBA", "MI250"),
    ("AMD Instinct MI300X VF", "MI300X"),
    ("AMD Instinct MI300X", "MI300X"),
    ("AMD Instinct MI350X", "MI350X"),
    ("AMD Radeon RX 7800 XT", "AMD Radeon RX 7800 XT"),
    ("AMD Radeon Graphics", "AMD Radeon Graphics"),
    ("AMD Ryzen 9 9950X3D 16-Core Processor", "AMD Ryzen 9 9950X3D 16-Core Processor"),
    # Written for these tests.
    ("MI300A", "MI300A"),
    ("Instinct MI325X", "MI325X"),
    ("amd instinct mi300x", "mi300x"),
    ("AMD Radeon PRO W7900", "AMD Radeon PRO W7900"),
    ("MI3000X", "MI3000X"),  # four digits is no Instinct model: kept as reported
]


@pytest.mark.parametrize("market_name, short", AMD_NAMES)
def test_amd_short_names(market_name, short):
    assert hf.amd_short_name(market_name) == short


INTEL_NAMES = [
    ("HL-205", "Gaudi"),
    ("HL-225", "Gaudi2"),
    ("HL-225B", "Gaudi2"),
    ("HL-325L", "Gaudi3"),
    ("HL-338", "Gaudi3"),
    ("HL-1000", "HL-1000"),
    ("Gaudi2", "Gaudi2"),
]


@pytest.mark.parametrize("reported, short", INTEL_NAMES)
def test_intel_short_names(reported, short):
    assert hf.intel_short_name(reported) == short


# --- catalog memory ---------------------------------------------------------------------------

MEMORY_CASES = [
    # Reported MiB are what the tools print for these models (nvidia-smi sizes as listed in
    # modal-labs/modal-client PR #2797; AMD and Gaudi from the fixtures).
    ("H100", 81559, 80),
    ("A100", 81920, 80),
    ("A100", 40960, 40),
    ("A10", 23028, 24),  # 22.5 GiB reported, 24 sold
    ("L40S", 46068, 48),
    ("L4", 23034, 24),
    ("T4", 15360, 16),
    ("MI300X", 196592, 192),
    ("MI300X", 196288, 192),
    ("Gaudi2", 98304, 96),
    ("n300", 24576, 24),
    ("h100", 81559, 80),  # names are matched without regard to case
    ("V100", 16160, 16),  # sold in two sizes: the closer one
    ("V100", 32510, 32),
    ("H100", 40960, 40),  # too far from 80: rounded
    ("RTX2080", 7979, 8),  # not in the catalog: rounded
    ("GTXTITANX", 12206, 12),
    ("UNKNOWN", 2560, 2),  # 2.5 GiB: half to even, as Python and dstack round
    ("UNKNOWN", 3584, 4),
    ("UNKNOWN", 0, 0),
]


@pytest.mark.parametrize("name, reported_mib, gib", MEMORY_CASES)
def test_catalog_memory(name, reported_mib, gib):
    assert hf.catalog_memory_gib(name, reported_mib) == gib
