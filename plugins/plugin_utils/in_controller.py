# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""When an action plugin may do its module's work in its own process instead of sending the
module: only where the module would have run on the controller, as the same user, with the
same Python and the same environment. Then nothing but the module payload (a few tenths of a
second on every call) is saved; anywhere else the module runs as usual."""

from __future__ import annotations

import json
import os
import sys
import traceback

from ansible_collections.gpufleet.cluster.plugins.module_utils.core.errors import GpufleetError
from ansible_collections.gpufleet.cluster.plugins.module_utils.core.module import (
    INTERNAL_ERROR,
    failure,
)


def _same_python(interpreter):
    if not interpreter:
        # Left to interpreter discovery, which may pick another Python with other libraries.
        return False
    # The path itself, not where its links lead: a virtualenv's python links to the system's,
    # which does not have the virtualenv's libraries.
    return isinstance(interpreter, str) and \
        os.path.normpath(interpreter) == os.path.normpath(sys.executable)


def why_not(action, task_vars):
    """None when ``action`` (an ActionBase) may do its module's work in this process, else the
    reason it may not (for tests and debugging)."""
    if getattr(action._connection, "transport", None) != "local":
        return "the task runs on another host"
    if action._play_context.become:
        return "the task runs with become"
    if action._task.async_val:
        return "the task runs asynchronously"
    if any(action._task.environment or ()):
        return "the task sets environment variables"
    host_vars = task_vars or {}
    if action._task.delegate_to:
        # The connection is the delegated host's, and so is the Python the module would get.
        host_vars = (host_vars.get("ansible_delegated_vars") or {}).get(
            action._task.delegate_to) or {}
    interpreter = host_vars.get("ansible_python_interpreter")
    if interpreter is not None:
        interpreter = action._templar.template(interpreter)
    if not _same_python(interpreter):
        return "the task's Python (%s) is not the controller's (%s)" % (
            interpreter, sys.executable)
    return None


def answer(result, work, what="gpufleet"):
    """``result`` (an action's) updated with what the module would have returned for the work
    ``work()`` does here: its answer in JSON types (lists, not tuples or sets), or the failure
    core.module.fail_json_on_error would have made of the error it raised. Returns ``result``."""
    try:
        done = work()
    except GpufleetError as exc:
        result.update(failure(exc), failed=True)
    except Exception as exc:  # pylint: disable=broad-exception-caught
        result.update(failed=True, msg=INTERNAL_ERROR % (what, exc),
                      exception=traceback.format_exc())
    else:
        result.update(json.loads(json.dumps(done)))
    return result
