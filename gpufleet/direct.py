"""gpufleet.api's in-process path (``in_process=True``): what ``gpufleet ps``, ``gpufleet
logs`` (not followed), ``gpufleet stop`` and the detached ``gpufleet apply -y -d`` of a task
ask, answered in this process. Only gpufleet.api calls this module.

A command a person types to look at a run should answer in about the time one request to
each host takes. Through a playbook it also pays for ansible-playbook's start, ansible-runner
and a module process: more than the request itself on a small controller. So these calls
run the very functions the playbooks' modules call (``tasks.actions``'s ``run_info``,
``run_queue``, ``run_logs`` and ``submit``, and ``attach.stop``'s ``stop_run``, the one
sequence of a stop), with the parameters the modules would get: the same code, the same
answers, the same errors. The playbooks (playbooks/ps.yml, logs.yml, stop.yml, task.yml) stay
what Ansible users, AWX job templates and gpufleet.api without ``in_process`` run. A
submission goes through task.yml whenever the playbook does more than the task action's call:
when the task takes secrets from the controller's store (decrypted with the play's vault
password), when a fleet must grow for it (playbooks/fleet.yml), for job arrays, and for runs
the command stays attached to.
"""

from __future__ import annotations

import os

from ._collection import config_model, errors
from .api import CommandError

__all__ = ["CommandError", "runs", "logs", "stop", "submit", "events", "notify"]


def _actions():
    config_model()  # makes the collection importable
    from ansible_collections.gpufleet.cluster.plugins.module_utils.tasks import actions

    return actions


def _params(argument_spec, fleet_files=(), state_dir=None, **given):
    """A module's parameters: the spec's defaults, then what is given, with ``path`` options
    expanded and made absolute as a module's are."""
    params = dict((key, value.get("default")) for key, value in argument_spec.items())
    params.update((k, v) for k, v in given.items() if v is not None)
    params["fleets"] = list(fleet_files or ())
    params["state_dir"] = state_dir
    for key, value in argument_spec.items():
        if value.get("type") == "path" and isinstance(params.get(key), str):
            params[key] = _path(params[key])
        elif value.get("elements") == "path" and params.get(key):
            params[key] = [_path(p) for p in params[key]]
    return params


def _path(path):
    return os.path.abspath(os.path.expanduser(path))


def _call(function, *args, **kwargs):
    try:
        return function(*args, **kwargs)
    except errors().GpufleetError as exc:
        raise CommandError(str(exc)) from None


def _gate():
    """What judges the runs a run runs after (automation.dependencies.gate)."""
    _actions()
    from ansible_collections.gpufleet.cluster.plugins.module_utils.automation import dependencies

    return dependencies.gate


def _queue_hook():
    """What a pass over the queue does for services' routes (services.submit.queue_hook: a
    queued service published once it starts, an ended one taken off its proxy)."""
    _actions()
    from ansible_collections.gpufleet.cluster.plugins.module_utils.services import submit

    return submit.queue_hook


def runs(fleet_files=(), state_dir=None, user=None) -> dict:
    """What playbooks/ps.yml publishes: ``{"runs": [...], "unreachable": {host: error},
    "unread": {fleet: {host: reason}}}`` (the fleets some of whose hosts could not be read);
    when something in the queue is due, the pass over it runs first, as there. ``user``: only
    that user's runs."""
    actions = _actions()
    params = _params(actions.RUN_INFO_ARGS, fleet_files, state_dir, user=user or None)
    found = _call(actions.run_info, params)
    if found.get("queue_due"):
        found = _call(actions.run_queue, _params(actions.RUN_QUEUE_ARGS, fleet_files, state_dir,
                                                 autoscale=False), services=_queue_hook(),
                      gate=_gate())
        found["runs"] = actions.listing.of_user(found["runs"], user)
    return {"runs": found["runs"], "unreachable": found.get("unreachable_hosts") or {},
            "unread": found.get("unread_fleets") or {}}


def events(fleet_files=(), state_dir=None, **given) -> dict:
    """What playbooks/events.yml publishes (the event_info module's answer)."""
    _actions()
    from ansible_collections.gpufleet.cluster.plugins.module_utils.tasks import notices

    params = _params(notices.EVENT_INFO_ARGS, fleet_files, state_dir, **given)
    return _call(notices.event_info, params)["events"]


def notify(fleet_files=(), state_dir=None, **given) -> dict:
    """What playbooks/notify.yml publishes (the notify module's answer)."""
    _actions()
    from ansible_collections.gpufleet.cluster.plugins.module_utils.automation import webhooks
    from ansible_collections.gpufleet.cluster.plugins.module_utils.tasks import notices

    params = _params(notices.NOTIFY_ARGS, fleet_files, state_dir, **given)
    return _call(notices.notify, params, webhooks)


def logs(run, out, job=None, since=None, fleet_files=(), state_dir=None) -> dict:
    """A run's logs written to ``out`` as they are read (what ``gpufleet logs`` prints
    through logs.yml with ``stream``); returns the run's record."""
    actions = _actions()
    params = _params(actions.RUN_LOGS_ARGS, fleet_files, state_dir, name=run, job=job,
                     since=since, stream=True)

    def emit(event):
        line = actions.event_line(event)
        if line is not None:
            out.write(line + "\n")

    answer = _call(actions.run_logs, params, emit=emit)
    out.flush()
    return answer.get("run")


def stop(run, abort=False, fleet_files=(), state_dir=None, force=False, delete=False) -> dict:
    """What playbooks/stop.yml does, with the function its run_stop module calls
    (attach.stop.stop_run): every job of the run stopped, the queue moved on, the run's SSH
    aliases on this controller removed; returns the run's record."""
    actions = _actions()
    from ansible_collections.gpufleet.cluster.plugins.module_utils.attach import stop as stopping

    answer = _call(stopping.stop_run, _params(actions.RUN_STOP_ARGS, fleet_files, state_dir,
                                              name=run, abort=bool(abort),
                                              force=bool(force), delete=bool(delete)))
    return answer["run"]


def _is_service(actions, params):
    try:
        return actions.load_task(params).get("type") == "service"
    except actions.ActionError:
        return False   # actions.submit says why


def submit(path, out, err, fleet_files=(), state_dir=None, name=None, env=None, fleets=None,
           ide_version=None, show_plan=True, user=None):
    """A detached submission of the task file ``path`` (``gpufleet apply -y -d``): what
    task.yml's task action does, its lines (the plan table with ``show_plan``, each job's
    start) written to ``out`` and its warnings to ``err``. Returns the run's record as
    task.yml publishes it (``failed`` and ``msg`` set when the run could not start), or None
    when task.yml must submit it: the task needs secrets from the store, or a fleet must grow
    first (nothing was started then)."""
    import threading

    actions = _actions()
    from ansible_collections.gpufleet.cluster.plugins.plugin_utils.run_output import event_text

    params = _params(actions.TASK_ARGS, fleet_files, state_dir, path=path, name=name, env=env,
                     fleet_names=list(fleets or []), ide_version=ide_version, wait=False,
                     logs=False, show_plan=bool(show_plan), user=user)
    names, optional = actions.stored_secret_names(params)
    if names or optional or _is_service(actions, params):
        # A service's token is read from the store, and its proxy host may need HAProxy
        # first (task.yml plays gpufleet.cluster.gateway): task.yml submits it.
        return None
    lock = threading.Lock()

    def emit(event):   # from several threads: one line at a time
        text = event_text(event, path)
        if text is not None:
            with lock:
                out.write(text + "\n")
                out.flush()

    answer, failed = _call(actions.submit, params, emit=emit, services=_queue_hook(),
                           gate=_gate())
    if answer.get("grow"):
        # Placed on instances the fleet does not have yet: nothing started, no plan shown
        # (tasks.runs announces a plan only on what exists).
        return None
    for warning in answer.pop("warnings", None) or []:
        err.write("[WARNING]: %s\n" % warning)
    answer.pop("changed", None)
    if failed:
        answer.update(failed=True, msg=actions.failure_summary(answer))
    return answer
