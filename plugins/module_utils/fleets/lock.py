# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""One apply (or delete) of a fleet at a time on this machine, whoever runs it.

Two applies of one fleet that both list its instances, find one missing and make it, double-book
it: the second ``docker run`` of a name is refused, and the loser used to remove what the winner
had made. So an apply holds the fleet's lock from listing its instances to listing them again
after its changes; a second apply waits for it, then finds the instances made and keeps them.

The lock is an exclusive ``flock`` on ``<lock dir>/fleet-<name>.lock``. The lock dir is
``$GPUFLEET_LOCK_DIR``, else ``/tmp/gpufleet-fleet-locks``: one folder for every user and every
state dir of the machine (it is made world-writable and sticky, as /tmp is; the lock files are
readable and writable by everyone, and hold no secret: who holds the lock, for the message of
the one who waits). A ``flock`` goes with its process, also a killed one, so no lock is ever left
behind. The holder writes ``pid user host since`` into the file for those who wait.

A process whose caller holds the lock already (``gpufleet apply`` holds it over the whole
playbook, so that its wait can be said while it happens) is told so by ``$GPUFLEET_LOCK_HELD``:
the fleet names its caller holds, comma-separated.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import getpass
import os
import socket
import stat
import time
from typing import Any, Callable, Iterator, Mapping

from ..core.errors import GpufleetError

DIR_ENV = "GPUFLEET_LOCK_DIR"
HELD_ENV = "GPUFLEET_LOCK_HELD"
TIMEOUT_ENV = "GPUFLEET_LOCK_TIMEOUT"
DEFAULT_DIR = "/tmp/gpufleet-fleet-locks"
# How long a second apply waits for the first before giving up (seconds). Making nodes takes
# minutes on a cloud; an hour would hide a hung apply.
DEFAULT_TIMEOUT = 1800
POLL = 0.2


class LockError(GpufleetError):
    """The fleet's lock could not be had; the message says who holds it and what to do."""


def lock_dir(environ: Mapping[str, str] | None = None) -> str:
    environ = os.environ if environ is None else environ
    return environ.get(DIR_ENV) or DEFAULT_DIR


def lock_path(fleet: str, environ: Mapping[str, str] | None = None) -> str:
    return os.path.join(lock_dir(environ), "fleet-%s.lock" % fleet)


def timeout(environ: Mapping[str, str] | None = None) -> float:
    """The wait limit: ``$GPUFLEET_LOCK_TIMEOUT`` seconds when it is a number, else the
    default."""
    environ = os.environ if environ is None else environ
    try:
        value = float(environ.get(TIMEOUT_ENV) or DEFAULT_TIMEOUT)
    except ValueError:
        return DEFAULT_TIMEOUT
    return value if value >= 0 else DEFAULT_TIMEOUT


def held_by_caller(fleet: str, environ: Mapping[str, str] | None = None) -> bool:
    """True when this process's caller holds the lock of ``fleet`` (``$GPUFLEET_LOCK_HELD``)."""
    environ = os.environ if environ is None else environ
    return fleet in [n.strip() for n in (environ.get(HELD_ENV) or "").split(",")]


def _ensure_dir(path):
    """Make the shared lock folder, world-writable and sticky, when missing."""
    try:
        os.mkdir(path, 0o700)
    except OSError as exc:
        if exc.errno != errno.EEXIST:
            raise
        return
    os.chmod(path, 0o1777)


def _open(path):
    """The lock file, opened for writing where this user may, else for reading (a flock needs
    no write access). A file made here gets mode 0666, so that other users can note themselves
    in it. Where a sticky folder refuses to open another user's file with O_CREAT (Linux's
    protected_regular), it is opened without."""
    try:
        return os.open(path, os.O_RDWR)
    except OSError as exc:
        if exc.errno == errno.EACCES:
            return os.open(path, os.O_RDONLY)
        if exc.errno != errno.ENOENT:
            raise
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o666)
    except OSError as exc:
        if exc.errno != errno.EEXIST:
            raise
        return _open(path)   # made by another process in between
    os.fchmod(fd, 0o666)
    return fd


def holder_text(pid: int | None = None, user: str | None = None, host: str | None = None,
                since: str | None = None) -> str:
    """What the holder writes into the lock file: ``pid user host since``."""
    try:
        user = user or getpass.getuser()
    except (KeyError, OSError):
        user = str(os.getuid())
    return "%d %s %s %s\n" % (
        pid or os.getpid(), user, host or socket.gethostname(),
        since or time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()))


def describe_holder(text: str) -> str:
    """``pid 123, user me, host h, since T`` from a lock file's text, or ``unknown`` when the
    file says nothing usable."""
    parts = (text or "").split()
    if len(parts) < 4 or not parts[0].isdigit():
        return "unknown"
    return "pid %s, user %s, host %s, since %s" % tuple(parts[:4])


def _read(fd):
    try:
        os.lseek(fd, 0, os.SEEK_SET)
        return os.read(fd, 512).decode("utf-8", "replace")
    except OSError:
        return ""


def _note(fd):
    """Write this process into the lock file it holds (skipped when it is read-only here)."""
    try:
        os.ftruncate(fd, 0)
        os.lseek(fd, 0, os.SEEK_SET)
        os.write(fd, holder_text().encode("utf-8"))
    except OSError:
        pass


@contextlib.contextmanager
def fleet_lock(fleet: str, on_wait: Callable[[str], Any] | None = None, limit: float | None = None,
               environ: Mapping[str, str] | None = None,
               clock: Callable[[], float] = time.monotonic,
               sleep: Callable[[float], Any] = time.sleep) -> Iterator[bool]:
    """Hold the apply lock of ``fleet`` while the block runs; yields whether it was waited for.

    When another process holds it, ``on_wait(message)`` is called once with a line that says
    so (``waiting for another apply of fleet X (pid, user, host, since)...``) and the lock is
    tried again until ``limit`` seconds (default: ``timeout()``) have passed; then LockError
    says who holds it. When the caller holds it already (``held_by_caller``), nothing is
    taken."""
    environ = os.environ if environ is None else environ
    if held_by_caller(fleet, environ):
        yield False
        return
    path = lock_path(fleet, environ)
    try:
        _ensure_dir(os.path.dirname(path))
        fd = _open(path)
    except OSError as exc:
        raise LockError("cannot open the apply lock of fleet %s at %s (%s): set %s to a folder "
                        "every user of this machine's gpufleet may write to"
                        % (fleet, path, exc.strerror or exc, DIR_ENV)) from exc
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise LockError("%s is not a file: remove it, or set %s to another folder"
                            % (path, DIR_ENV))
        limit = timeout(environ) if limit is None else limit
        waited = False
        deadline = clock() + limit
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except OSError as exc:
                if exc.errno not in (errno.EAGAIN, errno.EACCES, errno.EWOULDBLOCK):
                    raise LockError("cannot lock %s: %s" % (path, exc.strerror or exc)) \
                        from exc
            holder = describe_holder(_read(fd))
            if not waited:
                waited = True
                if on_wait is not None:
                    on_wait("waiting for another apply of fleet %s (%s)..." % (fleet, holder))
            if clock() >= deadline:
                raise LockError(
                    "another apply of fleet %s (%s) still holds its lock after %d s of waiting: "
                    "let it end and apply again, or end that process if it hangs (its lock "
                    "goes with it); %s sets how long to wait"
                    % (fleet, holder, int(limit), TIMEOUT_ENV))
            sleep(POLL)
        _note(fd)
        try:
            yield waited
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)


def holding(fleet: str, environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """``environ`` (a copy of this process's when None) telling child processes that the lock
    of ``fleet`` is held for them (``$GPUFLEET_LOCK_HELD``)."""
    env = dict(os.environ if environ is None else environ)
    held = [n for n in (env.get(HELD_ENV) or "").split(",") if n]
    if fleet not in held:
        held.append(fleet)
    env[HELD_ENV] = ",".join(held)
    return env
