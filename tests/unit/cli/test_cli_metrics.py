# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""``gpufleet metrics`` over metrics.yml, with the fake playbook runner."""

from __future__ import annotations

import json

import pytest

from gpufleet.cli import metrics as metrics_cli
from tests.doubles.playbooks import run_cli

GIB = 1024 ** 3


# The fake playbook runner and no terminal on stdin (conftest.py)
pytestmark = pytest.mark.usefixtures("playbooks", "stdin")


def record(cpu=40.0):
    return {"run": "train", "status": "running", "newest": 1010, "unreachable_hosts": {},
            "jobs": [{"job_num": 1, "host": "gpus-1", "status": "running", "cpus": 2,
                      "cpu_percent": [[1000, 10.0], [1010, cpu]],
                      "memory_bytes": [[1000, GIB], [1010, 2 * GIB]],
                      "memory_total_bytes": 8 * GIB, "gpus": []}]}


def test_metrics_prints_dstacks_chart_of_the_job_asked_for(playbooks):
    playbooks.answer(stats={"gpufleet_metrics": record()})
    code, out, err = run_cli(playbooks, "metrics", "train", "--job", "1")
    assert code == 0, err
    (call,) = playbooks.calls
    assert call["playbook"] == "metrics.yml"
    assert call["extravars"] == {"run": "train", "gpufleet_job": 1}
    lines = out.splitlines()
    assert lines[0].split() == ["UTILIZATION", "MEMORY"]
    # Ten seconds of samples at the right of dstack's hour-wide chart: one cell, the newest.
    assert lines[1].startswith("job=1  cpu")
    assert " \u2583 40%" in lines[1] and lines[1].endswith(" \u2582 2GB/8GB")


def test_metrics_json_is_the_record(playbooks):
    playbooks.answer(stats={"gpufleet_metrics": record()})
    code, out, _err = run_cli(playbooks, "metrics", "train", "--json")
    assert code == 0
    assert json.loads(out) == record()
    assert "gpufleet_job" not in playbooks.calls[0]["extravars"]


def test_metrics_watch_refreshes_until_ctrl_c(playbooks, monkeypatch):
    playbooks.answer(stats={"gpufleet_metrics": record(10.0)})
    playbooks.answer(stats={"gpufleet_metrics": record(90.0)})
    pauses = []

    def sleep(seconds):
        pauses.append(seconds)
        if len(pauses) == 2:
            raise KeyboardInterrupt

    monkeypatch.setattr(metrics_cli.time, "sleep", sleep)
    code, out, _err = run_cli(playbooks, "metrics", "train", "-w")
    assert code == 0
    assert pauses == [metrics_cli.WATCH_INTERVAL] * 2
    assert len(playbooks.calls) == 2
    assert " 10%" in out and " 90%" in out


def test_metrics_of_an_unknown_run_exits_1_with_the_failure(playbooks):
    playbooks.answer(rc=2, failures=[{
        "host": "localhost", "task": "Read the metrics",
        "msg": "no run named nope on the fleets' hosts (gpufleet ps lists runs)"}])
    code, out, err = run_cli(playbooks, "metrics", "nope")
    assert code == 1 and out == ""
    assert "no run named nope" in err


def test_hosts_that_did_not_answer_are_named_on_stderr_not_in_the_chart(playbooks):
    seen = dict(record(), unreachable_hosts={"other-0": "unreachable over SSH"})
    playbooks.answer(stats={"gpufleet_metrics": seen})
    code, out, err = run_cli(playbooks, "metrics", "train")
    assert code == 0
    assert err == "gpufleet: other-0: unreachable over SSH\n"
    assert out.splitlines()[0].split() == ["UTILIZATION", "MEMORY"]
