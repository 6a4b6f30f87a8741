# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The gpufleet.cluster.run_table and gpufleet.cluster.run_job_lines filters.

Thin wrappers over plugins/module_utils/render/run_table.py; their documentation is in the sidecar files
run_table.yml and run_job_lines.yml beside this one.
"""

from __future__ import annotations

from ansible.errors import AnsibleFilterError
from ansible.module_utils.common.text.converters import to_native
from ansible.module_utils.parsing.convert_bool import boolean
from ansible_collections.gpufleet.cluster.plugins.module_utils.render import fleet_table as fleettable, run_table as runtable


def run_table(runs, verbose=False, now=None):
    """The lines of the runs table (see run_table.yml)."""
    try:
        return runtable.run_table(runs, now=now, verbose=boolean(verbose, strict=True))
    except TypeError as exc:
        raise AnsibleFilterError("run_table: verbose must be true or false, got %r"
                                 % (verbose,)) from exc
    except fleettable.FleetTableError as exc:
        raise AnsibleFilterError("run_table: %s" % to_native(exc)) from exc


def run_job_lines(jobs, run=None):
    """One line per job of a run (see run_job_lines.yml)."""
    if not isinstance(jobs, (list, tuple)):
        raise AnsibleFilterError("run_job_lines: expected the jobs list of a run result, got %s"
                                 % type(jobs).__name__)
    return runtable.job_lines(jobs, run)


class FilterModule:
    """gpufleet.cluster run filters."""

    def filters(self):
        return {"run_table": run_table, "run_job_lines": run_job_lines}
