# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Events as text: one line per event, as ``dstack event`` prints them.

    [2026-11-30 08:14:11] [👤ann] [run train] Run submitted. Status: SUBMITTED

Pure Python, used by the ``gpufleet.cluster.event_info`` module and the ``gpufleet event``
command. Input is the report of tasks/eventlog.py (``{"since", "now", "events",
"unreachable"}``); each event has ``recorded_at``, ``actor``, ``targets`` and ``message``.
Times are UTC (the other tables' times are too); the actor is left out when the system acted.
"""

from __future__ import annotations

import time
from typing import Any, List, Mapping


def event_line(event: Mapping[str, Any]) -> str:
    stamp = time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(float(event.get("at") or 0)))
    parts = ["[%s]" % stamp]
    if event.get("actor"):
        parts.append("[\U0001F464%s]" % event["actor"])
    targets = ", ".join("%s %s" % (t.get("type"), t.get("name"))
                        for t in event.get("targets") or [])
    parts.append("[%s]" % targets)
    parts.append(str(event.get("message") or event.get("kind")))
    return " ".join(parts)


def event_lines(report: Mapping[str, Any]) -> List[str]:
    """One line per event, oldest first."""
    return [event_line(e) for e in report.get("events") or []]
