# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""``type: gateway``: a host that publishes services at ``RUN.DOMAIN``, as dstack's gateways.

dstack's fields: ``name``, ``default``, ``backend``, ``region``, ``instance_type``, ``domain``,
``public_ip``, ``certificate`` (``{type: lets-encrypt}``, the default, ``{type: acm, arn}``, or
null for none), ``replicas`` and ``tags``. gpufleet adds ``certificate: {type: self-signed}``, a
certificate the gateway makes for itself, which is the default of a ``backend: local``
gateway (no public ACME server can reach a container on this machine).

A gateway's host is a one-node fleet of the same name (``host_fleet``): it is made, reached,
listed and removed as fleets are, and its record says it is a gateway, so that no run is
placed on it. What this version cannot do (a backend without fleets, ACM, more than one
replica) is refused by spec/support.py.
"""

from __future__ import annotations

import re
from typing import Any

from . import common
from ._errors import INVALID, Ctx, Invalid, show
from .fleet import parse_fleet
from ._types import parse_fields, want_bool, want_int, want_mapping, want_nonempty_str, want_str

CERTIFICATE_TYPES = ("lets-encrypt", "acm", "self-signed")
DEFAULT_CERTIFICATE = {"type": "lets-encrypt"}
# What a local gateway gets with no `certificate`: nothing outside this machine can reach it.
LOCAL_CERTIFICATE = {"type": "self-signed"}
# dstack lets a domain name the service's project; gpufleet has one project, main.
PROJECT_REF = re.compile(r"\$\{\{\s*run\.project_name\s*\}\}")
PROJECT = "main"
_LABEL = re.compile(r"[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?")
# The tag (AWS) and label (GCP) on a gateway's host, and its value: a controller without the
# gateway's file knows the host for a gateway's by it (fleets.cloud.discover).
GATEWAY_TAG = "gpufleet-gateway"
# The resources of a gateway's host when the file gives no instance_type: a small CPU host.
HOST_RESOURCES = {"gpu": 0, "cpu": "2..", "memory": "2GB.."}


def parse_domain(value: object, ctx: Ctx) -> Any:
    """A wildcard domain (``example.com``, ``*.example.com``), lower-case, without the ``*.``;
    ``${{ run.project_name }}`` becomes main."""
    if value is None:
        return None
    text = want_nonempty_str(value, "a domain name such as example.com")
    domain = PROJECT_REF.sub(PROJECT, text.strip()).lower()
    if domain.startswith("*."):
        domain = domain[2:]
    domain = domain.rstrip(".")
    labels = domain.split(".")
    if len(domain) > 253 - 64 or len(labels) < 2 or \
            not all(_LABEL.fullmatch(label) for label in labels):
        raise Invalid("invalid domain %s: expected a domain name such as example.com (its "
                      "services are published at <run name>.example.com)" % show(text))
    return domain


def parse_certificate(value: object, ctx: Ctx) -> Any:
    """None (null: no certificate) or ``{"type", "arn"?}``."""
    if value is None:
        return None
    data = want_mapping(value, "a mapping with type (%s), or null" % ", ".join(CERTIFICATE_TYPES))
    kind = data.get("type", "lets-encrypt")
    if kind not in CERTIFICATE_TYPES:
        raise Invalid("unknown certificate type %s: expected %s"
                      % (show(kind), ", ".join(CERTIFICATE_TYPES)), ("type",))
    fields: dict[str, Any] = {"type": lambda v, c: v}
    if kind == "acm":
        fields["arn"] = lambda v, c: want_nonempty_str(v, "the ARN of the domain's certificate")
    parsed = parse_fields(data, ctx, fields)
    if any(v is INVALID for v in parsed.values()):
        return INVALID
    if kind == "acm" and "arn" not in data:
        raise Invalid("an acm certificate needs arn", ("arn",))
    return dict(parsed, type=kind)


def _region(value, ctx):
    return None if value is None else want_nonempty_str(value, "a region name")


def _opt_bool(value, ctx):
    return None if value is None else want_bool(value)


def _replicas(value, ctx):
    return None if value is None else want_int(value, minimum=1)


FIELDS = {
    "type": lambda v, c: v,
    "name": common.parse_name,
    "default": _opt_bool,
    "backend": lambda v, c: v,
    "region": _region,
    "instance_type": lambda v, c: None if v is None else want_nonempty_str(v, "an instance type"),
    "domain": parse_domain,
    "public_ip": lambda v, c: True if v is None else want_bool(v),
    "certificate": parse_certificate,
    "replicas": _replicas,
    "tags": common.parse_tags,
}


def parse_gateway(data: dict[str, Any], ctx: Ctx) -> Any:
    backend = data.get("backend")
    if backend is None:
        ctx.child("backend").error("a gateway needs backend: the backend its host is made in, "
                                   "such as aws, gcp or local")
    elif backend not in common.BACKENDS:
        ctx.child("backend").error("unknown backend %s: expected one of %s"
                                   % (show(backend), ", ".join(common.BACKENDS)))
    parsed = parse_fields(data, ctx, FIELDS)
    if backend not in (None, "local") and data.get("region") is None:
        ctx.child("region").error("a gateway on %s needs region: the region its host is made in"
                                  % want_str(str(backend)))
    if "certificate" in data:
        certificate = parsed.get("certificate")
    else:
        certificate = dict(LOCAL_CERTIFICATE if backend == "local" else DEFAULT_CERTIFICATE)
    return {
        "type": "gateway",
        "name": parsed.get("name"),
        "default": parsed.get("default"),
        "backend": backend,
        "region": parsed.get("region") or ("local" if backend == "local" else None),
        "instance_type": parsed.get("instance_type"),
        "domain": parsed.get("domain"),
        "public_ip": parsed.get("public_ip", True),
        "certificate": certificate,
        "replicas": parsed.get("replicas"),
        "tags": parsed.get("tags"),
    }


def https(config: dict[str, Any]) -> bool:
    """Whether the gateway serves HTTPS: with a certificate it makes or obtains (dstack: an ACM
    certificate ends TLS at a load balancer, in front of the gateway)."""
    certificate = config.get("certificate") or {}
    return certificate.get("type") in ("lets-encrypt", "self-signed")


def host_fleet_data(config: dict[str, Any]) -> dict[str, Any]:
    """The fleet file (raw, before parsing) of a gateway's host: one node of its backend, in its
    region, of its instance type (else a small CPU host), on demand, with its tags."""
    data: dict[str, Any] = {"type": "fleet", "nodes": 1, "backends": [config["backend"]],
                            "spot_policy": "on-demand"}
    if config.get("name"):
        data["name"] = config["name"]
    if config["backend"] != "local" and config.get("region"):
        data["regions"] = [config["region"]]
    if config.get("instance_type"):
        data["instance_types"] = [config["instance_type"]]
        data["resources"] = {"gpu": "0.."}
    else:
        data["resources"] = dict(HOST_RESOURCES)
    data["tags"] = dict(config.get("tags") or {}, **{GATEWAY_TAG: "true"})
    return data


def gateway_mark(config: dict[str, Any]) -> dict[str, Any]:
    """What a gateway's host fleet carries of the gateway (its records' ``gateway``)."""
    return {"domain": config.get("domain"), "default": config.get("default"),
            "certificate": config.get("certificate"), "public_ip": config.get("public_ip", True)}


def host_fleet(config: dict[str, Any], source: str | None = None) -> dict[str, Any]:
    """The normalized fleet config of a gateway's host (``host_fleet_data`` parsed), with
    ``gateway`` (``gateway_mark``); a normalized fleet config as it is."""
    if config.get("type") != "gateway":
        return config
    ctx = Ctx()
    fleet = parse_fleet(host_fleet_data(config), ctx)
    ctx.raise_if_failed(source)
    return dict(fleet, gateway=gateway_mark(config))
