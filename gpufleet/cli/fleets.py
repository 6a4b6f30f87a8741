"""``gpufleet fleet``: the fleets the backends hold, or those of the given files (``list``, the
default), and ``fleet delete NAME [-i N ...]``: a fleet, or some of its instances, by name; a
fleet's members (``grant``, ``revoke``, ``members``, ``limit``) are gpufleet/cli/teams.py's."""

from __future__ import annotations

import os

from . import common, teams


def add_fleet(commands):
    """Add ``gpufleet fleet`` (list, delete) to the command parser."""
    fleet = commands.add_parser(
        "fleet",
        help="list and delete fleets, and manage their members",
        description=(
            "List fleets as dstack does: every fleet the backends hold, or the fleets of the "
            "given files (SSH fleets are listed only from their files). An instance's STATUS "
            "shows its GPU health when it is not healthy, e.g. idle (failure); -v says why. "
            "Without a subcommand: list."
        ),
    )
    fleet.set_defaults(handler=_fleet)
    actions = fleet.add_subparsers(dest="action", metavar="ACTION")
    listing = actions.add_parser(
        "list", help="list fleets",
        description="List fleets as dstack fleet list does (the same as gpufleet fleet).")
    listing.set_defaults(handler=_fleet)
    for parser in (fleet, listing):
        _list_options(parser)

    delete = actions.add_parser(
        "delete", help="delete a fleet or some of its instances",
        description=(
            "Delete the fleet NAME, as dstack fleet delete does, with playbooks/delete.yml: "
            "remove a backend fleet's nodes, or release an SSH fleet's hosts, and the fleet's "
            "local files. The fleet is found from the file this controller applied it from, "
            "else from the backends' labels and tags. With -i, delete only those instances "
            "(a backend fleet's instances are removed, an SSH fleet's hosts released) and keep "
            "the fleet. A fleet or instance still running a task is refused, naming the runs, "
            "and so is one whose hosts cannot be checked, naming them and why (--force)."
        ),
    )
    delete.add_argument("name", metavar="NAME", help="the fleet's name")
    delete.add_argument("-i", "--instance", action="append", type=int, dest="instances",
                        metavar="INSTANCE_NUM",
                        help="an instance number to delete (repeatable); the fleet stays")
    delete.add_argument("-y", "--yes", action="store_true", help="delete without asking")
    delete.add_argument("--force", action="store_true",
                        help="delete even when the hosts cannot be checked (they do not answer, "
                        "or their key is missing); for a whole fleet, also when a task runs")
    delete.set_defaults(handler=_delete)
    teams.add_member_actions(actions)


def _list_options(parser):
    parser.add_argument("-f", "--file", action="append", default=[], metavar="FILE",
                        dest="files", help="a fleet file (repeatable)")
    parser.add_argument("-v", "--verbose", action="store_true",
                        help="show resources, driver and errors")
    parser.add_argument("--json", action="store_true", help="print the fleet records as JSON")
    parser.add_argument("--refresh", action="store_true",
                        help="read every host's GPU health now (else only health older than "
                             "5 minutes is read again)")


def _fleet(args, out, err) -> int:
    from ..api import GpufleetError, fleets, fleets_with_health

    paths = [os.path.abspath(p) for p in args.files]
    for path in paths:
        if common.read_fleet(path, err) is None:
            return 1
    try:
        records = fleets_with_health(paths, max_age=0) if args.refresh else fleets(paths)
    except GpufleetError as exc:
        return common.failed(exc, err)
    common.print_records(records, args, out, "No fleets.", common.tables().fleet_table)
    return 0


def _instances(nums):
    """Instance numbers as dstack prints them: ``[1, 2]``."""
    return "[%s]" % ", ".join(str(n) for n in nums)


def _refused(exc, err) -> int:
    """A refusal of the controller (no such fleet, a fleet in use) is printed as dstack prints
    it, its message alone; a failure on a host as every other command prints it."""
    if exc.result is not None and exc.failures and all(
            f["host"] in ("localhost", "") for f in exc.failures):
        for failure in exc.failures:
            err.write(failure["msg"] + "\n")
        return 1
    return common.failed(exc, err)


def _delete(args, out, err) -> int:
    from ..api import GpufleetError, delete_fleet, progress_printer

    name, nums = args.name, args.instances
    try:
        planned = delete_fleet(name, nums, check=True, force=args.force)
    except GpufleetError as exc:
        return _refused(exc, err)
    if nums:
        plan = planned.get("plan") or {}
        chosen = set((plan.get("remove") or []) + (plan.get("release") or []))
        for num in nums:
            if f"{name}-{num}" not in chosen:
                err.write(f"gpufleet: fleet {name} has no instance {num}\n")
        question = f"Delete the fleet {name} instances {_instances(nums)}?"
    else:
        question = f"Delete the fleet {name}?"
    if not common.confirm(question, args, out, err):
        out.write("Nothing was deleted.\n")
        return 1
    try:
        delete_fleet(name, nums, force=args.force, on_event=progress_printer(err))
    except GpufleetError as exc:
        return _refused(exc, err)
    out.write(f"Fleet {name} instances deleted\n" if nums else f"Fleet {name} deleted\n")
    return 0
