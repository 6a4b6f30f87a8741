# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""What an instance made because a run needed it carries on itself: the run's name and the
idle limit it was made with (fleets/idle.py). Each backend keeps the two values its own way (a
container label, an EC2 tag, Compute Engine metadata); this says what the values are.

``made_for`` is ``{"run": name, "idle_duration": seconds or "off"}`` (None: an instance of the
fleet's own). Pure Python.
"""

from __future__ import annotations

from typing import Any

OFF = "off"


def values(made_for: dict[str, Any] | None) -> tuple[str, str] | None:
    """``(run, limit text)`` to store, or None for an instance of the fleet's own."""
    if not made_for or not made_for.get("run"):
        return None
    limit = made_for.get("idle_duration")
    if limit is None:
        text = ""
    elif limit == OFF:
        text = OFF
    else:
        text = str(int(limit))
    return str(made_for["run"]), text


def read(run, text):
    """The instance record's ``made_for_run`` and ``idle_duration`` from the stored values
    (either may be missing: then the fleet's own limit applies)."""
    limit = None
    if text == OFF:
        limit = OFF
    elif text:
        try:
            limit = int(text)
        except (TypeError, ValueError):
            limit = None
        if limit is not None and limit < 0:
            limit = OFF
    return {"made_for_run": run or None, "idle_duration": limit if run else None}
