# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Which local ports a run's ``ports`` are forwarded to, as dstack chooses them.

A port the file names locally (``8000``, ``18080:8000``) must be free on this machine, or attach
fails saying so; an unnamed one (``*:8000``) takes the container port, else the next free one
above it. Container ports 10000-10999 are dstack's own (the runner, sshd) and are not
forwarded. Pure Python; whether a port is free is asked of ``is_free(port)``.
"""

from __future__ import annotations

import socket
from typing import Any, Callable

from ..core.errors import GpufleetError

RESERVED = range(10000, 11000)
HIGHEST = 65535


class PortError(GpufleetError):
    """A local port that cannot be used; the message says which and what to do."""


def is_free(port: int, host: str = "127.0.0.1") -> bool:
    """Whether ``port`` can be listened on at ``host`` now."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        sock.bind((host, port))
        return True
    except OSError:
        return False
    finally:
        sock.close()


def choose(ports: list[dict[str, Any]], is_free: Callable[[int], bool] = is_free,
           overrides: dict[int, int] | None = None) -> list[dict[str, Any]]:
    """``[{"local_port", "container_port", "url"}]`` for the normalized ``ports`` of a run
    (``{"local_port": int or None, "container_port": int}``); ``overrides`` maps container
    ports to local ones (``-p LOCAL:CONTAINER``). PortError when a named port is taken."""
    overrides = dict(overrides or {})
    wanted = []
    for port in ports or []:
        container = int(port["container_port"])
        if container in RESERVED:
            continue
        local = overrides.pop(container, port.get("local_port"))
        wanted.append((local, container))
    if overrides:
        raise PortError("port %s is not among the run's ports (%s)" % (
            ", ".join(str(p) for p in sorted(overrides)),
            ", ".join(str(c) for _l, c in wanted) or "none"))
    taken = set()
    chosen = []
    for local, container in wanted:
        if local is not None:
            if local in taken or not is_free(local):
                raise PortError(
                    "port %d is already in use: free it, or map %d to another local port "
                    "(gpufleet attach -p %d:%d)" % (local, container, local + 1, container))
        else:
            local = container
            while local in taken or not is_free(local):
                local += 1
                if local > HIGHEST:
                    raise PortError("no free local port at or above %d for container port %d"
                                    % (container, container))
        taken.add(local)
        chosen.append({"local_port": local, "container_port": container,
                       "url": "http://localhost:%d" % local})
    return chosen
