# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""``type: task``: what to run, on how many nodes, and how the run behaves."""

from __future__ import annotations

import re
import string
from typing import Any

from ..core.text import shorten
from . import common, grammar, interpolation
from ._errors import INVALID, Ctx, Invalid, describe, show
from ._types import (
    list_of,
    parse_fields,
    parse_object,
    want_bool,
    want_choice,
    want_int,
    want_list,
    want_mapping,
    want_nonempty_str,
    want_str,
)
from .env import parse_env
from .run_profile import (
    parse_fleets,
    parse_instances,
    parse_schedule,
    parse_utilization_policy,
)
from .volume import parse_mount

PYTHON_VERSIONS = ("3.9", "3.10", "3.11", "3.12", "3.13", "3.14")
STARTUP_ORDERS = ("any", "master-first", "workers-first")
STOP_CRITERIA = ("all-done", "master-done")
CREATION_POLICIES = ("reuse", "reuse-or-create")
DEFAULT_STOP_DURATION = 300
DEFAULT_RUN_IDLE_DURATION = 300
GROUP_NAME_RE = re.compile(r"[a-z0-9][a-z0-9-]{0,39}")
_NEGATIVE_ID = re.compile(r"-[0-9]+\Z")

# Where references may appear, and which: secrets are filled when the run is submitted, env.*
# from the run's own env (registry_auth only), run.args from the command line.
ENV_REFS = {"secrets": None}
REGISTRY_REFS = {"secrets": None, "env": None}
COMMAND_REFS = {"secrets": None, "run": ("args",)}


# ---------------------------------------------------------------------------------------------
# Small fields


def parse_python(value: object, ctx: Ctx) -> str | None:
    if value is None:
        return None
    if isinstance(value, float):
        value = repr(value)
        if value == "3.1":
            value = "3.10"
    if not isinstance(value, str):
        raise Invalid("expected a Python version such as 3.12, got %s" % describe(value))
    return want_choice(value, PYTHON_VERSIONS)


def parse_shell(value: object, ctx: Ctx) -> str | None:
    if value is None:
        return None
    text = want_str(value)
    if text == "sh":
        return "/bin/sh"
    if text == "bash":
        return "/bin/bash"
    if text.startswith("/"):
        return text
    raise Invalid("the value must be sh, bash, or an absolute path, got %s" % show(text))


def parse_user(value: object, ctx: Ctx) -> str | None:
    """``name_or_uid[:group_or_gid]`` as Docker takes it."""
    if value is None:
        return None
    text = want_str(value, "a user such as ubuntu or 1000:1000")
    parts = text.split(":")
    if len(parts) > 2:
        raise Invalid("invalid user format %s: too many parts; write user[:group]" % show(text))
    for part, what in zip(parts, ("user name or id", "group name or id")):
        if not part:
            raise Invalid("invalid user format %s: empty %s" % (show(text), what))
        if _NEGATIVE_ID.match(part):
            raise Invalid("invalid user format %s: negative id %s" % (show(text), show(part)))
    return text


def parse_opt_bool(value: object, ctx: Ctx) -> bool | None:
    return None if value is None else want_bool(value)


def parse_commands(value: object, ctx: Ctx) -> Any:
    if value is None:
        return []
    return list_of(lambda v, c: want_str(v, "a command string"), "a list of commands")(value, ctx)


def _check_refs(text, allowed, groups=False):
    try:
        interpolation.check(text, allowed, groups=groups)
    except interpolation.InterpolationError as exc:
        raise Invalid(str(exc)) from exc


# ---------------------------------------------------------------------------------------------
# Ports, registry auth, files, repos


_PORT_RE = re.compile(r"(?:([0-9]{1,10}|\*):)?([0-9]{1,10})")


def _port_number(value):
    return want_int(value, minimum=1, maximum=65535, what="a port number")


def parse_port(value: object, ctx: Ctx) -> Any:
    """``8080``, ``"80:8080"``, ``"*:8080"`` or ``{local_port, container_port}``."""
    if isinstance(value, bool):
        raise Invalid("expected a port, got %s" % describe(value))
    if isinstance(value, int):
        port = _port_number(value)
        return {"local_port": port, "container_port": port}
    if isinstance(value, str):
        match = _PORT_RE.fullmatch(value)
        if not match:
            raise Invalid(
                "invalid port mapping %s: write 8080, 80:8080 or *:8080" % show(value)
            )
        container = _port_number(match.group(2))
        local = match.group(1)
        if local is None:
            local_port = container
        elif local == "*":
            local_port = None
        else:
            local_port = _port_number(local)
        return {"local_port": local_port, "container_port": container}
    data = want_mapping(value, "a port, a mapping string, or {local_port, container_port}")
    fields = {
        "local_port": lambda v, c: None if v is None else _port_number(v),
        "container_port": lambda v, c: _port_number(v),
    }
    parsed = parse_object(data, ctx, fields, ("container_port",), owner="a port mapping")
    if parsed is INVALID:
        return INVALID
    return {"local_port": parsed.get("local_port"), "container_port": parsed["container_port"]}


def parse_registry_auth(value: object, ctx: Ctx) -> Any:
    if value is None:
        return None
    data = want_mapping(value, "a mapping with username and password")

    def credential(v, c):
        text = want_str(v)
        _check_refs(text, REGISTRY_REFS)
        return text

    return parse_object(
        data,
        ctx,
        {"username": credential, "password": credential},
        ("username", "password"),
        owner="registry_auth",
    )


def _split_local_path(text):
    """Split ``a:b`` keeping a Windows drive (``C:\\x``, ``c:/x``) in the first part."""
    parts = text.split(":")
    if (
        len(parts) > 1
        and len(parts[0]) == 1
        and parts[0] in string.ascii_letters
        and parts[1][:1] in ("\\", "/")
    ):
        parts = ["%s:%s" % (parts[0], parts[1])] + parts[2:]
    return parts


def _container_file_path(value):
    text = want_str(value)
    if len(text) >= 3 and text[0] in string.ascii_letters and text[1] == ":" and text[2] in "\\/":
        raise Invalid("path must be a Unix file path: %s" % show(text))
    return text


def parse_file(value: object, ctx: Ctx) -> Any:
    """``local[:container]`` or ``{local_path, path}``."""
    if isinstance(value, str):
        parts = _split_local_path(value)
        if len(parts) == 1:
            return {"local_path": parts[0], "path": _container_file_path(parts[0])}
        if len(parts) == 2:
            return {"local_path": parts[0], "path": _container_file_path(parts[1])}
        raise Invalid("invalid file path mapping %s: write local[:container]" % show(value))
    data = want_mapping(value, "a path string or {local_path, path}")
    fields = {
        "local_path": lambda v, c: want_nonempty_str(v),
        "path": lambda v, c: _container_file_path(v),
    }
    return parse_object(data, ctx, fields, ("local_path", "path"), owner="a file mapping")


def _repo_from_string(text):
    parts = text.split(":")
    is_url = False
    if len(parts) > 1:
        if "@" in parts[0] or parts[1].startswith("//"):
            parts = ["%s:%s" % (parts[0], parts[1])] + parts[2:]
            is_url = True
        else:
            parts = _split_local_path(text)
    if len(parts) > 2 or not parts[0]:
        raise Invalid("invalid repo %s: write a path or URL, optionally :/dir" % show(text))
    repo = {"url" if is_url else "local_path": parts[0]}
    if len(parts) == 2:
        repo["path"] = parts[1]
    return repo


_REPO_FIELDS = {
    "local_path": lambda v, c: None if v is None else want_str(v),
    "url": lambda v, c: None if v is None else want_str(v),
    "branch": lambda v, c: None if v is None else want_str(v),
    "hash": lambda v, c: None if v is None else want_str(v),
    "path": lambda v, c: want_str(v),
    "if_exists": lambda v, c: want_choice(v, ("error", "skip")),
}


def parse_repo(value: object, ctx: Ctx) -> Any:
    if isinstance(value, str):
        data = _repo_from_string(value)
    else:
        data = want_mapping(value, "a repo path/URL or a mapping")
        data = parse_fields(data, ctx, _REPO_FIELDS)
        if any(v is INVALID for v in data.values()):
            return INVALID
    repo: dict[str, Any] = {"local_path": None, "url": None, "branch": None, "hash": None,
                            "path": ".", "if_exists": "error"}
    repo.update(data)
    if repo["local_path"] and repo["url"]:
        raise Invalid("local_path and url are mutually exclusive")
    if not repo["local_path"] and not repo["url"]:
        raise Invalid("a repo needs local_path or url")
    path = repo["path"]
    if path.startswith("~") and not (path == "~" or path.startswith("~/")):
        raise Invalid("~username syntax is not supported in path %s" % show(path))
    return repo


def parse_repos(value: object, ctx: Ctx) -> Any:
    if value is None:
        return []
    items = want_list(value, "a list of repos")
    if len(items) > 1:
        raise Invalid("a maximum of one repo is currently supported")
    return list_of(parse_repo)(items, ctx)


# ---------------------------------------------------------------------------------------------
# Node groups


def _group_name(value, ctx):
    if value is None:
        return None
    name = want_str(value)
    if not GROUP_NAME_RE.fullmatch(name):
        raise Invalid("node group name should match regex ^[a-z0-9][a-z0-9-]{0,39}$, got %s"
                      % show(name))
    return name


def parse_groups(value: object, ctx: Ctx, default_image: bool) -> Any:
    items = want_list(value, "a list of node groups")
    if not items:
        raise Invalid("groups cannot be an empty list")
    out = []
    failed = False
    for index, item in enumerate(items):
        group_ctx = ctx.child(index)
        try:
            data = want_mapping(item, "a node group mapping")
        except Invalid as exc:
            group_ctx.error(exc.message)
            failed = True
            continue
        parsed = parse_fields(
            data,
            group_ctx,
            {
                "name": _group_name,
                "nodes": lambda v, c: want_int(v, minimum=1, what="a number of nodes"),
                "resources": lambda v, c: grammar.parse_resources(v, c, default_image),
                "commands": _group_commands,
                "ports": lambda v, c: list_of(parse_port)(v or [], c),
            },
        )
        if any(v is INVALID for v in parsed.values()):
            failed = True
            continue
        out.append(
            {
                "name": parsed.get("name") or str(index),
                "nodes": parsed.get("nodes", 1),
                "resources": parsed.get("resources")
                or grammar.parse_resources(None, group_ctx, default_image),
                "commands": parsed.get("commands", []),
                "ports": parsed.get("ports", []),
            }
        )
    if failed:
        return INVALID
    counts: dict[str, int] = {}
    for group in out:
        counts[group["name"]] = counts.get(group["name"], 0) + 1
    duplicates = sorted(name for name, count in counts.items() if count > 1)
    if duplicates:
        raise Invalid("duplicate node group names: %s; each group needs its own name"
                      % ", ".join(duplicates))
    return out


def _group_commands(value, ctx):
    commands = parse_commands(value, ctx)
    if commands is INVALID:
        return INVALID
    for index, command in enumerate(commands):
        try:
            interpolation.check(command, COMMAND_REFS, groups=True)
        except interpolation.InterpolationError as exc:
            raise Invalid(str(exc), (index,)) from exc
    return commands


# ---------------------------------------------------------------------------------------------
# The task


def parse_env_with_refs(value: object, ctx: Ctx) -> dict[str, Any]:
    env = parse_env(value, ctx)
    for name, text in env.items():
        if text is not None:
            try:
                interpolation.check(text, ENV_REFS)
            except interpolation.InterpolationError as exc:
                raise Invalid(str(exc), (name,)) from exc
    return env


def _deprecated(message):
    def parse(value, ctx):
        ctx.warn(message)
        return value

    return parse


FIELDS = {
    "type": lambda v, c: v,
    "name": common.parse_name,
    "image": lambda v, c: None if v is None else want_nonempty_str(v),
    "python": parse_python,
    "nvcc": parse_opt_bool,
    "docker": parse_opt_bool,
    "entrypoint": lambda v, c: None if v is None else want_str(v),
    "commands": parse_commands,
    "shell": parse_shell,
    "working_dir": lambda v, c: None if v is None else want_str(v),
    "user": parse_user,
    "privileged": lambda v, c: want_bool(v),
    "env": parse_env_with_refs,
    "registry_auth": parse_registry_auth,
    # resources and groups depend on image/docker; parsed below.
    "resources": lambda v, c: v,
    "groups": lambda v, c: v,
    "nodes": lambda v, c: None if v is None else want_int(v, minimum=1, what="a number of nodes"),
    "ports": lambda v, c: list_of(parse_port)(v or [], c),
    "volumes": lambda v, c: list_of(parse_mount)(v or [], c),
    "files": lambda v, c: list_of(parse_file)(v or [], c),
    "repos": parse_repos,
    "single_branch": parse_opt_bool,
    "dstack": lambda v, c: want_bool(v),
    "priority": lambda v, c: 0 if v is None else want_int(v, minimum=0, maximum=100),
    "startup_order": lambda v, c: "any" if v is None else want_choice(v, STARTUP_ORDERS),
    "stop_criteria": lambda v, c: "all-done" if v is None else want_choice(v, STOP_CRITERIA),
    "retry": common.parse_retry,
    "max_duration": grammar.offable_duration(grammar.OFF),
    "stop_duration": grammar.offable_duration(DEFAULT_STOP_DURATION),
    "idle_duration": grammar.idle_duration(None),
    "spot_policy": common.parse_spot_policy,
    "max_price": common.parse_max_price,
    "creation_policy": lambda v, c: (
        "reuse-or-create" if v is None else want_choice(v, CREATION_POLICIES)
    ),
    "reservation": common.parse_optional_str,
    "backends": common.parse_backends,
    "regions": common.parse_optional_str_list,
    "availability_zones": common.parse_optional_str_list,
    "instance_types": common.parse_optional_str_list,
    "fleets": parse_fleets,
    "instances": parse_instances,
    "tags": common.parse_tags,
    "schedule": parse_schedule,
    "utilization_policy": parse_utilization_policy,
    "backend_options": common.parse_backend_options,
    "home_dir": _deprecated("home_dir is deprecated and has no effect; remove it"),
    "setup": _deprecated("setup is deprecated and has no effect for tasks; use commands"),
}


def parse_task(data: dict[str, Any], ctx: Ctx) -> dict[str, Any]:
    parsed = parse_fields(data, ctx, FIELDS, unknown=common.explain_removed)
    get = parsed.get
    image, python, docker, nvcc = get("image"), get("python"), get("docker"), get("nvcc")

    if image and python is not None:
        ctx.child("python").error("image and python are mutually exclusive fields")
    if docker is True:
        for other, present in (("image", image), ("python", python), ("nvcc", nvcc)):
            if present:
                ctx.child("docker").error("%s and docker are mutually exclusive fields" % other)
    default_image = image is None and docker is not True

    resources = ctx.run(
        "resources", lambda v, c: grammar.parse_resources(v, c, default_image), data.get("resources")
    )

    groups = None
    nodes = get("nodes")
    if data.get("groups") is not None:
        if data.get("nodes") is not None:
            ctx.child("groups").error("nodes and groups are mutually exclusive")
        groups = ctx.run("groups", lambda v, c: parse_groups(v, c, default_image), data["groups"])
        for key in ("commands", "ports"):
            if get(key):
                ctx.child(key).error(
                    "top-level %s is not allowed when groups is set; specify %s in each node "
                    "group instead" % (key, key)
                )
        if get("entrypoint") is not None:
            ctx.child("entrypoint").error(
                "top-level entrypoint is not allowed when groups is set; specify commands in "
                "each node group instead"
            )
        if groups and groups is not INVALID and image is None:
            for index, group in enumerate(groups):
                if not group["commands"]:
                    ctx.child("groups").child(index).error(
                        "node group %r: set commands in the group, or image at the task level"
                        % group["name"]
                    )
    elif not get("commands") and not image and "commands" not in _invalid(parsed):
        ctx.error("either commands or image must be set: a task needs something to run")

    commands = get("commands", [])
    if commands and commands is not INVALID:
        for index, command in enumerate(commands):
            try:
                interpolation.check(command, COMMAND_REFS)
            except interpolation.InterpolationError as exc:
                ctx.child("commands").child(index).error(str(exc))

    env = get("env", {})
    registry = get("registry_auth")
    if registry and registry is not INVALID and env is not INVALID:
        for key in ("username", "password"):
            for ref in interpolation.references(registry[key]):
                namespace, _dot, name = ref.partition(".")
                if namespace == "env" and name not in env:
                    ctx.child("registry_auth").child(key).error(
                        "${{ env.%s }} refers to %s, which is not in this task's env; add it to env"
                        % (shorten(name), shorten(name))
                    )

    shell = get("shell")
    if shell is None:
        shell = "/bin/bash" if image is None else "/bin/sh"
    privileged = get("privileged", False)
    if docker is True:
        privileged = True

    if groups and groups is not INVALID:
        nodes = sum(g["nodes"] for g in groups)

    return {
        "type": "task",
        "name": get("name"),
        "image": image,
        "python": python,
        "nvcc": bool(nvcc),
        "docker": bool(docker),
        "entrypoint": get("entrypoint"),
        "commands": commands,
        "shell": shell,
        "working_dir": get("working_dir"),
        "user": get("user"),
        "privileged": privileged,
        "env": env,
        "registry_auth": registry,
        "resources": resources,
        "nodes": nodes if nodes is not None else 1,
        "groups": groups,
        "ports": get("ports", []),
        "volumes": get("volumes", []),
        "files": get("files", []),
        "repos": get("repos", []),
        "single_branch": True if get("single_branch") is None else get("single_branch"),
        "dstack": get("dstack", False),
        "priority": get("priority", 0),
        "startup_order": get("startup_order", "any"),
        "stop_criteria": get("stop_criteria", "all-done"),
        "retry": get("retry"),
        "max_duration": get("max_duration", grammar.OFF),
        "stop_duration": get("stop_duration", DEFAULT_STOP_DURATION),
        # None when the file does not set it: instances the run makes then take the fleet's
        # idle_duration, else DEFAULT_RUN_IDLE_DURATION (fleets/idle.py), as in dstack.
        "idle_duration": get("idle_duration"),
        "spot_policy": get("spot_policy", "on-demand"),
        "max_price": get("max_price"),
        "creation_policy": get("creation_policy", "reuse-or-create"),
        "reservation": get("reservation"),
        "backends": get("backends"),
        "regions": get("regions"),
        "availability_zones": get("availability_zones"),
        "instance_types": get("instance_types"),
        "fleets": get("fleets"),
        "instances": get("instances"),
        "tags": get("tags"),
        "schedule": get("schedule"),
        "utilization_policy": get("utilization_policy"),
        "backend_options": get("backend_options"),
    }


def _invalid(parsed):
    return set(k for k, v in parsed.items() if v is INVALID)
