# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""nccl-tests and rccl-tests results against what the fabric should give: the expected figures
and the comparison.

``EXPECTED`` holds published bus bandwidths of 2-node x 8-GPU runs per platform and fabric
(docs/roles/nccl_tests.md lists them with their sources), and ``compare()`` measures a run
parsed by nccltests.parse against one of them, or against a figure given by the caller, with a
tolerance. ``result_facts`` does it all in one call for the filter plugin.

Pure Python, no Ansible imports.
"""

from __future__ import annotations

from typing import Any

from .nccltests import GIB, NcclTestsError, empty_result, failure_lines, parse

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
# in bytes to the out-of-place busbw measured at that size. Sources:
# docs/reference/interconnect.md#published-bandwidth, which names each figure's origin (repeated in
# ``source``).
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


def busbw_factor(op: str, ranks: int) -> float:
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


def anchor(key: str) -> dict[str, Any]:
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


def compare(result: dict[str, Any], expected_busbw: float | None = None,
            expected: str | None = None, tolerance: float = DEFAULT_TOLERANCE) -> dict[str, Any]:
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
    except (TypeError, ValueError) as exc:
        raise NcclTestsError("tolerance must be a number between 0 and 1, got %r"
                             % (tolerance,)) from exc
    if not 0 < tolerance <= 1:
        raise NcclTestsError("tolerance must be more than 0 and at most 1, got %s" % tolerance)
    outcome = {"verdict": VERDICT_UNKNOWN, "expected_busbw": None, "measured_busbw": None,
               "compared_bytes": None, "ratio": None, "tolerance": tolerance,
               "expected_key": expected or None, "expected_source": None, "reason": None}
    if expected_busbw not in (None, ""):
        try:
            figure = float(expected_busbw)
        except (TypeError, ValueError) as exc:
            raise NcclTestsError("expected busbw must be a number of GB/s, got %r"
                                 % (expected_busbw,)) from exc
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


def summary(result: dict[str, Any], comparison: dict[str, Any],
            fabric: str | None = None) -> dict[str, Any]:
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


def report_lines(facts: dict[str, Any]) -> list[str]:
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


def result_facts(text: str | list[str], expected_busbw: float | None = None,
                 expected: str | None = None, tolerance: float = DEFAULT_TOLERANCE,
                 fabric: str | None = None, allow_empty: bool = False) -> dict[str, Any]:
    """parse + compare + summary (+ report lines) in one call: what the filter plugin
    exposes. With ``allow_empty``, output without results gives facts with no sizes (and the
    verdict unknown) instead of an error."""
    try:
        result = parse(text)
    except NcclTestsError:
        if not allow_empty:
            raise
        result = empty_result()
        result["failures"] = failure_lines(text)
    facts = summary(result, compare(result, expected_busbw, expected, tolerance), fabric)
    facts["report"] = report_lines(facts)
    return facts
