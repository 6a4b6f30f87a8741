# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""A task's ``volumes`` as one job sees them (docs/reference/dstack-files.md#volume-mounts):
instance volumes bound from the host, network volumes named per node (``${{ dstack.node_rank }}``)
and bound from where the host mounts them. Pure Python: the rank plan, placement and attaching all
ask ``mounts``.
"""

from __future__ import annotations

import posixpath
from typing import Any

from ..core.errors import GpufleetError
from ..spec import interpolation

# Where a host mounts a network volume; tasks/hostside/volumeside.py, which is sent to the hosts
# on its own, keeps the same value (a unit test holds the two together).
NETWORK_VOLUMES_ROOT = "/mnt/disks/dstack-volumes"
NETWORK_VOLUMES_DIR = NETWORK_VOLUMES_ROOT


class VolumeError(GpufleetError):
    """A volume that cannot be made, found, attached or mounted as asked; the message says why."""


def mounts(config: dict[str, Any], job: dict[str, Any], run: str) -> list[dict[str, Any]]:
    """The task's ``volumes`` for one job (docs/reference/dstack-files.md#volume-mounts), names
    filled per node."""
    out = []
    for index, volume in enumerate(config.get("volumes") or []):
        field = "volumes[%d]" % index
        kind = volume.get("type")
        if kind == "instance":
            out.append({
                "kind": "instance",
                "source": volume["instance_path"],
                "target": volume["path"],
                "optional": bool(volume.get("optional")),
            })
        elif kind == "network":
            names = volume.get("name")
            name = names[0] if isinstance(names, list) else names
            if not name:
                raise VolumeError("%s.name: a network volume needs a name" % field)
            num = job["job_num"]
            try:
                name = interpolation.interpolate(
                    name, {"dstack": {"job_num": num, "node_rank": num}}
                )
            except interpolation.InterpolationError as exc:
                raise VolumeError("%s.name: %s" % (field, exc)) from exc
            out.append({
                "kind": "network",
                "name": name,
                "target": volume["path"],
                "source": posixpath.join(NETWORK_VOLUMES_DIR, name),
            })
        else:
            raise VolumeError("%s: unknown volume type %r (network or instance)" % (field, kind))
    return out
