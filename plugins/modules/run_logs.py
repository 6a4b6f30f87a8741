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
  - Returns the output of each job of the run's latest submission, in rank order, each line
    prefixed C([<run>-<rank>]), as the job's host keeps it beside the job's state (the last
    100 MB by default, E(GPUFLEET_LOGS_MAX_MB) in the task's C(env)). It is there after the
    container is gone, for a job whose container could not be made (its error), and for any
    controller with the fleet.
  - With O(stream), through the action plugin, the lines are shown as they are read, a page at
    a time, and not returned, so a run that printed gigabytes costs no memory.
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
  job:
    description:
      - Only this job's output (its job number, as C(dstack logs --job)), without the
        C([<run>-<rank>]) prefix.
    type: int
  since:
    description:
      - Only output printed since then, as C(dstack logs --since) takes it - a duration back
        from now (C(10s), C(5m), C(1d)) or an RFC 3339 time with its offset
        (C(2026-09-24T15:30:00Z)).
      - A host notes once a second how much a job has printed, so a line printed up to a
        second earlier may come too.
    type: str
  stream:
    description:
      - Show the lines as they are read instead of returning them (action plugin only).
    type: bool
    default: false
  output_path:
    description:
      - A file or FIFO the lines the action plugin would show (log lines and the jobs' changes) are appended to
        instead. C(gpufleet.runner.run_playbook(output=...)) passes a FIFO here, so that
        ansible-runner, which holds all that a playbook prints until it ends, never holds a
        run's logs.
    type: path
extends_documentation_fragment:
  - gpufleet.cluster.attributes
  - gpufleet.cluster.attributes.info_module
  - gpufleet.cluster.attributes.action_group
  - gpufleet.cluster.attributes.action_plugin
  - gpufleet.cluster.run_fleets
  - gpufleet.cluster.state
attributes:
  action:
    support: full
    details:
      - The logs are read from the controller by the action plugin, in its own process; the
        module is never sent.
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

- name: Job 1's output of the last ten minutes, unprefixed
  gpufleet.cluster.run_logs:
    name: train
    job: 1
    since: 10m
  register: job1
"""

RETURN = r"""
lines:
  description: The log lines of every job, rank by rank (empty with O(follow) or O(stream);
    unprefixed with O(job)).
  returned: success
  type: list
  elements: str
  sample: ["[train-0] epoch 1", "[train-1] epoch 1"]
ranks:
  description: The same lines by rank, without the prefix (empty with O(follow) or
    O(stream)); ranks that printed nothing are left out.
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
from ansible_collections.gpufleet.cluster.plugins.module_utils.tasks import actions


def main():
    module = AnsibleModule(argument_spec=actions.RUN_LOGS_ARGS, supports_check_mode=True)
    with fail_json_on_error(module):
        module.exit_json(**actions.run_logs(module.params))


if __name__ == "__main__":
    main()
