# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Usage as text: the tables and the CSV of ``gpufleet usage``.

Pure Python, used by the ``gpufleet.cluster.usage_info`` module and the ``gpufleet usage``
command. Input is the report of tasks/usage.py (``{"since", "now", "runs", "users",
"unreachable"}``).

    usage_lines(report)   # a RUN table, a blank line, a USER table
    usage_csv(report)     # one CSV row per run, with a header

Times are UTC; GPU-hours have two decimals, costs are dollars.
"""

from __future__ import annotations

import csv
import io
import time
from typing import Any, Mapping

from .fleet_table import _render

RUN_COLUMNS = ("RUN", "USER", "FLEET", "NODES", "GPUS", "START", "END", "WALL", "GPU-HOURS",
               "COST")
USER_COLUMNS = ("USER", "RUNS", "GPU-HOURS", "COST")
CSV_COLUMNS = ("run", "run_id", "user", "fleet", "nodes", "gpus", "start", "end", "status",
               "wall_seconds", "gpu_hours", "cost")


def when(epoch: float | None) -> str:
    """``2026-11-29 08:14`` (UTC), or blank."""
    if epoch is None:
        return ""
    return time.strftime("%Y-%m-%d %H:%M", time.gmtime(float(epoch)))


def wall(seconds: float | None) -> str:
    """``45s``, ``12m``, ``3h05m``, ``2d04h``."""
    if seconds is None:
        return ""
    whole = int(round(float(seconds)))
    if whole < 60:
        return "%ds" % whole
    if whole < 3600:
        return "%dm%02ds" % (whole // 60, whole % 60)
    if whole < 86400:
        return "%dh%02dm" % (whole // 3600, whole % 3600 // 60)
    return "%dd%02dh" % (whole // 86400, whole % 86400 // 3600)


def money(value: float | None) -> str:
    return "$%.2f" % float(value or 0)


def _user(value):
    return "-" if not value else str(value)


def usage_lines(report: Mapping[str, Any]) -> list[str]:
    """The run table and the user table of a usage report (a line saying so when empty)."""
    runs = report.get("runs") or []
    since = "since %s UTC" % when(report.get("since"))
    if not runs:
        return ["No usage %s." % since]
    rows = []
    for line in runs:
        rows.append({
            "RUN": str(line.get("run") or ""), "USER": _user(line.get("user")),
            "FLEET": str(line.get("fleet") or ""), "NODES": str(line.get("nodes") or 0),
            "GPUS": str(line.get("gpus") or 0), "START": when(line.get("start")),
            "END": "running" if line.get("end") is None else when(line.get("end")),
            "WALL": wall(line.get("wall_seconds")),
            "GPU-HOURS": "%.2f" % float(line.get("gpu_hours") or 0),
            "COST": money(line.get("cost")),
        })
    users = [{"USER": _user(u.get("user")), "RUNS": str(u.get("runs") or 0),
              "GPU-HOURS": "%.2f" % float(u.get("gpu_hours") or 0),
              "COST": money(u.get("cost"))} for u in report.get("users") or []]
    return _render(RUN_COLUMNS, rows) + [""] + _render(USER_COLUMNS, users) + [
        "", "Usage %s." % since]


def usage_csv(report: Mapping[str, Any]) -> str:
    """One row per run (CSV_COLUMNS; times as RFC 3339 UTC, end blank while running)."""
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(CSV_COLUMNS)
    for line in report.get("runs") or []:
        row = []
        for column in CSV_COLUMNS:
            value = line.get(column)
            if column in ("start", "end") and value is not None:
                value = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(float(value)))
            row.append("" if value is None else value)
        writer.writerow(row)
    return out.getvalue()
