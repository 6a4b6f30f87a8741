"""``gpufleet fleet``: the fleets the backends hold, or those of the given files."""

from __future__ import annotations

import os

from . import common


def add_fleet(commands):
    """Add ``gpufleet fleet`` to the command parser."""
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


def _fleet(args, out, err) -> int:
    from ..api import GpufleetError, fleets

    paths = [os.path.abspath(p) for p in args.files]
    for path in paths:
        if common.read_fleet(path, err) is None:
            return 1
    try:
        records = fleets(paths)
    except GpufleetError as exc:
        return common.failed(exc, err)
    common.print_records(records, args, out, "No fleets.", common.tables().fleet_table)
    return 0
