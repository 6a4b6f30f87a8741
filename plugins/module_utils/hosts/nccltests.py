# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""nccl-tests and rccl-tests output: the parser.

``parse(text)`` reads what ``all_reduce_perf`` (or any other ``*_perf`` binary of NVIDIA's
nccl-tests or AMD's rccl-tests) prints on rank 0: the parameter line, the ``#  Rank ...``
device lines, the table header, one row per message size with the out-of-place and in-place
time, algbw, busbw and ``#wrong`` columns, and the footer (``Out of bounds values``, ``Avg bus
bandwidth``). The table is read through its header, so the ``root`` column (absent before
nccl-tests 2.11), ``-S`` timestamps and ``-I`` per-iteration columns do not shift the figures;
without a header the default layouts are assumed. Lines may carry a launcher's prefix
(``[run-0] `` from ``gpufleet logs``, ``[1,0]<stdout>:`` from Open MPI's ``--tag-output``,
``0: `` from ``srun -l``); other lines (NCCL's INFO lines, MPI warnings) are ignored.

The published figures a run is measured against, and the comparison, are in
nccltests_compare.py.

Pure Python, no Ansible imports: the filter plugins ``gpufleet.cluster.nccl_tests_*`` and the
unit tests call it directly.
"""

from __future__ import annotations

import re
from typing import Any

from ..core.errors import GpufleetError

GIB = 1024 ** 3
MIB = 1024 ** 2

_PREFIXES = (
    re.compile(r"^\[\d+,\d+\]<(?:stdout|stderr)>: ?"),  # Open MPI --tag-output
    re.compile(r"^\[[^\]\s]+-\d+\] ?"),                   # gpufleet logs: [run-rank]
    re.compile(r"^\d+: "),                               # srun -l
)
_INT = re.compile(r"^-?\d+$")
_NUMBER = re.compile(r"^-?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?$")
_PARAMS = re.compile(
    r"^#\s*nThread\s+(?P<nthreads>\d+)\s+nGpus\s+(?P<ngpus>\d+)\s+minBytes\s+(?P<min>\d+)\s+"
    r"maxBytes\s+(?P<max>\d+)\s+step:\s*(?P<step>\d+)\((?P<kind>factor|bytes)\)(?P<rest>.*)$")
_PARAM_PAIRS = re.compile(r"([A-Za-z][A-Za-z ]*?):\s*(-?\d+)")
_RANK = re.compile(
    r"^#\s*Rank\s+(?P<rank>\d+)\s+(?:Group\s+(?P<group>\d+)\s+)?Pid\s+(?P<pid>\d+)\s+on\s+"
    r"(?P<host>\S+)\s+device\s+(?P<device>\d+)\s+\[(?P<bus>[^\]]*)\]\s*(?P<name>.*?)\s*$")
_VERSION = re.compile(r"^#?\s*(?P<suite>nccl-tests|rccl-tests):?\s+[Vv]ersion\s+(?P<version>\S+)")
_STARTING = re.compile(r"^#\s*Collective test starting:\s*(?P<test>\S+)")
_OOB = re.compile(r"^#?\s*Out of bounds values\s*:\s*(?P<count>\d+)\s*(?P<status>OK|FAILED)?")
_AVG = re.compile(r"^#?\s*Avg bus bandwidth\s*:\s*(?P<value>[-+0-9.eE]+|nan|inf)\s*"
                  r"(?P<status>OK|FAILED)?", re.IGNORECASE)
_CONCLUDED = re.compile(r"^#\s*Collective test concluded:\s*(?P<test>\S+)")
_FAILURE = re.compile(r"(Test (?:NCCL|CUDA|HIP|RCCL) failure|Test failure|^#\s*error:\s*\S)")
_SIZE_SUFFIX = re.compile(r"^\s*(?P<number>\d+(?:\.\d+)?)\s*(?P<unit>[kKmMgGtT]?)[bB]?\s*$")

# Column layouts without a header line: nccl-tests >= 2.11 and rccl-tests print a root column.
_DEFAULT_COLUMNS = ["size", "count", "type", "redop", "root",
                    "time", "algbw", "busbw", "#wrong", "time", "algbw", "busbw", "#wrong"]
_OLD_COLUMNS = ["size", "count", "type", "redop",
                "time", "algbw", "busbw", "error", "time", "algbw", "busbw", "error"]
_TIME_NAMES = ("time", "cputime")
_WRONG_NAMES = ("#wrong", "error")


class NcclTestsError(GpufleetError, ValueError):
    """Input the parser or the comparison cannot use; the message says why."""


def strip_prefix(line: str) -> str:
    """``line`` without launcher prefixes (gpufleet logs, Open MPI --tag-output, srun -l)."""
    for _round in range(3):
        before = line
        for pattern in _PREFIXES:
            line = pattern.sub("", line, count=1)
        if line == before:
            break
    return line


def parse_size(value: int | str) -> int:
    """Bytes from an nccl-tests size argument: ``8``, ``512K``, ``128M``, ``8G`` (units of 1024,
    as nccl-tests' ``parsesize``), or an integer."""
    if isinstance(value, bool):
        raise NcclTestsError("a size is a number of bytes or a string like 8G, not %r" % value)
    if isinstance(value, int):
        return value
    match = _SIZE_SUFFIX.match(str(value))
    if not match:
        raise NcclTestsError("cannot read %r as a size (use bytes, or K, M, G like 8G)" % value)
    units = {"": 1, "k": 1024, "m": MIB, "g": GIB, "t": 1024 * GIB}
    return int(float(match.group("number")) * units[match.group("unit").lower()])


def expected_sizes(min_bytes: int | str, max_bytes: int | str, factor: int = 2,
                   step_bytes: int | str | None = None) -> list[int]:
    """The message sizes an nccl-tests run walks through (``-b``, ``-e``, ``-f`` or ``-i``),
    before the per-collective rounding of the count."""
    low, high = parse_size(min_bytes), parse_size(max_bytes)
    if low <= 0 or high < low:
        raise NcclTestsError("sizes: need 0 < min (%s) <= max (%s)" % (low, high))
    if step_bytes:
        step = parse_size(step_bytes)
        return list(range(low, high + 1, step))
    factor = int(factor)
    if factor < 2:
        raise NcclTestsError("sizes: the step factor must be 2 or more, got %s" % factor)
    sizes = []
    size = low
    while size <= high:
        sizes.append(size)
        size *= factor
    return sizes


def _number(token):
    """A float from a table cell, or None for N/A (and for what is not a number)."""
    token = token.rstrip("*")
    if _NUMBER.match(token):
        return float(token)
    if token.lower() in ("nan", "-nan", "inf", "-inf"):
        return float(token)
    return None


def _wrong(token):
    """The ``#wrong`` cell: an int, or None when the run did not check (``-c 0``: N/A)."""
    if token.upper() == "N/A":
        return None
    value = _number(token)
    if value is None:
        raise NcclTestsError("cannot read the #wrong cell %r" % token)
    return int(value)


def _layout(columns):
    """Where each figure sits in a row: ``{"size": i, ..., "modes": [{"time": i, ...}, ...]}``
    (first mode out-of-place, second in-place). None when the columns are not a results
    table."""
    names = [c.lower() for c in columns]
    if "size" not in names or "busbw" not in names:
        return None
    layout = {"width": len(names), "modes": []}
    for key in ("size", "count", "type", "redop", "root"):
        layout[key] = names.index(key) if key in names else None
    mode = {}
    for index, name in enumerate(names):
        if name in _TIME_NAMES:
            mode = {"time": index}
            layout["modes"].append(mode)
        elif name in ("algbw", "busbw") and mode:
            mode[name] = index
        elif name in _WRONG_NAMES and mode:
            mode["wrong"] = index
            mode["wrong_kind"] = name
    layout["modes"] = [m for m in layout["modes"] if "busbw" in m][:2]
    if not layout["modes"] or layout["size"] is None or layout["count"] is None:
        return None
    return layout


_DEFAULT_LAYOUT = _layout(_DEFAULT_COLUMNS)
_OLD_LAYOUT = _layout(_OLD_COLUMNS)


def _mode_figures(tokens, mode):
    figures = {"time_us": _number(tokens[mode["time"]]),
               "algbw": _number(tokens[mode["algbw"]]) if "algbw" in mode else None,
               "busbw": _number(tokens[mode["busbw"]])}
    if figures["time_us"] is None or figures["busbw"] is None:
        return None
    if "wrong" not in mode:
        figures["wrong"] = None
    elif mode["wrong_kind"] == "error":
        # Before 2.11, nccl-tests printed the largest absolute error, not a count of wrong
        # elements: keep it, but it says nothing countable.
        figures["wrong"] = None
        figures["max_error"] = _number(tokens[mode["wrong"]])
    else:
        figures["wrong"] = _wrong(tokens[mode["wrong"]])
    return figures


def _row(tokens, layout):
    """A size entry from a data row's cells, or None when the cells are not a data row."""
    if len(tokens) < 5 or not _INT.match(tokens[0]) or not _INT.match(tokens[1]):
        return None
    if layout is None:
        layout = _DEFAULT_LAYOUT if len(tokens) >= _DEFAULT_LAYOUT["width"] else _OLD_LAYOUT
    modes = list(layout["modes"])
    width = layout["width"]
    if len(tokens) < width:
        # Only the in-place half (nccl-tests prints blanks for a missing out-of-place half).
        if len(modes) == 2:
            gap = modes[1]["time"] - modes[0]["time"]
            if len(tokens) != width - gap:
                return None
            shifted = dict((k, (v - gap if isinstance(v, int) else v))
                           for k, v in modes[1].items())
            modes = [None, shifted]
        else:
            return None
    entry = {
        "bytes": int(tokens[layout["size"]]),
        "count": int(tokens[layout["count"]]),
        "type": tokens[layout["type"]] if layout["type"] is not None else None,
        "redop": tokens[layout["redop"]] if layout["redop"] is not None else None,
        "root": (int(tokens[layout["root"]])
                 if layout["root"] is not None and _INT.match(tokens[layout["root"]]) else None),
    }
    figures = [(_mode_figures(tokens, m) if m is not None else None) for m in modes]
    if all(f is None for f in figures):
        return None
    out_of_place = figures[0]
    in_place = figures[1] if len(figures) > 1 else None
    headline = out_of_place or in_place
    entry.update(time_us=headline["time_us"], algbw=headline["algbw"], busbw=headline["busbw"])
    entry["out_of_place"] = out_of_place
    entry["in_place"] = in_place
    wrongs = [f["wrong"] for f in figures if f is not None and f.get("wrong") is not None]
    entry["wrong"] = sum(wrongs) if wrongs else None
    return entry


def _blank():
    return {
        "suite": None, "version": None, "test": None, "params": {}, "devices": [],
        "sizes": [], "out_of_bounds": None, "out_of_bounds_ok": None,
        "avg_busbw_reported": None, "avg_busbw_check": None, "complete": False,
        "failures": [],
    }


def parse(text: str | list[str]) -> dict[str, Any]:
    """The results of one nccl-tests / rccl-tests run from its output (a string or a list of
    lines). Raises NcclTestsError when the output holds no results table at all."""
    lines = text.splitlines() if isinstance(text, str) else [str(x) for x in text or []]
    result = _blank()
    layout = None
    for raw in lines:
        line = strip_prefix(raw.rstrip("\r\n"))
        stripped = line.strip()
        if not stripped:
            continue
        if stripped.startswith("#") or stripped.startswith("rccl-tests") \
                or stripped.startswith("nccl-tests"):
            _header_line(stripped, result)
            if stripped.startswith("#"):
                columns = stripped.lstrip("#").split()
                found = _layout(columns) if "size" in [c.lower() for c in columns] else None
                if found is not None:
                    layout = found
            continue
        if _FAILURE.search(stripped):
            result["failures"].append(stripped)
            continue
        entry = _row(stripped.split(), layout)
        if entry is not None:
            result["sizes"].append(entry)
    if not result["sizes"] and not result["devices"] and result["out_of_bounds"] is None:
        raise NcclTestsError("no nccl-tests results in the output (no table rows, no device "
                             "lines, no footer): did the benchmark run?")
    return _summarize(result)


def _header_line(line, result):
    match = _VERSION.match(line)
    if match:
        result["suite"] = match.group("suite")
        result["version"] = match.group("version")
        return
    match = _STARTING.match(line)
    if match:
        result["test"] = match.group("test")
        return
    match = _PARAMS.match(line)
    if match:
        params = {"nthreads": int(match.group("nthreads")), "ngpus": int(match.group("ngpus")),
                  "min_bytes": int(match.group("min")), "max_bytes": int(match.group("max"))}
        key = "step_factor" if match.group("kind") == "factor" else "step_bytes"
        params[key] = int(match.group("step"))
        for name, value in _PARAM_PAIRS.findall(match.group("rest")):
            params[name.strip().lower().replace(" ", "_")] = int(value)
        result["params"] = params
        return
    match = _RANK.match(line)
    if match:
        result["devices"].append({
            "rank": int(match.group("rank")),
            "group": int(match.group("group")) if match.group("group") else None,
            "pid": int(match.group("pid")), "host": match.group("host"),
            "device": int(match.group("device")), "bus_id": match.group("bus"),
            "name": match.group("name"),
        })
        return
    match = _OOB.match(line)
    if match:
        result["out_of_bounds"] = int(match.group("count"))
        result["out_of_bounds_ok"] = (match.group("status") != "FAILED"
                                      if match.group("status") else int(match.group("count")) == 0)
        return
    match = _AVG.match(line)
    if match:
        result["avg_busbw_reported"] = float(match.group("value"))
        if match.group("status"):
            result["avg_busbw_check"] = match.group("status") == "OK"
        return
    match = _CONCLUDED.match(line)
    if match:
        result["complete"] = True
        result["test"] = result["test"] or match.group("test")
        return
    if _FAILURE.search(line):
        result["failures"].append(line)


def _summarize(result):
    sizes = result["sizes"]
    busbws = [f["busbw"] for e in sizes for f in (e["out_of_place"], e["in_place"]) if f]
    result["max_busbw"] = max(busbws) if busbws else None
    # nccl-tests' Avg bus bandwidth: the mean over every printed busbw, both halves.
    computed = sum(busbws) / len(busbws) if busbws else None
    reported = result["avg_busbw_reported"]
    result["avg_busbw"] = reported if reported is not None else computed
    # Wrong elements over every row and both halves; None when nothing was checked (-c 0).
    wrongs = [e["wrong"] for e in sizes if e["wrong"] is not None]
    result["wrong_total"] = sum(wrongs) if wrongs else None
    hosts = []
    for device in result["devices"]:
        if device["host"] not in hosts:
            hosts.append(device["host"])
    result["hosts"] = hosts
    result["nodes"] = len(hosts) if hosts else None
    result["gpus"] = len(result["devices"]) if result["devices"] else None
    largest = max(sizes, key=lambda e: e["bytes"]) if sizes else None
    result["largest_bytes"] = largest["bytes"] if largest else None
    result["largest_busbw"] = largest["busbw"] if largest else None
    result["busbw_by_size"] = dict((str(e["bytes"]), e["busbw"]) for e in sizes)
    result["op"] = op_of(result["test"])
    if result["suite"] is None and result["devices"]:
        names = " ".join(d["name"] for d in result["devices"])
        result["suite"] = "rccl-tests" if ("AMD" in names or "Instinct" in names) else None
    return result


def op_of(test: str | None) -> str | None:
    """``all_reduce`` from ``all_reduce_perf`` (or a path to it); None when unknown."""
    if not test:
        return None
    name = str(test).rsplit("/", 1)[-1]
    for suffix in ("_perf_mpi", "_perf"):
        if name.endswith(suffix):
            return name[:-len(suffix)]
    return name


def empty_result() -> dict[str, Any]:
    """What parse() returns for output without any result (a run that printed nothing)."""
    return _summarize(_blank())


def failure_lines(text: str | list[str]) -> list[str]:
    """The lines of output (a string or a list of lines) that report a test failure, without
    their launcher prefixes: what a run that printed no results still says."""
    lines = text.splitlines() if isinstance(text, str) else text or []
    return [strip_prefix(line).strip() for line in lines if _FAILURE.search(str(line))]
