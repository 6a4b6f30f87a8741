#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: volume_info
short_description: List the dstack network volumes the backends hold, as dstack volume list
version_added: 0.1.0
description:
  - Finds every network volume gpufleet made or registered, from the mark on the volume
    itself (the tag C(gpufleet:volume) on an EBS volume, the label C(gpufleet-volume) on a
    persistent disk), in the cloud backends that O(backend_settings) configures and in the
    regions a fleet of that backend may use.
  - Returns the volume records M(gpufleet.cluster.volume) returns, newest first, and dstack's
    C(dstack volume list) table.
  - The C(local) backend's volumes (in the Docker volume C(gpufleet-volumes)) are listed when
    this machine's Docker engine answers; without it, and with no cloud backend configured, the
    list is empty.
author:
  - gpufleet maintainers (@gpufleet)
options:
  verbose:
    description:
      - RV(table) as C(dstack volume list -v) prints it (REGION, ATTACHED and ERROR columns).
    type: bool
    default: false
extends_documentation_fragment:
  - gpufleet.cluster.state
  - gpufleet.cluster.state.backend_settings
  - gpufleet.cluster.attributes
  - gpufleet.cluster.attributes.info_module
  - gpufleet.cluster.attributes.action_group
seealso:
  - module: gpufleet.cluster.volume
"""

EXAMPLES = r"""
- name: List the volumes in us-east-1
  gpufleet.cluster.volume_info:
    backend_settings:
      aws:
        regions: [us-east-1]
  register: found

- name: Print them as dstack does
  ansible.builtin.debug:
    msg: "{{ found.table }}"
"""

RETURN = r"""
volumes:
  description:
    - One volume record per volume (see M(gpufleet.cluster.volume)), newest first, with
      C(attached_fleets), the fleets whose instances it is attached to.
  returned: success
  type: list
  elements: dict
  sample:
    - name: datasets
      backend: aws
      region: us-east-1
      availability_zone: us-east-1a
      size: 100
      volume_id: vol-0123456789abcdef0
      status: active
      external: false
      attached_to: [i-0123456789abcdef0]
      attached_fleets: [train]
      created: "2026-11-22T10:00:00Z"
table:
  description: The volumes as the lines of dstack's C(dstack volume list) table.
  returned: success
  type: list
  elements: str
  sample:
    - "NAME      BACKEND          STATUS  CREATED"
    - "datasets  aws (us-east-1)  active  3 days ago"
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.gpufleet.cluster.plugins.module_utils.core.module import (
    fail_json_on_error,
    state_options,
)
from ansible_collections.gpufleet.cluster.plugins.module_utils.fleets import state
from ansible_collections.gpufleet.cluster.plugins.module_utils.offers import catalog
from ansible_collections.gpufleet.cluster.plugins.module_utils.render.volume_table import (
    volume_table,
)
from ansible_collections.gpufleet.cluster.plugins.module_utils.volumes import listing


def main():
    module = AnsibleModule(
        argument_spec=dict(
            verbose=dict(type="bool", default=False),
            **state_options(backend_settings=True),
        ),
        supports_check_mode=True,
    )
    root = state.state_dir(module.params["state_dir"])
    with fail_json_on_error(module):
        settings = state.backend_settings(root, module.params["backend_settings"])
        volumes = listing.list_volumes(settings, catalog.directory(root))
        table = volume_table(volumes, verbose=module.params["verbose"])
    module.exit_json(changed=False, volumes=volumes, table=table)


if __name__ == "__main__":
    main()
