# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""What an apply changes: converging a backend fleet's instances to ``nodes``."""

from __future__ import annotations

from typing import Any, Iterable

# Backend states of an instance that can serve again (a stopped node is started, not replaced).
SERVABLE_STATES = ("running", "restarting", "paused", "exited", "stopped")
# ...of which these are started again.
STOPPED_STATES = ("exited", "stopped")


def lowest_unused(used: Iterable[int], count: int) -> list[int]:
    """The ``count`` lowest instance numbers not in ``used`` (dstack numbers new instances so)."""
    taken = set(used)
    found: list[Any] = []
    num = 0
    while len(found) < count:
        if num not in taken:
            found.append(num)
        num += 1
    return found


def plan_backend(nodes: dict[str, Any], existing: list[dict[str, Any]]) -> dict[str, list[int]]:
    """Plan the instances of a backend fleet.

    ``nodes`` is the config's ``{min, target, max}``; ``existing`` is a list of
    ``{"num": int, "state": str}`` as the backend reports them. Existing instances are kept
    (stopped ones started again); instances the backend could not start (``created``, ``dead``)
    are replaced. New instances bring the count up to ``target``; the count never goes below
    ``min``, and only instances above ``max`` are removed, highest numbers first.

    Returns ``{"create": [...], "keep": [...], "start": [...], "remove": [...]}`` of numbers.
    """
    alive = sorted(i["num"] for i in existing if i.get("state") in SERVABLE_STATES)
    broken = sorted(i["num"] for i in existing if i.get("state") not in SERVABLE_STATES)
    stopped = sorted(i["num"] for i in existing if i.get("state") in STOPPED_STATES)
    target = nodes["target"]
    maximum = nodes.get("max")
    remove = list(broken)
    keep = list(alive)
    if maximum is not None and len(keep) > maximum:
        excess = keep[maximum:]
        keep = keep[:maximum]
        remove.extend(excess)
    create = []
    if len(keep) < target:
        create = lowest_unused(keep, target - len(keep))
    return {
        "create": create,
        "keep": keep,
        "start": [n for n in stopped if n in keep],
        "remove": sorted(remove),
    }


def has_changes(plan: dict[str, Any]) -> bool:
    return any(plan.get(key) for key in ("create", "start", "remove", "release"))
