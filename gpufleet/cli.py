"""``gpufleet``: dstack-like commands over the gpufleet.cluster collection.

``validate`` reads files with the collection's config model; ``apply``, ``fleet``, ``delete``
and ``offer`` run the collection's playbooks (fleet.yml, list.yml, delete.yml, offer.yml...)
through ansible-runner. This
module parses arguments and presents results; the logic lives in the collection.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

from . import __version__
from ._collection import CollectionNotFound, spec


def _fleet_file_option(parser, help_text):
    """``--fleet-file FILE`` (repeatable): fleet files the task commands are told about."""
    parser.add_argument("--fleet-file", action="append", default=[], metavar="FILE",
                        dest="fleet_files", help=help_text)


def _build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="gpufleet",
        description="Run dstack-style GPU fleets and tasks with Ansible (gpufleet.cluster).",
    )
    parser.add_argument("--version", action="version", version=f"gpufleet {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")
    commands.required = True

    validate = commands.add_parser(
        "validate",
        help="check dstack fleet, task and volume files",
        description=(
            "Check dstack configuration files (type: fleet, task, volume). Prints one line per "
            "file, 'ok' or its problems, and exits 0 only if every file is valid."
        ),
    )
    validate.add_argument("files", nargs="+", metavar="FILE", help="configuration files")
    validate.add_argument(
        "--json",
        action="store_true",
        help="print one JSON list with an object per file, including the normalized config",
    )
    validate.set_defaults(handler=_validate)

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
            "playbooks/volume.yml."
        ),
    )
    apply.add_argument("-f", "--file", required=True, metavar="FILE",
                       help="the fleet or task file")
    apply.add_argument("-y", "--yes", action="store_true", help="apply without asking")
    apply.add_argument("-v", "--verbose", action="store_true",
                       help="show every task result while applying")
    apply.add_argument("-d", "--detach", action="store_true",
                       help="tasks: return once the run's containers are started")
    _fleet_file_option(apply, "tasks: a fleet file whose hosts the run may use (SSH fleets; "
                              "backend fleets are found without their files); repeatable")
    apply.set_defaults(handler=_apply)

    ps = commands.add_parser(
        "ps", help="list task runs",
        description="List task runs as dstack ps does, from the labels of their containers.")
    ps.add_argument("-v", "--verbose", action="store_true", help="show resources and errors")
    ps.add_argument("--json", action="store_true", help="print the run records as JSON")
    _fleet_file_option(ps, "an SSH fleet's file (repeatable)")
    ps.set_defaults(handler=_ps)

    logs = commands.add_parser(
        "logs", help="show a run's logs",
        description="Show the logs of every job of a run, each line prefixed with the run "
                    "and rank.")
    logs.add_argument("run", metavar="RUN", help="the run's name")
    logs.add_argument("-f", "--follow", action="store_true",
                      help="keep streaming new lines until the run ends")
    _fleet_file_option(logs, "an SSH fleet's file (repeatable)")
    logs.set_defaults(handler=_logs)

    stop = commands.add_parser(
        "stop", help="stop a run",
        description="Stop every job of a run: TERM, then KILL after its stop_duration.")
    stop.add_argument("run", metavar="RUN", help="the run's name")
    stop.add_argument("-y", "--yes", action="store_true", help="stop without asking")
    stop.add_argument("-x", "--abort", action="store_true", help="kill at once")
    _fleet_file_option(stop, "an SSH fleet's file (repeatable)")
    stop.set_defaults(handler=_stop)

    fleet = commands.add_parser(
        "fleet",
        help="list fleets",
        description=(
            "List fleets as dstack does: every fleet the backends hold, or the fleets of the "
            "given files (SSH fleets are listed only from their files)."
        ),
    )
    fleet.add_argument("-f", "--file", action="append", default=[], metavar="FILE",
                       dest="files", help="a fleet file (repeatable)")
    fleet.add_argument("-v", "--verbose", action="store_true",
                       help="show resources, driver and errors")
    fleet.add_argument("--json", action="store_true", help="print the fleet records as JSON")
    fleet.set_defaults(handler=_fleet)

    delete = commands.add_parser(
        "delete",
        help="delete a fleet or a volume",
        description=(
            "Delete the fleet of a dstack fleet file with playbooks/delete.yml: remove a backend "
            "fleet's nodes, or release an SSH fleet's hosts, and the fleet's local files. "
            "A volume file: delete the volume with playbooks/volume.yml (a registered volume "
            "is only released)."
        ),
    )
    delete.add_argument("-f", "--file", required=True, metavar="FILE",
                        help="the fleet or volume file")
    delete.add_argument("-y", "--yes", action="store_true", help="delete without asking")
    delete.set_defaults(handler=_delete)

    offer = commands.add_parser(
        "offer",
        help="list the cloud offers a fleet or task would take",
        description=(
            "List the cloud offers (instance type, region, on-demand or spot) that a fleet or "
            "task file matches, cheapest first, from the AWS and GCP catalogs, with "
            "playbooks/offer.yml. Nothing is created and no cloud API is called."
        ),
    )
    offer.add_argument("-f", "--file", required=True, metavar="FILE",
                       help="the fleet or task file")
    offer.add_argument("--max-offers", type=int, default=10, metavar="N",
                       help="show at most N offers (default: 10)")
    offer.add_argument("--json", action="store_true",
                       help="print every offer, and why others were ruled out, as JSON")
    offer.set_defaults(handler=_offer)

    catalog_cmd = commands.add_parser(
        "catalog", help="refresh the offer catalogs",
        description="Refresh an offer catalog from the cloud's own APIs (docs/offers.md).")
    catalog_actions = catalog_cmd.add_subparsers(dest="action", metavar="ACTION")
    catalog_actions.required = True
    refresh = catalog_actions.add_parser(
        "refresh", help="rebuild a backend's catalog from its APIs",
        description=(
            "Rebuild a catalog from the cloud's APIs: aws from EC2 (GPU instance types, the "
            "zones offering them, spot prices) and the AWS Price List API, with the credentials "
            "boto3 finds; gcp from the Compute API (machine and accelerator types) and the "
            "Cloud Billing Catalog API, with Application Default Credentials. Writes "
            "<state dir>/catalog/<backend>.json, which every gpufleet command and module on "
            "this controller then uses instead of the shipped catalog."))
    refresh.add_argument("backend", choices=["aws", "gcp"], help="the backend")
    refresh.add_argument("--project", help="gcp: the project whose APIs are asked (default: "
                                           "gcp.project_id of backends.yml, else the "
                                           "credentials' project)")
    refresh.add_argument("--regions", metavar="R1,R2",
                         help="regions to cover (default: aws.regions of backends.yml, else "
                              "the regions of the current catalog)")
    refresh.add_argument("-o", "--output", metavar="FILE",
                         help="where to write the catalog (default: <state dir>/catalog/"
                              "<backend>.json)")
    refresh.add_argument("--ship", action="store_true",
                         help="also rewrite the catalog shipped in this checkout "
                              "(maintainers)")
    refresh.set_defaults(handler=_catalog_refresh)
    return parser


def _validate(args, out, err) -> int:
    model = spec()
    results = [model.validate_file(path) for path in args.files]
    if args.json:
        json.dump(results, out, indent=2, sort_keys=False)
        out.write("\n")
    else:
        for result in results:
            name = result["file"]
            if result["ok"]:
                out.write(f"{name}: ok ({result['config']['type']})\n")
                for warning in result["warnings"]:
                    out.write(f"{name}: warning: {_where(warning)}{warning['message']}\n")
            for error in result["errors"]:
                out.write(f"{name}: {_where(error)}{error['message']}\n")
    return 0 if all(r["ok"] for r in results) else 1


def _tables():
    """The collection's table renderer (plugins/module_utils/render/fleets.py)."""
    spec()  # makes the collection importable
    from ansible_collections.gpufleet.cluster.plugins.module_utils.render import fleets as fleettable

    return fleettable


def _read_config(path, err, types=("fleet",)):
    """Validate a file before any playbook runs; returns its config or None."""
    result = spec().validate_file(path)
    for error in result["errors"]:
        err.write(f"{path}: {_where(error)}{error['message']}\n")
    if not result["ok"]:
        return None
    if result["config"]["type"] not in types:
        err.write(
            f"{path}: this is a {result['config']['type']} configuration; expected "
            f"{' or '.join(types)}\n"
        )
        return None
    return result["config"]


def _read_fleet(path, err):
    return _read_config(path, err, ("fleet",))


def _confirm(question, args, out, err) -> bool:
    if args.yes:
        return True
    if not sys.stdin.isatty():
        err.write("gpufleet: no terminal to ask on; pass -y to go ahead without asking\n")
        return False
    out.write(f"{question} [y/n] ")
    out.flush()
    answer = sys.stdin.readline().strip().lower()
    return answer in ("y", "yes")


def _failed(exc, err) -> int:
    """Print a GpufleetError: each instance's error of a fleet record, else each failure that
    ended a host's play, else its message. 2 when no playbook could run, else 1."""
    record = exc.record if isinstance(exc.record, dict) else None
    instances = [i for i in (record or {}).get("instances") or [] if i.get("error")]
    if instances:
        for instance in instances:
            err.write(f"{instance['name']}: {instance['error']}\n")
    elif exc.failures:
        for failure in exc.failures:
            err.write(f"gpufleet: {failure['host']}: {failure['task']}: {failure['msg']}\n")
    else:
        err.write(f"gpufleet: {exc}\n")
    return 2 if exc.result is None else 1


def _apply(args, out, err) -> int:
    from .api import GpufleetError, apply, plan
    from .runner import progress_printer

    path = os.path.abspath(args.file)
    config = _read_config(path, err, ("fleet", "task", "volume"))
    if config is None:
        return 1
    if config["type"] == "task":
        return _apply_task(args, path, out, err)
    if config["type"] == "volume":
        return _volume(args, path, "present", out, err)
    tables = _tables()
    try:
        err.write("Planning...\n")
        record = plan(path)
        for line in tables.plan_lines(record):
            out.write(line + "\n")
        out.write("\n")
        if not _confirm(f"Apply the fleet {record['name']}?", args, out, err):
            out.write("Nothing was changed.\n")
            return 1
        record = apply(path, on_event=progress_printer(err, verbose=args.verbose))
    except GpufleetError as exc:
        if isinstance(exc.record, dict) and exc.record.get("instances") is not None:
            out.write("\n")
            for line in tables.fleet_table([exc.record]):
                out.write(line + "\n")
        return _failed(exc, err)
    out.write("\n")
    for line in tables.fleet_table([record]):
        out.write(line + "\n")
    return 0


def _fleet(args, out, err) -> int:
    from .api import GpufleetError, fleets

    paths = [os.path.abspath(p) for p in args.files]
    for path in paths:
        if _read_fleet(path, err) is None:
            return 1
    try:
        records = fleets(paths)
    except GpufleetError as exc:
        return _failed(exc, err)
    _print_records(records, args, out, "No fleets.", _tables().fleet_table)
    return 0


def _print_records(records, args, out, empty, table):
    """Records as JSON (``--json``), a line saying there are none, or their table."""
    if args.json:
        json.dump(records, out, indent=2)
        out.write("\n")
    elif not records:
        out.write(empty + "\n")
    else:
        for line in table(records, verbose=args.verbose):
            out.write(line + "\n")


def _volume(args, path, wanted, out, err) -> int:
    """Create (present) or delete (absent) a volume with playbooks/volume.yml, after asking."""
    from .api import GpufleetError, apply, delete, plan

    try:
        record = plan(path, delete=wanted == "absent")
        doing = "Create" if wanted == "present" else "Delete"
        if wanted == "present" and record["status"] != "submitted":
            out.write(f"Volume {record['name']} exists: {_volume_line(record)}\n")
            return 0
        if wanted == "absent" and record["status"] == "terminated" and not record["volume_id"]:
            out.write(f"Volume {record['name']}: nothing to delete.\n")
            return 0
        if not _confirm(f"{doing} the volume {record['name']}?", args, out, err):
            out.write("Nothing was changed.\n")
            return 1
        record = apply(path) if wanted == "present" else delete(path)
    except GpufleetError as exc:
        return _failed(exc, err)
    out.write(f"Volume {record['name']} {'deleted' if wanted == 'absent' else 'ready'}: "
              f"{_volume_line(record)}\n")
    return 0


def _volume_line(record):
    where = record.get("availability_zone") or record.get("region")
    size = f"{record['size']}GB" if record.get("size") else "-"
    return (f"{record['backend']} {where} {size} {record.get('volume_id') or '-'} "
            f"{record['status']}")


def _delete(args, out, err) -> int:
    from .api import GpufleetError, delete
    from .runner import progress_printer

    path = os.path.abspath(args.file)
    config = _read_config(path, err, ("fleet", "volume"))
    if config is None:
        return 1
    if config["type"] == "volume":
        return _volume(args, path, "absent", out, err)
    name = config.get("name") or os.path.basename(path)
    if not _confirm(f"Delete the fleet {name}?", args, out, err):
        out.write("Nothing was deleted.\n")
        return 1
    try:
        record = delete(path, on_event=progress_printer(err))
    except GpufleetError as exc:
        return _failed(exc, err)
    removed = record.get("removed") or {}
    what = sum(len(v) for v in removed.values())
    out.write(f"Fleet {record['name']} deleted.\n" if what else
              f"Fleet {record['name']}: nothing to delete.\n")
    return 0


def _offer(args, out, err) -> int:
    from .api import GpufleetError, offers

    path = os.path.abspath(args.file)
    if args.max_offers < 1:
        err.write("gpufleet: --max-offers must be at least 1\n")
        return 2
    if _read_config(path, err, ("fleet", "task")) is None:
        return 1
    try:
        found = offers(path, limit=args.max_offers)
    except GpufleetError as exc:
        return _failed(exc, err)
    if args.json:
        json.dump(found, out, indent=2)
        out.write("\n")
    elif not found["offers"]:
        out.write(found["msg"] + "\n")
    else:
        for line in _tables().offer_table(found["offers"], args.max_offers):
            out.write(line + "\n")
    return 0 if found["offers"] else 1


def _aws_refresh(regions, current):
    import boto3

    from ansible_collections.gpufleet.cluster.plugins.module_utils.offers import refresh

    return refresh.aws_catalog(lambda service, region: boto3.client(
        service, region_name=region), regions, previous=current)


def _gcp_refresh(regions, current, project):
    import google.auth
    from google.auth.transport.requests import AuthorizedSession

    from ansible_collections.gpufleet.cluster.plugins.module_utils.offers import refresh

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


def _catalog_refresh(args, out, err) -> int:
    spec()  # makes the collection importable
    from ansible_collections.gpufleet.cluster.plugins.module_utils.fleets import state
    from ansible_collections.gpufleet.cluster.plugins.module_utils.offers import (
        catalog,
        refresh,
    )

    root = state.state_dir(None)
    try:
        current, _source = catalog.load(args.backend, catalog.directory(root))
        settings = (state.backend_settings(root).get(args.backend) or {})
    except (catalog.CatalogError, state.StateError) as exc:
        err.write(f"gpufleet: {exc}\n")
        return 2
    if args.regions:
        regions = [r.strip() for r in args.regions.split(",") if r.strip()]
    else:
        regions = settings.get("regions") or sorted(set(
            o["region"] for e in current["instance_types"] for o in e["offers"]))
    try:
        if args.backend == "aws":
            data = _aws_refresh(regions, current)
        else:
            data = _gcp_refresh(regions, current, args.project or settings.get("project_id"))
    except ImportError as exc:
        err.write(f"gpufleet: refreshing the {args.backend} catalog needs {exc.name}: "
                  f"pip install 'gpufleet[{args.backend}]'\n")
        return 2
    except (refresh.RefreshError, catalog.CatalogError) as exc:
        err.write(f"gpufleet: {exc}\n")
        return 1
    except Exception as exc:  # noqa: BLE001 - credentials, network: the libraries' own kinds
        err.write(f"gpufleet: refreshing the {args.backend} catalog failed: "
                  f"{type(exc).__name__}: {exc}\n")
        return 1
    path = args.output or os.path.join(catalog.directory(root), args.backend + ".json")
    catalog.write(data, path)
    offers = sum(len(e["offers"]) for e in data["instance_types"])
    out.write(f"{path}: {len(data['instance_types'])} instance types, {offers} offers in "
              f"{len(regions)} regions\n")
    for note in data["notes"]:
        out.write(f"note: {note}\n")
    if args.ship:
        shipped = os.path.join(os.path.dirname(catalog.__file__),
                               "_catalog_%s.py" % args.backend)
        with open(shipped, "w") as handle:
            handle.write(catalog.module_source(data))
        out.write(f"{shipped}: rewritten\n")
    return 0


def _fleet_files(args):
    return [os.path.abspath(p) for p in args.fleet_files]


def _run_printer(out, err):
    """Prints what the task runner says while a run goes on (one line per node change, and
    the rank-prefixed logs), and errors; not the playbook's task names."""
    def on_event(event):
        if event.get("event") in ("verbose", "error", "warning"):
            text = (event.get("stdout") or "").rstrip("\n")
            if text.strip():
                stream = out if event.get("event") == "verbose" else err
                stream.write(text + "\n")
                stream.flush()
    return on_event


def _apply_task(args, path, out, err) -> int:
    from .api import GpufleetError, plan, run_task

    tables = _run_tables()
    try:
        err.write("Planning...\n")
        record = plan(path, fleet_files=_fleet_files(args))
        for line in tables.run_plan_lines(record["config"], record["plan"], path):
            out.write(line + "\n")
        out.write("\n")
        if not _confirm(f"Submit the run {record['run']}?", args, out, err):
            out.write("Nothing was submitted.\n")
            return 1
        try:
            record = run_task(path, wait=not args.detach, check=False,
                              fleet_files=_fleet_files(args), on_event=_run_printer(out, err))
        except KeyboardInterrupt:
            err.write(f"gpufleet: detached; the run {record['run']} goes on (gpufleet logs -f "
                      f"{record['run']} to attach again, gpufleet stop {record['run']} to stop "
                      "it)\n")
            return 130
    except GpufleetError as exc:
        return _failed(exc, err)
    if args.detach:
        out.write(f"Run {record['run']} submitted; follow it with gpufleet logs -f "
                  f"{record['run']}\n")
        return 0 if not record.get("failed") else 1
    status = record.get("status")
    out.write(f"Run {record['run']} {status}" +
              (f": {record['message']}" if record.get("message") else "") + "\n")
    return 0 if status == "done" else 1


def _run_tables():
    spec()
    from ansible_collections.gpufleet.cluster.plugins.module_utils.render import runs as runtable

    return runtable


def _ps(args, out, err) -> int:
    from .api import GpufleetError, runs

    try:
        found = runs(fleet_files=_fleet_files(args))
    except GpufleetError as exc:
        return _failed(exc, err)
    for host, error in sorted(found["unreachable"].items()):
        err.write(f"gpufleet: {host}: {error}\n")
    _print_records(found["runs"], args, out, "No runs.", _run_tables().run_table)
    return 0


def _logs(args, out, err) -> int:
    from .api import GpufleetError, logs, wait

    try:
        if args.follow:
            wait(args.run, check=False, fleet_files=_fleet_files(args),
                 on_event=_run_printer(out, err))
            return 0
        found = logs(args.run, fleet_files=_fleet_files(args))
    except GpufleetError as exc:
        return _failed(exc, err)
    for line in found["lines"]:
        out.write(line + "\n")
    return 0


def _stop(args, out, err) -> int:
    from .api import GpufleetError, stop

    if not _confirm(f"Stop the run {args.run}?", args, out, err):
        out.write("Nothing was stopped.\n")
        return 1
    try:
        record = stop(args.run, abort=args.abort, fleet_files=_fleet_files(args))
    except GpufleetError as exc:
        return _failed(exc, err)
    out.write(f"Run {args.run} {record.get('status', 'stopped')}.\n")
    return 0


def _where(problem) -> str:
    return f"{problem['path']}: " if problem["path"] else ""


def main(argv=None, out=None, err=None) -> int:
    out = out or sys.stdout
    err = err or sys.stderr
    parser = _build_parser()
    args = parser.parse_args(argv)
    try:
        return args.handler(args, out, err)
    except CollectionNotFound as exc:
        err.write(f"gpufleet: {exc}\n")
        return 2
    except KeyboardInterrupt:
        err.write("gpufleet: interrupted\n")
        return 130
    except BrokenPipeError:
        return 1


if __name__ == "__main__":
    sys.exit(main())
