# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Network volumes (``type: volume``, docs/reference/dstack-files.md#volume-files) in the clouds:
EBS volumes on aws, persistent disks on gcp, created, registered (an existing ``volume_id``) and
deleted; and on the local backend, folders in the engine's volume pool (backends/local_volumes.py).

The volume's name is a tag (aws ``gpufleet:volume``) or label (gcp ``gpufleet-volume``) on the
volume itself, the only record; a registered volume is also marked external, so deleting it
only takes those marks off and never destroys the user's data. A volume record is::

    {"name", "backend", "region", "availability_zone", "size" (GB), "volume_id",
     "status" (submitted, active, failed, terminated), "external", "attached_to", "created"}
"""

from __future__ import annotations

from typing import Any

from ..backends import aws_layout
from ..backends import base
from ..backends import gcp as gcp_backend
from ..backends import local_volumes
from ..backends.docker_cli import Docker
from ..backends.errors import BackendError
from ..spec import support
from .mounts import VolumeError

RECORDS = {"aws": aws_layout.volume_record,
           "gcp": lambda name, _region, found: gcp_backend.volume_record(name, *found),
           "local": lambda name, _region, found: local_volumes.volume_record(name, found)}


def _client(config, settings, client):
    backend = config["backend"]
    why = support.volume_backend_refusal(backend)   # what gpufleet validate reports too
    if why:
        raise VolumeError("volume %s: %s" % (config.get("name"), why))
    if client is not None:
        return client
    if backend == "local":
        return local_volumes.Pool(Docker())   # the pool on this machine's engine
    try:
        return base.client(backend, settings)
    except BackendError as exc:
        raise VolumeError(str(exc)) from exc


def _record(config, name, found):
    if found is None:
        return {"name": name, "backend": config["backend"], "region": config["region"] or None,
                "availability_zone": config.get("availability_zone"),
                "size": config.get("size"), "volume_id": config.get("volume_id"),
                "status": "terminated", "external": bool(config.get("volume_id")),
                "attached_to": [], "created": None}
    return RECORDS[config["backend"]](name, config["region"], found)


def describe(config: dict[str, Any], name: str, settings: dict[str, Any] | None = None,
             client: Any = None) -> dict[str, Any]:
    client = _client(config, settings, client)
    try:
        return _record(config, name, client.volume(name, config["region"]))
    except BackendError as exc:
        raise VolumeError(str(exc)) from exc


def apply(config: dict[str, Any], name: str, settings: dict[str, Any] | None = None,
          check_mode: bool = False, client: Any = None) -> tuple[dict[str, Any], bool]:
    """Make the volume exist: create it, or register ``volume_id``. Returns (record, changed)."""
    client = _client(config, settings, client)
    region = config["region"]
    try:
        found = client.volume(name, region)
        if found is not None:
            return _record(config, name, found), False
        if check_mode:
            return dict(_record(config, name, None), status="submitted"), True
        if config.get("volume_id"):
            found = client.register_volume(name, region, config["volume_id"])
        else:
            zone = config.get("availability_zone") or client.first_zone(region)
            found = client.create_volume(name, region, zone, config["size"],
                                         config.get("tags"))
            if config["backend"] == "aws":
                found = client.volume(name, region) or found
    except BackendError as exc:
        raise VolumeError(str(exc)) from exc
    return _record(config, name, found), True


def delete(config: dict[str, Any], name: str, settings: dict[str, Any] | None = None,
           check_mode: bool = False, client: Any = None) -> tuple[dict[str, Any], bool]:
    """Delete the volume (an external one is only released). Returns (record, changed)."""
    client = _client(config, settings, client)
    region = config["region"]
    try:
        found = client.volume(name, region)
        if found is None:
            return _record(config, name, None), False
        record = _record(config, name, found)
        if not check_mode:
            client.delete_volume(name, region, found)
    except BackendError as exc:
        raise VolumeError(str(exc)) from exc
    return dict(record, status="terminated"), True
