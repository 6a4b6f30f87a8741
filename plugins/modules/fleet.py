#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: fleet
short_description: Create, converge or delete a dstack fleet (backend fleets) and list its hosts
version_added: 0.1.0
description:
  - "Reads a dstack fleet configuration (C(type: fleet)) with gpufleet's configuration model and
    makes its instances real."
  - "Backend fleets (C(nodes)) are provisioned. With the C(local) backend, the default, each
    node is a container on the controller's Docker engine with its own sshd, its own dockerd
    and its own address: C(placement: cluster) nodes share one network, other nodes get one
    network each. Nodes are reached by SSH as C(gpufleet) with a key made for the fleet."
  - "With C(backends: [aws]), nodes are EC2 instances launched from the fleet's offers,
    cheapest first (see M(gpufleet.cluster.offer_info)): one RunInstances call per offer and
    zone for all missing nodes, idempotent by a token derived from the fleet; EFA interfaces on
    every network card of EFA types; a cluster placement group, a security group (SSH, and all
    traffic within the fleet) and the fleet's key pair, all tagged C(gpufleet:fleet) and removed
    with the fleet. Capacity errors move on to the next offer; when none has capacity, the
    fleet's C(retry) policy (C(no-capacity)) decides whether to wait and try again."
  - "With C(backends: [gcp]), nodes are Compute Engine instances named C(<fleet>-<n>), created
    with one C(instances.bulkInsert) per offer and zone (idempotent by its request id): the
    extra gVNIC NICs of A3 machine types from C(extra_vpcs), the RDMA NICs of A3 Ultra and A4
    from C(roce_vpcs), a compact placement policy for C(placement: cluster), SPOT
    provisioning for spot offers, firewall rules for SSH and traffic within the fleet, all
    labelled C(gpufleet-fleet) and removed with the fleet. A fleet that lists several cloud
    backends is provisioned by the first of them."
  - "Applying again converges: missing nodes are created up to C(nodes.target) with the lowest
    free instance numbers, stopped nodes are started, existing nodes are kept, and nodes are
    removed only above C(nodes.max)."
  - SSH fleets (C(ssh_config)) are not provisioned; their instances are listed from the file so
    that a play can check and claim the hosts (see C(playbooks/fleet.yml)).
  - With O(state=absent), removes the fleet's nodes, volumes and networks and its key, known
    hosts and cached facts on the controller.
  - "With O(state=absent) and O(instances), deletes only those instances and keeps the fleet, as
    C(dstack fleet delete NAME -i N) does: a backend fleet's instances are removed (as
    M(gpufleet.cluster.fleet_reconcile) removes idle ones); an SSH fleet's hosts are to be
    released by the play (RV(release_hosts)) and leave the facts cache, so tasks do not use them
    until the fleet is applied again."
  - With O(state=absent), the fleet may be named (O(name)) instead of given, and it is then
    found as C(gpufleet fleet) and the task runner find fleets.
  - Runs on the controller; the fleet's resources carry labels, which are the only record of the
    fleet, so several controllers can manage one fleet.
author:
  - gpufleet maintainers (@gpufleet)
options:
  path:
    description:
      - Path to the fleet's dstack configuration file on the controller, usually
        C(*.dstack.yml).
      - A fleet without C(name) is named after the file (C(gpu-cluster.dstack.yml) gives
        V(gpu-cluster)), so that applying it again finds the same fleet.
      - Relative C(identity_file) paths in the file are taken relative to the file's directory.
      - Exactly one of O(path), O(config) and O(name) must be given.
    type: path
  config:
    description:
      - The fleet configuration itself, as the mapping a dstack file holds. It must have a
        C(name).
      - Its C(identity_file) paths must be absolute (there is no file to take relative ones
        from).
      - Once applied, it is kept in the state dir (C(fleets/<name>/inline.dstack.yml)) so that
        tasks, C(ps) and reconcile find the fleet as they find applied files.
      - Exactly one of O(path), O(config) and O(name) must be given.
    type: dict
  name:
    description:
      - The name of the fleet to delete, instead of its file or config; only with
        O(state=absent).
      - The fleet is found from the file this controller applied it from (remembered in the
        state dir; the only record of an SSH fleet), else from the labels and tags of the
        backends (the local Docker engine, and the cloud backends that O(backend_settings)
        configures).
      - "When no fleet has that name, the module fails with C(Fleet NAME does not exist)."
      - Exactly one of O(path), O(config) and O(name) must be given.
    type: str
  instances:
    description:
      - With O(state=absent), the instance numbers to delete (C(<fleet>-<n>)); the fleet and
        its other instances stay.
      - A backend fleet's instances are removed; an SSH fleet's hosts (numbered by their place
        in C(ssh_config.hosts)) are listed in RV(release_hosts) for the play to remove their
        marker, and their cached facts are dropped.
      - Numbers the fleet does not have are left out, as dstack does.
      - Instances that still run a task are never deleted; the module fails naming the runs
        (see O(refuse_busy), which is always on with O(instances)).
    type: list
    elements: int
  refuse_busy:
    description:
      - With O(state=absent), fail before anything is removed when an instance to delete still
        runs a task, naming the runs, as dstack refuses to delete a fleet in use.
      - Each host with an address is asked over SSH for its task containers, as C(gpufleet ps)
        asks. A host that cannot be asked (it does not answer, or its key is not on this
        controller, as when the state dir was moved) is never taken as idle; the module fails
        naming the host and the reason. V(false) skips both checks (C(gpufleet delete --force)).
      - Always on for busy instances when O(instances) is given; there V(false) only skips the
        check of hosts that cannot be asked.
      - With O(state=present), the same check for the instances a smaller C(nodes) count would
        remove from a local backend fleet; the apply fails, before anything changes, when one
        of them runs a task or cannot be asked.
    type: bool
    default: false
  at_least:
    description:
      - With O(state=present), a backend fleet grows to at least this many instances, never
        above C(nodes.max); its other settings stay those of its file. This is how a run that
        does not fit the instances a fleet has makes it grow (the task playbook passes the
        run's need); instances made so are removed again by M(gpufleet.cluster.fleet_reconcile)
        once idle past C(idle_duration), down to C(nodes.min).
      - Ignored for SSH fleets.
    type: int
  made_for:
    description:
      - With O(state=present), the run the instances this call creates are made for, as the
        task playbook passes it when a run makes a backend fleet grow. Each new instance
        carries the run's name and its own C(idle_duration) (a container label, an EC2 tag,
        Compute Engine metadata), which M(gpufleet.cluster.fleet_reconcile) applies to it
        instead of the fleet's, and C(gpufleet fleet) shows it.
      - Instances that exist already are left as they are. Ignored for SSH fleets.
    type: dict
    suboptions:
      run:
        description: The run's name.
        type: str
        required: true
      idle_duration:
        description:
          - How long the new instances may stay idle, in seconds, or V(off) to keep them. By
            default the shorter of the fleet's and the run's C(idle_duration), or 5 minutes
            when neither file sets it (as dstack does); the task module computes it.
        type: raw
  state:
    description:
      - V(present) converges the fleet to its configuration; V(absent) deletes it.
    type: str
    choices: [present, absent]
    default: present
  image:
    description:
      - The image local nodes run. By default the node image of this version of gpufleet,
        built without a registry when missing (see M(gpufleet.cluster.local_node_image)).
    type: str
  mirror:
    description:
      - The Debian mirror used when the node image has to be built.
    type: str
    default: http://deb.debian.org/debian
extends_documentation_fragment:
  - gpufleet.cluster.state
  - gpufleet.cluster.state.backend_settings
  - gpufleet.cluster.attributes
  - gpufleet.cluster.attributes.action_group
  - gpufleet.cluster.attributes.action_plugin
attributes:
  action:
    support: full
    details:
      - Where the module would run on the controller anyway (a local connection, no
        C(become), the controller's own Python, no C(environment)), the action plugin does
        its work in the controller's process, without sending the module; anywhere else the
        module runs.
  check_mode:
    support: full
    details:
      - In check mode nothing is created or removed; RV(fleet.plan) says what would be done and
        instances that would be created are listed with status V(pending).
  diff_mode:
    support: none
  idempotent:
    support: full
notes:
  - Building the node image runs C(debootstrap) and needs root; run the task with C(become)
    the first time, or build the image beforehand with M(gpufleet.cluster.local_node_image).
  - The shape of RV(fleet) is the fleet record described in C(docs/fleets.md).
seealso:
  - module: gpufleet.cluster.local_node_image
  - module: gpufleet.cluster.config_info
"""

EXAMPLES = r"""
- name: Bring up a local fleet
  gpufleet.cluster.fleet:
    path: "{{ playbook_dir }}/cluster.dstack.yml"
  register: fleet

- name: Show how to reach each node
  ansible.builtin.debug:
    msg: "{{ item.name }}: {{ item.vars.ansible_user }}@{{ item.vars.ansible_host }}"
  loop: "{{ fleet.hosts }}"

- name: Add the nodes to this run's inventory with every variable the inventory plugin gives
  ansible.builtin.add_host: "{{ new_host }}"
  vars:
    new_host: "{{ item.vars | combine({'name': item.name, 'groups': item.groups}) }}"
  loop: "{{ fleet.hosts }}"
  loop_control:
    label: "{{ item.name }}"
  changed_when: false

- name: Grow an inline fleet to three nodes
  gpufleet.cluster.fleet:
    config:
      type: fleet
      name: scratch
      nodes: 3
      backends: [local]

- name: Delete its instance scratch-2, unless it runs a task
  gpufleet.cluster.fleet:
    name: scratch
    instances: [2]
    state: absent

- name: Delete it
  gpufleet.cluster.fleet:
    config:
      type: fleet
      name: scratch
      nodes: 3
    state: absent
"""

RETURN = r"""
fleet:
  description:
    - The fleet record (see C(docs/fleets.md)) after the change, or in check mode as it would be.
  returned: success
  type: dict
  contains:
    name:
      description: The fleet's name.
      type: str
      returned: success
      sample: demo
    fleet_type:
      description: V(backend) or V(ssh).
      type: str
      returned: success
    plan:
      description:
        - Instance names by what was done to them (V(create), V(start), V(keep), V(remove),
          V(release)); null for SSH fleets, whose hosts are claimed by the play.
      type: dict
      returned: success
      sample: {create: [demo-1], start: [], keep: [demo-0], remove: [], release: []}
    instances:
      description: One record per instance, sorted by instance number.
      type: list
      elements: dict
      returned: success
    offers:
      description:
        - For cloud fleets that create instances, the three cheapest offers they are (in check
          mode, would be) launched from, as M(gpufleet.cluster.offer_info) returns offers;
          C(offers_total) counts them all and C(offers_max_price) is the highest price.
      type: list
      elements: dict
      returned: when the fleet is a cloud fleet
hosts:
  description:
    - One entry per instance that has an address, ready for M(ansible.builtin.add_host), with
      the same name, groups and host variables the C(gpufleet.cluster.fleet) inventory plugin gives
      the host (both are built by one function), except C(gpufleet_host), the cached host facts,
      which a play measures afresh with M(gpufleet.cluster.host_facts).
    - An entry's RV(hosts[].vars) go to M(ansible.builtin.add_host) whole, with the name and
      groups combined in (see EXAMPLES and C(playbooks/fleet.yml)).
    - With O(state=absent), empty.
  returned: success
  type: list
  elements: dict
  contains:
    name:
      description: The instance name, C(<fleet>-<n>).
      type: str
      returned: success
      sample: demo-0
    groups:
      description:
        - "C(gpufleet), C(fleet_<name>), C(backend_<backend>), C(cluster) for
          C(placement: cluster) fleets and C(gpu_<vendor>) when the fleet's resources ask for a
          GPU vendor. Characters other than letters, digits and underscores become underscores."
      type: list
      elements: str
      returned: success
      sample: [gpufleet, fleet_demo, backend_local, cluster]
    vars:
      description:
        - The host variables. C(ansible_ssh_private_key_file), C(ansible_host_key_checking) and
          C(ansible_python_interpreter) are left out when there is no value to give; every
          other key is always there, null when unknown.
        - "C(ansible_host), C(ansible_port), C(ansible_user): where and as whom to connect."
        - C(ansible_ssh_private_key_file) (the fleet's key, or the SSH fleet's C(identity_file)).
        - C(ansible_ssh_common_args) (the host key policy and, for SSH fleets with a jump host,
          a C(ProxyCommand) through it with the jump host's own user, port and key).
        - C(ansible_control_path) (the host's own multiplexed SSH connection, named after its
          whole route, so that two fleets reaching one address differently never share one).
        - C(ansible_host_key_checking) (SSH fleet hosts only, V(true)), so that the host key
          policy in C(ansible_ssh_common_args) holds whatever Ansible's own setting is.
        - C(ansible_python_interpreter) (local nodes only, the node image's Python).
        - "C(gpufleet_fleet), C(gpufleet_instance), C(gpufleet_instance_num): the fleet, the
          instance name and its number."
        - "C(gpufleet_backend) (V(ssh), V(local), V(aws), V(gcp)), C(gpufleet_region),
          C(gpufleet_instance_type), C(gpufleet_price) (per hour), C(gpufleet_spot),
          C(gpufleet_created): what the backend says about the instance."
        - "C(gpufleet_internal_ip), C(gpufleet_network), C(gpufleet_blocks),
          C(gpufleet_placement), C(gpufleet_proxy_jump): the host's address within the fleet
          and the fleet's settings that apply to it."
      type: dict
      returned: success
      sample:
        ansible_host: 172.18.0.2
        ansible_port: 22
        ansible_user: gpufleet
        ansible_ssh_private_key_file: /home/me/.local/share/gpufleet/fleets/demo/id_ed25519
        ansible_ssh_common_args: >-
          -o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null -o IdentitiesOnly=yes
        ansible_control_path: "%(directory)s/gf-3f2a9c81d0e4"
        ansible_python_interpreter: /usr/bin/python3
        gpufleet_fleet: demo
        gpufleet_instance: demo-0
        gpufleet_instance_num: 0
        gpufleet_backend: local
        gpufleet_region: local
        gpufleet_instance_type: container
        gpufleet_price: 0.0
        gpufleet_spot: false
        gpufleet_created: "2026-11-21T10:00:00Z"
        gpufleet_internal_ip: 172.18.0.2
        gpufleet_network: null
        gpufleet_blocks: 1
        gpufleet_placement: cluster
        gpufleet_proxy_jump: null
state_dir:
  description: The state dir used (see O(state_dir)).
  returned: success
  type: str
  sample: /home/me/.local/share/gpufleet
release_vars:
  description:
    - For SSH fleets, the connection variables for a host that is no longer in the file (the
      fleet-level C(user), C(port), C(identity_file) and C(proxy_jump)), used to release it;
      null for backend fleets.
  returned: success
  type: dict
last_peers:
  description:
    - The instances that were ready at the fleet's last apply, each as a peer for
      M(gpufleet.cluster.preflight) (C(name), C(address), C(port)), at the internal IP
      measured then (from the facts cache in the state dir).
    - C(playbooks/fleet.yml) has each node of a C(placement) V(cluster) fleet try them in its
      first request, so that a no-change apply need not ask again.
  returned: when state is present
  type: list
  elements: dict
  sample:
    - {name: my-fleet-0, address: 10.0.0.5, port: 22}
    - {name: my-fleet-1, address: 10.0.0.6, port: 22}
removed:
  description:
    - With O(state=absent), the containers, volumes, networks and local files removed.
    - With O(instances), C(instances), the names of the instances removed (none for an SSH
      fleet, whose hosts are released by the play).
  returned: when state is absent
  type: dict
release_hosts:
  description:
    - With O(state=absent), for an SSH fleet, the hosts whose marker the play removes (all of
      them, or those of O(instances)), as RV(hosts) gives hosts; empty for backend fleets.
  returned: when state is absent
  type: list
  elements: dict
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.gpufleet.cluster.plugins.module_utils.core.module import (
    fail_json_on_error,
)
from ansible_collections.gpufleet.cluster.plugins.module_utils.fleets import converge
from ansible_collections.gpufleet.cluster.plugins.module_utils.tasks import listing


def main():
    module = AnsibleModule(
        argument_spec=converge.FLEET_ARGS,
        mutually_exclusive=converge.MUTUALLY_EXCLUSIVE,
        required_one_of=converge.REQUIRED_ONE_OF,
        required_if=converge.REQUIRED_IF,
        supports_check_mode=True,
    )
    with fail_json_on_error(module):
        result = converge.converge(module.params, listing.runs_alive, module.check_mode,
                                   warn=module.warn)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
