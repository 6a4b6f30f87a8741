# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""``type: volume`` (network volumes) and the ``volumes:`` mount points of a run."""

from __future__ import annotations

import posixpath
from typing import Any

from . import common, grammar, interpolation
from ._errors import INVALID, Ctx, Invalid, describe, show
from ._types import parse_fields, parse_object, str_list, want_bool, want_list, want_mapping, want_str

VOLUME_BACKENDS = ("aws", "gcp", "runpod", "kubernetes", "local")
NAME_REFS = {"dstack": ("job_num", "node_rank")}


def _opt_str(value, ctx):
    return None if value is None else want_str(value)


def _size(value, ctx):
    return None if value is None else grammar.parse_memory(value)


def _required_str(value, ctx):
    if value is None:
        raise Invalid("must not be empty")
    text = want_str(value)
    if not text:
        raise Invalid("must not be an empty string")
    return text


_COMMON = {
    "type": lambda v, c: v,
    "backend": lambda v, c: v,
    "name": common.parse_name,
    "size": _size,
    "auto_cleanup_duration": grammar.idle_duration(grammar.OFF),
    "tags": common.parse_tags,
}
_CLOUD = dict(_COMMON, region=_required_str, availability_zone=_opt_str, volume_id=_opt_str)
_KUBERNETES = dict(
    _COMMON,
    region=_opt_str,
    claim_name=_opt_str,
    storage_class_name=_opt_str,
    access_modes=lambda v, c: ["ReadWriteOnce"] if v is None else str_list(v, c),
)


def _local_region(value, ctx):
    if value is None or value == "local":
        return "local"
    raise Invalid("a local volume lives on this machine's Docker engine, whose only region is "
                  "local; got %s: remove region or set it to local" % show(value))


def _not_local(why):
    def refuse(value, ctx):
        if value is None:
            return None
        raise Invalid(why % show(value))

    return refuse


# gpufleet's own backend (docs/volumes.md "Local volumes"): a folder in the engine's volume pool.
_LOCAL = dict(_COMMON, region=_local_region,
              availability_zone=_not_local("a local volume has no availability zone (got %s): "
                                           "it attaches to any local node; remove it"),
              volume_id=_not_local("a local volume cannot register an existing volume (got %s): "
                                   "remove volume_id and set size to make a new one"))
FIELDS_BY_BACKEND = {"aws": _CLOUD, "gcp": _CLOUD, "runpod": _CLOUD, "kubernetes": _KUBERNETES,
                     "local": _LOCAL}


def parse_volume(data: dict[str, Any], ctx: Ctx) -> Any:
    backend = data.get("backend")
    if backend is None:
        ctx.child("backend").error(
            "a volume needs backend: one of %s" % ", ".join(VOLUME_BACKENDS)
        )
        return INVALID
    if backend not in VOLUME_BACKENDS:
        ctx.child("backend").error(
            "network volumes exist for backends %s, got %s"
            % (", ".join(VOLUME_BACKENDS), describe(backend))
        )
        return INVALID
    fields = FIELDS_BY_BACKEND[backend]
    parsed = parse_fields(data, ctx, fields)
    if backend not in ("kubernetes", "local") and "region" not in data:
        ctx.child("region").error("a %s volume needs region" % backend)
    external = parsed.get("claim_name") if backend == "kubernetes" else parsed.get("volume_id")
    if not external and data.get("size") is None:
        what = "claim_name" if backend == "kubernetes" else "volume_id"
        ctx.child("size").error(
            "size must be specified when creating a new volume (e.g. size: 100GB); to register "
            "an existing one, set %s" % what
        )
    volume = {
        "type": "volume",
        "backend": backend,
        "name": parsed.get("name"),
        "region": parsed.get("region", {"kubernetes": "", "local": "local"}.get(backend)),
        "size": parsed.get("size"),
        "auto_cleanup_duration": parsed.get("auto_cleanup_duration", grammar.OFF),
        "tags": parsed.get("tags"),
    }
    if backend == "kubernetes":
        volume.update(
            claim_name=parsed.get("claim_name"),
            storage_class_name=parsed.get("storage_class_name"),
            access_modes=parsed.get("access_modes", ["ReadWriteOnce"]),
        )
    else:
        volume.update(
            availability_zone=parsed.get("availability_zone"),
            volume_id=parsed.get("volume_id"),
        )
    return volume


# ---------------------------------------------------------------------------------------------
# Mount points (`volumes:` in a task)


def mount_path(value: object) -> str:
    text = want_str(value, "an absolute path")
    if not text:
        raise Invalid("empty path")
    if not text.startswith("/"):
        raise Invalid("path must be absolute: %s" % show(text))
    if ".." in text.split("/"):
        raise Invalid(".. are not allowed: %s" % show(text))
    normalized = posixpath.normpath(text)
    # normpath keeps a leading "//" (POSIX allows it to be special); fold it like PurePosixPath.
    if normalized.startswith("//"):
        normalized = "/" + normalized.lstrip("/")
    return normalized


def _volume_name(value):
    name = want_str(value, "a volume name")
    if not name:
        raise Invalid("a volume name must not be empty")
    try:
        interpolation.check(name, NAME_REFS)
    except interpolation.InterpolationError as exc:
        raise Invalid(str(exc)) from exc
    return name


def _network_names(value, ctx):
    if isinstance(value, list):
        items = want_list(value)
        if not items:
            raise Invalid("the list of volume names must not be empty")
        out = []
        for index, item in enumerate(items):
            try:
                out.append(_volume_name(item))
            except Invalid as exc:
                raise Invalid(exc.message, (index,)) from exc
        return out
    return [_volume_name(value)]


def _path_field(value, ctx):
    return mount_path(value)


_WHERE = " (where to mount it in the container)"
_NETWORK_FIELDS = {"name": _network_names, "path": _path_field}
_INSTANCE_FIELDS = {
    "instance_path": _path_field,
    "path": _path_field,
    "optional": lambda v, c: want_bool(v),
}


def parse_mount(value: object, ctx: Ctx) -> Any:
    """``name:/path`` / ``/host/dir:/path`` or ``{name, path}`` / ``{instance_path, path, optional}``.

    The result is ``{"type": "network", "name": [...], "path"}`` (one of the names is mounted)
    or ``{"type": "instance", "instance_path", "path", "optional"}``.
    """
    if isinstance(value, str):
        parts = value.split(":")
        if len(parts) != 2:
            raise Invalid(
                "invalid mount point format: %s; write name:/container/path for a network volume "
                "or /host/path:/container/path for an instance volume" % show(value)
            )
        source, target = parts
        if "/" in source:
            return {
                "type": "instance",
                "instance_path": mount_path(source),
                "path": mount_path(target),
                "optional": False,
            }
        return {"type": "network", "name": [_volume_name(source)], "path": mount_path(target)}
    data = want_mapping(value, "a mount point (a string or a mapping)")
    if "instance_path" in data:
        parsed = parse_object(
            data, ctx, _INSTANCE_FIELDS, ("path",), owner="an instance volume", hint=_WHERE
        )
        if parsed is INVALID:
            return INVALID
        return {
            "type": "instance",
            "instance_path": parsed["instance_path"],
            "path": parsed["path"],
            "optional": parsed.get("optional", False),
        }
    if "name" in data:
        parsed = parse_object(
            data, ctx, _NETWORK_FIELDS, ("path",), owner="a network volume", hint=_WHERE
        )
        if parsed is INVALID:
            return INVALID
        return {"type": "network", "name": parsed["name"], "path": parsed["path"]}
    raise Invalid(
        "a mount point needs name (a network volume) or instance_path (a directory on the host), "
        "got %s" % show(value)
    )
