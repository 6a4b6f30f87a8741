# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Plain helpers the tests of fleets share."""

from __future__ import annotations

from ansible_collections.gpufleet.cluster.plugins.module_utils.backends import local


def running_local_node(fleet, num, placement="cluster", ip=None, spec=None):
    """A running node of the local backend as its listing gives it: the container's labels
    (``spec``: the spec label too) and its address on the fleet's network."""
    labels = {local.FLEET_LABEL: fleet, local.INSTANCE_LABEL: str(num),
              local.PLACEMENT_LABEL: placement, local.CREATED_LABEL: "2026-11-21T10:00:00Z"}
    if spec is not None:
        labels[local.SPEC_LABEL] = spec
    return {"id": "c%d" % num, "name": local.container_name(fleet, num), "state": "running",
            "labels": labels, "created": "2026-11-21T10:00:00Z",
            "networks": {local.network_name(fleet, num, placement):
                         ip or "172.20.0.%d" % (num + 2)}}
