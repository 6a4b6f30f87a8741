# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The profile fields of a run that say where and when it runs: ``fleets``, ``instances``,
``schedule`` (cron) and ``utilization_policy``. Part of ``type: task`` (spec/task.py)."""

from __future__ import annotations

import re
from typing import Any

from . import grammar
from ._errors import INVALID, Ctx, Invalid, show, show_keys
from ._types import (
    list_of,
    parse_object,
    want_int,
    want_list,
    want_mapping,
    want_nonempty_str,
    want_str,
)

MIN_UTILIZATION_WINDOW = 300


def _fleet_ref(value, ctx):
    if isinstance(value, dict):
        data = want_mapping(value)
        fields = {
            "project": lambda v, c: None if v is None else want_nonempty_str(v),
            "name": lambda v, c: want_nonempty_str(v),
        }
        parsed = parse_object(data, ctx, fields, ("name",), owner="a fleet reference")
        if parsed is INVALID:
            return INVALID
        project = parsed.get("project")
        return "%s/%s" % (project, parsed["name"]) if project else parsed["name"]
    text = want_str(value, "a fleet name or project/name")
    parts = text.split("/")
    if len(parts) > 2 or any(not p for p in parts):
        raise Invalid(
            "invalid fleet reference %s: only <name> or <project>/<name> are allowed" % show(text)
        )
    return text


def parse_fleets(value: object, ctx: Ctx) -> Any:
    if value is None:
        return None
    return list_of(_fleet_ref, "a list of fleet names")(value, ctx)


def _instance_selector(value, ctx):
    if isinstance(value, str):
        if not value:
            raise Invalid("an instance name must not be empty")
        return {"name": value}
    data = want_mapping(value, "an instance name, {name}, {hostname} or {fleet, instance}")
    keys = set(data)
    if keys == {"name"}:
        return {"name": want_nonempty_str(data["name"])}
    if keys == {"hostname"}:
        return {"hostname": want_nonempty_str(data["hostname"])}
    if keys == {"fleet", "instance"}:
        fleet = _fleet_ref(data["fleet"], ctx.child("fleet"))
        instance = want_int(data["instance"], minimum=0, what="an instance number")
        return {"fleet": fleet, "instance": instance}
    raise Invalid(
        "an instance selector is a name, or a mapping with exactly name, hostname, or fleet and "
        "instance; got keys %s" % show_keys(sorted(keys))
    )


def parse_instances(value: object, ctx: Ctx) -> Any:
    if value is None:
        return None
    return list_of(_instance_selector, "a list of instances", min_items=1)(value, ctx)


_CRON_FIELD = re.compile(
    r"^(\*|[0-9A-Za-z]+(-[0-9A-Za-z]+)?)(/[0-9]+)?(,(\*|[0-9A-Za-z]+(-[0-9A-Za-z]+)?)(/[0-9]+)?)*$"
)
_CRON_BOUNDS = ((0, 59), (0, 23), (1, 31), (1, 12), (0, 7))
_CRON_NAMES: tuple[dict[str, int], ...] = (
    {},
    {},
    {},
    {m: i + 1 for i, m in enumerate("jan feb mar apr may jun jul aug sep oct nov dec".split())},
    {d: i for i, d in enumerate("sun mon tue wed thu fri sat".split())},
)


def validate_cron(expression: str) -> str:
    if len(expression) > 1000:
        raise Invalid("invalid cron expression: longer than 1000 characters")
    fields = expression.split()
    if len(fields) != 5:
        raise Invalid(
            "invalid cron expression %s: expected 5 fields (minute hour day month weekday)"
            % show(expression)
        )
    for field, (low, high), names in zip(fields, _CRON_BOUNDS, _CRON_NAMES):
        if not _CRON_FIELD.match(field):
            raise Invalid("invalid cron expression %s: bad field %s" % (show(expression), show(field)))
        for token in re.split(r"[,/\-]", field):
            if token == "*" or not token:
                continue
            if token.isascii() and token.isdigit():
                number = int(token) if len(token) <= 4 else None
            else:
                number = names.get(token.lower())
            if number is None or not low <= number <= high:
                raise Invalid(
                    "invalid cron expression %s: %s is out of range %d-%d"
                    % (show(expression), show(token), low, high)
                )
        for part in field.split(","):
            base, _sep, step = part.partition("/")
            if step and int(step) == 0:
                raise Invalid("invalid cron expression %s: %s has a step of 0"
                              % (show(expression), show(part)))
            ends = [int(t) if t.isdigit() else names[t.lower()] for t in base.split("-")
                    if t != "*"]
            if len(ends) == 2 and ends[0] > ends[1]:
                raise Invalid("invalid cron expression %s: the range %s goes backwards"
                              % (show(expression), show(base)))
    return expression


def parse_schedule(value: object, ctx: Ctx) -> Any:
    if value is None:
        return None
    data = want_mapping(value, "a mapping with cron")

    def crons(v, c):
        items = [v] if isinstance(v, str) else want_list(v, "a cron expression or a list")
        if not items:
            raise Invalid("at least one cron expression must be specified")
        out = []
        for index, item in enumerate(items):
            try:
                out.append(validate_cron(want_str(item)))
            except Invalid as exc:
                raise Invalid(exc.message, (index,) if not isinstance(v, str) else ()) from exc
        return out

    return parse_object(data, ctx, {"cron": crons}, ("cron",), owner="schedule")


def parse_utilization_policy(value: object, ctx: Ctx) -> Any:
    if value is None:
        return None
    data = want_mapping(value, "a mapping with min_gpu_utilization and time_window")

    def window(v, c):
        seconds = grammar.required_duration(v, c)
        if seconds < MIN_UTILIZATION_WINDOW:
            raise Invalid("minimum time_window is 5m, got %s" % show(v))
        return seconds

    fields = {
        "min_gpu_utilization": lambda v, c: want_int(v, minimum=0, maximum=100),
        "time_window": window,
    }
    return parse_object(
        data, ctx, fields, ("min_gpu_utilization", "time_window"), owner="utilization_policy"
    )
