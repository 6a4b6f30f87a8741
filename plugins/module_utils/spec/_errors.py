# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Problems found in a configuration, each tied to the field path it concerns.

PRIVATE to gpufleet.cluster: the public surface is the ``spec`` package.
"""

from __future__ import annotations

import json
import re
from typing import Any, Callable, Iterable, Sequence

from ..core.errors import GpufleetError
from ..core.text import LIMIT, quote, shorten

# Errors reported for one file before the rest are summarised in one line.
MAX_PROBLEMS = 100

_PLAIN_KEY = re.compile(r"[A-Za-z_][A-Za-z0-9_-]*")


_OPTION = re.compile(r"--[a-z][a-z-]*")  # a command-line option (spec.overrides)


def format_path(path: Iterable[str | int]) -> str:
    """Render a field path the way users write it: ``ssh_config.hosts[2].port``. A key longer
    than core.text.LIMIT characters is shortened (``tags["aaaa"... (5000 characters)]``)."""
    out = ""
    for part in path:
        if isinstance(part, int):
            out += "[%d]" % part
        elif _PLAIN_KEY.fullmatch(part) or (not out and _OPTION.fullmatch(part)):
            out += ("." if out else "") + shorten(part)
        elif len(part) > LIMIT:
            out += "[%s... (%d characters)]" % (json.dumps(part[:LIMIT]), len(part))
        else:
            out += "[%s]" % json.dumps(part)
    return out


_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


def one_line(text: str) -> str:
    """Escape control characters so that a message always prints as a single line."""
    return _CONTROL.sub(lambda m: json.dumps(m.group())[1:-1], text)


def show(value: object, limit: int = LIMIT) -> str:
    """A short, safe rendering of a user value for an error message."""
    if value is None:
        return "null"
    if value is True:
        return "true"
    if value is False:
        return "false"
    if isinstance(value, str):
        return quote(value, limit)
    if isinstance(value, (int, float)):
        try:
            text = repr(value)
        except ValueError:  # Python refuses to print integers of thousands of digits
            return "an integer of about %d digits" % int(int(value).bit_length() * 0.30103)
        return shorten(text, limit)
    if isinstance(value, list):
        return "a list of %d item%s" % (len(value), "" if len(value) == 1 else "s")
    if isinstance(value, dict):
        return "a mapping with keys %s" % show_keys(value)
    return "a value of type %s" % type(value).__name__


def show_keys(mapping: Sequence[object] | dict[Any, Any], limit: int = 6) -> str:
    keys = [shorten(str(k)) for k in list(mapping)[:limit]]
    more = "" if len(mapping) <= limit else ", ..."
    return "[" + ", ".join(keys) + more + "]"


def describe(value: object) -> str:
    """The YAML kind of a value, for 'expected X, got Y' messages."""
    if value is None:
        return "an empty value (null)"
    if isinstance(value, bool):
        return "a boolean (%s)" % show(value)
    if isinstance(value, int):
        return "an integer (%s)" % show(value)
    if isinstance(value, float):
        return "a number (%s)" % show(value)
    if isinstance(value, str):
        return "a string (%s)" % show(value)
    if isinstance(value, list):
        return show(value)
    if isinstance(value, dict):
        return show(value)
    name = type(value).__name__
    if name in ("date", "datetime"):
        return "a date (%s); quote it to make it a string" % value
    if name == "bytes":
        return "binary data"
    return "a value of type %s" % name


class Problem(object):
    """One thing wrong with a configuration: where, and what."""

    __slots__ = ("path", "message")

    def __init__(self, path, message):
        self.path = tuple(path)
        self.message = one_line(message)

    @property
    def where(self) -> str:
        return format_path(self.path)

    def as_dict(self) -> dict[str, str]:
        return {"path": self.where, "message": self.message}

    def __repr__(self):
        return "Problem(%r, %r)" % (self.where, self.message)

    def __str__(self):
        return "%s: %s" % (self.where, self.message) if self.path else self.message


class SpecError(GpufleetError):
    """The only exception the config model raises for bad input.

    ``problems`` lists every problem found in the file (up to MAX_PROBLEMS, then a summary);
    ``source`` names the file or other origin of the configuration.
    """

    def __init__(self, problems, source=None):
        self.problems = list(problems)
        self.source = source
        super(SpecError, self).__init__(self.render())

    def render(self) -> str:
        prefix = "%s: " % self.source if self.source else ""
        return "\n".join(prefix + str(p) for p in self.problems)

    def as_dicts(self) -> list[dict[str, str]]:
        return [p.as_dict() for p in self.problems]


# Invalid deliberately does not derive from GpufleetError: it is the parsers' way of telling
# Ctx.run "this field is bad", never an error for the user. Ctx.run turns every Invalid into a
# Problem, and the loader reports the problems as one SpecError. Were an Invalid ever to escape
# the package, that would be a bug, so a module should report it as an internal error rather
# than catch it as a GpufleetError with a message that lacks the field's path.
class Invalid(Exception):
    """Raised by a field parser; the caller records it under the field's path.

    ``subpath`` lets a parser point below the field it was given (e.g. an item of a list).
    """

    def __init__(self, message, subpath=()):
        super(Invalid, self).__init__(message)
        self.message = message
        self.subpath = tuple(subpath)


class _InvalidMarker(object):
    """Stands in for a value that failed to parse, so dependent checks are skipped."""

    _instance = None

    def __new__(cls):
        if cls._instance is None:
            cls._instance = super(_InvalidMarker, cls).__new__(cls)
        return cls._instance

    def __repr__(self):
        return "INVALID"

    def __bool__(self):
        return False


INVALID = _InvalidMarker()


class Ctx(object):
    """Where a parser is in the document, and where its problems and warnings go."""

    __slots__ = ("path", "_sink")

    def __init__(self, path=(), sink=None):
        self.path = tuple(path)
        self._sink = sink if sink is not None else _Sink()

    def child(self, key: str | int) -> Ctx:
        return Ctx(self.path + (key,), self._sink)

    def error(self, message: str, subpath: Iterable[str | int] = ()) -> None:
        self._sink.add(Problem(self.path + tuple(subpath), message))

    def warn(self, message: str) -> None:
        self._sink.warnings.append(Problem(self.path, message))

    def run(self, key: str | int | None, parser: Parser, value: Any) -> Any:
        """Parse ``value`` found at ``key`` with ``parser(value, ctx)``.

        Problems are recorded, never raised; INVALID is returned in their place.
        """
        ctx = self.child(key) if key is not None else self
        try:
            return parser(value, ctx)
        except Invalid as exc:
            ctx.error(exc.message, exc.subpath)
            return INVALID

    @property
    def problems(self) -> list[Problem]:
        return self._sink.problems

    @property
    def warnings(self) -> list[Problem]:
        return self._sink.warnings

    @property
    def full(self) -> bool:
        """True once no further problem will be shown: callers may skip building messages."""
        return len(self._sink.problems) >= MAX_PROBLEMS

    def mark(self) -> int:
        """A point to ask ``failed_since`` about: were problems recorded after it?"""
        return len(self._sink.problems) + self._sink.dropped

    def failed_since(self, mark: int) -> bool:
        return len(self._sink.problems) + self._sink.dropped > mark

    def raise_if_failed(self, source: str | None = None) -> None:
        problems = list(self._sink.problems)
        if self._sink.dropped:
            problems.append(
                Problem((), "... and %d more problem(s) not shown" % self._sink.dropped)
            )
        if problems:
            raise SpecError(problems, source)


# A field parser: ``parser(value, ctx)`` gives the parsed value, raises Invalid, or returns
# INVALID after recording problems under ``ctx``.
Parser = Callable[[Any, Ctx], Any]


class _Sink(object):
    __slots__ = ("problems", "warnings", "dropped")

    def __init__(self):
        self.problems = []
        self.warnings = []
        self.dropped = 0

    def add(self, problem):
        if len(self.problems) < MAX_PROBLEMS:
            self.problems.append(problem)
        else:
            self.dropped += 1
