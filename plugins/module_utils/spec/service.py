# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""``type: service``: replicas of one container that serve HTTP on ``port``, published behind
one URL with dstack's path prefix, as dstack's services.

Every field of a task but ``nodes`` and ``ports`` (dstack has neither in a service: a replica
is one node, and a service publishes the one ``port``), with ``groups`` meaning replica groups,
plus ``port``, ``gateway``, ``strip_prefix``, ``model``, ``https``, ``auth``, ``scaling``,
``rate_limits``, ``probes`` and ``replicas`` (a count, a range, or dstack's older list form of
``groups``). The normalized config is a task's (``nodes`` 1, ``ports`` empty) with those fields;
what this version of gpufleet cannot run yet (a gateway, HTTPS, replica groups, autoscaling) is
refused by spec/support.py, so validate and apply agree.
"""

from __future__ import annotations

import re
from typing import Any

from . import common, grammar, interpolation
from ._errors import INVALID, Ctx, Invalid, describe, show
from ._types import (
    parse_fields,
    want_bool,
    want_choice,
    want_int,
    want_list,
    want_mapping,
    want_nonempty_str,
    want_str,
)
from .service_fields import (
    default_probes,
    parse_model,
    parse_probes,
    parse_rate_limits,
    parse_scaling,
)
from .task import (
    GROUP_NAME_RE,
    REGISTRY_REFS,
    parse_commands,
    parse_port,
    parse_python,
    parse_task,
)

SERVICE_FIELDS = ("port", "gateway", "strip_prefix", "model", "https", "auth", "scaling",
                  "rate_limits", "probes", "replicas", "groups")
# Fields of a task a service does not have: what to write instead.
NOT_HERE = {
    "nodes": "a service has no nodes: each replica runs on one node; set replicas for more "
             "copies of the service",
    "ports": "a service has no ports: set port, the one port the service listens on (it is "
             "published at the service's URL)",
}
ROUTER_TYPES = ("sglang", "dynamo")
DEFAULT_REPLICAS = {"min": 1, "max": 1}
_DIGITS = re.compile(r"[0-9]+")
_MAPPING = re.compile(r"[0-9]+:[0-9]+")
_GROUP_NAME_MESSAGE = "Resource name should match regex '^[a-z0-9][a-z0-9-]{0,39}$'"


# ---------------------------------------------------------------------------------------------
# port, gateway, https


def parse_service_port(value: object, ctx: Ctx) -> int:
    """The container port: ``8000``, ``"80:8000"`` or ``{local_port, container_port}``; only
    the container port is used (dstack keeps the mapping for history)."""
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, str):
        if _DIGITS.fullmatch(value):
            value = want_int(value, minimum=1, maximum=65535, what="a port number")
        elif not _MAPPING.fullmatch(value):
            raise Invalid("invalid port %s: write 8000 or 80:8000" % show(value))
    mapping = parse_port(value, ctx)
    if mapping is INVALID:
        return INVALID
    return mapping["container_port"]


def _entity_reference(text):
    parts = text.split("/")
    if any(not part for part in parts) or len(parts) > 2:
        raise Invalid("Invalid entity reference. Only `<name>` or `<project>/<name>` formats are "
                      "allowed")
    return text


def parse_gateway(value: object, ctx: Ctx) -> Any:
    """None (omitted), true/false, or a gateway's name (``name`` or ``project/name``)."""
    if value is None or isinstance(value, bool):
        return value
    if isinstance(value, str):
        try:
            return want_bool(value)
        except Invalid:
            return _entity_reference(value)
    if isinstance(value, int) and value in (0, 1):
        return bool(value)
    if isinstance(value, dict):
        data = want_mapping(value)
        fields = {"project": lambda v, c: None if v is None else want_str(v),
                  "name": lambda v, c: want_str(v)}
        parsed = parse_fields(data, ctx, fields)
        if any(v is INVALID for v in parsed.values()):
            return INVALID
        if "name" not in data:
            raise Invalid("a gateway reference needs name")
        project = parsed.get("project")
        return parsed["name"] if project is None else "%s/%s" % (project, parsed["name"])
    raise Invalid("expected true, false or a gateway name, got %s" % describe(value))


def parse_https(value: object, ctx: Ctx) -> Any:
    if value is None:
        return None
    if value == "auto":
        return "auto"
    try:
        return want_bool(value)
    except Invalid as exc:
        raise Invalid("expected true, false or auto, got %s" % describe(value)) from exc


# ---------------------------------------------------------------------------------------------
# replicas and replica groups


_replica_range = grammar.parse_range(lambda v: want_int(v, what="a number of replicas"),
                                     "2 or 0..4")


def parse_replicas(value: object, ctx: Ctx) -> Any:
    """A replica count or range, as dstack's ``Range[int]``: ``{"min", "max"}``."""
    parsed = _replica_range(value, ctx)
    if parsed is INVALID:
        return INVALID
    if parsed["max"] is None:
        raise Invalid("The maximum number of replicas is required")
    if parsed["min"] is None:
        parsed["min"] = 0
    if parsed["min"] < 0:
        raise Invalid("The minimum number of replicas must be greater than or equal to 0")
    return parsed


def check_scaling(replicas: Any, scaling: Any) -> str | None:
    """dstack's rule between ``replicas`` and ``scaling``: the message, or None."""
    if not isinstance(replicas, dict) or scaling is INVALID:
        return None
    if replicas["min"] != replicas["max"] and not scaling:
        return "When you set `replicas` to a range, ensure to specify `scaling`."
    if replicas["min"] == replicas["max"] and scaling:
        return "To use `scaling`, `replicas` must be set to a range."
    return None


def _group_name(value, ctx):
    if value is None:
        return None
    name = want_str(value)
    if not GROUP_NAME_RE.fullmatch(name):
        raise Invalid(_GROUP_NAME_MESSAGE)
    return name


def _router(value, ctx):
    if value is None:
        return None
    data = want_mapping(value, "a mapping with type: sglang or dynamo")
    parsed = parse_fields(data, ctx, {"type": lambda v, c: want_choice(v, ROUTER_TYPES)})
    if parsed.get("type") is INVALID:
        return INVALID
    return {"type": parsed.get("type", "sglang")}


def _opt(parser):
    return lambda v, c: None if v is None else parser(v, c)


GROUP_FIELDS = {
    "name": _group_name,
    "replicas": parse_replicas,
    "scaling": parse_scaling,
    "resources": lambda v, c: v,
    "spot_policy": _opt(common.parse_spot_policy),
    "reservation": common.parse_optional_str,
    "commands": parse_commands,
    "image": _opt(lambda v, c: want_nonempty_str(v)),
    "python": parse_python,
    "nvcc": _opt(lambda v, c: want_bool(v)),
    "docker": _opt(lambda v, c: want_bool(v)),
    "privileged": _opt(lambda v, c: want_bool(v)),
    "router": _router,
}
_GROUP_KEYS = tuple(GROUP_FIELDS) + ("count",)


def _group_rules(group, ctx):
    """ReplicaGroup's own checks, each at its field."""
    if group["python"] is not None and group["image"]:
        ctx.child("python").error(
            "`image` and `python` are mutually exclusive within a replica group")
    if group["docker"] is True:
        for other in ("image", "python", "nvcc"):
            if group[other]:
                ctx.child("docker").error(
                    "`%s` and `docker` are mutually exclusive within a replica group" % other)
    if group["privileged"] is False and group["docker"] is True:
        ctx.child("privileged").error(
            "`privileged: false` is incompatible with `docker: true` within a replica group "
            "(docker-in-docker requires privileged mode)")
    why = check_scaling(group["replicas"], group["scaling"])
    if why:
        ctx.child("replicas").error(why)


def parse_replica_group(value: object, ctx: Ctx, index: int, service_image: bool) -> Any:
    data = dict(want_mapping(value, "a replica group mapping"))
    # dstack's alias: count is replicas; replicas wins when both are given.
    if "replicas" in data:
        data.pop("count", None)
    elif "count" in data:
        data["replicas"] = data.pop("count")
    mark = ctx.mark()
    parsed = parse_fields(data, ctx, GROUP_FIELDS, unknown=common.explain_removed)
    if "replicas" not in data:
        ctx.error("a replica group needs replicas (or count): a number such as 2 or a range "
                  "such as 0..4")
    group = dict((key, parsed.get(key)) for key in GROUP_FIELDS)
    default_image = not (group["image"] or service_image) and group["docker"] is not True
    group["resources"] = ctx.run(
        "resources", lambda v, c: grammar.parse_resources(v, c, default_image),
        data.get("resources"))
    if ctx.failed_since(mark):
        return INVALID
    group["name"] = group["name"] if group["name"] is not None else str(index)
    group["commands"] = group["commands"] or []
    _group_rules(group, ctx)
    return INVALID if ctx.failed_since(mark) else group


# When groups is set, these may be set at the service level or in groups, never both:
# (field, set at the service level?, set in a group?).
_MIXING = (
    ("image", lambda s: s.get("image") is not None, lambda g: g["image"] is not None),
    ("docker", lambda s: s.get("docker") is True, lambda g: g["docker"] is not None),
    ("privileged", lambda s: s.get("privileged") is True, lambda g: g["privileged"] is not None),
    ("python", lambda s: s.get("python") is not None, lambda g: g["python"] is not None),
    ("nvcc", lambda s: s.get("nvcc") is True, lambda g: g["nvcc"] is not None),
    ("spot_policy", lambda s: s.get("spot_policy") is not None,
     lambda g: g["spot_policy"] is not None),
    ("reservation", lambda s: s.get("reservation") is not None,
     lambda g: g["reservation"] is not None),
)
# Image sources that conflict across the two levels: (service field, group field).
_IMAGE_CONFLICTS = (("image", "docker"), ("image", "python"), ("image", "nvcc"),
                    ("docker", "image"), ("docker", "python"), ("docker", "nvcc"),
                    ("python", "image"), ("python", "docker"),
                    ("nvcc", "image"), ("nvcc", "docker"))


def _service_sets(data, field):
    value = data.get(field)
    return value is True if field in ("docker", "nvcc", "privileged") else value is not None


def _groups_against_service(groups, data, ctx):
    """dstack's checks of replica groups against the service-level fields."""
    for field, service_set, group_set in _MIXING:
        if service_set(data):
            names = [g["name"] for g in groups if group_set(g)]
            if names:
                ctx.error("`%s` is set at both the service level and in replica group(s) %s. "
                          "Set `%s` in one place only: either at the service level (all groups "
                          "inherit) or per group, but not both." % (field, names, field))
    for s_field, g_field in _IMAGE_CONFLICTS:
        if _service_sets(data, s_field):
            names = [g["name"] for g in groups if g[g_field] is not None]
            if names:
                ctx.error("Service-level `%s` conflicts with group-level `%s` in replica "
                          "group(s) %s. These image-source fields are mutually exclusive."
                          % (s_field, g_field, names))
    for group in groups:
        if not group["commands"] and group["image"] is None and data.get("image") is None:
            ctx.error("Replica group '%s': either `commands` or `image` must be set in the "
                      "group, or `image` at the service level." % group["name"])
    routers = [g for g in groups if g["router"] is not None]
    if len(routers) > 1:
        ctx.error("At most one replica group may specify `router`.")
    elif routers and routers[0]["replicas"] != {"min": 1, "max": 1}:
        ctx.error("For now replica group with `router` must have `replicas: 1`.")


def parse_groups(value: object, ctx: Ctx, data: dict[str, Any]) -> Any:
    items = want_list(value, "a list of replica groups")
    if not items:
        raise Invalid("`groups` cannot be an empty list")
    service_image = bool(data.get("image"))
    groups = []
    for index, item in enumerate(items):
        def parse(value, group_ctx, position=index):
            return parse_replica_group(value, group_ctx, position, service_image)

        groups.append(ctx.run(index, parse, item))
    if any(g is INVALID for g in groups):
        return INVALID
    counts: dict[str, int] = {}
    for group in groups:
        counts[group["name"]] = counts.get(group["name"], 0) + 1
    duplicates = [name for name, count in counts.items() if count > 1]
    if duplicates:
        raise Invalid("Duplicate replica group names found: %s. Each replica group must have a "
                      "unique name." % duplicates)
    mark = ctx.mark()
    _groups_against_service(groups, data, ctx)
    return INVALID if ctx.failed_since(mark) else groups


# ---------------------------------------------------------------------------------------------
# The service


def _parse_own(data, ctx):
    """The service's own fields (groups apart); INVALID where one failed."""
    parsers = {
        "port": parse_service_port,
        "gateway": parse_gateway,
        "strip_prefix": lambda v, c: want_bool(v),
        "model": parse_model,
        "https": parse_https,
        "auth": lambda v, c: want_bool(v),
        "scaling": parse_scaling,
        "rate_limits": parse_rate_limits,
        "probes": parse_probes,
        "replicas": parse_replicas,
    }
    return dict((key, ctx.run(key, parsers[key], data[key]))
                for key in parsers if key in data)


def _legacy_groups(data, ctx):
    """dstack's older form: ``replicas`` as a list of groups is ``groups``."""
    data = dict(data)
    if data.get("groups") is None and isinstance(data.get("replicas"), list):
        data["groups"] = data.pop("replicas")
    if data.get("groups") is not None and data.get("replicas") is not None:
        ctx.child("replicas").error("`replicas` and `groups` are mutually exclusive")
        data.pop("replicas")
    return data


def _probe_texts(probe):
    """(subpath, text) of a probe's fields where dstack fills ``${{ env.NAME }}``."""
    if probe["url"] is not None:
        yield ("url",), probe["url"]
    if probe["body"] is not None:
        yield ("body",), probe["body"]
    for index, header in enumerate(probe["headers"]):
        yield ("headers", index, "value"), header["value"]


def check_probe_refs(probes: Any, env: Any, ctx: Ctx) -> None:
    """As dstack apply: a probe's url, body and header values may name the service's own env
    (``${{ env.NAME }}``, filled when the run is submitted) and secrets; nothing else."""
    if not isinstance(probes, list) or not isinstance(env, dict):
        return
    for index, probe in enumerate(probes):
        for subpath, text in _probe_texts(probe):
            where = ctx.child("probes").child(index)
            try:
                interpolation.check(text, REGISTRY_REFS)
                names = list(interpolation.references(text))
            except interpolation.InterpolationError as exc:
                where.error(str(exc), subpath)
                continue
            for ref in names:
                namespace, _dot, name = ref.partition(".")
                if namespace == "env" and name not in env:
                    where.error("${{ env.%s }} refers to %s, which is not in this service's env; "
                                "add it to env" % (name, name), subpath)


def parse_service(data: dict[str, Any], ctx: Ctx) -> Any:
    for key, instead in NOT_HERE.items():
        if key in data:
            ctx.child(key).error(instead)
    data = _legacy_groups(data, ctx)
    own = _parse_own(data, ctx)
    if "port" not in data:
        ctx.error("a service needs port: the port the application listens on (e.g. port: 8000)")
    groups = None
    has_groups = data.get("groups") is not None
    if has_groups:
        groups = ctx.run("groups", lambda v, c: parse_groups(v, c, data), data["groups"])
        if own.get("scaling") is not None:
            ctx.child("scaling").error(
                "Top-level `scaling` is not allowed when `groups` is set. Specify `scaling` in "
                "each replica group instead.")
        if data.get("commands"):
            ctx.child("commands").error(
                "Top-level `commands` is not allowed when `groups` is set. Specify `commands` "
                "in each replica group instead.")
    else:
        why = check_scaling(own.get("replicas", DEFAULT_REPLICAS), own.get("scaling"))
        if why:
            ctx.child("replicas" if "replicas" in data else "scaling").error(why)
    task_data = dict((k, v) for k, v in data.items()
                     if k not in SERVICE_FIELDS and k not in NOT_HERE)
    task_data["type"] = "task"
    # A task needs something to run; with groups the commands are the groups'.
    needs_run = not data.get("commands") and not data.get("image")
    if needs_run:
        if not has_groups:
            ctx.error("either commands or image must be set: a service needs something to run")
        task_data["commands"] = ["true"]
    config = parse_task(task_data, ctx)
    if needs_run or has_groups:
        config["commands"] = []
    model = own.get("model")
    probes = own.get("probes")
    check_probe_refs(probes, config.get("env"), ctx)
    if probes is None:
        probes = default_probes(model)
    config.update({
        "type": "service",
        "nodes": 1,
        "ports": [],
        "groups": groups if groups is not INVALID else None,
        "port": own.get("port"),
        "replicas": own.get("replicas", dict(DEFAULT_REPLICAS)),
        "scaling": own.get("scaling"),
        "model": model,
        "auth": own.get("auth", True),
        "https": own.get("https"),
        "gateway": own.get("gateway"),
        "strip_prefix": own.get("strip_prefix", True),
        "rate_limits": own.get("rate_limits", []),
        "probes": probes,
    })
    return config
