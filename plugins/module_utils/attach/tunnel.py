# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The port forwards of an attached run: one OpenSSH process in the background, a control
master on a socket named after the run, as dstack's tunnel is. Like dstack's, it logs in to the
container (``RUN``), so that an attached dev environment counts as in use
(``inactivity_duration``); a container without sshd is reached through its instance
(``RUN-host``) instead, the forwards going to the container's address. ``gpufleet attach``
closes it on Ctrl-C; the run goes on.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import tempfile
from typing import Any, Callable

from ..core.errors import GpufleetError
from ..tasks.ssh import control_dir

TIMEOUT = 60


class TunnelError(GpufleetError):
    """The forwards could not be opened; the message has OpenSSH's reason."""


def control_path(run: str) -> str:
    """The run's control socket: short enough for a Unix socket name."""
    return os.path.join(control_dir(), "attach-%s" % hashlib.sha1(
        run.encode("utf-8")).hexdigest()[:12])


def _ask(control, what, runner):
    try:
        proc = runner(["ssh", "-S", control, "-O", what, "gpufleet-attach"],
                      stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                      stderr=subprocess.DEVNULL, timeout=20, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return proc.returncode == 0


def is_open(control: str, runner: Callable[..., Any] = subprocess.run) -> bool:
    return os.path.exists(control) and _ask(control, "check", runner)


def close(control: str, runner: Callable[..., Any] = subprocess.run) -> bool:
    """Close the forwards (whether they were open)."""
    was = is_open(control, runner)
    if was:
        _ask(control, "exit", runner)
    if os.path.exists(control):
        try:
            os.remove(control)
        except OSError:
            pass
    return was


def open_tunnel(config_file: str, run: str, address: str | None, forwards: list[dict[str, Any]],
                control: str, runner: Callable[..., Any] = subprocess.run) -> Any:
    """Open the run's tunnel: through the container's sshd, else (ports only) through its
    instance. TunnelError says why neither worked."""
    try:
        return open_forwards(config_file, run, "localhost", forwards, control, runner)
    except TunnelError:
        if not forwards:
            raise
        close(control, runner)
    return open_forwards(config_file, run + "-host", address, forwards, control, runner)


def open_forwards(config_file: str, host_alias: str, address: str | None,
                  forwards: list[dict[str, Any]], control: str,
                  runner: Callable[..., Any] = subprocess.run) -> None:
    """Forward each ``{"local_port", "container_port"}`` from 127.0.0.1 to ``address`` (the
    container, seen from ``host_alias``). Returns once they listen; TunnelError when not."""
    argv = ["ssh", "-F", config_file, "-f", "-N", "-M", "-S", control,
            "-o", "ControlPersist=no", "-o", "ExitOnForwardFailure=yes",
            "-o", "BatchMode=yes", "-o", "ServerAliveInterval=15",
            "-o", "ServerAliveCountMax=4"]
    for forward in forwards:
        argv += ["-L", "127.0.0.1:%d:%s:%d" % (forward["local_port"], address,
                                               forward["container_port"])]
    argv.append(host_alias)
    # Not a pipe: ssh -f goes on in the background with it, and nobody would read it.
    with tempfile.TemporaryFile() as errors:
        try:
            proc = runner(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                          stderr=errors, timeout=TIMEOUT, check=False)
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise TunnelError("cannot forward the run's ports: %s" % exc) from exc
        errors.seek(0)
        text = errors.read().decode("utf-8", "replace").strip()
    if proc.returncode != 0:
        raise TunnelError("cannot forward the run's ports through %s: %s" % (
            host_alias, text or "ssh exited %d" % proc.returncode))
