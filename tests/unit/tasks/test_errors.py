# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The task runner's errors derive from the root error and keep the error they came from."""

from __future__ import annotations

import pytest
from ansible_collections.gpufleet.cluster.plugins.module_utils.backends import errors as backend_errors
from ansible_collections.gpufleet.cluster.plugins.module_utils.core.errors import GpufleetError
from ansible_collections.gpufleet.cluster.plugins.module_utils.spec import SpecError
from ansible_collections.gpufleet.cluster.plugins.module_utils.tasks import (
    actions,
    errors,
    placement,
    rankplan,
    runs,
    ssh,
)


@pytest.mark.parametrize("cls", [errors.PlanError, errors.RunError, actions.ActionError,
                                 ssh.NodeError, placement.NoHostFits])
def test_every_error_of_the_runner_is_a_gpufleet_error(cls):
    assert issubclass(cls, GpufleetError)


def test_the_modules_raise_the_shared_error_classes():
    assert rankplan.PlanError is errors.PlanError
    assert runs.RunError is errors.RunError


def test_no_host_fits_is_not_a_cloud_without_capacity():
    assert placement.NoHostFits is not backend_errors.NoCapacity
    assert not issubclass(placement.NoHostFits, backend_errors.NoCapacity)
    assert issubclass(placement.NoHostFits, placement.PlacementError)
    exc = placement.NoHostFits("no fleet has a free host", ["fleet gpus: busy"])
    assert str(exc) == "no fleet has a free host" and exc.reasons == ["fleet gpus: busy"]


def test_an_error_made_from_another_keeps_it_as_its_cause(tmp_path):
    path = tmp_path / "task.dstack.yml"
    path.write_text("type: task\ncommands: [echo]\nnodes: many\n")
    with pytest.raises(actions.ActionError) as info:
        actions.load_task({"path": str(path)})
    assert isinstance(info.value.__cause__, SpecError)
    assert str(info.value) == str(info.value.__cause__)
