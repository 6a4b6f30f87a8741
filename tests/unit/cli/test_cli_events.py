# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""``gpufleet event`` (answered in the command's process) and ``gpufleet.api.events`` (over
events.yml, or in process), with the fake playbook runner and gpufleet.direct."""

from __future__ import annotations

import json

import pytest

from gpufleet import api
from gpufleet.cli import events as event_cli
from tests.doubles.playbooks import FakeDirect, run_cli

pytestmark = pytest.mark.usefixtures("playbooks", "stdin")

NOW = 1780000000.0


@pytest.fixture
def direct(monkeypatch):
    return FakeDirect().install(monkeypatch)


def event(eid, kind, at, message, targets, actor=None):
    return {"id": eid, "kind": kind, "at": NOW + at, "message": message, "actor": actor,
            "targets": targets, "recorded_at": "x"}


def report(events=None, unreachable=None):
    return {"since": None, "now": NOW, "unreachable": unreachable or {},
            "events": events if events is not None else [
                event("1", "run.submitted", 0, "Run submitted. Status: SUBMITTED",
                      [{"type": "run", "name": "train"}], actor="ann"),
                event("2", "job.ended", 9, "Job status changed RUNNING -> DONE. Exit code: 0",
                      [{"type": "job", "name": "train-0-0"}])]}


def test_the_api_runs_events_yml_with_the_filters_given(playbooks):
    playbooks.answer(stats={"gpufleet_events": report()})

    assert api.events(since="1h", within_runs=["train"], include_target_types=["job"]) == (
        report())
    (call,) = playbooks.calls
    assert call["playbook"] == "events.yml"
    assert call["extravars"] == {"gpufleet_since": "1h",
                                 "gpufleet_events_within_runs": ["train"],
                                 "gpufleet_events_include_target_types": ["job"]}


def test_event_prints_one_line_per_event_as_dstack_does(playbooks, direct):
    direct.answer(report())

    code, out, err = run_cli(playbooks, "event", "--within-run", "train")

    assert (code, err) == (0, "")
    assert out.splitlines() == [
        "[2026-05-28 20:26:40] [\U0001F464ann] [run train] Run submitted. Status: SUBMITTED",
        "[2026-05-28 20:26:49] [job train-0-0] Job status changed RUNNING -> DONE. Exit code: 0"]
    ((name, args, kwargs),) = direct.calls
    assert name == "events" and kwargs["within_runs"] == ["train"]
    assert kwargs["since"] is None and kwargs["target_runs"] == []
    assert playbooks.calls == []


def test_event_json_is_the_report_and_silent_hosts_are_named(playbooks, direct):
    direct.answer(report(unreachable={"gpus-1": "ssh: timed out"}))

    code, out, err = run_cli(playbooks, "event", "list", "--json", "--since", "10m")

    assert code == 1
    assert json.loads(out) == report(unreachable={"gpus-1": "ssh: timed out"})
    assert "gpus-1: ssh: timed out (its events are not shown)" in err
    assert direct.calls[0][2]["since"] == "10m"


def test_filters_that_cannot_go_together_are_refused_by_the_parser(playbooks, direct, capsys):
    for argv, said in ((("--target-run", "a", "--target-fleet", "b"), "not allowed with"),
                       (("--include-target-type", "volume"), "invalid choice")):
        with pytest.raises(SystemExit) as info:
            run_cli(playbooks, "event", *argv)
        assert info.value.code == 2 and said in capsys.readouterr().err
    code, _out, err = run_cli(playbooks, "event", "--watch", "--json")
    assert code == 2 and "--watch" in err
    assert direct.calls == []


def test_watch_prints_only_the_new_events_until_interrupted(playbooks, direct, monkeypatch):
    first = report()
    later = report(events=first["events"] + [
        event("3", "run.status", 10, "Run status changed RUNNING -> DONE",
              [{"type": "run", "name": "train"}])])
    direct.answer(first)
    direct.answer(later)
    sleeps = []

    def sleep(seconds):
        sleeps.append(seconds)
        if len(sleeps) == 2:
            raise KeyboardInterrupt

    monkeypatch.setattr(event_cli.time, "sleep", sleep)
    code, out, _err = run_cli(playbooks, "event", "-w")

    assert code == 0
    assert [line.split("] ")[-1] for line in out.splitlines()] == [
        "Run submitted. Status: SUBMITTED", "Job status changed RUNNING -> DONE. Exit code: 0",
        "Run status changed RUNNING -> DONE"]
    assert direct.calls[1][2]["since"] == "2026-05-28T20:25:40Z"
