#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: volume
short_description: Create, register or delete a dstack network volume (EBS, persistent disk, local)
version_added: 0.1.0
description:
  - "Reads a dstack volume configuration (C(type: volume)) with gpufleet's configuration model
    and makes it real: an EBS gp3 volume for C(backend: aws), a balanced persistent disk for
    C(backend: gcp), in C(availability_zone) or the region's first zone, of C(size); for
    C(backend: local), a folder in the Docker volume C(gpufleet-volumes) of this machine's
    engine, attached to one local node at a time (see C(docs/volumes.md))."
  - With C(volume_id), an existing volume is registered instead; deleting a registered volume
    only takes gpufleet's tag or label off it, the data stays.
  - The volume's name is a tag (C(gpufleet:volume)) or label (C(gpufleet-volume)) on the volume,
    the only record, so any controller with the credentials finds it; a local volume's record
    is a file in C(gpufleet-volumes).
  - Tasks bind network volumes from C(/mnt/disks/dstack-volumes/<name>) on the host that runs
    them (see C(docs/tasks.md)).
author:
  - gpufleet maintainers (@gpufleet)
options:
  path:
    description:
      - Path to the volume's dstack configuration file on the controller.
      - A volume without C(name) is named after the file.
      - Exactly one of O(path) and O(config) must be given.
    type: path
  config:
    description:
      - The volume configuration itself, as the mapping a dstack file holds (with a C(name)).
      - Exactly one of O(path) and O(config) must be given.
    type: dict
  state:
    description:
      - V(present) creates or registers the volume; V(absent) deletes or releases it.
    type: str
    choices: [present, absent]
    default: present
extends_documentation_fragment:
  - gpufleet.cluster.state
  - gpufleet.cluster.state.backend_settings
  - gpufleet.cluster.attributes
  - gpufleet.cluster.attributes.action_group
attributes:
  check_mode:
    support: full
    details:
      - In check mode nothing is created or deleted; RV(volume) is what would be.
  diff_mode:
    support: none
  idempotent:
    support: full
notes:
  - A volume attached to an instance is not deleted; stop the runs that use it first.
seealso:
  - module: gpufleet.cluster.fleet
"""

EXAMPLES = r"""
- name: Create a 100 GB volume in us-east-1
  gpufleet.cluster.volume:
    config:
      type: volume
      name: datasets
      backend: aws
      region: us-east-1
      size: 100GB

- name: Use an existing persistent disk as a volume
  gpufleet.cluster.volume:
    config:
      type: volume
      name: checkpoints
      backend: gcp
      region: us-central1
      volume_id: my-disk

- name: Delete the volume of a file
  gpufleet.cluster.volume:
    path: "{{ playbook_dir }}/datasets.dstack.yml"
    state: absent
"""

RETURN = r"""
volume:
  description: The volume record after the change (in check mode, as it would be).
  returned: success
  type: dict
  sample:
    name: datasets
    backend: aws
    region: us-east-1
    availability_zone: us-east-1a
    size: 100
    volume_id: vol-0123456789abcdef0
    status: active
    external: false
    attached_to: []
    created: "2026-11-22T10:00:00Z"
"""

import os

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.gpufleet.cluster.plugins.module_utils.core.module import (
    fail_json_on_error,
    state_options,
)
from ansible_collections.gpufleet.cluster.plugins.module_utils.volumes import provision as volumes
from ansible_collections.gpufleet.cluster.plugins.module_utils.fleets import state
from ansible_collections.gpufleet.cluster.plugins.module_utils.spec.naming import fleet_name
from ansible_collections.gpufleet.cluster.plugins.module_utils.spec import (
    parse_data,
    parse_file,
)


def main():
    module = AnsibleModule(
        argument_spec=dict(
            path=dict(type="path"),
            config=dict(type="dict"),
            state=dict(type="str", choices=["present", "absent"], default="present"),
            **state_options(backend_settings=True),
        ),
        mutually_exclusive=[("path", "config")],
        required_one_of=[("path", "config")],
        supports_check_mode=True,
    )
    params = module.params
    with fail_json_on_error(module):
        if params["path"]:
            config, warnings = parse_file(params["path"], "volume")
        else:
            config, warnings = parse_data(params["config"], "inline config", "volume")
        for warning in warnings:
            module.warn("%s: %s" % (params["path"] or "inline config", warning))
        # Volumes are named as fleets are: from the file when the config has no name.
        name = fleet_name(config, params["path"])
        root = state.state_dir(params["state_dir"])
        settings = state.backend_settings(root, params["backend_settings"])
        action = volumes.apply if params["state"] == "present" else volumes.delete
        record, changed = action(config, name, settings, check_mode=module.check_mode)
    if params["path"]:
        record["file"] = os.path.abspath(params["path"])
    module.exit_json(changed=changed, volume=record)


if __name__ == "__main__":
    main()
