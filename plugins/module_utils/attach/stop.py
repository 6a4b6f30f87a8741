# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""A run's stop, the one sequence of its steps: every job of the run stopped (tasks.actions's
``run_stop``, which also moves the queue on), then the run's SSH aliases, key and forwarded
ports on this controller removed (the attach session with ``state: absent``); a service's route
taken off its proxy host after its replicas stopped (services.publish).

The run_stop module (and so playbooks/stop.yml) and ``gpufleet stop`` in the command's own
process (gpufleet/direct.py, behind gpufleet.api) both call :func:`stop_run`.

    result = stop_run({"name": "train", "abort": False, "fleets": [], "state_dir": None})
"""

from __future__ import annotations

import os

from ..automation import dependencies
from ..services import publish, submit
from ..tasks import actions, surveys
from . import session


def forget_params(params):
    """The attach session's parameters that remove the run's aliases on this controller:
    its options' defaults, the run's name, ``state: absent`` and the state dir (no fleet
    files: nothing is asked of the hosts to forget a run)."""
    given = dict((key, value.get("default")) for key, value in session.ATTACH_ARGS.items())
    given.update(name=params["name"], state="absent", fleets=[],
                 state_dir=params.get("state_dir"))
    given["ssh_config"] = os.path.abspath(os.path.expanduser(given["ssh_config"]))
    return given


def _unpublish(params, record):
    """Take the stopped service ``record`` off its proxy host (services.publish)."""
    try:
        root, fleets = actions.fleets_of(params)
        answer = publish.unpublish_stopped(record, surveys.nodes_of(fleets, root))
    except publish.PublishError as exc:
        raise actions.ActionError(str(exc)) from exc
    return bool(answer and answer.get("changed"))


def _hook_but(name):
    """The hook of the pass over the queue that follows the stop (services.submit.queue_hook),
    which leaves the stopped run itself to ``_unpublish``."""
    def hook(event, fleets, nodes):
        if event.get("kind") == "ended" and (event.get("record") or {}).get("name") == name:
            return None
        return submit.queue_hook(event, fleets, nodes)
    return hook


def stop_run(params, check_mode=False):
    """Stop the run (or job array) ``params["name"]`` and forget its SSH aliases here.
    ``params``: the run_stop module's (tasks.actions.RUN_STOP_ARGS). Returns run_stop's result
    (``run``, ``changed``; ``changed`` also when aliases were removed). In check mode nothing
    is stopped and nothing is forgotten."""
    # In check mode no pass over the queue is made: it takes no hook.
    more = {} if check_mode else {"services": _hook_but(params["name"]),
                                  "gate": dependencies.gate}
    answer = actions.run_stop(params, check_mode=check_mode, **more)
    if check_mode:
        return answer
    record = answer.get("run") or {}
    if record.get("service"):
        # A service: once its replicas are stopped, its route goes off the proxy.
        answer = dict(answer, unpublished=_unpublish(params, record))
    forgotten = session.attach_entry(forget_params(params))
    return dict(answer, changed=bool(answer.get("changed") or forgotten.get("changed")))
