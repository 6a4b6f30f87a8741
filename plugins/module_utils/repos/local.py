# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""What a local repo (``repos: [.]``) ships, and the archive that carries it.

A Git work tree ships what dstack's containers end up with: the tracked files as they are in the
work tree (uncommitted changes included) and the untracked files Git does not ignore
(``.gitignore``, ``.git/info/exclude``, the global excludes, and ``.dstackignore``, which dstack's
documentation names too). Ignored files never leave the controller. A folder that is not a Git
work tree ships all its files but those ``.gitignore`` or ``.dstackignore`` exclude, as dstack's
``files`` archives do.

dstack uploads only what its containers cannot clone from the remote (the diff against the
remote branch and the untracked files) and refuses more than ``DSTACK_SERVER_CODE_UPLOAD_LIMIT``
bytes (2 MiB by default; 0 or less: no limit). gpufleet ships the whole tree, so no remote is
needed, and applies that limit to the same part: the files changed since the last commit and the
untracked ones (every file of a folder that is not a Git work tree). docs/tasks.md says so.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import tarfile
import tempfile
import zlib
from typing import Iterable, Mapping

from ..core.errors import GpufleetError
from . import ids

UPLOAD_LIMIT_VARIABLE = "DSTACK_SERVER_CODE_UPLOAD_LIMIT"
DEFAULT_UPLOAD_LIMIT = 2 * 2 ** 20
IGNORE_FILES = (".gitignore", ".dstackignore")


class RepoError(GpufleetError):
    """A local repo that cannot be shipped; the message names the path and what to do."""


def size_text(size: float) -> str:
    """Bytes as dstack prints them (``2.0MiB``)."""
    value = float(size)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(value) < 1024.0 or unit == "TiB":
            return "%.1f%s" % (value, unit)
        value /= 1024.0
    return "%.1fTiB" % value


def upload_limit(environ: Mapping[str, str] | None) -> int | None:
    """The limit in bytes (None: no limit) from ``DSTACK_SERVER_CODE_UPLOAD_LIMIT``."""
    text = (environ or {}).get(UPLOAD_LIMIT_VARIABLE)
    if text in (None, ""):
        return DEFAULT_UPLOAD_LIMIT
    try:
        value = int(text)
    except ValueError as exc:
        raise RepoError("%s=%r is not a number of bytes; set it to an integer (0 or less: no "
                        "limit)" % (UPLOAD_LIMIT_VARIABLE, text)) from exc
    return value if value > 0 else None


def resolve(local_path: str, config_dir: str | None = None,
            field: str | None = "repos[0].local_path") -> str:
    """The repo's absolute folder: ``~`` expanded, a relative path taken from the configuration
    file's folder (else the current one), as dstack resolves it. The error's message starts
    with ``field`` (None: with the path)."""
    path = os.path.expanduser(local_path)
    if not os.path.isabs(path):
        path = os.path.join(config_dir or os.getcwd(), path)
    path = os.path.normpath(path)
    if not os.path.isdir(path):
        raise RepoError("%s%s is not a folder on this controller (relative paths start at the "
                        "task file's folder%s)" % ("%s: " % field if field else "", path,
                                                   ", %s" % config_dir if config_dir else ""))
    return path


def _git(directory, args, git_dir=None):
    argv = ["git"]
    if git_dir:
        argv += ["--git-dir=%s" % git_dir, "--work-tree=%s" % directory]
    try:
        proc = subprocess.run(argv + list(args), cwd=directory, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, check=False)
    except OSError as exc:
        raise RepoError("git is needed on the controller to read the repo %s: install git (%s)"
                        % (directory, exc)) from exc
    return proc.returncode, proc.stdout, proc.stderr.decode("utf-8", "replace").strip()


def _listing(output):
    return [p.decode("utf-8", "surrogateescape") for p in output.split(b"\0") if p]


def _is_work_tree(directory):
    if shutil.which("git") is None:
        if os.path.exists(os.path.join(directory, ".git")):
            raise RepoError("git is needed on the controller to read the Git repo %s: install "
                            "git" % directory)
        return False
    rc, out, _err = _git(directory, ["rev-parse", "--is-inside-work-tree"])
    return rc == 0 and out.strip() == b"true"


def _walk_files(root, rel):
    """Files under ``root/rel`` (a submodule's folder), its ``.git`` left out."""
    out = []
    for folder, dirs, files in os.walk(os.path.join(root, rel)):
        dirs[:] = sorted(d for d in dirs if d != ".git")
        for name in sorted(files):
            if name == ".git":
                continue
            out.append(os.path.relpath(os.path.join(folder, name), root))
    return out


class Snapshot(object):
    """The files a local repo ships (paths relative to ``root``) and what dstack would upload."""

    def __init__(self, root, files, changed, git, url=None, branch=None, commit=None):
        self.root = root
        self.files = files
        self.changed = changed
        self.git = git
        self.url = url
        self.branch = branch
        self.commit = commit

    @property
    def repo_id(self) -> str:
        return ids.repo_id(url=self.url, local_dir=self.root)

    def size(self, paths: Iterable[str] | None = None) -> int:
        total = 0
        for rel in self.files if paths is None else paths:
            try:
                info = os.lstat(os.path.join(self.root, rel))
            except OSError:
                continue
            total += info.st_size
        return total

    def check_limit(self, environ: Mapping[str, str] | None,
                    field: str | None = "repos[0]") -> None:
        """RepoError when the part dstack would upload is over the limit (its message starts
        with ``field``, unless None)."""
        limit = upload_limit(environ)
        if limit is None:
            return
        size = self.size(self.changed)
        if size <= limit:
            return
        what = ("the repo's uncommitted and untracked files" if self.git else
                "the folder (not a Git work tree, so all of it counts)")
        raise RepoError(
            "%s%s in %s come to %s, which exceeds the limit of %s. Use .gitignore (or "
            ".dstackignore) to exclude large files from the repo, or commit them. This limit "
            "can be modified by setting the %s environment variable (0: no limit)."
            % ("%s: " % field if field else "", what, self.root, size_text(size),
               size_text(limit), UPLOAD_LIMIT_VARIABLE))


def _untracked(root, git_dir=None):
    """Untracked files neither Git's excludes nor ``.dstackignore`` files exclude. (Git reads
    one kind of per-folder exclude file at a time: the two listings are intersected.)"""
    lists = []
    for flags in (["--exclude-standard"], ["--exclude-per-directory=.dstackignore"]):
        rc, out, err = _git(root, ["ls-files", "-z", "--others"] + flags, git_dir=git_dir)
        if rc != 0:
            raise RepoError("cannot list the files of %s: %s" % (root, err))
        lists.append(set(_listing(out)))
    return lists[0] & lists[1]


def _git_snapshot(root):
    rc, out, err = _git(root, ["ls-files", "-z", "--cached"])
    if rc != 0:
        raise RepoError("cannot list the files of the Git repo %s: %s" % (root, err))
    untracked = _untracked(root)
    files = []
    for rel in _listing(out) + sorted(untracked):
        full = os.path.join(root, rel)
        if os.path.isdir(full) and not os.path.islink(full):
            files.extend(_walk_files(root, rel))   # a submodule
        elif os.path.lexists(full):
            files.append(rel)                        # deleted tracked files are not shipped
    files = sorted(set(files))
    has_head = _git(root, ["rev-parse", "--verify", "-q", "HEAD"])[0] == 0
    if has_head:
        _rc, modified, _err = _git(root, ["diff", "--name-only", "-z", "--relative", "HEAD"])
        changed = untracked | set(_listing(modified))
    else:
        changed = set(files)   # nothing is committed yet: all of it would be uploaded
    url = branch = commit = None
    if has_head:
        commit = _git(root, ["rev-parse", "HEAD"])[1].decode().strip() or None
        rc, out, _err = _git(root, ["symbolic-ref", "-q", "--short", "HEAD"])
        branch = out.decode().strip() if rc == 0 else None
    remote = None
    if branch:
        rc, out, _err = _git(root, ["config", "--get", "branch.%s.remote" % branch])
        remote = out.decode().strip() if rc == 0 else None
    for name in [remote, "origin"]:
        if not name:
            continue
        rc, out, _err = _git(root, ["config", "--get", "remote.%s.url" % name])
        if rc == 0 and out.strip():
            url = out.decode().strip()
            break
    return Snapshot(root, files, sorted(p for p in changed if p in set(files)), True, url,
                    branch, commit)


def _folder_snapshot(root):
    """A folder that is not a Git work tree: its files less what .gitignore and .dstackignore
    exclude, listed by git with a throwaway repository when git is here."""
    if shutil.which("git") is None:
        files = _walk_files(root, ".")
        return Snapshot(root, [os.path.normpath(f) for f in files], files, False)
    scratch = tempfile.mkdtemp(prefix="gpufleet-repo-")
    try:
        git_dir = os.path.join(scratch, "git")
        rc, _out, err = _git(root, ["init", "-q", "--bare", git_dir])
        if rc != 0:
            raise RepoError("cannot list the files of %s: git init failed: %s" % (root, err))
        listed = _untracked(root, git_dir=git_dir)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    files = sorted(f for f in listed if os.path.lexists(os.path.join(root, f)))
    return Snapshot(root, files, files, False)


def snapshot(root: str) -> Snapshot:
    """The Snapshot of the folder ``root`` (absolute; see ``resolve``)."""
    if _is_work_tree(root):
        return _git_snapshot(root)
    return _folder_snapshot(root)


class _Hashing(object):
    """A write-only file that hashes and counts what goes through it."""

    def __init__(self, handle):
        self.handle = handle
        self.digest = hashlib.sha256()
        self.size = 0

    def write(self, data):
        self.digest.update(data)
        self.size += len(data)
        return self.handle.write(data)

    def flush(self):
        self.handle.flush()


class _Members(object):
    """A gzip stream written as consecutive members, each at its own level: ``gzip -d`` and
    ``tar -xz`` read them as one stream. Files that do not compress (weights, archives) go in
    stored (level 0) members, so neither the controller nor every host spends time on them."""

    def __init__(self, raw):
        self.raw = raw
        self.level = 1
        self._zip = None
        self.position = 0

    def use_level(self, level):
        if level != self.level:
            self._finish()
            self.level = level

    def write(self, data):
        if self._zip is None:
            self._zip = zlib.compressobj(self.level, zlib.DEFLATED, 31)  # 31: a gzip member
        self.raw.write(self._zip.compress(data))
        self.position += len(data)
        return len(data)

    def tell(self):
        return self.position

    def _finish(self):
        if self._zip is not None:
            self.raw.write(self._zip.flush())
            self._zip = None

    def close(self):
        if self._zip is None:
            self.write(b"")
        self._finish()


def _compresses(path, sample=65536):
    """Whether the start of the file shrinks by a tenth at gzip level 1."""
    try:
        with open(path, "rb") as handle:
            head = handle.read(sample)
    except OSError:
        return True
    return len(head) < 512 or len(zlib.compress(head, 1)) < 0.9 * len(head)


def build_archive(snap, folder):
    """Write ``snap``'s files as a gzip-compressed tar to ``folder`` (level 1, the network being
    the slow part; files that do not compress stored as they are, see _Members); returns
    ``{"path", "sha256", "size", "files"}``. Owners are left out (the container's job user gets
    the files), modes and modification times kept; the same tree gives the same archive, so its
    hash names it on the hosts."""
    temp = os.path.join(folder, "repo.tar.gz.part")
    with open(temp, "wb") as raw:
        hashing = _Hashing(raw)
        zipped = _Members(hashing)
        with tarfile.open(fileobj=zipped, mode="w", format=tarfile.PAX_FORMAT) as tar:
            for rel in snap.files:
                full = os.path.join(snap.root, rel)
                try:
                    info = tar.gettarinfo(full, arcname=rel)
                except OSError as exc:
                    raise RepoError("cannot read %s: %s" % (full, exc)) from exc
                if info is None:
                    continue   # a socket or a device: nothing to ship
                info.uid = info.gid = 0
                info.uname = info.gname = ""
                if info.isreg():
                    zipped.use_level(1 if _compresses(full) else 0)
                    with open(full, "rb") as handle:
                        tar.addfile(info, handle)
                else:
                    zipped.use_level(1)
                    tar.addfile(info)
            zipped.use_level(1)   # the end-of-archive blocks
        zipped.close()
    digest = hashing.digest.hexdigest()
    path = os.path.join(folder, "%s.tar.gz" % digest)
    os.replace(temp, path)
    return {"path": path, "sha256": digest, "size": hashing.size, "files": len(snap.files)}
