# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""A service as the runner runs it: one job per replica.

``runnable(config, proxy)`` returns the task config the runner takes (as tasks/devenv.py does
for a dev environment): ``nodes`` is the replica count, and the ``service`` key makes the
runner treat each job as a replica (tasks/rankplan.py, tasks/container.py, tasks/placement.py):
each is a one-node run of its own (``DSTACK_NODES_NUM=1``, rank 0, its own address as the
master's), with no SSH between them, its container named ``<run>-0-<replica>`` and the
service's port published on its host's internal address. The ``service`` key also says where
the service is published: the replicas' ``gpufleet.service`` label carries it, which ``ps``
reads back. Pure Python.
"""

from __future__ import annotations

from typing import Any, Optional

from ..spec import SpecError
from .records import PROXY_PORT, model_prefix, service_prefix, url

SERVICE = "service"


class ServiceError(SpecError):
    """A service that cannot run as given (a port clash, no replicas)."""


def replica_count(config: dict[str, Any]) -> int:
    """The fixed replica count of a service (``replicas.min``; ranges are refused earlier by
    spec/support.py)."""
    replicas = config.get("replicas") or {}
    count = replicas.get("min", 1) if isinstance(replicas, dict) else replicas
    return int(1 if count is None else count)


def check_ports(config: dict[str, Any]) -> None:
    """The one port clash the in-fleet proxy has within a run: the service's ``port`` also in
    its ``ports`` (those are forwarded by ``gpufleet attach`` from the replica, which the
    service's port is not). Raises ServiceError naming both fields."""
    port = config.get("port")
    for index, item in enumerate(config.get("ports") or []):
        target = item.get("container_port") if isinstance(item, dict) else item
        same = str(target).rsplit(":", 1)[-1].strip() == str(port).strip()
        if same:
            raise ServiceError(
                "ports[%d]: %s is the service's port; the proxy publishes it, so leave it out "
                "of ports" % (index, port))


def proxy_of(run: str, proxy_host: str, proxy_address: str, model: Any = None,
             port: int = PROXY_PORT) -> dict[str, Any]:
    """Where ``run`` is published: the proxy's host and address, and the URLs."""
    return {"proxy_host": proxy_host, "proxy_address": proxy_address, "proxy_port": port,
            "url": url(proxy_address, service_prefix(run), port),
            "model_url": url(proxy_address, model_prefix(), port) if model else None}


def runnable(config: dict[str, Any], proxy: Optional[dict[str, Any]] = None) -> dict[str, Any]:
    """The task config the runner takes for ``config``: a service becomes ``replicas.min``
    one-node jobs (``run_type`` keeps what it was) with a ``service`` key ``{"port",
    "replicas"}`` plus ``proxy`` (``proxy_of``'s answer) when given; anything else is as it
    is."""
    if config.get("type") != SERVICE:
        return config
    check_ports(config)
    count = replica_count(config)
    if count < 1:
        raise ServiceError("replicas: a service needs at least one replica here (scale to "
                           "zero comes with autoscaling)")
    service = {"port": int(config["port"]), "replicas": count}
    service.update(proxy or {})
    return dict(config, type="task", run_type=SERVICE, nodes=count, groups=None,
                service=service)
