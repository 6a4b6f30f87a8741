#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: config_info
short_description: Read and normalize dstack configuration files (fleet, task, service, volume...)
version_added: 0.1.0
description:
  - Reads one dstack configuration, a fleet, a task, a dev environment, a service or a
    volume, either from a YAML file
    (O(path)) or given inline as Ansible data (O(config)), checks it, and returns it in the
    normalized form that the rest of the collection works from.
  - The checking is done by the collection's configuration model, the same code that runs
    behind C(gpufleet validate). This module only passes the input to it and reports the
    result.
  - An invalid configuration fails the task. The failure message lists every problem found,
    each prefixed with the file (or V(inline config)) and the field path it concerns, such as
    C(resources.gpu) or C(ssh_config.hosts[0].port); RV(problems) holds the same problems as
    data.
  - Things that are accepted but deserve attention, such as a key given twice in one mapping,
    are reported as warnings and do not fail the task.
author:
  - gpufleet maintainers (@gpufleet)
requirements:
  - PyYAML, on the host the module runs on, to read O(path). ansible-core itself needs PyYAML,
    so it is present wherever Ansible runs. An inline O(config) does not need it.
options:
  path:
    description:
      - Path to a dstack configuration file in YAML, usually named C(*.dstack.yml).
      - The file is read on the host the module runs on. To read files kept beside the
        playbook, run the task with C(delegate_to) set to V(localhost), or in a play with
        C(connection) set to V(local).
      - A relative path is resolved from the directory the module runs in. With a local
        connection in a playbook, that is the directory of the playbook, not the one
        C(ansible-playbook) was started in; prefer absolute paths, for example built from
        C(playbook_dir).
      - Exactly one of O(path) and O(config) must be given.
    type: path
  config:
    description:
      - The configuration itself, given as a mapping with the same keys and values a dstack
        YAML file holds.
      - Exactly one of O(path) and O(config) must be given.
    type: dict
  type:
    description:
      - The type of configuration expected.
      - When set, a configuration of any other type fails the task. When not set, any of the
        types is accepted and RV(type) tells which one was read.
    type: str
    choices:
      - fleet
      - task
      - dev-environment
      - service
      - volume
extends_documentation_fragment:
  - gpufleet.cluster.attributes
  - gpufleet.cluster.attributes.info_module
  - gpufleet.cluster.attributes.action_group
notes:
  - Gateways and presets are dstack configuration types that gpufleet does not run; they are
    rejected with a message saying so.
  - The normalized form (ranges as C(min)/C(max) pairs, sizes in GB, durations in seconds,
    dstack's defaults filled in) is described in C(docs/config-json.md) in the collection.
seealso:
  - name: The gpufleet.cluster.validate playbook
    description: Checks a list of files with this module and fails listing every bad one.
    link: https://github.com/gpufleet/gpufleet/blob/main/playbooks/validate.yml
"""

EXAMPLES = r"""
- name: Read a fleet file kept beside the playbook
  gpufleet.cluster.config_info:
    path: "{{ playbook_dir }}/fleets/h100.dstack.yml"
    type: fleet
  delegate_to: localhost
  register: fleet

- name: Show the size of the fleet
  ansible.builtin.debug:
    msg: >-
      {{ fleet.config.name }} keeps {{ fleet.config.nodes.min }} to
      {{ fleet.config.nodes.max | default('any number of', true) }} nodes

- name: Check a task given inline
  gpufleet.cluster.config_info:
    config:
      type: task
      name: nccl-check
      nodes: 2
      commands:
        - nvidia-smi
      resources:
        gpu: H100:8
  register: task

- name: Show how many GPUs each node of the task asks for
  ansible.builtin.debug:
    msg: "{{ task.config.resources.gpu.count.min }} GPUs per node"

- name: Check several files without stopping at the first bad one
  gpufleet.cluster.config_info:
    path: "{{ item }}"
  loop:
    - fleet.dstack.yml
    - train.dstack.yml
  delegate_to: localhost
  register: checked
  ignore_errors: true

- name: List the problems of the files that are not valid
  ansible.builtin.debug:
    msg: "{{ item.msg }}"
  loop: "{{ checked.results | selectattr('failed') }}"
  loop_control:
    label: "{{ item.item }}"
"""

RETURN = r"""
config:
  description:
    - The configuration in normalized form. Every field is present, with dstack's default
      where the input left it out, and shorthands are expanded (a fleet's C(nodes) given as one
      number becomes a mapping with C(min), C(target) and C(max) all set to it). Ranges are
      C(min)/C(max) mappings, sizes are numbers of GB and durations numbers of seconds.
    - The full shape is described in C(docs/config-json.md) in the collection.
  returned: success
  type: dict
  sample:
    type: fleet
    name: my-fleet
    fleet_type: backend
    placement: any
    blocks: 1
    nodes:
      min: 2
      target: 6
      max: 10
    ssh_config: null
    env: {}
    spot_policy: on-demand
    idle_duration: 3600
type:
  description:
    - The type of the configuration.
  returned: success
  type: str
  sample: fleet
unsupported:
  description:
    - What gpufleet's C(apply) refuses in this valid configuration (for example a task's
      C(schedule), a backend gpufleet does not have, or a C(files) entry or local repo that is
      not on this controller; relative paths start at the file's folder), with the same
      messages; empty when it can be applied. Fields gpufleet accepts without acting on them
      are warnings instead.
  returned: success
  type: list
  elements: dict
  contains:
    path:
      description: The field, as in C(schedule) or C(repos[0].url).
      returned: always
      type: str
    message:
      description: Why, and what to do instead.
      returned: always
      type: str
  sample: [{path: schedule, message: "gpufleet has no server to start runs on a schedule; ..."}]
problems:
  description:
    - Every problem found in the configuration, in the order found (at most 100, then one entry
      saying how many more there are).
  returned: failure
  type: list
  elements: dict
  contains:
    path:
      description:
        - The field the problem concerns, written the way it appears in YAML. Empty when the
          problem concerns the whole file, for example when it is not YAML at all.
      returned: always
      type: str
      sample: resources.gpu
    message:
      description:
        - What is wrong, and where possible how to put it right.
      returned: always
      type: str
      sample: "must not be negative, got '-1'"
"""

import os

from ansible.module_utils.basic import AnsibleModule, missing_required_lib

from ansible_collections.gpufleet.cluster.plugins.module_utils.core.module import (
    fail_json_on_error,
)
from ansible_collections.gpufleet.cluster.plugins.module_utils.repos import sources
from ansible_collections.gpufleet.cluster.plugins.module_utils.spec import (
    HAS_YAML,
    parse_data,
    parse_file,
    support,
)

# How problems and warnings about an inline ``config`` name their source.
INLINE_SOURCE = "inline config"


def read(module):
    """Parse the configuration the task points at; returns (config, warnings, source)."""
    path = module.params["path"]
    expect = module.params["type"]
    if path is None:
        config, warnings = parse_data(module.params["config"], INLINE_SOURCE, expect)
        return config, warnings, INLINE_SOURCE
    if not HAS_YAML:
        module.fail_json(msg=missing_required_lib("PyYAML"))
    config, warnings = parse_file(path, expect)
    return config, warnings, path


def main():
    module = AnsibleModule(
        argument_spec=dict(
            path=dict(type="path"),
            config=dict(type="dict"),
            type=dict(type="str", choices=["fleet", "task", "dev-environment", "service", "volume"]),
        ),
        mutually_exclusive=[("path", "config")],
        required_one_of=[("path", "config")],
        supports_check_mode=True,
    )

    # The config model raises only SpecError; anything else is a bug in it.
    with fail_json_on_error(module, what="the gpufleet configuration model", problems=True):
        config, warnings, source = read(module)

    for warning in list(warnings) + support.notes(config):
        module.warn("%s: %s" % (source, warning))
    # What the file names on this controller too (repos.sources, as gpufleet validate): its
    # relative files and repo paths start at its folder, an inline config's at the module's.
    base_dir = os.path.dirname(os.path.abspath(source)) if source != INLINE_SOURCE else None
    refused = support.refusals(config) + sources.local_refusals(config, base_dir, os.environ)
    module.exit_json(changed=False, config=config, type=config["type"],
                     unsupported=[p.as_dict() for p in refused])


if __name__ == "__main__":
    main()
