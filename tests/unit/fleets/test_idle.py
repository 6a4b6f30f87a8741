"""How long an idle instance is kept (fleets/idle.py), as dstack decides it: the fleet's own
instances keep the fleet's idle_duration (3d unset); an instance a run makes keeps the shorter
of the fleet's and the run's (off loses, 5m when neither is set), carried on the instance
itself (backends/made_for.py) so that reconcile and `gpufleet fleet` need no run file."""

from __future__ import annotations

import datetime

import pytest
from ansible_collections.gpufleet.cluster.plugins.module_utils.backends import made_for
from ansible_collections.gpufleet.cluster.plugins.module_utils.fleets import idle
from ansible_collections.gpufleet.cluster.plugins.module_utils.render.fleet_table import (
    instance_status,
)
from ansible_collections.gpufleet.cluster.plugins.module_utils.spec import parse_data
from ansible_collections.gpufleet.cluster.plugins.module_utils.tasks.reconcile import decide

NOW = datetime.datetime(2026, 11, 25, 12, 0, tzinfo=datetime.timezone.utc)


def ago(**delta):
    return (NOW - datetime.timedelta(**delta)).strftime("%Y-%m-%dT%H:%M:%SZ")


def run_idle(text):
    data = {"type": "task", "commands": ["true"]}
    if text is not None:
        data["idle_duration"] = text
    return parse_data(data)[0]["idle_duration"]


def fleet_config(text=None):
    data = {"type": "fleet", "name": "el", "nodes": "0..4", "backends": ["local"]}
    if text is not None:
        data["idle_duration"] = text
    return parse_data(data)[0]


@pytest.mark.parametrize("fleet_text, run_text, expected", [
    (None, None, 300),          # neither file: dstack's run default, not the fleet's 3d
    ("1h", None, 3600),         # only the fleet: the fleet's
    (None, "2h", 7200),         # only the run: the run's, even above 5m
    ("1h", "10m", 600),         # both: the shorter
    ("10m", "1h", 600),
    ("off", None, "off"),       # off is a value: the fleet keeps them
    ("off", "20m", 1200),       # off loses to a number, either way round
    ("30m", "off", 1800),
    ("off", "off", "off"),
    ("0s", "1h", 0),
])
def test_an_instance_made_for_a_run_keeps_the_shorter_limit(fleet_text, run_text, expected):
    assert idle.for_run(fleet_config(fleet_text)["idle_duration"], run_idle(run_text)) == expected


def test_the_fleets_own_instances_keep_the_fleets_limit_or_three_days():
    assert idle.of_fleet(fleet_config()["idle_duration"]) == 3 * 86400
    assert idle.of_fleet(fleet_config("1h")["idle_duration"]) == 3600
    assert idle.of_fleet(fleet_config("off")["idle_duration"]) == "off"
    own = {"name": "el-0", "made_for_run": None, "idle_duration": None}
    made = {"name": "el-1", "made_for_run": "train", "idle_duration": 300}
    assert idle.of_instance(own, 3600) == 3600
    assert idle.of_instance(made, 3600) == 300
    assert idle.of_instance(dict(made, idle_duration="off"), 3600) == "off"
    # A mark without a readable limit: the fleet's applies.
    assert idle.of_instance(dict(made, idle_duration=None), None) == 3 * 86400


def test_the_module_option_is_settled_against_the_fleet():
    assert idle.made_for(None, fleet_config()) is None
    assert idle.made_for({"run": "t", "idle_duration": None}, fleet_config("1h")) == \
        {"run": "t", "idle_duration": 3600}
    assert idle.made_for({"run": "t", "idle_duration": None}, fleet_config()) == \
        {"run": "t", "idle_duration": 300}
    assert idle.made_for({"run": "t", "idle_duration": "15m"}, fleet_config()) == \
        {"run": "t", "idle_duration": 900}
    assert idle.made_for({"run": "t", "idle_duration": 120}, fleet_config()) == \
        {"run": "t", "idle_duration": 120}
    assert idle.made_for({"run": "t", "idle_duration": "off"}, fleet_config("1h")) == \
        {"run": "t", "idle_duration": "off"}
    with pytest.raises(idle.IdleError, match=r"made_for.idle_duration: .*soon.*give seconds"):
        idle.made_for({"run": "t", "idle_duration": "soon"}, fleet_config())


@pytest.mark.parametrize("limit, text", [(300, "300"), (0, "0"), ("off", "off")])
def test_the_mark_an_instance_carries_reads_back(limit, text):
    assert made_for.values({"run": "train", "idle_duration": limit}) == ("train", text)
    assert made_for.read("train", text) == {"made_for_run": "train", "idle_duration": limit}


def test_instances_without_a_mark_or_with_a_damaged_one():
    assert made_for.values(None) is None
    assert made_for.values({"run": ""}) is None
    assert made_for.read(None, None) == {"made_for_run": None, "idle_duration": None}
    # A limit without a run means nothing; an unreadable limit falls back to the fleet's.
    assert made_for.read(None, "300") == {"made_for_run": None, "idle_duration": None}
    assert made_for.read("train", "soon") == {"made_for_run": "train", "idle_duration": None}
    assert made_for.read("train", "-5") == {"made_for_run": "train", "idle_duration": "off"}


def _instance(num, made=None, limit=None, created=None):
    return {"name": "el-%d" % num, "num": num, "status": "idle",
            "created": created or ago(minutes=20), "made_for_run": made,
            "idle_duration": limit}


def test_reconcile_removes_what_a_run_made_after_its_limit_and_keeps_the_fleets_own():
    instances = [_instance(0), _instance(1, "train", 300), _instance(2, "train", "off"),
                 _instance(3, "sweep", 3600)]
    read = dict((i["name"], []) for i in instances)   # every host answered: no containers
    decision = decide(fleet_config("1h"), instances, read, {}, NOW)
    assert decision["remove"] == ["el-1"]
    reasons = decision["reasons"]
    assert reasons["el-0"] == "kept: idle 20m of idle_duration 1h"
    assert reasons["el-1"] == "remove: idle 20m >= idle_duration 5m (made for run train)"
    assert reasons["el-2"] == "kept: idle 20m, idle_duration is off (made for run train)"
    assert reasons["el-3"] == "kept: idle 20m of idle_duration 1h (made for run sweep)"
    # nodes.min still holds: with min 4 nothing goes.
    config = parse_data({"type": "fleet", "name": "el", "nodes": "4..6",
                         "backends": ["local"]})[0]
    decision = decide(config, instances, read, {}, NOW)
    assert decision["remove"] == []
    assert decision["reasons"]["el-1"] == "kept: idle 20m, but the fleet keeps nodes.min = 4"


def test_an_unset_fleet_limit_is_three_days_for_its_own_instances():
    instances = [_instance(0, created=ago(days=2)), _instance(1, created=ago(days=4))]
    decision = decide(fleet_config(), instances, {"el-0": [], "el-1": []}, {}, NOW)
    assert decision["remove"] == ["el-1"]
    assert decision["reasons"]["el-0"] == "kept: idle 2d of idle_duration 3d"


def test_gpufleet_fleet_shows_what_an_instance_was_made_for():
    made = {"status": "provisioning", "made_for_run": "train", "idle_duration": 300}
    assert instance_status(made) == "provisioning (for run train)"
    assert instance_status(dict(made, status="idle")) == "idle (for run train)"
    assert instance_status(dict(made, status="idle"), verbose=True) == \
        "idle (for run train, idle_duration 5m)"
    assert instance_status(dict(made, status="busy", idle_duration="off"), verbose=True) == \
        "busy (for run train, idle_duration off)"
    assert instance_status(dict(made, status="terminated")) == "terminated"
    assert instance_status({"status": "idle"}) == "idle"
