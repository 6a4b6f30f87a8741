# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Scalar coercions and mapping walking shared by every part of the config model.

The coercions follow what dstack's pydantic v2 models accept in lax mode, with one deliberate
difference: a YAML boolean is never silently taken as a number or a name.

PRIVATE to gpufleet.cluster.
"""

from __future__ import annotations

import difflib
import math
import re
from typing import Any, Callable, Collection, Iterable, Mapping, Sequence, TypeVar

from ..core.text import quote
from ._errors import INVALID, Ctx, Invalid, Parser, describe, show

_INT_RE = re.compile(r"[+-]?[0-9]+")
_FLOAT_RE = re.compile(r"[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?")
# No number in a configuration needs more characters than this.
MAX_NUMBER_TEXT = 64
# Integers beyond a signed 64-bit value mean nothing in a configuration and would break tools
# downstream (JSON encoders, Docker, clouds).
MAX_INT = 2**63 - 1
_TRUE = frozenset(["true", "yes", "on", "1", "t", "y"])
_FALSE = frozenset(["false", "no", "off", "0", "f", "n"])
_Number = TypeVar("_Number", int, float)


def want_str(value: object, what: str = "a string") -> str:
    if isinstance(value, str):
        return value
    raise Invalid("expected %s, got %s" % (what, describe(value)))


def want_nonempty_str(value: object, what: str = "a non-empty string") -> str:
    text = want_str(value, what)
    if not text:
        raise Invalid("must not be an empty string")
    return text


def want_int(value: object, minimum: int | None = None, maximum: int | None = None,
             what: str = "an integer") -> int:
    if isinstance(value, bool):
        raise Invalid("expected %s, got %s" % (what, describe(value)))
    if isinstance(value, int):
        number = value
    elif isinstance(value, float) and math.isfinite(value) and value.is_integer():
        number = int(value)
    elif isinstance(value, str) and _INT_RE.fullmatch(value.strip()):
        if len(value.strip()) > 20:
            raise Invalid("the number %s is too large" % show(value))
        number = int(value.strip())
    else:
        raise Invalid("expected %s, got %s" % (what, describe(value)))
    check_magnitude(number)
    _check_bounds(number, minimum, maximum)
    return number


def check_magnitude(number: _Number) -> _Number:
    if isinstance(number, int) and abs(number) > MAX_INT:
        raise Invalid("too large: %s (the limit is %d)" % (show(number), MAX_INT))
    return number


def want_number(value: object, minimum: float | None = None, maximum: float | None = None,
                exclusive_minimum: float | None = None, what: str = "a number") -> int | float:
    if isinstance(value, bool):
        raise Invalid("expected %s, got %s" % (what, describe(value)))
    if isinstance(value, (int, float)):
        number = value
    elif (
        isinstance(value, str)
        and len(value) <= MAX_NUMBER_TEXT
        and _FLOAT_RE.fullmatch(value.strip())
    ):
        number = float(value.strip())
    else:
        raise Invalid("expected %s, got %s" % (what, describe(value)))
    check_magnitude(number)
    if isinstance(number, float) and not math.isfinite(number):
        raise Invalid("expected a finite number, got %s" % show(value))
    if exclusive_minimum is not None and not number > exclusive_minimum:
        raise Invalid("must be greater than %s, got %s" % (exclusive_minimum, show(value)))
    _check_bounds(number, minimum, maximum)
    return number


def _check_bounds(number, minimum, maximum):
    if minimum is not None and number < minimum:
        raise Invalid("must be at least %s, got %s" % (minimum, show(number)))
    if maximum is not None and number > maximum:
        raise Invalid("must be at most %s, got %s" % (maximum, show(number)))


def want_bool(value: object) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, int) and value in (0, 1):
        return bool(value)
    if isinstance(value, str):
        lowered = value.strip().lower()
        if lowered in _TRUE:
            return True
        if lowered in _FALSE:
            return False
    raise Invalid("expected true or false, got %s" % describe(value))


def want_choice(value: object, choices: Sequence[str]) -> str:
    """One of a fixed set of lower-case words, compared exactly as dstack does."""
    if isinstance(value, str) and value in choices:
        return value
    hint = ""
    if isinstance(value, str):
        close = difflib.get_close_matches(value.lower(), choices, n=1, cutoff=0.6)
        if close:
            hint = " (did you mean %r?)" % close[0]
    raise Invalid(
        "must be one of %s, got %s%s" % (", ".join(choices), describe(value), hint)
    )


def want_list(value: object, what: str = "a list") -> list[Any]:
    if isinstance(value, list):
        return value
    extra = ""
    if isinstance(value, str):
        extra = "; write it as a list: [%s]" % value
    raise Invalid("expected %s, got %s%s" % (what, describe(value), extra))


def want_mapping(value: object, what: str = "a mapping") -> dict[str, Any]:
    if not isinstance(value, dict):
        raise Invalid("expected %s, got %s" % (what, describe(value)))
    for key in value:
        if not isinstance(key, str):
            raise Invalid("keys must be strings, got the key %s; quote it" % show(key))
    return value


def list_of(item_parser: Parser, what: str = "a list", min_items: int = 0) -> Parser:
    """A parser for a list whose items are parsed by ``item_parser(value, ctx)``."""

    def parse(value, ctx):
        items = want_list(value, what)
        if len(items) < min_items:
            raise Invalid("must list at least %d item%s" % (min_items, "" if min_items == 1 else "s"))
        out = []
        failed = False
        for index, item in enumerate(items):
            parsed = ctx.run(index, item_parser, item)
            failed = failed or parsed is INVALID
            out.append(parsed)
        return INVALID if failed else out

    return parse


def leaf(function: Callable[..., Any], *args: Any, **kwargs: Any) -> Parser:
    """Adapt a plain coercion ``function(value, *args)`` to the ``parser(value, ctx)`` shape."""

    def parse(value, ctx):
        return function(value, *args, **kwargs)

    return parse


def str_list(value: object, ctx: Ctx) -> Any:
    return list_of(leaf(want_str))(value, ctx)


def parse_fields(data: dict[str, Any], ctx: Ctx, fields: Mapping[str, Parser],
                 unknown: Callable[[str, Ctx], Any] | None = None) -> dict[str, Any]:
    """Parse the known ``fields`` of a mapping; report unknown keys.

    ``fields`` maps a key to ``parser(value, ctx)``. Returns a dict with the parsed value for every
    key present in ``data`` (INVALID where it failed). ``unknown(key, ctx)`` may replace the default
    unknown-key message, e.g. to explain that a field belongs to another kind of configuration.
    """
    out = {}
    for key in data:
        if key not in fields:
            if ctx.full:
                ctx.child(key).error("unknown field")  # only counted, never shown
                continue
            if unknown is not None and unknown(key, ctx):
                continue
            ctx.child(key).error(unknown_field_message(key, fields))
    for key, parser in fields.items():
        if key in data:
            out[key] = ctx.run(key, parser, data[key])
    return out


def parse_object(data: dict[str, Any], ctx: Ctx, fields: Mapping[str, Parser],
                 required: Iterable[str] = (), owner: str = "this mapping", hint: str = "",
                 unknown: Callable[[str, Ctx], Any] | None = None) -> Any:
    """Parse a mapping with ``parse_fields``, then require the keys in ``required``.

    Nested problems are recorded first; a missing key raises Invalid ("<owner> needs a, b<hint>");
    INVALID comes back when any field failed, else the dict of parsed fields.
    """
    parsed = parse_fields(data, ctx, fields, unknown)
    missing = [key for key in required if key not in data]
    if missing:
        raise Invalid("%s needs %s%s" % (owner, ", ".join(missing), hint))
    if any(v is INVALID for v in parsed.values()):
        return INVALID
    return parsed


def unknown_field_message(key: str, known: Collection[str]) -> str:
    shown = quote(key)
    close = difflib.get_close_matches(key, list(known), n=1, cutoff=0.7)
    if close:
        return "unknown field %s. Did you mean %r?" % (shown, close[0])
    if len(known) <= 12:
        return "unknown field %s. Allowed here: %s." % (shown, ", ".join(sorted(known)))
    return "unknown field %s: dstack has no such field here" % shown
