# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""gpufleet.cluster.fleet_facts_cache run as a module on a state dir under tmp_path: the facts
cache that playbooks/fleet.yml writes and the inventory plugin reads."""

from __future__ import annotations

import json
import os
import stat

import pytest

from . import module_runner
from ansible_collections.gpufleet.cluster.plugins.module_utils.fleets import state
from ansible_collections.gpufleet.cluster.plugins.modules import fleet_facts_cache

FLEET = {
    "name": "demo",
    "instances": [
        {"name": "demo-0", "status": "idle", "resources": {"cpus": 2, "internal_ip": "10.0.0.1"}},
        {"name": "demo-1", "status": "failed", "error": "no sudo", "resources": None},
        {"name": "demo-2", "status": "unreachable", "resources": None},
    ],
}


def run_module(args):
    return module_runner.run_module(fleet_facts_cache.main, args)


def cached(root):
    with open(state.facts_path(root, "demo"), encoding="utf-8") as handle:
        return json.load(handle)


def test_the_ready_hosts_facts_are_cached_once(tmp_path):
    root = str(tmp_path / "state")
    code, result = run_module({"fleet": FLEET, "state_dir": root})
    assert code == 0, result
    assert result["changed"] is True
    assert result["path"] == os.path.join(root, "fleets", "demo", "facts.json")
    assert result["facts"] == {"demo-0": FLEET["instances"][0]["resources"]}
    assert cached(root) == result["facts"]
    assert state.read_facts(root, "demo") == result["facts"]  # what the inventory plugin reads
    assert stat.S_IMODE(os.stat(result["path"]).st_mode) == 0o600

    code, again = run_module({"fleet": FLEET, "state_dir": root})
    assert code == 0
    assert again["changed"] is False
    assert again["facts"] == result["facts"]


def test_a_host_that_is_no_longer_ready_loses_its_cached_facts(tmp_path):
    root = str(tmp_path / "state")
    run_module({"fleet": FLEET, "state_dir": root})
    failed = dict(FLEET, instances=[dict(i, status="failed") for i in FLEET["instances"]])
    code, result = run_module({"fleet": failed, "state_dir": root})
    assert code == 0, result
    assert result["changed"] is True
    assert cached(root) == {} == result["facts"]


def test_check_mode_writes_nothing(tmp_path):
    root = str(tmp_path / "state")
    code, result = run_module({"fleet": FLEET, "state_dir": root, "_ansible_check_mode": True})
    assert code == 0, result
    assert result["changed"] is True
    assert result["facts"] == {"demo-0": FLEET["instances"][0]["resources"]}
    assert not os.path.exists(root)

    run_module({"fleet": FLEET, "state_dir": root})
    code, result = run_module({"fleet": FLEET, "state_dir": root, "_ansible_check_mode": True})
    assert code == 0
    assert result["changed"] is False
    failed = dict(FLEET, instances=[])
    code, result = run_module({"fleet": failed, "state_dir": root, "_ansible_check_mode": True})
    assert result["changed"] is True and result["facts"] == {}
    assert cached(root) == {"demo-0": FLEET["instances"][0]["resources"]}  # left as it was


def test_the_state_dir_comes_from_the_environment(tmp_path, monkeypatch):
    monkeypatch.setenv(state.ENV, str(tmp_path / "env-state"))
    code, result = run_module({"fleet": FLEET})
    assert code == 0, result
    assert result["path"] == str(tmp_path / "env-state" / "fleets" / "demo" / "facts.json")


def test_a_record_without_a_name_or_a_state_dir_it_cannot_write_fails(tmp_path):
    code, result = run_module({"fleet": {"instances": []}, "state_dir": str(tmp_path)})
    assert code == 1
    assert result["failed"] is True
    assert result["msg"] == "fleet: the fleet record has no name"
    blocker = tmp_path / "file"
    blocker.write_text("")
    code, result = run_module({"fleet": FLEET, "state_dir": str(blocker)})
    assert code == 1
    assert "cannot create" in result["msg"] and state.ENV in result["msg"]


@pytest.mark.slow
def test_through_ansible(tmp_path):
    """AnsiballZ ships the module with its module_utils."""
    root = tmp_path / "state"
    args = json.dumps({"fleet": FLEET, "state_dir": str(root)})
    first = module_runner.adhoc_result(module_runner.run_adhoc(
        tmp_path, "gpufleet.cluster.fleet_facts_cache", args), "CHANGED")
    assert first["facts"] == {"demo-0": FLEET["instances"][0]["resources"]}
    again = module_runner.adhoc_result(module_runner.run_adhoc(
        tmp_path, "gpufleet.cluster.fleet_facts_cache", args))
    assert again["changed"] is False


def run_action(monkeypatch, args, check_mode=False):
    """The action plugin that runs for the task (in the controller's process), with Ansible's
    part (the task's arguments checked against the spec) done by Ansible's own validator."""
    from ansible.module_utils.common.arg_spec import ArgumentSpecValidator
    from ansible.plugins.action import ActionBase
    from ansible_collections.gpufleet.cluster.plugins.action import (
        fleet_facts_cache as action_plugin,
    )
    from types import SimpleNamespace

    def validate(self, argument_spec=None, **_kwargs):
        checked = ArgumentSpecValidator(argument_spec).validate(self._task.args)
        assert checked.error_messages == []
        return checked, checked.validated_parameters

    monkeypatch.setattr(ActionBase, "run", lambda self, tmp=None, task_vars=None: {})
    monkeypatch.setattr(action_plugin.ActionModule, "validate_argument_spec", validate)
    action = action_plugin.ActionModule.__new__(action_plugin.ActionModule)
    action._task = SimpleNamespace(check_mode=check_mode, args=args)
    return action.run(task_vars={})


def test_the_action_plugin_writes_what_the_module_writes(tmp_path, monkeypatch):
    by_module, by_action = str(tmp_path / "m"), str(tmp_path / "a")
    _code, module_result = run_module({"fleet": FLEET, "state_dir": by_module})

    planned = run_action(monkeypatch, {"fleet": FLEET, "state_dir": by_action}, check_mode=True)
    assert planned["changed"] is True and not os.path.exists(planned["path"])
    result = run_action(monkeypatch, {"fleet": FLEET, "state_dir": by_action})

    assert (result["changed"], result["facts"]) == (True, module_result["facts"])
    assert cached(by_action) == cached(by_module)
    assert stat.S_IMODE(os.stat(result["path"]).st_mode) == 0o600
    assert run_action(monkeypatch, {"fleet": FLEET, "state_dir": by_action})["changed"] is False
    nameless = run_action(monkeypatch, {"fleet": {"instances": []}, "state_dir": by_action})
    assert nameless["failed"] is True and "no name" in nameless["msg"]
