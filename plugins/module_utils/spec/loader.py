# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Turn bytes or text into a normalized configuration, or a SpecError listing every problem.

Whatever the input (not YAML, empty, binary, a list, megabytes of brackets, an alias bomb),
the only exception that leaves this module is SpecError.
"""

from __future__ import annotations

import os
from typing import Any, Collection, NoReturn

from ..core.text import quote, shorten
from ._errors import Ctx, Problem, SpecError, describe, show
from .dev_environment import parse_dev_environment
from .fleet import parse_fleet
from .gateway import host_fleet, parse_gateway
from .support import gateway_refusals
from .service import parse_service
from .task import parse_task
from .volume import parse_volume

try:
    import yaml

    HAS_YAML = True
    _BaseLoader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
except ImportError:  # pragma: no cover - PyYAML ships with ansible-core
    yaml = None  # type: ignore[assignment]
    HAS_YAML = False
    _BaseLoader = object

MAX_BYTES = 4 * 1024 * 1024
MAX_DEPTH = 64
# A document may hold at most this many values (counting what anchors and aliases expand to)
# and characters of text. Every value is at least one parser event, so the event count lets a
# huge document be refused before it is built.
MAX_VALUES = 1000000
MAX_EVENTS = MAX_VALUES
MAX_CHARS = 64 * 1024 * 1024
# Warnings about repeated keys kept per file.
MAX_WARNINGS = 100

PARSERS = {"fleet": parse_fleet, "task": parse_task, "dev-environment": parse_dev_environment,
           "service": parse_service, "volume": parse_volume, "gateway": parse_gateway}
# The configurations that are runs (the task runner runs them all).
RUN_TYPES = ("task", "dev-environment", "service")
NOT_SUPPORTED = {
    "preset": "presets (type: preset) are not supported by gpufleet",
}


class _Loader(_BaseLoader):  # type: ignore[misc,valid-type]
    """A safe loader that also remembers keys given twice in one mapping (the last one wins,
    as in dstack), so they can be reported as warnings."""

    def __init__(self, stream):
        super(_Loader, self).__init__(stream)
        self.duplicate_keys = []
        self.more_duplicates = 0

    def construct_mapping(self, node, deep=False):
        seen = set()
        for key_node, _value in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":
                continue
            key = getattr(key_node, "value", None)
            if isinstance(key, str):
                if key in seen:
                    if len(self.duplicate_keys) >= MAX_WARNINGS:
                        self.more_duplicates += 1
                        continue
                    mark = key_node.start_mark
                    self.duplicate_keys.append((key, mark.line + 1 if mark else None))
                seen.add(key)
        return super(_Loader, self).construct_mapping(node, deep=deep)


def _fail(message: str, source: str | None) -> NoReturn:
    raise SpecError([Problem((), message)], source)


def decode(data: str | bytes, source: str | None = None) -> str:
    """Bytes to text: UTF-8 (a BOM is allowed), no NUL bytes, within MAX_BYTES."""
    if isinstance(data, bytes):
        if len(data) > MAX_BYTES:
            _fail(
                "the file is %.1f MiB; configuration files are limited to %d MiB"
                % (len(data) / 1048576.0, MAX_BYTES // 1048576),
                source,
            )
        if data[:2] in (b"\xff\xfe", b"\xfe\xff"):
            _fail("the file is UTF-16 text; save it as UTF-8", source)
        if b"\x00" in data:
            _fail("the file contains NUL bytes: it looks binary, not a YAML configuration", source)
        try:
            return data.decode("utf-8-sig")
        except UnicodeDecodeError as exc:
            _fail(
                "the file is not UTF-8 text (invalid byte at offset %d); save it as UTF-8"
                % exc.start,
                source,
            )
    if not isinstance(data, str):
        _fail("expected YAML text, got %s" % describe(data), source)
    if len(data) > MAX_BYTES:
        _fail("the configuration is larger than %d MiB" % (MAX_BYTES // 1048576), source)
    if "\x00" in data:
        _fail("the text contains NUL characters: it looks binary, not a YAML configuration", source)
    return data


def load_yaml(text: str | bytes, source: str | None = None) -> tuple[Any, list[Problem]]:
    """Parse YAML text into Python data; returns (data, warnings)."""
    if not HAS_YAML:
        _fail("PyYAML is required to read configuration files; install it (pip install PyYAML)",
              source)
    text = decode(text, source)
    if not text.strip():
        _fail("the file is empty: expected a configuration with type: fleet, task or volume",
              source)
    try:
        _check_events(text, source)
        loader = _Loader(text)
        try:
            data = loader.get_single_data()
        finally:
            loader.dispose()
    except SpecError:
        raise
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        problem = exc.problem or exc.context or "malformed YAML"
        if "nesting depth" in problem:
            # libyaml (PyYAML 6.0.4 and later) stops at its own depth limit while scanning,
            # before the event walk above reaches ours: the same verdict either way.
            _fail(_too_deep(mark), source)
        where = " at line %d, column %d" % (mark.line + 1, mark.column + 1) if mark else ""
        _fail("invalid YAML%s: %s" % (where, problem), source)
    except yaml.YAMLError as exc:
        _fail("invalid YAML: %s" % str(exc).splitlines()[0], source)
    except RecursionError:
        _fail("the YAML is nested too deeply", source)
    except (ValueError, TypeError, OverflowError) as exc:
        # Constructor corner cases (an impossible date such as 2024-02-30, an integer of
        # thousands of digits) surface as plain exceptions.
        _fail("invalid YAML value: %s (quote the value to keep it as text)"
              % shorten(str(exc), 200), source)
    warnings = [
        Problem((), "the key %s is given twice in one mapping%s; the last one is used"
                % (quote(key), "" if line is None else " (again at line %d)" % line))
        for key, line in loader.duplicate_keys
    ]
    if loader.more_duplicates:
        warnings.append(Problem((), "... and %d more repeated keys" % loader.more_duplicates))
    _check_size(data, source)
    return data, warnings


def _too_deep(mark):
    return ("the YAML is nested more than %d levels deep (at line %d); a configuration never "
            "needs that" % (MAX_DEPTH, mark.line + 1 if mark else 0))


def _check_events(text, source):
    """Walk the YAML event stream first, stopping early on absurd nesting or size.

    PyYAML's cost grows with the square of the nesting depth, so a file of a million brackets
    would take hours to construct; counting events lets us refuse it after a few hundred.
    """
    depth = 0
    events = 0
    for event in yaml.parse(text, Loader=_BaseLoader):
        events += 1
        if isinstance(event, (yaml.MappingStartEvent, yaml.SequenceStartEvent)):
            depth += 1
            if depth > MAX_DEPTH:
                _fail(_too_deep(event.start_mark), source)
        elif isinstance(event, (yaml.MappingEndEvent, yaml.SequenceEndEvent)):
            depth -= 1
        elif isinstance(event, yaml.DocumentStartEvent) and events > 2:
            _fail("the file holds more than one YAML document; put one configuration per file",
                  source)
        if events > MAX_EVENTS:
            _fail("the YAML has more than %d values; a configuration never needs that"
                  % MAX_VALUES, source)


def _check_size(data, source):
    """Refuse documents whose aliases expand to an enormous structure."""
    values = 0
    chars = 0
    stack = [data]
    while stack:
        item = stack.pop()
        values += 1
        if isinstance(item, str):
            chars += len(item)
        elif isinstance(item, dict):
            stack.extend(item.keys())
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
        if values > MAX_VALUES or chars > MAX_CHARS:
            _fail("the document holds more than %d values or %d MiB of text once YAML anchors "
                  "and aliases are expanded" % (MAX_VALUES, MAX_CHARS // 1048576), source)


def parse_data(data: object, source: str | None = None,
               expect: str | Collection[str] | None = None) -> tuple[dict[str, Any], list[Problem]]:
    """Validate and normalize already-loaded data (a dict from YAML, JSON or Ansible).

    ``expect`` restricts the accepted ``type`` (``"fleet"``, ``"task"``, ``"volume"`` or a tuple).
    Returns ``(config, warnings)``; raises SpecError with every problem found.
    """
    ctx = Ctx()
    if not isinstance(data, dict):
        _fail(
            "expected a mapping at the top level (type: fleet, task or volume and its fields), "
            "got %s" % describe(data),
            source,
        )
    for key in data:
        if not isinstance(key, str):
            _fail("top-level keys must be strings, got the key %s" % show(key), source)
    _check_size(data, source)
    kind = data.get("type")
    if "type" not in data:
        _fail("missing type: set type: fleet, type: task or type: volume", source)
    if not isinstance(kind, str):
        raise SpecError(
            [Problem(("type",), "expected fleet, task or volume, got %s" % describe(kind))], source
        )
    if kind in NOT_SUPPORTED:
        raise SpecError([Problem(("type",), NOT_SUPPORTED[kind])], source)
    if kind not in PARSERS:
        raise SpecError(
            [Problem(("type",), "unknown configuration type %s: expected fleet, task, "
                     "dev-environment, service or volume" % describe(kind))],
            source,
        )
    wanted = (expect,) if isinstance(expect, str) else expect
    if wanted and kind not in wanted:
        raise SpecError(
            [Problem(("type",), "expected a %s configuration here, got type: %s"
                     % (" or ".join(wanted), kind))],
            source,
        )
    config = PARSERS[kind](data, ctx)
    ctx.raise_if_failed(source)
    return config, list(ctx.warnings)


def parse_text(text: str | bytes, source: str | None = None,
               expect: str | Collection[str] | None = None) -> tuple[dict[str, Any], list[Problem]]:
    """Parse YAML text or bytes; returns ``(config, warnings)`` or raises SpecError."""
    data, yaml_warnings = load_yaml(text, source)
    if data is None and not _has_content(decode(text, source)):
        _fail("the file has no content, only comments or blank lines: expected a configuration "
              "with type: fleet, task or volume", source)
    config, warnings = parse_data(data, source, expect)
    return config, yaml_warnings + warnings


def _has_content(text):
    for line in text.splitlines():
        line = line.strip()
        if line and not line.startswith("#") and line not in ("---", "..."):
            return True
    return False


def parse_file(path: str,
               expect: str | Collection[str] | None = None) -> tuple[dict[str, Any], list[Problem]]:
    """Read and parse a configuration file; returns ``(config, warnings)``."""
    try:
        with open(path, "rb") as handle:
            size = os.fstat(handle.fileno()).st_size
            if size > MAX_BYTES:
                _fail(
                    "the file is %.1f MiB; configuration files are limited to %d MiB"
                    % (size / 1048576.0, MAX_BYTES // 1048576),
                    path,
                )
            data = handle.read(MAX_BYTES + 1)
    except IsADirectoryError:
        _fail("is a directory, not a configuration file", path)
    except FileNotFoundError:
        _fail("no such file", path)
    except PermissionError:
        _fail("permission denied: cannot read the file", path)
    except OSError as exc:
        _fail("cannot read the file: %s" % (exc.strerror or exc), path)
    return parse_text(data, path, expect)


# The configurations that describe hosts: a fleet, and a gateway (its host is a one-node fleet).
HOST_TYPES = ("fleet", "gateway")


def parse_hosts_file(path: str) -> tuple[dict[str, Any], list[Problem]]:
    """A fleet file, or a gateway file read as its host's fleet (spec.gateway.host_fleet,
    with ``gateway``): ``(fleet config, warnings)``; what reads fleet files reads with this.
    A gateway this version does not make (spec.support) is a SpecError here, as validate
    says."""
    config, warnings = parse_file(path, HOST_TYPES)
    return _host_fleet(config, path), warnings


def parse_hosts_data(data: object, source: str | None = None
                     ) -> tuple[dict[str, Any], list[Problem]]:
    """``parse_hosts_file`` of data already loaded."""
    config, warnings = parse_data(data, source, HOST_TYPES)
    return _host_fleet(config, source), warnings


def _host_fleet(config, source):
    refused = gateway_refusals(config) if config.get("type") == "gateway" else []
    if refused:
        raise SpecError(refused, source)
    return host_fleet(config, source)
