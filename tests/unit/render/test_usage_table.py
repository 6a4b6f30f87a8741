# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The tables and the CSV of ``gpufleet usage`` (render.usage_table)."""

from __future__ import annotations

import csv
import io

from ansible_collections.gpufleet.cluster.plugins.module_utils.render import usage_table

NOW = 1780000000.0   # 2026-05-28T20:26:40Z


def report():
    runs = [{"run": "train", "run_id": "id-1", "user": "ann", "fleet": "gpus", "nodes": 2,
             "gpus": 16, "submissions": 1, "start": NOW - 7200, "end": None,
             "status": "running", "wall_seconds": 7200.0, "gpu_hours": 32.0, "cost": 98.4},
            {"run": "old", "run_id": "id-0", "user": None, "fleet": "gpus", "nodes": 1,
             "gpus": 0, "submissions": 1, "start": NOW - 90000, "end": NOW - 89955,
             "status": "done", "wall_seconds": 45.0, "gpu_hours": 0.0, "cost": 0.0}]
    users = [{"user": "ann", "runs": 1, "gpu_hours": 32.0, "cost": 98.4},
             {"user": None, "runs": 1, "gpu_hours": 0.0, "cost": 0.0}]
    return {"since": NOW - 7 * 86400, "now": NOW, "runs": runs, "users": users,
            "unreachable": {}}


def test_the_run_table_then_the_user_table():
    lines = usage_table.usage_lines(report())

    assert lines[0].split() == ["RUN", "USER", "FLEET", "NODES", "GPUS", "START", "END",
                                "WALL", "GPU-HOURS", "COST"]
    assert lines[1].split() == ["train", "ann", "gpus", "2", "16", "2026-05-28", "18:26",
                                "running", "2h00m", "32.00", "$98.40"]
    assert lines[2].split() == ["old", "-", "gpus", "1", "0", "2026-05-27", "19:26",
                                "2026-05-27", "19:27", "45s", "0.00", "$0.00"]
    assert lines[3] == ""
    assert lines[4].split() == ["USER", "RUNS", "GPU-HOURS", "COST"]
    assert lines[5].split() == ["ann", "1", "32.00", "$98.40"]
    assert lines[6].split() == ["-", "1", "0.00", "$0.00"]
    assert lines[-1] == "Usage since 2026-05-21 20:26 UTC."


def test_no_usage_is_one_line():
    assert usage_table.usage_lines(dict(report(), runs=[], users=[])) == [
        "No usage since 2026-05-21 20:26 UTC."]


def test_wall_times_read_as_people_write_them():
    assert [usage_table.wall(s) for s in (0, 59.6, 61, 3599, 3600, 86399, 90000, None)] == [
        "0s", "1m00s", "1m01s", "59m59s", "1h00m", "23h59m", "1d01h", ""]


def test_the_csv_parses_back_to_the_runs():
    rows = list(csv.DictReader(io.StringIO(usage_table.usage_csv(report()))))

    assert [r["run"] for r in rows] == ["train", "old"]
    assert rows[0]["end"] == "" and rows[0]["start"] == "2026-05-28T18:26:40Z"
    assert rows[1]["user"] == "" and rows[1]["end"] == "2026-05-27T19:27:25Z"
    assert float(rows[0]["gpu_hours"]) == 32.0 and float(rows[0]["cost"]) == 98.4
    assert list(rows[0]) == list(usage_table.CSV_COLUMNS)
