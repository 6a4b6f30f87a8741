#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: fleet_info
short_description: List fleets and their instances, from fleet files or from the backends' labels
version_added: 0.1.0
description:
  - "With O(paths), describes the fleets those dstack fleet files define, as they are now:
    backend fleet instances from the backend's live state, SSH fleet instances from the file."
  - Without O(paths), finds every fleet the backends hold from their labels alone (for the
    C(local) backend, the labels of the node containers on this machine's Docker engine). SSH
    fleets live only in their files and are listed only through O(paths). Gateways' hosts
    (one-node fleets made for gateway files) are left out, M(gpufleet.cluster.gateway_info)
    lists them.
  - Nothing is changed and, without O(health_max_age), no host is contacted; instance status
    is what the backend says.
  - "With O(health_max_age), each instance carries C(health): its GPU health as the host's
    cached facts keep it (C(status) C(healthy), C(warning) or C(failure), C(message),
    C(source), C(incidents), C(checked_at), C(error)); hosts whose health is older than that
    many seconds are asked again over SSH first (DCGM, else nvidia-smi's error counters and the
    kernel log's XID lines) and the cache keeps what they say (C(docs/fleets.md#gpu-health))."
  - "With O(health_max_age), every host that can be asked is, in one request (which also reads
    its health when that is due): an instance that runs jobs has the status C(busy) instead of
    C(idle), and C(busy_blocks) (the blocks its jobs take), as C(dstack fleet) shows them."
author:
  - gpufleet maintainers (@gpufleet)
options:
  paths:
    description:
      - dstack fleet files on the controller. When empty, fleets are found through the
        backends.
    type: list
    elements: path
    default: []
  health_max_age:
    description:
      - Read the GPU health of hosts whose cached health is older than this many seconds
        (0 reads every host) and add C(health) to each instance; ask every host what runs on
        it (C(busy), C(busy_blocks)).
      - When unset, no host is contacted and instances carry no C(health).
    type: int
extends_documentation_fragment:
  - gpufleet.cluster.state
  - gpufleet.cluster.state.backend_settings
  - gpufleet.cluster.attributes
  - gpufleet.cluster.attributes.info_module
  - gpufleet.cluster.attributes.action_group
seealso:
  - module: gpufleet.cluster.fleet
"""

EXAMPLES = r"""
- name: List every local fleet
  gpufleet.cluster.fleet_info:
  register: found

- name: Print them as dstack does
  ansible.builtin.debug:
    msg: "{{ found.fleets | gpufleet.cluster.fleet_table }}"

- name: Describe two fleets from their files
  gpufleet.cluster.fleet_info:
    paths:
      - "{{ playbook_dir }}/cluster.dstack.yml"
      - "{{ playbook_dir }}/onprem.dstack.yml"
"""

RETURN = r"""
fleets:
  description: One fleet record per fleet (see C(docs/fleets.md)), in name order without O(paths).
  returned: success
  type: list
  elements: dict
hosts:
  description:
    - One entry per instance with an address, for M(ansible.builtin.add_host), with the same
      groups and variables the C(gpufleet.cluster.fleet) inventory plugin gives.
  returned: success
  type: list
  elements: dict
"""

import functools

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.gpufleet.cluster.plugins.module_utils.core.module import (
    fail_json_on_error,
    state_options,
)
from ansible_collections.gpufleet.cluster.plugins.module_utils.backends.docker_cli import Docker
from ansible_collections.gpufleet.cluster.plugins.module_utils.fleets import (
    access,
    apply,
    records,
    state,
)
from ansible_collections.gpufleet.cluster.plugins.module_utils.spec import parse_hosts_file
from ansible_collections.gpufleet.cluster.plugins.module_utils.tasks import health


def main():
    module = AnsibleModule(
        argument_spec=dict(
            paths=dict(type="list", elements="path", default=[]),
            health_max_age=dict(type="int"),
            **state_options(backend_settings=True),
        ),
        supports_check_mode=True,
    )
    root = state.state_dir(module.params["state_dir"])
    docker = Docker()
    fleets = []
    with fail_json_on_error(module):
        if module.params["paths"]:
            for path in module.params["paths"]:
                config, _warnings = parse_hosts_file(path)
                fleets.append(apply.describe(
                    config, path, docker, root,
                    settings=state.backend_settings(root, module.params["backend_settings"])))
        else:   # gateways' hosts are listed as gateways (gateway_info), as dstack does
            fleets = [fleet for fleet in apply.discover(
                docker, root,
                settings=state.backend_settings(root, module.params["backend_settings"]))
                if not fleet.get("gateway")]
        access.annotate(fleets, root, docker)
        refresh = None
        if module.params["health_max_age"] is not None:
            refresh = functools.partial(
                health.refresh, root=root, max_age=module.params["health_max_age"],
                check_mode=module.check_mode, occupancy=True)
        fleets = access.listed(fleets, refresh)
    hosts = [entry for fleet in fleets if access.reachable(fleet)
             for entry in records.host_entries(fleet, root)]
    module.exit_json(changed=False, fleets=fleets, hosts=hosts)


if __name__ == "__main__":
    main()
