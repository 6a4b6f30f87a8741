# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Action plugin for gpufleet.cluster.fleet: where the module would run on the controller
anyway (playbooks/fleet.yml's first play: a local connection, no become, the controller's
Python), its work (fleets.converge) is done in this process, without a module payload, which
cost most of a no-change apply's second. Anywhere else the module runs as usual."""

from __future__ import annotations

import json

from ansible.plugins.action import ActionBase

from ansible_collections.gpufleet.cluster.plugins.module_utils.fleets import converge
from ansible_collections.gpufleet.cluster.plugins.module_utils.tasks import listing
from ansible_collections.gpufleet.cluster.plugins.plugin_utils.in_controller import (
    answer,
    why_not,
)

MODULE = "gpufleet.cluster.fleet"


class ActionModule(ActionBase):
    TRANSFERS_FILES = False
    _supports_check_mode = True
    _supports_async = True   # sent as a module (in_controller.why_not), as any module is

    def run(self, tmp=None, task_vars=None):
        result = super(ActionModule, self).run(tmp, task_vars)
        if why_not(self, task_vars) is not None:
            wrap_async = self._task.async_val and not self._connection.has_native_async
            result.update(self._execute_module(module_name=MODULE, module_args=self._task.args,
                                               task_vars=task_vars, wrap_async=wrap_async))
            return result
        _validation, params = self.validate_argument_spec(
            argument_spec=converge.FLEET_ARGS,
            mutually_exclusive=converge.MUTUALLY_EXCLUSIVE,
            required_one_of=converge.REQUIRED_ONE_OF,
            required_if=converge.REQUIRED_IF,
        )
        # What the module would have been given: JSON types only (ansible-core 2.19 hands an
        # action plugin its own tagged str and dict types, which PyYAML cannot write).
        params = json.loads(json.dumps(params))
        warnings = []
        answer(result, lambda: converge.converge(params, listing.runs_alive,
                                                 bool(self._task.check_mode),
                                                 warn=warnings.append))
        if warnings:
            result["warnings"] = warnings
        return result
