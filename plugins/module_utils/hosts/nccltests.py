# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""nccl-tests and rccl-tests results: the parser, the expected figures and the comparison.

``parse(text)`` reads what ``all_reduce_perf`` (or any other ``*_perf`` binary of NVIDIA's
nccl-tests or AMD's rccl-tests) prints on rank 0: the parameter line, the ``#  Rank ...``
device lines, the table header, one row per message size with the out-of-place and in-place
time, algbw, busbw and ``#wrong`` columns, and the footer (``Out of bounds values``, ``Avg bus
bandwidth``). The table is read through its header, so the ``root`` column (absent before
nccl-tests 2.11), ``-S`` timestamps and ``-I`` per-iteration columns do not shift the figures;
without a header the default layouts are assumed. Lines may carry a launcher's prefix
(``[run-0] `` from ``gpufleet logs``, ``[1,0]<stdout>:`` from Open MPI's ``--tag-output``,
``0: `` from ``srun -l``); other lines (NCCL's INFO lines, MPI warnings) are ignored.

``EXPECTED`` holds published bus bandwidths of 2-node x 8-GPU runs per platform and fabric
(docs/roles/nccl_tests.md lists them with their sources), and ``compare()`` measures a run
against one of them, or against a figure given by the caller, with a tolerance.

Pure Python, no Ansible imports: the filter plugin ``gpufleet.cluster.nccl_tests_result`` and
the unit tests call it directly.
"""

from __future__ import annotations

import re

GIB = 1024 ** 3
MIB = 1024 ** 2

VERDICT_PASS = "pass"
VERDICT_BELOW = "below"
VERDICT_UNKNOWN = "unknown"

DEFAULT_TOLERANCE = 0.8

# Bus bandwidth factors (nccl-tests doc/PERFORMANCE.md): busbw = algbw * factor, where the
# factor depends on the number of ranks n: 2(n-1)/n, (n-1)/n or 1.
_FACTOR_KINDS = {
    "all_reduce": "2(n-1)/n",
    "reduce_scatter": "(n-1)/n",
    "all_gather": "(n-1)/n",
    "alltoall": "(n-1)/n",
    "broadcast": "1",
    "reduce": "1",
    "sendrecv": "1",
}

# Published busbw (GB/s) of 2 nodes x 8 GPUs, keyed by platform. ``points`` maps a message size
# in bytes to the out-of-place busbw measured at that size. Sources: research notes
# interconnect.md section 8.5, which cites each figure's origin (repeated in ``source``).
EXPECTED = {
    "p5.48xlarge": {
        "fabric": "efa", "op": "all_reduce", "nodes": 2, "gpus_per_node": 8,
        "platform": "AWS p5.48xlarge, 8x H100, 32x EFA (3.2 Tbps)",
        "points": {2 * GIB: 443.7, 16 * GIB: 487.1},
        "source": "aws-samples/awsome-distributed-training micro-benchmarks/nccl-tests/README.md",
    },
    "p4de.24xlarge": {
        "fabric": "efa", "op": "all_reduce", "nodes": 2, "gpus_per_node": 8,
        "platform": "AWS p4de.24xlarge, 8x A100, 4x EFA (400 Gbps)",
        "points": {2 * GIB: 78.3},
        "source": "aws-samples/awsome-distributed-training micro-benchmarks/nccl-tests/README.md",
    },
    "h100-ib-ndr": {
        "fabric": "ib", "op": "all_reduce", "nodes": 2, "gpus_per_node": 8,
        "platform": "8x H100, 8x 400G InfiniBand NDR (Nebius)",
        "points": {2 * GIB: 458.8, 8 * GIB: 467.5},
        "source": "dstackai/dstack mkdocs/docs/examples/clusters/nebius.md",
    },
    "b200-ib": {
        "fabric": "ib", "op": "all_reduce", "nodes": 2, "gpus_per_node": 8,
        "platform": "8x B200, InfiniBand (Lambda 1-Click Cluster)",
        "points": {2 * GIB: 696.1},
        "source": "dstackai/dstack mkdocs/docs/examples/clusters/lambda.md",
    },
    "a4-highgpu-8g": {
        "fabric": "gib", "op": "all_reduce", "nodes": 2, "gpus_per_node": 8,
        "platform": "GCP A4, 8x B200, RoCE through gIB",
        "points": {8 * GIB: 683.5},
        "source": "dstackai/dstack mkdocs/docs/examples/clusters/gcp.md",
    },
    "a3-ultragpu-8g": {
        "fabric": "gib", "op": "all_gather", "nodes": 2, "gpus_per_node": 8,
        "platform": "GCP A3 Ultra, 8x H200, RoCE through gIB",
        "points": {8 * GIB: 328.9},
        "source": "GoogleCloudPlatform/cluster-toolkit "
                  "examples/gke-consumption-options/dws-flex-start/README.md",
    },
    "a3-megagpu-8g": {
        "fabric": "tcpxo", "op": "all_gather", "nodes": 2, "gpus_per_node": 8,
        "platform": "GCP A3 Mega, 8x H100, GPUDirect-TCPXO",
        "points": {8 * GIB: 188.5},
        "source": "dstackai/dstack mkdocs/docs/examples/clusters/gcp.md; "
                  "GoogleCloudPlatform/cluster-toolkit examples/gke-a3-megagpu/README.md",
    },
    "a3-highgpu-8g": {
        "fabric": "tcpx", "op": "all_gather", "nodes": 2, "gpus_per_node": 8,
        "platform": "GCP A3 High, 8x H100, GPUDirect-TCPX (a floor: dstack VMs)",
        "points": {8 * GIB: 50.2},
        "source": "dstackai/dstack mkdocs/docs/examples/clusters/gcp.md",
    },
}

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


class NcclTestsError(ValueError):
    """Input the parser or the comparison cannot use; the message says why."""


def busbw_factor(op, ranks):
    """busbw / algbw for collective ``op`` (``all_reduce``, ...) over ``ranks`` ranks."""
    kind = _FACTOR_KINDS.get(op)
    if kind is None:
        raise NcclTestsError("no bus bandwidth factor for %r; known: %s"
                             % (op, ", ".join(sorted(_FACTOR_KINDS))))
    ranks = int(ranks)
    if ranks < 1:
        raise NcclTestsError("ranks must be 1 or more, got %d" % ranks)
    if kind == "2(n-1)/n":
        return 2.0 * (ranks - 1) / ranks
    if kind == "(n-1)/n":
        return float(ranks - 1) / ranks
    return 1.0


def strip_prefix(line):
    """``line`` without launcher prefixes (gpufleet logs, Open MPI --tag-output, srun -l)."""
    for _round in range(3):
        before = line
        for pattern in _PREFIXES:
            line = pattern.sub("", line, count=1)
        if line == before:
            break
    return line


def parse_size(value):
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


def expected_sizes(min_bytes, max_bytes, factor=2, step_bytes=None):
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


def parse(text):
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


def op_of(test):
    """``all_reduce`` from ``all_reduce_perf`` (or a path to it); None when unknown."""
    if not test:
        return None
    name = str(test).rsplit("/", 1)[-1]
    for suffix in ("_perf_mpi", "_perf"):
        if name.endswith(suffix):
            return name[:-len(suffix)]
    return name


def anchor(key):
    """The expected-figure entry named ``key`` (see EXPECTED), or NcclTestsError."""
    if key not in EXPECTED:
        raise NcclTestsError("no expected figure named %r; known: %s"
                             % (key, ", ".join(sorted(EXPECTED))))
    return EXPECTED[key]


def _measured_at(result, size):
    entry = next((e for e in result["sizes"] if e["bytes"] == size), None)
    if entry is None:
        return None
    half = entry["out_of_place"] or entry["in_place"]
    return half["busbw"] if half else None


def compare(result, expected_busbw=None, expected=None, tolerance=DEFAULT_TOLERANCE):
    """Measure a parsed run against an expected bus bandwidth.

    ``expected_busbw`` (GB/s) is compared with the out-of-place busbw of the run's largest
    size. Otherwise ``expected`` names an EXPECTED entry: the run's busbw at the largest anchor
    size it reached (the figures grow with the size, so a larger run size is compared with the
    figure of the largest smaller anchor size). The verdict is ``pass`` when measured >=
    tolerance x expected, ``below`` when not, and ``unknown`` (with a reason) when there is
    nothing to compare: no expected figure, no rows, another collective than the anchor's, or
    a run whose sizes stop before the smallest anchor size.
    """
    try:
        tolerance = float(tolerance)
    except (TypeError, ValueError):
        raise NcclTestsError("tolerance must be a number between 0 and 1, got %r" % (tolerance,))
    if not 0 < tolerance <= 1:
        raise NcclTestsError("tolerance must be more than 0 and at most 1, got %s" % tolerance)
    outcome = {"verdict": VERDICT_UNKNOWN, "expected_busbw": None, "measured_busbw": None,
               "compared_bytes": None, "ratio": None, "tolerance": tolerance,
               "expected_key": expected or None, "expected_source": None, "reason": None}
    if expected_busbw not in (None, ""):
        try:
            figure = float(expected_busbw)
        except (TypeError, ValueError):
            raise NcclTestsError("expected busbw must be a number of GB/s, got %r"
                                 % (expected_busbw,))
        if figure <= 0:
            raise NcclTestsError("expected busbw must be more than 0 GB/s, got %s" % figure)
        outcome["expected_key"] = None
        size = result.get("largest_bytes")
        if size is None:
            outcome["reason"] = "the run printed no result rows"
            outcome["expected_busbw"] = figure
            return outcome
        outcome["expected_source"] = "given"
        return _judge(outcome, figure, size, _measured_at(result, size))
    if not expected:
        outcome["reason"] = "no expected figure: set an expected busbw or a platform"
        return outcome
    entry = anchor(expected)
    outcome["expected_source"] = entry["source"]
    if result.get("op") and result["op"] != entry["op"]:
        outcome["reason"] = ("the run is %s, the %s figure is for %s"
                             % (result["op"], expected, entry["op"]))
        return outcome
    if not result["sizes"]:
        outcome["reason"] = "the run printed no result rows"
        return outcome
    largest = result["largest_bytes"]
    usable = sorted(size for size in entry["points"] if size <= largest)
    if not usable:
        outcome["reason"] = ("the run stops at %d bytes, below the smallest size %s has a figure "
                             "for (%d bytes)" % (largest, expected, min(entry["points"])))
        return outcome
    point = usable[-1]
    size = point if _measured_at(result, point) is not None else largest
    return _judge(outcome, entry["points"][point], size, _measured_at(result, size))


def _judge(outcome, figure, size, measured):
    outcome.update(expected_busbw=figure, compared_bytes=size, measured_busbw=measured)
    if measured is None:
        outcome["reason"] = "no busbw at %d bytes" % size
        return outcome
    outcome["ratio"] = round(measured / figure, 4)
    if measured >= outcome["tolerance"] * figure:
        outcome["verdict"] = VERDICT_PASS
        outcome["reason"] = ("%.2f GB/s at %d bytes is at least %g x %.2f GB/s"
                             % (measured, size, outcome["tolerance"], figure))
    else:
        outcome["verdict"] = VERDICT_BELOW
        outcome["reason"] = ("%.2f GB/s at %d bytes is below %g x %.2f GB/s"
                             % (measured, size, outcome["tolerance"], figure))
    return outcome


def summary(result, comparison, fabric=None):
    """The facts the role publishes (``nccl_tests_check``) from a parsed run and its
    comparison."""
    return {
        "fabric": fabric,
        "suite": result["suite"],
        "version": result["version"],
        "test": result["test"],
        "op": result["op"],
        "nodes": result["nodes"],
        "hosts": result["hosts"],
        "gpus": result["gpus"],
        "params": result["params"],
        "sizes": result["sizes"],
        "busbw_by_size": result["busbw_by_size"],
        "largest_bytes": result["largest_bytes"],
        "largest_busbw": result["largest_busbw"],
        "max_busbw": result["max_busbw"],
        "avg_busbw": result["avg_busbw"],
        "wrong_total": result["wrong_total"],
        "out_of_bounds": result["out_of_bounds"],
        "complete": result["complete"],
        "failures": result["failures"],
        "expected_busbw": comparison["expected_busbw"],
        "expected_key": comparison["expected_key"],
        "expected_source": comparison["expected_source"],
        "measured_busbw": comparison["measured_busbw"],
        "compared_bytes": comparison["compared_bytes"],
        "ratio": comparison["ratio"],
        "tolerance": comparison["tolerance"],
        "verdict": comparison["verdict"],
        "reason": comparison["reason"],
    }


def report_lines(facts):
    """Human-readable lines: one per size, then the figures and the verdict."""
    lines = []
    for entry in facts["sizes"]:
        in_place = entry.get("in_place") or {}
        lines.append("%14s B  busbw %9s GB/s  in-place %9s GB/s  time %10s us  wrong %s" % (
            entry["bytes"], _fmt(entry["busbw"]), _fmt(in_place.get("busbw")),
            _fmt(entry["time_us"]), "N/A" if entry["wrong"] is None else entry["wrong"]))
    lines.append("nodes %s, gpus %s, max busbw %s GB/s, avg busbw %s GB/s, wrong %s" % (
        _fmt(facts["nodes"]), _fmt(facts["gpus"]), _fmt(facts["max_busbw"]),
        _fmt(facts["avg_busbw"]), _fmt(facts["wrong_total"])))
    lines.append("verdict %s: %s" % (facts["verdict"], facts["reason"]))
    return lines


def _fmt(value):
    if value is None:
        return "-"
    if isinstance(value, float):
        return "%.2f" % value
    return str(value)


def empty_result():
    """What parse() returns for output without any result (a run that printed nothing)."""
    return _summarize(_blank())


def result_facts(text, expected_busbw=None, expected=None, tolerance=DEFAULT_TOLERANCE,
                 fabric=None, allow_empty=False):
    """parse + compare + summary (+ report lines) in one call: what the filter plugin
    exposes. With ``allow_empty``, output without results gives facts with no sizes (and the
    verdict unknown) instead of an error."""
    try:
        result = parse(text)
    except NcclTestsError:
        if not allow_empty:
            raise
        result = empty_result()
        result["failures"] = [strip_prefix(line).strip() for line in
                              (text.splitlines() if isinstance(text, str) else text or [])
                              if _FAILURE.search(str(line))]
    facts = summary(result, compare(result, expected_busbw, expected, tolerance), fabric)
    facts["report"] = report_lines(facts)
    return facts
