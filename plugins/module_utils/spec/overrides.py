# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""What ``dstack apply`` lets the command line change in a task: ``--env NAME[=VALUE]``
(repeatable, wins over the file's ``env``), ``--name NAME`` and ``--fleet NAME`` (repeatable,
replaces the file's ``fleets``).

dstack sets these on the parsed configuration; so does ``apply_overrides``, checking each value
with the same field parser the file's own value goes through, so a bad ``--name`` gets the
message a bad ``name:`` gets. The CLI, ``playbooks/task.yml`` (``gpufleet_task_env``,
``gpufleet_task_name``, ``gpufleet_task_fleets``), the task module and ``gpufleet.api`` all call
this one function.
"""

from __future__ import annotations

from ._errors import INVALID, Ctx, Invalid, Problem, SpecError, describe
from .common import parse_name
from .run_profile import parse_fleets
from .task import parse_env_with_refs

OVERRIDABLE = ("task",)


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


def apply_overrides(config, env=None, name=None, fleets=None, source=None):
    """``config`` (a normalized task) with the command line's values applied.

    ``env``: ``NAME=value`` / ``NAME`` strings, or a mapping; ``name``: the run name; ``fleets``:
    fleet names or ``project/name``. Empty values change nothing. Raises SpecError (fields
    ``--env``, ``--name``, ``--fleet``) naming ``source``.
    """
    if not env and not name and not fleets:
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
    ctx.raise_if_failed(source)
    return out
