# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Which accelerator vendor a host has, judged from device paths the way dstack's shim does.

PRIVATE to gpufleet.cluster: the public surface is the ``hostfacts`` package.
"""

from __future__ import annotations

from typing import Callable

NONE = "none"
NVIDIA = "nvidia"
AMD = "amd"
INTEL = "intel"
TENSTORRENT = "tenstorrent"

# Checked top to bottom; the first probe whose paths all exist names the vendor.
#
# The first three paths belong to one vendor each. /dev/kfd and /dev/accel do not: /dev/kfd
# also appears for AMD integrated GPUs and /dev/accel for NPUs of several vendors, so they come
# last, AMD before Intel Gaudi. An NVIDIA card in a host with an AMD iGPU is therefore found as
# NVIDIA (dstack issue #4085).
VENDOR_PROBES = (
    (NVIDIA, ("/dev/nvidiactl",)),
    (NVIDIA, ("/dev/dxg", "/usr/lib/wsl/lib/nvidia-smi")),  # WSL2
    (TENSTORRENT, ("/dev/tenstorrent",)),
    (AMD, ("/dev/kfd",)),
    (INTEL, ("/dev/accel",)),
)


def matching_probe(exists: Callable[[str], bool]) -> tuple[str, tuple[str, ...]]:
    """The (vendor, paths) of the first probe whose paths all satisfy ``exists(path)``,
    or (``none``, ()) when no probe matches."""
    for vendor, paths in VENDOR_PROBES:
        if all(exists(path) for path in paths):
            return vendor, paths
    return NONE, ()


def detect_vendor(exists: Callable[[str], bool]) -> str:
    """The GPU vendor of a host: ``nvidia``, ``amd``, ``intel``, ``tenstorrent`` or ``none``.

    ``exists(path)`` says whether a path exists on the host; passing it in keeps this testable.
    """
    return matching_probe(exists)[0]
