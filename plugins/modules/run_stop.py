#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: run_stop
short_description: Stop a task run on every node
version_added: 0.1.0
description:
  - Stops every job of the run's latest submission that is still going, as C(dstack stop)
    does. The reason (C(terminated_by_user)) is written to each job's state folder first, so
    the run ends V(terminated) and is never retried.
  - Each container gets SIGTERM, then SIGKILL after the task's C(stop_duration) (or at once
    with O(abort)).
  - Then the run's SSH aliases, key and forwarded ports on this controller (what
    M(gpufleet.cluster.run_attach) made) are removed. The C(gpufleet stop) command runs the
    same steps, through the same function of the collection.
  - Another user's run is stopped only with O(force), or by an admin of its fleet.
author:
  - gpufleet maintainers (@gpufleet)
options:
  name:
    description: The run.
    type: str
    required: true
  abort:
    description: Kill at once instead of a graceful stop.
    type: bool
    default: false
  user:
    description:
      - Who asks for the stop, the caller that O(force) is about.
      - Defaults to C(GPUFLEET_USER), else the login name. C(playbooks/stop.yml) passes
        C(gpufleet_user), else in AWX the user who launched the job (C(awx_user_name)).
    type: str
  delete:
    description:
      - After the stop, remove the run from its hosts (its containers, their folders and, for
        a task with C(schedule), the schedule) and its entries from the queue, so that
        M(gpufleet.cluster.run_info) no longer lists it; what C(gpufleet delete -f) of a run's
        file does. Not for a job array's name.
      - When one of the run's hosts does not answer, nothing is stopped or removed and the
        module fails naming it.
    type: bool
    default: false
  force:
    description:
      - Stop the run even when another user submitted it.
      - Without it, stopping another user's run (its C(user), see
        M(gpufleet.cluster.run_info)) is refused, naming its owner, unless the caller (its
        C(GPUFLEET_USER), else login name) is an admin of the run's fleet, as the members
        document on the fleet's hosts says. For a job array, each of its live runs is checked.
      - This is a courtesy check made by the caller's controller, not access control; the
        hosts enforce only who may log in with SSH.
    type: bool
    default: false
extends_documentation_fragment:
  - gpufleet.cluster.attributes
  - gpufleet.cluster.attributes.action_group
  - gpufleet.cluster.run_fleets
  - gpufleet.cluster.state
attributes:
  check_mode:
    support: full
    details:
      - In check mode nothing is stopped and no SSH alias is removed; C(changed) says whether
        a job is still going, a schedule is kept, or (with O(delete)) there is a run to remove.
  diff_mode:
    support: none
  idempotent:
    support: full
    details:
      - Stopping a run that has ended changes nothing; with O(delete), a run that is gone
        already changes nothing either.
seealso:
  - module: gpufleet.cluster.task
  - module: gpufleet.cluster.run_info
  - module: gpufleet.cluster.run_attach
"""

EXAMPLES = r"""
- name: Stop a run
  gpufleet.cluster.run_stop:
    name: train
  delegate_to: localhost

- name: Stop a run and remove it from its hosts (a scheduled task's schedule with it)
  gpufleet.cluster.run_stop:
    name: nightly-eval
    delete: true
  delegate_to: localhost

- name: Stop a run another user submitted
  gpufleet.cluster.run_stop:
    name: bobs-run
    force: true
  delegate_to: localhost
"""

RETURN = r"""
run:
  description: The run's record after the stop (see M(gpufleet.cluster.run_info)), with
    C(stopped), the containers stopped (not in check mode, where it is the record as it is),
    and with O(delete) C(deleted), the hosts it was removed from.
  returned: success
  type: dict
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.gpufleet.cluster.plugins.module_utils.attach import stop
from ansible_collections.gpufleet.cluster.plugins.module_utils.core.module import (
    fail_json_on_error,
)
from ansible_collections.gpufleet.cluster.plugins.module_utils.tasks import actions


def main():
    module = AnsibleModule(argument_spec=actions.RUN_STOP_ARGS, supports_check_mode=True)
    with fail_json_on_error(module):
        module.exit_json(**stop.stop_run(module.params, check_mode=module.check_mode))


if __name__ == "__main__":
    main()
