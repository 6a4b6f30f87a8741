# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Growing a fleet from inside a run's submission: the fleet playbook, run by the controller.

The task playbook grows a fleet for a run's first placement itself (playbooks/task.yml imports
playbooks/fleet.yml), where a user sees every step. A resubmission (``retry`` after an
interruption) and a pass over the queue happen inside one module call, so they run that same
playbook as a child ``ansible-playbook`` on the controller: the fleet grows exactly as
``gpufleet apply`` makes it grow (zone, placement group, checks, measured facts), and nothing of
Ansible is imported here.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile

from .errors import RunError

TIMEOUT = 3600


def playbook_command():
    """``ansible-playbook`` beside this Python (a virtual environment's), else on PATH."""
    beside = os.path.join(os.path.dirname(sys.executable), "ansible-playbook")
    if os.access(beside, os.X_OK):
        return beside
    found = shutil.which("ansible-playbook")
    if not found:
        raise RunError("the fleet must grow for this run, and ansible-playbook is not on this "
                       "controller's PATH to apply it")
    return found


def grower(root, emit=None, runner=subprocess.run):
    """A function ``grow(create)`` that applies ``create["file"]`` with
    ``gpufleet_fleet_at_least`` and ``gpufleet_fleet_made_for`` (tasks.growth's ``create``), or
    raises RunError."""
    emit = emit or (lambda event: None)

    def grow(create):
        count = create["instances"]
        emit({"kind": "info", "message": "fleet %s grows by %d instance%s for this run "
              "(playbooks/fleet.yml)" % (create["fleet"], count, "" if count == 1 else "s")})
        extra = {"fleet": create["file"], "gpufleet_fleet_at_least": create["at_least"],
                 "gpufleet_fleet_made_for": create.get("made_for") or {}}
        if root:
            extra["gpufleet_state_dir"] = root
        with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as handle:
            json.dump(extra, handle)
            extra_file = handle.name
        try:
            env = dict(os.environ)
            if root:
                env["GPUFLEET_STATE_DIR"] = root
            # Its own stdin: Ansible refuses the non-blocking one a playbook's process has.
            proc = runner([playbook_command(), "gpufleet.cluster.fleet", "-e", "@" + extra_file],
                          stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, env=env, timeout=TIMEOUT, check=False)
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise RunError("fleet %s could not grow: %s" % (create["fleet"], exc)) from exc
        finally:
            os.remove(extra_file)
        if proc.returncode != 0:
            tail = proc.stdout.decode("utf-8", "replace").strip().splitlines()[-15:]
            raise RunError("fleet %s could not grow (playbooks/fleet.yml failed): %s"
                           % (create["fleet"], " | ".join(tail)))

    return grow
