# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The pool of local network volumes, run inside a throwaway container that mounts the pool.

Standalone: backends/local_volumes.py sends this file to ``python3 -`` in a container started
with the Docker volume ``gpufleet-volumes`` at ``/pool`` (the standard library only, no import
from the collection). The pool holds, per local volume ``NAME``:

    /pool/data/NAME          the volume's files (what a job sees at its mount path)
    /pool/records/NAME.json  {"name", "size", "created", "created_by", "holder", "attached_at",
                              "attached_for", "generation"}

``holder`` is the node container ({"id", "name"}) the volume is attached to, or None;
``attached_for`` the run submission it was attached for ({"id", "submission"}). Every op
runs under an exclusive flock on ``/pool/lock``, so controllers acting at once see each other's
changes whole. Taking a volume (``attach``) and deleting one name the record's ``generation``
the controller judged on: a change in between (another attach) refuses instead of booking the
volume twice. Usage: ``python3 - OP JSON`` prints one JSON line, ``{"error": ...}`` on refusal.
"""

from __future__ import annotations

import fcntl
import json
import os
import re
import shutil
import sys
import time

ROOT = "/pool"
NAME = re.compile(r"^[a-z][a-z0-9-]{0,40}$")
# An attach this recent, whose run has no container on the node yet, counts as in use: its job is
# starting (local_volumes.Pool.in_use).
FRESH_S = 60


class Refused(Exception):
    pass


def _paths(root, name):
    if not NAME.match(name or ""):
        raise Refused("bad volume name %r" % (name,))
    return (os.path.join(root, "data", name), os.path.join(root, "records", name + ".json"))


def _load(root, name):
    _data, path = _paths(root, name)
    try:
        with open(path) as handle:
            return json.load(handle)
    except (IOError, OSError):
        return None


def _save(root, record):
    _data, path = _paths(root, record["name"])
    temp = path + ".tmp"
    with open(temp, "w") as handle:
        json.dump(record, handle, sort_keys=True)
        handle.flush()
        os.fsync(handle.fileno())
    os.rename(temp, path)


def _holder_live(record, live):
    holder = record.get("holder") or {}
    return bool(holder) and (holder.get("id") in live or holder.get("name") in live)


def view(record, live, now):
    """The record with ``attached``: the live holder's name (None when free) and ``fresh``:
    attached within FRESH_S seconds (its job may still be starting)."""
    out = dict(record)
    live_holder = _holder_live(record, live)
    out["attached"] = (record.get("holder") or {}).get("name") if live_holder else None
    out["fresh"] = live_holder and now - float(record.get("attached_at") or 0) < FRESH_S
    return out


def op_list(root, args, now):
    live = set(args.get("live") or [])
    records = []
    folder = os.path.join(root, "records")
    for entry in sorted(os.listdir(folder)):
        if entry.endswith(".json"):
            record = _load(root, entry[:-5])
            if record:
                records.append(view(record, live, now))
    return {"volumes": records}


def op_describe(root, args, now):
    record = _load(root, args["name"])
    return {"volume": view(record, set(args.get("live") or []), now) if record else None}


def op_create(root, args, now):
    name = args["name"]
    data, _path = _paths(root, name)
    record = _load(root, name)
    if record:
        return {"volume": view(record, set(args.get("live") or []), now), "changed": False}
    if not os.path.isdir(data):
        os.makedirs(data)
    os.chmod(data, 0o777)   # any job user may write, as on a freshly formatted cloud volume
    record = {"name": name, "size": args.get("size"), "created": args["created"],
              "created_by": args.get("created_by"), "holder": None, "attached_at": None,
              "generation": 0}
    _save(root, record)
    return {"volume": view(record, set(), now), "changed": True}


def _judged(root, args):
    record = _load(root, args["name"])
    if record is None:
        raise Refused("volume %s does not exist" % args["name"])
    if args.get("generation") is not None and record["generation"] != args["generation"]:
        holder = (record.get("holder") or {}).get("name")
        raise Refused("volume %s changed meanwhile (now attached to %s): try again"
                      % (args["name"], holder or "no node"))
    return record


def op_attach(root, args, now):
    """Attach the volume to ``holder``, if the record is still the one the controller judged
    free (``generation``). Returns the record and the holder it had (``previous``)."""
    record = _judged(root, args)
    previous = record.get("holder")
    record.update(holder=args["holder"], attached_at=now, attached_for=args.get("run"),
                  generation=record["generation"] + 1)
    _save(root, record)
    return {"volume": view(record, set([args["holder"]["id"]]), now), "previous": previous}


def op_release(root, args, now):
    """Free the volume if ``holder`` (a name or id) still holds it."""
    record = _load(root, args["name"])
    if record is None:
        return {"volume": None, "changed": False}
    holder = record.get("holder") or {}
    if args["holder"] not in (holder.get("id"), holder.get("name")):
        return {"volume": view(record, set(), now), "changed": False}
    record.update(holder=None, attached_at=None, attached_for=None,
                  generation=record["generation"] + 1)
    _save(root, record)
    return {"volume": view(record, set(), now), "changed": True}


def op_delete(root, args, now):
    """Remove the volume's files and record, if the record is the one judged unused."""
    record = _load(root, args["name"])
    if record is None:
        return {"volume": None, "changed": False}
    record = _judged(root, args)
    data, path = _paths(root, args["name"])
    os.remove(path)
    shutil.rmtree(data, ignore_errors=True)
    return {"volume": record, "changed": True}


OPS = {"list": op_list, "describe": op_describe, "create": op_create, "attach": op_attach,
       "release": op_release, "delete": op_delete}


def serve(op, args, root=ROOT, now=None):
    """Run ``op`` under the pool's lock; one answer, ``{"error": ...}`` when refused."""
    for folder in ("data", "records"):
        path = os.path.join(root, folder)
        if not os.path.isdir(path):
            os.makedirs(path)
    with open(os.path.join(root, "lock"), "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            return OPS[op](root, args, time.time() if now is None else now)
        except Refused as exc:
            return {"error": str(exc)}
        except KeyError as exc:
            return {"error": "pool op %s: missing %s" % (op, exc)}


def main(argv):
    if len(argv) != 3 or argv[1] not in OPS:
        answer = {"error": "usage: localpool.py {%s} JSON" % "|".join(sorted(OPS))}
    else:
        try:
            answer = serve(argv[1], json.loads(argv[2]))
        except Exception as exc:   # one JSON answer whatever happens, never a traceback
            answer = {"error": "pool op %s failed: %s: %s" % (argv[1], type(exc).__name__, exc)}
    sys.stdout.write(json.dumps(answer) + "\n")


if __name__ == "__main__":
    main(sys.argv)
