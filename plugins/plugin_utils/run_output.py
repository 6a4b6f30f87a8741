# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Controller-side output of the task runner's action plugins: one line per event."""

from __future__ import annotations

import os
import threading

from ansible_collections.gpufleet.cluster.plugins.module_utils.render import run_table
from ansible_collections.gpufleet.cluster.plugins.module_utils.tasks import actions


def event_text(event, source=None):
    """What is shown for a runner event (None: nothing): a ``plan`` event (the task's
    ``show_plan``) is the table ``gpufleet apply`` shows before submitting, for the task file
    ``source``, and a blank line; any other event is tasks.actions.event_line's line."""
    if event.get("kind") == "plan":
        return "\n".join(run_table.run_plan_lines(event["config"], event["plan"], source) + [""])
    if event.get("kind") == "service":   # a service's route is on its proxy (services.submit)
        return "\n".join(run_table.service_lines(event, event.get("model"))) or None
    return actions.event_line(event)


def printer(output_path=None, source=None):
    """An ``emit`` callback that shows one line per event, one event at a time (events come
    from several threads: one per node and one per followed log). With ``output_path`` (a
    file or FIFO), the lines are appended there instead of shown; if it cannot be written
    (its reader went away), they are dropped. Each event is shown as event_text shows it."""
    lock = threading.Lock()
    sink = {"handle": None, "broken": False}

    def write(line):
        if sink["broken"]:
            return
        try:
            if sink["handle"] is None:
                # Not blocking: a FIFO nobody reads any more is an error here, not a hang.
                fd = os.open(output_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NONBLOCK,
                             0o600)
                os.set_blocking(fd, True)
                sink["handle"] = os.fdopen(fd, "ab")
            sink["handle"].write(line.encode("utf-8", "replace") + b"\n")
            sink["handle"].flush()
        except (IOError, OSError):
            sink["broken"] = True

    display = None
    if not output_path:
        from ansible.utils.display import Display

        display = Display()

    def emit(event):
        line = event_text(event, source)
        if line is not None:
            with lock:
                if output_path:
                    write(line)
                else:
                    display.display(line)

    return emit
