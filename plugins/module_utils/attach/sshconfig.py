# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The SSH config entries ``gpufleet attach`` keeps: a file of ours, included from the user's
``~/.ssh/config`` the way dstack includes ``~/.dstack/ssh/config``.

Our file holds one section per run, between ``# gpufleet run NAME begin`` and ``... end``; a
section is replaced or dropped whole, under a lock, so two commands at once never lose one
another's runs. The user's own file only ever gets one line, ``Include <our file>``, put first
(an ``Include`` after a ``Host`` block would belong to that block); nothing else of it changes.
Pure Python.
"""

from __future__ import annotations

import fcntl
import os
import re
from typing import Iterable

from ..core.errors import GpufleetError
from ..core.files import write_atomically

BEGIN = "# gpufleet run %s begin"
END = "# gpufleet run %s end"
_SECTION = re.compile(r"^# gpufleet run (\S+) begin$")


class SshConfigError(GpufleetError):
    """An SSH config file that cannot be read or written; the message names it."""


def _value(value):
    text = str(value)
    return '"%s"' % text if (" " in text or not text) else text


def host_block(aliases: Iterable[str], options: Iterable[tuple[str, object]]) -> str:
    """``Host a b`` and its options (a list of ``(key, value)``), four spaces in."""
    lines = ["Host %s" % " ".join(aliases)]
    lines += ["    %s %s" % (key, _value(value)) for key, value in options]
    return "\n".join(lines) + "\n"


def _sections(text):
    """``[(run or None, text)]``: the file cut into our sections and what lies between."""
    parts = []
    current, run = [], None
    for line in text.splitlines(True):
        match = _SECTION.match(line.rstrip("\n"))
        if run is None and match:
            if current:
                parts.append((None, "".join(current)))
            current, run = [line], match.group(1)
            continue
        current.append(line)
        if run is not None and line.rstrip("\n") == END % run:
            parts.append((run, "".join(current)))
            current, run = [], None
    if current:
        parts.append((None, "".join(current)))   # (a section never ended stays as it is)
    return parts


class _Locked(object):
    def __init__(self, path):
        self.path = path + ".lock"

    def __enter__(self):
        folder = os.path.dirname(self.path)
        try:
            if folder and not os.path.isdir(folder):
                os.makedirs(folder, mode=0o700, exist_ok=True)
            self.handle = open(self.path, "a")
        except (IOError, OSError) as exc:
            raise SshConfigError("cannot lock %s: %s" % (self.path, exc)) from exc
        fcntl.flock(self.handle, fcntl.LOCK_EX)
        return self

    def __exit__(self, *exc):
        fcntl.flock(self.handle, fcntl.LOCK_UN)
        self.handle.close()


def _read(path):
    try:
        with open(path) as handle:
            return handle.read()
    except FileNotFoundError:
        return ""
    except (IOError, OSError) as exc:
        raise SshConfigError("cannot read %s: %s" % (path, exc)) from exc


def _write(path, text, mode):
    try:
        write_atomically(path, text, mode)
    except (IOError, OSError) as exc:
        raise SshConfigError("cannot write %s: %s" % (path, exc)) from exc


def runs(path: str) -> list[str]:
    """The runs our file has a section for."""
    return [run for run, _text in _sections(_read(path)) if run]


def set_run(path: str, run: str, blocks: list[str]) -> bool:
    """Give ``run`` exactly ``blocks`` (host_block texts) in our file at ``path``; ``blocks``
    empty or None drops its section. Returns whether the file changed."""
    with _Locked(path):
        before = _read(path)
        kept = [text for name, text in _sections(before) if name != run]
        after = "".join(kept)
        if blocks:
            if after and not after.endswith("\n"):
                after += "\n"
            after += "%s\n%s%s\n" % (BEGIN % run, "".join(blocks), END % run)
        if after == before:
            return False
        _write(path, after, 0o600)
        return True


def include_line(path: str) -> str:
    return "Include %s\n" % _value(path)


def ensure_include(user_config: str, ours: str) -> bool:
    """Put ``Include <ours>`` first in the user's SSH config (made, 0600 in a 0700 folder,
    when missing). Returns whether it changed; a link is followed, the rest of the file is
    kept byte for byte."""
    target = os.path.realpath(os.path.expanduser(user_config))
    line = include_line(ours)
    with _Locked(target):
        before = _read(target)
        if line.rstrip("\n") in before.splitlines():
            return False
        folder = os.path.dirname(target)
        if folder and not os.path.isdir(folder):
            try:
                os.makedirs(folder, mode=0o700, exist_ok=True)
            except OSError as exc:
                raise SshConfigError("cannot create %s: %s" % (folder, exc)) from exc
        try:
            mode = os.stat(target).st_mode & 0o777
        except OSError:
            mode = 0o600
        _write(target, line + before, mode)
        return True
