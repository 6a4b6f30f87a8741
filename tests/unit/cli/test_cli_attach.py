# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""gpufleet attach's wait for a run that is not up yet (cli/attach.attach_when_running), with
gpufleet.api.attach answering from a script."""

from __future__ import annotations

import pytest

from gpufleet import api
from gpufleet.cli import attach as attach_cli

PENDING = "run r is pending (queue position 1 on gpus-0): it is not running yet; attach again"
NOWHERE = "no run named r on the fleets' hosts (gpufleet ps lists runs)"


class Script:
    """api.attach answering each call with the next item: an error text or a record."""

    def __init__(self, answers):
        self.answers = list(answers)
        self.calls = 0

    def __call__(self, run, **given):
        self.calls += 1
        answer = self.answers.pop(0)
        if isinstance(answer, str):
            raise api.GpufleetError(answer)
        return answer


class Clock:
    def __init__(self):
        self.now = 0.0
        self.pauses = []

    def pause(self, seconds):
        self.pauses.append(seconds)
        self.now += seconds
        return False


def wait_for(monkeypatch, answers):
    script = Script(answers)
    monkeypatch.setattr(api, "attach", script)
    clock = Clock()
    told = []
    result = attach_cli.attach_when_running("r", {}, clock.pause, on_wait=lambda: told.append(1),
                                            clock=lambda: clock.now)
    return result, script, clock, told


def test_a_queued_run_is_waited_for_through_the_gap_before_its_containers(monkeypatch):
    record = {"run": "r", "alias": "r"}
    result, script, clock, told = wait_for(
        monkeypatch, [PENDING, PENDING, NOWHERE, NOWHERE, "run r is provisioning: job 0 is not "
                      "running yet; attach again once it runs", record])
    assert result == record
    assert script.calls == 6 and told == [1]
    assert clock.pauses == [attach_cli.POLL] * 5


def test_a_run_never_seen_is_an_error_at_once(monkeypatch):
    with pytest.raises(api.GpufleetError, match="no run named r"):
        wait_for(monkeypatch, [NOWHERE])


def test_a_run_gone_for_longer_than_the_gap_allows_is_an_error(monkeypatch):
    polls = int(attach_cli.BETWEEN / attach_cli.POLL) + 2
    with pytest.raises(api.GpufleetError, match="no run named r"):
        wait_for(monkeypatch, [PENDING] + [NOWHERE] * polls)


def test_other_refusals_are_raised(monkeypatch):
    with pytest.raises(api.GpufleetError, match="nothing to attach to"):
        wait_for(monkeypatch, [PENDING, "Run r is failed: there is nothing to attach to"])
