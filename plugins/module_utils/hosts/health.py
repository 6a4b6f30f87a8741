# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""A host's GPU health from what its tools said (tasks.hostside.healthside's probe): dstack's three
levels.

Pure Python. dstack keeps one health per instance, ``healthy``, ``warning`` or ``failure``
(docs/reference/dstack-runtime.md#health): DCGM's overall result of ``dcgmi health -c`` (PASS, WARN,
FAIL), and a host without DCGM is healthy. gpufleet reads DCGM the same way (hosts.checks.dcgm's
parser) and, on a host without DCGM's host engine, judges nvidia-smi's counters and the kernel log's
XID lines by the rules of DCGM's memory health watch, so such a host is not healthy by default:

- volatile uncorrectable (double-bit) ECC errors: failure;
- pages pending retirement, or rows pending remapping (the GPU needs a reset): warning;
- 60 or more retired pages (single- and double-bit together): failure;
- a failed row remapping: failure;
- XID 95 (uncontained ECC error), 79 (the GPU fell off the bus), 48 (double-bit ECC error):
  failure; XID 63 and 64 (page retirement or row remapping event), 92 (high single-bit ECC
  rate) and 94 (contained ECC error): warning. Other XIDs (13, 31, 43, 45...) are mostly the
  application's own faults and are not counted.

    health = judge(probe, checked_at)   # {"status", "source", "message", "incidents", "error"}

``status`` is None when the probe could not say (a tool failed, nothing to ask): the host keeps
the health it had, as dstack keeps an instance's health when a check gets no answer.
"""

from __future__ import annotations

import csv
import io
import re
from typing import Any, Iterable

from .checks import CheckError
from .checks.dcgm import HEALTH_LEVELS, parse_health, worst_message

STATUSES = ("healthy", "warning", "failure")
# DCGM_LIMIT_MAX_RETIRED_PAGES of DCGM's memory health watch.
MAX_RETIRED_PAGES = 60
XID_FAILURE = {
    48: "a double-bit ECC error",
    79: "the GPU has fallen off the bus",
    95: "an uncontained ECC error",
}
XID_WARNING = {
    63: "a page retirement or row remapping event",
    64: "a page retirement or row remapping failure",
    92: "a high single-bit ECC error rate",
    94: "a contained ECC error",
}
_XID = re.compile(r"NVRM: Xid \((?:PCI:)?([0-9A-Fa-f:.]+)\): (\d+)\b")
_NOT_A_VALUE = ("", "n/a", "[n/a]", "[not supported]", "not supported", "[unknown error]")


def worst(statuses: Iterable[str | None]) -> str:
    """The worst of some health levels (``healthy`` for none)."""
    known = [s for s in statuses if s in HEALTH_LEVELS]
    return max(known, key=lambda s: HEALTH_LEVELS[s]) if known else "healthy"


def _bus(text):
    """A PCI bus id as ``dddd:bb:dd``, lower case, without the function: nvidia-smi writes
    ``00000000:3B:00.0``, the kernel's XID lines ``0000:3b:00``."""
    parts = str(text or "").strip().lower().split(":")
    if len(parts) < 3:
        return str(text or "").strip().lower()
    domain = parts[-3][-4:].rjust(4, "0")
    return "%s:%s:%s" % (domain, parts[-2], parts[-1].split(".")[0])


def _number(value):
    text = str(value or "").strip()
    if text.lower() in _NOT_A_VALUE:
        return None
    try:
        return int(float(text))
    except ValueError:
        return None


def _flag(value):
    text = str(value or "").strip().lower()
    if text in _NOT_A_VALUE:
        return None
    if text in ("yes", "true", "enabled"):
        return True
    if text in ("no", "false", "disabled"):
        return False
    number = _number(text)
    return None if number is None else number > 0


def parse_csv(text: str | None, what: str = "nvidia-smi") -> list[dict[str, str]]:
    """Rows of nvidia-smi's ``--format=csv[,nounits]`` output as dicts by field name (units in
    the header, ``memory.total [MiB]``, are dropped)."""
    lines = [line for line in (text or "").splitlines() if line.strip()]
    if not lines or "," not in lines[0]:
        raise CheckError("%s printed no CSV table: %s" % (what, (text or "").strip()[:200]))
    reader = csv.reader(io.StringIO("\n".join(lines)), skipinitialspace=True)
    header = [name.split(" [")[0].strip() for name in next(reader)]
    return [dict(zip(header, (value.strip() for value in row))) for row in reader if row]


def _incident(gpu, status, message):
    return {"entity": "GPU %s" % gpu, "health": status, "message": message}


def judge_counters(gpus: list[dict[str, str]], remaps: Iterable[dict[str, str]] = (),
                   xid_lines: Iterable[str] = ()) -> list[dict[str, Any]]:
    """Incidents from nvidia-smi's counters (``gpus``: rows of the ``--query-gpu`` CSV;
    ``remaps``: rows of ``--query-remapped-rows``) and the kernel log's XID lines."""
    incidents = []
    index_of = {}
    for row in gpus:
        gpu = row.get("index", "?")
        index_of[_bus(row.get("pci.bus_id"))] = gpu
        dbe = _number(row.get("ecc.errors.uncorrected.volatile.total"))
        if dbe:
            incidents.append(_incident(gpu, "failure", "GPU %s has %d volatile uncorrectable "
                                       "(double-bit) ECC error(s)" % (gpu, dbe)))
        retired = [_number(row.get("retired_pages.single_bit_ecc.count")),
                   _number(row.get("retired_pages.double_bit.count"))]
        total = sum(n for n in retired if n)
        if total >= MAX_RETIRED_PAGES:
            incidents.append(_incident(gpu, "failure", "GPU %s has %d retired pages, the limit "
                                       "is %d" % (gpu, total, MAX_RETIRED_PAGES)))
        if _flag(row.get("retired_pages.pending")):
            incidents.append(_incident(gpu, "warning", "GPU %s has a page pending retirement "
                                       "(reset the GPU)" % gpu))
    for row in remaps:
        gpu = index_of.get(_bus(row.get("gpu_bus_id")), row.get("gpu_bus_id") or "?")
        if _flag(row.get("remapped_rows.failure")):
            incidents.append(_incident(gpu, "failure", "GPU %s failed to remap a memory row"
                                       % gpu))
        elif _flag(row.get("remapped_rows.pending")):
            incidents.append(_incident(gpu, "warning", "GPU %s has a memory row pending "
                                       "remapping (reset the GPU)" % gpu))
    seen = set()
    for line in xid_lines or ():
        match = _XID.search(line)
        if not match:
            continue
        bus, xid = _bus(match.group(1)), int(match.group(2))
        if (bus, xid) in seen:
            continue
        seen.add((bus, xid))
        gpu = index_of.get(bus, bus)
        for table, status in ((XID_FAILURE, "failure"), (XID_WARNING, "warning")):
            if xid in table:
                incidents.append(_incident(gpu, status, "GPU %s: XID %d in the kernel log (%s)"
                                           % (gpu, xid, table[xid])))
    return incidents


def _said(found):
    lines = [line.strip() for text in (found.get("out"), found.get("err"))
             for line in (text or "").splitlines() if line.strip()]
    return lines[0] if lines else "no output"


def _failed(found, what):
    if found.get("rc") is None:
        return "%s did not finish: %s" % (what, found.get("err") or "no answer")
    return "%s failed (exit status %s): %s" % (what, found.get("rc"), _said(found))


def _result(status, source, incidents, checked_at, error=None):
    return {"status": status, "source": source, "incidents": incidents,
            "message": worst_message(incidents) if incidents else None,
            "checked_at": checked_at, "error": error}


def judge(probe: dict[str, Any], checked_at: str | None = None) -> dict[str, Any]:
    """The health of a host from its probe (tasks.hostside.healthside.probe_health's answer)."""
    probe = probe if isinstance(probe, dict) else {}
    dcgmi = probe.get("dcgmi") or {}
    if dcgmi.get("rc") == 0 and "Overall Health" in (dcgmi.get("out") or ""):
        try:
            parsed = parse_health(dcgmi["out"])
        except CheckError as exc:
            return _result(None, "dcgm", [], checked_at, str(exc))
        incidents = [dict(i) for i in parsed["incidents"] if i.get("health") in HEALTH_LEVELS]
        if parsed["health"] is None:
            return _result(None, "dcgm", incidents, checked_at,
                           "dcgmi reports an overall health of %r" % parsed["overall"])
        return _result(parsed["health"], "dcgm", incidents, checked_at)
    smi = probe.get("nvidia_smi")
    if not smi:
        if dcgmi:
            return _result(None, "dcgm", [], checked_at, _failed(dcgmi, "dcgmi health -c"))
        # No DCGM, no NVIDIA tools: nothing to watch, healthy as dstack takes such a host.
        return _result("healthy", None, [], checked_at)
    xid_lines = probe.get("xid") or []
    if smi.get("rc") != 0:
        # A GPU that fell off the bus makes nvidia-smi fail; the kernel log still says so.
        incidents = judge_counters([], (), xid_lines)
        if incidents:
            return _result(worst(i["health"] for i in incidents), "nvidia-smi", incidents,
                           checked_at, _failed(smi, "nvidia-smi"))
        return _result(None, "nvidia-smi", [], checked_at, _failed(smi, "nvidia-smi"))
    try:
        gpus = parse_csv(smi.get("out"))
    except CheckError as exc:
        return _result(None, "nvidia-smi", [], checked_at, str(exc))
    remaps = []
    remapped = probe.get("remapped_rows") or {}
    if remapped.get("rc") == 0:
        try:
            remaps = parse_csv(remapped.get("out"), "nvidia-smi --query-remapped-rows")
        except CheckError:
            remaps = []  # GPUs without row remapping (before Ampere) print no table
    incidents = judge_counters(gpus, remaps, xid_lines)
    return _result(worst(i["health"] for i in incidents), "nvidia-smi", incidents, checked_at)
