#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: usage_info
short_description: GPU-hours and cost per run and per user, from the records the hosts keep
version_added: 0.1.0
description:
  - Returns what C(gpufleet usage) shows, in the spirit of Slurm's C(sacct). Per run, the
    user who submitted it, its fleet, nodes, GPUs, start, end, wall time, GPU-hours and cost
    (the share's price per hour times the time); per user, the runs, GPU-hours and cost.
  - Every host keeps one usage record per job and submission under C(/var/lib/gpufleet/usage),
    written when the job's container starts and completed from the container's own finish
    time. The records outlive the containers and the controller, and are kept 400 days. One
    request per host reads them, every host at once; nothing is kept on the controller.
  - The records of one run on several hosts add up into one line. A run that overlaps the
    window counts whole; one still running counts until now.
  - Fleets this controller has no access to are not asked.
author:
  - gpufleet maintainers (@gpufleet)
options:
  since:
    description:
      - The start of the window, as a duration back from now (C(30m), C(24h), C(7d), C(2w)),
        a date (C(2026-11-01), midnight UTC) or an RFC 3339 time with its offset.
    type: str
    default: 7d
  user:
    description: Only the runs of this user (the submitter's name, C(GPUFLEET_USER)).
    type: str
  fleet:
    description: Only the hosts of this fleet.
    type: str
extends_documentation_fragment:
  - gpufleet.cluster.attributes
  - gpufleet.cluster.attributes.info_module
  - gpufleet.cluster.attributes.action_group
  - gpufleet.cluster.run_fleets
  - gpufleet.cluster.state
seealso:
  - module: gpufleet.cluster.run_info
"""

EXAMPLES = r"""
- name: Read the last week's usage
  gpufleet.cluster.usage_info:
  register: week

- name: Show the tables
  ansible.builtin.debug:
    msg: "{{ week.lines }}"

- name: One user's GPU-hours over the last day
  gpufleet.cluster.usage_info:
    since: 24h
    user: ann
  register: ann_day

- name: Say them
  ansible.builtin.debug:
    msg: "ann used {{ ann_day.usage.users | map(attribute='gpu_hours') | sum }} GPU-hours"
"""

RETURN = r"""
usage:
  description: The usage over the window.
  returned: success
  type: dict
  contains:
    since:
      description: The window's start (epoch seconds).
      type: float
      returned: success
    now:
      description: When the report was made (epoch seconds); running runs count until then.
      type: float
      returned: success
    unreachable:
      description: Hosts that did not answer, with the error; their records are missing.
      type: dict
      returned: success
    runs:
      description: One entry per run, newest first.
      type: list
      elements: dict
      returned: success
      contains:
        run:
          description: The run's name.
          type: str
        run_id:
          description: The run's id.
          type: str
        user:
          description: Who submitted it; null for a run made before users were recorded.
          type: str
        fleet:
          description: The fleet it ran on.
          type: str
        nodes:
          description: The hosts of its last submission.
          type: int
        gpus:
          description: The GPUs of its last submission, over all its jobs.
          type: int
        submissions:
          description: How many submissions (retries count) the window holds.
          type: int
        start:
          description: When its first container started (epoch seconds).
          type: float
        end:
          description: When its last container ended (epoch seconds); null while it runs.
          type: float
        status:
          description: C(running), C(done) (every job of the last submission exited 0) or
            C(failed).
          type: str
        wall_seconds:
          description: From start to end (to now while it runs).
          type: float
        gpu_hours:
          description: The sum over its jobs of GPUs times hours.
          type: float
        cost:
          description: The sum over its jobs of the share's price per hour times hours, in
            dollars; hosts without a price (SSH fleets, the local backend) count 0.
          type: float
    users:
      description: One entry per user (C(user), C(runs), C(gpu_hours), C(cost)), the most
        GPU-hours first.
      type: list
      elements: dict
      returned: success
  sample:
    since: 1780000000.0
    now: 1780604800.0
    unreachable: {}
    runs:
      - run: train
        run_id: 3f1c6a52-0d8e-4a57-9d3b-6f0f6c4d2b11
        user: ann
        fleet: gpus
        nodes: 2
        gpus: 16
        submissions: 1
        start: 1780500000.0
        end: 1780507200.0
        status: done
        wall_seconds: 7200.0
        gpu_hours: 32.0
        cost: 98.4
    users:
      - user: ann
        runs: 1
        gpu_hours: 32.0
        cost: 98.4
lines:
  description: The tables C(gpufleet usage) prints, a line each.
  returned: success
  type: list
  elements: str
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.gpufleet.cluster.plugins.module_utils.core.module import (
    fail_json_on_error,
)
from ansible_collections.gpufleet.cluster.plugins.module_utils.render.usage_table import (
    usage_lines,
)
from ansible_collections.gpufleet.cluster.plugins.module_utils.tasks import actions


def main():
    module = AnsibleModule(argument_spec=actions.USAGE_INFO_ARGS, supports_check_mode=True)
    with fail_json_on_error(module):
        result = actions.usage_info(module.params)
        module.exit_json(lines=usage_lines(result["usage"]), **result)


if __name__ == "__main__":
    main()
