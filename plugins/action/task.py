# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Action plugin for gpufleet.cluster.task: the run is driven from the controller, so each
node's status change (and with ``logs``, each log line) is shown as it happens."""

from __future__ import annotations

from ansible.plugins.action import ActionBase

from ansible_collections.gpufleet.cluster.plugins.module_utils.tasks import entry
from ansible_collections.gpufleet.cluster.plugins.plugin_utils.run_output import printer


class ActionModule(ActionBase):
    TRANSFERS_FILES = False
    _requires_connection = False

    def run(self, tmp=None, task_vars=None):
        result = super(ActionModule, self).run(tmp, task_vars)
        _validation, params = self.validate_argument_spec(
            argument_spec=entry.TASK_SPEC,
            mutually_exclusive=entry.TASK_MUTUALLY_EXCLUSIVE,
            required_one_of=entry.TASK_REQUIRED_ONE_OF,
        )
        params = entry.expand_paths(params)
        try:
            answer, failed = entry.submit(params, emit=printer(),
                                          check_mode=bool(self._task.check_mode))
        except entry.EntryError as exc:
            result.update(failed=True, msg=str(exc))
            return result
        result.update(answer)
        if failed:
            result.update(failed=True, msg=entry.failure_summary(answer))
        return result
