# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Publishing a service's replicas on its fleet's proxy host, and taking them off it.

The proxy host is the fleet's queue host (tasks.queue_records.queue_host: the reachable ready
instance with the lowest number of the first fleet the run may use), so every service of a
fleet is behind one proxy, found again by anyone who looks. It listens where the role
gpufleet.cluster.gateway recorded on that host (``proxy_check``'s ``listen``: the host's internal
address unless ``gateway_listen_address`` or ``gateway_public`` say otherwise, port
``gateway_port``). Its URL is that address and port, or, when the role listens on every address,
the address this controller reaches the host on (as SSH does). The host side of each
step is tasks/hostside/proxyside.py (``proxy_check``, ``proxy_publish``,
``proxy_unpublish``, ``proxy_status``), reached through the host helper as every other
operation is.
"""

from __future__ import annotations

import time
from typing import Any, Callable, Iterable, Mapping, Optional

from ..backends import local_reach
from ..backends.docker_cli import Docker, DockerError
from ..core.errors import GpufleetError
from ..tasks.hostside import acmeside
from ..tasks.queue_records import candidate_fleets, queue_host
from ..tasks.ssh import NodeError
from . import gateways
from .records import PROJECT, PROXY_PORT, Replica, Route
from .replicas import DEFAULT_WINDOW, scaling_of

# The addresses that mean every address of the host (gateway_public).
WILDCARDS = ("0.0.0.0", "::", "*", "[::]")
# How long proxy_publish may take, as any other request of the host helper (tasks.ssh), and
# on a lets-encrypt gateway as long again as certbot may take for the route's names
# (publish_timeout).
PUBLISH_TIMEOUT = 120


class PublishError(GpufleetError):
    """A service could not be published or taken off its proxy."""


def proxy_instance(config: Mapping[str, Any], fleets: list, errors: Iterable[str] = ()
                   ) -> dict[str, Any]:
    """The instance record of the proxy host of a service with ``config`` (a run config), or
    PublishError when none of its fleets has a reachable ready host."""
    name = queue_host(fleets, candidate_fleets(config, fleets), errors)
    for fleet in fleets:
        for instance in fleet.get("instances") or []:
            if instance.get("name") == name:
                return dict(instance, fleet=instance.get("fleet") or fleet.get("name"))
    raise PublishError("no host of fleet%s %s is ready to proxy the service; apply the fleet "
                       "first" % ("s" if len(candidate_fleets(config, fleets)) > 1 else "",
                                  ", ".join(candidate_fleets(config, fleets)) or "(none)"))


def running_proxy(record: Mapping[str, Any], chosen: Mapping[str, Any], fleets: list,
                  nodes: Mapping[str, Any]) -> tuple[dict[str, Any], Optional[str]]:
    """The proxy host of the running service ``record`` (its run record): ``(instance, lost)``.
    The host that publishes it keeps it while it is a host of its fleet, also when the queue
    host (``chosen``, proxy_instance's answer now) is another one (a lower-numbered host came
    since). One that is no longer there (lost: removed, terminated, taken out of the fleet) is
    replaced by ``chosen``, and ``lost`` names it. PublishError when it is there and does not
    answer (``chosen`` itself is asked by the caller, services.submit). A service on a gateway
    has its own rules (services.gateways)."""
    service = record.get("service") or {}
    old = service.get("proxy_host")
    if not old or service.get("gateway") or old == chosen.get("name"):
        return dict(chosen), None
    found = instances_of(fleets, name=old)
    if not found:
        return dict(chosen), str(old)
    silent = "it cannot be reached from this controller" if old not in nodes else None
    if silent is None:
        try:
            check(nodes[old])
        except PublishError as exc:
            silent = str(exc)
    if silent:
        raise PublishError("service %s is published by the proxy on %s, which does not answer "
                           "(%s): apply it again once %s is back; if it is lost for good, take "
                           "it out of fleet %s (gpufleet fleet delete %s -i N) and apply it "
                           "again: another host of the fleet publishes it then"
                           % (record.get("name"), old, silent, old, found[0]["fleet"],
                              found[0]["fleet"]))
    return found[0], None


# What says where a service is published, in its run record and in proxy_of's answer (its
# model's URL follows the same address; whether it has one is its version's).
WHERE = ("proxy_host", "proxy_address", "url")


def where_changed(record: Mapping[str, Any], proxy: Mapping[str, Any]) -> bool:
    """Whether the running service ``record`` (its run record) is published elsewhere than
    ``proxy`` (replicas.proxy_of's or gateways.proxy_of's answer) says: another host, address,
    port or URL (its proxy host lost, the gateway role played with other values, a gateway's
    new domain)."""
    service = record.get("service") or {}
    return any(service.get(key) != proxy.get(key) for key in WHERE)


def repoint(nodes: Mapping[str, Any], record: Mapping[str, Any], proxy: Mapping[str, Any],
            lost: Optional[str] = None, clock: Callable[[], float] = time.time) -> list[str]:
    """Note beside each replica of ``record`` where its service is published now (``proxy``,
    replicas.proxy_of's answer; ``lost``: the proxy host it replaces, if one was lost): every
    look at the run (tasks.listing) reads it there, and a replica made again keeps it. Returns
    the problems (a host that did not answer), each said by the caller."""
    note = dict(proxy, moved_at=float(clock()), moved_from=lost)
    problems = []
    for job in record.get("jobs") or []:
        host = job.get("host")
        if host not in nodes:
            continue   # its host is gone as well: nothing of it is read again
        try:
            nodes[host].call("repoint", {"run": record["name"], "job_num": job["job_num"],
                                         "run_id": record.get("run_id"), "proxy": note})
        except NodeError as exc:
            problems.append("replica %s on %s: %s" % (job["job_num"], host, exc))
    return problems


def check(node: Any) -> dict[str, Any]:
    """``proxy_check``'s answer on ``node``: ``{"installed", "version", "running", "listen"}``
    (``listen``: ``{"address", "port"}`` as the gateway role recorded it, None without)."""
    try:
        return node.call("proxy_check", {})
    except NodeError as exc:
        raise PublishError("could not ask %s whether it has the proxy: %s"
                           % (node.name, exc)) from exc


def listen_of(answer: Optional[Mapping[str, Any]], instance: Mapping[str, Any]
              ) -> dict[str, Any]:
    """Where the proxy on ``instance`` (its instance record) listens: ``{"address", "port"}``
    from ``proxy_check``'s ``answer`` (the role's record), else, on a host set up without that
    record, its internal address (else the one this controller reaches it on) and
    PROXY_PORT."""
    listen = (answer or {}).get("listen")
    if isinstance(listen, Mapping) and listen.get("address") and listen.get("port"):
        return {"address": str(listen["address"]), "port": int(listen["port"])}
    return {"address": instance.get("internal_ip") or instance.get("hostname") or "",
            "port": PROXY_PORT}


def url_address(listen: Mapping[str, Any], instance: Mapping[str, Any]) -> str:
    """The address of a service's URL: the one the proxy listens on, or, when it listens on
    every address, the one this controller reaches the host on (``hostname``)."""
    address = str(listen.get("address") or "")
    if not address or address in WILDCARDS:
        return instance.get("hostname") or instance.get("internal_ip") or ""
    return address


def replicas_of(config: Mapping[str, Any], containers: Mapping[str, list],
                addresses: Mapping[str, str]) -> list[Replica]:
    """The service's replicas as the proxy reaches them, from the replicas' entries of the
    hosts' ``status`` (``containers``: ``{host: [entry]}``, the latest submission only) and
    ``addresses`` (``{host: internal address}``). A replica on its host's network answers on
    the service's own port; one whose published port is not known yet is left out."""
    port = int(config["port"])
    key = "%d/tcp" % port
    latest: dict[int, tuple[int, Replica]] = {}
    for host, entries in containers.items():
        for entry in entries:
            labels = entry.get("labels") or {}
            try:
                submission = int(labels.get("gpufleet.submission") or 0)
                num = int(labels.get("gpufleet.job") or "")
            except (TypeError, ValueError):
                continue
            if entry.get("state") not in ("created", "running", "restarting"):
                continue
            host_port: Any = port if entry.get("address") == "localhost" else (
                (entry.get("published") or {}).get(key))
            if not host_port or host not in addresses:
                continue
            item = (submission, Replica(replica_num=num, job_num=num, host=host,
                                        address=addresses[host], port=int(host_port)))
            if num not in latest or latest[num][0] <= submission:
                latest[num] = item
    return [latest[num][1] for num in sorted(latest)]


def instances_of(fleets: list, fleet: Optional[str] = None, name: Optional[str] = None
                 ) -> list[dict[str, Any]]:
    """The instance records of ``fleet`` (every fleet's with None), or the one named ``name``,
    each with ``fleet``."""
    return [dict(instance, fleet=instance.get("fleet") or record.get("name"))
            for record in fleets if fleet is None or record.get("name") == fleet
            for instance in record.get("instances") or []
            if name is None or instance.get("name") == name]


def addresses_of(fleets: list, fleet: str) -> dict[str, str]:
    """``{instance name: internal address}`` of ``fleet``'s instances (the address the proxy
    reaches a replica on)."""
    return dict((instance["name"], instance.get("internal_ip") or instance.get("hostname"))
                for instance in instances_of(fleets, fleet)
                if instance.get("internal_ip") or instance.get("hostname"))


def https_of(config: Mapping[str, Any], listen: Optional[Mapping[str, Any]] = None) -> bool:
    """Whether the service is served over HTTPS: what its runnable config's ``service`` says,
    else what its gateway (``listen``, as the gateway's role recorded it) makes of it; the
    in-fleet proxy serves HTTP."""
    held = (config.get("service") or {}).get("https")
    if held is not None:
        return bool(held)
    if listen and listen.get("gateway"):
        return gateways.service_https(config, listen)
    return False


def route_of(config: Mapping[str, Any], run: str, user: Optional[str], fleet: str,
             replicas: Iterable[Replica], clock: Callable[[], float] = time.time,
             listen: Optional[Mapping[str, Any]] = None) -> Route:
    """The Route (services.records) of ``run``: the normalized service config's proxy part
    and its replicas. Its requests are counted over its autoscaling's window (dstack's
    default window without autoscaling). ``listen``: where its proxy listens (https_of)."""
    scaling = scaling_of(dict(config))
    return Route(run=run, user=user or "", fleet=fleet, project=PROJECT,
                 port=int(config["port"]), auth=bool(config.get("auth", True)),
                 strip_prefix=bool(config.get("strip_prefix", True)),
                 rate_limits=list(config.get("rate_limits") or []),
                 probes=list(config.get("probes") or []), model=config.get("model"),
                 replicas=list(replicas), submitted_at=float(clock()),
                 rate_window=int(scaling["window"] if scaling else DEFAULT_WINDOW),
                 https=https_of(config, listen))


def publish_timeout(route: Route, listen: Optional[Mapping[str, Any]] = None) -> int:
    """Seconds ``proxy_publish`` of ``route`` may take: PUBLISH_TIMEOUT, and on a lets-encrypt
    gateway (``listen`` as its role recorded it) each name that may need a certificate
    obtained (tasks.hostside.acmeside, one after another) as long as certbot may take and its
    kill, so that the request outlasts certbot's own limit and the host says what went
    wrong."""
    if not listen:
        return PUBLISH_TIMEOUT
    try:
        limit = acmeside.acme_timeout(dict(listen))
    except ValueError:   # the host says it in the publish's answer
        limit = acmeside.ACME_TIMEOUT
    names = acmeside.acme_names(dict(listen), dict(route))
    return PUBLISH_TIMEOUT + len(names) * (limit + acmeside.ACME_KILL_AFTER)


def publish(node: Any, route: Route, listen: Optional[Mapping[str, Any]] = None
            ) -> dict[str, Any]:
    """``proxy_publish`` of ``route`` on the proxy host ``node``: its answer, ``{"changed",
    "routes"}``, or PublishError with the host's message (the host put its files back). The
    host listens where the gateway role recorded; ``listen`` (``listen_of``) only counts on a
    host without that record."""
    payload: dict[str, Any] = {"route": route}
    if listen:
        payload["listen"] = {"address": listen["address"], "port": int(listen["port"])}
    try:
        return node.call("proxy_publish", payload, timeout=publish_timeout(route, listen))
    except NodeError as exc:
        raise PublishError("could not publish service %s on %s: %s"
                           % (route["run"], node.name, exc)) from exc


def set_replicas(node: Any, run: str, replicas: list[Replica]) -> dict[str, Any]:
    """``proxy_replicas``: the published route of ``run`` on the proxy host ``node`` takes
    ``replicas`` (its other settings stay); ``missing`` when the host publishes no such run."""
    try:
        return node.call("proxy_replicas", {"run": run, "replicas": replicas})
    except NodeError as exc:
        raise PublishError("could not give service %s its replicas on %s: %s"
                           % (run, node.name, exc)) from exc


def unpublish(node: Any, run: str) -> dict[str, Any]:
    """``proxy_unpublish`` of ``run`` on the proxy host ``node``: ``{"changed", "routes"}``."""
    try:
        return node.call("proxy_unpublish", {"run": run})
    except NodeError as exc:
        raise PublishError("could not take service %s off the proxy on %s: %s"
                           % (run, node.name, exc)) from exc


def unpublish_stopped(record: Mapping[str, Any], nodes: Mapping[str, Any]
                      ) -> Optional[dict[str, Any]]:
    """Take a stopped (or ended) service's route off its proxy host: ``record`` is its run
    record (tasks.listing: ``service.proxy_host``), ``nodes`` ``{host: Node}``. Returns
    ``proxy_unpublish``'s answer, or None for a run that is no service. A proxy host that is
    gone has nothing left to take off."""
    service = (record or {}).get("service") or {}
    host = service.get("proxy_host")
    if not host:
        return None
    if host not in nodes:
        return {"changed": False, "routes": [], "missing": host}
    return unpublish(nodes[host], record["name"])


def reach_problem(gateway: str, proxy: Mapping[str, Any],
                  instances: Iterable[Mapping[str, Any]]) -> Optional[str]:
    """Why gateway ``gateway``'s host (``proxy``, its instance record) cannot reach the hosts of
    a service's fleet (``instances``), or None: a local gateway reaches local nodes only, a
    cloud gateway the instances of its own cloud and region (its network); an SSH fleet's
    hosts are taken as reachable."""
    where = proxy.get("backend")
    for instance in instances:
        backend = instance.get("backend")
        if backend == "ssh" or (backend == where and (
                where == "local" or instance.get("region") == proxy.get("region"))):
            continue
        return ("gateway %s (%s, %s) cannot reach %s (%s, %s): a local gateway publishes the "
                "services of local fleets, a cloud gateway those of its cloud and region; name "
                "another gateway, or set `gateway: false`"
                % (gateway, where, proxy.get("region"), instance.get("name"), backend,
                   instance.get("region")))
    return None


def reach(proxy: Optional[Mapping[str, Any]], instances: Iterable[Mapping[str, Any]]) -> list:
    """Let the proxy's host (``proxy``: a gateway's, or the in-fleet proxy's, instance record)
    reach the hosts of a service's replicas (``instances``: their fleet's instance records): a
    local proxy's container joins the other local nodes' networks (backends.local_reach; the
    nodes of a local fleet without ``placement: cluster`` each have a network of their own); a
    cloud host reaches them at their internal addresses within its network. Returns the
    networks joined; PublishError when the engine refuses."""
    if not proxy or proxy.get("backend") != "local" or not proxy.get("container"):
        return []
    networks = local_reach.networks_of(i for i in instances if i.get("name") != proxy.get("name"))
    if not networks:
        return []
    try:
        return local_reach.join(Docker(), str(proxy["container"]), networks)
    except DockerError as exc:
        raise PublishError("the proxy on %s cannot reach the service's hosts: %s"
                           % (proxy.get("name"), exc)) from exc
