#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: offer_info
short_description: List the cloud offers a dstack fleet or task would take, cheapest first
version_added: 0.1.0
description:
  - Reads a dstack fleet or task configuration with gpufleet's configuration model and lists
    the cloud offers it matches, each one instance type in one region, on-demand or spot, sorted
    by price, as C(dstack offer) and the plan of C(dstack apply) do.
  - "Offers come from catalogs of GPU instance types (AWS and GCP) that ship with the collection,
    or from refreshed catalogs in O(catalog_dir). Matching follows dstack: C(resources) by the
    spec grammar, C(backends), C(regions), C(availability_zones), C(instance_types),
    C(spot_policy), C(max_price) and C(reservation)."
  - "Offers are taken only in the regions a fleet applied from the file would launch in: a
    backend's C(regions) in the backend settings (C(backends.yml) in the state dir, or
    O(backend_settings)) limit its offers, as they limit C(gpufleet apply)."
  - Nothing is created and no cloud API is called; prices are the catalog's list prices.
  - A configuration without C(backends) is matched against the cloud backends the backend
    settings configure, as dstack uses its project's backends and as a fleet without
    C(backends) is provisioned; with none configured it would go to the C(local) backend, which
    has no offers, and RV(msg) says so.
author:
  - gpufleet maintainers (@gpufleet)
options:
  path:
    description:
      - Path to the fleet or task file on the host the module runs on (usually the controller).
      - Exactly one of O(path) and O(config) must be given.
    type: path
  config:
    description:
      - The fleet or task configuration itself, as the mapping a dstack file holds.
      - Exactly one of O(path) and O(config) must be given.
    type: dict
  catalog_dir:
    description:
      - A directory of refreshed catalogs (C(aws.json), C(gcp.json)); a backend without a file
        there uses the shipped catalog.
      - Defaults to C(catalog) in O(state_dir).
    type: path
  limit:
    description:
      - How many offers RV(table) shows; RV(offers) always holds all of them.
    type: int
    default: 3
extends_documentation_fragment:
  - gpufleet.cluster.state
  - gpufleet.cluster.state.backend_settings
  - gpufleet.cluster.attributes
  - gpufleet.cluster.attributes.info_module
  - gpufleet.cluster.attributes.action_group
notes:
  - A config with no matching offer does not fail the task; RV(offers) is empty and RV(msg)
    says what ruled the catalog's instance types out.
  - Backends without a catalog (C(local), or other dstack backends) have no offers here.
seealso:
  - name: Offers and catalogs
    description: How offers are matched and how the catalogs are refreshed.
    link: https://github.com/gpufleet/gpufleet/blob/main/docs/offers.md
"""

EXAMPLES = r"""
- name: List the offers of a fleet file before creating it
  gpufleet.cluster.offer_info:
    path: "{{ playbook_dir }}/h100.dstack.yml"
  delegate_to: localhost
  register: offers

- name: Show dstack's offers table
  ansible.builtin.debug:
    msg: "{{ offers.table }}"

- name: Find the cheapest spot offer of 8 H100s in the US
  gpufleet.cluster.offer_info:
    config:
      type: fleet
      name: h100
      nodes: 2
      resources:
        gpu: H100:8
      spot_policy: spot
      regions: [us-east-1, us-east-2, us-west-2]
  delegate_to: localhost
  register: spot

- name: Show the cheapest one
  ansible.builtin.debug:
    msg: >-
      {{ spot.offers[0].instance_type }} in {{ spot.offers[0].region }}
      at ${{ spot.offers[0].price }}/h
  when: spot.offers | length > 0
"""

RETURN = r"""
offers:
  description:
    - Every matching offer, cheapest first.
    - C(resources) has the shape of a measured host's C(gpufleet_host) fact (C(cpus),
      C(memory.mib), C(disk.available_mib), C(gpu), C(arch)); the disk is the boot disk the
      instance would get (the spec's minimum, else 100 GB).
  returned: always
  type: list
  elements: dict
  sample:
    - backend: aws
      region: us-east-1
      zones: [us-east-1a, us-east-1b]
      instance_type: g5.xlarge
      spot: false
      price: 1.006
      reservation: null
      resources:
        cpus: 4
        memory: {mib: 16384}
        disk: {available_mib: 102400}
        gpu: {vendor: nvidia, name: A10G, memory_mib: 24576, count: 1}
        arch: x86_64
total:
  description: The number of matching offers.
  returned: always
  type: int
  sample: 42
max_price:
  description: The price of the most expensive matching offer (USD per hour); null when none.
  returned: always
  type: float
  sample: 98.32
rejected:
  description:
    - For each reason, how many instance types and regions of the catalogs it ruled out.
  returned: always
  type: dict
  sample: {resources: 180, region: 12}
catalogs:
  description: Where each backend's catalog came from and how recent it is.
  returned: always
  type: dict
  sample: {aws: {source: shipped, as_of: "2026-11-01"}}
table:
  description: The first O(limit) offers as the lines of dstack's offers table.
  returned: always
  type: list
  elements: str
  sample:
    - "#  BACKEND  REGION     INSTANCE   RESOURCES                                      SPOT  PRICE"
    - "1  aws      us-east-1  g5.xlarge  cpu=4 mem=16GB disk=100GB gpu=A10G:24GB:1     no    $1.006"
    - ""
    - "Shown 1 of 1 offers, $1.006 max"
msg:
  description: Why there are no offers; empty when there are some.
  returned: always
  type: str
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.gpufleet.cluster.plugins.module_utils.core.module import (
    fail_json_on_error,
    state_options,
)
from ansible_collections.gpufleet.cluster.plugins.module_utils.backends import base
from ansible_collections.gpufleet.cluster.plugins.module_utils.fleets import cloud, state
from ansible_collections.gpufleet.cluster.plugins.module_utils.render.fleet_table import offer_table
from ansible_collections.gpufleet.cluster.plugins.module_utils.offers import catalog, select
from ansible_collections.gpufleet.cluster.plugins.module_utils.spec import (
    parse_data,
    parse_file,
)
from ansible_collections.gpufleet.cluster.plugins.module_utils.spec.naming import label


def main():
    module = AnsibleModule(
        argument_spec=dict(
            path=dict(type="path"),
            config=dict(type="dict"),
            catalog_dir=dict(type="path"),
            **state_options(backend_settings=True),
            limit=dict(type="int", default=3),
        ),
        mutually_exclusive=[("path", "config")],
        required_one_of=[("path", "config")],
        supports_check_mode=True,
    )
    params = module.params
    if params["limit"] < 1:
        module.fail_json(msg="limit must be at least 1, got %d" % params["limit"])
    with fail_json_on_error(module, problems=True):
        if params["path"]:
            config, _warnings = parse_file(params["path"])
            name = label(config, params["path"])
        else:
            config, _warnings = parse_data(params["config"], "inline config")
            name = label(config)
    if config["type"] not in ("fleet", "task", "dev-environment", "service"):
        module.fail_json(msg="%s is a %s; offers are listed for fleets, tasks, dev "
                             "environments and services"
                         % (params["path"] or "the inline config", config["type"]))
    if config["type"] == "fleet" and config["fleet_type"] == "ssh":
        module.fail_json(msg="fleet %s is an SSH fleet (ssh_config): its hosts exist already, "
                             "so it has no cloud offers" % name)
    root = state.state_dir(params["state_dir"])
    catalog_dir = params["catalog_dir"] or catalog.directory(root)
    with fail_json_on_error(module, prefix="%s: " % name):
        settings = state.backend_settings(root, params["backend_settings"])
    if not config.get("backends"):
        with fail_json_on_error(module, prefix="%s: " % name):
            default = base.default_backends(config, settings, catalog_dir)
        if default == ["local"]:
            module.exit_json(
                changed=False, offers=[], total=0, max_price=None, rejected={}, catalogs={},
                table=offer_table([], params["limit"]),
                msg="%s has no backends and no cloud backend is configured (backends.yml in the "
                    "state dir, or backend_settings), so it would go to the local backend, "
                    "which has no offers; configure aws or gcp, or name backends in the file"
                    % name)
        config = dict(config, backends=default)
    catalogs = {}
    sources = {}
    with fail_json_on_error(module, prefix="%s: " % name):
        for backend in catalog.BACKENDS:
            data, source = catalog.load(backend, catalog_dir)
            catalogs[backend] = data
            sources[backend] = {"source": source, "as_of": data.get("as_of")}
        # Only the regions a fleet applied from this file would launch in: the backend
        # settings' regions (fleets.cloud, which fleet apply asks too).
        regions, why_none = cloud.offer_regions(config, settings, config["backends"],
                                                catalog_dir)
        found = select.select(config, catalogs, None, regions)
    offers = found["offers"]
    msg = ""
    if not offers:
        msg = "; ".join([select.no_offers_message(name, found["rejected"])] + [
            "%s: %s" % (name, why_none[b]) for b in sorted(why_none)])
    module.exit_json(
        changed=False,
        offers=offers,
        total=len(offers),
        max_price=max([o["price"] for o in offers]) if offers else None,
        rejected=found["rejected"],
        catalogs=sources,
        table=offer_table(offers, params["limit"]),
        msg=msg,
    )


if __name__ == "__main__":
    main()
