#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: event_info
short_description: What happened to runs, jobs, fleets, instances and members, as the hosts recorded it
version_added: 0.1.0
description:
  - Returns what C(gpufleet event) shows, as C(dstack event) does. One event per change, oldest
    first, with when it happened, who acted (when a user did), what it is about (its targets)
    and a message in dstack's words.
  - Every host keeps an append-only event record under C(/var/lib/gpufleet/events). A job's
    changes (made, started, asked to stop, ended with its exit code) are recorded from the
    facts its folder keeps, with the moment each happened, also while no controller looks. A
    queue entry's changes (pending with a reason, submitted, ended), member grants and revokes,
    and the instances a fleet apply created or removed are recorded too.
  - A run's own events (submitted, resubmitted on retry, each change of its status) are
    derived from its jobs' events by the rules C(gpufleet ps) uses.
  - One request per host reads the records, every host at once; nothing is kept on the
    controller. Fleets this controller has no access to are not asked.
author:
  - gpufleet maintainers (@gpufleet)
options:
  since:
    description:
      - Only the events since this moment, as a duration back from now (C(10m), C(24h),
        C(7d)), a date (C(2026-11-01), midnight UTC) or an RFC 3339 time with its offset.
      - Without it, the last O(limit) events.
    type: str
  limit:
    description:
      - How many of the latest events to return; by default 100 without O(since), all with
        it.
    type: int
  fleet:
    description: Ask only the hosts of this fleet.
    type: str
  target_fleets:
    description:
      - Only the events about these fleets themselves (C(--target-fleet)). Not with
        O(target_runs).
    type: list
    elements: str
    default: []
  target_runs:
    description:
      - Only the events about these runs themselves (C(--target-run)). Not with
        O(target_fleets).
    type: list
    elements: str
    default: []
  within_fleets:
    description:
      - Only the events about these fleets and their instances (C(--within-fleet)). Not with
        O(within_runs).
    type: list
    elements: str
    default: []
  within_runs:
    description:
      - Only the events about these runs and their jobs (C(--within-run)). Not with
        O(within_fleets).
    type: list
    elements: str
    default: []
  include_target_types:
    description:
      - Only the events about one of these types (C(--include-target-type)).
    type: list
    elements: str
    choices: [fleet, instance, run, job, user]
    default: []
extends_documentation_fragment:
  - gpufleet.cluster.attributes
  - gpufleet.cluster.attributes.info_module
  - gpufleet.cluster.attributes.action_group
  - gpufleet.cluster.run_fleets
  - gpufleet.cluster.state
seealso:
  - module: gpufleet.cluster.run_info
  - module: gpufleet.cluster.usage_info
"""

EXAMPLES = r"""
- name: Read every change of one run and its jobs
  gpufleet.cluster.event_info:
    within_runs: [train]
  register: train_events

- name: Show them as dstack event prints them
  ansible.builtin.debug:
    msg: "{{ train_events.lines }}"

- name: The last day's events about the fleet and its instances
  gpufleet.cluster.event_info:
    since: 24h
    within_fleets: [gpus]
  register: fleet_day
"""

RETURN = r"""
events:
  description: The events read.
  returned: success
  type: dict
  contains:
    since:
      description: The start of the window (epoch seconds); null without O(since).
      type: float
      returned: success
    now:
      description: When the events were read (epoch seconds).
      type: float
      returned: success
    unreachable:
      description: Hosts that did not answer, with the error; their events are missing.
      type: dict
      returned: success
    events:
      description: The events, oldest first.
      type: list
      elements: dict
      returned: success
      contains:
        id:
          description: The event's id; the same event read from several hosts is one.
          type: str
        kind:
          description: What happened, such as C(job.ended), C(run.status), C(run.queued),
            C(instance.created), C(member.granted).
          type: str
        at:
          description: When it happened (epoch seconds).
          type: float
        recorded_at:
          description: The same moment as RFC 3339 text (UTC).
          type: str
        message:
          description: What happened, in the words of dstack's events.
          type: str
        actor:
          description: The user who acted; null when the system did.
          type: str
        targets:
          description: What the event is about (C(type) and C(name) each), as dstack lists
            them.
          type: list
          elements: dict
        host:
          description: The host the event was read from.
          type: str
        run:
          description: The run it is about, when it is about a run or a job.
          type: str
        status:
          description: The new status of a job (C(job.ended)) or run (C(run.status)).
          type: str
        reason:
          description: Why a job or run ended, or why a queued run waits.
          type: str
        exit_code:
          description: A job's exit code (C(job.ended)), when known.
          type: int
  sample:
    since: null
    now: 1780604800.0
    unreachable: {}
    events:
      - id: train/0/0/job.ended
        kind: job.ended
        at: 1780600000.0
        recorded_at: "2026-06-04T19:06:40.000000Z"
        message: "Job status changed RUNNING -> DONE. Exit code: 0"
        actor: null
        targets: [{type: job, name: train-0-0}]
        host: gpus-0
        run: train
        status: done
        reason: null
        exit_code: 0
lines:
  description: The lines C(gpufleet event) prints, one per event.
  returned: success
  type: list
  elements: str
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.gpufleet.cluster.plugins.module_utils.core.module import (
    fail_json_on_error,
)
from ansible_collections.gpufleet.cluster.plugins.module_utils.render.event_table import (
    event_lines,
)
from ansible_collections.gpufleet.cluster.plugins.module_utils.tasks import notices


def main():
    module = AnsibleModule(argument_spec=notices.EVENT_INFO_ARGS, supports_check_mode=True)
    with fail_json_on_error(module):
        result = notices.event_info(module.params)
        module.exit_json(lines=event_lines(result["events"]), **result)


if __name__ == "__main__":
    main()
