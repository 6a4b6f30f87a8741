# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Which events ``gpufleet event`` shows: dstack's filters over the events read.

``--target-fleet``/``--target-run`` (one kind of them at a time): events about those fleets or
runs themselves. ``--within-fleet``/``--within-run`` (one of the two): events about the fleets
and their instances, or the runs and their jobs. ``--include-target-type``: events about one of
those types. Without ``--since``, the last DEFAULT_LIMIT events, as dstack shows.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, Iterable, List, Optional

from ..core.errors import GpufleetError
from ..core.text import shorten
from .records import TargetType, targets_of

DEFAULT_LIMIT = 100


class EventQueryError(GpufleetError):
    """Filters that cannot go together, or a target type gpufleet does not know."""


@dataclass
class Filters:
    target_fleets: List[str] = field(default_factory=list)
    target_runs: List[str] = field(default_factory=list)
    within_fleets: List[str] = field(default_factory=list)
    within_runs: List[str] = field(default_factory=list)
    include_target_types: List[str] = field(default_factory=list)

    @classmethod
    def of(cls, values: Optional[Dict[str, Any]]) -> "Filters":
        """Filters from a mapping of the option names (``target_fleets``...), checked."""
        values = values or {}
        known = set(cls.__dataclass_fields__)
        unknown = sorted(set(k for k, v in values.items() if v) - known)
        if unknown:
            raise EventQueryError("unknown event filter %s; the filters are %s"
                                  % (shorten(unknown[0]), ", ".join(sorted(known))))
        made = cls(**dict((k, [str(x) for x in _listed(values.get(k))]) for k in known))
        made.check()
        return made

    def check(self) -> None:
        if self.target_fleets and self.target_runs:
            raise EventQueryError("--target-fleet and --target-run cannot be given together: "
                                  "give one of them")
        if self.within_fleets and self.within_runs:
            raise EventQueryError("--within-fleet and --within-run cannot be given together: "
                                  "give one of them")
        types = [t.value for t in TargetType]
        for name in self.include_target_types:
            if name not in types:
                raise EventQueryError("--include-target-type %s: gpufleet's events are about "
                                      "%s" % (shorten(name), ", ".join(types)))

    def one_run(self) -> Optional[str]:
        """The one run every shown event is about, when the filters name just one (the hosts
        are then asked for that run's events only)."""
        runs = self.within_runs or self.target_runs
        if len(runs) == 1 and not (self.target_fleets or self.within_fleets):
            return runs[0]
        return None


def _listed(value: Any) -> List[Any]:
    if value is None:
        return []
    if isinstance(value, (list, tuple)):
        return list(value)
    return [value]


def matches(event: Dict[str, Any], filters: Filters) -> bool:
    targets = event.get("targets") or targets_of(event)
    named = set((t["type"], t["name"]) for t in targets)
    if filters.target_fleets and not any((TargetType.FLEET.value, f) in named
                                         for f in filters.target_fleets):
        return False
    if filters.target_runs and not any((TargetType.RUN.value, r) in named
                                       for r in filters.target_runs):
        return False
    if filters.within_fleets:
        fleets = set(filters.within_fleets)
        instance = any(t["type"] == TargetType.INSTANCE for t in targets)
        if not (any((TargetType.FLEET.value, f) in named for f in fleets) or
                (instance and event.get("fleet") in fleets)):
            return False
    if filters.within_runs:
        runs = set(filters.within_runs)
        if not (any((TargetType.RUN.value, r) in named for r in runs) or
                (any(t["type"] == TargetType.JOB for t in targets) and event.get("run") in runs)):
            return False
    if filters.include_target_types and not any(
            t["type"] in filters.include_target_types for t in targets):
        return False
    return True


def select(events: Iterable[Dict[str, Any]], filters: Filters,
           limit: Optional[int] = None) -> List[Dict[str, Any]]:
    """The events that match, oldest first; the last ``limit`` of them when given."""
    found = [e for e in events if matches(e, filters)]
    return found[-limit:] if limit else found
