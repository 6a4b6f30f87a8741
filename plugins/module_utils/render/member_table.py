# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""A fleet's members as text: the ``gpufleet fleet members`` table.

Input is the rows of teams.members.table_rows (``{user, role, fingerprint, limits, by}``) and
the default limits (``{runs, gpus, nodes}``, None for no limit).

    member_table(rows, default_limits)   # USER, ROLE, FINGERPRINT, LIMITS, GRANTED BY
"""

from __future__ import annotations

from typing import Any, Mapping, Optional

from .fleet_table import _render

COLUMNS = ("USER", "ROLE", "FINGERPRINT", "LIMITS", "GRANTED BY")
LIMIT_FIELDS = ("runs", "gpus", "nodes")


def limits_text(limits: Optional[Mapping[str, Any]]) -> str:
    """``runs=1 gpus=8``: the limits that are set, else ``-``."""
    given = ["%s=%s" % (k, limits[k]) for k in LIMIT_FIELDS
             if limits and limits.get(k) is not None]
    return " ".join(given) or "-"


def member_table(rows: list[dict[str, Any]],
                 default_limits: Optional[Mapping[str, Any]] = None) -> list[str]:
    """The members as table lines, then a line with the default limits when any is set."""
    lines = _render(COLUMNS, [{
        "USER": str(row.get("user") or "-"),
        "ROLE": str(row.get("role") or "-"),
        "FINGERPRINT": str(row.get("fingerprint") or "-"),
        "LIMITS": limits_text(row.get("limits")),
        "GRANTED BY": str(row.get("by") or "-"),
    } for row in rows])
    default = limits_text(default_limits)
    if default != "-":
        lines.append("default limits: %s" % default)
    return lines
