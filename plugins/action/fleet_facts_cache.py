# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Action plugin for gpufleet.cluster.fleet_facts_cache: the cache is the controller's, so it is
written in the controller's own process, without a module payload (which cost more than the
write itself at the end of every apply)."""

from __future__ import annotations

from ansible.plugins.action import ActionBase

from ansible_collections.gpufleet.cluster.plugins.module_utils.core.errors import GpufleetError
from ansible_collections.gpufleet.cluster.plugins.module_utils.fleets import state
from ansible_collections.gpufleet.cluster.plugins.module_utils.fleets.facts_cache import (
    SPEC,
    cache_facts,
)


class ActionModule(ActionBase):
    TRANSFERS_FILES = False
    _requires_connection = False

    def run(self, tmp=None, task_vars=None):
        result = super(ActionModule, self).run(tmp, task_vars)
        _validation, params = self.validate_argument_spec(argument_spec=SPEC)
        try:
            root = state.state_dir(params["state_dir"])
            changed, path, facts = cache_facts(params["fleet"], root,
                                               bool(self._task.check_mode))
        except GpufleetError as exc:
            result.update(failed=True, msg=str(exc))
            return result
        result.update(changed=changed, path=path, facts=facts)
        return result
