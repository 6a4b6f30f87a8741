#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: gateway_info
short_description: List the gateways (dstack's type gateway), as dstack gateway list
version_added: 0.1.0
description:
  - A gateway is a one-node fleet whose record says so (see C(playbooks/gateway.yml)). Finds
    every gateway this controller knows, as fleets are found (the files it applied, the local
    engine's nodes, the cloud backends the settings configure), and asks each one's host what
    it serves (the record the role gpufleet.cluster.gateway keeps there).
  - Returns one record per gateway and dstack's C(dstack gateway list) table. C(default) says
    which gateway a service without C(gateway) gets now.
author:
  - gpufleet maintainers (@gpufleet)
options:
  verbose:
    description: RV(table) with dstack's ERROR column (C(dstack gateway list -v)).
    type: bool
    default: false
extends_documentation_fragment:
  - gpufleet.cluster.state
  - gpufleet.cluster.attributes
  - gpufleet.cluster.attributes.info_module
  - gpufleet.cluster.attributes.action_group
seealso:
  - module: gpufleet.cluster.fleet_info
"""

EXAMPLES = r"""
- name: List the gateways
  gpufleet.cluster.gateway_info:
  register: found

- name: Print them as dstack does
  ansible.builtin.debug:
    msg: "{{ found.table }}"
"""

RETURN = r"""
gateways:
  description:
    - One record per gateway, the default first. C(status) is C(running) when its host
      answered, else C(unreachable) with C(error). C(ca_file) is the CA certificate that
      C(playbooks/gateway.yml) copied to the state dir for a gateway with a certificate.
  returned: success
  type: list
  elements: dict
  sample:
    - name: gw
      backend: local
      region: local
      hostname: 172.18.0.5
      instance: gw-0
      status: running
      error: null
      domain: example.com
      default: true
      certificate: self-signed
      https_port: 443
      ca_file: /home/alice/.gpufleet/gateways/gw-ca.crt
table:
  description: The gateways as the lines of dstack's C(dstack gateway list) table.
  returned: success
  type: list
  elements: str
  sample:
    - "NAME  BACKEND  HOSTNAME    DOMAIN         DEFAULT  STATUS"
    - "gw    local    172.18.0.5  *.example.com  ✓        running"
"""

import os

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.gpufleet.cluster.plugins.module_utils.backends.docker_cli import Docker
from ansible_collections.gpufleet.cluster.plugins.module_utils.core.module import (
    fail_json_on_error,
    state_options,
)
from ansible_collections.gpufleet.cluster.plugins.module_utils.fleets import state
from ansible_collections.gpufleet.cluster.plugins.module_utils.render.gateway_table import (
    gateway_table,
)
from ansible_collections.gpufleet.cluster.plugins.module_utils.services import gateways
from ansible_collections.gpufleet.cluster.plugins.module_utils.tasks import surveys


def main():
    module = AnsibleModule(
        argument_spec=dict(verbose=dict(type="bool", default=False), **state_options()),
        supports_check_mode=True,
    )
    root = state.state_dir(module.params["state_dir"])
    with fail_json_on_error(module):
        fleets = gateways.gateway_fleets(surveys.collect_fleets((), Docker(), root))
        found = gateways.records(fleets, surveys.nodes_of(fleets, root),
                                 os.path.join(root, "gateways"))
        table = gateway_table(found, verbose=module.params["verbose"])
    module.exit_json(changed=False, gateways=found, table=table)


if __name__ == "__main__":
    main()
