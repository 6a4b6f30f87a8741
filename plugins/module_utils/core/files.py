# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Files written so that a reader sees the old content or the new, never a part of either, and
lock files that keep two processes of this machine from doing the same work at once."""

from __future__ import annotations

import contextlib
import fcntl
import os
import tempfile
from typing import Any, Iterator, Mapping


def write_atomically(path: str, text: str, mode: int) -> None:
    """Replace ``path`` with ``text``: a temporary file in the same directory (made 0600, so the
    content is never readable by others on the way), synced, given ``mode``, then renamed over
    ``path``. The temporary file is removed when anything fails; OSError is left to the caller,
    which knows what to tell the user."""
    directory = os.path.dirname(os.path.abspath(path))
    handle, temp = tempfile.mkstemp(prefix=".%s." % os.path.basename(path), suffix=".tmp",
                                    dir=directory)
    try:
        with os.fdopen(handle, "w", encoding="utf-8") as stream:
            stream.write(text)
            stream.flush()
            os.fsync(stream.fileno())
        os.chmod(temp, mode)
        os.replace(temp, path)
    except BaseException:
        try:
            os.unlink(temp)
        except OSError:
            pass
        raise


@contextlib.contextmanager
def exclusive(name: str) -> Iterator[None]:
    """Hold an exclusive ``flock`` on the lock file ``name`` in this user's gpufleet folder of
    the temporary directory while the block runs, so that two processes of this machine that
    would do the same work (build one image) do it one after the other. The lock goes with the
    process, also when it is killed; the file stays, empty."""
    folder = os.path.join(tempfile.gettempdir(), "gpufleet-locks-%d" % os.getuid())
    os.makedirs(folder, mode=0o700, exist_ok=True)
    with locked(os.path.join(folder, name + ".lock")):
        yield


@contextlib.contextmanager
def locked(path: str) -> Iterator[None]:
    """Hold an exclusive ``flock`` on the file at ``path`` (made empty when missing) while the
    block runs. OSError when the file cannot be opened."""
    with open(path, "a") as handle:
        fcntl.flock(handle.fileno(), fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle.fileno(), fcntl.LOCK_UN)


def module_source(module_globals: Mapping[str, Any]) -> bytes:
    """The source of the module whose globals are ``module_globals`` (``vars(module)``), as
    bytes, for code sent to run elsewhere (the hosts' helper, the local volume pool). It is
    read through the module's loader, since inside a module's AnsiballZ payload it lives in a
    zip file, and from its file otherwise."""
    loader: Any = module_globals.get("__loader__")   # None: read the file
    path = module_globals["__file__"].replace(".pyc", ".py")
    name = module_globals["__name__"]
    for read in (lambda: loader.get_source(name), lambda: loader.get_data(path)):
        try:
            text = read()
        except (AttributeError, IOError, OSError, ImportError):
            continue
        if text:
            # Ansible's collection loader gives bytes, the standard loaders give text.
            return text if isinstance(text, bytes) else text.encode("utf-8")
    with open(path, "rb") as handle:
        return handle.read()
