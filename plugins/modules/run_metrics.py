#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: run_metrics
short_description: CPU, memory and GPU use of every job of a task run, over the last hour
version_added: 0.1.0
description:
  - Returns what C(dstack metrics) shows. Per job, the CPU use, the memory working set and, per
    GPU, utilisation and memory, each a series over the last hour before the newest sample.
  - Each job's container samples them itself every 10 seconds, as dstack's runner does, from
    its cgroup (v2 or v1), C(nvidia-smi) or C(amd-smi), into the job's state folder on its
    host. One request per host reads them, every host at once. Nothing else keeps them.
author:
  - gpufleet maintainers (@gpufleet)
options:
  name:
    description: The run.
    type: str
    required: true
  job:
    description: Only this job number (C(dstack metrics --job)).
    type: int
extends_documentation_fragment:
  - gpufleet.cluster.attributes
  - gpufleet.cluster.attributes.info_module
  - gpufleet.cluster.attributes.action_group
  - gpufleet.cluster.run_fleets
  - gpufleet.cluster.state
seealso:
  - module: gpufleet.cluster.run_info
  - module: gpufleet.cluster.run_logs
"""

EXAMPLES = r"""
- name: Read a run's metrics
  gpufleet.cluster.run_metrics:
    name: train
  register: train_metrics

- name: Show each job's latest CPU use
  ansible.builtin.debug:
    msg: "job {{ item.job_num }}: {{ (item.cpu_percent | last | default([none, none]))[1] }}%"
  loop: "{{ train_metrics.metrics.jobs }}"
"""

RETURN = r"""
metrics:
  description: The run's metrics.
  returned: success
  type: dict
  contains:
    run:
      description: The run's name.
      type: str
      returned: success
    status:
      description: The run's status (see M(gpufleet.cluster.run_info)).
      type: str
      returned: success
    newest:
      description: When the newest sample was taken (epoch seconds); null before any.
      type: int
      returned: success
    unreachable_hosts:
      description: Hosts that did not answer, with the error.
      type: dict
      returned: success
    jobs:
      description: One entry per job. Every series is a list of C([epoch, value]), oldest
        first.
      type: list
      elements: dict
      returned: success
      contains:
        job_num:
          description: The job's number.
          type: int
        host:
          description: The instance the job runs on.
          type: str
        status:
          description: The job's status.
          type: str
        cpus:
          description: The CPUs the container sees.
          type: int
        cpu_percent:
          description: CPU use in percent of those CPUs, between consecutive samples.
          type: list
          elements: list
        memory_bytes:
          description: The memory working set (usage less inactive file pages), in bytes.
          type: list
          elements: list
        memory_total_bytes:
          description: The container's memory limit, else the host's memory.
          type: int
        gpus:
          description: Per GPU the job has (C(index) as the container numbers them), its
            C(util_percent) and C(memory_bytes) series and C(memory_total_bytes).
          type: list
          elements: dict
  sample:
    run: train
    status: running
    newest: 1780000000
    unreachable_hosts: {}
    jobs:
      - job_num: 0
        host: gpus-0
        status: running
        cpus: 16
        cpu_percent: [[1779999990, 31.5], [1780000000, 33.0]]
        memory_bytes: [[1779999990, 621000000000], [1780000000, 621700000000]]
        memory_total_bytes: 1030792151040
        gpus:
          - index: 0
            util_percent: [[1779999990, 92], [1780000000, 93]]
            memory_bytes: [[1779999990, 76235669504], [1780000000, 76235669504]]
            memory_total_bytes: 85520809984
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.gpufleet.cluster.plugins.module_utils.core.module import (
    fail_json_on_error,
)
from ansible_collections.gpufleet.cluster.plugins.module_utils.tasks import actions


def main():
    module = AnsibleModule(argument_spec=actions.RUN_METRICS_ARGS, supports_check_mode=True)
    with fail_json_on_error(module):
        module.exit_json(**actions.run_metrics(module.params))


if __name__ == "__main__":
    main()
