# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Network volumes at task time (docs/reference/dstack-files.md#volume-mounts): the run placed where
its first job's volumes are, each job's volumes attached to its host and mounted where the container
binds them.

    where = locate(config, run, clients, regions)           # {"backend", "region", "zone"}
    config = steer(config, where)                            # for placement
    attach_and_mount(config, placed, run, nodes, clients)   # before the containers start

``clients`` maps a backend (aws, gcp, local) to its volume client (backends/aws.py, gcp.py,
local_volumes.py). A local volume is a folder in the engine's volume pool, which every local
node mounts; attaching it moves it to the job's node, unless a running container on the node
that holds it uses it, and the node bind-mounts its folder (docs/volumes.md "Local volumes").
A job's volume names are filled per node (``${{ dstack.node_rank }}``) by volumes/mounts.py. A volume is
attached to the job's instance unless it already is; one attached to another host is refused
with the host named (the run that uses it there must stop first). The host then formats it if
it is blank and mounts it at /mnt/disks/dstack-volumes/<name> (tasks.hostside.volumeside).
"""

from __future__ import annotations

from typing import Any

from ..backends.errors import BackendError
from ..backends.local import NODE_POOL_DIR
from .mounts import VolumeError, mounts

CLOUD = ("aws", "gcp")
BACKENDS = CLOUD + ("local",)
MOUNT_WAIT = 120


def network_names(config: dict[str, Any], job: dict[str, Any], run: str) -> list[str]:
    return [m["name"] for m in mounts(config, job, run) if m["kind"] == "network"]


def _location(backend, found):
    if backend == "aws":
        return found["AvailabilityZone"]
    if backend == "local":
        return None   # one place: any local node may take it
    return found[0]


def locate(config: dict[str, Any], run: str, clients: Any, regions: Any) -> dict[str, Any] | None:
    """Where the first job's network volumes live: ``{"backend", "region", "zone"}``, or None
    without network volumes. ``regions`` maps each backend of ``clients`` to the regions to
    look in. A run goes where its first job's volumes are
    (docs/reference/dstack-files.md#volume-mounts)."""
    names = network_names(config, {"job_num": 0}, run)
    if not names:
        return None
    where = None
    for name in names:
        found_at = None
        for backend in sorted(clients):
            for region in regions.get(backend) or []:
                try:
                    found = clients[backend].volume(name, region)
                except BackendError as exc:
                    raise VolumeError(str(exc)) from exc
                if found is not None:
                    found_at = {"backend": backend, "region": region,
                                "zone": _location(backend, found)}
                    break
            if found_at:
                break
        if found_at is None:
            raise VolumeError("network volume %s was not found in any region of the %s "
                              "backend settings: create it first (gpufleet apply -f <volume "
                              "file>)" % (name, ", ".join(sorted(clients)) or "cloud"))
        if where is not None and found_at != where:
            raise VolumeError("network volumes %s and %s are in different places (%s, %s): a "
                              "job's volumes must share a zone" % (
                                  names[0], name, where["zone"], found_at["zone"]))
        where = found_at
    return where


def steer(config: dict[str, Any], where: dict[str, Any]) -> dict[str, Any]:
    """The config narrowed to the volumes' backend, region and zone, for placement."""
    if where["backend"] == "local":
        return dict(config, backends=["local"])
    return dict(config, backends=[where["backend"]], regions=[where["region"]],
                availability_zones=[where["zone"]])


def attach_and_mount(config: dict[str, Any], placed: Any, run: str, nodes: dict[str, Any],
                     clients: Any) -> dict[str, list[dict[str, Any]]]:
    """Attach and mount every job's network volumes; returns ``{host: [mount answers]}``."""
    done: dict[str, Any] = {}
    for job in placed["jobs"]:
        names = network_names(config, job, run)
        if not names:
            continue
        host = job["host"]
        instance = nodes[host].instance
        backend = instance.get("backend")
        if backend not in BACKENDS or backend not in clients:
            raise VolumeError(
                "network volume %s: job %d runs on %s, a %s host; network volumes attach to "
                "local nodes and aws and gcp instances only (use an instance volume, "
                "/host/path:/path, on other hosts)" % (names[0], job["job_num"], host, backend))
        client = clients[backend]
        region = instance["region"]
        try:
            raw = client.host_instance(instance)
            for name in names:
                found = client.volume(name, region)
                if found is None:
                    raise VolumeError(
                        "network volume %s was not found in %s (%s): create it first "
                        "(gpufleet apply -f <volume file>)" % (name, region, backend))
                payload = {"name": name, "wait": MOUNT_WAIT}
                if backend == "local":
                    payload["pool"] = NODE_POOL_DIR
                    payload["devices"] = client.attach_volume(name, region, found, raw, run=run)
                else:
                    payload["devices"] = client.attach_volume(name, region, found, raw)
                answer = nodes[host].call("mount_volume", payload)
                done.setdefault(host, []).append(dict(answer, name=name))
        except BackendError as exc:
            raise VolumeError(str(exc)) from exc
    return done
