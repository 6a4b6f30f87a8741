# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""``DSTACK_REPO_ID`` as dstack makes it: ``<repo name>-<8 base-36 characters of the SHA-256 of
host + path>`` of the repo's URL (``https://``, ``ssh://`` or scp-like ``git@host:path``), and
``none`` for a run without a repo. Pure functions."""

from __future__ import annotations

import hashlib
import math
import os
import re

from ..core.errors import GpufleetError

NO_REPO_ID = "none"
_DIGITS = "0123456789abcdefghijklmnopqrstuvwxyz"
_SCP = re.compile(r"^(?P<user>[^/]+)@(?P<host>[^/]+?):(?P<path>.+)$")
_URL = re.compile(r"^(?P<scheme>[A-Za-z][A-Za-z0-9+.-]*)://(?:(?P<user>[^@/]*)@)?"
                  r"(?P<host>\[[^\]]+\]|[^:/?#]+)(?::(?P<port>\d*))?(?P<path>/[^?#]*)?")


class RepoUrlError(GpufleetError):
    """A repo URL that is neither https://, ssh:// nor user@host:path."""


def _base36(data):
    """dstack's base36 of little-endian bytes, left-padded to a fixed width."""
    width = len(data) * int(math.ceil(math.log(8) / math.log(36)))
    value = int.from_bytes(data, "little")
    out = []
    for _digit in range(width):
        value, rem = divmod(value, 36)
        out.append(_DIGITS[rem])
    return "".join(reversed(out))


def slug(prefix: str, key: str, size: int = 8) -> str:
    return "%s-%s" % (prefix, _base36(hashlib.sha256(key.encode("utf-8")).digest())[:size])


def parse_url(url: str) -> tuple[str, str, str]:
    """``(scheme, host, path)`` of a Git URL; RepoUrlError for anything else."""
    match = _URL.match(url)
    if match is None:
        scp = _SCP.match(url)
        if scp is None:
            raise RepoUrlError("could not parse the Git URL %r: use https://host/path, "
                               "ssh://user@host/path or user@host:path" % url)
        path = scp.group("path")
        return "ssh", scp.group("host").lower(), "/" + path.lstrip("/")
    scheme = match.group("scheme").lower()
    if scheme not in ("https", "ssh", "http", "git", "file"):
        raise RepoUrlError("unsupported URL scheme %s in %r: use https:// or ssh://"
                           % (scheme, url))
    return scheme, (match.group("host") or "").lower(), match.group("path") or "/"


def clean_path(path: str) -> str:
    path = path.rstrip("/")
    return path[:-4] if path.endswith(".git") else path


def repo_name(url: str) -> str:
    return clean_path(parse_url(url)[2]).rsplit("/", 1)[-1] or "unknown"


def repo_id(url: str | None = None, local_dir: str | None = None) -> str:
    """dstack's id of the repo at ``url``; without a URL (a local folder with no remote), the
    same recipe over the folder's absolute path on the controller."""
    if url:
        _scheme, host, path = parse_url(url)
        return slug(repo_name(url), host + clean_path(path))
    if local_dir:
        local_dir = os.path.abspath(local_dir)
        return slug(os.path.basename(local_dir.rstrip("/")) or "unknown", local_dir)
    return NO_REPO_ID
