#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: run_info
short_description: List task runs and their jobs, from the labels of their containers
version_added: 0.1.0
description:
  - Asks every host of the fleets for the task containers it holds and returns one record per
    run (its latest submission), as C(dstack ps) shows them.
  - The status of a run is decided from its jobs by the same rules the runner uses while the
    run goes on (C(stop_criteria), failures, C(max_duration), stops).
  - Runs waiting in the queue (see M(gpufleet.cluster.run_queue)) are listed as V(pending)
    with their place in it, and runs whose wait ended before they ran as V(failed) or
    V(terminated).
  - A job whose host does not answer is judged from its backend's record and from how long
    the host has been silent, as an attached run judges it. Each host gets 15 seconds to
    answer. The looks that heard nothing from a host are kept in the controller's facts cache
    for its fleet (C(silent_since), C(silent_seen)) and cleared when it answers; that cache is
    all this module writes.
author:
  - gpufleet maintainers (@gpufleet)
options:
  name:
    description: Only this run.
    type: str
  user:
    description:
      - Only the runs this user submitted (C(gpufleet ps --user)). Without it, every user's
        runs are listed, as C(squeue) does.
    type: str
extends_documentation_fragment:
  - gpufleet.cluster.attributes
  - gpufleet.cluster.attributes.info_module
  - gpufleet.cluster.attributes.action_group
  - gpufleet.cluster.run_fleets
  - gpufleet.cluster.state
seealso:
  - module: gpufleet.cluster.task
  - module: gpufleet.cluster.run_stop
"""

EXAMPLES = r"""
- name: List runs
  gpufleet.cluster.run_info:
  delegate_to: localhost
  register: runs

- name: List the runs ann submitted
  gpufleet.cluster.run_info:
    user: ann
  delegate_to: localhost
  register: ann_runs

- name: Show the table
  ansible.builtin.debug:
    msg: "{{ runs.runs | gpufleet.cluster.run_table }}"
"""

RETURN = r"""
runs:
  description: One record per run, newest first.
  returned: always
  type: list
  elements: dict
  contains:
    name:
      description: The run's name.
      type: str
      returned: always
    status:
      description: The run's status (V(pending), V(submitted), V(provisioning), V(running),
        V(terminating), V(done), V(failed), V(terminated)).
      type: str
      returned: always
    reason:
      description: Why an ended run ended.
      type: str
      returned: always
    run_id:
      description: The run's id (C(DSTACK_RUN_ID)).
      type: str
      returned: always
    fleet:
      description: The fleet the run was placed on.
      type: str
      returned: always
    backend:
      description: The backend of the fleet's hosts (V(ssh), V(local), ...).
      type: str
      returned: always
    region:
      description: The region of the fleet's hosts, when the backend has one.
      type: str
      returned: always
    price:
      description: The price per hour of the run's hosts, when known.
      type: float
      returned: always
    spot:
      description: Whether the run's hosts are spot instances, when known.
      type: bool
      returned: always
    gpu:
      description:
        - The GPU requirement of the task's C(resources), as data (the normalized form of
          C(docs/config-json.md)); null without GPUs. The P(gpufleet.cluster.run_table#filter)
          filter shows it as C(dstack ps) does (for example C(H100:80GB:8)).
        - Runs started by an earlier version of the collection hold that text here instead.
      type: raw
      returned: always
    nodes:
      description: How many jobs (nodes) the run has.
      type: int
      returned: always
    submitted:
      description: When the run was submitted (UTC, ISO 8601).
      type: str
      returned: always
    submission:
      description:
        - The number of its latest submission (0 unless retried).
        - A task with C(schedule), the minute since the epoch of the time its latest start was
          for (each start is a submission of its own).
      type: int
      returned: always
    schedule:
      description:
        - A task with C(schedule), as its hosts keep it; null for other runs.
        - C(cron) its times, C(next) its next start (seconds since the epoch, UTC; null once
          stopped), C(firings) how many starts there were, C(last) when the last one was,
          C(stopped) whether a user stopped it, C(waiting) why a start that is due waits (its
          host is busy), C(error) why the last start could not be made, C(hosts) the hosts
          that keep it.
      type: dict
      returned: for runs on hosts (a run that only waits in the queue has none)
    user:
      description:
        - Who submitted the run (the submitter's C(GPUFLEET_USER), else login name), as its
          containers' C(gpufleet.user) label or its queue entry say.
        - Null for a run made before runs named their submitter.
      type: str
      returned: always
      sample: ann
    jobs:
      description:
        - One entry per job with its host, container, status, reason, exit code and GPUs.
        - A job whose host did not answer has C(unreachable) V(true) while it waits for its
          verdict (it shows as V(running)); once its host is gone, or has been silent for two
          minutes, it is V(failed) with the reason.
      type: list
      elements: dict
      returned: always
    queue_position:
      description: A pending run's place in the queue (1 is tried first).
      type: int
      returned: when the run waits in the queue
    queued_on:
      description: The host that keeps the run's queue entry.
      type: str
      returned: when the run has a queue entry
    priority:
      description: The run's C(priority).
      type: int
      returned: when the run has a queue entry
    message:
      description: Why a queued run waits, or why its wait ended; for a run whose job's host
        does not answer, which host and for how long, or the verdict on it.
      type: str
      returned: when the run has a queue entry, or a job whose host does not answer
unreachable_hosts:
  description: Hosts that did not answer, with the error.
  returned: always
  type: dict
unread_fleets:
  description:
    - The fleets some of whose hosts could not be read, each with those hosts and why (the
      host does not answer, or its key is missing from the state dir). Their runs may be
      running though they are not listed; C(gpufleet ps) exits 1 when there is any.
  returned: always
  type: dict
  sample: {"gpus": {"gpus-0": "cannot be checked: its SSH key ... is missing"}}
queue_due:
  description: Whether the queue has something to do (M(gpufleet.cluster.run_queue)).
  returned: always
  type: bool
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.gpufleet.cluster.plugins.module_utils.core.module import (
    fail_json_on_error,
)
from ansible_collections.gpufleet.cluster.plugins.module_utils.tasks import actions


def main():
    module = AnsibleModule(argument_spec=actions.RUN_INFO_ARGS, supports_check_mode=True)
    with fail_json_on_error(module):
        module.exit_json(**actions.run_info(module.params))


if __name__ == "__main__":
    main()
