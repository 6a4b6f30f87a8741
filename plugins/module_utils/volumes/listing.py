# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Every network volume the clouds hold, as ``dstack volume list`` lists them.

A volume has no record but the mark on the cloud's volume (provision.py): the tag
``gpufleet:volume`` on an EBS volume, the label ``gpufleet-volume`` on a persistent disk. So the
listing asks each cloud backend the settings configure (as fleets/cloud.py ``discover`` asks for
fleets) for every volume carrying that mark, in the regions a fleet of that backend may use, and
makes the volume records provision.py makes. Local volumes (backends/local_volumes.py) are
listed too when this machine's Docker engine answers; without an engine there are none.

    records = list_volumes(settings, catalog_dir)   # newest first

Each record gets ``attached_fleets``: the fleets whose instances the volume is attached to (what
dstack's ATTACHED column shows), found from the instances' own tags and labels.
"""

from __future__ import annotations

from typing import Any

from ..backends import aws_layout, base, local_volumes
from ..backends import gcp as gcp_backend
from ..backends.docker_cli import Docker, DockerError
from ..backends.errors import BackendError
from ..core.times import parse_time
from ..fleets import cloud
from .mounts import VolumeError

RECORDS = {"aws": aws_layout.volume_record,
           "gcp": lambda name, _region, found: gcp_backend.volume_record(name, *found)}


def local_records(pool: Any = None) -> list[dict[str, Any]]:
    """Records of the local volumes; none when the Docker engine does not answer."""
    try:
        if pool is None:
            docker = Docker()
            docker.ping()
            pool = local_volumes.Pool(docker)
        return [local_volumes.volume_record(name, raw) for name, _r, raw in pool.all_volumes()]
    except DockerError:
        return []
    except BackendError as exc:
        raise VolumeError(str(exc)) from exc


def _fleets_by_instance(client, regions):
    """``{instance id or name: fleet}`` of every gpufleet instance in ``regions``."""
    owners = {}
    for fleet, placed in client.all_fleet_instances(regions).items():
        for record in client.records(placed, fleet, None):
            owners[record["name"]] = fleet
            if record.get("instance_id"):
                owners[str(record["instance_id"])] = fleet
    return owners


def _newest_first(records):
    def key(record):
        moment = parse_time(record.get("created"))
        return (moment is None, -moment.timestamp() if moment else 0.0)

    return sorted(sorted(records, key=lambda r: (r["name"], r["backend"], r["region"])), key=key)


def list_volumes(settings: dict[str, Any] | None, catalog_dir: str | None = None,
                 clients: Any = None) -> list[dict[str, Any]]:
    """Volume records (provision.py's, with ``attached_fleets``) of every gpufleet volume the
    cloud backends with a section in ``settings`` hold, and the local ones, newest first.
    ``clients`` maps backend names to clients to use instead of making them (tests; local
    volumes are then listed only from a ``local`` client)."""
    records = []
    if clients is None or "local" in clients:
        records = local_records((clients or {}).get("local"))
    for backend in base.CLOUD_BACKENDS:
        if backend not in (settings or {}) and backend not in (clients or {}):
            continue
        try:
            client = (clients or {}).get(backend) or base.client(backend, settings)
            regions = cloud.regions({}, settings, backend, catalog_dir)
            found = [RECORDS[backend](name, region, raw)
                     for name, region, raw in client.all_volumes(regions)]
            owners = {}
            if any(r["attached_to"] for r in found):
                owners = _fleets_by_instance(client, regions)
        except (BackendError, cloud.CloudError) as exc:
            raise VolumeError(str(exc)) from exc
        for record in found:
            record["attached_fleets"] = sorted(set(
                owners[i] for i in record["attached_to"] if i in owners))
            records.append(record)
    return _newest_first(records)
