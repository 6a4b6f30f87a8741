# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Volume records as text: dstack's ``dstack volume list`` table.

Pure Python, used by the ``gpufleet.cluster.volume_info`` module and the ``gpufleet volume``
command. Input is the volume record of volumes/provision.py (``gpufleet_volumes``, with
``attached_fleets`` from volumes/listing.py).

    volume_table(volumes)                 # NAME, BACKEND (backend (region)), STATUS, CREATED
    volume_table(volumes, verbose=True)   # NAME, BACKEND, REGION (region (zone)), STATUS,
                                          # ATTACHED, CREATED, ERROR

Rows keep the records' order (the listing gives them newest first).
"""

from __future__ import annotations

from .fleet_table import FleetTableError, _now, _one_line, _render, pretty_date
import datetime
from typing import Any

COLUMNS = ("NAME", "BACKEND", "STATUS", "CREATED")
VERBOSE_COLUMNS = ("NAME", "BACKEND", "REGION", "STATUS", "ATTACHED", "CREATED", "ERROR")


def _text(value):
    return "" if value is None else str(value)


def _row(volume, now, verbose):
    backend = _text(volume.get("backend"))
    region = _text(volume.get("region"))
    if verbose:
        # BACKEND alone; REGION is the region, with the zone when there is one.
        zone = volume.get("availability_zone")
        if zone:
            region = "%s (%s)" % (region, zone)
    elif region:
        backend = "%s (%s)" % (backend, region)
    fleets = volume.get("attached_fleets") or []
    return {
        "NAME": str(volume["name"]),
        "BACKEND": backend,
        "REGION": region,
        "STATUS": _text(volume.get("status")),
        "ATTACHED": ", ".join(str(f) for f in fleets) or "-",
        "CREATED": pretty_date(volume.get("created"), now),
        "ERROR": _one_line(volume.get("error") or ""),
    }


def volume_table(volumes: list[dict[str, Any]], now: datetime.datetime | None = None,
                 verbose: bool = False) -> list[str]:
    """The volumes as the lines of dstack's ``dstack volume list`` table (``verbose``: ``-v``).

    ``now`` (a datetime or ISO 8601 string, default: the current time) is what CREATED is
    relative to. A record that is not a mapping, or has no name, raises FleetTableError.
    """
    if isinstance(volumes, dict):
        volumes = [volumes]
    if not isinstance(volumes, (list, tuple)):
        raise FleetTableError("expected a list of volume records, got %s: %r"
                              % (type(volumes).__name__, volumes))
    now = _now(now)
    rows = []
    for index, volume in enumerate(volumes):
        if not isinstance(volume, dict) or not volume.get("name"):
            raise FleetTableError("volume %d is not a volume record with a name: %r"
                                  % (index, volume))
        rows.append(_row(volume, now, verbose))
    return _render(VERBOSE_COLUMNS if verbose else COLUMNS, rows)
