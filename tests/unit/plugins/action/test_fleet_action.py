# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""gpufleet.cluster.fleet's action plugin: where the module would run on the controller, the
fleet is converged in the controller's process with the module's own result, messages and
warnings; anywhere else the module is sent."""

from __future__ import annotations

import pytest

from ansible_collections.gpufleet.cluster.plugins.action import fleet as fleet_action
from ansible_collections.gpufleet.cluster.plugins.module_utils.fleets import converge, state
from ansible_collections.gpufleet.cluster.plugins.modules import fleet as fleet_module

from ..modules import module_runner

OWN = {"ansible_python_interpreter": __import__("sys").executable}
FLEET = """\
type: fleet
name: onprem
placement: any
placement: any
ssh_config:
  user: ubuntu
  identity_file: /keys/id_ed25519
  hosts: [10.0.0.1, 10.0.0.2]
"""


@pytest.fixture
def fleet_file(tmp_path):
    fleet = tmp_path / "onprem.dstack.yml"
    fleet.write_text(FLEET)
    return str(fleet)


def without_state_dir(result, root):
    """A result with its state dir (which differs between the two runs) named ROOT, and
    without the hosts' control paths (a digest of a route that names the state dir)."""
    import json

    result = json.loads(json.dumps(result).replace(root, "ROOT"))
    for host in result.get("hosts") or []:
        assert host["vars"].pop("ansible_control_path").startswith("%(directory)s/gf-")
    return result


@pytest.mark.parametrize("check_mode", [True, False])
def test_in_process_the_result_is_the_modules(make_action, fleet_file, tmp_path, check_mode):
    by_module, by_action = str(tmp_path / "m"), str(tmp_path / "a")
    code, expected = module_runner.run_module(
        fleet_module.main, {"path": fleet_file, "state_dir": by_module,
                            "_ansible_check_mode": check_mode})
    assert code == 0, expected
    action = make_action(fleet_action, {"path": fleet_file, "state_dir": by_action},
                         check_mode=check_mode)
    result = action.run(task_vars=OWN)
    assert action.sent == []   # nothing was sent anywhere
    # ansible-core 2.19 wraps a module's warnings (and keeps those of earlier modules run in
    # this process); Ansible wraps an action plugin's plain strings the same way.
    warned = [w["event"]["msg"] if isinstance(w, dict) else w for w in expected.pop("warnings")]
    assert result.pop("warnings") == [w for w in warned if w.startswith(fleet_file)]
    assert [w for w in warned if w.startswith(fleet_file)] == [
        fleet_file + ": the key 'placement' is given twice in one mapping (again at line 4); the "
        "last one is used"]
    expected.pop("invocation", None)
    assert without_state_dir(result, by_action) == without_state_dir(expected, by_module)
    assert [h["name"] for h in result["hosts"]] == ["onprem-0", "onprem-1"]
    assert bool(state.remembered_files(by_action)) is not check_mode
    assert result["last_peers"] == []   # never applied: no facts measured


def test_the_last_peers_come_from_the_facts_cache(make_action, fleet_file, tmp_path):
    root = str(tmp_path / "s")
    state.write_facts(root, "onprem", {"onprem-1": {"internal_ip": "192.168.0.2"}})
    result = make_action(fleet_action, {"path": fleet_file, "state_dir": root}).run(task_vars=OWN)
    assert result["last_peers"] == [{"name": "onprem-1", "address": "192.168.0.2", "port": 22}]


def test_in_process_a_refusal_is_the_modules_message(make_action, fleet_file, tmp_path):
    args = {"path": fleet_file, "state_dir": str(tmp_path / "s"), "instances": [1]}
    _code, expected = module_runner.run_module(fleet_module.main, dict(args))
    result = make_action(fleet_action, dict(args)).run(task_vars=OWN)
    assert result["failed"] is True and result["msg"] == expected["msg"]
    assert result["msg"].startswith("instances: only with state=absent")


def test_in_process_a_bug_is_reported_not_raised(make_action, fleet_file, tmp_path, monkeypatch):
    def broken(*_args, **_kwargs):
        raise KeyError("hosts")

    monkeypatch.setattr(converge.apply, "apply", broken)
    result = make_action(fleet_action, {"path": fleet_file, "state_dir": str(tmp_path / "s")}).run(
        task_vars=OWN)
    assert result["failed"] is True
    assert result["msg"] == "internal error in gpufleet (please report it): 'hosts'"
    assert "KeyError" in result["exception"]


def test_elsewhere_the_module_is_sent_with_the_task_arguments(make_action, fleet_file):
    args = {"path": fleet_file, "at_least": 2}
    answer = {"changed": False, "fleet": {"name": "onprem"}, "hosts": []}
    for kwargs in ({"become": True}, {"transport": "ssh"}, {"async_val": 600}):
        action = make_action(fleet_action, dict(args), sent=answer, **kwargs)
        assert action.run(task_vars=OWN) == answer
        assert action.sent == [("gpufleet.cluster.fleet", args)]
        # A task with async: runs the module under Ansible's async wrapper, as before.
        assert bool(action.wrapped) is ("async_val" in kwargs)
    assert fleet_action.ActionModule._supports_async is True


class Tagged(str):
    """What ansible-core 2.19 hands an action plugin for a templated string: a str subclass."""


class TaggedDict(dict):
    """... and for a mapping from extra vars."""


def test_an_inline_fleet_from_extra_vars_is_kept_as_plain_yaml(make_action, tmp_path):
    root = str(tmp_path / "s")
    config = TaggedDict(type=Tagged("fleet"), name=Tagged("inline"), ssh_config=TaggedDict(
        user=Tagged("ubuntu"), identity_file=Tagged("/keys/id"), hosts=[Tagged("10.0.0.9")]))
    result = make_action(fleet_action, {"config": config, "state_dir": root}).run(task_vars=OWN)
    assert "failed" not in result, result
    assert [h["name"] for h in result["hosts"]] == ["inline-0"]
    saved = state.remembered_files(root)
    assert list(saved) == ["inline"]
    with open(saved["inline"]) as handle:
        text = handle.read()
    assert "ubuntu" in text and "!!python" not in text
