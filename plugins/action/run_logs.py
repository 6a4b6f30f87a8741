# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Action plugin for gpufleet.cluster.run_logs: with ``follow``, log lines are shown as they
come, prefixed with the run and rank, until the run ends."""

from __future__ import annotations

from ansible.plugins.action import ActionBase

from ansible_collections.gpufleet.cluster.plugins.module_utils.tasks import actions
from ansible_collections.gpufleet.cluster.plugins.plugin_utils.run_output import printer


class ActionModule(ActionBase):
    TRANSFERS_FILES = False
    _requires_connection = False

    def run(self, tmp=None, task_vars=None):
        result = super(ActionModule, self).run(tmp, task_vars)
        _validation, params = self.validate_argument_spec(argument_spec=actions.RUN_LOGS_ARGS)
        params = actions.expand_paths(params)
        try:
            result.update(actions.run_logs(params, emit=printer(params.get("output_path"))))
        except actions.ActionError as exc:
            result.update(failed=True, msg=str(exc))
        return result
