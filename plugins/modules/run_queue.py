#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: run_queue
short_description: Act on the queue of runs waiting for capacity or for a retry
version_added: 0.1.0
description:
  - Does once, with no server, what dstack's server does for runs in the background. It reads
    every host of the fleets, then
  - settles each detached run whose C(retry) may submit it again (stops jobs the run could not
    stop by itself, resubmits it after an V(error) within the retry duration, forgets it once it
    ended);
  - lets pending runs whose retry duration for V(no-capacity) ran out fail with
    V(failed_to_start_due_to_no_capacity);
  - starts pending runs that fit now, higher C(priority) first and first submitted first
    within a priority; a run that does not fit does not hold back lower ones.
  - takes each running service with C(scaling) to the replica count its request rate asks
    for (dstack's target tracking, within its C(replicas) range, after its delays), unless
    O(autoscale=false).
  - The queue's entries live on the fleets' hosts (C(/var/lib/gpufleet/book/queue)); hosts and
    entries are taken under each host's lock, so passes from several controllers at once never
    start a run twice or give a host twice. Run it from a schedule (C(playbooks/reconcile.yml)
    does) so that runs start when capacity frees up while nobody is at the controller.
options:
  autoscale:
    description:
      - Whether the pass also scales running services with C(scaling) (it asks each one's
        proxy host for its request count). A scale-up waits until the new replicas pass
        their checks, so a pass that must stay short (C(playbooks/ps.yml)) sets V(false).
      - Check mode does not ask the proxies, so C(due) leaves autoscaling out.
    type: bool
    default: true
author:
  - gpufleet maintainers (@gpufleet)
extends_documentation_fragment:
  - gpufleet.cluster.attributes
  - gpufleet.cluster.attributes.action_group
  - gpufleet.cluster.run_fleets
  - gpufleet.cluster.state
attributes:
  check_mode:
    support: full
    details:
      - In check mode nothing is started or stopped; C(changed) and C(due) say whether a pass
        has something to do.
  diff_mode:
    support: none
  idempotent:
    support: partial
    details:
      - A pass with nothing due changes nothing; one that starts runs does, once.
seealso:
  - module: gpufleet.cluster.task
  - module: gpufleet.cluster.run_info
  - module: gpufleet.cluster.fleet_reconcile
"""

EXAMPLES = r"""
- name: Start what waits for capacity, resubmit what retry allows
  gpufleet.cluster.run_queue:
  delegate_to: localhost
  register: queue

- name: Say what it started
  ansible.builtin.debug:
    msg: "started {{ queue.report.started | join(', ') }}"
  when: queue.report.started | default([]) | length > 0
"""

RETURN = r"""
report:
  description: What the pass did, run names in each list (empty in check mode).
  returned: always
  type: dict
  contains:
    started:
      description: Pending runs started (detached; they supervise themselves).
      type: list
      elements: str
      returned: success
    resubmitted:
      description: Runs whose failed submission was removed for a new one under C(retry).
      type: list
      elements: str
      returned: success
    expired:
      description: Pending runs that failed because their retry duration ran out.
      type: list
      elements: str
      returned: success
    stopped:
      description: Containers the pass stopped (jobs of runs that had ended).
      type: list
      elements: str
      returned: success
    forgotten:
      description: Runs whose entry went because they ended or were removed.
      type: list
      elements: str
      returned: success
    failed:
      description: Pending runs whose submission failed (the entry says why).
      type: list
      elements: str
      returned: success
    published:
      description:
        - Services the pass started (queued, or resubmitted under C(retry)) or whose failed
          replicas it made again, published on their fleet's proxy host with their new
          replicas.
      type: list
      elements: str
      returned: success
    unpublished:
      description:
        - Services that ended by themselves whose route the pass took off their proxy host
          (once; a later pass finds nothing to take off).
      type: list
      elements: str
      returned: success
    respawned:
      description:
        - Containers of services' replicas that failed (their C(retry) covering it) and that
          the pass made again on their hosts, while the other replicas kept serving; the
          route was published again with their new ports.
      type: list
      elements: str
      returned: success
    scaled:
      description:
        - Services with C(scaling) whose replica count the pass changed to follow the
          request rate their proxy measured (more replicas added beside the others, or the
          last ones drained and taken away); the pass's events say from what to what and why.
      type: list
      elements: str
      returned: success
    rearmed:
      description:
        - Scheduled tasks (C(schedule)) that the pass armed again on other hosts from their
          queue entry, because the backend said one of their hosts is gone or stopped.
      type: list
      elements: str
      returned: success
due:
  description: Whether a pass had something to do (check mode).
  returned: check mode
  type: bool
runs:
  description: The run records after the pass (see M(gpufleet.cluster.run_info)).
  returned: success, not in check mode
  type: list
  elements: dict
unreachable_hosts:
  description: Hosts that did not answer, with the error.
  returned: success, not in check mode
  type: dict
unread_fleets:
  description:
    - The fleets some of whose hosts could not be read, each with those hosts and why (the
      host does not answer, or its key is missing from the state dir). Their runs may be
      running though they are not listed; C(gpufleet ps) exits 1 when there is any.
  returned: success, not in check mode
  type: dict
  sample: {"gpus": {"gpus-0": "cannot be checked: its SSH key ... is missing"}}
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.gpufleet.cluster.plugins.module_utils.automation import dependencies
from ansible_collections.gpufleet.cluster.plugins.module_utils.core.module import (
    fail_json_on_error,
)
from ansible_collections.gpufleet.cluster.plugins.module_utils.services import submit
from ansible_collections.gpufleet.cluster.plugins.module_utils.tasks import actions


def main():
    module = AnsibleModule(argument_spec=actions.RUN_QUEUE_ARGS, supports_check_mode=True)
    with fail_json_on_error(module):
        module.exit_json(**actions.run_queue(module.params, check_mode=module.check_mode,
                                             services=submit.queue_hook,
                                             gate=dependencies.gate))


if __name__ == "__main__":
    main()
