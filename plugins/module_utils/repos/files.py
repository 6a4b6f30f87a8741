# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""A task's ``files``: what the local path of each entry (a file or a folder) ships, checked on
the controller before any host is touched, and read into the jobs' start requests.

As dstack packs each entry: a file as it is; a folder with its files less what ``.gitignore``
and ``.dstackignore`` exclude (``.git`` left out, as repos.local lists them); modes kept; a link
to a place inside the folder stays a link, any other link is replaced by what it points to (a
link to a folder outside by an empty folder). Each entry is limited to
``DSTACK_SERVER_CODE_UPLOAD_LIMIT`` bytes (2 MiB by default, 0 or less: no limit), as in dstack.

An entry reads as ``{relative path: item}``: ``""`` is the local path itself, a folder's files
are under it. An item is ``{"data": base64, "mode"}``, ``{"dir": True, "mode"}`` or ``{"link":
target}``: what tasks.hostside.nodeside writes in the job folder (``files/N``, ``files/N/<path>``),
and the wrapper then copies to the entry's path in the container.
"""

from __future__ import annotations

import base64
import os
import stat
from typing import Any, Mapping

from ..core.errors import GpufleetError
from . import local


class FilesError(GpufleetError):
    """A ``files`` entry that cannot be shipped; the message names the path and what to do."""


def resolve(local_path: str, base_dir: str | None = None) -> str:
    """The entry's absolute path: ``~`` expanded, a relative path taken from the task file's
    folder (``base_dir``; else the current one), as dstack resolves it."""
    path = os.path.expanduser(local_path)
    if not os.path.isabs(path):
        path = os.path.join(base_dir or os.getcwd(), path)
    return os.path.normpath(path)


def _mode(info):
    return stat.S_IMODE(info.st_mode)


def _inside(root, target):
    return target == root or target.startswith(root.rstrip(os.sep) + os.sep)


def _listing(root):
    """The files a folder ships (paths relative to it), as repos.local lists a folder."""
    try:
        return local.snapshot(root).files
    except local.RepoError as exc:
        raise FilesError(str(exc)) from exc


def _item(root, rel):
    """``(item, size)`` of one file of the folder ``root``."""
    full = os.path.join(root, rel)
    if os.path.islink(full):
        target = os.readlink(full)
        absolute = os.path.normpath(os.path.join(os.path.dirname(full), target))
        if _inside(root, absolute):
            return {"link": os.path.relpath(absolute, os.path.dirname(full))}, 0
        if os.path.isdir(absolute):
            return {"dir": True, "mode": _mode(os.stat(absolute))}, 0
        if not os.path.exists(absolute):
            raise FilesError("%s is a link to %s, which does not exist; remove the link, or "
                             "exclude it with .gitignore or .dstackignore" % (full, target))
    try:
        info = os.stat(full)
    except OSError as exc:
        raise FilesError("cannot read %s: %s" % (full, exc.strerror or exc)) from exc
    if stat.S_ISDIR(info.st_mode):
        return {"dir": True, "mode": _mode(info)}, 0
    if not stat.S_ISREG(info.st_mode):
        raise FilesError("%s is neither a file nor a folder (a socket, FIFO or device); "
                         "exclude it with .gitignore or .dstackignore" % full)
    if not os.access(full, os.R_OK):
        raise FilesError("%s cannot be read by this controller's user (permission denied); "
                         "make it readable, or exclude it with .gitignore or .dstackignore"
                         % full)
    return {"mode": _mode(info), "size": info.st_size}, info.st_size


def _contents(path, hint=""):
    """``({relative path: item without data}, total size)`` of the entry at ``path``, or
    FilesError saying why it cannot be shipped (``hint`` follows "does not exist")."""
    try:
        info = os.stat(path)
    except FileNotFoundError:
        raise FilesError("%s does not exist on this controller%s" % (path, hint)) from None
    except OSError as exc:
        raise FilesError("cannot reach %s: %s" % (path, exc.strerror or exc)) from None
    if stat.S_ISREG(info.st_mode):
        if not os.access(path, os.R_OK):
            raise FilesError("%s cannot be read by this controller's user (permission denied)"
                             % path)
        return {"": {"mode": _mode(info), "size": info.st_size}}, info.st_size
    if not stat.S_ISDIR(info.st_mode):
        raise FilesError("%s is neither a file nor a folder (a socket, FIFO or device)" % path)
    if not os.access(path, os.R_OK | os.X_OK):
        raise FilesError("the folder %s cannot be read by this controller's user (permission "
                         "denied)" % path)
    items = {"": {"dir": True, "mode": _mode(info)}}
    total = 0
    for rel in _listing(path):
        items[rel], size = _item(path, rel)
        total += size
    return items, total


def check(local_path: str, base_dir: str | None = None,
          environ: Mapping[str, str] | None = None) -> None:
    """FilesError unless the entry ``local_path`` (as the task gives it; see ``resolve``) can
    be shipped: it exists, is a file or a folder this user can read, with files it can read,
    within the limit (``environ``'s DSTACK_SERVER_CODE_UPLOAD_LIMIT)."""
    path = resolve(local_path, base_dir)
    hint = ""
    if not os.path.isabs(os.path.expanduser(local_path)):
        hint = " (relative paths start at the task file's folder, %s)" % (
            base_dir or os.getcwd())
    _items, total = _contents(path, hint)
    try:
        limit = local.upload_limit(environ)
    except local.RepoError as exc:
        raise FilesError(str(exc)) from exc
    if limit is not None and total > limit:
        raise FilesError(
            "%s comes to %s, which exceeds the limit of %s on each entry of files. Exclude "
            "large files with .gitignore (or .dstackignore), or raise the limit with the %s "
            "environment variable (0: no limit)." % (path, local.size_text(total),
                                                     local.size_text(limit),
                                                     local.UPLOAD_LIMIT_VARIABLE))


def read(path: str) -> dict[str, dict[str, Any]]:
    """The entry at ``path`` as ``{relative path: item}`` with its files' contents."""
    items, _total = _contents(path)
    out = {}
    for rel, item in items.items():
        item = dict(item)
        if item.pop("size", None) is not None:
            full = os.path.join(path, rel) if rel else path
            try:
                with open(full, "rb") as handle:
                    item["data"] = base64.b64encode(handle.read()).decode("ascii")
            except (IOError, OSError) as exc:
                raise FilesError("cannot read %s: %s" % (full, exc.strerror or exc)) from exc
        out[rel] = item
    return out


def job_files(name: str, content: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """The job folder's files for an entry read by ``read`` (``name``: ``files/N``). A queue
    entry of an earlier gpufleet holds a file's content alone (base64 text)."""
    if isinstance(content, str):
        return {name: {"data": content}}
    return dict(((name + "/" + rel) if rel else name, item) for rel, item in content.items())
