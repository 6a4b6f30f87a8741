#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: fleet_reconcile
short_description: Remove backend fleet instances idle past idle_duration and refill to nodes.min
version_added: 0.1.0
description:
  - "One pass of what dstack's server does to backend fleets in the background: an instance
    that has run no task container of gpufleet for longer than the fleet's C(idle_duration)
    (default 3 days; C(off) keeps instances) is removed, highest instance numbers first, as
    long as the fleet keeps C(nodes.min) instances; a fleet with fewer than C(nodes.min)
    instances gets new ones."
  - An instance is idle since the last of its task containers finished, or since it was
    created when it never ran one; a container still alive makes it busy. Each host is asked
    over SSH, as the task runner asks it; a host that does not answer is kept.
  - Meant to be scheduled (an AWX schedule, cron); in check mode it only reports what it
    would do, for each instance with the reason.
  - SSH fleets are left alone; their hosts are not gpufleet's to remove.
  - "Every host with cached facts (backend and SSH fleets) also reads its GPU health in the
    same request (DCGM, else nvidia-smi's error counters and the kernel log's XID lines), as
    dstack's server checks its instances: the host's cached facts keep it, C(gpufleet fleet)
    shows it and task placement leaves out hosts whose health is C(failure)
    (C(docs/fleets.md#gpu-health)). In check mode the health is read but not kept."
  - Hosts of a backend fleet that answered and lack the fleet's members document (an instance
    made by an earlier pass) get a copy from the hosts that hold it, so that the members
    granted reach them too (M(gpufleet.cluster.fleet_members)).
author:
  - gpufleet maintainers (@gpufleet)
options:
  paths:
    description:
      - Fleet files on the controller.
      - When empty, every fleet file applied from this controller (as the state directory
        remembers them) is reconciled.
    type: list
    elements: path
    default: []
extends_documentation_fragment:
  - gpufleet.cluster.state
  - gpufleet.cluster.state.backend_settings
  - gpufleet.cluster.attributes
  - gpufleet.cluster.attributes.action_group
attributes:
  check_mode:
    support: full
    details:
      - In check mode nothing is removed or created; RV(fleets) says what would be.
  diff_mode:
    support: none
  idempotent:
    support: full
    details:
      - A second pass right after the first finds nothing more to do.
seealso:
  - module: gpufleet.cluster.fleet
"""

EXAMPLES = r"""
- name: Show what a reconcile pass would do
  gpufleet.cluster.fleet_reconcile:
    paths:
      - "{{ playbook_dir }}/h100.dstack.yml"
  check_mode: true
  register: planned

- name: Reconcile every fleet applied from this controller
  gpufleet.cluster.fleet_reconcile:
"""

RETURN = r"""
fleets:
  description: One entry per backend fleet reconciled.
  returned: always
  type: list
  elements: dict
  contains:
    name:
      description: The fleet's name.
      type: str
    file:
      description: Its file.
      type: str
    remove:
      description: Instances removed (in check mode, that would be).
      type: list
      elements: str
    create:
      description: How many instances were (would be) created to reach C(nodes.min).
      type: int
    keep:
      description: Instances kept.
      type: list
      elements: str
    reasons:
      description: For each instance, why it is kept or removed.
      type: dict
    health:
      description:
        - For each host asked, its GPU health (C(healthy), C(warning) or C(failure)) and the
          worst incident's message; C(unknown) with the reason when its tools could not say.
      type: dict
  sample:
    - name: h100
      file: /srv/fleets/h100.dstack.yml
      remove: [h100-3]
      create: 0
      keep: [h100-0, h100-1, h100-2]
      reasons: {h100-3: "remove: idle 3d2h >= idle_duration 3d", h100-1: "kept: busy"}
      health: {h100-0: healthy, h100-1: "warning: GPU 3 has a page pending retirement"}
skipped:
  description: Files that were not reconciled, with why (SSH fleets, files that no longer read).
  returned: always
  type: list
  elements: str
"""

import datetime
import os

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.gpufleet.cluster.plugins.module_utils.core.module import (
    fail_json_on_error,
    state_options,
)
from ansible_collections.gpufleet.cluster.plugins.module_utils.backends import base, local
from ansible_collections.gpufleet.cluster.plugins.module_utils.backends.docker_cli import Docker
from ansible_collections.gpufleet.cluster.plugins.module_utils.fleets import (
    apply,
    state,
)
from ansible_collections.gpufleet.cluster.plugins.module_utils.spec.naming import fleet_name
from ansible_collections.gpufleet.cluster.plugins.module_utils.spec import parse_hosts_file
from ansible_collections.gpufleet.cluster.plugins.module_utils.tasks import (
    health,
    membership,
    reconcile,
    surveys,
)


def reconcile_fleet(module, path, root, settings, docker, now):
    config, _warnings = parse_hosts_file(path)
    config = apply.resolved(config, settings, root)
    if config["fleet_type"] == "ssh":
        # Its hosts stay, but their GPU health is read again.
        record = apply.describe(config, path, docker, root, settings=settings)
        health.refresh([record], root, max_age=0, now=now, check_mode=module.check_mode)
        return None, "%s: an SSH fleet; its hosts are not removed or created" % path
    if base.select(config, fleet_name(config, path)) not in base.CLOUD_BACKENDS:
        docker.ping()
    record = apply.describe(config, path, docker, root, settings=settings)
    nodes = surveys.nodes_of([record], root)
    # Every host with cached facts reads its GPU health in the survey's request.
    probe = [h for h in health.due([record], root, max_age=0, now=now) if h in nodes]
    raw = {}
    containers, claims, queues, errors = (
        surveys.survey_with_queues(nodes, probe=probe, health=raw) if nodes
        else ({}, {}, {}, {}))
    said = health.from_survey(raw, record["name"], root, now, module.check_mode)
    decision = reconcile.decide(config, record["instances"], containers,
                                dict((h, str(e)) for h, e in errors.items()), now, claims, queues)
    entry = dict(decision, name=record["name"], file=path, health=health.summary(said))
    if module.check_mode:
        return entry, None
    # A host made by an earlier pass (or grown since) gets the fleet's members document from
    # the hosts that hold it, so that grants hold on every host; only hosts that answered.
    membership.ensure(record, root, nodes={h: n for h, n in nodes.items() if h not in errors},
                      make=False)
    if decision["remove"]:
        nums = [i["num"] for i in record["instances"] if i["name"] in decision["remove"]]
        apply.remove_instances(config, nums, path, docker, root, settings)
    if decision["create"]:
        nodes_spec = dict(config["nodes"], target=config["nodes"]["min"])
        apply.apply(dict(config, nodes=nodes_spec), path, docker, root,
                    build_image=lambda check: local.ensure_node_image(docker, check_mode=check)[0],
                    settings=settings)
    return entry, None


def main():
    module = AnsibleModule(
        argument_spec=dict(
            paths=dict(type="list", elements="path", default=[]),
            **state_options(backend_settings=True),
        ),
        supports_check_mode=True,
    )
    root = state.state_dir(module.params["state_dir"])
    paths = module.params["paths"] or sorted(state.remembered_files(root).values())
    now = datetime.datetime.now(datetime.timezone.utc)
    docker = Docker()
    fleets = []
    skipped = []
    with fail_json_on_error(module, extras=dict(fleets=fleets, skipped=skipped)):
        settings = state.backend_settings(root, module.params["backend_settings"])
        for path in paths:
            if not os.path.exists(path) and not module.params["paths"]:
                skipped.append("%s: remembered, but no longer there" % path)
                continue
            entry, why = reconcile_fleet(module, path, root, settings, docker, now)
            if entry is not None:
                fleets.append(entry)
            else:
                skipped.append(why)
    changed = any(f["remove"] or f["create"] for f in fleets)
    module.exit_json(changed=changed, fleets=fleets, skipped=skipped)


if __name__ == "__main__":
    main()
