# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""A service's replicas on their host, after their start: made again (``respawn``), replaced by
a new version (``replace``), read back (``replica_info``), counted again after a scale-down
(``recount``) and taken away for good (``retire``). Each holds the booking lock
(tasks.hostside.booking) for its read-check-write, so a respawn, a roll and a scale-down of
one replica never interleave, and each renews or gives back the replica's share of its run's
claim there.

This file travels to the hosts after tasks.hostside.booking (tasks.ssh.Node.call sends the
sources and runs them in one namespace), so it uses the standard library only.
"""

import json
import os
import time

try:  # imported as part of the collection (tests, the controller)
    from .booking import BOOK_OPS, HOLDING_STATES, _claim_locked, _drop_shares, _Lock
    from .nodeside import (Failure, _docker, _job_key, _json_file, _run_container,
                           _small_file, _write, job_dir, op_start, op_status)
except ImportError:  # on a host: booking's and nodeside's sources run first in the namespace
    pass


def _respawn_locked(payload):
    """Make a service's replica again on this host from what its start kept (``start.json``),
    when its container is gone or has ended: the same folder and files, a new state. Answers
    ``{"respawned": bool, "why"}``; a replica that runs is left alone. Under the lock, with
    its claim renewed first: a host another run took after the replica went is not used, and
    two controllers asking at once make one container."""
    run, num = payload["run"], payload["job_num"]
    folder = job_dir(run, num)
    job = _json_file(os.path.join(folder, "start.json"))
    if not job or not job.get("container"):
        return {"respawned": False, "why": "replica %d of %s was not started here as a "
                                           "service's replica" % (num, run)}
    for item in op_status({"run": run})["containers"]:
        if item.get("name") == job["container"] and item.get("state") in HOLDING_STATES:
            return {"respawned": False, "why": "its container %s is %s"
                                               % (job["container"], item["state"])}
    if job.get("claim"):
        answer = _claim_locked(job["claim"], time.time())
        if not answer["claimed"]:
            return {"respawned": False, "why": "this host was taken meanwhile: %s"
                                               % answer["reason"]}
    _docker(["rm", "-f", job["container"]], check=False)
    import shutil

    state = os.path.join(folder, "state")
    shutil.rmtree(state, ignore_errors=True)
    os.makedirs(state, 0o755, exist_ok=True)
    if os.path.exists(os.path.join(folder, "created")):
        os.remove(os.path.join(folder, "created"))
    answer = _run_container(job, folder)
    if not answer.get("started"):
        return {"respawned": False, "why": "its container %s is there" % job["container"]}
    count = os.path.join(folder, "respawns")
    done = int((_small_file(count) or "0").strip() or 0) + 1
    _write(count, ("%d\n" % done).encode("utf-8"), 0o644)
    return {"respawned": True, "id": answer.get("id"), "respawns": done}


def op_respawn(payload):
    """``_respawn_locked`` under the booking lock."""
    run, num = _job_key(payload, "respawn")
    with _Lock():
        return _respawn_locked({"run": run, "job_num": num})


def op_replace(payload):
    """Replace a service's replica by ``job`` (a new version of it, services.rolling), under
    the lock, so that no respawn or start comes between: its claim taken over, the old
    container removed and its folder put aside, the new one started. When the new one cannot
    start, the old folder comes back and the old container is made again from it (a Failure
    that says so): a replica is never left gone."""
    job = payload["job"]
    run, num = _job_key(job, "replace")
    import shutil

    folder = job_dir(run, num)
    aside = folder + ".previous"
    with _Lock():
        if job.get("claim"):
            answer = _claim_locked(job["claim"], time.time())
            if not answer["claimed"]:
                raise Failure("cannot replace %s: this host cannot hold its new version: %s"
                              % (job["container"], answer["reason"]))
        _docker(["rm", "-f", job["container"]], check=False)
        shutil.rmtree(aside, ignore_errors=True)
        if os.path.isdir(folder):
            os.rename(folder, aside)
        try:
            answer = op_start({"job": job})
        except Failure as exc:
            shutil.rmtree(folder, ignore_errors=True)
            if os.path.isdir(aside):
                os.rename(aside, folder)
                again = _respawn_locked({"run": run, "job_num": num})
                raise Failure("%s; the previous version %s" % (
                    exc, "runs again" if again.get("respawned") else
                    "could not be made again: %s" % again.get("why"))) from exc
            raise
        shutil.rmtree(aside, ignore_errors=True)
    return answer


def op_replica_info(payload):
    """What a service's replica keeps of its start (``start.json``): ``{"kept": bool,
    "container", "placed", "claim", "config_digest", "resources"}`` (services.rolling reads
    it)."""
    run, num = _job_key(payload, "replica_info")
    kept = _kept_of(run, num, None) or {}
    return {"kept": bool(kept), "container": kept.get("container"),
            "placed": kept.get("placed"), "claim": kept.get("claim"),
            "config_digest": kept.get("config_digest"), "resources": kept.get("resources")}


def _kept_of(run, num, run_id):
    """A replica's ``start.json``, when it is ``run_id``'s (any, without one); else None."""
    kept = _json_file(os.path.join(job_dir(run, num), "start.json")) or {}
    if not kept or (run_id and (kept.get("claim") or {}).get("run_id") not in (None, run_id)):
        return None
    return kept


def op_recount(payload):
    """Note that a service's replica belongs to a service of ``replicas`` replicas now (a
    scale-down, before its last replicas are retired): its labels keep the count it was
    started with, and ``status`` reports this one instead (``files["replicas"]``)."""
    run, num = _job_key(payload, "recount")
    count = payload.get("replicas")
    if not isinstance(count, int) or count < 1:
        raise Failure("recount: bad replica count %r" % (count,))
    with _Lock():
        if _kept_of(run, num, payload.get("run_id")) is None:
            raise Failure("recount: replica %d of %s (run id %s) is not here"
                          % (num, run, payload.get("run_id")))
        _write(os.path.join(job_dir(run, num), "replicas"), ("%d\n" % count).encode("utf-8"),
               0o644)
    return {"recounted": True}


# What ``repoint`` may note of where a replica's service is published now (tasks.container's
# SERVICE_KEYS that say where, and when it moved).
PROXY_KEYS = ("proxy_host", "proxy_address", "proxy_port", "url", "model_url", "moved_at",
              "moved_from")


def op_repoint(payload):
    """Note beside a service's replica where its service is published now (its proxy host was
    lost and another host of its fleet proxies it, services.submit): its labels keep where it
    was first, and ``status`` reports this instead (``files["proxy"]``); a respawn keeps it."""
    run, num = _job_key(payload, "repoint")
    proxy = payload.get("proxy")
    if not isinstance(proxy, dict) or not proxy.get("proxy_host"):
        raise Failure("repoint: no proxy host given for replica %d of %s" % (num, run))
    note = dict((key, proxy.get(key)) for key in PROXY_KEYS if key in proxy)
    with _Lock():
        if _kept_of(run, num, payload.get("run_id")) is None:
            raise Failure("repoint: replica %d of %s (run id %s) is not here"
                          % (num, run, payload.get("run_id")))
        _write(os.path.join(job_dir(run, num), "proxy.json"),
               json.dumps(note, sort_keys=True).encode("utf-8"), 0o644)
    return {"repointed": True}


def op_retire(payload):
    """Take a service's replica away for good (a service scaled down, services.rolling), under
    the lock: its folder says so (``state/reason`` ``scaled_down``: its job is terminated, as
    dstack's are, and tasks.lifecycle leaves it out of the run), its container is removed, its
    share of the run's claim here is dropped and nothing can make it again (its
    ``start.json`` goes)."""
    run, num = _job_key(payload, "retire")
    folder = job_dir(run, num)
    with _Lock():
        kept = _kept_of(run, num, payload.get("run_id"))
        if kept is None:   # another run of the name, or retired already: left alone
            return {"retired": False, "removed": []}
        removed = []
        if kept.get("container"):
            rc, _out, err = _docker(["rm", "-f", kept["container"]], check=False)
            if rc != 0 and "No such container" not in err:
                # Still there: it keeps its share and its start, and the scale-down says so.
                raise Failure("could not remove %s: %s" % (kept["container"], err.strip()))
            removed.append(kept["container"])
        if os.path.isdir(os.path.join(folder, "state")):
            _write(os.path.join(folder, "state", "reason"), b"scaled_down\n", 0o644)
            if not os.path.exists(os.path.join(folder, "created")):
                _write(os.path.join(folder, "created"), b"", 0o644)
        os.remove(os.path.join(folder, "start.json"))
        _drop_shares(run, payload.get("run_id"), [num])
    return {"retired": True, "removed": removed}


BOOK_OPS.update({
    "respawn": op_respawn,
    "replica_info": op_replica_info,
    "replace": op_replace,
    "retire": op_retire,
    "recount": op_recount,
    "repoint": op_repoint,
})
