# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""gpufleet.cluster.fleet_marker run as a module on marker files under tmp_path: in-process
through AnsibleModule, and once through ``ansible`` (AnsiballZ) on localhost."""

from __future__ import annotations

import json
import os

from . import module_runner
import pytest
from ansible.module_utils.common import warnings as ansible_warnings
from ansible_collections.gpufleet.cluster.plugins.modules import fleet_marker

try:
    from ansible.module_utils import _internal as ansible_internal
except ImportError:  # ansible-core before 2.19
    ansible_internal = None

HOSTS = ["10.0.0.5", "10.0.0.6"]


def run_module(args):
    return module_runner.run_module(fleet_marker.main, args)


@pytest.fixture
def path(tmp_path):
    return str(tmp_path / "gpufleet" / "fleet.json")


def claim_args(path, **extra):
    args = {
        "path": path,
        "fleet": "my-fleet",
        "instance": 0,
        "hosts": HOSTS,
        "controller": "laptop",
    }
    args.update(extra)
    return args


def on_disk(path):
    with open(path, encoding="utf-8") as handle:
        return json.load(handle)


def test_claim_then_claim_again(path):
    code, result = run_module(claim_args(path))
    assert code == 0, result
    assert result["changed"] is True
    assert result["previous"] is None
    assert result["marker"] == on_disk(path)
    assert result["marker"]["fleet"] == "my-fleet"
    assert result["marker"]["hosts"] == HOSTS
    assert result["marker"]["created"] == result["marker"]["updated"]
    assert result["msg"] == "fleet my-fleet claimed this host as instance 0"
    assert "diff" not in result

    code, again = run_module(claim_args(path))
    assert code == 0
    assert again["changed"] is False
    assert again["marker"] == again["previous"] == result["marker"]


def test_check_mode_and_diff(path):
    code, result = run_module(claim_args(path, _ansible_check_mode=True, _ansible_diff=True))
    assert code == 0, result
    assert result["changed"] is True
    assert not os.path.exists(path)
    assert result["diff"]["before"] == ""
    assert json.loads(result["diff"]["after"]) == result["marker"]
    assert result["diff"]["after_header"] == path

    run_module(claim_args(path))
    code, result = run_module(claim_args(path, instance=1, _ansible_diff=True))
    assert code == 0
    before, after = json.loads(result["diff"]["before"]), json.loads(result["diff"]["after"])
    assert (before["instance"], after["instance"]) == (0, 1)
    assert on_disk(path) == after

    code, result = run_module(
        {"path": path, "fleet": "my-fleet", "state": "absent", "_ansible_diff": True}
    )
    assert code == 0
    assert result["changed"] is True
    assert result["diff"]["after"] == ""
    assert not os.path.exists(path)


def test_another_fleets_host_fails_then_force_takes_it(path, monkeypatch):
    # Module warnings are process-wide in Ansible, and go to the display instead of the result
    # once any test has imported Ansible's controller code: start clean, as on a managed host.
    if hasattr(ansible_internal, "is_controller"):  # ansible-core 2.19 and later
        monkeypatch.setattr(ansible_internal, "is_controller", False)
    fresh = type(ansible_warnings._global_warnings)()  # pylint: disable=protected-access
    monkeypatch.setattr(ansible_warnings, "_global_warnings", fresh)
    run_module(claim_args(path, fleet="other", instance=3))
    code, result = run_module(claim_args(path))
    assert code == 1
    assert result["msg"].startswith(
        "host is already in fleet other as instance 3 (marker %s, written " % path
    )
    assert result["msg"].endswith(
        "remove it from fleet other's ssh_config.hosts and re-apply other, or delete fleet other, "
        "before adding it to fleet my-fleet (force: true takes it over)"
    )
    assert on_disk(path)["fleet"] == "other"

    code, result = run_module(claim_args(path, force=True))
    assert code == 0, result
    assert result["changed"] is True
    assert result["previous"]["fleet"] == "other"
    assert on_disk(path)["fleet"] == "my-fleet"
    # ansible-core 2.19 returns warnings as structured events, older versions as strings.
    assert len(result["warnings"]) == 1
    assert (
        "this host was in fleet other and now belongs to fleet my-fleet (force: true): remove it "
        "from fleet other's ssh_config.hosts too"
    ) in json.dumps(result["warnings"])


def test_release_leaves_another_fleets_marker(path):
    run_module(claim_args(path, fleet="other", instance=3))
    code, result = run_module({"path": path, "fleet": "my-fleet", "state": "absent"})
    assert code == 0
    assert result["changed"] is False
    assert result["msg"].startswith(
        "left the marker %s in place: the host belongs to fleet other" % path
    )
    assert on_disk(path)["fleet"] == "other"


def test_release_without_a_marker(path):
    code, result = run_module({"path": path, "fleet": "my-fleet", "state": "absent"})
    assert code == 0
    assert result == dict(
        result, changed=False, marker=None, previous=None, msg="no fleet marker at %s" % path
    )


@pytest.mark.parametrize(
    "args, message",
    [
        ({"fleet": "f"}, "state is present but all of the following are missing: instance"),
        ({"fleet": "f", "instance": -2}, "instance must be the host's instance number in fleet f"),
        ({"instance": 0}, "missing required arguments: fleet"),
        ({"fleet": "f", "state": "gone"}, "value of state must be one of: present, absent"),
    ],
)
def test_bad_options_are_reported(path, args, message):
    code, result = run_module(dict(args, path=path))
    assert code == 1
    assert message in result["msg"]
    assert not os.path.exists(path)


def test_a_damaged_marker_is_reported(path):
    os.makedirs(os.path.dirname(path))
    with open(path, "w", encoding="utf-8") as handle:
        handle.write("{truncated")
    code, result = run_module(claim_args(path))
    assert code == 1
    assert result["msg"].startswith("the fleet marker %s is damaged (not valid JSON" % path)
    assert "exception" not in result


@pytest.mark.slow
def test_through_ansible_on_localhost(tmp_path, path):
    """The module as Ansible ships it: claim twice with --diff, the second run unchanged."""
    results = []
    for _run in range(2):
        proc = module_runner.run_adhoc(
            tmp_path, "gpufleet.cluster.fleet_marker", json.dumps(claim_args(path)), "--diff"
        )
        assert proc.returncode == 0, proc.stdout + proc.stderr
        results.append(proc.stdout)
    assert "localhost | CHANGED => " in results[0], results[0]
    assert '"fleet": "my-fleet"' in results[0]
    assert "localhost | SUCCESS => " in results[1], results[1]
    assert on_disk(path)["hosts"] == HOSTS
