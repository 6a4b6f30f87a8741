# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Readers for the output of the GPU tools dstack's shim runs: nvidia-smi, amd-smi, hl-smi
and tt-smi, and the Tenstorrent driver version file.

Every reader takes the text a tool printed and returns a list of GPU records (see ``gpu``). Text
that cannot be read raises ToolOutputError naming the tool, the line where it applies, and what
is wrong; nothing else is raised.

PRIVATE to gpufleet.cluster: the public surface is the ``hostfacts`` package.
"""

from __future__ import annotations

import csv
import json
import re
from typing import Any, Callable, Sequence

from ._errors import ToolOutputError, excerpt
from .names import amd_short_name, intel_short_name, nvidia_short_name
from .vendor import AMD, INTEL, NVIDIA, TENSTORRENT

# The exact queries dstack's shim makes; the field lists say what the columns hold.
NVIDIA_SMI_FIELDS = ("name", "memory.total", "uuid", "driver_version")
NVIDIA_SMI_ARGS = ("--query-gpu=" + ",".join(NVIDIA_SMI_FIELDS), "--format=csv,noheader,nounits")
HL_SMI_FIELDS = ("name", "memory.total", "index")
HL_SMI_ARGS = ("--query-aip=" + ",".join(HL_SMI_FIELDS), "--format=csv,noheader,nounits")
AMD_SMI_ARGS = ("static", "--json", "--asic", "--vram", "--bus")
AMD_SMI_DRIVER_ARG = "--driver"  # asked for first; older amd-smi versions reject it
TT_SMI_ARGS = ("-s",)
TT_DRIVER_VERSION_PATH = "/sys/module/tenstorrent/version"

# Values SMI tools print for a field they cannot report.
_PLACEHOLDERS = frozenset(
    ["", "N/A", "[N/A]", "UNKNOWN", "[UNKNOWN]", "[NOT SUPPORTED]", "[NOT AVAILABLE]"]
)

# Characters that never appear in a line of CSV text (tabs do, and are treated as text).
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]")

# Other names the query fields go by (nvidia-smi accepts both spellings).
_FIELD_ALIASES = {"gpu_name": "name", "gpu_uuid": "uuid"}


def gpu(vendor: str, name: str, reported_name: str, memory_mib: int, index: int,
        gpu_id: str | None = None, bus_id: str | None = None,
        driver_version: str | None = None) -> dict[str, Any]:
    """One accelerator as the readers return it.

    ``name`` is the short name (``H100``), ``reported_name`` what the tool printed, ``memory_mib``
    what the tool printed (no catalog correction), ``index`` the position in the tool's listing,
    ``id`` what a container runtime selects the device by (NVIDIA UUID, AMD render node, Gaudi
    index, Tenstorrent board id), ``bus_id`` the PCI address where the tool reports it.
    """
    return {
        "vendor": vendor,
        "name": name,
        "reported_name": reported_name,
        "memory_mib": memory_mib,
        "index": index,
        "id": gpu_id,
        "bus_id": bus_id,
        "driver_version": driver_version,
    }


def normalize_driver_version(value: str | None) -> str | None:
    """A driver version with surrounding space removed, or None for a placeholder or nothing."""
    if not isinstance(value, str):
        return None
    value = value.strip()
    if value.upper() in _PLACEHOLDERS:
        return None
    return value


# --- CSV tools: nvidia-smi and hl-smi ---------------------------------------------------------


def _csv_records(tool, text, fields):
    """(line number, {field: value}) for each non-blank line of ``--format=csv,noheader`` text."""
    fields = tuple(_FIELD_ALIASES.get(field, field) for field in fields)
    lines = text.splitlines()
    records = []
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        if _CONTROL.search(line):
            raise ToolOutputError(
                tool, "not text, it holds control characters: %s" % excerpt(line), number
            )
        try:
            values = next(csv.reader([line], skipinitialspace=True, strict=True))
        except csv.Error as exc:
            raise ToolOutputError(tool, "not CSV (%s): %s" % (exc, excerpt(line)), number) from exc
        if len(values) != len(fields):
            raise ToolOutputError(
                tool,
                "expected %d comma-separated fields (%s), got %d: %s"
                % (len(fields), ", ".join(fields), len(values), excerpt(line)),
                number,
            )
        records.append((number, dict(zip(fields, (value.strip() for value in values)))))
    return records


def _whole_mib(tool, value, number, what="memory.total"):
    """A whole number of MiB; 0 for a placeholder such as ``[N/A]``."""
    if value.upper() in _PLACEHOLDERS:
        return 0
    if value.isdigit():
        return int(value)
    raise ToolOutputError(
        tool, "%s must be a whole number of MiB, got %s" % (what, excerpt(value)), number
    )


def _required(tool, record, field, number):
    value = record.get(field, "")
    if not value or value.upper() in _PLACEHOLDERS:
        raise ToolOutputError(tool, "no %s reported" % field, number)
    return value


def parse_nvidia_smi(text: str, fields: Sequence[str] = NVIDIA_SMI_FIELDS) -> list[dict[str, Any]]:
    """GPUs from ``nvidia-smi --query-gpu=<fields> --format=csv,noheader,nounits``.

    ``fields`` is the query's field list; it must hold ``name`` and ``memory.total``, and may
    hold ``uuid`` and ``driver_version``. The default is the query dstack's shim makes.
    """
    records = _csv_records("nvidia-smi", text, fields)
    gpus = []
    for index, (number, record) in enumerate(records):
        reported = _required("nvidia-smi", record, "name", number)
        uuid = record.get("uuid")
        gpus.append(
            gpu(
                NVIDIA,
                nvidia_short_name(reported),
                reported,
                _whole_mib("nvidia-smi", record.get("memory.total", ""), number),
                index,
                gpu_id=None if uuid is None or uuid.upper() in _PLACEHOLDERS else uuid,
                driver_version=normalize_driver_version(record.get("driver_version")),
            )
        )
    return gpus


def parse_hl_smi(text: str, fields: Sequence[str] = HL_SMI_FIELDS) -> list[dict[str, Any]]:
    """Intel Gaudi accelerators from ``hl-smi --query-aip=<fields> --format=csv,noheader,nounits``.

    The default ``fields`` is the query dstack's shim makes; the id of each device is its
    ``index``, which is what the Habana container runtime selects devices by.
    """
    records = _csv_records("hl-smi", text, fields)
    gpus = []
    for position, (number, record) in enumerate(records):
        reported = _required("hl-smi", record, "name", number)
        index = record.get("index")
        if index is not None and not index.isdigit():
            raise ToolOutputError(
                "hl-smi", "index must be a whole number, got %s" % excerpt(index), number
            )
        gpus.append(
            gpu(
                INTEL,
                intel_short_name(reported),
                reported,
                _whole_mib("hl-smi", record.get("memory.total", ""), number),
                int(index) if index is not None else position,
                gpu_id=index,
                bus_id=record.get("bus_id"),
                driver_version=normalize_driver_version(record.get("driver_version")),
            )
        )
    return gpus


# --- amd-smi ----------------------------------------------------------------------------------


def _load_json(tool, text):
    try:
        return json.loads(text)
    except ValueError as exc:
        raise ToolOutputError(
            tool, "not valid JSON (%s); the output starts %s" % (exc, excerpt(text, 60))
        ) from exc


def _field(mapping, key):
    """``mapping[key]``, matching the key without regard to case as amd-smi versions differ;
    None when ``mapping`` is not a mapping or has no such key."""
    if not isinstance(mapping, dict):
        return None
    if key in mapping:
        return mapping[key]
    for name, value in mapping.items():
        if isinstance(name, str) and name.lower() == key:
            return value
    return None


# amd-smi prints sizes in "MB" that are in fact MiB (196592 MB for a 192 GiB MI300X).
_AMD_UNITS_TO_MIB = {None: 1, "MB": 1, "MIB": 1, "GB": 1024, "GIB": 1024}


def _amd_vram_mib(vram, where):
    size = _field(vram, "size")
    value = _field(size, "value") if isinstance(size, dict) else size
    unit = _field(size, "unit") if isinstance(size, dict) else None
    if value is None or (isinstance(value, str) and value.strip().upper() in _PLACEHOLDERS):
        return 0
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise ToolOutputError("amd-smi", "%s: vram.size.value is not a number" % where)
    try:
        number = float(value)
    except ValueError as exc:
        raise ToolOutputError(
            "amd-smi", "%s: vram.size.value is not a number: %s" % (where, excerpt(value))
        ) from exc
    factor = _AMD_UNITS_TO_MIB.get(unit.upper() if isinstance(unit, str) else unit)
    if factor is None:
        raise ToolOutputError("amd-smi", "%s: unknown vram.size.unit %s" % (where, excerpt(unit)))
    if number < 0:
        raise ToolOutputError("amd-smi", "%s: vram.size.value is negative" % where)
    return int(number * factor)


def _amd_driver_version(driver):
    """``driver.version`` or else ``driver.driver_version``; None if neither holds a version.
    A driver section of any other shape is ignored: the version is a nicety."""
    for key in ("version", "driver_version"):
        version = normalize_driver_version(_field(driver, key))
        if version:
            return version
    return None


def parse_amd_smi(text: str) -> list[dict[str, Any]]:
    """AMD GPUs from ``amd-smi static --json --asic --vram --bus [--driver]``.

    Reads both shapes amd-smi prints: a JSON array of GPUs (ROCm 6) and an object whose
    ``gpu_data`` holds that array (ROCm 7). The ``id`` of each GPU is left empty: it is the GPU's
    render node, found from ``bus_id`` on the host (see ``assign_render_nodes``).
    """
    data = _load_json("amd-smi", text)
    if isinstance(data, list):
        records = data
    elif isinstance(data, dict) and isinstance(_field(data, "gpu_data"), list):
        records = _field(data, "gpu_data")
    else:
        raise ToolOutputError(
            "amd-smi",
            "expected a JSON array of GPUs (ROCm 6) or an object with a gpu_data array (ROCm 7), "
            "got %s" % excerpt(json.dumps(data), 60),
        )
    gpus = []
    for position, record in enumerate(records):
        where = "GPU %d" % position
        if not isinstance(record, dict):
            raise ToolOutputError("amd-smi", "%s is not a JSON object" % where)
        market_name = _field(_field(record, "asic"), "market_name")
        if not isinstance(market_name, str) or not market_name.strip():
            raise ToolOutputError("amd-smi", "%s: no asic.market_name" % where)
        market_name = market_name.strip()
        bdf = _field(_field(record, "bus"), "bdf")
        gpus.append(
            gpu(
                AMD,
                amd_short_name(market_name),
                market_name,
                _amd_vram_mib(_field(record, "vram"), where),
                position,
                bus_id=bdf.strip() if isinstance(bdf, str) and bdf.strip() else None,
                driver_version=_amd_driver_version(_field(record, "driver")),
            )
        )
    return gpus


def render_node_link(bus_id: str) -> str:
    """The udev link to the render node of the GPU at PCI address ``bus_id``."""
    return "/dev/dri/by-path/pci-%s-render" % bus_id


def assign_render_nodes(
        gpus: list[dict[str, Any]], resolve: Callable[[str], str | None],
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Fill the ``id`` of AMD GPUs with their render node (``/dev/dri/renderD128``...).

    ``resolve(link)`` returns the path a udev link points to, or None. As in dstack, a GPU whose
    render node cannot be found is left out: no container could be given it. Returns
    (GPUs kept, GPUs left out).
    """
    kept, dropped = [], []
    for item in gpus:
        node = resolve(render_node_link(item["bus_id"])) if item["bus_id"] else None
        if node and node.startswith("/dev/dri/renderD"):
            kept.append(dict(item, id=node))
        else:
            dropped.append(item)
    for index, item in enumerate(kept):
        item["index"] = index
    return kept, dropped


# --- tt-smi -----------------------------------------------------------------------------------

# Memory of one Tenstorrent chip, in GiB, by board name (an n300 or p300 board carries two).
_TT_WORMHOLE_PREFIXES = ("n150", "n300", "tt-galaxy-wh")
_TT_BLACKHOLE_GIB = {"p100a": 28, "p150": 32, "p300": 32, "tt-galaxy-bh": 32}


def _tt_board_name(board_type):
    """(board name, half) from a tt-smi ``board_type``: "n300 L" -> ("n300", "L");
    revisions are folded ("p150b" -> "p150", "bh-scrappy" -> "p100a")."""
    name, half = board_type.strip(), ""
    if name.endswith((" L", " R")):
        name, half = name[:-2].strip(), name[-1]
    if name in ("bh-scrappy", "p100"):
        name = "p100a"
    elif name.startswith("p150"):
        name = "p150"
    elif name.startswith("p300"):
        name = "p300"
    return name, half


def _tt_chip_mib(name):
    if name.startswith(_TT_WORMHOLE_PREFIXES):
        return 12 * 1024
    return _TT_BLACKHOLE_GIB.get(name, 0) * 1024


def _tt_chips(data):
    devices = _field(data, "device_info")
    if devices is None:
        return []
    if not isinstance(devices, list):
        raise ToolOutputError("tt-smi", "device_info is not a list")
    chips = []
    for position, device in enumerate(devices):
        info = _field(device, "board_info")
        board_type = _field(info, "board_type")
        board_id = _field(info, "board_id")
        if not isinstance(board_type, str) or not isinstance(board_id, str):
            raise ToolOutputError(
                "tt-smi", "device_info[%d]: no board_info.board_type and board_id" % position
            )
        bus_id = _field(info, "bus_id")
        name, half = _tt_board_name(board_type)
        chips.append(
            {
                "name": name,
                "half": half,
                "board_id": board_id,
                "bus_id": bus_id.strip() if isinstance(bus_id, str) else None,
                # A chip without a PCI address is reached through another chip of its board.
                "remote": isinstance(bus_id, str) and bus_id.strip().upper() == "N/A",
            }
        )
    return chips


def parse_tt_smi(text: str) -> list[dict[str, Any]]:
    """Tenstorrent accelerators from ``tt-smi -s`` (a JSON snapshot).

    tt-smi lists chips; dstack counts boards, and so does this:

    - a chip marked ``L`` starts a board; the ``R`` chip of the same board adds its memory to the
      first ``L`` board with its board id (n300: 2 x 12 GiB), so does an unmarked Blackhole chip
      that has no PCI address (the second chip of a p300);
    - other unmarked chips are boards of their own if they are Blackhole (p100a, p150, p300,
      galaxy-bh), else they join an earlier board with the same board id (older tt-smi output);
    - a Galaxy's 32 chips all carry one board id and are 32 accelerators.
    """
    data = _load_json("tt-smi", text)
    if not isinstance(data, dict):
        raise ToolOutputError("tt-smi", "expected a JSON object with device_info")
    chips = _tt_chips(data)
    boards: list[Any] = []

    def board_for(chip, same_name):
        for board in boards:
            if board["id"] == chip["board_id"] and (board["name"] == chip["name"] or not same_name):
                return board
        return None

    def start_board(chip):
        boards.append(
            {
                "name": chip["name"],
                "id": chip["board_id"],
                "mib": _tt_chip_mib(chip["name"]),
                "bus_id": chip["bus_id"],
            }
        )

    for chip in chips:
        if chip["half"] == "L":
            start_board(chip)
    for chip in chips:
        if chip["half"] == "R":
            board = board_for(chip, chip["name"] in _TT_BLACKHOLE_GIB)
            if board is not None:
                board["mib"] += _tt_chip_mib(chip["name"])
    for chip in chips:
        if chip["half"]:
            continue
        if chip["name"] in _TT_BLACKHOLE_GIB:
            if not chip["remote"]:
                start_board(chip)
            continue
        board = board_for(chip, False)
        if board is None:
            start_board(chip)
        else:
            board["mib"] += _tt_chip_mib(chip["name"])
    for chip in chips:
        if not chip["half"] and chip["remote"] and chip["name"] in _TT_BLACKHOLE_GIB:
            board = board_for(chip, True)
            if board is not None:
                board["mib"] += _tt_chip_mib(chip["name"])
    return [
        gpu(
            TENSTORRENT,
            board["name"],
            board["name"],
            board["mib"],
            index,
            gpu_id=board["id"],
            bus_id=board["bus_id"],
        )
        for index, board in enumerate(boards)
    ]


def parse_tt_driver_version(text: str) -> str | None:
    """The Tenstorrent kernel driver version from /sys/module/tenstorrent/version, or None."""
    return normalize_driver_version(text)
