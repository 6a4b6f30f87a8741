# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Controller-side output of the task runner's action plugins: one line per event."""

from __future__ import annotations

import threading

from ansible.utils.display import Display

from ansible_collections.gpufleet.cluster.plugins.module_utils.tasks import entry

display = Display()


def printer():
    """An ``emit`` callback that shows one line per event, one event at a time (events come
    from several threads: one per node and one per followed log)."""
    lock = threading.Lock()

    def emit(event):
        line = entry.event_line(event)
        if line is not None:
            with lock:
                display.display(line)

    return emit
