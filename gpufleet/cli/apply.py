"""``gpufleet apply`` and ``gpufleet delete``: fleets, tasks, volumes and gateways from their
files."""

from __future__ import annotations

import contextlib
import os

from . import attach as attach_cli
from . import common


def add_apply(commands):
    """Add ``gpufleet apply`` to the command parser."""
    apply = commands.add_parser(
        "apply",
        help="create or update a fleet, or run a task, from a dstack file",
        description=(
            "A fleet file: show what applying it changes, ask, then apply it with "
            "playbooks/fleet.yml (provision backend fleets, check, measure and claim the hosts) "
            "and print the fleet; exits 0 when every host is ready. A task file: show where it "
            "would run, ask, then run it with playbooks/task.yml and stay attached, streaming "
            "every node's log prefixed with its rank, until it ends; exits 0 when it ends done. "
            "A volume file: create the volume, or register its volume_id, with "
            "playbooks/volume.yml. A gateway file: make its host and set it up with "
            "playbooks/gateway.yml, and print the gateway."
        ),
    )
    apply.add_argument("-f", "--file", required=True, metavar="FILE",
                       help="the fleet or task file")
    apply.add_argument("-y", "--yes", action="store_true", help="apply without asking")
    apply.add_argument("-v", "--verbose", action="store_true",
                       help="show every task result while applying")
    apply.add_argument("-d", "--detach", action="store_true",
                       help="tasks: return once the run's containers are started")
    apply.add_argument("-n", "--name", dest="run_name", metavar="RUN_NAME",
                       help="tasks: the run's name, instead of the file's name")
    apply.add_argument("-e", "--env", action="append", default=[], metavar="KEY[=VALUE]",
                       help="tasks: an environment variable over the file's env (a KEY "
                            "alone takes its value from this environment); repeatable")
    apply.add_argument("--fleet", action="append", default=[], dest="fleets",
                       metavar="NAME", help="tasks: a fleet the run may use, instead of the "
                                            "file's fleets; repeatable")
    apply.add_argument("--vault-password-file", metavar="FILE",
                       help="tasks: the vault password file that opens the secrets store "
                            "(default: ANSIBLE_VAULT_PASSWORD_FILE, else vault_password_file "
                            "in ansible.cfg)")
    apply.add_argument("--array", metavar="INDICES[%N]",
                       help="tasks: a job array, as Slurm writes it (1-100, 1,3,5-7, 0-15:4): "
                            "one run <name>-<index> per index with GPUFLEET_ARRAY_INDEX; %%N: "
                            "at most N runs at a time")
    apply.add_argument("--after", action="append", default=[], metavar="RUN[:ok|notok|any]",
                       help="tasks: run after RUN (or every run of the job array RUN) has "
                            "ended: ok (the default) once done, notok once failed or "
                            "terminated, any in either case, as Slurm's --dependency; it waits "
                            "pending until then; repeatable")
    common.fleet_file_option(apply, "tasks: a fleet file whose hosts the run may use (SSH "
                                    "fleets; backend fleets are found without their files); "
                                    "repeatable")
    apply.set_defaults(handler=_apply)


def add_delete(commands):
    """Add ``gpufleet delete`` to the command parser."""
    delete = commands.add_parser(
        "delete",
        help="delete a fleet, a volume, a gateway or a run",
        description=(
            "Delete the fleet of a dstack fleet file with playbooks/delete.yml: remove a backend "
            "fleet's nodes, or release an SSH fleet's hosts, and the fleet's local files. "
            "A volume file: delete the volume with playbooks/volume.yml (a registered volume "
            "is only released). A gateway file: remove the gateway's host, as a fleet's. A "
            "task, dev environment or service file: stop the run of its name and remove it "
            "from its hosts (a scheduled task's schedule with it)."
        ),
    )
    delete.add_argument("-f", "--file", required=True, metavar="FILE",
                        help="the fleet, volume, gateway or run file")
    delete.add_argument("-y", "--yes", action="store_true", help="delete without asking")
    delete.add_argument("--force", action="store_true",
                        help="delete the fleet even when a task still runs on it or its hosts "
                        "cannot be checked (the runs there go with it); a run's file: delete "
                        "another user's run")
    common.fleet_file_option(delete, "a run's file: a fleet file whose hosts the run may be "
                                     "on (SSH fleets); repeatable")
    delete.set_defaults(handler=_delete)


def _apply(args, out, err) -> int:
    from ..api import GpufleetError, apply, progress_printer, unreachable_of

    path = os.path.abspath(args.file)
    config = common.read_config(path, err, ("fleet", "task", "dev-environment", "service",
                                            "volume", "gateway"))
    if config is None:
        return 1
    if config["type"] in ("task", "dev-environment", "service"):
        return _apply_task(args, path, config, out, err)
    if args.run_name or args.env or args.fleets or args.array or args.after:
        err.write(f"{path}: --name, --env, --fleet, --array and --after apply to tasks; this "
                  f"is a {config['type']} configuration\n")
        return 1
    if config["type"] == "volume":
        return _volume(args, path, "present", out, err)
    if config["type"] == "gateway":
        return _gateway(args, path, out, err)
    tables = common.tables()
    try:
        record = _plan_fleet_and_ask(path, "fleet", args, out, err)
        if record is None:
            return 1
        # The plan's answer for an SSH host it could not reach stands: not waited for twice.
        with _fleet_lock(record["name"], err):
            record = apply(path, unreachable=unreachable_of(record) or None,
                           on_event=progress_printer(err, verbose=args.verbose))
    except GpufleetError as exc:
        if isinstance(exc.record, dict) and exc.record.get("instances") is not None:
            out.write("\n")
            for line in tables.fleet_table([exc.record]):
                out.write(line + "\n")
        return common.failed(exc, err)
    out.write("\n")
    for line in tables.fleet_table([record]):
        out.write(line + "\n")
    return 0


def _plan_fleet_and_ask(path, what, args, out, err):
    """The plan of the hosts a fleet or gateway file makes, printed, then asked about: its
    record, or None when the answer is no (said). GpufleetError from the plan."""
    from ..api import plan

    err.write("Planning...\n")
    record = plan(path)
    for line in common.tables().plan_lines(record):
        out.write(line + "\n")
    out.write("\n")
    if not common.confirm(f"Apply the {what} {record['name']}?", args, out, err):
        out.write("Nothing was changed.\n")
        return None
    return record


@contextlib.contextmanager
def _fleet_lock(name, err):
    """Hold the fleet's apply lock (gpufleet.api.fleet_lock) over the whole playbook, saying
    once on ``err`` when another apply of it holds it; the playbook's module is told that its
    caller holds it."""
    from ..api import fleet_lock

    def waiting(message):
        err.write(message + "\n")
        getattr(err, "flush", lambda: None)()

    with fleet_lock(name, on_wait=waiting):
        yield


def _apply_task(args, path, config, out, err) -> int:
    if not args.vault_password_file:
        return _run_task(args, path, config, out, err)
    # ansible-playbook (through ansible-runner) takes it from the environment.
    before = os.environ.get("ANSIBLE_VAULT_PASSWORD_FILE")
    os.environ["ANSIBLE_VAULT_PASSWORD_FILE"] = os.path.abspath(args.vault_password_file)
    try:
        return _run_task(args, path, config, out, err)
    finally:
        if before is None:
            os.environ.pop("ANSIBLE_VAULT_PASSWORD_FILE", None)
        else:
            os.environ["ANSIBLE_VAULT_PASSWORD_FILE"] = before


def _ide_version(config, err):
    """As dstack apply: a dev environment's IDE version, when the file sets none, is the one of
    the IDE on this machine (None, with a hint, when there is none)."""
    from ..api import local_ide_version

    ide = config.get("ide") if config.get("type") == "dev-environment" else None
    if not ide or config.get("version"):
        return None
    version, hint = local_ide_version(ide)
    if version is None and hint:
        err.write(hint + "\n\n")
    return version


def _run_task(args, path, config, out, err) -> int:
    from ..api import GpufleetError, run_task

    overrides = {"name": args.run_name, "env": args.env, "fleets": args.fleets,
                 "array": args.array, "ide_version": _ide_version(config, err),
                 "after": args.after or None}
    # With -y nothing waits for an answer, so no planning pass runs first: the submission
    # prints the same plan once the run is placed (show_plan). A job array is still planned
    # first (its plan is the first run's, with the array's summary).
    quick = args.yes and not args.array
    try:
        if quick:
            record = {"run": args.run_name or config.get("name") or _random_name(),
                      "config": config}
        else:
            record = _plan_and_ask(args, path, overrides, out, err)
            if record is None:
                return 1
        # A task without a name gets a random one here or in the plan: the run gets that one.
        if not record["config"].get("name"):
            overrides["name"] = record["run"]
        attaching = None
        if not args.detach and not record.get("runs") and (
                (record.get("config") or {}).get("ports")
                or (record.get("config") or {}).get("type") == "dev-environment"):
            # As dstack apply: the ports are forwarded once the run runs (gpufleet attach).
            problem = attach_cli.ports_problem(record["config"].get("ports") or [])
            if problem:
                err.write(f"Failed to submit: {problem}\n")
                return 1
            attaching = attach_cli.Background(record["run"], out, err,
                                              {"fleet_files": common.fleet_files(args)})
        try:
            if attaching is not None:
                attaching.start()
            # Attached, the run's lines come through a pipe (output), however many they are.
            # Detached with -y, nothing to follow: the API submits in this process, as ps and
            # stop are answered, unless task.yml must do more than submit (in_process).
            record = run_task(path, wait=not args.detach, check=False,
                              fleet_files=common.fleet_files(args), **overrides,
                              show_plan=quick, on_event=common.run_printer(out, err),
                              in_process=quick and args.detach,
                              **({} if args.detach else {"output": out}))
        except KeyboardInterrupt as exc:
            if getattr(exc, "in_process", False):
                raise   # no playbook was started: nothing goes on in the background
            return _detached(record, attaching, err)
        except GpufleetError as exc:
            # Ctrl-C reaches the playbook first: it ends "canceled", the run goes on.
            if getattr(exc.result, "status", None) == "canceled":
                return _detached(record, attaching, err)
            if attaching is not None:
                attaching.finish(remove=True)
            raise
        if attaching is not None:
            attaching.finish(remove=True)
    except GpufleetError as exc:
        return common.failed(exc, err)
    if record.get("runs") is not None:
        return _array_summary(record, args, out)
    if args.detach or record.get("rolled") is not None or record.get("next_run"):
        # A running service updated in place: the update is the whole of this apply. A
        # scheduled task: its hosts start it at its times, with nothing to follow now.
        return _submitted(record, out, err)
    status = record.get("status")
    # A run that never got a job started (no capacity, a submission refused) is an error of
    # the submission: stderr, as when the plan said so before asking.
    stream = err if status != "done" and not record.get("jobs") else out
    stream.write(f"Run {record['run']} {status}" +
                 (f": {record['message']}" if record.get("message") else "") + "\n")
    return 0 if status == "done" else 1


def _submitted(record, out, err) -> int:
    """What a detached submission ends with: where the run is, and the exit status."""
    if record.get("status") in ("failed", "terminated"):
        err.write(f"Run {record['run']} {record['status']}" +
                  (f" ({record['reason']})" if record.get("reason") and
                   record["status"] == "terminated" else "") +
                  (f": {record['message']}" if record.get("message") else "") + "\n")
        return 1
    if record.get("status") == "pending" and record.get("reason") == "dependency":
        out.write(f"Run {record['run']} is {record.get('message') or 'waiting'}; it is "
                  "placed once they have ended, by a gpufleet command, a run's end or the "
                  "reconcile schedule (gpufleet ps shows it)\n")
        return 0
    if record.get("status") == "pending" and record.get("next_run"):
        out.write(f"Run {record['run']} is {record.get('message')}; its hosts start it at "
                  f"each time of its schedule (gpufleet ps shows it, gpufleet stop "
                  f"{record['run']} ends the schedule)\n")
        return 0
    if record.get("status") == "pending":
        out.write(f"Run {record['run']} is {record.get('message') or 'waiting'}; it starts "
                  "when capacity frees up and a gpufleet command, a run's end or the "
                  "reconcile schedule moves the queue (gpufleet ps shows it)\n")
        return 0
    out.write(f"Run {record['run']} submitted; follow it with gpufleet logs -f "
              f"{record['run']}\n")
    return 0 if not record.get("failed") else 1


def _plan_and_ask(args, path, overrides, out, err):
    """The planning pass (task.yml in check mode), its table, and the question; the plan's
    record, or None when the answer is no."""
    from ..api import plan

    tables = common.run_tables()
    err.write("Planning...\n")
    record = plan(path, fleet_files=common.fleet_files(args), **overrides)
    if record.get("plan"):
        for line in tables.run_plan_lines(record["config"], record["plan"], path):
            out.write(line + "\n")
    elif record.get("after"):
        out.write(f"No fleet has room for it now ({record.get('waits')}); it is placed once "
                  "the runs it runs after have ended.\n")
    else:
        out.write(f"No fleet has room for it now ({record.get('waits')}).\n"
                  "Its retry policy lets it wait: submitted, it waits in the queue and "
                  "starts when capacity frees up.\n")
    if overrides.get("after"):
        out.write(f"It runs after {', '.join(overrides['after'])}: it waits in the queue "
                  "until then, and is placed where there is room at that time.\n")
    if record.get("rolls"):
        now, wanted = record.get("replicas_now"), (record.get("service") or {}).get("replicas")
        if now is not None and wanted is not None and now != wanted:
            out.write(f"Service {record['run']} is running {now} replica(s) and goes to "
                      f"{wanted}: " + ("the new ones start beside them first. " if wanted > now
                                       else "the last ones leave the proxy and stop. "))
        else:
            out.write(f"Service {record['run']} is running: ")
        out.write("Each replica at an older version is replaced by the new version in turn, "
                  "the next once the one before passes its checks.\n")
        moved = (record.get("service") or {}).get("moved_from")
        if moved:
            out.write(f"Its proxy host {moved} is lost: the proxy on "
                      f"{record['service'].get('proxy_host')} publishes it from now on, at "
                      f"{record['service'].get('url')}\n")
    out.write("\n")
    what = f"the run {record['run']}"
    if record.get("runs"):
        out.write(f"Job array {record['run']}: {len(record['runs'])} runs, "
                  f"{record['runs'][0]} to {record['runs'][-1]} (the plan is the first's)\n")
        what = f"the {len(record['runs'])} runs of the job array {record['run']}"
    if not common.confirm(f"Submit {what}?", args, out, err):
        out.write("Nothing was submitted.\n")
        return None
    return record


def _random_name():
    """A run name as the task runner makes one for a task without a name (dstack's kind)."""
    from ..api import random_run_name

    return random_run_name()


def _detached(record, attaching, err) -> int:
    if attaching is not None:
        attaching.finish(remove=False)
    err.write(f"gpufleet: detached; the run {record['run']} goes on (gpufleet attach "
              f"{record['run']} to attach again, gpufleet stop {record['run']} to stop it)\n")
    return 130


def _array_summary(record, args, out) -> int:
    """The end of ``apply --array``: each run's status and one line for the array."""
    counts: dict[str, int] = {}
    for run in record["runs"]:
        counts[run["status"]] = counts.get(run["status"], 0) + 1
        out.write(f"{run['run']} {run['status']}" +
                  (f": {run['message']}" if run.get("message") else "") + "\n")
    text = ", ".join(f"{n} {status}" for status, n in sorted(counts.items()))
    if args.detach:
        out.write(f"Job array {record['run']} submitted ({text}); gpufleet ps lists its runs, "
                  f"gpufleet stop {record['run']} stops them all\n")
        return 1 if record.get("failed") or counts.get("failed") else 0
    out.write(f"Job array {record['run']} {record['status']}: {text}\n")
    return 0 if record["status"] == "done" else 1


def _volume(args, path, wanted, out, err) -> int:
    """Create (present) or delete (absent) a volume with playbooks/volume.yml, after asking."""
    from ..api import GpufleetError, apply, delete, plan

    try:
        record = plan(path, delete=wanted == "absent")
        doing = "Create" if wanted == "present" else "Delete"
        if wanted == "present" and record["status"] != "submitted":
            out.write(f"Volume {record['name']} exists: {_volume_line(record)}\n")
            return 0
        # A volume that is not there: no id (cloud) and no creation time (local ones have no id).
        if (wanted == "absent" and record["status"] == "terminated" and not record["volume_id"]
                and not record.get("created")):
            out.write(f"Volume {record['name']}: nothing to delete.\n")
            return 0
        if not common.confirm(f"{doing} the volume {record['name']}?", args, out, err):
            out.write("Nothing was changed.\n")
            return 1
        record = apply(path) if wanted == "present" else delete(path)
    except GpufleetError as exc:
        return common.failed(exc, err)
    out.write(f"Volume {record['name']} {'deleted' if wanted == 'absent' else 'ready'}: "
              f"{_volume_line(record)}\n")
    return 0


def _volume_line(record):
    where = record.get("availability_zone") or record.get("region")
    size = f"{record['size']}GB" if record.get("size") else "-"
    return (f"{record['backend']} {where} {size} {record.get('volume_id') or '-'} "
            f"{record['status']}")


def _delete(args, out, err) -> int:
    from ..api import GpufleetError, delete, fleet_name, progress_printer

    path = os.path.abspath(args.file)
    config = common.read_config(path, err, ("fleet", "volume", "gateway", "task",
                                            "dev-environment", "service"))
    if config is None:
        return 1
    if config["type"] == "volume":
        return _volume(args, path, "absent", out, err)
    if config["type"] in ("task", "dev-environment", "service"):
        return _delete_run(args, path, config, out, err)
    what = "gateway" if config["type"] == "gateway" else "fleet"
    try:
        name = fleet_name(config, path)
    except GpufleetError as exc:
        err.write(f"{exc}\n")
        return 1
    if not common.confirm(f"Delete the {what} {name}?", args, out, err):
        out.write("Nothing was deleted.\n")
        return 1
    try:
        record = delete(path, force=args.force, on_event=progress_printer(err))
    except GpufleetError as exc:
        return common.failed(exc, err)
    removed = record.get("removed") or {}
    removed_count = sum(len(v) for v in removed.values())
    out.write(f"{what.capitalize()} {record['name']} deleted.\n" if removed_count else
              f"{what.capitalize()} {record['name']}: nothing to delete.\n")
    return 0


def _delete_run(args, path, config, out, err) -> int:
    """``delete -f`` of a run's file, as dstack's: the run of the file's name, stopped if it
    still goes (a scheduled task's schedule ends), then removed from its hosts."""
    from ..api import GpufleetError, stop

    if not config.get("name"):
        err.write(f"{path}: configuration specifies no run to delete (give it a name)\n")
        return 1
    name = config["name"]
    if not common.confirm(f"Delete the run {name}?", args, out, err):
        out.write("Nothing was deleted.\n")
        return 1
    try:
        record = stop(name, in_process=True, delete=True, fleet_files=common.fleet_files(args),
                      **({"force": True} if args.force else {}))
    except GpufleetError as exc:
        return common.failed(exc, err)
    if not record.get("deleted"):
        err.write(f"Run {name} does not exist\n")
        return 1
    out.write(f"Run {name} deleted.\n")
    return 0


def _gateway(args, path, out, err) -> int:
    """``apply -f`` of a gateway: its host's plan (a one-node fleet), asked, then gateway.yml;
    the gateway's table and where to point its domain."""
    from ..api import GpufleetError, apply, progress_printer

    try:
        record = _plan_fleet_and_ask(path, "gateway", args, out, err)
        if record is None:
            return 1
        with _fleet_lock(record["name"], err):
            gateway = apply(path, on_event=progress_printer(err, verbose=args.verbose))
    except GpufleetError as exc:
        return common.failed(exc, err)
    out.write("\n")
    for line in common.gateway_tables().gateway_table([gateway]):
        out.write(line + "\n")
    if gateway.get("domain") and gateway.get("hostname"):
        out.write(f"\nPoint *.{gateway['domain']} at {gateway['hostname']}: services are "
                  f"published at {'https' if gateway.get('https_port') else 'http'}"
                  f"://<run name>.{gateway['domain']}/\n")
    if gateway.get("ca_file") and gateway.get("certificate") == "self-signed":
        out.write(f"Its certificate is signed by its own CA: {gateway['ca_file']}\n")
    elif gateway.get("ca_file"):
        out.write(f"Each service gets a certificate from the ACME server when it is published "
                  f"(until then, one signed by the gateway's own CA: {gateway['ca_file']})\n")
    return 0
