# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The parts of ``type: service`` that are mappings of their own, as dstack reads them:
``model`` (the OpenAI-compatible route), ``scaling``, ``rate_limits`` and ``probes``, with
dstack's bounds, defaults and messages. spec/service.py puts them together.
"""

from __future__ import annotations

import json
import re
from typing import Any

from . import grammar
from ._errors import INVALID, Ctx, Invalid, show
from ._types import (
    MAX_INT,
    list_of,
    parse_object,
    want_bool,
    want_choice,
    want_int,
    want_list,
    want_mapping,
    want_number,
    want_str,
)

# dstack's defaults (core/models/configurations.py and the job configurator's probe specs).
DEFAULT_MODEL_PREFIX = "/v1"
MODEL_FORMATS = ("openai", "tgi")
SCALING_METRICS = ("rps",)
SCALING_WINDOWS = (30, 60, 300)
DEFAULT_SCALE_UP_DELAY = 300
DEFAULT_SCALE_DOWN_DELAY = 600
RATE_LIMIT_KEYS = ("ip_address", "header")
MIN_RPS = 1.0 / 60
MAX_RPS = MAX_INT // 60
MAX_PREFIX_LEN = 4094
MAX_HEADER_NAME_LEN = 500
_PREFIX_RE = re.compile(r"/[^\s\\{}]*")
_HEADER_RE = re.compile(r"[a-zA-Z0-9\-_]+")
PROBE_TYPES = ("http",)
PROBE_METHODS = ("get", "post", "put", "delete", "patch", "head")
MIN_PROBE_TIMEOUT = 1
MIN_PROBE_INTERVAL = 1
DEFAULT_PROBE_URL = "/"
DEFAULT_PROBE_TIMEOUT = 10
DEFAULT_PROBE_INTERVAL = 15
DEFAULT_PROBE_READY_AFTER = 1
DEFAULT_PROBE_METHOD = "get"
DEFAULT_PROBE_UNTIL_READY = False
MAX_PROBE_URL_LEN = 2048
MAX_PROBE_HEADERS = 16
MAX_PROBE_BODY_LEN = 2048
OPENAI_MODEL_PROBE_TIMEOUT = 30


def _opt(parser):
    def parse(value, ctx):
        return None if value is None else parser(value, ctx)

    return parse


def _text(value, ctx):
    return want_str(value)


# ---------------------------------------------------------------------------------------------
# model


def parse_model(value: object, ctx: Ctx) -> Any:
    """A model name (an OpenAI-compatible API at /v1) or ``{type, name, format, ...}``."""
    if value is None:
        return None
    if isinstance(value, str):
        return {"type": "chat", "name": value, "format": "openai", "prefix": DEFAULT_MODEL_PREFIX}
    data = want_mapping(value, "a model name or a mapping with name and format")
    if "format" not in data:
        raise Invalid("a model mapping needs format: openai or tgi (or write just the model's "
                      "name for an OpenAI-compatible API at /v1)")
    fmt = want_choice(data["format"], MODEL_FORMATS)
    fields = {
        "type": lambda v, c: want_choice(v, ("chat",)),
        "name": _text,
        "format": lambda v, c: v,
    }
    if fmt == "openai":
        fields["prefix"] = _text
    else:
        fields["chat_template"] = _opt(_text)
        fields["eos_token"] = _opt(_text)
    parsed = parse_object(data, ctx, fields, ("name",), owner="a model mapping")
    if parsed is INVALID:
        return INVALID
    model = {"type": parsed.get("type", "chat"), "name": parsed["name"], "format": fmt}
    if fmt == "openai":
        model["prefix"] = parsed.get("prefix", DEFAULT_MODEL_PREFIX)
    else:
        model["chat_template"] = parsed.get("chat_template")
        model["eos_token"] = parsed.get("eos_token")
    return model


# ---------------------------------------------------------------------------------------------
# scaling


def _window(value, ctx):
    if value is None:
        return None
    seconds = grammar.parse_duration(value)
    if seconds not in SCALING_WINDOWS:
        raise Invalid("Window must be one of: %s"
                      % ", ".join("`%ds`" % w for w in SCALING_WINDOWS))
    return seconds


def parse_scaling(value: object, ctx: Ctx) -> Any:
    """``{metric: rps, target, window, scale_up_delay, scale_down_delay}`` (seconds)."""
    if value is None:
        return None
    data = want_mapping(value, "a mapping with metric and target")
    fields = {
        "metric": lambda v, c: want_choice(v, SCALING_METRICS),
        "target": lambda v, c: float(want_number(v, exclusive_minimum=0,
                                                 what="a number of requests per second")),
        "window": _window,
        "scale_up_delay": lambda v, c: grammar.parse_duration(v),
        "scale_down_delay": lambda v, c: grammar.parse_duration(v),
    }
    parsed = parse_object(data, ctx, fields, ("metric", "target"), owner="scaling")
    if parsed is INVALID:
        return INVALID
    return {
        "metric": parsed["metric"],
        "target": parsed["target"],
        "window": parsed.get("window"),
        "scale_up_delay": parsed.get("scale_up_delay", DEFAULT_SCALE_UP_DELAY),
        "scale_down_delay": parsed.get("scale_down_delay", DEFAULT_SCALE_DOWN_DELAY),
    }


# ---------------------------------------------------------------------------------------------
# rate_limits


def _prefix(value, ctx):
    text = want_str(value, "a URL path prefix such as /v1")
    if len(text) > MAX_PREFIX_LEN:
        raise Invalid("a prefix is at most %d characters" % MAX_PREFIX_LEN)
    if not _PREFIX_RE.fullmatch(text):
        raise Invalid("invalid prefix %s: it starts with / and has no spaces, backslashes or "
                      "braces (pattern ^/[^\\s\\\\{}]*$)" % show(text))
    return text


def _header_name(value, ctx):
    text = want_str(value, "a header name")
    if len(text) > MAX_HEADER_NAME_LEN:
        raise Invalid("a header name is at most %d characters" % MAX_HEADER_NAME_LEN)
    if not _HEADER_RE.fullmatch(text):
        raise Invalid("invalid header name %s: letters, digits, - and _ only (pattern "
                      "^[a-zA-Z0-9-_]+$)" % show(text))
    return text


def parse_rate_limit_key(value: object, ctx: Ctx) -> Any:
    data = want_mapping(value, "a mapping with type: ip_address or type: header")
    if "type" not in data:
        raise Invalid("a rate limit key needs type: ip_address or header")
    kind = want_choice(data["type"], RATE_LIMIT_KEYS)
    fields = {"type": lambda v, c: v}
    if kind == "header":
        fields["header"] = _header_name
    parsed = parse_object(data, ctx, fields, fields.keys(), owner="a header key")
    if parsed is INVALID:
        return INVALID
    return dict(parsed)


def _rps(value, ctx):
    rps = float(want_number(value, maximum=MAX_RPS, what="a number of requests per second"))
    if rps < MIN_RPS:
        raise Invalid("must be at least 1/60 (one request a minute), got %s" % show(value))
    return rps


def parse_rate_limit(value: object, ctx: Ctx) -> Any:
    data = want_mapping(value, "a mapping with prefix, key, rps and burst")
    fields = {
        "prefix": _prefix,
        "key": parse_rate_limit_key,
        "rps": _rps,
        "burst": lambda v, c: want_int(v, minimum=0, maximum=MAX_INT, what="a number of requests"),
    }
    parsed = parse_object(data, ctx, fields, ("rps",), owner="a rate limit")
    if parsed is INVALID:
        return INVALID
    return {
        "prefix": parsed.get("prefix", "/"),
        "key": parsed.get("key", {"type": "ip_address"}),
        "rps": parsed["rps"],
        "burst": parsed.get("burst", 0),
    }


def parse_rate_limits(value: object, ctx: Ctx) -> Any:
    if value is None:
        return []
    limits = list_of(parse_rate_limit, "a list of rate limits")(value, ctx)
    if limits is INVALID:
        return INVALID
    seen, duplicates = set(), []
    for limit in limits:
        if limit["prefix"] in seen and limit["prefix"] not in duplicates:
            duplicates.append(limit["prefix"])
        seen.add(limit["prefix"])
    if duplicates:
        raise Invalid("Prefixes %s are used more than once. Each rate limit should have a unique "
                      "path prefix" % duplicates)
    return limits


# ---------------------------------------------------------------------------------------------
# probes


def _bounded_text(what, low, high):
    def parse(value, ctx):
        text = want_str(value, what)
        if not low <= len(text) <= high:
            raise Invalid("%s has %d to %d characters, got %d" % (what, low, high, len(text)))
        return text

    return parse


def _header(value, ctx):
    data = want_mapping(value, "a mapping with name and value")
    fields = {"name": _bounded_text("a header name", 1, 256),
              "value": _bounded_text("a header value", 1, 2048)}
    parsed = parse_object(data, ctx, fields, ("name", "value"), owner="a header")
    return INVALID if parsed is INVALID else {"name": parsed["name"], "value": parsed["value"]}


def _headers(value, ctx):
    if value is None:
        raise Invalid("expected a list of headers, got null")
    items = want_list(value, "a list of headers")
    if len(items) > MAX_PROBE_HEADERS:
        raise Invalid("at most %d headers, got %d" % (MAX_PROBE_HEADERS, len(items)))
    return list_of(_header)(items, ctx)


def _url(value, ctx):
    text = want_str(value, "a URL path such as /health")
    if not text.startswith("/"):
        raise Invalid("Must start with `/`")
    if len(text) > MAX_PROBE_URL_LEN:
        raise Invalid("Cannot be longer than %d characters" % MAX_PROBE_URL_LEN)
    if not text.isprintable():
        raise Invalid("Cannot contain non-printable characters")
    return text


def _seconds_at_least(minimum, what):
    def parse(value, ctx):
        seconds = grammar.parse_duration(value)
        if seconds < minimum:
            raise Invalid("Probe %s cannot be shorter than %ds" % (what, minimum))
        return seconds

    return parse


PROBE_FIELDS = {
    "type": lambda v, c: want_choice(v, PROBE_TYPES),
    "url": _opt(_url),
    "method": _opt(lambda v, c: want_choice(v, PROBE_METHODS)),
    "headers": _headers,
    "body": _opt(_bounded_text("a request body", 1, MAX_PROBE_BODY_LEN)),
    "timeout": _opt(_seconds_at_least(MIN_PROBE_TIMEOUT, "timeout")),
    "interval": _opt(_seconds_at_least(MIN_PROBE_INTERVAL, "interval")),
    "ready_after": _opt(lambda v, c: want_int(v, minimum=1, what="a number of probes")),
    "until_ready": _opt(lambda v, c: want_bool(v)),
}


def _probe_as_given(value, ctx):
    """The probe's fields as written (None where omitted), checked; defaults come later."""
    data = want_mapping(value, "a probe mapping with type: http")
    parsed = parse_object(data, ctx, PROBE_FIELDS, ("type",), owner="a probe")
    if parsed is INVALID:
        return INVALID
    given = dict((key, parsed.get(key)) for key in PROBE_FIELDS)
    given["headers"] = given["headers"] or []
    # As dstack: an omitted method does not count as get here.
    if given["body"] is not None and given["method"] in ("get", "head"):
        raise Invalid("Cannot set request body for the `%s` method" % given["method"])
    return given


def _with_defaults(given):
    return {
        "type": given["type"],
        "url": DEFAULT_PROBE_URL if given["url"] is None else given["url"],
        "method": DEFAULT_PROBE_METHOD if given["method"] is None else given["method"],
        "headers": given["headers"],
        "body": given["body"],
        "timeout": DEFAULT_PROBE_TIMEOUT if given["timeout"] is None else given["timeout"],
        "interval": DEFAULT_PROBE_INTERVAL if given["interval"] is None else given["interval"],
        "ready_after": (DEFAULT_PROBE_READY_AFTER if given["ready_after"] is None
                        else given["ready_after"]),
        "until_ready": (DEFAULT_PROBE_UNTIL_READY if given["until_ready"] is None
                        else given["until_ready"]),
    }


def parse_probes(value: object, ctx: Ctx) -> Any:
    """A list of probes with dstack's defaults filled in; None when null (as omitted)."""
    if value is None:
        return None
    given = list_of(_probe_as_given, "a list of probes")(value, ctx)
    if given is INVALID:
        return INVALID
    keys = [json.dumps(probe, sort_keys=True) for probe in given]
    if len(set(keys)) != len(keys):
        raise Invalid("Probes must be unique")
    return [_with_defaults(probe) for probe in given]


def model_probe(model: dict[str, Any]) -> dict[str, Any]:
    """dstack's probe of an OpenAI-compatible model when a service sets no probes: one chat
    completion of one token."""
    body = json.dumps({"model": model["name"], "messages": [{"role": "user", "content": "hi"}],
                       "max_tokens": 1})
    return {
        "type": "http",
        "url": model["prefix"].rstrip("/") + "/chat/completions",
        "method": "post",
        "headers": [{"name": "Content-Type", "value": "application/json"}],
        "body": body,
        "timeout": OPENAI_MODEL_PROBE_TIMEOUT,
        "interval": DEFAULT_PROBE_INTERVAL,
        "ready_after": DEFAULT_PROBE_READY_AFTER,
        "until_ready": DEFAULT_PROBE_UNTIL_READY,
    }


def default_probes(model: Any) -> list[dict[str, Any]]:
    """The probes of a service without ``probes``: the model probe for an OpenAI model, else
    none (the proxy then checks the port)."""
    if isinstance(model, dict) and model.get("format") == "openai":
        return [model_probe(model)]
    return []
