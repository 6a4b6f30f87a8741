# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The text of ``gpufleet metrics``: dstack's ``dstack metrics`` charts, as plain lines.

Per job a ``cpu`` row and a ``gpu=N`` row per GPU, each with a sparkline of utilisation and one
of memory over the last hour (height is the peak in the cell, on a fixed 0-100% scale, the last
cell is the newest sample and its value is printed beside it; memory reads ``used/total``),
then a time axis under them, from the window's start (an hour before the newest sample) to
``now`` while the jobs are still reporting, else when the window ended; a job younger than the
window starts where it started. A job is labelled ``job=N``; a job with no sample yet reads ``no data``. What dstack
shows with colour (the mean in the cell) is left out here: these are the table's lines, for a
terminal or a playbook's output alike.
"""

from __future__ import annotations

import time
from typing import Any, Sequence

SPARKS = u"\u2581\u2582\u2583\u2584\u2585\u2586\u2587"
AXIS_RULE = u"\u2504"
NO_DATA = "no data"
NOW = "now"
# A job whose newest sample is younger than three sampling intervals is still reporting.
LIVE = 30
MIN_WIDTH, MAX_WIDTH = 10, 80
# What is not a sparkline on a row: the kind column, both numbers and the padding.
FIXED = 30
# The span every chart is drawn against: dstack keeps a running job's last hour.
WINDOW = 3600


def spark_width(columns: int, label_width: int = 0) -> int:
    """How many cells each sparkline gets on a terminal ``columns`` wide."""
    return max(MIN_WIDTH, min(MAX_WIDTH, (columns - FIXED - label_width) // 2))


def cells(values: Sequence[float], width: int) -> list[float]:
    """The peak of each cell, oldest first: the series spread over ``width`` cells, the last
    cell holding only the newest value (so it agrees with the number printed beside it)."""
    values = list(values)
    if width < 1:
        return []
    if width == 1 or len(values) <= width:
        return values[-width:]
    history, out = values[:-1], []
    for index in range(width - 1):
        low = int(index * len(history) / (width - 1))
        high = max(low + 1, int((index + 1) * len(history) / (width - 1)))
        out.append(max(history[low:high]))
    out.append(values[-1])
    return out


def sparkline(values: Sequence[float], width: int, top: float = 100.0) -> str:
    """The sparkline of ``values`` on a fixed 0..top scale (never scaled to the data)."""
    line = u""
    for peak in cells(values, width):
        level = max(0.0, min(top, peak)) / top
        line += SPARKS[int(level * (len(SPARKS) - 1))]
    return line


def memory(num_bytes: float) -> str:
    """Bytes as dstack writes them in this table: whole MB below a GB, else whole GB."""
    mib = num_bytes / 1024.0 / 1024.0
    if mib >= 1024:
        return "%dGB" % round(mib / 1024)
    return "%dMB" % round(mib)


def _percent_cell(series, width):
    values = [v for _t, v in series]
    if not values:
        return NO_DATA
    return u"%s %d%%" % (sparkline(values, width), round(values[-1]))


def _memory_cell(series, total, width):
    values = [v for _t, v in series]
    if not values:
        return NO_DATA
    percents = [v * 100.0 / total for v in values] if total else values
    label = memory(values[-1]) + ("/" + memory(total) if total else "")
    return u"%s %s" % (sparkline(percents, width), label)


def _blank(series, window, width):
    """Cells left empty before a job's chart: it started later than the window."""
    stamps = [t for t, _v in series]
    if not stamps or window is None or window[1] <= window[0]:
        return 0
    share = (stamps[0] - window[0]) / float(window[1] - window[0])
    return min(width - 1, max(0, int(round(share * width))))


def _stamp(epoch, now, clock_only=False):
    if now - epoch < LIVE:
        return NOW
    moment = time.localtime(epoch)
    if clock_only:
        return time.strftime("%H:%M", moment)
    return "%d %s" % (moment.tm_mday, time.strftime("%b %H:%M", moment))


def axis(width: int, first: float | None, last: float | None, now: float) -> str:
    """The time axis under the charts, exactly ``width`` wide (empty when it does not fit)."""
    left, right = _stamp(first, now), _stamp(last, now)
    if len(left) + len(right) + 3 > width:
        left, right = _stamp(first, now, True), _stamp(last, now, True)
    if len(left) + len(right) + 2 > width:
        return u""
    return u"%s %s %s" % (left, AXIS_RULE * (width - len(left) - len(right) - 2), right)


def _series_of(job):
    yield job.get("cpu_percent") or []
    yield job.get("memory_bytes") or []
    for gpu in job.get("gpus") or []:
        yield gpu.get("util_percent") or []
        yield gpu.get("memory_bytes") or []


def metrics_lines(record: dict[str, Any], columns: int = 100,
                  now: float | None = None) -> list[str]:
    """The lines of ``gpufleet metrics`` for a metrics record (tasks.metrics.run_metrics)."""
    now = time.time() if now is None else now
    jobs = record.get("jobs") or []
    labels = ["job=%d" % j["job_num"] for j in jobs]
    width = spark_width(columns, max([len(x) for x in labels] or [0]))
    stamps = [t for j in jobs for s in _series_of(j) for t, _v in s]
    # As dstack: every job against the hour before the newest sample (or longer, when a job
    # reaches back further), so a young job is drawn at the right, where it started.
    window = (min(stamps + [max(stamps) - WINDOW]), max(stamps)) if stamps else None
    rows = [("", "", "UTILIZATION", "MEMORY")]
    drawn = 0
    for num, job in enumerate(jobs):
        if num:
            rows.append(("", "", "", ""))
        blank = _blank(job.get("memory_bytes") or job.get("cpu_percent") or [], window, width)
        room = width - blank
        pad = u" " * blank
        kinds = [("cpu", job.get("cpu_percent") or [], job.get("memory_bytes") or [],
                  job.get("memory_total_bytes"))]
        kinds += [("gpu=%d" % gpu["index"], gpu.get("util_percent") or [],
                   gpu.get("memory_bytes") or [], gpu.get("memory_total_bytes"))
                  for gpu in job.get("gpus") or []]
        for index, (kind, util, used, total) in enumerate(kinds):
            rows.append((labels[num] if index == 0 else "", kind,
                         pad + _percent_cell(util, room), pad + _memory_cell(used, total, room)))
            drawn = max(drawn, blank + min(room, max(len(util), len(used))))
    line = axis(drawn, window[0], window[1], now) if window is not None else u""
    if line:
        rows += [("", "", "", ""), ("", "", line, line)]
    sizes = [max(len(row[c]) for row in rows) for c in range(4)]
    return [u"  ".join(cell.ljust(sizes[c]) for c, cell in enumerate(row)).rstrip()
            for row in rows]
