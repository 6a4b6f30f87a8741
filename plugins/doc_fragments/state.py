# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Shared options of the modules that use gpufleet's state directory on the controller.

Every such module extends ``gpufleet.cluster.state`` (O(state_dir)); those that reach the cloud
backends extend ``gpufleet.cluster.state.backend_settings`` as well.
"""

from __future__ import annotations


class ModuleDocFragment:

    # The state directory (fleets.state.state_dir reads the option the same way everywhere).
    DOCUMENTATION = r"""
options:
  state_dir:
    description:
      - gpufleet's state directory on the controller, where it keeps each fleet's key, known
        hosts and cached host facts, the fleet files it applied, C(backends.yml) (the cloud
        backends' default settings) and refreshed offer catalogs.
      - Defaults to E(GPUFLEET_STATE_DIR), else C($XDG_DATA_HOME/gpufleet), else
        C(~/.local/share/gpufleet).
    type: path
"""

    # The cloud backends' settings (fleets.state.backend_settings).
    BACKEND_SETTINGS = r"""
options:
  backend_settings:
    description:
      - "Settings of the cloud backends, by backend: C(aws) takes C(regions), C(vpc_ids) and
        C(subnet_ids) (by region), C(public_ips), C(image_id) (an AMI id, or one per region),
        C(image_owners), C(tags), C(iam_instance_profile) and C(retry_delays) (seconds between
        no-capacity retries); C(gcp) takes C(project_id), C(regions), C(vpc_name),
        C(subnetwork), C(extra_vpcs), C(roce_vpcs), C(public_ips), C(image),
        C(service_account), C(tags), C(endpoint) and C(retry_delays). See C(docs/backends.md)."
      - Defaults to the contents of C(backends.yml) in O(state_dir), else none.
      - Credentials are never settings; boto3 and google-auth find them as usual (environment
        variables such as those AWX injects, shared credential files, an instance profile or
        Application Default Credentials).
    type: dict
"""
