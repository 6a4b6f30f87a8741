# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Timestamps as Docker, EC2 and Compute Engine write them, read into aware datetimes."""

from __future__ import annotations

import datetime
import re

_FRACTION = re.compile(r"(\.\d{6})\d+")


def parse_time(value: str | datetime.datetime | None) -> datetime.datetime | None:
    """An aware datetime from an ISO 8601 string (``Z`` allowed; Docker's nanoseconds cut to the
    microseconds Python takes) or a datetime; None when unset, unreadable, or Docker's year 1
    (what it writes for a container that never finished)."""
    if value is None or value == "":
        return None
    if isinstance(value, datetime.datetime):
        moment = value
    else:
        text = _FRACTION.sub(r"\1", str(value).strip())
        if text.endswith(("Z", "z")):
            text = text[:-1] + "+00:00"
        try:
            moment = datetime.datetime.fromisoformat(text)
        except ValueError:
            return None
    if moment.year == 1:
        return None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=datetime.timezone.utc)
    return moment
