# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""``type: dev-environment``: one container on one host that stays up until stopped, reached
with ``gpufleet attach`` (SSH and an IDE link), as dstack's dev environments.

Every field of a task but ``commands``, ``nodes``, ``groups`` and ``entrypoint`` (dstack has no
such field in a dev environment, or refuses it), plus ``ide`` (vscode, cursor, windsurf, zed,
or none for SSH only), ``version`` (the IDE server's commit; windsurf ``version@commit``),
``init`` (commands run once, after ``setup``) and ``inactivity_duration`` (stop after that long
with no SSH connection; off by default). The normalized config is a task's (``commands`` empty,
``nodes`` 1) with those fields and ``setup``; tasks/devenv.py makes the job's commands.
"""

from __future__ import annotations

import re
from typing import Any

from . import grammar
from ._errors import INVALID, Ctx, Invalid, show
from ._types import want_choice, want_str
from .task import parse_commands, parse_task

IDES = ("vscode", "cursor", "windsurf", "zed")
DEV_FIELDS = ("ide", "version", "init", "inactivity_duration", "setup")
_WINDSURF_VERSION = re.compile(r".+@[a-f0-9]+\Z")
# Fields of a task a dev environment does not have: what to write instead.
NOT_HERE = {
    "commands": "a dev environment has no commands: put what runs once in init (it then stays "
                "up until stopped)",
    "nodes": "a dev environment runs on one node; use a task for several",
    "groups": "a dev environment runs on one node; use a task for node groups",
    "entrypoint": "entrypoint is not supported for dev-environment",
}


def parse_inactivity_duration(value: object, ctx: Ctx) -> int | None:
    """dstack's: off, false, true and unset mean off (None); else a duration, never negative."""
    if value is None or value is True or value is False or value == grammar.OFF:
        return None
    if isinstance(value, str) and value.strip().startswith("-") or (
            isinstance(value, int) and value < 0):
        raise Invalid("Duration cannot be negative, got %s" % show(value))
    return grammar.parse_duration(value)


def check_version(ide: str | None, version: str) -> str:
    """``version`` for ``ide`` as dstack takes it, or Invalid saying why."""
    if ide is None:
        raise Invalid("`version` requires `ide` to be set")
    if ide == "windsurf" and not _WINDSURF_VERSION.match(version):
        raise Invalid(
            "Invalid Windsurf version format: `%s`. Expected format: `version@commit` (e.g., "
            "`1.106.0@8951cd3ad688e789573d7f51750d67ae4a0bea7d`)" % version)
    return version


def _parse_dev(data, ctx):
    found = {}
    for key in DEV_FIELDS:
        if key not in data:
            continue
        child = ctx.child(key)
        value = data[key]
        try:
            if key == "ide":
                found[key] = None if value is None else want_choice(value, IDES)
            elif key == "version":
                found[key] = None if value is None else want_str(value)
            elif key in ("init", "setup"):
                found[key] = INVALID if value is INVALID else (
                    [] if value is None else parse_commands(value, child))
            else:
                found[key] = parse_inactivity_duration(value, child)
        except Invalid as exc:
            child.error(str(exc))
            found[key] = INVALID
    return found


def parse_dev_environment(data: dict[str, Any], ctx: Ctx) -> Any:
    for key, why in NOT_HERE.items():
        if key in data:
            ctx.child(key).error(why)
    dev = _parse_dev(data, ctx)
    task_data = dict((k, v) for k, v in data.items() if k not in DEV_FIELDS and k not in NOT_HERE)
    # A task needs something to run; the dev environment's commands are made at run time.
    task_data.update(type="task", commands=["true"])
    config = parse_task(task_data, ctx)
    ide, version = dev.get("ide"), dev.get("version")
    if isinstance(version, str) and ide is not INVALID:
        try:
            check_version(ide, version)
        except Invalid as exc:
            ctx.child("version").error(str(exc))
    inactivity = dev.get("inactivity_duration")
    if inactivity not in (None, INVALID) and data.get("dstack"):
        ctx.child("inactivity_duration").error(
            "`dstack` is not supported together with `inactivity_duration`")
    config.update({
        "type": "dev-environment",
        "commands": [],
        "nodes": 1,
        "ide": ide if ide is not INVALID else None,
        "version": version if version is not INVALID else None,
        "init": dev.get("init") if dev.get("init") not in (None, INVALID) else [],
        "setup": dev.get("setup") if dev.get("setup") not in (None, INVALID) else [],
        "inactivity_duration": inactivity if inactivity is not INVALID else None,
    })
    # dstack clones a dev environment's repo with all its branches.
    if "single_branch" not in data or data.get("single_branch") is None:
        config["single_branch"] = False
    return config
