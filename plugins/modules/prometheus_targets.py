#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: prometheus_targets
short_description: Write Prometheus file_sd target files for the exporters of fleets' hosts
version_added: 0.1.0
description:
  - Writes one Prometheus C(file_sd) target file per fleet, C(gpufleet-<fleet>.json), into
    O(path), for the exporters the C(gpufleet.cluster.monitoring) role runs on the hosts.
  - Each file is a list of target groups, one per host and exporter (the node exporter, and the
    DCGM exporter on NVIDIA hosts), labelled C(fleet), C(instance), C(backend), C(gpu) and
    C(exporter).
  - A file is rewritten only when its content changes, and then atomically (a reader sees the
    old file or the new one). With O(prune), the file of a fleet none of O(hosts) belongs to is
    emptied (an empty list), so Prometheus drops its targets; other files are never touched.
author:
  - gpufleet maintainers (@gpufleet)
options:
  path:
    description:
      - The directory the target files go into, the one a C(file_sd_configs) entry of
        Prometheus reads; made (mode C(0755)) when missing.
    type: path
    required: true
  hosts:
    description:
      - The hosts to scrape, one entry each.
    type: list
    elements: dict
    required: true
    suboptions:
      name:
        description: The host's inventory name, for messages.
        type: str
        required: true
      fleet:
        description: The fleet the host belongs to (C(gpufleet_fleet)); it names the file.
        type: str
        required: true
      instance:
        description: The C(instance) label (C(gpufleet_instance)); the name when not given.
        type: str
      backend:
        description: The C(backend) label (C(gpufleet_backend)).
        type: str
      address:
        description: The address the exporters listen on, which Prometheus scrapes.
        type: str
        required: true
      gpu:
        description:
          - The host facts' C(gpu) (C(gpufleet_host.gpu)), whose short C(name) becomes the
            C(gpu) label when the host has GPUs.
        type: dict
      gpu_vendor:
        description:
          - The GPU vendor known without host facts (detection, the fleet's resources); the
            C(gpu) label when O(hosts[].gpu) names no GPU, V(none) when neither does.
        type: str
      exporters:
        description:
          - The port of each exporter the host runs, C(node) and C(dcgm), null for one it does
            not run, as the monitoring role records them in C(monitoring_check.exporters).
          - When not given, the node exporter on port 9100 and, on an NVIDIA host, the DCGM
            exporter on port 9400.
        type: dict
  prune:
    description:
      - Empty the target files in O(path) of fleets none of O(hosts) belongs to.
      - Give each inventory its own directory, or set V(false), when several inventories write
        into the same one.
    type: bool
    default: true
  mode:
    description: The mode of the files written.
    type: raw
    default: "0644"
extends_documentation_fragment:
  - gpufleet.cluster.attributes
  - gpufleet.cluster.attributes.action_group
attributes:
  check_mode:
    support: full
  diff_mode:
    support: full
  idempotent:
    support: full
notes:
  - Runs on the controller, or wherever Prometheus reads its target files.
  - The C(gpufleet.cluster.monitoring) role runs the exporters and records their ports in
    C(monitoring_check.exporters); C(playbooks/monitoring.yml) passes them here.
"""

EXAMPLES = r"""
- name: Write the fleets' Prometheus targets
  gpufleet.cluster.prometheus_targets:
    path: /etc/prometheus/gpufleet
    hosts:
      - name: gpus-0
        fleet: gpus
        instance: gpus-0
        backend: ssh
        address: 10.0.0.11
        gpu: {vendor: nvidia, count: 8, name: H100}
        exporters: {node: 9100, dcgm: 9400}
      - name: gpus-1
        fleet: gpus
        backend: ssh
        address: 10.0.0.12
        gpu_vendor: nvidia
"""

RETURN = r"""
files:
  description: Each target file written or kept, by path.
  returned: success
  type: dict
  contains:
    fleet:
      description: The fleet the file is for.
      type: str
    groups:
      description: How many target groups it holds (0 for an emptied file).
      type: int
    changed:
      description: Whether it was (or, in check mode, would be) written.
      type: bool
  sample:
    /etc/prometheus/gpufleet/gpufleet-gpus.json: {"fleet": "gpus", "groups": 3, "changed": true}
    /etc/prometheus/gpufleet/gpufleet-old.json: {"fleet": "old", "groups": 0, "changed": false}
"""

import json
import os

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.common.text.converters import to_native

from ansible_collections.gpufleet.cluster.plugins.module_utils.core.files import (
    write_atomically,
)
from ansible_collections.gpufleet.cluster.plugins.module_utils.core.module import (
    fail_json_on_error,
)
from ansible_collections.gpufleet.cluster.plugins.module_utils.monitoring.targets import (
    changes,
    fleet_of,
    wanted_files,
)

HOST_OPTIONS = dict(
    name=dict(type="str", required=True),
    fleet=dict(type="str", required=True),
    instance=dict(type="str"),
    backend=dict(type="str"),
    address=dict(type="str", required=True),
    gpu=dict(type="dict"),
    gpu_vendor=dict(type="str"),
    exporters=dict(type="dict"),
)


def _existing(directory):
    """``{file name: text}`` of the fleet target files in ``directory`` (none when missing)."""
    found = {}
    if not os.path.isdir(directory):
        return found
    for name in sorted(os.listdir(directory)):
        path = os.path.join(directory, name)
        if fleet_of(name) is None or not os.path.isfile(path):
            continue
        with open(path, encoding="utf-8", errors="replace") as handle:
            found[name] = handle.read()
    return found


def _mode(module):
    mode = module.params["mode"]
    try:
        return int(mode, 8) if isinstance(mode, str) else int(mode)
    except ValueError:
        return module.fail_json(msg="mode %r is not an octal file mode" % (mode,))


def main():
    module = AnsibleModule(
        argument_spec=dict(
            path=dict(type="path", required=True),
            hosts=dict(type="list", elements="dict", required=True, options=HOST_OPTIONS),
            prune=dict(type="bool", default=True),
            mode=dict(type="raw", default="0644"),
        ),
        supports_check_mode=True,
    )
    directory = module.params["path"]
    mode = _mode(module)
    with fail_json_on_error(module, what="gpufleet prometheus_targets"):
        existing = _existing(directory)
        wanted = wanted_files(module.params["hosts"], existing, module.params["prune"])
        changed = changes(wanted, existing)
        files = {}
        diffs = []
        for name, text in sorted(wanted.items()):
            path = os.path.join(directory, name)
            files[path] = {"fleet": fleet_of(name), "groups": len(json.loads(text)),
                           "changed": name in changed}
            if name in changed:
                diffs.append(dict(before=existing.get(name, ""), after=text,
                                  before_header=path, after_header=path))
        if changed and not module.check_mode:
            try:
                if not os.path.isdir(directory):
                    os.makedirs(directory, mode=0o755)
                for name in changed:
                    write_atomically(os.path.join(directory, name), wanted[name], mode)
            except OSError as exc:
                module.fail_json(msg="cannot write the target files into %s: %s"
                                 % (directory, to_native(exc)), files=files)
    module.exit_json(changed=bool(changed), files=files, diff=diffs)


if __name__ == "__main__":
    main()
