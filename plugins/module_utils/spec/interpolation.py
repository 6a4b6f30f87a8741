# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""``${{ namespace.name }}`` references, with ``$$`` as the escape for a literal ``$``.

The config model only checks references (well formed, in a namespace the field allows); the
values are filled later, where dstack fills them: ``secrets`` and ``env`` when a run is
submitted, ``run.args`` from the command line, ``dstack.node_rank`` per node.
"""

from __future__ import annotations

import re
import string
from typing import Any, Collection, Iterator, Mapping

from ..core.errors import GpufleetError
from ..core.text import shorten

OPENING = "${{"
CLOSING = "}}"
_FIRST = set(string.ascii_letters + "_")
_CHARS = _FIRST | set(string.digits + ".")
# groups[i].nodes[j].IP_ADDRESS, filled once the referenced node has an address.
GROUPS_IP_REF = re.compile(r"groups\[(0|[1-9][0-9]*)\]\.nodes\[(0|[1-9][0-9]*)\]\.IP_ADDRESS")


class InterpolationError(GpufleetError, ValueError):
    """A reference is malformed, unknown or unfilled. Never carries a variable's value."""


def valid_name(name: str) -> bool:
    """``ns.name``: exactly one dot, each side starting with a letter or underscore."""
    if name.count(".") != 1:
        return False
    dot = name.index(".")
    if not 0 < dot < len(name) - 1:
        return False
    if name[0] not in _FIRST or name[dot + 1] not in _FIRST:
        return False
    return all(c in _CHARS for c in name)


def namespace_of(name: str) -> str:
    return name.split(".")[0].split("[")[0]


def references(text: str) -> Iterator[str]:
    """Yield every reference name in ``text``, in order; raise on a malformed one."""
    for kind, piece in _scan(text):
        if kind == "ref":
            yield piece


def _scan(text):
    """Split ``text`` into ('text', literal) and ('ref', name) pieces."""
    start = 0
    length = len(text)
    while start < length:
        dollar = text.find("$", start)
        if dollar == -1 or dollar == length - 1:
            yield "text", text[start:]
            return
        if text[dollar + 1] == "$":
            yield "text", text[start:dollar + 1]
            start = dollar + 2
            continue
        # As in dstack: after a lone "$", everything up to the next "${{" is literal text,
        # including any "$$" in that stretch.
        opening = text.find(OPENING, start)
        if opening == -1:
            yield "text", text[start:]
            return
        yield "text", text[start:opening]
        closing = text.find(CLOSING, opening)
        if closing == -1:
            raise InterpolationError("no closing }} for %s" % shorten(text[opening:], 40))
        yield "ref", text[opening + len(OPENING):closing].strip()
        start = closing + len(CLOSING)


def check(text: str, allowed: Mapping[str, Collection[str] | None], groups: bool = False) -> None:
    """Raise InterpolationError unless every reference in ``text`` is well formed and allowed.

    ``allowed`` maps a namespace to the names it admits (None: any name).
    """
    for name in references(text):
        if groups and namespace_of(name) == "groups":
            if not GROUPS_IP_REF.fullmatch(name):
                raise InterpolationError(
                    "illegal reference ${{ %s }}: write ${{ groups[i].nodes[j].IP_ADDRESS }}"
                    % shorten(name)
                )
            continue
        if not valid_name(name):
            raise InterpolationError("illegal reference name ${{ %s }}" % shorten(name))
        namespace, _dot, key = name.partition(".")
        if namespace not in allowed:
            raise InterpolationError(
                "unknown reference ${{ %s }}: here only %s can be used"
                % (shorten(name), _describe_allowed(allowed))
            )
        names = allowed[namespace]
        if names is not None and key not in names:
            raise InterpolationError(
                "unknown reference ${{ %s }}: here only %s can be used"
                % (shorten(name), _describe_allowed(allowed))
            )


def _describe_allowed(allowed):
    parts = []
    for namespace in sorted(allowed):
        names = allowed[namespace]
        if names is None:
            parts.append("${{ %s.NAME }}" % namespace)
        else:
            parts.extend("${{ %s.%s }}" % (namespace, n) for n in sorted(names))
    return ", ".join(parts)


def interpolate(text: str, values: Mapping[str, Mapping[str, Any]],
                keep: Collection[str] = ()) -> str:
    """Fill references from ``values`` (``{"secrets": {...}, "run": {...}}``).

    References in a namespace listed in ``keep`` are left as written, for a later stage; ``$$``
    becomes ``$``. A missing value raises InterpolationError naming it (never its value).
    """
    out = []
    missing = []
    for kind, piece in _scan(text):
        if kind == "text":
            out.append(piece)
            continue
        namespace = namespace_of(piece)
        if namespace in keep:
            out.append("%s %s %s" % (OPENING, piece, CLOSING))
            continue
        if not valid_name(piece):
            raise InterpolationError("illegal reference name ${{ %s }}" % shorten(piece))
        namespace, _dot, key = piece.partition(".")
        scope = values.get(namespace)
        if scope is None or key not in scope:
            missing.append(piece)
            continue
        out.append(str(scope[key]))
    if missing:
        raise InterpolationError("missing values for: %s" % ", ".join(shorten(m) for m in missing))
    return "".join(out)
