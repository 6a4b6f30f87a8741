#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: host_facts
short_description: Gather what a fleet host offers (GPUs, CPUs, memory, disk, addresses)
version_added: 0.1.0
description:
  - Gathers, on the managed host, the facts dstack's agent reports when an SSH fleet host is
    added, computed the same way, and sets them as the C(gpufleet_host) fact.
  - "GPUs: the vendor is judged from device paths, in this order: C(/dev/nvidiactl) (NVIDIA),
    C(/dev/dxg) with C(/usr/lib/wsl/lib/nvidia-smi) (NVIDIA under WSL2), C(/dev/tenstorrent)
    (Tenstorrent), C(/dev/kfd) (AMD), C(/dev/accel) (Intel Gaudi). Only that vendor's tool runs:
    C(nvidia-smi), C(amd-smi), C(hl-smi) or C(tt-smi), with the queries dstack uses."
  - When the vendor's tool is not on the host's PATH, the GPUs are counted from their device
    nodes (C(/dev/nvidiaN), C(/dev/dri/renderD*), C(/dev/accel/accel*), C(/dev/tenstorrent/N))
    with a warning, and have no name or memory. dstack runs C(amd-smi) and C(tt-smi) from its own
    container images; this module never pulls an image or starts a container.
  - All GPUs of a host are taken to be alike, as in dstack; the count, the name and memory of the
    first GPU describe them. Names are shortened the way dstack does (C(NVIDIA H100 80GB HBM3)
    becomes V(H100)) and memory close to a known size of the model is set to that size.
  - "The rest: logical CPUs this process may use (the CPU affinity mask), total memory
    (C(MemTotal)), the disk space B(available) on Docker's root directory (from
    C(docker info), else C(/var/lib/docker)), and the host's non-loopback addresses in interface
    order (from C(ip -j addr), else from the kernel)."
  - With O(internal_ip), O(network) and O(blocks), it also chooses the address other hosts of the
    fleet reach this one on, and splits the host into blocks, failing the way dstack fails to add
    such a host.
  - A tool that fails, or prints output that cannot be read, fails the task with a message
    naming the tool and what is wrong.
author:
  - gpufleet maintainers (@gpufleet)
options:
  internal_ip:
    description:
      - The IPv4 address the other hosts of the fleet reach this host on, as given for the host in
        the fleet configuration (C(ssh_config.hosts[].internal_ip)).
      - It must be one of the host's addresses, or the task fails with C(Specified internal IP not
        found among instance interfaces).
      - Takes precedence over O(network).
    type: str
  network:
    description:
      - The private network the hosts of the fleet share, as in the fleet configuration
        (C(ssh_config.network)), for example V(10.0.0.0/24).
      - The first IPv4 address of the host inside it becomes the fact's C(internal_ip).
        If there is none, or the network is not a private network written without host bits, the
        task fails with C(Failed to locate internal IP address on the given network).
      - Without O(internal_ip) and O(network), the host's first IPv4 address is used.
    type: str
  blocks:
    description:
      - How many blocks the host is split into for jobs that share it, as the fleet's C(blocks).
        A whole number of at least 1, or V(auto) for one block per GPU (one per CPU on a host
        without GPUs).
      - The number must divide both the CPUs and the GPUs of the host, or the task fails with
        C(Cannot split into blocks).
    type: raw
    default: 1
extends_documentation_fragment:
  - gpufleet.cluster.attributes
  - gpufleet.cluster.attributes.info_module
  - gpufleet.cluster.attributes.action_group
notes:
  - The shape of the fact, field by field, is described in C(docs/host-facts.md) in the
    collection.
  - Run it with C(become) when the GPU tool or Docker needs root on the host.
seealso:
  - module: gpufleet.cluster.config_info
"""

EXAMPLES = r"""
- name: Gather the facts of every host of an SSH fleet
  gpufleet.cluster.host_facts:

- name: Show what each host offers
  ansible.builtin.debug:
    msg: >-
      {{ gpufleet_host.gpu.count }} x {{ gpufleet_host.gpu.name | default('no GPU', true) }},
      {{ gpufleet_host.cpus }} CPUs, {{ gpufleet_host.memory.mib }} MiB RAM,
      reachable on {{ gpufleet_host.internal_ip }}

- name: Choose the address on the cluster network and split each host into one block per GPU
  gpufleet.cluster.host_facts:
    network: 10.0.0.0/24
    blocks: auto
  become: true

- name: Use the internal IP given for the host in the fleet configuration
  gpufleet.cluster.host_facts:
    internal_ip: "{{ fleet_internal_ip }}"
"""

RETURN = r"""
ansible_facts:
  description:
    - Facts set for the host.
  returned: success
  type: dict
  contains:
    gpufleet_host:
      description:
        - What the host offers and how it was measured. Every key is always present; the full
          description is in C(docs/host-facts.md).
      returned: success
      type: dict
      contains:
        cpus:
          description: Logical CPUs this process may run on.
          returned: success
          type: int
          sample: 16
        memory:
          description: Total memory, as C(bytes) and whole C(mib).
          returned: success
          type: dict
          sample: {"bytes": 270099996672, "mib": 257587}
        disk:
          description:
            - Space available on Docker's root directory (C(available_bytes), C(available_mib)),
              the directory (C(path)), where its name came from (C(source), V(docker) or
              V(default)) and the directory actually measured (C(measured_path)).
          returned: success
          type: dict
          sample:
            available_bytes: 1870199922688
            available_mib: 1783561
            path: /var/lib/docker
            measured_path: /var/lib/docker
            source: docker
        addresses:
          description:
            - The host's addresses except loopback ones, as CIDR strings, IPv6 included, in
              interface order.
          returned: success
          type: list
          elements: str
          sample: ["10.0.0.5/24", "fe80::5054:ff:fe54:bfcd/64", "172.17.0.1/16"]
        addresses_source:
          description: Where the addresses came from, V(ip) (C(ip -j addr)) or V(kernel).
          returned: success
          type: str
          sample: ip
        internal_ip:
          description:
            - The IPv4 address the other hosts of the fleet reach this one on; null when the host
              has no IPv4 address and neither O(internal_ip) nor O(network) was given.
          returned: success
          type: str
          sample: 10.0.0.5
        internal_ip_source:
          description: How it was chosen, V(internal_ip), V(network) or V(auto).
          returned: success
          type: str
          sample: auto
        gpu:
          description:
            - The GPUs (C(vendor), C(count), short C(name), C(memory_mib) of each), the name and
              memory the tool reported (C(reported_name), C(reported_memory_mib)), the
              C(driver_version), the vendor the device paths showed (C(detected_vendor),
              C(detected_by)), the C(source) of the list and every GPU in C(devices).
          returned: success
          type: dict
          sample:
            vendor: nvidia
            count: 8
            name: H100
            memory_mib: 81920
            reported_name: NVIDIA H100 80GB HBM3
            reported_memory_mib: 81559
            driver_version: 570.86.15
            detected_vendor: nvidia
            detected_by: ["/dev/nvidiactl"]
            source: nvidia-smi
            devices: []
        blocks:
          description:
            - The C(requested) blocks, the C(total) the host is split into and what one block
              gives (C(per_block) C(cpus), C(memory_mib), C(gpus), C(disk_mib); the disk is shared).
          returned: success
          type: dict
          sample:
            requested: auto
            total: 8
            per_block: {"cpus": 2, "memory_mib": 32198, "gpus": 1, "disk_mib": 1783561}
        host_info:
          description:
            - The same facts in the shape of the C(host_info.json) file dstack's agent writes.
          returned: success
          type: dict
          sample:
            gpu_vendor: nvidia
            gpu_name: NVIDIA H100 80GB HBM3
            gpu_memory: 81559
            gpu_count: 8
            addresses: ["10.0.0.5/24"]
            disk_size: 1870199922688
            cpus: 16
            memory: 270099996672
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.gpufleet.cluster.plugins.module_utils.core.module import (
    fail_json_on_error,
)
from ansible_collections.gpufleet.cluster.plugins.module_utils.hosts.facts import (
    System,
    gather,
)


def main():
    module = AnsibleModule(
        argument_spec=dict(
            internal_ip=dict(type="str"),
            network=dict(type="str"),
            blocks=dict(type="raw", default=1),
        ),
        supports_check_mode=True,
    )
    system = System(run=module.run_command, which=module.get_bin_path)
    # The host facts code raises only HostFactsError; anything else is a bug in it.
    with fail_json_on_error(module, what="gpufleet host facts"):
        facts, warnings = gather(
            system,
            internal_ip=module.params["internal_ip"],
            network=module.params["network"],
            blocks=module.params["blocks"],
        )

    for warning in warnings:
        module.warn(warning)
    module.exit_json(changed=False, ansible_facts={"gpufleet_host": facts})


if __name__ == "__main__":
    main()
