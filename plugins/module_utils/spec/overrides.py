# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""What ``dstack apply`` lets the command line change in a task: ``--env NAME[=VALUE]``
(repeatable, wins over the file's ``env``), ``--name NAME`` and ``--fleet NAME`` (repeatable,
replaces the file's ``fleets``); and for a dev environment whose file sets no ``version``, the
version of the IDE on the submitter's machine (``ide_version``: dstack's CLI reads it from
``code --version`` and the like, as gpufleet's does with tasks/local_ide.py).

dstack sets these on the parsed configuration; so does ``apply_overrides``, checking each value
with the same field parser the file's own value goes through, so a bad ``--name`` gets the
message a bad ``name:`` gets. The CLI, ``playbooks/task.yml`` (``gpufleet_task_env``,
``gpufleet_task_name``, ``gpufleet_task_fleets``), the task module and ``gpufleet.api`` all call
this one function.
"""

from __future__ import annotations

import re
from typing import Any, Iterable, Mapping, NoReturn

from ._errors import INVALID, Ctx, Invalid, Problem, SpecError, describe, show
from ._types import want_str
from .common import parse_name
from .dev_environment import check_version
from .run_profile import parse_fleets
from .task import parse_env_with_refs

OVERRIDABLE = ("task", "dev-environment", "service")


def _env_entries(value):
    """``--env`` values as the list form of ``env`` (``NAME=value`` or ``NAME``).

    A mapping is accepted too (the API and extra vars); a None value there means "take it from
    the environment of whoever submits", as a bare ``NAME`` does.
    """
    if isinstance(value, dict):
        entries = []
        for name, item in value.items():
            if item is None:
                entries.append(name if isinstance(name, str) else repr(name))
            elif isinstance(item, (str, int, float)) and not isinstance(item, bool):
                entries.append("%s=%s" % (name, item))
            else:
                raise Invalid("the value of %s must be text or a number, got %s"
                              % (name, describe(item)), (name,))
        return entries
    if isinstance(value, str):
        return [value]
    if isinstance(value, (list, tuple)):
        return list(value)
    raise Invalid("expected NAME=value strings (a list) or a mapping of names to values, got %s"
                  % describe(value))


def _ide_version(config, value):
    """``version`` for a dev environment whose file sets none: ``value`` checked as the file's
    ``version`` is (windsurf's ``version@commit``)."""
    if config.get("type") != "dev-environment":
        raise Invalid("the IDE version is for dev environments; this is a %s"
                      % config.get("type"))
    version = want_str(value, "the IDE's version as text")
    if config.get("version") is not None:
        return config["version"]  # the file's own version wins, as in dstack
    if config.get("ide") is None:
        raise Invalid("the dev environment sets no ide, so an IDE version means nothing; set "
                      "ide (vscode, cursor, windsurf, zed) or leave the IDE version out")
    return check_version(config["ide"], version)


def apply_overrides(config: dict[str, Any], env: Iterable[str] | Mapping[str, Any] | None = None,
                    name: str | None = None, fleets: Iterable[str] | None = None,
                    source: str | None = None, ide_version: str | None = None) -> dict[str, Any]:
    """``config`` (a normalized task or dev environment) with the command line's values
    applied.

    ``env``: ``NAME=value`` / ``NAME`` strings, or a mapping; ``name``: the run name; ``fleets``:
    fleet names or ``project/name``; ``ide_version``: a dev environment's ``version`` when its
    file sets none. Empty values change nothing. Raises SpecError (fields ``--env``,
    ``--name``, ``--fleet``, ``ide_version``) naming ``source``.
    """
    if not env and not name and not fleets and not ide_version:
        return config
    if config.get("type") not in OVERRIDABLE:
        raise SpecError([Problem(("type",), "--env, --name and --fleet apply to tasks; this is "
                                            "a %s configuration" % config.get("type"))], source)
    ctx = Ctx()
    out = dict(config)
    if env:
        entries = ctx.run("--env", lambda v, c: _env_entries(v), env)
        if entries is not INVALID:
            parsed = ctx.run("--env", parse_env_with_refs, entries)
            if parsed is not INVALID:
                merged = dict(config.get("env") or {})
                merged.update(parsed)
                out["env"] = merged
    if name:
        parsed = ctx.run("--name", parse_name, name)
        if parsed is not INVALID:
            out["name"] = parsed
    if fleets:
        parsed = ctx.run("--fleet", parse_fleets,
                         [fleets] if isinstance(fleets, str) else list(fleets))
        if parsed is not INVALID:
            out["fleets"] = parsed
    if ide_version:
        parsed = ctx.run("ide_version", lambda v, c: _ide_version(config, v), ide_version)
        if parsed is not INVALID:
            out["version"] = parsed
    ctx.raise_if_failed(source)
    return out


MAX_ARRAY_RUNS = 1000
_ARRAY_ITEM = re.compile(r"^(\d+)(?:-(\d+)(?::(\d+))?)?$")


def parse_array(text: str, source: str | None = None) -> dict[str, Any]:
    """A job array as Slurm writes it: ``1-100``, ``1,3,8-10``, ``0-15:4``, each optionally
    followed by ``%N`` (at most N runs at a time). Returns ``{"indices", "limit", "text"}``
    (indices sorted, each once; limit None without ``%N``); SpecError on ``--array``."""
    def fail(message: str) -> NoReturn:
        raise SpecError([Problem(("--array",), "%s %s: %s" % (
            "invalid array", show(text), message))], source)

    if not isinstance(text, str) or not text.strip():
        fail("write indices as Slurm does, e.g. 1-100, 1,3,5-7, 0-15:4, with %N for at most N "
             "at a time")
    spec, _sep, limit_text = text.strip().partition("%")
    limit = None
    if _sep:
        if not limit_text.isdigit() or int(limit_text) < 1:
            fail("%N must be a whole number of runs at a time, 1 or more")
        limit = int(limit_text)
    indices: set[int] = set()
    for item in spec.split(","):
        match = _ARRAY_ITEM.match(item.strip())
        if not match:
            fail("%s is not an index, A-B or A-B:STEP" % show(item))
        first = int(match.group(1))
        last = int(match.group(2)) if match.group(2) is not None else first
        step = int(match.group(3)) if match.group(3) is not None else 1
        if last < first or step < 1:
            fail("%s: a range goes up, with a step of 1 or more" % show(item))
        if (last - first) // step + 1 + len(indices) > MAX_ARRAY_RUNS:
            fail("more than %d runs; split the array" % MAX_ARRAY_RUNS)
        indices.update(range(first, last + 1, step))
    return {"indices": sorted(indices), "limit": limit, "text": text.strip()}
