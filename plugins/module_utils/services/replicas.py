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

from ..core.errors import GpufleetError
from .records import PROXY_PORT, model_prefix, service_prefix, url

SERVICE = "service"
# dstack's window of the request rate when ``scaling`` names none, in seconds.
DEFAULT_WINDOW = 60


class ServiceError(GpufleetError):
    """A service that cannot run as given (no replica, a model another service publishes)."""


def replica_groups(config: dict[str, Any]) -> list[dict[str, Any]]:
    """A service's replica groups as the runner takes them, in order: ``{"name", "replicas"}``
    each (its count: a group's replicas are one number in this version, spec.support); [] for
    a service of one group."""
    out = []
    for group in config.get("groups") or []:
        replicas = group.get("replicas") or {}
        count = replicas.get("min", 1) if isinstance(replicas, dict) else replicas
        out.append({"name": str(group["name"]), "replicas": int(1 if count is None else count)})
    return out


def replica_count(config: dict[str, Any]) -> int:
    """How many replicas a service starts with: ``replicas.min`` (a range starts at its least
    and autoscaling takes it from there); with replica groups, theirs together."""
    if config.get("groups"):
        return sum(g["replicas"] for g in replica_groups(config))
    replicas = config.get("replicas") or {}
    count = replicas.get("min", 1) if isinstance(replicas, dict) else replicas
    return int(1 if count is None else count)


def replica_range(config: dict[str, Any]) -> tuple[int, int]:
    """``(least, most)`` replicas of a service (both the count when it is fixed)."""
    if config.get("groups"):
        return replica_count(config), replica_count(config)
    replicas = config.get("replicas") or {}
    least = replica_count(config)
    most = replicas.get("max", least) if isinstance(replicas, dict) else least
    return least, int(least if most is None else most)


def clipped(config: dict[str, Any], count: int) -> int:
    """``count`` replicas kept within the service's range (dstack does the same with a
    running service whose range changed)."""
    least, most = replica_range(config)
    return min(max(count, least), most)


def scaling_of(config: dict[str, Any]) -> Optional[dict[str, Any]]:
    """What the autoscaler of a service follows (services.autoscale): its ``scaling`` with
    ``min`` and ``max`` of its range, and the window (dstack's default when not given);
    None for a fixed count."""
    scaling = config.get("scaling")
    least, most = replica_range(config)
    if not isinstance(scaling, dict) or least == most:
        return None
    return dict(scaling, window=int(scaling.get("window") or DEFAULT_WINDOW), min=least,
                max=most)


def model_name(config: Any) -> Optional[str]:
    """The name of the service's model, or None."""
    model = config.get("model")
    if isinstance(model, dict):
        return model.get("name")
    return model if isinstance(model, str) else None


def check_clash(config: dict[str, Any], run: str, proxy_host: str,
                services: list[dict[str, Any]]) -> None:
    """The one clash the in-fleet proxy has: every service of a proxy has its own path
    (its run's name), and its replicas their own host ports (Docker picks them), but the
    models of all its services share one path (``/proxy/models/main/``), told apart by the
    model's name. ``services``: the run records (tasks.listing) of the live services; one of
    another name on the same proxy host with the same model name is a ServiceError."""
    name = model_name(config)
    if not name:
        return
    for record in services:
        service = record.get("service") or {}
        if record.get("name") != run and service.get("proxy_host") == proxy_host and (
                service.get("model") == name):
            raise ServiceError(
                "model: %s is already published by service %s on %s; give this service's "
                "model another name, or stop %s first" % (name, record["name"], proxy_host,
                                                          record["name"]))


def proxy_of(run: str, proxy_host: str, proxy_address: str, model: Any = None,
             port: int = PROXY_PORT) -> dict[str, Any]:
    """Where ``run`` is published: the proxy's host and address, and the URLs."""
    name = model.get("name") if isinstance(model, dict) else model
    return {"proxy_host": proxy_host, "proxy_address": proxy_address, "proxy_port": port,
            "url": url(proxy_address, service_prefix(run), port),
            "model_url": url(proxy_address, model_prefix(), port) if model else None,
            "model": name or None}


def runnable(config: dict[str, Any], proxy: Optional[dict[str, Any]] = None,
             count: Optional[int] = None) -> dict[str, Any]:
    """The task config the runner takes for ``config``: a service becomes ``count`` (by
    default ``replicas.min``) one-node jobs (``run_type`` keeps what it was) with a
    ``service`` key ``{"port", "replicas", "respawn", "scaling"}`` plus ``proxy``
    (``proxy_of``'s answer) when given; anything else is as it is. Replica groups become the
    runner's node groups (each replica a job of its group, numbered across the groups in
    order, with its group's commands and resources), and the ``service`` key says them
    (``groups``: replica_groups)."""
    if config.get("type") != SERVICE:
        return config
    if config.get("groups"):
        return _grouped(config, proxy)
    count = replica_count(config) if count is None else count
    if count < 1:
        raise ServiceError("replicas: a service needs at least one replica here (scale to "
                           "zero comes with autoscaling)")
    # Whether a failed replica is made again on its own (tasks.lifecycle.decide): its retry
    # covers errors. On the replicas' label, so any look at the run knows it.
    respawn = "error" in ((config.get("retry") or {}).get("on_events") or ())
    service = {"port": int(config["port"]), "replicas": count, "respawn": respawn,
               "scaling": scaling_of(config)}
    service.update(proxy or {})
    return dict(config, type="task", run_type=SERVICE, nodes=count, groups=None,
                service=service)


def _grouped(config: dict[str, Any], proxy: Optional[dict[str, Any]]) -> dict[str, Any]:
    """``runnable`` of a service with replica groups (a fixed count each)."""
    layout = replica_groups(config)
    if any(g["replicas"] < 1 for g in layout):
        raise ServiceError("groups: each replica group needs at least one replica here")
    count = sum(g["replicas"] for g in layout)
    respawn = "error" in ((config.get("retry") or {}).get("on_events") or ())
    service = {"port": int(config["port"]), "replicas": count, "respawn": respawn,
               "scaling": None, "groups": layout}
    service.update(proxy or {})
    groups = [{"name": g["name"], "nodes": n["replicas"], "resources": g.get("resources"),
               "commands": list(g.get("commands") or []), "ports": []}
              for g, n in zip(config["groups"], layout)]
    return dict(config, type="task", run_type=SERVICE, nodes=count, groups=groups,
                service=service)
