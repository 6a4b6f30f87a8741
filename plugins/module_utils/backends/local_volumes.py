# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Network volumes of the ``local`` backend: folders in one Docker volume, attached to one node
at a time as a cloud disk is to one instance.

The pool is the Docker volume ``gpufleet-volumes``: a folder and a JSON record per volume,
changed only by localpool.py (sent to a throwaway ``docker run --network none`` container of
the node image, under the pool's lock). Every local node mounts the pool at
``/var/lib/gpufleet/volumes`` (NODE_POOL_DIR); at task time the volume is attached to the node
of the job (the record's holder) and the node bind-mounts its folder where it mounts a cloud
volume (``/mnt/disks/dstack-volumes/<name>``, tasks.hostside.volumeside ``mount_volume``).

A volume is in use, and neither moves to another node nor is deleted, while its holder node
runs and either a running container there binds it or the attach is younger than
localpool.FRESH_S and its run submission has no container there yet (the job is starting). A
holder that is gone or stopped holds nothing.

    pool = Pool(docker)
    pool.volume(name, "local")                 # the pool's record (with ``attached``), or None
    pool.create_volume(name, "local", None, size_gb)
    pool.delete_volume(name, "local", raw)     # BackendError while in use
    [folder] = pool.attach_volume(name, "local", raw, pool.host_instance(record))
"""

from __future__ import annotations

import getpass
import json
import socket
import time
from typing import Any, Iterable

from .docker_cli import Docker

from ..core.files import module_source
from . import localpool
from .docker_cli import DockerError
from .errors import BackendError
from .interface import VolumeBackend
from .local import NODE_POOL_DIR, POOL_VOLUME, ensure_node_image, pool_mount

__all__ = ("NODE_POOL_DIR", "POOL_VOLUME", "Pool", "ensure_pool", "node_folder", "pool_mount",
           "volume_record", "who")

POOL_LABEL = "gpufleet.pool"
# The job containers' labels that name their run submission (tasks/container.py sets them).
RUN_ID_LABEL = "gpufleet.run-id"
SUBMISSION_LABEL = "gpufleet.submission"
# Where a node mounts a network volume (volumes/mounts.py, tasks/hostside/volumeside.py keep it
# too).
MOUNT_ROOT = "/mnt/disks/dstack-volumes"
REGION = "local"


def who() -> str:
    """Who makes a record: ``user@host`` of this controller."""
    try:
        user = getpass.getuser()
    except (KeyError, OSError):
        user = "unknown"
    return "%s@%s" % (user, socket.gethostname())


def node_folder(name: str) -> str:
    """Where a node sees the folder of volume ``name`` (localpool.py's ``data/<name>``)."""
    return "%s/data/%s" % (NODE_POOL_DIR, name)


def _iso(seconds):
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(seconds))


def _with_fleet(raw, live):
    return dict(raw, fleet=(live.get(raw.get("attached")) or (None, None))[1])


def volume_record(name: str, raw: dict[str, Any]) -> dict[str, Any]:
    """A volume record (volumes/provision.py's) of a pool record (``fleet``: the fleet of the
    node it is attached to, for ``attached_fleets``)."""
    attached = raw.get("attached")
    return {
        "name": name, "backend": "local", "region": REGION, "availability_zone": None,
        "size": raw.get("size"), "volume_id": None, "status": "active", "external": False,
        "attached_to": [attached] if attached else [],
        "attached_fleets": [raw["fleet"]] if attached and raw.get("fleet") else [],
        "created": raw.get("created"), "created_by": raw.get("created_by"),
    }


def ensure_pool(docker: Docker) -> None:
    """The pool's Docker volume, made when missing (labelled, so it is known as gpufleet's)."""
    rc, _out, _err = docker.run("volume", "inspect", POOL_VOLUME, check=False)
    if rc != 0:
        docker.run("volume", "create", "--label", "%s=true" % POOL_LABEL, POOL_VOLUME)


class Pool(VolumeBackend):
    """The local backend's network volumes (interface.VolumeBackend) on the engine ``docker``.
    ``image`` runs localpool.py (default: the node image, built when missing)."""

    name = "local"

    def __init__(self, docker, image=None):
        self.docker = docker
        self.image = image

    # -- the pool program and the engine

    def _image(self):
        if self.image is None:
            self.image = ensure_node_image(self.docker)[0]
        return self.image

    def pool_exists(self) -> bool:
        rc, _out, _err = self.docker.run("volume", "inspect", POOL_VOLUME, check=False)
        return rc == 0

    def call(self, op: str, args: dict[str, Any]) -> dict[str, Any]:
        """Run localpool.py's ``op``; its answer, BackendError on a refusal. Only ``create``
        makes the pool when the engine has none."""
        try:
            if op == "create":
                ensure_pool(self.docker)
            out = self.docker.run("run", "--rm", "-i", "--network", "none", "-v",
                                  "%s:/pool" % POOL_VOLUME, self._image(), "python3", "-", op,
                                  json.dumps(args), stdin=module_source(vars(localpool)))
        except DockerError as exc:
            raise BackendError("local volumes: %s" % exc) from exc
        try:
            answer = json.loads(out.strip().splitlines()[-1])
        except (ValueError, IndexError) as exc:
            raise BackendError("local volumes: the pool answered %r to %s" % (out[-300:], op)) from exc
        if answer.get("error"):
            raise BackendError("local volume: %s" % answer["error"])
        return answer

    def running(self) -> dict[str, tuple[str, str | None]]:
        """``{id or name: (name, fleet)}`` of every running container of the engine."""
        out = self.docker.run("ps", "--no-trunc", "--format",
                              '{{.ID}}\t{{.Names}}\t{{.Label "gpufleet.fleet"}}')
        found = {}
        for line in out.splitlines():
            parts = line.split("\t")
            if len(parts) == 3:
                found[parts[0]] = found[parts[1]] = (parts[1], parts[2] or None)
        return found

    def containers(self, holder: str | None,
                   name: str) -> list[tuple[str, bool, str | None, list[str]]]:
        """``[(name, running, "run id/submission", [mount sources])]`` of every container on
        node ``holder``; BackendError when the node cannot tell (the volume then counts as in
        use: nothing is booked twice on a guess)."""
        script = ("docker ps -aq | xargs -r docker inspect --format '{{.Name}} {{.State.Running}} "
                  "{{index .Config.Labels \"%s\"}}/{{index .Config.Labels \"%s\"}}"
                  "{{range .Mounts}} {{.Source}}{{end}}'" % (RUN_ID_LABEL, SUBMISSION_LABEL))
        rc, out, err = self.docker.run("exec", holder, "sh", "-c", script, check=False)
        if rc != 0:
            raise BackendError("local volume %s: node %s could not list its containers (%s); "
                               "the volume counts as in use until the node answers or is "
                               "removed" % (name, holder, err.strip()[-300:]))
        found = []
        for line in out.splitlines():
            fields = line.split()
            if len(fields) >= 3:
                found.append((fields[0].lstrip("/"), fields[1] == "true", fields[2], fields[3:]))
        return found

    def in_use(self, raw: dict[str, Any]) -> str | None:
        """Why the volume cannot move or go now, or None when it can: its holder node runs and
        a running container there binds it, or it was attached there less than
        localpool.FRESH_S ago for a run submission that has no container there yet."""
        holder = raw.get("attached")
        if not holder:
            return None
        wanted = "%s/%s" % (MOUNT_ROOT, raw["name"])
        found = self.containers(holder, raw["name"])
        for container, running, _run, sources in found:
            if running and wanted in sources:
                return "in use on node %s by container %s" % (holder, container)
        run = raw.get("attached_for") or {}
        started = "%s/%s" % (run.get("id"), run.get("submission"))
        if raw.get("fresh") and not any(r == started for _c, _r2, r, _s in found):
            return ("attached to node %s less than %d s ago, for a run starting there"
                    % (holder, localpool.FRESH_S))
        return None

    # -- interface.VolumeBackend

    def volume(self, name: str, region: str = REGION) -> dict[str, Any] | None:
        """The pool's record of ``name`` (with ``attached``, ``fresh``, ``fleet``), or None;
        none without a pool (nothing is made by looking)."""
        if not self.pool_exists():
            return None
        live = self.running()
        raw = self.call("describe", {"name": name, "live": sorted(live)})["volume"]
        return _with_fleet(raw, live) if raw else None

    def all_volumes(self,
                    regions: Iterable[str] | None = None) -> list[tuple[str, str, dict[str, Any]]]:
        """Every local volume; none when the engine has no pool yet (nothing is made)."""
        if not self.pool_exists():
            return []
        live = self.running()
        raws = self.call("list", {"live": sorted(live)})["volumes"]
        return [(r["name"], REGION, _with_fleet(r, live)) for r in raws]

    def first_zone(self, region: str) -> str | None:
        return None

    def create_volume(self, name: str, region: str, zone: str | None, size_gb: int,
                      config_tags: dict[str, str] | None = None) -> dict[str, Any]:
        answer = self.call("create", {"name": name, "size": size_gb, "created": _iso(time.time()),
                                      "created_by": who()})
        return answer["volume"]

    def register_volume(self, name: str, region: str, volume_id: str) -> dict[str, Any] | None:
        raise BackendError("volume %s: a local volume cannot be registered (volume_id): remove "
                           "volume_id and set size to make one" % name)

    def delete_volume(self, name: str, region: str, volume: dict[str, Any]) -> None:
        why = self.in_use(volume)
        if why:
            raise BackendError("volume %s is %s: stop the run that uses it (gpufleet stop), "
                               "then delete the volume" % (name, why))
        self.call("delete", {"name": name, "generation": volume["generation"]})

    def host_instance(self, record: dict[str, Any]) -> Any:
        """The node container of a local instance record."""
        return record["container"]

    def attach_volume(self, name: str, region: str, volume: dict[str, Any], instance: Any,
                      run: dict[str, Any] | None = None) -> Any:
        """Attach the volume to the node container ``instance`` (moving it from a node where
        it is not in use) for ``run`` (``{"id", "submission"}``: the submission whose job
        will bind it); returns the folder the node bind-mounts, as a one-item list."""
        live = self.running()
        if instance not in live:
            raise BackendError("volume %s: node %s is not running" % (name, instance))
        node_id = next(k for k, v in live.items() if v[0] == live[instance][0] and k != v[0])
        holder = volume.get("attached")
        if holder and holder != live[instance][0]:
            why = self.in_use(volume)
            if why:
                raise BackendError(
                    "volume %s is %s; a volume is attached to one node at a time: stop the run "
                    "that uses it there first (gpufleet stop)" % (name, why))
        answer = self.call("attach", {
            "name": name, "generation": volume["generation"],
            "holder": {"id": node_id, "name": live[instance][0]},
            "run": {"id": str((run or {}).get("id") or ""),
                    "submission": str((run or {}).get("submission") or 0)}})
        previous = (answer.get("previous") or {}).get("name")
        if previous and previous != live[instance][0] and previous in live:
            # Released: the old node no longer shows the volume where jobs bind it.
            self.docker.run("exec", previous, "umount", "%s/%s" % (MOUNT_ROOT, name),
                            check=False)
        return [node_folder(name)]

    def detach_volume(self, name: str, region: str, volume: dict[str, Any]) -> None:
        """Free the volume of its holder node, unless a run there uses it."""
        holder = volume.get("attached")
        if not holder:
            return
        why = self.in_use(volume)
        if why:
            raise BackendError("volume %s is %s: stop that run first" % (name, why))
        self.call("release", {"name": name, "holder": holder})
        self.docker.run("exec", holder, "umount", "%s/%s" % (MOUNT_ROOT, name), check=False)
