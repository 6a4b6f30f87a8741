#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: fleet_facts_cache
short_description: Keep the host facts of a fleet's ready hosts on the controller
version_added: 0.1.0
description:
  - Writes the host facts of a fleet's ready hosts to C(fleets/<name>/facts.json) in the state
    dir, where the C(gpufleet.cluster.fleet) inventory plugin (as C(gpufleet_host)) and task
    placement find them. C(playbooks/fleet.yml) runs it at the end of an apply.
  - The file holds a mapping of instance name to resources, for every instance of O(fleet) with
    status V(idle) and measured resources; hosts that are not ready lose their cached facts.
  - The file is replaced atomically with mode C(0600), and only when its content (or its mode)
    differs.
  - Runs on the controller.
author:
  - gpufleet maintainers (@gpufleet)
options:
  fleet:
    description:
      - The fleet record, as the C(gpufleet.cluster.fleet_report) filter makes it (see
        C(docs/fleets.md)); its C(name) and C(instances) are used.
    type: dict
    required: true
extends_documentation_fragment:
  - gpufleet.cluster.state
  - gpufleet.cluster.attributes
  - gpufleet.cluster.attributes.action_group
  - gpufleet.cluster.attributes.action_plugin
attributes:
  action:
    support: full
    details:
      - The cache is the controller's, so the action plugin writes it in the controller's
        process; the module is never sent.
  check_mode:
    support: full
    details:
      - In check mode nothing is written; the task reports whether the file would change.
  diff_mode:
    support: none
  idempotent:
    support: full
seealso:
  - module: gpufleet.cluster.fleet
  - module: gpufleet.cluster.host_facts
"""

EXAMPLES = r"""
- name: Cache the host facts for the inventory plugin
  gpufleet.cluster.fleet_facts_cache:
    fleet: "{{ gpufleet_fleet_record }}"
    state_dir: "{{ gpufleet_fleet_result.state_dir }}"
"""

RETURN = r"""
path:
  description: The facts cache of the fleet.
  returned: success
  type: str
  sample: /home/me/.local/share/gpufleet/fleets/demo/facts.json
facts:
  description:
    - What the cache holds after the task (in check mode, what it would hold), by instance name.
  returned: success
  type: dict
  sample: {demo-0: {cpus: 4, memory: 8.0, internal_ip: 172.18.0.2}}
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.gpufleet.cluster.plugins.module_utils.core.module import (
    fail_json_on_error,
)
from ansible_collections.gpufleet.cluster.plugins.module_utils.fleets import state
from ansible_collections.gpufleet.cluster.plugins.module_utils.fleets.facts_cache import (
    FACTS_CACHE_ARGS,
    cache_facts,
)


def main():
    # What runs is the action plugin of the same name (plugins/action/fleet_facts_cache.py),
    # in the controller's process: this is the same work for a direct module call.
    module = AnsibleModule(argument_spec=FACTS_CACHE_ARGS, supports_check_mode=True)
    root = state.state_dir(module.params["state_dir"])
    with fail_json_on_error(module):
        changed, path, facts = cache_facts(module.params["fleet"], root, module.check_mode)
    module.exit_json(changed=changed, path=path, facts=facts)


if __name__ == "__main__":
    main()
