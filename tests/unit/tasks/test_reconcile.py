"""One reconcile pass (tasks/reconcile.py): idle instances beyond nodes.min go, highest
numbers first; busy, unreachable or recently used ones stay; a fleet below min is refilled."""

from __future__ import annotations

import datetime

import pytest
from ansible_collections.gpufleet.cluster.plugins.module_utils.core.times import parse_time
from ansible_collections.gpufleet.cluster.plugins.module_utils.tasks.reconcile import (
    decide,
    idle_since,
)
from ansible_collections.gpufleet.cluster.plugins.module_utils.spec import parse_data

NOW = datetime.datetime(2026, 11, 22, 12, 0, tzinfo=datetime.timezone.utc)


def ago(**delta):
    return (NOW - datetime.timedelta(**delta)).strftime("%Y-%m-%dT%H:%M:%SZ")


def instance(num, created=None, status="idle"):
    return {"name": "f-%d" % num, "num": num, "status": status,
            "created": created or ago(days=10)}


def done(finished):
    return {"state": "exited", "exit_code": 0, "finished_at": finished,
            "labels": {"gpufleet.run": "r", "gpufleet.job": "0"},
            "files": {"running": "1", "exit_code": "0", "reason": None}}


def running():
    return {"state": "running", "exit_code": 0, "finished_at": "0001-01-01T00:00:00Z",
            "labels": {"gpufleet.run": "r", "gpufleet.job": "0"},
            "files": {"running": "1", "exit_code": None, "reason": None}}


def fleet(nodes="1..4", idle="1h"):
    return parse_data({"type": "fleet", "name": "ff", "nodes": nodes, "idle_duration": idle,
                       "backends": ["local"]})[0]


def test_idle_since_the_last_job_or_creation_and_busy_while_a_job_runs():
    assert idle_since(instance(0), []) == parse_time(ago(days=10))
    assert idle_since(instance(0), [done(ago(hours=3)), done(ago(hours=5))]) == \
        parse_time(ago(hours=3))
    assert idle_since(instance(0), [done(ago(hours=3)), running()]) is None
    # A job that ended, its container still finishing (telling the run's other nodes).
    finishing = dict(running(), files={"running": "1", "exit_code": "0", "reason": None})
    assert idle_since(instance(0), [done(ago(hours=3)), finishing]) is None
    assert parse_time("2026-11-22T11:00:00.123456789Z").microsecond == 123456


def test_idle_instances_go_highest_number_first_down_to_min():
    instances = [instance(n) for n in range(4)]
    containers = {"f-0": [done(ago(hours=2))], "f-1": [running()],
                  "f-2": [done(ago(minutes=30))], "f-3": [done(ago(hours=6))]}
    decision = decide(fleet(), instances, containers, {}, NOW)
    assert decision["remove"] == ["f-0", "f-3"]
    assert decision["keep"] == ["f-1", "f-2"] and decision["create"] == 0
    assert decision["reasons"]["f-1"] == "kept: busy"
    assert decision["reasons"]["f-2"] == "kept: idle 30m of idle_duration 1h"
    assert decision["reasons"]["f-3"] == "remove: idle 6h >= idle_duration 1h"
    # With min 3 only one may go: the highest number.
    decision = decide(fleet("3..4"), instances, containers, {}, NOW)
    assert decision["remove"] == ["f-3"]
    assert decision["reasons"]["f-0"] == "kept: idle 2h, but the fleet keeps nodes.min = 3"


def test_hosts_that_cannot_be_asked_and_idle_duration_off_keep_instances():
    instances = [instance(0), instance(1)]
    decision = decide(fleet("0..2"), instances, {"f-0": []}, {"f-1": "connection refused"}, NOW)
    assert decision["remove"] == ["f-0"]
    assert decision["reasons"]["f-1"].startswith("kept: cannot be asked")
    decision = decide(fleet("0..2", idle="off"), instances, {"f-0": [], "f-1": []}, {}, NOW)
    assert decision["remove"] == []
    assert decision["reasons"]["f-0"] == "kept: idle 10d, idle_duration is off"


def test_a_host_the_survey_did_not_read_is_never_reaped():
    """Busy, idle or unknown: an instance neither read nor named in the errors (its host was
    not asked) is unknown, and reaping must not delete what it cannot check."""
    instances = [instance(0), instance(1)]
    decision = decide(fleet("0..2"), instances, {"f-0": []}, {}, NOW)
    assert decision["remove"] == ["f-0"]
    assert decision["reasons"]["f-1"].startswith("kept: cannot be asked whether it is idle")


@pytest.mark.parametrize("alive, create", [(0, 2), (1, 1), (2, 0), (3, 0)])
def test_a_fleet_below_min_is_refilled(alive, create):
    instances = [instance(n) for n in range(alive)] + [instance(9, status="terminated")]
    assert decide(fleet("2..4", idle="off"), instances, {}, {}, NOW)["create"] == create


def test_a_host_claimed_for_a_run_about_to_start_is_busy():
    instances = [instance(n, created=ago(hours=5)) for n in range(3)]
    claims = {"f-2": [{"run": "train", "blocks": 1}]}
    decision = decide(fleet("0..4"), instances, {"f-0": [], "f-1": [], "f-2": []}, {}, NOW,
                      claims)
    assert decision["remove"] == ["f-0", "f-1"]
    assert decision["reasons"]["f-2"] == "kept: claimed by run train"


def test_a_host_holding_waiting_runs_of_the_queue_is_kept():
    instances = [instance(n, created=ago(hours=5)) for n in range(2)]
    queues = {"f-0": [{"run": "sweep-3", "state": "pending"}, {"run": "old", "state": "failed"}]}
    decision = decide(fleet("0..4"), instances, {"f-0": [], "f-1": []}, {}, NOW, {}, queues)
    assert decision["remove"] == ["f-1"]
    assert decision["reasons"]["f-0"] == "kept: holds the queue entries of run sweep-3"
