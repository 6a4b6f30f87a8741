# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Fields shared by fleets, tasks and volumes: names, tags, backends, retry, spot policy..."""

from __future__ import annotations

import re
from typing import Any

from . import grammar
from ._errors import INVALID, Ctx, Invalid, describe, show
from ._types import (
    parse_fields,
    str_list,
    want_choice,
    want_int,
    want_list,
    want_mapping,
    want_number,
    want_str,
)

NAME_RE = re.compile(r"[a-z][a-z0-9-]{1,40}")

BACKENDS = (
    "amddevcloud", "aws", "azure", "cloudrift", "crusoe", "cudo", "datacrunch", "digitalocean",
    "dstack", "gcp", "hotaisle", "kubernetes", "lambda", "local", "nebius", "oci", "remote",
    "runpod", "slurm", "tensordock", "vastai", "verda", "vultr",
)
SPOT_POLICIES = ("spot", "on-demand", "auto")
RETRY_EVENTS = ("no-capacity", "interruption", "error")
DEFAULT_RETRY_DURATION = 3600

TAG_KEY_RE = re.compile(r"[_\-a-zA-Z0-9]{1,60}")
TAG_VALUE_RE = re.compile(r"[a-zA-Z0-9 .:/=_\-+@]{0,256}")


# Fields dstack used to accept and has since removed, with what to write instead.
REMOVED_FIELDS = {
    "termination_idle_time": "was removed in dstack 0.19; use idle_duration",
    "termination_policy": "was removed in dstack 0.19; use idle_duration (off keeps instances)",
    "pool_name": "was removed along with pools; use fleets to choose where a run goes",
    "instance_name": "was removed along with pools; use instances to pin a run to a host",
}


RESOURCE_KEYS = ("cpu", "memory", "gpu", "disk", "shm_size")


def explain_removed(key: str, ctx: Ctx) -> bool:
    """An ``unknown`` hook for parse_fields: specific messages for fields dstack removed and for
    resource keys written at the top level instead of under ``resources``."""
    if key in REMOVED_FIELDS:
        ctx.child(key).error("%s %s" % (key, REMOVED_FIELDS[key]))
        return True
    if key in RESOURCE_KEYS:
        ctx.child(key).error(
            "unknown field %r at this level: resource requirements go under resources "
            "(indent it below resources:)" % key
        )
        return True
    return False


def parse_name(value: object, ctx: Ctx) -> str | None:
    if value is None:
        return None
    name = want_str(value, "a name")
    if not NAME_RE.fullmatch(name):
        raise Invalid(
            "invalid name %s: a name starts with a lower-case letter and has 2 to 41 lower-case "
            "letters, digits and dashes (regex ^[a-z][a-z0-9-]{1,40}$)" % show(name)
        )
    return name


def parse_tags(value: object, ctx: Ctx) -> Any:
    if value is None:
        return None
    tags = want_mapping(value, "a mapping of tag names to values")
    out = {}
    for key, tag_value in tags.items():
        if not TAG_KEY_RE.fullmatch(key):
            raise Invalid(
                "invalid tag key %s: keys have 1 to 60 letters, digits, _ and -" % show(key), (key,)
            )
        if not isinstance(tag_value, str):
            raise Invalid(
                "tag values must be strings, got %s; quote the value" % describe(tag_value), (key,)
            )
        if not TAG_VALUE_RE.fullmatch(tag_value):
            raise Invalid(
                "invalid tag value %s: up to 256 letters, digits, spaces and . : / = _ - + @"
                % show(tag_value),
                (key,),
            )
        out[key] = tag_value
    return out


def parse_backends(value: object, ctx: Ctx) -> Any:
    if value is None:
        return None
    items = want_list(value, "a list of backends")
    out = []
    for index, item in enumerate(items):
        try:
            out.append(want_choice(item, BACKENDS))
        except Invalid as exc:
            raise Invalid("unknown backend: " + exc.message, (index,)) from exc
    return out


def parse_optional_str_list(value: object, ctx: Ctx) -> Any:
    if value is None:
        return None
    return str_list(value, ctx)


def parse_optional_str(value: object, ctx: Ctx) -> str | None:
    if value is None:
        return None
    return want_str(value)


def parse_spot_policy(value: object, ctx: Ctx) -> str:
    if value is None:
        return "on-demand"
    return want_choice(value, SPOT_POLICIES)


def parse_max_price(value: object, ctx: Ctx) -> int | float | None:
    if value is None:
        return None
    return want_number(value, exclusive_minimum=0, what="a price in dollars per hour")


def parse_retry(value: object, ctx: Ctx) -> Any:
    """``retry: true`` (all events for 1h), ``false``, or ``{on_events, duration}``; off is None."""
    if value is None or value is False:
        return None
    if value is True:
        return {"on_events": list(RETRY_EVENTS), "duration": DEFAULT_RETRY_DURATION}
    if not isinstance(value, dict):
        raise Invalid(
            "expected true, false or a mapping with on_events and duration, got %s"
            % describe(value)
        )
    data = want_mapping(value)
    parsed = parse_fields(
        data,
        ctx,
        {"on_events": _retry_events, "duration": _retry_duration},
    )
    if any(v is INVALID for v in parsed.values()):
        return INVALID
    events = parsed.get("on_events")
    duration = parsed.get("duration")
    return {
        "on_events": list(RETRY_EVENTS) if events is None else events,
        "duration": DEFAULT_RETRY_DURATION if duration is None else duration,
    }


def _retry_events(value, ctx):
    if value is None:
        return None
    items = want_list(value, "a list of events")
    if not items:
        raise Invalid("on_events cannot be empty: list some of %s, or omit it for all"
                      % ", ".join(RETRY_EVENTS))
    out = []
    for index, item in enumerate(items):
        try:
            event = want_choice(item, RETRY_EVENTS)
        except Invalid as exc:
            raise Invalid(exc.message, (index,)) from exc
        if event not in out:
            out.append(event)
    return out


def _retry_duration(value, ctx):
    if value is None:
        return None
    return grammar.required_duration(value, ctx)


VASTAI_OPTIONS = {
    "type": lambda v, c: want_choice(v, ("vastai",)),
    "offer_order": lambda v, c: None if v is None else want_choice(v, ("score", "price")),
    "min_reliability": lambda v, c: None if v is None else want_number(v, minimum=0, maximum=1),
    "min_score": lambda v, c: None if v is None else want_int(v, minimum=0),
}


def parse_backend_options(value: object, ctx: Ctx) -> Any:
    if value is None:
        return None
    items = want_list(value, "a list of backend option blocks")
    out = []
    seen = set()
    for index, item in enumerate(items):
        item_ctx = ctx.child(index)
        data = want_mapping(item) if isinstance(item, dict) else None
        if data is None:
            raise Invalid("expected a mapping with type: vastai, got %s" % describe(item), (index,))
        if data.get("type", "vastai") != "vastai":
            raise Invalid(
                "backend options exist only for vastai, got type %s" % show(data.get("type")),
                (index, "type"),
            )
        parsed = parse_fields(data, item_ctx, VASTAI_OPTIONS)
        if any(v is INVALID for v in parsed.values()):
            return INVALID
        if "vastai" in seen:
            raise Invalid("backend_options contains duplicate entry for backend 'vastai'", (index,))
        seen.add("vastai")
        entry = {"type": "vastai", "offer_order": None, "min_reliability": None, "min_score": None}
        entry.update(parsed)
        out.append(entry)
    return out
