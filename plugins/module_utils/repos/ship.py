# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Getting a repo archive onto a run's hosts: once per host (the archive is named by its
SHA-256, so a host that has it is skipped, and a re-submitted edit is a new name), to every host
at once, over the SSH connection the runner already holds.

``nodes`` are the runner's host connections (tasks.ssh.Node): ``run(command)`` and
``argv(command)`` with ``sudo``. Archives older than ``KEEP_DAYS`` are removed from a host when
a new one arrives there, unless a job folder still links them.
"""

from __future__ import annotations

import posixpath
import shlex
import subprocess
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable, Iterable

from ..core.errors import GpufleetError

REPOS_ROOT = "/var/lib/gpufleet/repos"
KEEP_DAYS = 7


class ShipError(GpufleetError):
    """An archive that did not reach a host; the message names the host."""


def host_path(sha256: str) -> str:
    return posixpath.join(REPOS_ROOT, "%s.tar.gz" % sha256)


def _receive_command(sha256):
    final = host_path(sha256)
    part = final + ".part.$$"
    # Written beside its final name, then renamed: a reader never sees half an archive, and two
    # controllers sending the same archive at once both end with the whole one.
    script = ("umask 022; { mkdir -p %(root)s && cat > %(part)s && mv -f %(part)s %(final)s; } "
              "|| { rm -f %(part)s; exit 1; }; "
              "find %(root)s -maxdepth 1 -name '*.tar.gz' -links 1 -mtime +%(days)d "
              "-exec rm -f {} + 2>/dev/null; true"
              % {"root": REPOS_ROOT, "part": part, "final": shlex.quote(final),
                 "days": KEEP_DAYS})
    return "sh -c %s" % shlex.quote(script)


def ship(archive: dict[str, Any], nodes: dict[str, Any], hosts: Iterable[str],
         runner: Callable[..., Any] = subprocess.run) -> dict[str, str]:
    """Send ``archive`` (repos.local.build_archive's record) to each of ``hosts`` that lacks it.

    Returns ``{host: "sent" | "present"}``; raises ShipError naming the first host that failed.
    """
    final = host_path(archive["sha256"])

    def one(host):
        node = nodes[host]
        rc, out, _err = node.run("test -s %s && echo present || true" % shlex.quote(final),
                                 timeout=60)
        if rc == 0 and out.strip() == "present":
            return "present"
        with open(archive["path"], "rb") as handle:
            proc = runner(node.argv(node.sudo + _receive_command(archive["sha256"])),
                          stdin=handle, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          check=False)
        if proc.returncode != 0:
            detail = proc.stderr.decode("utf-8", "replace").strip()[-500:]
            raise ShipError("%s: could not receive the repo archive (%s): %s"
                            % (host, _size(archive["size"]), detail or "exit %d"
                               % proc.returncode))
        return "sent"

    hosts = sorted(set(hosts))
    if not hosts:
        return {}
    with ThreadPoolExecutor(max_workers=min(16, len(hosts))) as pool:
        futures = dict((host, pool.submit(one, host)) for host in hosts)
    out = {}
    for host in hosts:
        try:
            out[host] = futures[host].result()
        except ShipError:
            raise
        except GpufleetError as exc:   # the node's own error (unreachable...)
            raise ShipError("%s: could not check for the repo archive: %s" % (host, exc)) from exc
    return out


def _size(size):
    from .local import size_text

    return size_text(size)
