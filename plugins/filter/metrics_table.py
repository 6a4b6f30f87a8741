# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The gpufleet.cluster.metrics_table filter.

A thin wrapper over plugins/module_utils/render/metrics_table.py; documented in
metrics_table.yml beside this file.
"""

from __future__ import annotations

from ansible.errors import AnsibleFilterError

from ansible_collections.gpufleet.cluster.plugins.module_utils.render import metrics_table as render


def metrics_table(record, columns=100):
    """The lines of ``gpufleet metrics`` (see metrics_table.yml)."""
    if not isinstance(record, dict) or not isinstance(record.get("jobs"), list):
        raise AnsibleFilterError("metrics_table: expects the metrics of a run, as "
                                 "gpufleet.cluster.run_metrics returns them")
    if not isinstance(columns, int) or isinstance(columns, bool) or columns < 1:
        raise AnsibleFilterError("metrics_table: columns is a width in characters, got %r"
                                 % (columns,))
    return render.metrics_lines(record, columns=columns)


class FilterModule:
    """gpufleet.cluster metrics filter."""

    def filters(self):
        return {"metrics_table": metrics_table}
