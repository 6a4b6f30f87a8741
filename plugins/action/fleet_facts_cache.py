# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Action plugin for gpufleet.cluster.fleet_facts_cache: the cache is the controller's, so it is
written in the controller's own process, without a module payload (which cost more than the
write itself at the end of every apply)."""

from __future__ import annotations

from ansible.plugins.action import ActionBase

from ansible_collections.gpufleet.cluster.plugins.module_utils.fleets import state
from ansible_collections.gpufleet.cluster.plugins.module_utils.fleets.facts_cache import (
    FACTS_CACHE_ARGS,
    cache_facts,
)
from ansible_collections.gpufleet.cluster.plugins.plugin_utils.in_controller import answer


class ActionModule(ActionBase):
    TRANSFERS_FILES = False
    _requires_connection = False

    def run(self, tmp=None, task_vars=None):
        result = super(ActionModule, self).run(tmp, task_vars)
        _validation, params = self.validate_argument_spec(argument_spec=FACTS_CACHE_ARGS)

        def write():
            changed, path, facts = cache_facts(params["fleet"], state.state_dir(
                params["state_dir"]), bool(self._task.check_mode))
            return dict(changed=changed, path=path, facts=facts)

        return answer(result, write)
