# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The task runner as the modules and action plugins call it: their argument specs, and one
function per operation that takes their parameters and returns their result.

The modules (``gpufleet.cluster.task``, ``run_info``, ``run_logs``, ``run_stop``) and the action
plugins that run ``task`` and ``run_logs`` on the controller with live output call the same
functions; only the way events are shown differs.
"""

from __future__ import annotations

import os
import time

from ..backends.docker_cli import Docker
from ..core.errors import GpufleetError
from ..core.module import state_options
from ..core.text import shorten
from ..fleets import state
from ..teams import identity
from . import (images, lifecycle, listing, ownership, placement, queue_mirror, rearm, runindex,
               runs, silence, surveys)
from .errors import NeedsInstances, PlanError, RunError
from .queue_records import entries_of
from .grower import grower
from .lifecycle import JobStatus, RunStatus
from .ssh import NodeError

# doc_fragments/run_fleets.py and state.py document these.
FLEET_OPTIONS = dict(
    fleets=dict(type="list", elements="path", default=[]),
    **state_options()
)

TASK_ARGS = dict(
    path=dict(type="path"),
    config=dict(type="dict"),
    name=dict(type="str"),
    env=dict(type="raw"),
    fleet_names=dict(type="list", elements="str", default=[]),
    array=dict(type="str"),
    ide_version=dict(type="str"),
    secrets=dict(type="dict", default={}, no_log=True),
    wait=dict(type="bool", default=True),
    logs=dict(type="bool", default=False),
    output_path=dict(type="path"),
    image_source=dict(type="str", default="auto", choices=list(images.IMAGE_SOURCES)),
    run_args=dict(type="list", elements="str", default=[]),
    poll_interval=dict(type="float", default=1.0),
    create=dict(type="bool", default=True),
    show_plan=dict(type="bool", default=False),
    user=dict(type="str"),
    after=dict(type="list", elements="str", default=[]),
    **FLEET_OPTIONS
)
TASK_MUTUALLY_EXCLUSIVE = [("path", "config")]
TASK_REQUIRED_ONE_OF = [("path", "config")]

RUN_INFO_ARGS = dict(name=dict(type="str"), user=dict(type="str"), **FLEET_OPTIONS)
RUN_QUEUE_ARGS = dict(autoscale=dict(type="bool", default=True), **FLEET_OPTIONS)
RUN_STOP_ARGS = dict(name=dict(type="str", required=True), abort=dict(type="bool", default=False),
                     force=dict(type="bool", default=False), user=dict(type="str"),
                     delete=dict(type="bool", default=False), **FLEET_OPTIONS)
RUN_METRICS_ARGS = dict(name=dict(type="str", required=True), job=dict(type="int"),
                        **FLEET_OPTIONS)
RUN_LOGS_ARGS = dict(name=dict(type="str", required=True), follow=dict(type="bool", default=False),
                     tail=dict(type="int"), job=dict(type="int"), since=dict(type="str"),
                     stream=dict(type="bool", default=False), output_path=dict(type="path"),
                     **FLEET_OPTIONS)
USAGE_INFO_ARGS = dict(since=dict(type="str", default="7d"), user=dict(type="str"),
                       fleet=dict(type="str"), **FLEET_OPTIONS)
# How much output one event carries when logs are streamed (lines are never split).
STREAM_BATCH = 65536

RUN_TYPES = ("task", "dev-environment", "service")


class ActionError(GpufleetError):
    """Bad input or an operation that cannot go on; the message is the module's ``msg``."""


def load_task(params):
    """The normalized task config from ``path`` or ``config`` with the command line's ``name``,
    ``env``, ``fleet_names`` and ``ide_version`` applied (spec.overrides), or ActionError."""
    from ..spec import SpecError, parse_data, parse_file
    from ..spec.overrides import apply_overrides

    source = params.get("path") or "config"
    try:
        if params.get("path"):
            config, _warnings = parse_file(params["path"])
        else:
            config, _warnings = parse_data(params["config"], source="config")
        if config.get("type") in RUN_TYPES:
            config = apply_overrides(config, env=params.get("env"), name=params.get("name"),
                                     fleets=params.get("fleet_names"), source=source,
                                     ide_version=params.get("ide_version"))
    except SpecError as exc:
        raise ActionError(str(exc)) from exc
    if config.get("type") not in RUN_TYPES:
        raise ActionError("%s is a %s configuration; this runs tasks, dev environments and "
                          "services (type: task, type: dev-environment, type: service)"
                          % (params.get("path") or "config", config.get("type")))
    return config


def stored_secret_names(params):
    """The secrets a submission of ``params`` takes from the controller's secrets store
    (``gpufleet secret set``) when the ``secrets`` option lacks them: ``(needed, optional)``,
    the names the task references and the credentials a remote repo may be cloned with
    (tasks.code.CREDENTIAL_SECRETS). Both empty when the task does not load (submit says
    why)."""
    from .code import CREDENTIAL_SECRETS
    from .environment import needed_secret_names

    given = params.get("secrets") or {}
    try:
        config = load_task(params)
    except ActionError:
        return [], []
    optional = []
    if any(repo.get("url") for repo in config.get("repos") or []):
        optional = [n for n in CREDENTIAL_SECRETS if given.get(n) is None]
    return needed_secret_names(config, given), optional


def _fleets(params, host_facts=False):
    root = state.state_dir(params.get("state_dir"))
    try:
        fleets = surveys.collect_fleets(params.get("fleets") or (), Docker(), root,
                                        host_facts=host_facts)
    except RunError as exc:
        raise ActionError(str(exc)) from exc
    return root, fleets


def fleets_of(params: dict) -> tuple:
    """``(state dir, fleet records)`` of the ``fleets`` and ``state_dir`` options, or
    ActionError."""
    return _fleets(params)


def local_task_image(fleets, check_mode=False):
    """The image a local fleet runs a task without ``image`` in (built here when missing)."""
    if not any(i.get("backend") == "local" for f in fleets for i in f.get("instances") or []):
        return None
    from ..backends import task_image

    try:
        ref, _built = task_image.ensure_task_image(Docker(), check_mode=check_mode)
    except Exception as exc:  # BuildError, DockerError: say what to install
        raise ActionError("cannot build the local task image: %s" % exc) from exc
    return ref


def expand_paths(params):
    """``~`` expanded and relative file paths made absolute from the current directory, as a
    module's ``path`` options are."""
    params = dict(params)

    def one(path):
        return os.path.abspath(os.path.expanduser(path))

    if params.get("path"):
        params["path"] = one(params["path"])
    params["fleets"] = [one(p) for p in params.get("fleets") or []]
    return params


def failure_summary(result):
    """The ``msg`` of a run that did not end done."""
    text = "run %s %s" % (result.get("run"), result.get("status"))
    if result.get("reason"):
        text += " (%s)" % result["reason"]
    if result.get("message"):
        text += ": %s" % result["message"]
    return text


def event_line(event):
    """One line of output for a runner event, or None for events not worth a line."""
    kind = event.get("kind")
    run = event.get("run") or "run"
    if kind == "log":
        lines = event["lines"] if "lines" in event else [event["line"]]
        if event.get("raw"):
            return "\n".join(lines)
        prefix = "[%s-%d] " % (run, event["rank"])
        return "\n".join(prefix + line for line in lines)
    if kind == "job":
        text = "%s job %d on %s: %s" % (run, event["job_num"], event["host"], event["status"])
        if event.get("exit_code") not in (None, 0):
            text += " (exit code %s)" % event.get("exit_code")
        if event.get("reason"):
            text += " [%s]" % event["reason"]
        if event.get("message"):
            text += ": %s" % event["message"]
        return text
    if kind == "run":
        text = "%s: %s" % (run, event["status"])
        if event.get("message"):
            text += ": %s" % event["message"]
        return text
    if kind == "info":
        return "%s: %s" % (run, event["message"])
    if kind == "replica" and event.get("status") == "respawned":
        return "%s replica %d on %s: started again (retry)" % (run, event["job_num"],
                                                               event["host"])
    return None   # "plan" too: its table is the printer's (plugin_utils.run_output)


def ignored_fields(config):
    """Warnings for task fields the runner accepts but does not act on (spec.support.notes,
    which gpufleet validate shows too)."""
    from ..spec import support

    return [str(note) for note in support.notes(config)]


def _array(params):
    """The job array of ``params["array"]`` (spec.overrides.parse_array), or None."""
    if not params.get("array"):
        return None
    from ..spec import SpecError
    from ..spec.overrides import parse_array

    try:
        return parse_array(params["array"], params.get("path") or "config")
    except SpecError as exc:
        raise ActionError(str(exc)) from exc


def _check_local(config, config_dir):
    """Refuse, before any host is touched, what the task names on this controller and cannot
    be shipped (repos.sources, which gpufleet validate reports too): a missing or unreadable
    ``files`` entry, a local repo that is not a folder, either over the limit."""
    from ..repos import sources

    refused = sources.local_refusals(config, config_dir, os.environ)
    if refused:
        raise ActionError("; ".join(str(p) for p in refused))


def submit(params, emit=None, check_mode=False, stop_event=None, runnable=None, config=None,
           services=None, gate=None):
    """Submit a task and, with ``wait``, follow it to its end. Returns ``(result, failed)``.

    With ``array``, one run per index (tasks.array), at most ``%N`` alive at a time.
    ``runnable``: how the runner takes the config (a service's replicas: services.submit
    passes services.replicas' ``runnable``, which this package may not import); ``config``:
    the config ``load_task(params)`` gave, when the caller has it already; ``services``: the
    hook each pass over the queue takes (tasks.queue.QueuePass; services.submit.queue_hook,
    which this package may not import); ``gate``: what judges the runs ``params["after"]``
    names, at submission and in each pass (QueuePass; automation.dependencies.gate,
    which this package may not import)."""
    config = load_task(params) if config is None else config
    array_spec = _array(params)
    if array_spec is not None and config.get("schedule"):
        # A job array ends when its runs have; a scheduled run never does by itself.
        raise ActionError("a job array cannot have a schedule: its runs would never end; "
                          "apply one scheduled task per index, or drop --array or schedule")
    root, fleets, make_runner = runner_factory(params, config, emit, check_mode, runnable,
                                               services, gate)
    config_dir = os.path.dirname(params["path"]) if params.get("path") else None
    try:
        if array_spec is not None:
            return _submit_array(config, array_spec, make_runner, fleets, root, params, emit,
                                 check_mode, config_dir)
        runner = make_runner(config)
        runner.announce_plan = bool(params.get("show_plan"))
        runner.read_only = bool(check_mode)
        if not check_mode:
            runner.make_key_early()   # ready by the time the run is placed
            runner.queue_first = lambda: _queue_first(runner, fleets, root, emit, whole=True,
                                                      services=services, gate=gate)
            _queue_first(runner, fleets, root, emit, services=services, gate=gate)
        if check_mode:
            # Runs it runs after: what the submission would refuse is refused here too, and
            # a fleet full now may have room once they ended.
            waits_for = runner.supervising.judge_after()[0] if getattr(
                runner, "after", None) else None
            try:
                try:
                    placed = runner.place()
                except NeedsInstances as grow:
                    placed = grow.plan   # on the fleet as it will be once it grew
                runner.image_and_python(placed)
            except placement.NoHostFits as exc:
                from .growth import never_fits

                if waits_for is not None and waits_for["verdict"] != "go" and not never_fits(
                        runner.config, fleets):
                    return {"run": runner.name, "status": "planned", "plan": None,
                            "waits": "%s; %s" % (waits_for.get("message"), exc),
                            "after": waits_for, "config": config, "changed": True}, False
                if lifecycle.may_retry(config.get("retry"), lifecycle.EVENT_NO_CAPACITY, 0, 0) \
                        and not never_fits(runner.config, fleets):
                    # Submitted, it would wait in the queue (tasks.queue).
                    return {"run": runner.name, "status": "planned", "plan": None,
                            "waits": str(exc), "config": config, "changed": True}, False
                return {"run": runner.name, "status": RunStatus.FAILED.value,
                        "reason": lifecycle.NO_CAPACITY, "message": str(exc),
                        "plan": None, "changed": False}, True
            return {"run": runner.name, "status": "planned", "plan": placed,
                    "config": config, "changed": True, "after": waits_for}, False
        try:
            result = runner.run(wait=params["wait"], stop_event=stop_event)
        except NeedsInstances as grow:
            # The playbook grows the fleet (playbooks/fleet.yml) and submits again.
            return {"run": runner.name, "status": RunStatus.PENDING.value, "grow": grow.create,
                    "message": "%s; the fleet grows first" % grow, "changed": False}, False
        if params["wait"]:
            drive_queue(fleets, root, emit, services=services,
                        gate=gate)   # the end of a run frees hosts
    except (RunError, NodeError, PlanError, placement.PlacementError) as exc:
        raise ActionError(str(exc)) from exc
    result["changed"] = True
    if ignored_fields(config):
        result["warnings"] = ignored_fields(config)
    # Detached, a run that could not even start (no capacity, a failed start) has failed too.
    failed = result["status"] != RunStatus.DONE if params["wait"] and result.get(
        "reason") != lifecycle.WAITING_FOR_SCHEDULE else result["status"] == RunStatus.FAILED
    if failed and runner.submissions:
        last = runner.submissions[-1]
        rank0 = next((j for j in last.jobs if j["job_num"] == 0), None)
        if rank0 is not None:
            try:
                result["log_tail"] = runs.log_tail(last.nodes[rank0["host"]], rank0)
            except NodeError:
                result["log_tail"] = []
    return result, failed


def runner_factory(params, config, emit, check_mode=False, runnable=None, services=None,
                   gate=None):
    """``(root, fleets, make_runner)`` for the task ``params`` submit: ``make_runner(run_config,
    array_info=None, code_=None)`` is a tasks.runs.Runner with the parameters' options (submit,
    and services.rolling for a service's new version)."""
    user = submitter(params)
    config_dir = os.path.dirname(params["path"]) if params.get("path") else None
    _check_local(config, config_dir)
    root, fleets = _fleets(params, host_facts=True)
    if not fleets:
        raise ActionError("no fleets found: apply a fleet first (gpufleet apply -f FLEET, or "
                          "playbooks/fleet.yml), or name fleet files in fleets")
    local_image = None if config.get("image") else local_task_image(fleets, check_mode)

    def make_runner(run_config, array_info=None, code_=None):
        return runs.Runner(
            run_config, fleets, root=root, secrets=params.get("secrets") or {}, docker=Docker(),
            emit=emit, image_source=params["image_source"], follow_logs=params["logs"],
            poll=params["poll_interval"], run_args=params.get("run_args") or (),
            local_image=local_image, config_dir=config_dir, array=array_info, code_=code_,
            create=params.get("create", True), grower=grower(root, emit), user=user,
            runnable=runnable, services=services, after=params.get("after"), gate=gate)

    return root, fleets, make_runner


def submitter(params):
    """Who submits the run: the ``user`` option, else this controller's user
    (teams.identity: ``$GPUFLEET_USER``, else the login name); ActionError when it is not a
    valid user name."""
    try:
        if params.get("user"):
            return identity.check_user(params["user"], "user")
        return identity.user_name()
    except identity.IdentityError as exc:
        raise ActionError(str(exc)) from exc


def _submit_array(config, array_spec, make_runner, fleets, root, params, emit, check_mode,
                  config_dir):
    """A job array: planned as its first run in check mode, else submitted index by index."""
    from . import array as arrays
    from .code import Code

    if params.get("after") and not check_mode and (params["wait"] or array_spec.get("limit")):
        # Its runs wait in the queue, where neither an attached array (it follows containers)
        # nor %N (it counts live containers) sees them.
        raise ActionError("--after with --array: submit the array detached (-d) and without "
                          "%%N; each of its runs waits in the queue, and gpufleet ps follows "
                          "them")
    nodes = surveys.nodes_of(fleets, root)
    batch = arrays.ArrayRunner(config, array_spec, make_runner,
                               lambda: arrays.array_statuses(nodes, batch.base), emit=emit,
                               poll=max(params["poll_interval"], 1.0))
    first = array_spec["indices"][0]
    if check_mode:
        runner = make_runner(dict(config, name=batch.names[first]), batch.info(first))
        runner.read_only = True
        try:
            placed = runner.place()
            runner.image_and_python(placed)
        except placement.NoHostFits as exc:
            return {"run": batch.base, "array": batch.base, "status": RunStatus.FAILED.value,
                    "reason": lifecycle.NO_CAPACITY, "message": str(exc), "plan": None,
                    "changed": False}, True
        return {"run": batch.base, "array": batch.base, "status": "planned", "plan": placed,
                "config": config, "runs": [batch.names[i] for i in array_spec["indices"]],
                "changed": True}, False
    code = None
    if config.get("repos"):
        code = Code(config["repos"][0], config_dir, os.environ)
    try:
        result = batch.run(wait=params["wait"], code=code)
    except NeedsInstances as exc:
        raise ActionError("job array %s: %s, and job arrays do not grow fleets; apply the fleet "
                          "with enough nodes first (nodes.target), then submit the array"
                          % (batch.base, exc)) from exc
    finally:
        if code is not None:
            code.close()
    result["changed"] = True
    if ignored_fields(config):
        result["warnings"] = ignored_fields(config)
    return result, result["status"] != RunStatus.DONE and (
        params["wait"] or result["status"] == RunStatus.FAILED)


def _queue_first(runner, fleets, root, emit, whole=False, services=None, gate=None):
    """Runs already waiting go first, in priority order (tasks.queue). One look at the hosts
    serves the pass and, when there was no queue to act on, the placement."""
    survey = runner.survey(whole)
    # A look at part of the hosts (tasks.runindex) found no run waiting, and shows runs only
    # in part: a pass would judge them on what it cannot see. The next look at every host
    # passes over the queue.
    report = (drive_queue(fleets, root, emit, survey=survey, services=services, gate=gate)
              if runner.surveyed_whole else {})
    if not queue_waiting(survey) and not any(report.values()):
        runner.reuse_survey(survey)


def queue_waiting(survey):
    """Whether the queues a survey (surveys.survey_with_queues) read hold an entry that a pass
    acts on: a pending or an active one. Ended entries, which the hosts keep for a day so that
    ps can say why a run failed, are not: a pass leaves them as they are."""
    return runindex.waiting(survey[2])


def drive_queue(fleets, root, emit=None, survey=None, check_mode=False, services=None,
                autoscale=False, gate=None):
    """One pass over the queue (tasks.queue.QueuePass): the report of what it started,
    resubmitted, stopped and let fail. Check mode only says whether one is due. ``services``:
    the pass's hook for services' routes (QueuePass), from the caller; ``gate``: what judges
    the entries that run after other runs (QueuePass)."""
    from . import queue

    from . import interruption

    if check_mode:
        survey, silent = silence.look(surveys.nodes_of(fleets, root), root, fleets, survey,
                                      check_mode=True)
        return {"due": queue.is_due(survey, interruption.instance_map(fleets), silent)}
    report = queue.QueuePass(fleets, root=root, docker=Docker(), emit=emit,
                             grower=grower(root, emit), grow_first=True,
                             runner_of=runs.runner_of, services=services,
                             autoscale=autoscale, gate=gate).run(survey)
    report.pop("own", None)
    return report


def run_info(params):
    from . import interruption, queue

    root, fleets = _fleets(params)
    found, silent = silence.look(surveys.nodes_of(fleets, root), root, fleets)
    instances = interruption.instance_map(fleets)
    records, errors = listing.list_runs(None, found, instances, silent)
    if params.get("name"):
        records = [r for r in records if r["name"] == params["name"]]
    records = listing.of_user(records, params.get("user"))
    # "unreachable" is a key Ansible reserves in a result (it marks the host unreachable).
    return {"runs": records, "unreachable_hosts": listing.own_errors(fleets, errors, root),
            "changed": False, "unread_fleets": listing.unread_fleets(fleets, found[3], root),
            "queue_due": queue.is_due(found, instances, silent)}


def run_queue(params, check_mode=False, emit=None, services=None, gate=None):
    """The queue's pass (playbooks/reconcile.yml, ps when something is due, stop).
    ``services``: the pass's hook for services' routes, ``gate`` its judge of dependencies
    (tasks.queue.QueuePass)."""
    root, fleets = _fleets(params, host_facts=True)
    try:
        report = drive_queue(fleets, root, emit, check_mode=check_mode, services=services,
                             autoscale=params.get("autoscale", True), gate=gate)
    except (RunError, NodeError, PlanError, placement.PlacementError) as exc:
        raise ActionError(str(exc)) from exc
    if check_mode:
        return {"report": {}, "due": report["due"], "changed": report["due"]}
    changed = any(report[k] for k in ("started", "resubmitted", "expired", "stopped",
                                      "forgotten", "failed", "published", "unpublished",
                                      "respawned", "scaled", "terminated", "rearmed"))
    from . import interruption

    found, silent = silence.look(surveys.nodes_of(fleets, root), root, fleets)
    records, errors = listing.list_runs(None, found, interruption.instance_map(fleets), silent)
    return {"report": report, "runs": records,
            "unreachable_hosts": listing.own_errors(fleets, errors, root),
            "unread_fleets": listing.unread_fleets(fleets, found[3], root), "changed": changed}


def run_stop(params, check_mode=False, services=None, gate=None):
    """Stop a run, or every live run of a job array of that name (tasks.array). ``services``
    and ``gate``: the hooks of the pass over the queue that follows (tasks.queue.QueuePass)."""
    from . import array as arrays

    root, fleets = _fleets(params)
    nodes = surveys.nodes_of(fleets, root)
    try:
        found = surveys.survey_with_queues(nodes)   # one look at every host serves all below
        if not check_mode:   # entries of a lost queue host handed over, stale ones gone
            queue_mirror.sync(fleets, nodes, found)
        records, _errors = listing.list_runs(nodes, found)
        record = next((r for r in records if r["name"] == params["name"]), None)
        _guard_stop(params, record, records, nodes, fleets)
        if record is not None and record.get("queued_on") and not record.get("jobs"):
            answer = _cancel_queued(nodes, record, check_mode, _stopper(params))
            if params.get("delete"):
                answer = listing.delete_queued(nodes, answer, check_mode)
            if not check_mode:   # its copy on the mirror host follows (tasks.queue_mirror)
                queue_mirror.follow(nodes, fleets, record["queued_on"], record["name"])
            return answer
        if record is None and not check_mode and rearm.drop_entries(  # all its hosts lost
                nodes, fleets, found[2], params["name"]):
            return {"run": {"name": params["name"], "stopped": [], "deleted": []}, "changed": True}
        if record is None:
            members = [r for r in records if r.get("array") == params["name"]]
            if not members and params.get("delete"):
                # Deleted already (or never made): nothing to do, as a second delete finds.
                return {"run": {"name": params["name"], "deleted": []}, "changed": False}
            if not members:
                raise RunError("no run or job array named %s on the fleets' hosts (gpufleet ps "
                               "lists runs)" % shorten(params["name"]))
            if params.get("delete"):
                name = shorten(params["name"])
                raise RunError("%s is a job array: delete removes one run; stop the array "
                               "with gpufleet stop %s" % (name, name))
            if check_mode:
                alive = [r["name"] for r in members
                         if r["status"] not in RunStatus.finished_statuses()]
                return {"run": {"name": params["name"], "array": params["name"],
                                "runs": sorted(r["name"] for r in members)},
                        "changed": bool(alive)}
            record = arrays.stop_array(nodes, params["name"], abort=params["abort"],
                                       by=_stopper(params))
            return {"run": record, "changed": bool(record.get("stopped"))}
        if check_mode:
            alive = [j for j in record["jobs"] if j["status"] in JobStatus.up_statuses()]
            armed = not (record.get("schedule") or {"stopped": True})["stopped"]
            return {"run": record, "changed": bool(alive) or armed or params.get("delete")}
        hosts = listing.run_hosts(found[0], params["name"])
        silent = [h for h in hosts if h in found[3] or h not in nodes]
        if params.get("delete") and silent:
            raise RunError("cannot delete run %s: %s of its hosts do%s not answer; nothing was "
                           "changed (delete it again once they do, or gpufleet stop %s stops "
                           "it where its hosts answer)" % (shorten(params["name"]),
                                                           ", ".join(silent),
                                                           "es" if len(silent) == 1 else "",
                                                           shorten(params["name"])))
        scheduled = bool(record.get("schedule"))
        record = listing.stop_run(nodes, params["name"], abort=params["abort"],
                                  surveyed=(found[0], found[3]), by=_stopper(params))
        if scheduled:   # its schedule ends: nothing arms it again (tasks.rearm)
            rearm.drop_entries(nodes, fleets, found[2], params["name"])
        try:
            if params.get("delete"):
                record["deleted"] = listing.delete_run(nodes, record, hosts, found[2])
                for host in sorted(set(h for h, e in entries_of(found[2])
                                       if e.get("run") == params["name"])):
                    queue_mirror.follow(nodes, fleets, host, params["name"])
        finally:
            if queue_waiting(found):
                drive_queue(fleets, root, services=services,
                            gate=gate)   # what waited may start now
    except (RunError, NodeError) as exc:
        raise ActionError(str(exc)) from exc
    return {"run": record, "changed": bool(record.get("stopped") or record.get("deleted"))}


def _stopper(params):
    """Who stops a run, as the hosts' event record names them (None when unknown)."""
    try:
        return submitter(params)
    except ActionError:
        return None


def _guard_stop(params, record, records, nodes, fleets):
    """Refuse to stop another user's run (tasks.ownership), unless ``force`` or the caller is
    an admin of its fleet; for a job array's name, each of its live runs is checked."""
    if params.get("force"):
        return
    if record is not None:
        targets = [record]
    else:
        targets = [r for r in records if r.get("array") == params["name"]
                   and r["status"] not in RunStatus.finished_statuses()]
    if not any(r.get("user") for r in targets):
        return   # runs made before runs named their user: anyone's, as before
    try:
        caller = (identity.check_user(params["user"], "user") if params.get("user")
                  else identity.user_name())
    except identity.IdentityError as exc:
        raise ActionError(str(exc)) from exc
    ownership.check_stop(targets, caller, False,
                         lambda fleet: ownership.members_doc(nodes, fleets, fleet),
                         lambda rec: ownership.fleet_of(rec, fleets))


def _cancel_queued(nodes, record, check_mode, by=None):
    """``gpufleet stop`` of a run waiting in the queue: it ends terminated, never having run."""
    waiting = record["status"] == RunStatus.PENDING
    if waiting and not check_mode:
        nodes[record["queued_on"]].call("update", {
            "run": record["name"], "run_id": record["run_id"], "by": by,
            "changes": {"state": "terminated", "reason": lifecycle.TERMINATED_BY_USER,
                        "message": "stopped while it waited in the queue"}})
        record = dict(record, status=RunStatus.TERMINATED.value,
                      reason=lifecycle.TERMINATED_BY_USER, queue_position=None)
    return {"run": dict(record, stopped=[]), "changed": waiting}


def run_metrics(params):
    """The run's metrics (tasks.metrics), as ``dstack metrics`` shows them."""
    root, fleets = _fleets(params)
    nodes = surveys.nodes_of(fleets, root)
    try:
        result = listing.run_metrics(nodes, params["name"], job=params.get("job"))
    except RunError as exc:
        raise ActionError(str(exc)) from exc
    return {"metrics": result, "changed": False}


def usage_info(params):
    """Usage over the reachable fleets (tasks.usage), as ``gpufleet usage`` shows it."""
    from .usage import UsageError, report

    root, fleets = _fleets(params)
    try:
        found = report(fleets, root, since=params.get("since"), user=params.get("user"),
                       fleet=params.get("fleet"))
    except UsageError as exc:
        raise ActionError(str(exc)) from exc
    return {"usage": found, "changed": False}


def run_logs(params, emit=None):
    """A run's output (tasks.joblogs): its lines, or with ``stream`` (and ``emit``) passed on
    in batches as they are read; with ``follow``, streamed until the run ends."""
    from . import joblogs

    root, fleets = _fleets(params)
    nodes = surveys.nodes_of(fleets, root)
    name, job = params["name"], params.get("job")
    since = None
    if params.get("since"):
        try:
            since = joblogs.parse_since(params["since"], time.time())
        except joblogs.LogsError as exc:
            raise ActionError(str(exc)) from exc
    empty = {"lines": [], "ranks": [], "changed": False}
    try:
        if params.get("follow") and emit is not None:
            record = listing.follow_logs(nodes, name, lambda e: emit(dict(e, run=name)),
                                         job=job, since=since)
            return dict(empty, run=record)
        record, lines = listing.run_logs(nodes, name, tail=params.get("tail"), job=job,
                                         since=since)
        if params.get("stream") and emit is not None:
            _stream(lines, lambda rank, batch: emit({
                "kind": "log", "run": name, "rank": rank, "lines": batch,
                "raw": job is not None}))
            return dict(empty, run=record)
        lines = list(lines)
    except RunError as exc:
        raise ActionError(str(exc)) from exc
    ranks = {}
    for rank, line in lines:
        ranks.setdefault(rank, []).append(line)
    prefixed = [line if job is not None else "[%s-%d] %s" % (name, rank, line)
                for rank, line in lines]
    return {"run": record, "changed": False, "lines": prefixed,
            "ranks": [{"rank": rank, "lines": ranks[rank]} for rank in sorted(ranks)]}


def _stream(lines, send):
    """Pass ``(rank, line)`` on in batches of about STREAM_BATCH bytes, one rank each."""
    batch, size, current = [], 0, None
    for rank, line in lines:
        if batch and (rank != current or size >= STREAM_BATCH):
            send(current, batch)
            batch, size = [], 0
        current = rank
        batch.append(line)
        size += len(line) + 1
    if batch:
        send(current, batch)
