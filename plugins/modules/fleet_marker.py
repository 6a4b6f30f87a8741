#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: fleet_marker
short_description: Claim a host for an SSH fleet, or release it, with a marker file on the host
version_added: 0.1.0
description:
  - A host belongs to one fleet at a time; dstack refuses to add a host another fleet has
    (C(Instances [...] are already assigned to a fleet.)). gpufleet keeps that ownership on the
    host itself, in a JSON marker file (O(path)) that names the fleet, the host's instance number
    and the fleet's hosts.
  - With O(state=present) the host is claimed for O(fleet). A host without a marker, or with a
    marker of the same fleet, is claimed; the marker is rewritten only when O(instance),
    O(hosts) or O(controller) differ from it. A host with another fleet's marker makes the task
    fail, saying which fleet has it and how to free it, unless O(force) is set.
  - With O(state=absent) the host is released from O(fleet) by removing its marker. A marker of
    another fleet is never removed; the task then succeeds without a change and says so in
    C(msg).
  - A marker that is not a JSON object with a fleet name makes the task fail, asking to remove
    the damaged file.
  - The file is written atomically (a temporary file in the same directory, then a rename),
    with mode C(0644); a missing directory is created with mode C(0755).
  - The marker's fields and its life cycle are described in C(docs/preflight.md) in the
    collection.
author:
  - gpufleet maintainers (@gpufleet)
options:
  state:
    description:
      - V(present) claims the host for O(fleet), V(absent) releases it.
    type: str
    choices: [present, absent]
    default: present
  fleet:
    description: The name of the fleet claiming or releasing the host.
    type: str
    required: true
  instance:
    description:
      - The host's instance number in the fleet (the instance is named C(<fleet>-<instance>)).
      - Required when O(state=present).
    type: int
  hosts:
    description:
      - The host names of all hosts of the fleet as now applied (the fleet's
        C(ssh_config.hosts)). A later apply compares them with the fleet file to find the hosts
        that were removed from it, and releases those.
      - When not given, a marker of the same fleet keeps the hosts it lists (none for a new
        marker).
    type: list
    elements: str
  controller:
    description:
      - The host name of the machine applying the fleet, recorded so that a conflict message can
        say where the claim came from.
      - When not given, a marker of the same fleet keeps the controller it names (null for a new
        marker).
    type: str
  force:
    description:
      - Take the host over when another fleet's marker is on it. That fleet is not told; remove
        the host from its configuration too.
    type: bool
    default: false
  path:
    description: Where the marker file is on the host.
    type: path
    default: /etc/gpufleet/fleet.json
extends_documentation_fragment:
  - gpufleet.cluster.attributes
  - gpufleet.cluster.attributes.action_group
attributes:
  check_mode:
    support: full
    details: In check mode nothing is written or removed; the task reports the change it would make.
  diff_mode:
    support: full
    details: The marker file's JSON text before and after.
  idempotent:
    support: full
  platform:
    description: The target systems the module runs on.
    support: full
    platforms: posix
notes:
  - Run it with C(become) when O(path) is in a directory only root may write, as the default is.
seealso:
  - module: gpufleet.cluster.preflight
"""

EXAMPLES = r"""
- name: Claim every host of the fleet (the fleet's hosts, in order, are in fleet_hosts)
  gpufleet.cluster.fleet_marker:
    fleet: my-fleet
    instance: "{{ fleet_hosts.index(inventory_hostname) }}"
    hosts: "{{ fleet_hosts }}"
    controller: "{{ lookup('ansible.builtin.pipe', 'hostname') }}"
  become: true

- name: Release the hosts when the fleet is deleted
  gpufleet.cluster.fleet_marker:
    fleet: my-fleet
    state: absent
  become: true

- name: Take over a host that a fleet deleted elsewhere still claims
  gpufleet.cluster.fleet_marker:
    fleet: my-fleet
    instance: 2
    force: true
  become: true
"""

RETURN = r"""
marker:
  description:
    - The marker after the task (what it would be, in check mode); null when there is none.
    - "Fields: C(format) (V(1)), C(fleet), C(instance), C(hosts), C(controller) (or null),
      C(created) (when the fleet claimed the host, kept on later writes) and C(updated) (when
      the claim last changed), both ISO 8601 UTC times."
  returned: success
  type: dict
  sample:
    format: 1
    fleet: my-fleet
    instance: 0
    hosts: [10.0.0.5, 10.0.0.6]
    controller: laptop
    created: "2025-06-01T09:30:00Z"
    updated: "2025-06-01T09:30:00Z"
previous:
  description: The marker before the task, null when there was none.
  returned: success
  type: dict
  sample:
    format: 1
    fleet: other-fleet
    instance: 3
    hosts: [10.0.0.5]
    controller: ci-runner
    created: "2025-05-20T14:02:11Z"
    updated: "2025-05-20T14:02:11Z"
msg:
  description: What the task did or found, for example that another fleet's marker was left.
  returned: always
  type: str
  sample: fleet my-fleet claimed this host as instance 0
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.gpufleet.cluster.plugins.module_utils.core.module import (
    fail_json_on_error,
)
from ansible_collections.gpufleet.cluster.plugins.module_utils.fleets.marker import (
    DEFAULT_PATH,
    ensure,
    marker_text,
)


def main():
    module = AnsibleModule(
        argument_spec=dict(
            state=dict(type="str", choices=["present", "absent"], default="present"),
            fleet=dict(type="str", required=True),
            instance=dict(type="int"),
            hosts=dict(type="list", elements="str"),
            controller=dict(type="str"),
            force=dict(type="bool", default=False),
            path=dict(type="path", default=DEFAULT_PATH),
        ),
        required_if=[("state", "present", ["instance"])],
        supports_check_mode=True,
    )
    path = module.params["path"]
    with fail_json_on_error(module):
        result = ensure(
            path,
            module.params["state"],
            module.params["fleet"],
            instance=module.params["instance"],
            hosts=module.params["hosts"],
            controller=module.params["controller"],
            force=module.params["force"],
            check_mode=module.check_mode,
        )

    if result["took_over"]:
        module.warn(
            "this host was in fleet %s and now belongs to fleet %s (force: true): remove it from "
            "fleet %s's ssh_config.hosts too"
            % (result["took_over"], module.params["fleet"], result["took_over"])
        )
    output = dict(
        changed=result["changed"],
        marker=result["marker"],
        previous=result["previous"],
        msg=result["msg"],
    )
    if module._diff:  # pylint: disable=protected-access
        output["diff"] = dict(
            before=marker_text(result["previous"]),
            after=marker_text(result["marker"]),
            before_header=path,
            after_header=path,
        )
    module.exit_json(**output)


if __name__ == "__main__":
    main()
