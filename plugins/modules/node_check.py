#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: node_check
short_description: Say whether a host role applies to a host, and verify what it set up
version_added: 0.1.0
description:
  - The host roles of this collection (docker, nvidia, amd, efa, infiniband, gcp_gpudirect,
    firewall, dcgm) begin with O(stage=detect) and end with O(stage=verify).
  - With O(stage=detect) the module decides whether O(component) applies to the host, from what
    the host shows without changing it (PCI devices in sysfs, the cloud's metadata service), and
    says why in one sentence. A role that does not apply does nothing else, so a playbook can
    apply every role to a mixed fleet.
  - With O(stage=verify) the module reads the component's state (tools' output, files,
    services) and returns it as structured facts with C(ok) and a list of C(problems).
  - The module never changes the host.
author:
  - gpufleet maintainers (@gpufleet)
options:
  component:
    description: The component to detect or verify.
    type: str
    required: true
    choices: [docker, nvidia, amd, efa, infiniband, gcp_gpudirect, firewall, dcgm]
  stage:
    description:
      - V(detect) says whether O(component) applies; V(verify) returns its state.
    type: str
    choices: [detect, verify]
    default: verify
  detect:
    description:
      - With V(false), O(stage=detect) reports that the component applies without looking at
        the host, for installing on hosts without the hardware (machine images built on another
        instance type, test containers).
    type: bool
    default: true
  probe_hardware:
    description:
      - With O(stage=verify), also run the checks that need the hardware (the GPU tools,
        C(fi_info), C(ibstat), C(dcgmi)).
      - With V(false) only the installed software is verified (packages, files, services and
        settings).
    type: bool
    default: true
  aws_imds_url:
    description: The EC2 instance metadata service, asked for the instance type.
    type: str
    default: http://169.254.169.254
  gcp_metadata_url:
    description: The Compute Engine metadata server, asked for the machine type.
    type: str
    default: http://metadata.google.internal
  pci_root:
    description: Where the PCI devices are listed in sysfs.
    type: path
    default: /sys/bus/pci/devices
  expect:
    description:
      - What O(stage=verify) should find; each component documents the keys it reads (for
        example C(gpu_count) and C(driver_branch) for nvidia). A fact that differs from its
        expectation is a problem and makes C(ok) false.
    type: dict
    default: {}
  settings:
    description:
      - Component settings the check needs to find things (paths of configuration files,
        profile files, service names); each component documents the keys it reads.
    type: dict
    default: {}
extends_documentation_fragment:
  - gpufleet.cluster.attributes
  - gpufleet.cluster.attributes.info_module
  - gpufleet.cluster.attributes.action_group
notes:
  - The components and what each verifies are described in C(docs/roles.md) in the collection.
"""

EXAMPLES = r"""
- name: Find out whether the NVIDIA role applies
  gpufleet.cluster.node_check:
    component: nvidia
    stage: detect
  register: nvidia_detected

- name: Verify the driver, expecting eight GPUs
  gpufleet.cluster.node_check:
    component: nvidia
    expect:
      gpu_count: 8
  register: nvidia_state
"""

RETURN = r"""
check:
  description:
    - With O(stage=detect), C(applies), C(reason) and C(details).
    - With O(stage=verify), the component's facts, C(ok) and C(problems).
  returned: success
  type: dict
  sample:
    applies: false
    reason: no NVIDIA GPU among the host's PCI devices
    details: {}
"""

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.urls import open_url

from ansible_collections.gpufleet.cluster.plugins.module_utils.core.module import (
    fail_json_on_error,
)
from ansible_collections.gpufleet.cluster.plugins.module_utils.hosts.checks import (
    COMPONENTS,
    Detection,
    amd,
    dcgm,
    docker,
    efa,
    firewall,
    gcp_gpudirect,
    infiniband,
    nvidia,
)
from ansible_collections.gpufleet.cluster.plugins.module_utils.hosts.checks._system import (
    NodeSystem,
)


def _fetch(url, method="GET", headers=None, timeout=2):
    try:
        response = open_url(url, method=method, headers=headers or {}, timeout=timeout,
                            follow_redirects="safe")
        return response.getcode(), response.read().decode("utf-8", "replace")
    except Exception as exc:  # pylint: disable=broad-exception-caught
        code = getattr(exc, "code", None)
        if code is not None:
            return code, ""
        return None, str(exc)


IMPLEMENTATIONS = {
    "amd": amd, "dcgm": dcgm, "docker": docker, "efa": efa, "firewall": firewall,
    "gcp_gpudirect": gcp_gpudirect, "infiniband": infiniband, "nvidia": nvidia,
}


def main():
    module = AnsibleModule(
        argument_spec=dict(
            component=dict(type="str", required=True, choices=list(COMPONENTS)),
            stage=dict(type="str", choices=["detect", "verify"], default="verify"),
            detect=dict(type="bool", default=True),
            probe_hardware=dict(type="bool", default=True),
            aws_imds_url=dict(type="str", default="http://169.254.169.254"),
            gcp_metadata_url=dict(type="str", default="http://metadata.google.internal"),
            pci_root=dict(type="path", default="/sys/bus/pci/devices"),
            expect=dict(type="dict", default={}),
            settings=dict(type="dict", default={}),
        ),
        supports_check_mode=True,
    )
    params = module.params
    system = NodeSystem(run=module.run_command, which=module.get_bin_path, fetch=_fetch)
    with fail_json_on_error(module, what="gpufleet node_check",
                            prefix="%s %s: " % (params["component"], params["stage"])):
        impl = IMPLEMENTATIONS[params["component"]]
        if params["stage"] == "detect":
            if not params["detect"]:
                found = Detection(True, "detection is turned off for %s, so it is installed "
                                  "without looking for its hardware" % params["component"])
            else:
                found = impl.detect(system, params)
            check = found.as_dict()
        else:
            check = impl.verify(system, params)
    module.exit_json(changed=False, check=check)


if __name__ == "__main__":
    main()
