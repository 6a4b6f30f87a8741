"""``gpufleet``: dstack-like commands over the gpufleet.cluster collection.

``validate`` reads files with the collection's config model; ``apply``, ``fleet`` and ``delete``
run the collection's playbooks (fleet.yml, list.yml, delete.yml) through ansible-runner. This
module parses arguments and presents results; the logic lives in the collection.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

from . import __version__
from ._collection import CollectionNotFound, spec


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
        help="create or update a fleet from a dstack fleet file",
        description=(
            "Show what applying the fleet file changes, ask, then apply it with "
            "playbooks/fleet.yml: provision backend fleets, check, measure and claim the hosts, "
            "and print the fleet. Exits 0 when every host is ready."
        ),
    )
    apply.add_argument("-f", "--file", required=True, metavar="FILE", help="the fleet file")
    apply.add_argument("-y", "--yes", action="store_true", help="apply without asking")
    apply.add_argument("-v", "--verbose", action="store_true",
                       help="show every task result while applying")
    apply.set_defaults(handler=_apply)

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
        help="delete a fleet",
        description=(
            "Delete the fleet of a dstack fleet file with playbooks/delete.yml: remove a backend "
            "fleet's nodes, or release an SSH fleet's hosts, and the fleet's local files."
        ),
    )
    delete.add_argument("-f", "--file", required=True, metavar="FILE", help="the fleet file")
    delete.add_argument("-y", "--yes", action="store_true", help="delete without asking")
    delete.set_defaults(handler=_delete)
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
    """The collection's table renderer (plugins/module_utils/fleettable)."""
    spec()  # makes the collection importable
    from ansible_collections.gpufleet.cluster.plugins.module_utils import fleettable

    return fleettable


def _read_fleet(path, err):
    """Validate a fleet file before any playbook runs; returns its config or None."""
    result = spec().validate_file(path)
    for error in result["errors"]:
        err.write(f"{path}: {_where(error)}{error['message']}\n")
    if not result["ok"]:
        return None
    if result["config"]["type"] != "fleet":
        err.write(
            f"{path}: this is a {result['config']['type']} configuration; this version of "
            "gpufleet applies fleet files only\n"
        )
        return None
    return result["config"]


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


def _record(result):
    fleets = result.stats.get("gpufleet_fleets") or []
    return fleets[0] if fleets else None


def _report_failures(result, record, err):
    if record is not None:
        for instance in record.get("instances") or []:
            if instance.get("error"):
                err.write(f"{instance['name']}: {instance['error']}\n")
    elif not result.ok:
        for line in result.failure_lines():
            err.write(f"gpufleet: {line}\n")


def _apply(args, out, err) -> int:
    from .runner import RunnerError, progress_printer, run_playbook

    path = os.path.abspath(args.file)
    if _read_fleet(path, err) is None:
        return 1
    tables = _tables()
    try:
        err.write("Planning...\n")
        planned = run_playbook("fleet.yml", {"fleet": path}, check=True)
        record = _record(planned)
        if record is None:
            _report_failures(planned, None, err)
            return 1
        for line in tables.plan_lines(record):
            out.write(line + "\n")
        out.write("\n")
        if not _confirm(f"Apply the fleet {record['name']}?", args, out, err):
            out.write("Nothing was changed.\n")
            return 1
        result = run_playbook("fleet.yml", {"fleet": path},
                              on_event=progress_printer(err, verbose=args.verbose))
    except RunnerError as exc:
        err.write(f"gpufleet: {exc}\n")
        return 2
    record = _record(result)
    if record is not None:
        out.write("\n")
        for line in tables.fleet_table([record]):
            out.write(line + "\n")
    _report_failures(result, record, err)
    return 0 if result.ok else 1


def _fleet(args, out, err) -> int:
    from .runner import RunnerError, run_playbook

    paths = [os.path.abspath(p) for p in args.files]
    for path in paths:
        if _read_fleet(path, err) is None:
            return 1
    try:
        result = run_playbook("list.yml", {"fleets": paths})
    except RunnerError as exc:
        err.write(f"gpufleet: {exc}\n")
        return 2
    fleets = result.stats.get("gpufleet_fleets")
    if fleets is None:
        _report_failures(result, None, err)
        return 1
    if args.json:
        json.dump(fleets, out, indent=2)
        out.write("\n")
    elif not fleets:
        out.write("No fleets.\n")
    else:
        for line in _tables().fleet_table(fleets, verbose=args.verbose):
            out.write(line + "\n")
    return 0 if result.ok else 1


def _delete(args, out, err) -> int:
    from .runner import RunnerError, progress_printer, run_playbook

    path = os.path.abspath(args.file)
    config = _read_fleet(path, err)
    if config is None:
        return 1
    name = config.get("name") or os.path.basename(path)
    if not _confirm(f"Delete the fleet {name}?", args, out, err):
        out.write("Nothing was deleted.\n")
        return 1
    try:
        result = run_playbook("delete.yml", {"fleet": path}, on_event=progress_printer(err))
    except RunnerError as exc:
        err.write(f"gpufleet: {exc}\n")
        return 2
    record = _record(result)
    if record is not None and result.ok:
        removed = record.get("removed") or {}
        what = sum(len(v) for v in removed.values())
        out.write(f"Fleet {record['name']} deleted.\n" if what else
                  f"Fleet {record['name']}: nothing to delete.\n")
    _report_failures(result, None, err)
    return 0 if result.ok else 1


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
