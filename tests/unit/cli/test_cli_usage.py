# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""``gpufleet usage`` and ``gpufleet.api.usage`` over usage.yml, with the fake playbook
runner."""

from __future__ import annotations

import csv
import io
import json

import pytest

from gpufleet import api
from tests.doubles.playbooks import run_cli

# The fake playbook runner and no terminal on stdin (conftest.py)
pytestmark = pytest.mark.usefixtures("playbooks", "stdin")

NOW = 1780000000.0


def report(unreachable=None):
    return {"since": NOW - 86400, "now": NOW, "unreachable": unreachable or {},
            "runs": [{"run": "train", "run_id": "id-1", "user": "ann", "fleet": "gpus",
                      "nodes": 2, "gpus": 16, "submissions": 1, "start": NOW - 3600,
                      "end": NOW - 1800, "status": "done", "wall_seconds": 1800.0,
                      "gpu_hours": 8.0, "cost": 4.0}],
            "users": [{"user": "ann", "runs": 1, "gpu_hours": 8.0, "cost": 4.0}]}


def test_the_api_runs_usage_yml_and_returns_the_report(playbooks):
    playbooks.answer(stats={"gpufleet_usage": report()})

    assert api.usage(since="24h", user="ann", fleet="gpus") == report()
    (call,) = playbooks.calls
    assert call["playbook"] == "usage.yml"
    assert call["extravars"] == {"gpufleet_since": "24h", "gpufleet_user": "ann",
                                 "gpufleet_fleet": "gpus"}


def test_usage_prints_the_run_and_user_tables_over_the_last_week(playbooks):
    playbooks.answer(stats={"gpufleet_usage": report()})

    code, out, err = run_cli(playbooks, "usage")

    assert code == 0, err
    assert playbooks.calls[0]["extravars"] == {"gpufleet_since": "7d"}
    lines = out.splitlines()
    assert lines[0].split()[:3] == ["RUN", "USER", "FLEET"]
    assert lines[1].split()[:5] == ["train", "ann", "gpus", "2", "16"]
    assert "USER" in lines[3] and lines[4].split() == ["ann", "1", "8.00", "$4.00"]


def test_usage_json_is_the_report_and_csv_parses(playbooks):
    playbooks.answer(stats={"gpufleet_usage": report()})
    playbooks.answer(stats={"gpufleet_usage": report()})

    code, out, _err = run_cli(playbooks, "usage", "--json", "--since", "2026-05-01",
                              "--user", "ann", "--fleet", "gpus")
    assert code == 0 and json.loads(out) == report()
    assert playbooks.calls[0]["extravars"] == {"gpufleet_since": "2026-05-01",
                                               "gpufleet_user": "ann", "gpufleet_fleet": "gpus"}

    code, out, _err = run_cli(playbooks, "usage", "--csv")
    rows = list(csv.DictReader(io.StringIO(out)))
    assert code == 0 and [(r["run"], r["gpu_hours"]) for r in rows] == [("train", "8.0")]


def test_json_and_csv_are_one_or_the_other(playbooks, capsys):
    with pytest.raises(SystemExit):
        run_cli(playbooks, "usage", "--json", "--csv")
    assert "not allowed with" in capsys.readouterr().err


def test_a_silent_host_is_named_and_the_exit_status_is_1(playbooks):
    playbooks.answer(stats={"gpufleet_usage": report({"gpus-1": "ssh: timed out"})})

    code, out, err = run_cli(playbooks, "usage")

    assert code == 1
    assert "gpus-1: ssh: timed out (its usage records are not counted)" in err
    assert out.startswith("RUN")


def test_a_bad_since_is_the_modules_one_line(playbooks):
    playbooks.answer(rc=2, failures=[{"host": "localhost", "task": "Read the hosts' usage "
                                      "records", "msg": "--since yesterday: write a duration "
                                      "such as 30m, 24h or 7d"}])

    code, _out, err = run_cli(playbooks, "usage", "--since", "yesterday")

    assert code == 1
    assert err.strip().endswith("--since yesterday: write a duration such as 30m, 24h or 7d")
