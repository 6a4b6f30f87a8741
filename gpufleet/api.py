"""``gpufleet.api``: fleets, volumes and task runs from Python.

Every function runs one of the collection's playbooks through ansible-runner, the same ones
``ansible-playbook`` and AWX run, and returns the record that playbook publishes with
``set_stats``; there is no second implementation here. :func:`runs`, :func:`logs` (streamed),
:func:`stop` and a detached :func:`run_task` also take ``in_process=True``: the functions
those playbooks' modules call then run in this process (gpufleet/direct.py), without paying
for ansible-playbook's start, ansible-runner and a module process, with the same records and
errors; what the in-process call cannot do (a job array, secrets from the store, a fleet that
must grow first) still goes through the playbook. The ``gpufleet`` command asks for that. ::

    from gpufleet import api

    fleet = api.apply("fleet.dstack.yml")                   # a file, or the config as a dict
    run = api.run_task({"type": "task", "name": "hello", "nodes": 2,
                        "commands": ["echo rank $DSTACK_NODE_RANK"]})
    run["status"], [job["exit_code"] for job in run["jobs"]]
    api.logs("hello")["ranks"]                             # [{"rank": 0, "lines": [...]}, ...]
    api.delete("fleet.dstack.yml")

Configurations are given as a path (``str`` or ``os.PathLike``; a relative path is taken
from the current directory) or as the mapping a dstack file holds. Progress comes as
ansible-runner events to ``on_event(event)`` while a playbook runs (``event["event"]`` is
``runner_on_ok``, ``runner_on_failed``, ``verbose``...; a followed run's log lines are
``verbose`` events whose ``stdout`` is ``[run-rank] line``).

Every failure raises :class:`GpufleetError`: a configuration that does not validate, a
playbook that cannot start, a host that is not ready, a run that does not end ``done``.
"""

from __future__ import annotations

import contextlib
import os
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from ._collection import CollectionNotFound, config_model, ensure_importable, errors, text
from . import runner
from .runner import PlaybookResult, RunnerError, progress_printer

Config = str | os.PathLike | Mapping
OnEvent = Callable[[dict], Any]

__all__ = [
    "GpufleetError",
    "validate",
    "plan",
    "apply",
    "delete",
    "delete_fleet",
    "delete_volume",
    "run_task",
    "wait",
    "runs",
    "status",
    "logs",
    "metrics",
    "stop",
    "attach",
    "detach",
    "fleets",
    "whoami",
    "token",
    "fleet_members",
    "grant",
    "revoke",
    "limit",
    "volumes",
    "offers",
    "usage",
    "events",
    "notify_add",
    "notify_list",
    "notify_remove",
    "local_ide_version",
    "CommandError",
    "CollectionNotFound",
    "validate_file",
    "shorten",
    "fleet_name",
    "random_run_name",
    "ports_problem",
    "fleet_lock",
    "refresh_catalog",
    "secret_store",
    "check_secret_name",
    "progress_printer",
    "ensure_importable",
]


if TYPE_CHECKING:   # mypy finds the collection on MYPYPATH
    from ansible_collections.gpufleet.cluster.plugins.module_utils.core.errors import (
        GpufleetError as _CoreError,
    )
else:   # at run time it is found through the collections path
    _CoreError = errors().GpufleetError


class GpufleetError(_CoreError):
    """What went wrong, and where.

    A subclass of the collection's root error (``core.errors.GpufleetError``, which every
    error of the modules, plugins and ``gpufleet.direct`` derives from): every failure of a
    function here is raised as this class, so ``except GpufleetError`` catches them all.

    ``message``: for a person. ``host``: the host (or instance) it concerns, when one does.
    ``failures``: every ``{"host", "task", "msg"}`` that ended a host's play. ``record``: the
    fleet, run or volume record as far as it got (a failed run's jobs and exit codes, a fleet
    whose hosts failed their checks), else None. ``result``: the playbook's
    :class:`gpufleet.runner.PlaybookResult`, or None when no playbook ran.
    """

    def __init__(self, message: str, host: str | None = None, failures=(), record=None,
                 result: PlaybookResult | None = None):
        super().__init__(f"{host}: {message}" if host else message)
        self.message = message
        self.host = host
        self.failures = list(failures)
        self.record = record
        self.result = result


class CommandError(GpufleetError):
    """An operation that ran in this process and failed (``result`` is None, but it is not a
    playbook that could not start: the ``gpufleet`` command exits 1, as for a failed
    playbook)."""


class _Options:
    """What every call may be told: ``state_dir`` (else $GPUFLEET_STATE_DIR...),
    ``backend_settings`` (the cloud backends' settings for apply, plan, delete and fleets; the
    task commands read ``backends.yml`` in the state dir), ``fleet_files`` (SSH fleets' files
    the task commands may use), ``on_event``, ``output`` (a writable file such as sys.stdout:
    a run's log lines and its jobs' changes are written there as they come, instead of coming
    to ``on_event``, so that no size of output is held in memory) and ``private_data_dir``
    (where ansible-runner keeps its files; a temporary directory by default)."""

    def __init__(self, state_dir=None, backend_settings=None, fleet_files=(), on_event=None,
                 private_data_dir=None, output=None):
        self.state_dir = os.path.abspath(os.path.expanduser(state_dir)) if state_dir else None
        self.backend_settings = backend_settings
        self.fleet_files = [os.path.abspath(os.fspath(p)) for p in fleet_files or ()]
        self.on_event = on_event
        self.private_data_dir = private_data_dir
        self.output = output

    def extravars(self, **given):
        variables = {k: v for k, v in given.items() if v is not None}
        if self.state_dir:
            variables["gpufleet_state_dir"] = self.state_dir
        if self.backend_settings:
            variables["gpufleet_backend_settings"] = dict(self.backend_settings)
        if self.fleet_files:
            variables["gpufleet_fleet_files"] = list(self.fleet_files)
        return variables

    def here(self):
        """The options of a call answered in this process (gpufleet/direct.py)."""
        found = {"fleet_files": list(self.fleet_files)}
        if self.state_dir:
            found["state_dir"] = self.state_dir
        return found

    def lines(self):
        """Where a call answered in this process writes its lines: ``output``, else
        ``on_event`` (see :class:`_Events`)."""
        return self.output if self.output is not None else _Events(self.on_event, "verbose")

    def play(self, playbook, variables, check=False, on_event=None):
        try:
            return runner.run_playbook(playbook, variables, check=check,
                                       on_event=on_event or self.on_event,
                                       private_data_dir=self.private_data_dir,
                                       **({"output": self.output} if self.output else {}))
        except (RunnerError, CollectionNotFound) as exc:
            raise GpufleetError(str(exc)) from None


class _Events:
    """A writable file that hands each text written to it to ``on_event`` as an event of
    ``kind`` (``verbose`` for a run's lines, ``warning``), as a playbook's lines come:
    ``{"event": kind, "stdout": text without its last newline, "in_process": True}``. The
    text is exactly what the call printed (blank lines kept); ``in_process`` says so."""

    def __init__(self, on_event, kind):
        self.on_event = on_event
        self.kind = kind

    def write(self, text):
        if self.on_event is not None and text:
            self.on_event({"event": self.kind, "in_process": True,
                           "stdout": text[:-1] if text.endswith("\n") else text})
        return len(text)

    def flush(self):
        pass


def _direct():
    """gpufleet/direct.py: the modules' functions, called in this process."""
    from . import direct

    return direct


def _read(config: Config, types: Iterable[str]):
    """(normalized config, what to pass the playbook): an absolute path or the mapping."""
    model = config_model()
    if isinstance(config, Mapping):
        where = "inline config"
        try:
            normalized, _warnings = model.parse_data(dict(config), where)
        except model.SpecError as exc:
            raise GpufleetError(_problems(exc.as_dicts(), where)) from None
        given: dict | str = dict(config)
    elif isinstance(config, (str, os.PathLike)):
        path = os.path.abspath(os.path.expanduser(os.fspath(config)))
        result = model.validate_file(path)
        if not result["ok"]:
            raise GpufleetError(_problems(result["errors"], path))
        normalized, given = result["config"], path
    else:
        raise GpufleetError(f"a configuration is a path or a mapping, not {type(config).__name__}")
    if normalized["type"] not in types:
        raise GpufleetError(f"{given if isinstance(given, str) else 'inline config'}: this is a "
                            f"{normalized['type']} configuration; expected "
                            f"{' or '.join(types)}")
    return normalized, given


_TASK_OPTIONS = ("name", "env", "fleets", "array", "ide_version", "after")
# The configurations that are runs: tasks, dev environments and services.
RUN_TYPES = ("task", "dev-environment", "service")


def _check_array(array, given):
    """``array`` checked here with the model's parser (the task module parses it again)."""
    model = config_model()
    from ansible_collections.gpufleet.cluster.plugins.module_utils.spec import overrides

    where = given if isinstance(given, str) else "inline config"
    try:
        overrides.parse_array(array, where)
    except model.SpecError as exc:
        raise GpufleetError(_problems(exc.as_dicts(), where)) from None


def _after(after):
    """``after`` (``RUN[:ok|notok|any]`` items) checked here with the queue's own parser (the
    task module reads them again): the list task.yml takes, or None."""
    if not after:
        return None
    if isinstance(after, str):
        after = [after]
    from ansible_collections.gpufleet.cluster.plugins.module_utils.automation import dependencies

    try:
        parsed = dependencies.parse(after)
    except dependencies.DependencyError as exc:
        raise GpufleetError(str(exc)) from None
    return ["%s:%s" % (item["run"], item["after"]) for item in parsed]


def _task_overrides(normalized, given, name=None, env=None, fleets=None, ide_version=None):
    """``--name``/``--env``/``--fleet`` (and a dev environment's ``ide_version``) checked here
    with the model's own parser (the task module applies them again), and the extra vars that
    carry them to task.yml."""
    if not (name or env or fleets or ide_version):
        return {}
    model = config_model()
    from ansible_collections.gpufleet.cluster.plugins.module_utils.spec import overrides

    where = given if isinstance(given, str) else "inline config"
    try:
        overrides.apply_overrides(normalized, env=env, name=name, fleets=fleets, source=where,
                                  ide_version=ide_version)
    except model.SpecError as exc:
        raise GpufleetError(_problems(exc.as_dicts(), where)) from None
    return {"gpufleet_task_name": name or None,
            "gpufleet_task_env": (dict(env) if isinstance(env, Mapping) else list(env))
            if env else None,
            "gpufleet_task_fleets": ([fleets] if isinstance(fleets, str) else list(fleets))
            if fleets else None,
            "gpufleet_task_ide_version": ide_version or None}


def _problems(problems, where):
    """One message for the model's problems (``{"path", "message"}``), each naming where."""
    return "; ".join(f"{where}: {p['path'] + ': ' if p['path'] else ''}{p['message']}"
                     for p in problems)


def _failed(result: PlaybookResult, record=None, what="the playbook failed"):
    """The GpufleetError for a playbook that did not succeed."""
    failures = result.failures
    if failures:
        first = failures[0]
        return GpufleetError(first["msg"], host=first["host"] or None, failures=failures,
                             record=record, result=result)
    lines = result.failure_lines()
    return GpufleetError("; ".join(lines) or what, record=record, result=result)


def validate(config: Config) -> dict:
    """The normalized configuration (fleet, task or volume); GpufleetError naming every
    problem (file, field path, what to do) when it is not valid."""
    return _read(config, ("fleet", "task", "volume"))[0]


def unreachable_of(record: Mapping) -> dict:
    """``{instance name: error}``: the hosts of an SSH fleet's plan (:func:`plan`'s record)
    that could not be reached, for :func:`apply`'s ``unreachable`` in the same command. A
    backend fleet's hosts are left out: one being made may answer later."""
    if not isinstance(record, Mapping) or record.get("fleet_type") != "ssh":
        return {}
    return dict((i["name"], i.get("error") or "no answer over SSH")
                for i in record.get("instances") or []
                if isinstance(i, Mapping) and i.get("status") == "unreachable")


def plan(config: Config, delete: bool = False, name: str | None = None,
         env: Iterable[str] | Mapping[str, str] | None = None,
         fleets: Iterable[str] | None = None, array: str | None = None,
         ide_version: str | None = None, after: Iterable[str] | None = None,
         **options: Any) -> dict:
    """What applying ``config`` (or, with ``delete``, deleting it) would do, changing nothing:
    the playbooks in check mode.

    A fleet: its record with ``plan`` (instances to create, keep and remove; offers of a cloud
    fleet). A task: the run record with ``plan`` (fleet, and the host of each job) and
    ``config``; ``name``, ``env`` and ``fleets`` as for :func:`run_task`. A volume: its record
    (status ``submitted`` when it would be created). A gateway: the record of its host's fleet,
    as for a fleet.
    """
    opts = _Options(**options)
    kinds = ("fleet", "volume", "gateway") if delete else \
        ("fleet",) + RUN_TYPES + ("volume", "gateway")
    normalized, given = _read(config, kinds)
    kind = normalized["type"]
    if kind not in RUN_TYPES and (name or env or fleets or array or ide_version or after):
        raise GpufleetError("name, env, fleets, array, ide_version, after: only for tasks, dev "
                            "environments and services")
    if kind in ("fleet", "gateway"):   # a gateway's host is a fleet (gateway.yml imports it)
        result = opts.play("delete.yml" if delete else "fleet.yml", opts.extravars(fleet=given),
                           check=True)
        return _fleet_record(result)
    if kind == "volume":
        result = opts.play("volume.yml", opts.extravars(
            volume=given, gpufleet_volume_state="absent" if delete else None), check=True)
        return _stat(result, "gpufleet_volume")
    if array is not None:
        _check_array(array, given)
    result = opts.play("task.yml", opts.extravars(
        task=given, gpufleet_task_array=array, gpufleet_task_after=_after(after),
        **_task_overrides(normalized, given, name, env, fleets, ide_version)), check=True)
    record = result.stats.get("gpufleet_run")
    if not record or not (record.get("plan") or record.get("waits")):
        raise _run_error(result, record, "no fleet has room for the run")
    return record


def apply(config: Config, roles: Iterable[str] = (), unreachable: Mapping | None = None,
          **options: Any) -> dict:
    """Make ``config`` real, as ``gpufleet apply -f`` does.

    A fleet: provisioned (backend fleets) or adopted (SSH fleets), every host checked, measured
    and claimed, and ``roles`` (host roles such as ``["docker", "nvidia"]``) applied; returns
    the fleet record, or raises GpufleetError naming the first host that is not ready (the
    record is on the error). ``unreachable`` (``{instance name: error}``): hosts a plan made a
    moment ago could not reach; they are reported unreachable with that error and not tried
    again (:func:`unreachable_of` takes them from a plan's record). A volume: created or
    registered; returns its record. A gateway: its host made (a one-node fleet) and set up;
    returns its record (:func:`gateways`' shape). A task: see
    :func:`run_task` (``wait``, ``run_args``, ``secrets`` go there).
    """
    normalized, given = _read(config, ("fleet",) + RUN_TYPES + ("volume", "gateway"))
    if normalized["type"] in RUN_TYPES:
        if roles:
            raise GpufleetError("roles: only for fleets")
        return run_task(given, **options)
    task_only = {"wait", "run_args", "secrets", "check", "image_source", "show_plan",
                 *_TASK_OPTIONS} & set(options)
    if task_only:
        raise GpufleetError(f"{', '.join(sorted(task_only))}: only for tasks")
    opts = _Options(**options)
    if normalized["type"] == "volume":
        result = opts.play("volume.yml", opts.extravars(volume=given))
        record = result.stats.get("gpufleet_volume")
        if record is None or not result.ok:
            raise _failed(result, record)
        return record
    if unreachable and normalized["type"] != "fleet":
        raise GpufleetError("unreachable: only for fleets")
    if normalized["type"] == "gateway":
        if roles:
            raise GpufleetError("roles: only for fleets")
        result = opts.play("gateway.yml", opts.extravars(gateway=given))
        record = result.stats.get("gpufleet_gateway")
        if record is None or not result.ok:
            raise _failed(result, record)
        return record
    variables = opts.extravars(fleet=given)
    if roles:
        variables["gpufleet_fleet_roles"] = list(roles)
    if unreachable:
        variables["gpufleet_fleet_unreachable"] = dict(unreachable)
    result = opts.play("fleet.yml", variables)
    record = _fleet_record(result)
    broken = [i for i in record.get("instances") or [] if i.get("error")]
    if broken:
        raise GpufleetError(broken[0]["error"], host=broken[0]["name"],
                            failures=result.failures, record=record, result=result)
    if not result.ok:
        raise _failed(result, record)
    return record


def delete(config: Config, force: bool = False, **options: Any) -> dict:
    """Delete a fleet (remove a backend fleet's nodes, release an SSH fleet's hosts) or a
    volume. Returns the record with what was removed; deleting what is gone does nothing.
    A fleet that still runs a task, or whose hosts cannot be checked (they do not answer, or
    their key is missing from the state dir), is refused naming the hosts; ``force`` deletes
    it anyway, with whatever runs there. A gateway's host goes as a fleet's does, and the
    services it published are no longer reachable there."""
    opts = _Options(**options)
    normalized, given = _read(config, ("fleet", "volume", "gateway"))
    if normalized["type"] == "volume":
        result = opts.play("volume.yml", opts.extravars(
            volume=given, gpufleet_volume_state="absent"))
        record = result.stats.get("gpufleet_volume")
        if record is None or not result.ok:
            raise _failed(result, record)
        return record
    result = opts.play("delete.yml", opts.extravars(
        fleet=given, gpufleet_refuse_busy=False if force else None))
    record = _fleet_record(result)
    if not result.ok:
        raise _failed(result, record)
    return record


def gateways(verbose: bool = False, **options: Any) -> list:
    """Gateway records as ``gpufleet gateway`` lists them (playbooks/gateway_list.yml): every
    gateway this controller knows, the default first, each one's host asked what it serves."""
    opts = _Options(**options)
    result = opts.play("gateway_list.yml", opts.extravars(gpufleet_verbose=bool(verbose)))
    records = result.stats.get("gpufleet_gateways")
    if records is None:
        raise _failed(result)
    return records


def delete_gateway(name: str, check: bool = False, **options: Any) -> dict:
    """Delete the gateway named ``name`` (its host, found as fleets are), as ``gpufleet gateway
    delete NAME`` does; GpufleetError when no gateway has that name. Returns its host's fleet
    record (with ``removed``)."""
    if not any(r.get("name") == name for r in gateways(**options)):
        raise GpufleetError(f"Gateway {name} does not exist (gpufleet gateway lists them)")
    return delete_fleet(name, check=check, force=True, **options)


def volume_config(record: Mapping) -> dict:
    """The volume file that deletes the volume a listing record describes: its backend, region
    and zone, and its volume_id when it was registered (so that only the marks go)."""
    config = {"type": "volume", "name": record["name"], "backend": record["backend"]}
    if record["backend"] != "local":
        config["region"] = record["region"]
        if record.get("availability_zone"):
            config["availability_zone"] = record["availability_zone"]
    if record.get("external") and record.get("volume_id"):
        config["volume_id"] = record["volume_id"]
    else:
        config["size"] = "%sGB" % (record.get("size") or 1)
    return config


def delete_volume(name: str, **options: Any) -> dict:
    """Delete the volume named ``name``, as ``gpufleet volume delete NAME`` does: found in the
    listing (:func:`volumes`), then deleted as its file would be (a volume in use is refused).
    GpufleetError when no volume, or more than one, has that name."""
    found = [r for r in volumes(**options) if r.get("name") == name]
    if not found:
        raise GpufleetError(f"Volume {name} does not exist (gpufleet volume lists them)")
    if len(found) > 1:
        raise GpufleetError(f"{len(found)} volumes are named {name} ("
                            + ", ".join(f"{r['backend']} {r['region']}" for r in found)
                            + "): delete one with its file, gpufleet delete -f <volume file>")
    return delete(volume_config(found[0]), **options)


def delete_fleet(name: str, instances: Iterable[int] | None = None, check: bool = False,
                 force: bool = False, **options: Any) -> dict:
    """Delete the fleet named ``name``, as ``gpufleet fleet delete NAME`` does: found from the
    file this controller applied it from, else from the backends' labels and tags.

    ``instances``: delete only those instance numbers (a backend fleet's instances are removed,
    an SSH fleet's hosts released) and keep the fleet; numbers it does not have are left out.
    A fleet, or an instance, still running a task is refused, naming the runs, and so is one
    whose hosts cannot be checked (naming them and why); ``force`` skips that check for the
    whole fleet (busy and unchecked hosts go with it) and, with ``instances``, the check of
    hosts that cannot be asked (busy instances are always refused). ``check``: only
    say what would be deleted (the playbook in check mode), refusals included. Returns the
    fleet record (with ``removed``; with ``instances``, its ``plan`` names the instances
    removed or released). GpufleetError ``Fleet NAME does not exist`` when no fleet has that
    name.
    """
    if not isinstance(name, str) or not name:
        raise GpufleetError("delete_fleet() takes a fleet's name; for a file, use delete()")
    opts = _Options(**options)
    nums = None
    if instances is not None:
        try:
            nums = [int(n) for n in ([instances] if isinstance(instances, int) else instances)]
        except (TypeError, ValueError):
            raise GpufleetError("instances are instance numbers, got %r" % (instances,)) from None
    result = opts.play("delete.yml", opts.extravars(
        fleet_name=name, gpufleet_instances=nums,
        gpufleet_refuse_busy=False if force else None), check=check)
    record = _fleet_record(result)
    if not result.ok:
        raise _failed(result, record)
    return record


def run_task(task: Config, wait: bool = True, check: bool = True,
             run_args: Iterable[str] | None = None,
             secrets: Mapping | None = None, image_source: str | None = None,
             name: str | None = None, env: Iterable[str] | Mapping[str, str] | None = None,
             fleets: Iterable[str] | None = None, array: str | None = None,
             ide_version: str | None = None, show_plan: bool = False, in_process: bool = False,
             user: str | None = None, after: Iterable[str] | None = None,
             **options: Any) -> dict:
    """Run a task on a fleet (one container per node, dstack's variables, MPI hostfile, SSH).

    ``wait``: follow the run to its end (its log lines come to ``on_event``) and return the
    run record (``status``, ``reason``, ``message``, ``jobs`` with each rank's host and
    ``exit_code``); ``wait=False`` returns once every container started. ``check``: raise
    GpufleetError, with the record and the failing job's host, when the run does not end
    ``done`` (``check=False`` returns the record instead). ``run_args`` fill
    ``${{ run.args }}``, ``secrets`` ``${{ secrets.NAME }}``. ``name``, ``env`` (``NAME=value``
    strings or a mapping) and ``fleets`` (fleet names) are ``dstack apply``'s ``--name``,
    ``--env`` and ``--fleet``: they win over the file's ``name``, ``env`` and ``fleets``.
    ``array`` (``"1-100%10"``, Slurm's syntax) submits one run ``<name>-<index>`` per index;
    the record is then the array's, with ``runs``. ``ide_version``: a dev environment's IDE
    version when its file sets none (:func:`local_ide_version` reads the one on this machine,
    as ``gpufleet apply`` does). ``show_plan``: once the run is placed, its plan table (what
    :func:`plan` returns, as ``gpufleet apply`` prints it) comes to ``on_event`` (or
    ``output``) before the run's own lines, without a planning pass of its own.
    ``in_process``: a detached run (``wait=False``) of a task file is submitted in this
    process, as task.yml's task action submits it, when that is all the playbook would do
    (no ``array``, ``run_args``, ``secrets``, ``image_source``; no secrets from the store, no
    fleet that must grow first: those still go through task.yml). Its lines go to ``output``,
    else to ``on_event`` (``verbose`` events; its warnings as ``warning`` events). ``user``:
    who submits the run (kept in its records on the hosts, shown by :func:`runs`); default
    ``$GPUFLEET_USER``, else the login name. ``after`` (``["prep", "train:any"]``, Slurm's
    ``--dependency``): the runs (or job arrays) it runs after, each ``RUN`` or
    ``RUN:ok|notok|any``; it waits as ``pending`` (reason ``dependency``) until they end so,
    and ends ``terminated`` (``dependency_failed``) when one cannot.
    """
    opts = _Options(**options)
    after = _after(after)
    if (in_process and not wait and isinstance(task, (str, os.PathLike)) and array is None
            and run_args is None and not secrets and image_source is None and not after):
        record = _submit_here(opts, task, name, env, fleets, ide_version, show_plan, user)
        if record is not None:
            if check and record.get("failed"):
                raise CommandError(record.get("msg") or "the run %s did not start"
                                   % record.get("run"), record=record)
            return record
    normalized, given = _read(task, RUN_TYPES)
    if array is not None:
        _check_array(array, given)
    variables = opts.extravars(task=given, **_task_overrides(normalized, given, name, env, fleets,
                                                             ide_version),
                               gpufleet_task_array=array, gpufleet_task_after=after,
                               gpufleet_task_wait=bool(wait),
                               gpufleet_task_logs=bool(wait), gpufleet_run_args=run_args,
                               gpufleet_secrets=dict(secrets) if secrets else None,
                               gpufleet_image_source=image_source,
                               gpufleet_task_show_plan=True if show_plan else None,
                               gpufleet_user=user)
    result = opts.play("task.yml", variables)
    return _ended(result, result.stats.get("gpufleet_run"), wait, check)


def _submit_here(opts, task, name, env, fleets, ide_version, show_plan, user=None):
    """run_task's in-process submission (gpufleet.direct.submit): the run's record, or None
    when task.yml must submit it. A Ctrl-C here is marked ``in_process`` (nothing of a
    playbook was started)."""
    try:
        return _direct().submit(
            os.path.abspath(os.path.expanduser(os.fspath(task))), opts.lines(),
            _Events(opts.on_event, "warning"), **opts.here(), name=name, env=env, fleets=fleets,
            ide_version=ide_version, show_plan=bool(show_plan),
            **({"user": user} if user else {}))
    except KeyboardInterrupt as exc:
        exc.in_process = True
        raise


def wait(run: str, check: bool = True, job: int | None = None, since: str | None = None,
         **options: Any) -> dict:
    """Follow a run until it ends (its log lines come to ``on_event``; only ``job``'s, without
    the rank prefix, when given; from ``since`` as logs() takes it); returns its record, or
    raises GpufleetError when it did not end ``done`` and ``check`` is true."""
    opts = _Options(**options)
    result = opts.play("logs.yml", opts.extravars(run=run, gpufleet_follow=True,
                                                  gpufleet_job=job, gpufleet_since=since))
    record = result.stats.get("gpufleet_run")
    if record is None or not result.ok:
        raise _failed(result, record)
    return _ended(result, record, True, check)


def runs(in_process: bool = False, user: str | None = None, **options: Any) -> dict:
    """Every run the fleets' hosts hold, as ``gpufleet ps`` lists them: ``{"runs": [records,
    newest first], "unreachable": {host: error}, "unread": {fleet: {host: reason}}}`` (hosts
    that did not answer, and the fleets they leave unread: their runs are not listed). Each
    record's ``user`` is who submitted the run (None for a run made before runs named their
    user); ``user`` lists only that user's runs (every user's by default, as ``squeue``).
    ``in_process``: ps.yml's modules' functions, called in this process."""
    opts = _Options(**options)
    if in_process:
        return _direct().runs(**opts.here(), **({"user": user} if user else {}))
    result = opts.play("ps.yml", opts.extravars(gpufleet_ps_user=user or None))
    found = result.stats.get("gpufleet_runs")
    if found is None:
        raise _failed(result)
    return {"runs": found, "unreachable": result.stats.get("gpufleet_unreachable") or {},
            "unread": result.stats.get("gpufleet_unread") or {}}


def status(run: str | None = None, **options: Any) -> list | dict:
    """The records of every run, newest first; with ``run``, that run's record (GpufleetError
    when no host holds it)."""
    found = runs(**options)["runs"]
    if run is None:
        return found
    for record in found:
        if record.get("name") == run:
            return record
    raise GpufleetError(f"no run named {text().shorten(run)}")


def logs(run: str, tail: int | None = None, job: int | None = None, since: str | None = None,
         stream: bool = False, in_process: bool = False, **options: Any) -> dict:
    """A run's logs, as its hosts keep them (also after its containers are gone): ``{"run":
    record, "lines": ["[run-rank] line", ...], "ranks": [{"rank": 0, "lines": [...]}, ...]}``.
    ``tail`` keeps each job's last lines; ``job`` only that job's (its lines unprefixed, as
    ``dstack logs --job``); ``since`` a duration back from now (``10m``) or an RFC 3339 time
    with its offset. With ``stream``, the lines are shown as they are read, a page at a time
    (to ``output`` when given, else to ``on_event``), and ``lines`` is empty: what the
    gpufleet command does for any size of output. ``in_process``: a streamed read without
    ``tail`` is logs.yml's module's function, called in this process."""
    opts = _Options(**options)
    if in_process and stream and tail is None:
        record = _direct().logs(run, opts.lines(), job=job, since=since, **opts.here())
        return {"run": record, "lines": [], "ranks": []}
    result = opts.play("logs.yml", opts.extravars(
        run=run, gpufleet_tail=tail, gpufleet_job=job, gpufleet_since=since,
        gpufleet_stream=True if stream else None))
    if not result.ok:
        raise _failed(result)
    return {"run": result.stats.get("gpufleet_run"),
            "lines": result.stats.get("gpufleet_log_lines") or [],
            "ranks": result.stats.get("gpufleet_log_ranks") or []}


def metrics(run: str, job: int | None = None, **options: Any) -> dict:
    """A run's metrics over the last hour, as ``dstack metrics`` shows them: ``{"run",
    "status", "newest", "jobs": [{"job_num", "host", "status", "cpus", "cpu_percent",
    "memory_bytes", "memory_total_bytes", "gpus": [{"index", "util_percent", "memory_bytes",
    "memory_total_bytes"}]}], "unreachable_hosts"}``, each series a list of ``[epoch, value]``;
    ``job``: only that job."""
    opts = _Options(**options)
    result = opts.play("metrics.yml", opts.extravars(run=run, gpufleet_job=job))
    record = result.stats.get("gpufleet_metrics")
    if record is None or not result.ok:
        raise _failed(result)
    return record


def events(since: str | None = None, fleet: str | None = None, limit: int | None = None,
           target_fleets: Sequence[str] = (), target_runs: Sequence[str] = (),
           within_fleets: Sequence[str] = (), within_runs: Sequence[str] = (),
           include_target_types: Sequence[str] = (), in_process: bool = False,
           **options: Any) -> dict:
    """What happened to runs, jobs, fleets, instances and members, from the event records the
    fleets' hosts keep (events.yml), as ``gpufleet event`` shows them: ``{"since", "now",
    "events": [{"id", "kind", "at", "recorded_at", "message", "actor", "targets": [{"type",
    "name"}], "host", "run", "status", "reason", "exit_code", ...}], "unreachable": {host:
    error}}``, oldest first. ``since``: a duration back from now (``10m``, ``24h``), a date or
    an RFC 3339 time with its offset; without it, the last ``limit`` (100) events. The filters
    are dstack's: ``target_fleets`` or ``target_runs`` (the events about them),
    ``within_fleets`` (with their instances) or ``within_runs`` (with their jobs),
    ``include_target_types``. ``fleet``: ask only that fleet's hosts. ``in_process``:
    events.yml's module's function, called in this process."""
    opts = _Options(**options)
    chosen = {"target_fleets": list(target_fleets), "target_runs": list(target_runs),
              "within_fleets": list(within_fleets), "within_runs": list(within_runs),
              "include_target_types": list(include_target_types)}
    if in_process:
        return _direct().events(**opts.here(), since=since, fleet=fleet, limit=limit, **chosen)
    result = opts.play("events.yml", opts.extravars(
        gpufleet_since=since, gpufleet_fleet=fleet, gpufleet_events_limit=limit,
        **dict(("gpufleet_events_" + k, v) for k, v in chosen.items() if v)))
    found = result.stats.get("gpufleet_events")
    if found is None or not result.ok:
        raise _failed(result)
    return found


def _webhooks():
    ensure_importable()
    from ansible_collections.gpufleet.cluster.plugins.module_utils.automation import webhooks

    return webhooks


def notify_add(url: str, on: Sequence[str] = (), fleet: str | None = None,
               format: str = "json", name: str | None = None,
               vault_password_file: str | None = None, **options: Any) -> dict:
    """Make the hosts of the reachable fleets (``fleet``: that one's) post their events to
    ``url`` (``gpufleet notify add``): ``{"hook": {"id", "url" (scheme and host only), "on",
    "fleet", "format", "by"}, "set_on": [hosts], "changed", "unreachable": {host: error}}``.
    ``on``: the event kinds (all when empty); ``format``: ``json`` or ``slack``. The URL is a
    credential: it goes to the hosts from this process (never through ansible-runner, whose
    command line and files would hold it), is kept in the secrets store once a host took it
    (``GPUFLEET_NOTIFY_<NAME>``; ``vault_password_file`` as :func:`secret_store`), and is
    never shown. AWX and playbooks use notify.yml with the URL from a vaulted file."""
    hooks = _webhooks()
    try:
        checked = hooks.make_hook(url, list(on), fleet, format, name,
                                  made_id="hook-" + uuid.uuid4().hex[:6])
        store = secret_store(vault_password_file)
        store.names()   # a wrong vault password fails before any host is asked
    except hooks.WebhookError as exc:
        raise GpufleetError(str(exc)) from None
    given = {"operation": "add", "url": checked["url"], "name": checked["id"],
             "on": list(checked["on"]), "fleet": fleet, "format": format}
    answer = _notify(given, True, options)
    store.set(hooks.secret_name(checked["id"]), checked["url"])
    return answer


def notify_remove(name: str, fleet: str | None = None, vault_password_file: str | None = None,
                  in_process: bool = False, **options: Any) -> dict:
    """Take the hook ``name`` off the fleets' hosts and, once no host that could keep it
    was silent, its URL out of the secrets store: ``{"removed_from": [hosts], "changed",
    "unreachable"}``."""
    try:
        key = _webhooks().secret_name(name)
    except _webhooks().WebhookError as exc:
        raise GpufleetError(str(exc).replace("--name", "NAME")) from None
    answer = _notify({"operation": "remove", "name": name, "fleet": fleet}, in_process, options)
    if not answer.get("unreachable") and not fleet:
        store = secret_store(vault_password_file)
        if key in store.names():
            store.delete(key)
    return answer


def notify_list(fleet: str | None = None, in_process: bool = False, **options: Any) -> dict:
    """The hooks the fleets' hosts keep: ``{"hooks": [{"id", "url" (scheme and host only),
    "on", "fleet", "format", "by", "hosts": {host: {"delivered", "failed", "expired",
    "waiting", "last_error", "tick"}}}], "unreachable"}``."""
    return _notify({"operation": "list", "fleet": fleet}, in_process, options)


def _notify(given: dict, in_process: bool, options: dict) -> dict:
    opts = _Options(**options)
    if in_process:
        return _direct().notify(**opts.here(), **given)
    variables = {"gpufleet_notify_operation": given["operation"],
                 "gpufleet_notify_name": given.get("name"),
                 "gpufleet_notify_on": given.get("on") or None,
                 "gpufleet_notify_format": given.get("format"),
                 "gpufleet_fleet": given.get("fleet")}
    result = opts.play("notify.yml", opts.extravars(**variables))
    found = result.stats.get("gpufleet_notify")
    if found is None or not result.ok:
        raise _failed(result)
    return dict((k, v) for k, v in found.items() if k not in ("invocation", "failed"))


def usage(since: str | None = "7d", user: str | None = None, fleet: str | None = None,
          **options: Any) -> dict:
    """GPU-hours and cost per run and per user, from the usage records the fleets' hosts keep
    (usage.yml), as ``gpufleet usage`` shows them: ``{"since", "now", "runs": [{"run",
    "run_id", "user", "fleet", "nodes", "gpus", "submissions", "start", "end", "status",
    "wall_seconds", "gpu_hours", "cost"}], "users": [{"user", "runs", "gpu_hours", "cost"}],
    "unreachable": {host: error}}``. ``since``: a duration back from now (``30m``, ``24h``,
    ``7d``), a date (``2026-11-01``) or an RFC 3339 time with its offset; ``user``, ``fleet``:
    only that user's runs, that fleet's hosts."""
    opts = _Options(**options)
    result = opts.play("usage.yml", opts.extravars(gpufleet_since=since, gpufleet_usage_user=user,
                                                   gpufleet_fleet=fleet))
    found = result.stats.get("gpufleet_usage")
    if found is None or not result.ok:
        raise _failed(result)
    return found


def stop(run: str, abort: bool = False, in_process: bool = False, force: bool = False,
         delete: bool = False, **options: Any) -> dict:
    """Stop every job of a run (TERM, then KILL after its stop_duration; ``abort``: KILL at
    once), then remove its SSH aliases on this controller. Returns the run's record.
    ``delete``: then remove the run from its hosts (``gpufleet delete -f`` of its file; a
    scheduled task's schedule goes with it); the record's ``deleted`` names them.
    Another user's run is refused (GpufleetError naming its owner) unless ``force`` is given
    or this controller's user is an admin of its fleet.
    ``in_process``: stop.yml's one step (the run_stop module's function), in this process."""
    opts = _Options(**options)
    if in_process:
        return _direct().stop(run, abort=bool(abort), **opts.here(),
                              **({"force": True} if force else {}),
                              **({"delete": True} if delete else {})) or {}
    result = opts.play("stop.yml", opts.extravars(run=run, gpufleet_abort=bool(abort),
                                                  gpufleet_force=True if force else None,
                                                  gpufleet_delete=True if delete else None))
    if not result.ok:
        raise _failed(result)
    return result.stats.get("gpufleet_run") or {}


def attach(run: str, job: int = 0, forward: bool = True, ports: dict | None = None,
           **options: Any) -> dict:
    """Reach a run as ``dstack attach`` does: SSH aliases on this machine (``ssh RUN`` lands in
    job ``job``'s container, ``ssh RUN-N`` in job N's) and, with ``forward``, the run's
    ``ports`` forwarded to localhost until :func:`detach`. ``ports`` maps container ports to
    other local ones. Returns ``{"alias", "aliases", "forwards": [{"local_port",
    "container_port", "url"}], "config_file", "status", ...}``."""
    opts = _Options(**options)
    result = opts.play("attach.yml", opts.extravars(
        run=run, gpufleet_job=int(job), gpufleet_forward=bool(forward),
        gpufleet_ports=dict((str(k), int(v)) for k, v in (ports or {}).items()) or None))
    attached = result.stats.get("gpufleet_attach")
    if not result.ok or attached is None:
        raise _failed(result, what="attaching to run %s failed" % run)
    return attached


def detach(run: str, remove: bool = False, **options: Any) -> dict:
    """Close a run's forwarded ports; with ``remove``, remove its SSH aliases and key too."""
    opts = _Options(**options)
    variables = opts.extravars(run=run, gpufleet_forward=False)
    if remove:
        variables["gpufleet_attach_state"] = "absent"
    result = opts.play("attach.yml", variables)
    if not result.ok:
        raise _failed(result, what="detaching from run %s failed" % run)
    return result.stats.get("gpufleet_attach") or {}


def fleets(files: Iterable[str | os.PathLike] = (), health_max_age: int | None = None,
           **options: Any) -> list:
    """Fleet records as ``gpufleet fleet`` lists them: every fleet the backends hold, or the
    fleets of the fleet ``files`` (SSH fleets are listed only from their files).
    ``health_max_age``: read the GPU health of hosts whose health is older than that many
    seconds (list.yml's default when None)."""
    opts = _Options(**options)
    paths = []
    for path in files:
        if not isinstance(path, (str, os.PathLike)):
            raise GpufleetError("fleets() lists fleet files; %r is not a path" % (path,))
        _read(path, ("fleet",))
        paths.append(os.path.abspath(os.fspath(path)))
    result = opts.play("list.yml", opts.extravars(
        fleets=paths,
        gpufleet_health_max_age=None if health_max_age is None else int(health_max_age)))
    return _stat(result, "gpufleet_fleets")


def whoami() -> dict:
    """Who this controller is: ``{"user", "identity_file", "public_key_file", "fingerprint"}``
    (``$GPUFLEET_USER``, else the login name; ``$GPUFLEET_IDENTITY``, else ``~/.ssh/id_ed25519``
    or ``~/.ssh/id_rsa``; the fingerprint of the public key beside it, None when it has none).
    GpufleetError when the user name is not a valid one."""
    ensure_importable()
    from ansible_collections.gpufleet.cluster.plugins.module_utils.teams import identity

    try:
        me = identity.current()
    except identity.IdentityError as exc:
        raise GpufleetError(str(exc)) from None
    return {"user": me.user, "identity_file": me.identity_file,
            "public_key_file": me.identity_file + ".pub" if me.identity_file else None,
            "fingerprint": me.public_key.fingerprint if me.public_key else None}


def _tokens():
    ensure_importable()
    from ansible_collections.gpufleet.cluster.plugins.module_utils.services import tokens

    return tokens


def token(rotate: bool = False, publish: str | None = None,
          vault_password_file: str | None = None, **options: Any) -> dict:
    """This controller user's service token, the Bearer of the fleets' services with ``auth``:
    ``{"user", "token", "published": [fleets], "unread": {fleet: error}}``. It is made on first
    use and kept in the secrets store (:func:`secret_store`, so ``vault_password_file`` as
    there) as ``gpufleet_token_<user>``; this and ``gpufleet token`` are the only places it is
    shown.

    ``publish``: a fleet whose hosts get the token's SHA-256 (the user must be a member; a
    service apply publishes the applying user's on its fleet by itself). ``rotate``: a new
    token replaces the old one in the store, and its digest replaces the old one's on every
    fleet this controller reaches that held it (playbooks/members.yml); the old token stops
    working on a fleet once the new digest is there. GpufleetError when the store cannot be
    opened or the playbook fails; a rotated token is kept in the store even then (``token()``
    gives it, and ``publish`` puts it on a fleet)."""
    user = whoami()["user"]
    tokens = _tokens()
    module = _secret_store()
    try:
        store = module.SecretStore.open(password_file_=vault_password_file)
        made, replaced = tokens.obtain(store, user, rotate=bool(rotate))
    except (module.SecretStoreError, tokens.TokenError) as exc:
        raise GpufleetError(str(exc)) from None
    answer = {"user": user, "token": made, "published": [], "unread": {}}
    if not publish and replaced is None:
        return answer
    variables = {"gpufleet_members_operation": "token", "gpufleet_user": user,
                 "gpufleet_member_token_sha256": tokens.digest(made)}
    if publish:
        variables["fleet_name"] = publish
    if replaced is not None:
        variables["gpufleet_member_replaces_sha256"] = tokens.digest(replaced)
    opts = _Options(**options)
    result = opts.play("members.yml", opts.extravars(**variables))
    found = result.stats.get("gpufleet_members")
    if not result.ok or found is None:
        raise _failed(result)
    answer["published"] = list(found.get("published") or [])
    answer["unread"] = dict(found.get("unread") or {})
    return answer


def _members(name: str, operation: str, check: bool = False, variables: dict | None = None,
             **options: Any) -> dict:
    if not isinstance(name, str) or not name:
        raise GpufleetError("name the fleet")
    opts = _Options(**options)
    given = dict(variables or {})
    if "gpufleet_user" not in given:
        given["gpufleet_user"] = whoami()["user"]
    result = opts.play("members.yml", opts.extravars(
        fleet_name=name, gpufleet_members_operation=operation, **given), check=check)
    found = result.stats.get("gpufleet_members")
    if not result.ok or found is None:
        raise _failed(result)
    return {k: v for k, v in found.items() if k not in ("failed", "invocation")}


def fleet_members(name: str, **options: Any) -> dict:
    """The members of the fleet ``name``, as its hosts hold them (playbooks/members.yml):
    ``{"fleet", "members": [{"user", "role", "fingerprint", "limits", "by"}],
    "default_limits", "doc", "unread": {host: error}}``."""
    return _members(name, "list", **options)


def grant(name: str, user: str, key: str | os.PathLike, admin: bool = False,
          check: bool = False, **options: Any) -> dict:
    """Let ``user`` in on every host of the fleet ``name`` with the public key file ``key``
    (``admin``: as an admin). Only an admin of the fleet may (this controller's user,
    :func:`whoami`). Returns ``{"fleet", "change", "changed", "members"}``."""
    return _members(name, "grant", check=check, variables=dict(
        gpufleet_member=user, gpufleet_member_key=os.path.abspath(os.fspath(key)),
        gpufleet_member_admin=bool(admin)), **options)


def revoke(name: str, user: str, check: bool = False, **options: Any) -> dict:
    """Take ``user`` out of every host of the fleet ``name`` (their key goes, their next SSH
    connection is refused). Returns ``{"fleet", "change", "changed", "members"}``."""
    return _members(name, "revoke", check=check, variables=dict(gpufleet_member=user),
                    **options)


def limit(name: str, user: str | None = None, default: bool = False, runs: int | None = None,
          gpus: int | None = None, nodes: int | None = None, check: bool = False,
          **options: Any) -> dict:
    """Set the caps of ``user`` (or, with ``default``, everyone's default) on the fleet
    ``name``: ``runs``, ``gpus``, ``nodes`` (those not given stay as they are). Returns
    ``{"fleet", "change", "changed", "members"}``."""
    return _members(name, "limit", check=check, variables=dict(
        gpufleet_member=user, gpufleet_member_default=bool(default), gpufleet_member_runs=runs,
        gpufleet_member_gpus=gpus, gpufleet_member_nodes=nodes), **options)


def volumes(**options: Any) -> list:
    """Volume records as ``gpufleet volume list`` lists them: every network volume the cloud
    backends that the backend settings configure hold (found by their tags and labels), newest
    first, and the local volumes of this machine's Docker engine when it answers."""
    opts = _Options(**options)
    result = opts.play("volume_list.yml", opts.extravars())
    records = result.stats.get("gpufleet_volumes")
    if records is None:
        raise _failed(result)
    return records


def offers(config: Config, limit: int = 10, **options: Any) -> dict:
    """The cloud offers a fleet or task would take, cheapest first: ``{"offers": [...],
    "total", "max_price", "rejected", "catalogs", "msg"}``. Nothing is created, no cloud API
    is called."""
    opts = _Options(**options)
    _normalized, given = _read(config, ("fleet",) + RUN_TYPES)
    result = opts.play("offer.yml", opts.extravars(config_file=given,
                                                   gpufleet_offer_limit=int(limit)))
    found = result.stats.get("gpufleet_offers")
    if found is None:
        raise _failed(result)
    return found


def local_ide_version(ide: str) -> tuple:
    """``(version, hint)``: the version of ``ide`` (vscode, cursor, windsurf) on this machine as
    a dev environment's ``version`` takes it (what ``ide_version`` of :func:`run_task` wants),
    read as dstack's CLI reads it; ``(None, hint)`` when it is not found, the hint saying how
    to make it found; ``(None, None)`` for an IDE with nothing to find (zed)."""
    ensure_importable()
    from ansible_collections.gpufleet.cluster.plugins.module_utils.tasks import local_ide

    version = local_ide.detect(ide)
    return version, None if version else local_ide.hint(ide)


def _stat(result, key):
    value = result.stats.get(key)
    if value is None:
        raise _failed(result)
    return value


def _fleet_record(result):
    records = result.stats.get("gpufleet_fleets") or []
    if not records:
        raise _failed(result)
    return records[0]


def _run_error(result, record, fallback):
    message = record and (record.get("msg") or record.get("message"))
    if message:
        return GpufleetError(message, host=_failing_host(record), record=record, result=result)
    return _failed(result, record, fallback)


def _failing_host(record):
    jobs = record.get("jobs") or []
    for job in jobs:
        if job.get("status") == "failed" or job.get("exit_code") not in (None, 0):
            return job.get("host")
    return None


def _ended(result, record, waited, check):
    """A submitted run's record, or the GpufleetError that says why it is not what was asked."""
    name = record and (record.get("run") or record.get("name"))
    if not name:
        raise _run_error(result, record, "the run was not submitted")
    if not check:
        return record
    if waited and record.get("status") != "done":
        raise _run_error(result, record, f"the run {name} ended {record.get('status')}")
    if not waited and record.get("failed"):
        raise _run_error(result, record, f"the run {name} did not start")
    return record


def fleets_with_health(files: Iterable[str | os.PathLike] = (), max_age: int = 0,
                       **options: Any) -> list:
    """:func:`fleets`, with the GPU health of hosts whose health is older than ``max_age``
    seconds read again first (0: every host); ``gpufleet fleet --refresh``."""
    return fleets(files, health_max_age=max_age, **options)


# ---------------------------------------------------------------------------------------------
# What the gpufleet command asks besides the playbooks: answers of this controller alone (the
# checks of a file, a run's name, the apply lock, local ports, catalogs, the secrets store).


def validate_file(path: str | os.PathLike, on_controller: bool = False) -> dict:
    """The verdict on one file, without raising: ``{"file", "ok", "config", "errors",
    "warnings", "unsupported", "runnable"}`` (what ``gpufleet validate --json`` prints).
    ``on_controller``: also what the file names on this controller (its files and local
    repo), which apply refuses with the same messages."""
    config_model()  # makes the collection importable
    if on_controller:
        from ansible_collections.gpufleet.cluster.plugins.module_utils.repos import sources

        return sources.validate_file(os.fspath(path))
    return config_model().validate_file(os.fspath(path))


def shorten(value, limit: int | None = None) -> str:
    """``value`` for a message: whole when short, else its start and its length (user input
    echoed back is shortened by this one helper)."""
    return text().shorten(value) if limit is None else text().shorten(value, limit)


def fleet_name(config: Mapping, path: str | os.PathLike | None = None) -> str:
    """The fleet's name as applying its file makes it (spec.naming: ``name``, else the name
    the file gives); a GpufleetError asking for ``name:`` when the file gives none."""
    config_model()  # makes the collection importable
    from ansible_collections.gpufleet.cluster.plugins.module_utils.spec import naming

    try:
        return naming.fleet_name(dict(config), os.fspath(path) if path is not None else None)
    except naming.NamingError as exc:
        raise GpufleetError(str(exc)) from exc


def random_run_name() -> str:
    """A run name as the task runner draws one for a task without a name."""
    ensure_importable()
    from ansible_collections.gpufleet.cluster.plugins.module_utils.tasks import rankplan

    return rankplan.random_run_name()


def ports_problem(ports) -> str | None:
    """Why a run's ``ports`` cannot be forwarded to this machine (a named local port in
    use), else None: dstack apply checks that before it submits."""
    ensure_importable()
    from ansible_collections.gpufleet.cluster.plugins.module_utils.attach import ports as local

    try:
        local.choose(ports)
    except local.PortError as exc:
        return str(exc)
    return None


@contextlib.contextmanager
def fleet_lock(name: str, on_wait: Callable[[str], Any] | None = None):
    """A context manager that holds the apply lock of the fleet ``name`` (fleets/lock.py) while
    its block runs, e.g. over :func:`apply`; ``on_wait(message)`` once when another apply of
    it holds the lock. The playbooks run inside it are told that their caller holds it.
    GpufleetError when the lock cannot be had."""
    ensure_importable()
    from ansible_collections.gpufleet.cluster.plugins.module_utils.fleets import lock

    with contextlib.ExitStack() as stack:
        try:
            stack.enter_context(lock.fleet_lock(name, on_wait=on_wait))
        except lock.LockError as exc:
            raise GpufleetError(str(exc)) from None
        before = os.environ.get(lock.HELD_ENV)
        os.environ[lock.HELD_ENV] = lock.holding(name)[lock.HELD_ENV]
        try:
            yield
        finally:
            if before is None:
                os.environ.pop(lock.HELD_ENV, None)
            else:
                os.environ[lock.HELD_ENV] = before


def refresh_catalog(backend: str, regions: Iterable[str] | None = None,
                    project: str | None = None, output: str | None = None,
                    ship: bool = False) -> dict:
    """Rebuild ``backend``'s offer catalog (aws or gcp) from the cloud's own APIs, as
    ``gpufleet catalog refresh`` does (docs/offers.md), and write it to ``output`` (default:
    ``<state dir>/catalog/<backend>.json``); ``ship`` also rewrites the catalog shipped in this
    checkout. Returns ``{"path", "instance_types", "offers", "regions", "notes", "shipped"}``.
    GpufleetError when the current catalog or the state dir cannot be read, or the cloud's
    client library is missing; CommandError when the refresh itself fails."""
    config_model()  # makes the collection importable
    from ansible_collections.gpufleet.cluster.plugins.module_utils.fleets import state
    from ansible_collections.gpufleet.cluster.plugins.module_utils.offers import (
        catalog,
        refresh,
    )

    root = state.state_dir(None)
    try:
        current, _source = catalog.load(backend, catalog.directory(root))
        settings = (state.backend_settings(root).get(backend) or {})
    except (catalog.CatalogError, state.StateError) as exc:
        raise GpufleetError(str(exc)) from None
    if regions is not None:
        regions = list(regions)
    else:
        regions = settings.get("regions") or sorted(set(
            o["region"] for e in current["instance_types"] for o in e["offers"]))
    try:
        if backend == "aws":
            data = _aws_refresh(refresh, regions, current)
        else:
            data = _gcp_refresh(refresh, regions, current, project or settings.get("project_id"))
    except ImportError as exc:
        raise GpufleetError(f"refreshing the {backend} catalog needs {exc.name}: "
                            f"pip install 'gpufleet[{backend}]'") from None
    except (refresh.RefreshError, catalog.CatalogError) as exc:
        raise CommandError(str(exc)) from None
    except Exception as exc:  # noqa: BLE001 - credentials, network: the libraries' own kinds
        raise CommandError(f"refreshing the {backend} catalog failed: "
                           f"{type(exc).__name__}: {exc}") from None
    path = output or os.path.join(catalog.directory(root), backend + ".json")
    catalog.write(data, path)
    shipped = None
    if ship:
        shipped = os.path.join(os.path.dirname(catalog.__file__), "_catalog_%s.py" % backend)
        with open(shipped, "w") as handle:
            handle.write(catalog.module_source(data))
    return {"path": path, "instance_types": len(data["instance_types"]),
            "offers": sum(len(e["offers"]) for e in data["instance_types"]),
            "regions": regions, "notes": list(data["notes"]), "shipped": shipped}


def _aws_refresh(refresh, regions, current):
    import boto3

    return refresh.aws_catalog(lambda service, region: boto3.client(
        service, region_name=region), regions, previous=current)


def _gcp_refresh(refresh, regions, current, project):
    import google.auth
    from google.auth.transport.requests import AuthorizedSession

    credentials, found = google.auth.default(
        scopes=["https://www.googleapis.com/auth/cloud-platform"])
    session = AuthorizedSession(credentials)

    def get(url, params):
        response = session.get(url, params=params, timeout=120)
        if response.status_code >= 400:
            raise refresh.RefreshError(f"GET {url}: HTTP {response.status_code} "
                                       f"{response.text[:300]}")
        return response.json()

    project = project or found
    if not project:
        raise refresh.RefreshError("no Google Cloud project: pass --project")
    compute = os.environ.get("GPUFLEET_GCP_ENDPOINT") or \
        "https://compute.googleapis.com/compute/v1"
    billing = os.environ.get("GPUFLEET_GCP_BILLING_ENDPOINT") or \
        "https://cloudbilling.googleapis.com"
    return refresh.gcp_catalog(get, project, regions, compute.rstrip("/"), billing.rstrip("/"),
                               previous=current)


def _secret_store():
    config_model()  # makes the collection importable
    from ansible_collections.gpufleet.cluster.plugins.plugin_utils import secret_store

    return secret_store


class _Secrets:
    """The secrets store (:func:`secret_store`): ``read()`` (``{name: value}``), ``names()``,
    ``get(name)``, ``set(name, value)``, ``delete(name)``; each raises GpufleetError with the
    store's message (a wrong vault password, an unknown name...)."""

    def __init__(self, store, errors):
        self._store = store
        self._errors = errors

    def _do(self, method, *args):
        try:
            return getattr(self._store, method)(*args)
        except self._errors as exc:
            raise GpufleetError(str(exc)) from None

    def read(self) -> dict:
        return self._do("read")

    def names(self) -> list:
        return self._do("names")

    def get(self, name: str) -> str:
        _not_a_token(name)
        return self._do("get", name)

    def set(self, name: str, value: str) -> None:
        _not_a_token(name)
        return self._do("set", name, value)

    def delete(self, name: str) -> None:
        return self._do("delete", name)


def _not_a_token(name: str) -> None:
    """A users' service token (:func:`token`) is kept in the store too, but is neither shown
    nor set as a secret."""
    if _tokens().is_store_name(name):
        raise GpufleetError("%s is a service token, not a secret: gpufleet token prints yours "
                            "and gpufleet token --rotate replaces it" % shorten(name))


def secret_store(vault_password_file: str | None = None) -> _Secrets:
    """The secrets tasks reference as ``${{ secrets.NAME }}``, kept in ``<state dir>/
    secrets.yml`` and encrypted with Ansible Vault (plugins/plugin_utils/secret_store.py),
    opened with ``vault_password_file`` (else ANSIBLE_VAULT_PASSWORD_FILE, else
    vault_password_file in ansible.cfg). GpufleetError when there is no vault password."""
    module = _secret_store()
    try:
        store = module.SecretStore.open(password_file_=vault_password_file)
    except module.SecretStoreError as exc:
        raise GpufleetError(str(exc)) from None
    return _Secrets(store, module.SecretStoreError)


def check_secret_name(name: str) -> None:
    """GpufleetError when ``name`` cannot be a secret's name (letters, digits and _, not
    starting with a digit; not a service token's, ``gpufleet_token_*``)."""
    module = _secret_store()
    try:
        module.check_name(name)
    except module.SecretStoreError as exc:
        raise GpufleetError(str(exc)) from None
    _not_a_token(name)
