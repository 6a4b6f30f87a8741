# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""``env`` as dstack accepts it: a list of ``NAME=value`` / ``NAME`` strings, or a mapping.

The normalized form is a mapping. A name given without a value (``- HF_TOKEN``) maps to None:
its value is taken from the environment of whoever submits the run, as ``dstack apply`` does.
"""

from __future__ import annotations

import re
from typing import Any

from ..core.text import shorten
from ._errors import Ctx, Invalid, describe, show
from ._types import check_magnitude, want_list, want_mapping

_ENTRY = re.compile(r"^([a-zA-Z_][a-zA-Z0-9_]*)(=.*)?$")
_NAME = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]*")


def parse_env(value: object, ctx: Ctx) -> dict[str, Any]:
    if value is None:
        return {}
    if isinstance(value, list):
        return _from_list(value)
    if isinstance(value, dict):
        return _from_mapping(want_mapping(value))
    raise Invalid(
        "expected a mapping (NAME: value) or a list of NAME=value strings, got %s" % describe(value)
    )


def _from_list(items):
    out = {}
    for index, item in enumerate(want_list(items)):
        if not isinstance(item, str):
            raise Invalid("expected a NAME=value string, got %s" % describe(item), (index,))
        match = _ENTRY.match(item)
        name, equals, text = item.partition("=")
        if equals and "\n" in text and _NAME.fullmatch(name):
            # dstack's NAME=value entries hold one line; the name is good, the value is not.
            raise Invalid(
                "the value of %s contains a newline, which a NAME=value entry cannot hold: "
                "write env as a mapping (%s: value) to give a value of several lines, or "
                "remove the newline" % (shorten(name), shorten(name)),
                (index,),
            )
        if not match or "\n" in item:
            raise Invalid(
                "invalid entry %s: write NAME=value or NAME, where NAME starts with a letter or "
                "_ and has only letters, digits and _" % show(item),
                (index,),
            )
        name = match.group(1)
        if name in out:
            raise Invalid("duplicate environment variable: %s" % shorten(name), (index,))
        out[name] = match.group(2)[1:] if match.group(2) is not None else None
    return out


def _from_mapping(mapping):
    out = {}
    for name, value in mapping.items():
        if not name or "=" in name or "\x00" in name:
            raise Invalid("invalid variable name %s" % show(name), (name,))
        if isinstance(value, bool):
            raise Invalid(
                "the value of %s is a boolean; quote it (%s: \"%s\") to pass it as text"
                % (shorten(name), shorten(name), "true" if value else "false"),
                (name,),
            )
        if isinstance(value, (int, float)):
            try:
                out[name] = str(check_magnitude(value))
            except Invalid as exc:
                raise Invalid(exc.message, (name,)) from exc
        elif isinstance(value, str):
            out[name] = value
        else:
            raise Invalid(
                "the value of %s must be text or a number, got %s"
                % (shorten(name), describe(value)),
                (name,),
            )
    return out
