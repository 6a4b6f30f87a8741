# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The gpufleet.cluster.fleet_report, fleet_failures and fleet_checks filters.

Thin wrappers over plugins/module_utils/fleets/report.py; documented in fleet_report.yml,
fleet_failures.yml and fleet_checks.yml beside this file.
"""

from __future__ import annotations

from ansible.errors import AnsibleFilterError

from ansible_collections.gpufleet.cluster.plugins.module_utils.fleets import report


def fleet_report(record, node_reports, released=None):
    """The fleet record with each instance's status, error and measured resources."""
    if not isinstance(record, dict) or not isinstance(node_reports, dict):
        raise AnsibleFilterError(
            "fleet_report: expects a fleet record and a mapping of instance names to reports"
        )
    return report.fold(record, node_reports, list(released or []))


def fleet_failures(record):
    """``<instance> (<address>): <error>`` for each instance that failed."""
    if not isinstance(record, dict):
        raise AnsibleFilterError("fleet_failures: expects a fleet record")
    return report.failures(record)


def fleet_checks(record):
    """``<instance>: <role>: <summary>`` for each host role's verification."""
    if not isinstance(record, dict):
        raise AnsibleFilterError("fleet_checks: expects a fleet record")
    return report.check_lines(record)


class FilterModule:
    """gpufleet.cluster filters for the end of an apply."""

    def filters(self):
        return {"fleet_report": fleet_report, "fleet_failures": fleet_failures,
                "fleet_checks": fleet_checks}
