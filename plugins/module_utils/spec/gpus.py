# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Accelerator vendors and the GPU names each one makes.

Used to infer a GPU vendor from names in a resources spec, the way dstack does when a
configuration names GPUs but no vendor, and later to normalise names reported by hosts.
"""

from __future__ import annotations

from typing import Iterable

VENDORS = ("nvidia", "amd", "google", "intel", "tenstorrent")
VENDOR_ALIASES = {"tpu": "google", "tt": "tenstorrent"}

# Names are compared case-insensitively. The lists cover the accelerators that clouds and
# on-premises clusters offer today; an unknown name simply leaves the vendor unset.
_NAMES = {
    "nvidia": (
        "B300 B200 GB300 GB200 GH200 H200 H200NVL H100 H100NVL H800 H20 "
        "A100 A800 A40 A30 A16 A10 A10G A2 L40S L40 L20 L4 T4 V100 P100 P40 P4 K80 M60 "
        "A6000 A5000 A4500 A4000 A2000 RTX6000 RTX5000 RTX4000 RTXPRO6000 "
        "RTX5090 RTX4090 RTX4080 RTX4070 RTX3090 RTX3090Ti RTX3080 RTX3080Ti RTX3070 RTX2080Ti "
        "RTX6000Ada RTX5000Ada RTX4000Ada RTX2000Ada GTX1080Ti"
    ),
    "amd": "MI355X MI350X MI325X MI300X MI300A MI250X MI250 MI210 MI100 RX7900XTX W7900",
    "intel": "Gaudi Gaudi2 Gaudi3",
    "tenstorrent": "n150 n300 p100a p150 p300 galaxy",
}

NAME_TO_VENDOR = {}
for _vendor, _names in _NAMES.items():
    for _name in _names.split():
        NAME_TO_VENDOR[_name.lower()] = _vendor


def vendor_from_token(token: str) -> str | None:
    """The vendor a spec token names (``nvidia``, ``AMD``, ``tpu``, ``tt``...), else None."""
    lowered = token.lower()
    if lowered in VENDORS:
        return lowered
    return VENDOR_ALIASES.get(lowered)


def vendor_of_name(name: str) -> str | None:
    """The vendor making a GPU called ``name``, or None when the name is not known.

    TPU names such as ``v5p-64`` or ``v6e`` belong to Google.
    """
    lowered = name.lower()
    if lowered in NAME_TO_VENDOR:
        return NAME_TO_VENDOR[lowered]
    if len(lowered) >= 2 and lowered[0] == "v" and lowered[1].isdigit():
        return "google"
    return None


def infer_vendor(names: Iterable[str]) -> str | None:
    """The single vendor all ``names`` belong to, or None when mixed or unknown."""
    vendors = set(vendor_of_name(n) for n in names)
    if len(vendors) == 1:
        return vendors.pop()
    return None
