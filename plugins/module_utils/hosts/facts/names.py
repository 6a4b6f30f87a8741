# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Short accelerator names and catalog memory sizes, as dstack and gpuhunt compute them.

GPU tools report marketing strings ("NVIDIA H100 80GB HBM3", "AMD Instinct MI300X VF",
"HL-225"); dstack stores short names ("H100", "MI300X", "Gaudi2") and matches them against the
names users write in ``resources.gpu``. The same short names come out of here.

PRIVATE to gpufleet.cluster: the public surface is the ``hostfacts`` package.
"""

from __future__ import annotations

import re

# --- NVIDIA -----------------------------------------------------------------------------------

# Brand words that never belong to the short name; every occurrence goes.
_NVIDIA_BRANDS = re.compile(r"(?:NVIDIA|Tesla|Quadro|GeForce) ")

# Ampere workstation cards are sold as "RTX A6000" but known as "A6000".
_NVIDIA_WORKSTATION_AMPERE = re.compile(r"A\d+")

# Words glued to the model before the model is picked out, in this order.
_NVIDIA_GLUE = (
    (re.compile(r" Ti"), "Ti"),  # "RTX 3090 Ti" -> "RTX 3090Ti"
    (re.compile(r" ?SUPER", re.IGNORECASE), "SUPER"),  # "2070 Super" -> "2070SUPER"
    (re.compile(r" NVL"), "NVL"),  # "H100 NVL" -> "H100NVL"
    (re.compile(r" Ada Generation"), "Ada"),  # "RTX 6000 Ada Generation" -> "RTX 6000Ada"
    (re.compile(r"RTX "), "RTX"),  # "RTX 4090" -> "RTX4090"
)

# A datacenter model: one of these letters, digits, then any word characters ("H100", "A10G",
# "L40S", "T4"). Names without one ("RTX4090", "B200") are kept whole, spaces removed.
_NVIDIA_MODEL = re.compile(r"[AHLPTV]\d+\w*")


def nvidia_short_name(reported: str) -> str:
    """The short name of an NVIDIA GPU from the ``name`` nvidia-smi reports.

    "NVIDIA H100 80GB HBM3" -> "H100", "NVIDIA A100-SXM4-80GB" -> "A100", "Tesla T4" -> "T4",
    "NVIDIA RTX A6000" -> "A6000", "NVIDIA GeForce RTX 4090" -> "RTX4090",
    "NVIDIA RTX 6000 Ada Generation" -> "RTX6000Ada", "NVIDIA GH200 480GB" -> "GH200".
    """
    name = _NVIDIA_BRANDS.sub("", reported)
    if "GH200" in name:
        return "GH200"
    if "RTX A" in name:
        name = name.replace("RTX A", "A")
        found = _NVIDIA_WORKSTATION_AMPERE.search(name)
        return found.group(0) if found else name.replace(" ", "")
    for pattern, glued in _NVIDIA_GLUE:
        name = pattern.sub(glued, name)
    found = _NVIDIA_MODEL.search(name)
    return found.group(0) if found else name.replace(" ", "")


# --- AMD --------------------------------------------------------------------------------------

# amd-smi's asic.market_name for Instinct accelerators comes in many spellings:
# "AMD Instinct MI300X", "AMD Instinct MI300X VF", "Instinct MI210", "MI300X-O",
# "AMD INSTINCT MI250 (MCM) OAM AC MBA". The model is the MI word; anything else (Radeon cards,
# iGPUs) is kept as reported.
_AMD_INSTINCT = re.compile(
    r"^(?:AMD )?(?:Instinct )?(?P<model>MI\d{1,3}[A-Z]?(?:-\w+)?)(?:\s|$)",
    re.ASCII | re.IGNORECASE,
)

# Model words amd-smi reports that are not the product name.
_AMD_ALIASES = {"MI300X-O": "MI300X"}


def amd_short_name(market_name: str) -> str:
    """The short name of an AMD accelerator from amd-smi's ``asic.market_name``."""
    found = _AMD_INSTINCT.search(market_name)
    name = found.group("model") if found else market_name
    return _AMD_ALIASES.get(name, name)


# --- Intel Gaudi ------------------------------------------------------------------------------

# hl-smi reports a board model; the product is named after the chip generation.
_GAUDI_BOARDS = (
    ("HL-205", "Gaudi"),
    ("HL-225", "Gaudi2"),
    ("HL-325", "Gaudi3"),  # OAM, e.g. HL-325L
    ("HL-338", "Gaudi3"),  # PCIe
)


def intel_short_name(reported: str) -> str:
    """The product name of an Intel Gaudi board from the ``name`` hl-smi reports
    ("HL-225" -> "Gaudi2"); an unknown board keeps its reported name."""
    for board, product in _GAUDI_BOARDS:
        if reported.startswith(board):
            return product
    return reported


# --- catalog memory ---------------------------------------------------------------------------

# The memory sizes, in GiB, that each accelerator model is sold with (gpuhunt's catalog). Keys
# are short names in lower case; a model sold in several sizes lists each.
KNOWN_MEMORY_GIB = {
    # NVIDIA
    "a10": (24,),
    "a16": (16,),
    "a40": (48,),
    "a100": (40, 80),
    "a10g": (24,),
    "a4000": (16,),
    "a4500": (20,),
    "a5000": (24,),
    "a6000": (48,),
    "h100": (80,),
    "h100nvl": (94,),
    "h200": (141,),
    "b200": (180,),
    "l4": (24,),
    "l40": (48,),
    "l40s": (48,),
    "p100": (16,),
    "rtx3060": (8, 12),
    "rtx3060ti": (8,),
    "rtx3070ti": (8,),
    "rtx3080": (10,),
    "rtx3080ti": (12,),
    "rtx3090": (24,),
    "rtx4090": (24,),
    "rtx6000": (24,),
    "rtx2000ada": (16,),
    "rtx4000ada": (20,),
    "rtx6000ada": (48,),
    "t4": (16,),
    "v100": (16, 32),
    "gh200": (96,),
    # AMD
    "mi100": (32,),
    "mi210": (64,),
    "mi250": (128,),
    "mi250x": (128,),
    "mi300a": (128,),
    "mi300x": (192,),
    "mi308x": (128,),
    "mi325x": (288,),
    # Intel
    "gaudi": (32,),
    "gaudi2": (96,),
    "gaudi3": (128,),
    # Tenstorrent
    "n150": (12,),
    "n300": (24,),
}

# A reported size within this fraction of a catalog size is taken to be that size: tools
# report what the driver can use, a little less than what is on the board (nvidia-smi shows an
# H100 as 81559 MiB, an A10 as about 22 GiB instead of 24).
CATALOG_TOLERANCE = 0.07


def catalog_memory_gib(name: str, reported_mib: int | float) -> int:
    """Whole GiB of memory for a GPU named ``name`` (a short name) that reports ``reported_mib``.

    The catalog size closest to the report is used when it is within 7% of it; otherwise the
    report is rounded to whole GiB (half to even, as Python rounds).
    """
    reported_gib = reported_mib / 1024.0
    sizes = [size for size in KNOWN_MEMORY_GIB.get(name.lower(), ()) if size > 0]
    if sizes:
        closest = min(sizes, key=lambda size: abs(size - reported_gib))
        if abs(closest - reported_gib) / closest < CATALOG_TOLERANCE:
            return closest
    return int(round(reported_gib))
