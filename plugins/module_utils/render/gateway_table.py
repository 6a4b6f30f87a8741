# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Gateways as ``dstack gateway list`` prints them: NAME, BACKEND, HOSTNAME, DOMAIN, DEFAULT,
STATUS (``-v``: ERROR too), from the records services.gateways.records makes."""

from __future__ import annotations

from typing import Any

from .fleet_table import FleetTableError, _one_line, _render

COLUMNS = ("NAME", "BACKEND", "HOSTNAME", "DOMAIN", "DEFAULT", "STATUS")
VERBOSE_COLUMNS = COLUMNS + ("ERROR",)


def _text(value):
    return "" if value is None else str(value)


def gateway_table(gateways: list[dict[str, Any]], verbose: bool = False) -> list[str]:
    """The lines of the table; FleetTableError for a record that is not one."""
    rows = []
    for index, gateway in enumerate(gateways if isinstance(gateways, list) else [gateways]):
        if not isinstance(gateway, dict) or not gateway.get("name"):
            raise FleetTableError("gateway %d is not a gateway record with a name: %r"
                                  % (index, gateway))
        backend, region = _text(gateway.get("backend")), gateway.get("region")
        rows.append({
            "NAME": str(gateway["name"]),
            "BACKEND": "%s (%s)" % (backend, region) if region and backend != "local" else backend,
            "HOSTNAME": _text(gateway.get("hostname")),
            "DOMAIN": "*." + gateway["domain"] if gateway.get("domain") else "",
            "DEFAULT": "\u2713" if gateway.get("default") else "",
            "STATUS": _text(gateway.get("status")),
            "ERROR": _one_line(gateway.get("error") or ""),
        })
    return _render(VERBOSE_COLUMNS if verbose else COLUMNS, rows)
