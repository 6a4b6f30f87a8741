# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""A run's code (``repos[0]``) on its way to the hosts.

A local repo is read and checked when the run is made, before any host is touched
(repos.local), packed once, and shipped to the hosts of each submission (repos.ship); the
wrapper unpacks it in every container. A remote repo (``url``) is cloned by the wrapper in every
container, as dstack's runner clones it, with ``branch``, ``hash`` and ``single_branch``; a
private one with the secret ``GIT_TOKEN`` (HTTPS) or ``GIT_SSH_KEY`` (a private key), which
travel in the job folder's 0600 files only, never in a URL, argv, label or log."""

from __future__ import annotations

import shutil
import tempfile
import time

from ..repos import ids, local, ship
from ..repos.ids import RepoUrlError
from .errors import RunError


TOKEN_SECRET = "GIT_TOKEN"
SSH_KEY_SECRET = "GIT_SSH_KEY"
CREDENTIAL_SECRETS = (TOKEN_SECRET, SSH_KEY_SECRET)


class Code(object):
    """One run's repo: ``spec`` is the normalized ``repos[0]`` mapping."""

    def __init__(self, spec, config_dir=None, environ=None):
        self.spec = spec
        self.archive = None
        self._folder = None
        self.url = spec.get("url")
        if self.url:
            try:
                self.repo_id = ids.repo_id(url=self.url)
            except RepoUrlError as exc:
                raise RunError("repos[0].url: %s" % exc) from exc
            return
        try:
            self.root = local.resolve(spec["local_path"], config_dir)
            self.snapshot = local.snapshot(self.root)
            self.snapshot.check_limit(environ)
            self.repo_id = self.snapshot.repo_id
        except (local.RepoError, RepoUrlError) as exc:
            raise RunError(str(exc)) from exc

    def pack(self):
        """The archive record (repos.local.build_archive), made on first use."""
        if self.archive is None:
            self._folder = tempfile.mkdtemp(prefix="gpufleet-code-")
            try:
                self.archive = local.build_archive(self.snapshot, self._folder)
            except (local.RepoError, OSError) as exc:
                raise RunError("repos[0]: cannot pack %s: %s" % (self.root, exc)) from exc
        return self.archive

    def remote(self, secrets):
        """The jobs' ``repo`` of a remote repo: where to clone from and the credential."""
        secrets = secrets or {}
        scheme = ids.parse_url(self.url)[0]
        out = {"url": self.url, "branch": self.spec.get("branch"), "hash": self.spec.get("hash"),
               "repo_id": self.repo_id}
        if scheme == "ssh" and secrets.get(SSH_KEY_SECRET):
            key = secrets[SSH_KEY_SECRET]
            out["ssh_key"] = key if key.endswith("\n") else key + "\n"
        elif scheme in ("https", "http") and secrets.get(TOKEN_SECRET):
            out["token"] = secrets[TOKEN_SECRET]
        return out

    def ship(self, nodes, hosts, emit=None, secrets=None):
        """Send the archive to ``hosts`` that lack it (a remote repo: nothing to send); the job
        specs' ``repo``."""
        if self.url:
            return self.remote(secrets)
        started = time.time()
        archive = self.pack()
        try:
            done = ship.ship(archive, nodes, hosts)
        except ship.ShipError as exc:
            raise RunError(str(exc)) from exc
        if emit is not None:
            sent = sorted(h for h, how in done.items() if how == "sent")
            emit({"kind": "info", "message": "repo %s: %d files, %s, %s in %.1f s" % (
                self.root, archive["files"], local.size_text(archive["size"]),
                ("sent to %s" % ", ".join(sent)) if sent else "already on every host",
                time.time() - started)})
        return {"archive": ship.host_path(archive["sha256"]), "repo_id": self.repo_id}

    def close(self):
        if self._folder is not None:
            shutil.rmtree(self._folder, ignore_errors=True)
            self._folder = None
            self.archive = None
