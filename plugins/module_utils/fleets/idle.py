# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""How long an idle instance of a backend fleet is kept, as dstack decides it
(docs/reference/dstack-runtime.md#idle-instances).

Both files may leave ``idle_duration`` unset (None in the normalized config), and that is not
the same as writing the default:

- an instance the fleet's own apply makes keeps the fleet's ``idle_duration``, else 3d;
- an instance made because a run needed it (tasks.growth) keeps the shorter of the fleet's and
  the run's; when one of them is ``off`` the other wins, when neither is set it is 5m;
- an instance keeps the limit it was made with: a later run on it does not change it.

The limit of an instance made for a run travels with the instance (a container label, an EC2
tag, Compute Engine metadata: backends/made_for.py), so reconcile needs neither file of the run.
Pure Python.
"""

from __future__ import annotations

from ..core.errors import GpufleetError
from ..spec import grammar
from ..spec.fleet import DEFAULT_FLEET_IDLE_DURATION
from ..spec.task import DEFAULT_RUN_IDLE_DURATION
from .types import InstanceRecord

OFF = "off"


class IdleError(GpufleetError):
    """A ``made_for`` whose idle limit is not a duration."""


def of_fleet(fleet_idle: int | str | None) -> int | str:
    """The limit of the instances a fleet's own apply makes."""
    return DEFAULT_FLEET_IDLE_DURATION if fleet_idle is None else fleet_idle


def for_run(fleet_idle: int | str | None, run_idle: int | str | None) -> int | str:
    """The limit of an instance made for a run: seconds, or ``off``."""
    given = [value for value in (fleet_idle, run_idle) if value is not None]
    if not given:
        return DEFAULT_RUN_IDLE_DURATION
    numbers = [value for value in given if value != OFF]
    return min(numbers) if numbers else OFF


def made_for(option, fleet_config):
    """The fleet module's ``made_for`` (``{"run", "idle_duration"}``, or None) with its limit
    settled: the one given (a duration as dstack writes it, or ``off``), else the fleet's when
    its file sets one, else the run default. None stays None."""
    if not option:
        return None
    value = option.get("idle_duration")
    limit = None
    if value is not None and value != "":
        try:
            limit = grammar.idle_duration(None)(value, None)
        except grammar.Invalid as exc:
            raise IdleError("made_for.idle_duration: %s (give seconds, a duration such as "
                            "10m, or off)" % exc) from exc
    if limit is None:
        limit = for_run((fleet_config or {}).get("idle_duration"), None)
    return {"run": option["run"], "idle_duration": limit}


def own_limit_of(instance: InstanceRecord) -> str | None:
    """The run whose limit ``instance`` (an instance record) keeps, or None: the fleet's
    applies."""
    run = instance.get("made_for_run")
    return run if run and instance.get("idle_duration") is not None else None


def of_instance(instance: InstanceRecord, fleet_idle: int | str | None) -> int | str | None:
    """The limit that applies to ``instance`` of a fleet whose file says ``fleet_idle``: the
    one it was made with for a run, else the fleet's."""
    if own_limit_of(instance):
        return instance["idle_duration"]
    return of_fleet(fleet_idle)


def span(seconds: int | str) -> str:
    """``3d2h``, ``5m30s``, ``45s``: the two largest units that are not zero; ``off`` as is."""
    if seconds == OFF:
        return OFF
    days, rest = divmod(int(seconds), 86400)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    parts = [(v, u) for v, u in ((days, "d"), (hours, "h"), (minutes, "m"), (secs, "s")) if v]
    return "".join("%d%s" % part for part in parts[:2]) or "0s"
