# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""core.module: the one way a module turns an error into its failure."""

from __future__ import annotations

import pytest
from ansible_collections.gpufleet.cluster.plugins.module_utils.core.errors import GpufleetError
from ansible_collections.gpufleet.cluster.plugins.module_utils.core.module import (
    failure,
    fail_json_on_error,
)
from ansible_collections.gpufleet.cluster.plugins.module_utils.spec import SpecError, parse_data


class FakeModule:
    """Records fail_json's arguments and ends the module as AnsibleModule does."""

    def __init__(self):
        self.failed = None

    def fail_json(self, **result):
        self.failed = result
        raise SystemExit(1)

    def exit_json(self, **result):
        raise SystemExit(0)


def fail_with(exc, **options):
    module = FakeModule()
    with pytest.raises(SystemExit):
        with fail_json_on_error(module, **options):
            raise exc
    return module.failed


def test_a_gpufleet_error_fails_with_its_message():
    assert fail_with(GpufleetError("fleet demo: no such file")) == {
        "msg": "fleet demo: no such file"}


def test_the_prefix_and_extras_go_with_a_gpufleet_error():
    fleets = []
    module = FakeModule()
    with pytest.raises(SystemExit):
        with fail_json_on_error(module, prefix="nvidia verify: ", extras={"fleets": fleets}):
            fleets.append({"name": "demo"})
            raise GpufleetError("nvidia-smi failed")
    assert module.failed == {"msg": "nvidia verify: nvidia-smi failed",
                             "fleets": [{"name": "demo"}]}


def spec_error():
    with pytest.raises(SpecError) as info:
        parse_data({"type": "task", "commands": ["true"], "nodes": -1}, "inline config")
    return info.value


def test_problems_are_added_only_when_asked():
    exc = spec_error()
    assert fail_with(exc, problems=True) == {"msg": str(exc), "problems": exc.as_dicts()}
    assert fail_with(exc) == {"msg": str(exc)}
    assert "problems" not in failure(GpufleetError("no problems"), problems=True)


def test_anything_else_is_an_internal_error_with_its_traceback():
    failed = fail_with(KeyError("instances"), what="gpufleet preflight")
    assert failed["msg"] == "internal error in gpufleet preflight (please report it): 'instances'"
    assert "KeyError: 'instances'" in failed["exception"]
    assert sorted(failed) == ["exception", "msg"]
    assert fail_with(ValueError("x"))["msg"] == "internal error in gpufleet (please report it): x"


def test_an_error_outside_the_root_is_internal_even_with_extras():
    failed = fail_with(RuntimeError("boom"), extras={"fleets": []})
    assert "fleets" not in failed


def test_exit_and_fail_inside_the_block_end_the_module_untouched():
    module = FakeModule()
    with pytest.raises(SystemExit) as info:
        with fail_json_on_error(module):
            module.exit_json(changed=False)
    assert info.value.code == 0 and module.failed is None


def test_a_block_without_error_runs_through():
    module = FakeModule()
    with fail_json_on_error(module):
        value = 42
    assert value == 42 and module.failed is None


def test_an_atomic_write_leaves_nothing_behind_when_it_fails(tmp_path, monkeypatch):
    from ansible_collections.gpufleet.cluster.plugins.module_utils.core import files

    target = tmp_path / "facts.json"
    target.write_text("old")
    files.write_atomically(str(target), "new", 0o640)
    assert target.read_text() == "new"
    assert target.stat().st_mode & 0o777 == 0o640

    def refuse(_src, _dst):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(files.os, "replace", refuse)
    with pytest.raises(OSError):
        files.write_atomically(str(target), "newer", 0o640)
    assert target.read_text() == "new"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["facts.json"]
