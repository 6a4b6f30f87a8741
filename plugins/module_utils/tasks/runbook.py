# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""A run written down so that any controller can submit it later: the queue's entries.

A run that must wait for capacity, or that may be submitted again (``retry``) after its
submitter has gone, is kept as an *entry* on a fleet host (tasks.hostside.booking's queue folder,
0600, root's). The entry holds what the submitting controller had and another may lack: the task's
normalized config with the command line's overrides, the secrets and environment variables it refers
to, the contents of its ``files``, its repo archive (kept beside the entry on that host) and its
identity (name, run id, submitter, submission time, priority). ``enqueue`` writes one down on its queue host;
tasks.runs.runner_of makes a Runner from an entry on whichever controller acts on it.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import tempfile
from typing import Any, Iterable

from ..core.text import shorten
from ..repos import files as shipped_files
from ..repos import ship
from . import admission
from . import code as codes
from .errors import RunError
from .queue_records import KEPT, PENDING, candidate_fleets, mirror_host, queue_host
from .records import QueueEntry
from .ssh import NodeError

# 2: ``files_data`` holds repos.files.read's contents (a folder's files too); a version 1
# entry, whose files are base64 text, is still read. An earlier gpufleet refuses a version 2
# entry by its version instead of misreading it.
ENTRY_VERSION = 2
READ_VERSIONS = (1, 2)
_SECRET_REF = re.compile(r"secrets\.([A-Za-z_][A-Za-z0-9_]*)")


def referenced_secrets(config, secrets):
    """The secrets the config refers to (``${{ secrets.NAME }}``), and a remote repo's
    credentials: an entry carries these and no others."""
    text = json.dumps(config, sort_keys=True, default=str)
    names = set(_SECRET_REF.findall(text))
    if any(r.get("url") for r in config.get("repos") or []):
        names.update(codes.CREDENTIAL_SECRETS)
    return dict((k, v) for k, v in (secrets or {}).items() if k in names)


def referenced_environ(config, fleets, environ):
    """Controller environment variables the run takes as they are (``env: [NAME]`` in the
    task or its fleets) and dstack's upload limit."""
    names = set(k for k, v in (config.get("env") or {}).items() if v is None)
    for fleet in fleets or []:
        names.update(k for k, v in (fleet.get("env") or {}).items() if v is None)
    names.add("DSTACK_SERVER_CODE_UPLOAD_LIMIT")
    return dict((k, environ[k]) for k in sorted(names) if k in environ)


def file_contents(runner):
    """``{local path: contents}`` of the task's ``files``, read now (repos.files.read: a file,
    or a folder's files)."""
    from .rankplan import _files_of

    out = {}
    for spec in _files_of(runner.config, runner.config_dir).values():
        path = spec.get("local_path")
        if path and path not in out:
            try:
                out[path] = shipped_files.read(path)
            except shipped_files.FilesError as exc:
                raise RunError("files: %s" % exc) from exc
    return out


def entry_of(runner: Any, fleet_names: Iterable[str], state: str = "pending",
             reason: str | None = None, number: int = 0,
             retry_since: float | None = None, resubmits: bool = True) -> QueueEntry:
    """The entry of ``runner``'s run (tasks.runs.Runner). ``resubmits`` false: the entry
    carries no ``retry`` (an attached run resubmits itself; its entry is for autoscaling)."""
    repo = None
    if runner.code is not None and not runner.code.url:
        archive = runner.code.pack()
        repo = {"kind": "local", "sha256": archive["sha256"], "size": archive["size"],
                "files": archive["files"], "root": runner.code.root,
                "repo_id": runner.code.repo_id, "spec": runner.code.spec}
    config = runner.config
    retry = config.get("retry") if resubmits else None
    return {
        "version": ENTRY_VERSION,
        "run": runner.name,
        "run_id": runner.run_id,
        "user": runner.user,
        "submitted_at": runner.submitted_at,
        "submitted_epoch": runner.submitted_epoch,
        "priority": int(config.get("priority") or 0),
        "state": state,
        "reason": reason,
        "message": None,
        "fleets": list(fleet_names),
        "nodes": sum(int(g.get("nodes") or 1) for g in config.get("groups") or []) or int(
            config.get("nodes") or 1),
        "submissions": number,
        "retry": retry,
        "policy": {"startup_order": config.get("startup_order"),
                   "stop_criteria": config.get("stop_criteria"), "retry": retry,
                   "service": isinstance(config.get("service"), dict),
                   "respawn": bool((config.get("service") or {}).get("respawn")),
                   # A pass follows the request rate of an autoscaled service (tasks.queue).
                   "scaling": (config.get("service") or {}).get("scaling")},
        "retry_since": runner.submitted_epoch if retry_since is None else retry_since,
        "array": runner.array,
        # The runs it waits for (automation.dependencies; a pass asks its gate).
        "after": list(getattr(runner, "after", None) or []),
        "hosts": [],
        "config": dict(config, name=runner.name),
        "secrets": referenced_secrets(config, runner.secrets),
        "environ": referenced_environ(config, runner.fleets, runner.environ),
        "files_data": file_contents(runner),
        "config_dir": runner.config_dir,
        "image_source": runner.image_source,
        "run_args": list(runner.run_args or ()),
        "local_image": runner.local_image,
        "repo": repo,
    }


def local_archive(runner):
    """The host path of ``runner``'s packed local repo once shipped, or None."""
    if runner.code is None or runner.code.url:
        return None
    return ship.host_path(runner.code.pack()["sha256"])


class HeldCode(object):
    """A queued run's local repo, kept as an archive beside its entry on the queue host: sent
    to a submission's hosts through this controller (fetched once, only when a host lacks it).
    Takes tasks.code.Code's place in the runner."""

    url = None

    def __init__(self, entry, queue_node):
        repo = entry["repo"]
        self.spec = repo.get("spec") or {}
        self.repo_id = repo["repo_id"]
        self.root = repo.get("root")
        self.record = {"sha256": repo["sha256"], "size": repo["size"], "files": repo["files"]}
        self.held = entry.get("held_archive")
        self.queue_node = queue_node
        self._folder = None

    def _fetch(self):
        if self.record.get("path"):
            return self.record
        if self.queue_node is None or not self.held:
            raise RunError("the run's repo archive was kept on a host that is gone; submit the "
                           "run again")
        self._folder = tempfile.mkdtemp(prefix="gpufleet-held-")
        path = os.path.join(self._folder, "repo.tar.gz")
        with open(path, "wb") as out:
            proc = subprocess.run(self.queue_node.argv(self.queue_node.sudo + "cat " + self.held),
                                  stdout=out, stderr=subprocess.PIPE, check=False)
        if proc.returncode != 0:
            raise RunError("%s: cannot read the run's kept repo archive %s: %s" % (
                self.queue_node.name, self.held,
                proc.stderr.decode("utf-8", "replace").strip()[-300:]))
        self.record["path"] = path
        return self.record

    def ship(self, nodes, hosts, emit=None, secrets=None):
        final = ship.host_path(self.record["sha256"])
        missing = []
        for host in sorted(set(hosts)):
            rc, out, _err = nodes[host].run("test -s %s && echo present || true" % final,
                                            timeout=60)
            if not (rc == 0 and out.strip() == "present"):
                missing.append(host)
        if missing:
            try:
                ship.ship(self._fetch(), nodes, missing)
            except ship.ShipError as exc:
                raise RunError(str(exc)) from exc
        return {"archive": final, "repo_id": self.repo_id}

    def pack(self):
        return self._fetch()

    def close(self):
        if self._folder is not None:
            shutil.rmtree(self._folder, ignore_errors=True)
            self._folder = None


def enqueue(runner, errors, reason, number=0, retry_since=None, state=PENDING, hosts=(),
            message=None, resubmits=True):
    """Write ``runner``'s run down as an entry on its queue host; returns that host
    (``resubmits``: entry_of)."""
    names = candidate_fleets(runner.config, runner.fleets)
    host = queue_host(runner.fleets, names, errors)
    if host is None:
        raise RunError("run %s cannot wait in the queue: none of its fleets (%s) has a reachable "
                       "host to keep it on" % (runner.name, ", ".join(shorten(n) for n in names)
                                               or "none"))
    entry = entry_of(runner, names, state=state, reason=reason, number=number,
                     retry_since=retry_since, resubmits=resubmits)
    entry["queued_on"] = host
    entry["hosts"] = list(hosts)
    entry["message"] = message
    # The run's owner (tasks.admission): its caps and its fair share follow the entry to
    # whichever controller submits it.
    entry["user"] = admission.user_of(runner)
    archive = None
    # Its copy goes to the fleet's mirror host (tasks.queue_mirror), with the repo archive.
    mirror = mirror_host(runner.fleets, host) if state in KEPT else None
    mirror = mirror if mirror in runner.nodes and mirror not in errors else None
    if entry.get("repo"):
        runner.code.ship(runner.nodes, [host], None, runner.secrets)
        archive = local_archive(runner)
    try:
        answer = runner.nodes[host].call("enqueue", {"entry": entry, "archive": archive})
    except NodeError as exc:
        raise RunError(str(exc)) from exc
    if not answer.get("queued"):
        raise RunError(answer.get("reason") or "the queue refused run %s" % runner.name)
    if mirror is not None:
        try:
            if entry.get("repo"):
                runner.code.ship(runner.nodes, [mirror], None, runner.secrets)
            runner.nodes[mirror].call("mirror_put", {"entry": entry, "archive": archive})
        except (NodeError, RunError) as exc:   # the next pass over the queue copies it
            runner.emit({"kind": "info", "message": "run %s: its queue entry's copy on %s is "
                         "not written yet: %s" % (runner.name, mirror, exc)})
    return host
