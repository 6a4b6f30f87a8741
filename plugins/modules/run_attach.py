#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: run_attach
short_description: SSH aliases and forwarded ports for a task run, as dstack attach makes them
version_added: 0.2.0
description:
  - With O(state=present), writes SSH config entries for the run on the controller, so that
    C(ssh RUN) lands in the attached job's container (O(job), job 0 by default) and
    C(ssh RUN-N) in job N's, as the task's user, through the fleet's host (and its
    C(proxy_jump)), with the run's own key. The entries live in a file in the state dir,
    included from the user's SSH config (O(ssh_config)) by one C(Include) line put first;
    nothing else of that file changes.
  - The key is the one the run's nodes log in to each other with, read from the job's folder on
    its host and kept 0600 on the controller; the fleet's key is never copied.
  - With O(forward), the run's C(ports) are forwarded from localhost by an OpenSSH process in
    the background, until O(forward=false) or O(state=absent) closes it.
  - The entries, the key and the forwards of runs that have ended are removed by each call,
    and those of the run itself by O(state=absent).
author:
  - gpufleet maintainers (@gpufleet)
options:
  name:
    description: The run.
    type: str
    required: true
  job:
    description: The job C(ssh RUN) and the forwards go to.
    type: int
    default: 0
  state:
    description:
      - V(present) writes the run's entries; V(absent) removes them, the run's key and its
        forwards.
    type: str
    choices: [present, absent]
    default: present
  forward:
    description:
      - Forward the run's C(ports) from localhost (a port the file names must be free; an
        unnamed one, C(*:8000), takes the next free port at or above the container's).
      - V(false) closes forwards an earlier call opened.
    type: bool
    default: false
  ports:
    description: Local ports to use instead of those the file names, by container port.
    type: dict
  ssh_config:
    description: The user's SSH config the C(Include) line goes into.
    type: path
    default: ~/.ssh/config
  include:
    description: Whether to put the C(Include) line into O(ssh_config).
    type: bool
    default: true
extends_documentation_fragment:
  - gpufleet.cluster.attributes
  - gpufleet.cluster.attributes.action_group
  - gpufleet.cluster.run_fleets
  - gpufleet.cluster.state
attributes:
  check_mode:
    support: none
  diff_mode:
    support: none
  idempotent:
    support: partial
    details:
      - The entries are written only when they differ; forwards are opened again on each call
        with O(forward).
notes:
  - The run's containers must run sshd for C(ssh RUN) (a multi-node run always does; a
    single-node one when its image has sshd). Forwards need only the host's sshd, which must
    allow TCP forwarding (preflight checks it).
seealso:
  - module: gpufleet.cluster.task
  - module: gpufleet.cluster.run_info
"""

EXAMPLES = r"""
- name: Reach a run over SSH and forward its ports
  gpufleet.cluster.run_attach:
    name: train
    forward: true
  register: attached

- name: Remove the run's SSH aliases
  gpufleet.cluster.run_attach:
    name: train
    state: absent
"""

RETURN = r"""
alias:
  description: The alias of the attached job, C(ssh ALIAS).
  returned: with O(state=present)
  type: str
  sample: train
aliases:
  description: Every alias written, the attached job's first, then C(RUN-N) for each job.
  returned: success
  type: list
  elements: str
  sample: [train, train-0, train-1]
forwards:
  description: The forwarded ports, each with C(local_port), C(container_port) and C(url).
  returned: success
  type: list
  elements: dict
  sample: [{local_port: 18080, container_port: 8000, url: "http://localhost:18080"}]
config_file:
  description: The SSH config file of gpufleet that holds the entries.
  returned: success
  type: str
key_file:
  description: Where the run's key is kept on the controller (never its content).
  returned: with O(state=present)
  type: str
status:
  description: The run's status.
  returned: with O(state=present)
  type: str
pruned:
  description: Runs that had ended whose entries this call removed.
  returned: with O(state=present)
  type: list
  elements: str
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.gpufleet.cluster.plugins.module_utils.attach import session
from ansible_collections.gpufleet.cluster.plugins.module_utils.core.module import (
    fail_json_on_error,
)


def main():
    module = AnsibleModule(argument_spec=session.ATTACH_ARGS, supports_check_mode=False)
    params = dict(module.params)
    if params["ports"]:
        try:
            params["ports"] = dict((int(k), int(v)) for k, v in params["ports"].items())
        except (TypeError, ValueError):
            module.fail_json(msg="ports: give local ports by container port, e.g. "
                                 "{8000: 18080}; got %s" % params["ports"])
    with fail_json_on_error(module):
        result = session.attach_entry(params)
    for warning in result.pop("warnings", []):
        module.warn(warning)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
