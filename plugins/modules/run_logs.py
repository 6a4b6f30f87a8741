#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: run_logs
short_description: The logs of every job of a task run, prefixed with the run and rank
version_added: 0.1.0
description:
  - Returns the output of each job's container of the run's latest submission, in rank order,
    each line prefixed C([<run>-<rank>]).
  - With O(follow), through the action plugin, lines are shown as they come from every node
    until the run ends.
author:
  - gpufleet maintainers (@gpufleet)
options:
  name:
    description: The run.
    type: str
    required: true
  follow:
    description: Show new lines as they come until the run ends (action plugin only).
    type: bool
    default: false
  tail:
    description: Only the last lines of each job.
    type: int
extends_documentation_fragment:
  - gpufleet.cluster.attributes
  - gpufleet.cluster.attributes.info_module
  - gpufleet.cluster.attributes.action_group
  - gpufleet.cluster.run_fleets
  - gpufleet.cluster.state
seealso:
  - module: gpufleet.cluster.task
  - module: gpufleet.cluster.run_info
"""

EXAMPLES = r"""
- name: Fetch a run's logs
  gpufleet.cluster.run_logs:
    name: train
    tail: 100
  register: logs
"""

RETURN = r"""
lines:
  description: The log lines of every job, rank by rank (empty with O(follow)).
  returned: success
  type: list
  elements: str
  sample: ["[train-0] epoch 1", "[train-1] epoch 1"]
ranks:
  description: The same lines by rank, without the prefix (empty with O(follow)); ranks that
    printed nothing are left out.
  returned: success
  type: list
  elements: dict
  sample: [{rank: 0, lines: ["epoch 1"]}, {rank: 1, lines: ["epoch 1"]}]
run:
  description: The run's record (see M(gpufleet.cluster.run_info)).
  returned: success
  type: dict
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.gpufleet.cluster.plugins.module_utils.core.module import (
    fail_json_on_error,
)
from ansible_collections.gpufleet.cluster.plugins.module_utils.tasks import entry


def main():
    module = AnsibleModule(argument_spec=entry.RUN_LOGS_SPEC, supports_check_mode=True)
    with fail_json_on_error(module):
        module.exit_json(**entry.run_logs(module.params))


if __name__ == "__main__":
    main()
