# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The gpufleet.cluster.fleet_table and gpufleet.cluster.fleet_plan filters.

Thin wrappers over plugins/module_utils/render/fleet_table.py; their documentation is in the sidecar
files fleet_table.yml and fleet_plan.yml beside this one (one file holds both filters).
"""

from __future__ import annotations

from ansible.errors import AnsibleFilterError
from ansible.module_utils.common.text.converters import to_native
from ansible.module_utils.parsing.convert_bool import boolean
from ansible_collections.gpufleet.cluster.plugins.module_utils.render import fleet_table as fleettable


def _verbose(value):
    try:
        return boolean(value, strict=True)
    except TypeError as exc:
        raise AnsibleFilterError(
            "fleet_table: verbose must be true or false, got %r" % (value,)
        ) from exc


def fleet_table(fleets, verbose=False, now=None):
    """The lines of the fleet table (see fleet_table.yml)."""
    try:
        return fleettable.fleet_table(fleets, now=now, verbose=_verbose(verbose))
    except fleettable.FleetTableError as exc:
        raise AnsibleFilterError("fleet_table: %s" % to_native(exc)) from exc


def fleet_plan(fleet):
    """The lines of one fleet's apply plan (see fleet_plan.yml)."""
    try:
        return fleettable.plan_lines(fleet)
    except fleettable.FleetTableError as exc:
        raise AnsibleFilterError("fleet_plan: %s" % to_native(exc)) from exc


class FilterModule:
    """gpufleet.cluster fleet filters."""

    def filters(self):
        return {
            "fleet_table": fleet_table,
            "fleet_plan": fleet_plan,
        }
