#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: local_node_image
short_description: Build the node image of the local backend without a registry
version_added: 0.1.0
description:
  - Makes sure this machine's Docker engine has the image that the nodes of local fleets
    (fleets whose C(backends) list V(local)) run. It is Debian with sshd, its own Docker engine,
    and a C(gpufleet) login user with passwordless sudo.
  - No registry is needed. When the image is missing, C(debootstrap) builds a Debian root
    filesystem from a package mirror and C(docker import) turns it into the image.
  - The image tag is a digest of the recipe, so an existing image of the same recipe is reused
    and a newer recipe builds a new image next to the old one.
  - The engine must be running; when it is not, the task fails saying what to install or start.
author:
  - gpufleet maintainers (@gpufleet)
requirements:
  - The C(docker) command and a running Docker engine on the host the module runs on.
  - C(debootstrap), and root (C(become)), when the image has to be built.
options:
  mirror:
    description:
      - The Debian package mirror C(debootstrap) reads when the image has to be built.
    type: str
    default: http://deb.debian.org/debian
  workdir:
    description:
      - Directory for the temporary root filesystem (about 700 MB) while building.
      - The system's temporary directory when not set.
    type: path
extends_documentation_fragment:
  - gpufleet.cluster.attributes
  - gpufleet.cluster.attributes.action_group
attributes:
  check_mode:
    support: full
    details: In check mode nothing is built; the task reports a change when a build is due.
  diff_mode:
    support: none
  idempotent:
    support: full
"""

EXAMPLES = r"""
- name: Make sure the local node image exists
  gpufleet.cluster.local_node_image:
  become: true
  register: node_image

- name: Show which image local nodes run
  ansible.builtin.debug:
    msg: "{{ node_image.image }}"
"""

RETURN = r"""
image:
  description: The image reference local nodes run, C(gpufleet/node:<recipe digest>).
  returned: success
  type: str
  sample: gpufleet/node:3f9c1a2b7d4e
engine_version:
  description: The version of the Docker engine that holds the image.
  returned: success
  type: str
  sample: 20.10.24+dfsg1
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.gpufleet.cluster.plugins.module_utils.core.module import (
    fail_json_on_error,
)
from ansible_collections.gpufleet.cluster.plugins.module_utils.backends import local
from ansible_collections.gpufleet.cluster.plugins.module_utils.backends.docker_cli import Docker


def main():
    module = AnsibleModule(
        argument_spec=dict(
            mirror=dict(type="str", default=local.DEFAULT_MIRROR),
            workdir=dict(type="path"),
        ),
        supports_check_mode=True,
    )
    docker = Docker()
    with fail_json_on_error(module):
        version = docker.ping()
        ref, built = local.ensure_node_image(
            docker,
            mirror=module.params["mirror"],
            workdir=module.params["workdir"],
            check_mode=module.check_mode,
        )
    module.exit_json(changed=built, image=ref, engine_version=version)


if __name__ == "__main__":
    main()
