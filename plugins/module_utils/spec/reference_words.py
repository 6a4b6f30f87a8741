# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The descriptions of values that many fields of the configuration reference share (a name,
a duration, tags...), for spec.reference and its parts.

PRIVATE to gpufleet.cluster.
"""

from __future__ import annotations

_NAME = "2 to 41 characters: a lower-case letter, then lower-case letters, digits or `-` (`^[a-z][a-z0-9-]{1,40}$`)"
_DURATION = "a duration (`90s`, `15m`, `2h`, `3d`, `1w`, or seconds)"
_TAGS = (
    "a mapping: keys of 1 to 60 letters, digits, `_` or `-`; string values of up to 256 letters, digits, "
    "spaces and `. : / = _ - + @`"
)
_ENV = "a list of `NAME=value` and `NAME` strings, or a mapping of names to strings or numbers"
_PORT = "a port number, 1 to 65535"
_BOOL = "`true` or `false`"
_STRINGS = "a list of strings"
