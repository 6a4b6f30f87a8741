# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Which gateway publishes a service, and its URLs there, by dstack's rules.

A gateway (``type: gateway``, spec/gateway.py) is a one-node fleet whose record carries
``gateway``; the role gpufleet.cluster.gateway recorded on its host what it serves (its name,
domain, HTTPS port, certificate and ``default``: ``proxy_check``'s ``listen``). A service's
``gateway``:

- a name: that gateway ("Gateway NAME does not exist in project main" without it);
- ``false``: none, the in-fleet proxy publishes the service;
- ``true`` or unset: the project's default gateway; unset and no default: the in-fleet proxy;
  ``true`` and no default: dstack's refusal.

The default gateway is the newest one whose file says ``default: true``, else the oldest one
whose file leaves ``default`` unset (dstack makes a new gateway the default unless one is
already), never one that says ``default: false``.

On a gateway a service is ``RUN.DOMAIN``, over HTTPS when the service asks for it (``https``
unset or true; ``auto``: when the gateway has a certificate), and the models' endpoint is
``gateway.DOMAIN``. A service named ``gateway`` cannot be on a gateway (that name is the
models').
"""

from __future__ import annotations

from typing import Any, Mapping, Optional, TypedDict

from ..core.errors import GpufleetError
from ..tasks.ssh import NodeError, parallel
from .records import PROJECT, url


class GatewayError(GpufleetError):
    """A service's gateway cannot be used; the message says why (dstack's words where it has
    them)."""


class Gateway(TypedDict):
    """A gateway as a service uses it."""
    name: str
    instance: dict      # its host's instance record (fleets.records), with ``fleet``
    listen: dict        # what its role recorded: address, port, domain, https_port, ...


def gateway_fleets(fleets: list) -> list[dict[str, Any]]:
    """The fleet records of ``fleets`` that are gateways' hosts."""
    return [record for record in fleets if record.get("gateway")]


def run_fleets(fleets: list) -> list[dict[str, Any]]:
    """The fleet records a run may be placed on: every one but the gateways' hosts."""
    return [record for record in fleets if not record.get("gateway")]


def _host(record):
    for instance in record.get("instances") or []:
        if instance.get("hostname"):
            return dict(instance, fleet=instance.get("fleet") or record["name"])
    return None


def _listen(node: Any, name: str) -> dict[str, Any]:
    try:
        answer = node.call("proxy_check", {})
    except NodeError as exc:
        raise GatewayError("gateway %s does not answer: %s" % (name, exc)) from exc
    listen = answer.get("listen") or {}
    if not (answer.get("installed") and answer.get("running")) or not listen.get("gateway"):
        raise GatewayError("gateway %s is not set up: HAProxy is %s there; apply the gateway's "
                           "file again" % (name, "running" if answer.get("running") else
                                           "not running"))
    return listen


def _created(record):
    host = _host(record) or {}
    return str(record.get("created") or host.get("created") or "")


def default_of(fleets: list) -> Optional[dict[str, Any]]:
    """The fleet record of the default gateway by what the gateways' files say (their records'
    ``gateway``), whether or not their hosts answer now: the newest that says ``default:
    true``, else the oldest that leaves it unset; None when none."""
    found = gateway_fleets(fleets)
    chosen = [r for r in found if (r.get("gateway") or {}).get("default") is True]
    if chosen:
        return max(chosen, key=lambda r: (_created(r), r["name"]))
    unset = [r for r in found if (r.get("gateway") or {}).get("default") is None]
    if unset:
        return min(unset, key=lambda r: (_created(r), r["name"]))
    return None


def _gateway(record: dict[str, Any], nodes: Mapping[str, Any]) -> Gateway:
    """The Gateway of ``record`` (a gateway's fleet record), its host asked; GatewayError when
    it has no address, this controller cannot reach it, or it does not answer."""
    name = record["name"]
    host = _host(record)
    if host is None:
        raise GatewayError("gateway %s: its host has no address yet" % name)
    if host["name"] not in nodes:
        raise GatewayError("gateway %s: this controller cannot reach its host" % name)
    return Gateway(name=name, instance=host, listen=_listen(nodes[host["name"]], name))


def listed(fleets: list, nodes: Mapping[str, Any]) -> tuple[list[Gateway], dict[str, str]]:
    """Every gateway of ``fleets`` whose host answers (``nodes``: ``{host: Node}``) and the
    others' errors by name: ``([Gateway], {name: error})``."""
    def ask(record: dict[str, Any]) -> tuple[Optional[Gateway], Optional[str]]:
        try:
            return _gateway(record, nodes), None
        except GatewayError as exc:
            return None, str(exc)

    records = dict((r["name"], r) for r in gateway_fleets(fleets))
    answers = parallel(sorted(records), lambda name: ask(records[name]))
    found, errors = [], {}
    for name, (answer, error) in sorted(answers.items()):
        gateway, why = answer if error is None else (None, str(error))
        if gateway is None:
            errors[name] = why or "gateway %s does not answer" % name
        else:
            found.append(gateway)
    return found, errors


def resolve(config: Mapping[str, Any], fleets: list, nodes: Mapping[str, Any]
            ) -> Optional[Gateway]:
    """The gateway that publishes the service ``config`` (a normalized service), or None for
    the in-fleet proxy; GatewayError when it names one that is not there, asks for the default
    and there is none, or its gateway (the default one too) does not answer: a service is
    never moved off its gateway because the gateway is down."""
    wanted = config.get("gateway")
    if wanted is False:
        return None
    if isinstance(wanted, str):
        name = wanted.rsplit("/", 1)[-1]
        for record in gateway_fleets(fleets):
            if record["name"] == name:
                return _gateway(record, nodes)
        raise GatewayError("Gateway %s does not exist in project %s" % (wanted, PROJECT))
    default = default_of(fleets)
    if default is None:
        if wanted is True:
            raise GatewayError("The service requires a gateway, but there is no default "
                               "gateway in the project")
        return None
    try:
        return _gateway(default, nodes)
    except GatewayError as exc:
        raise GatewayError("%s (the default gateway; set `gateway: false` to publish the "
                           "service in its fleet instead)" % exc) from exc


def check_clash(gateway: Gateway, node: Any, run: str, fleet: str,
                config: Mapping[str, Any]) -> None:
    """GatewayError when ``gateway`` (its host ``node``) publishes a service named ``run`` of
    another fleet, or another service with the same model: found before the replicas are
    placed (the host refuses the route too, later)."""
    try:
        routes = (node.call("proxy_routes", {}) or {}).get("routes") or {}
    except NodeError as exc:
        raise GatewayError("gateway %s does not answer: %s" % (gateway["name"], exc)) from exc
    held = routes.get(run) or {}
    if held and held.get("fleet") != fleet:
        raise GatewayError("a service named %s of fleet %s is published on gateway %s already "
                           "(by %s): stop it, or give this one another name"
                           % (run, held.get("fleet"), gateway["name"], held.get("user")))
    model = config.get("model")
    name = model.get("name") if isinstance(model, dict) else model
    for other, route in sorted(routes.items()):
        if name and other != run and route.get("model") == name:
            raise GatewayError("model: %s is already published by service %s on gateway %s; "
                               "give this service's model another name, or stop %s first"
                               % (name, other, gateway["name"], other))


def service_https(config: Mapping[str, Any], listen: Mapping[str, Any]) -> bool:
    """Whether ``config`` (a service) is served over HTTPS on a gateway that recorded
    ``listen``: ``https`` unset or true asks for it, ``auto`` takes it where the gateway has a
    certificate; GatewayError when it asks and the gateway has none."""
    has_certificate = bool(listen.get("certificate")) and bool(listen.get("https_port"))
    https = config.get("https")
    if https is None or https is True:
        if not has_certificate:
            raise GatewayError("Cannot run HTTPS service on gateway with no SSL certificates "
                               "configured: set `https: false` or `auto`, or give gateway %s "
                               "a certificate" % listen.get("gateway"))
        return True
    return https == "auto" and has_certificate


def proxy_of(run: str, gateway: Gateway, config: Mapping[str, Any]) -> dict[str, Any]:
    """services.replicas.proxy_of's answer for ``run`` on ``gateway``: its host, address and
    URLs (``https://RUN.DOMAIN/``, the models at ``https://gateway.DOMAIN/``), with
    ``gateway`` and ``https``."""
    listen = gateway["listen"]
    domain = listen.get("domain")
    if run == "gateway":
        raise GatewayError("a service on a gateway cannot be named gateway: gateway.%s is the "
                           "models' endpoint; give it another name" % (domain or "DOMAIN"))
    if not domain:
        raise GatewayError("Domain is required for gateway %s: give it `domain` and apply it "
                           "again" % gateway["name"])
    https = service_https(config, listen)
    port = int(listen["https_port"] if https else listen["port"])
    model = config.get("model")
    name = model.get("name") if isinstance(model, dict) else model
    gateway_https = bool(listen.get("certificate")) and bool(listen.get("https_port"))
    models_port = int(listen["https_port"] if gateway_https else listen["port"])
    return {"proxy_host": gateway["instance"]["name"],
            "proxy_address": gateway["instance"].get("hostname") or "",
            "proxy_port": port, "gateway": gateway["name"], "https": https,
            "url": url("%s.%s" % (run, domain), "/", port, "https" if https else "http"),
            "model_url": url("gateway." + domain, "/", models_port,
                             "https" if gateway_https else "http") if name else None,
            "model": name or None}


def records(fleets: list, nodes: Mapping[str, Any], ca_dir: Optional[str] = None
            ) -> list[dict[str, Any]]:
    """One record per gateway of ``fleets``, as ``gpufleet gateway`` lists them (and
    playbooks/gateway.yml publishes one): ``{"name", "backend", "region", "hostname",
    "instance", "status", "error", "domain", "default", "certificate", "https_port",
    "ca_file"}``, ``default`` being whether services without ``gateway`` get it now. What its
    host says wins over its fleet record; a host that does not answer gives ``error``.
    ``ca_dir``: where gateway.yml copied the gateways' CA certificates."""
    found, errors = listed(fleets, nodes)
    default = default_of(fleets)
    by_name = dict((g["name"], g) for g in found)
    out = []
    for record in gateway_fleets(fleets):
        name = record["name"]
        host = _host(record) or dict((record.get("instances") or [{}])[0])
        mark = dict(record.get("gateway") or {})
        listen: dict[str, Any] = by_name[name]["listen"] if name in by_name else {}
        certificate = listen.get("certificate") if listen else (
            (mark.get("certificate") or {}).get("type"))
        out.append({
            "name": name, "backend": (record.get("backends") or ["local"])[0],
            "region": host.get("region"), "hostname": host.get("hostname"),
            "instance": host.get("name"),
            "status": "running" if name in by_name else "unreachable",
            "error": errors.get(name),
            "domain": listen.get("domain") or mark.get("domain"),
            "default": default is not None and default["name"] == name,
            "certificate": certificate, "https_port": listen.get("https_port"),
            "ca_file": "%s/%s-ca.crt" % (ca_dir, name) if ca_dir and certificate else None})
    return sorted(out, key=lambda r: (not r["default"], r["name"]))
