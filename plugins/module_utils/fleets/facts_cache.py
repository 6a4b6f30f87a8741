# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The controller's cache of a fleet's host facts (``fleets/<name>/facts.json`` in the state
dir): what gpufleet.cluster.fleet_facts_cache writes at the end of an apply, and the inventory
plugin and task placement read."""

from __future__ import annotations

from typing import Any

from .types import FleetRecord
from ..core.module import state_options
from . import records, state

# The fleet_facts_cache options (its action plugin and its module's documentation).
FACTS_CACHE_ARGS = dict(fleet=dict(type="dict", required=True), **state_options())


def cache_facts(fleet: FleetRecord, root: str,
                check_mode: bool = False) -> tuple[bool, str, dict[str, Any]]:
    """Write the cache for a fleet record; returns (changed, path, facts)."""
    name = fleet.get("name")
    if not name or not isinstance(name, str):
        raise state.StateError("fleet: the fleet record has no name")
    facts = records.ready_facts(fleet)
    changed = state.write_facts(root, name, facts, check_mode=check_mode)
    return changed, state.facts_path(root, name), facts
