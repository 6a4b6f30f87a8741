# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Fleet, instance, container and group names.

A fleet's name comes from here only (``fleet_name``, with ``name_from_file`` for an unnamed
file): the fleet module, the inventory plugin, the other modules and the ``gpufleet`` command
all call it, so one file is one fleet whichever way it is read (docs/fleets.md, Names)."""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from typing import Any

from ..core.errors import GpufleetError
from .common import NAME_RE

_SUFFIXES = (".dstack.yml", ".dstack.yaml", ".gpufleet.yml", ".gpufleet.yaml", ".yml", ".yaml")
_GROUP_BAD = re.compile(r"[^A-Za-z0-9_]")


class NamingError(GpufleetError):
    """A fleet has no usable name; the message says what to add."""


def name_from_file(path: str) -> str | None:
    """The fleet name derived from a file name: ``gpu-cluster.dstack.yml`` -> ``gpu-cluster``.

    Returns None when the file name does not make a valid dstack name.
    """
    base = os.path.basename(path or "")
    lowered = base.lower()
    for suffix in _SUFFIXES:
        if lowered.endswith(suffix):
            base = base[: -len(suffix)]
            break
    candidate = re.sub(r"[^a-z0-9-]+", "-", base.lower()).strip("-")
    return candidate if NAME_RE.fullmatch(candidate) else None


def fleet_name(config: dict[str, Any], path: str | None = None) -> str:
    """The name of a fleet: ``name`` from the file, else derived from the file name.

    dstack gives an unnamed fleet a random name on each apply; gpufleet has no server to remember
    it, so the name comes from the file and a second apply finds the same fleet.
    """
    name = config.get("name")
    if name:
        return name
    derived = name_from_file(path) if path else None
    if derived:
        return derived
    where = path or "the inline fleet configuration"
    raise NamingError(
        "%s: the fleet has no name, and none can be made from the file name: add "
        "`name: <name>` (lowercase letters, digits and hyphens, starting with a letter, "
        "2 to 41 characters)" % where
    )


def label(config: Mapping[str, Any], path: str | None = None) -> str:
    """What a message calls a configuration of any type: its ``name``, else the name its file
    gives (``fleet_name``'s rule), else the file's own name; "inline config" without a file."""
    if config.get("name"):
        return config["name"]
    if not path:
        return "inline config"
    return name_from_file(path) or os.path.basename(path)


def instance_name(fleet: str, num: int) -> str:
    """dstack's instance name: ``<fleet>-<n>``."""
    return "%s-%d" % (fleet, num)


def group_name(*parts: object) -> str:
    """An Ansible group name: letters, digits and underscores only (``my-fleet`` -> ``my_fleet``)."""
    return _GROUP_BAD.sub("_", "_".join(str(p) for p in parts if p not in (None, "")))
