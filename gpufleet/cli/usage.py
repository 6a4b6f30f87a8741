"""``gpufleet usage``: GPU-hours and cost per run and per user, as Slurm's ``sacct`` reports
them, from the usage records the fleets' hosts keep."""

from __future__ import annotations

import json

from . import common


def add_usage(commands):
    """Add ``gpufleet usage`` to the command parser."""
    usage = commands.add_parser(
        "usage", help="show GPU-hours and cost per run and per user",
        description="Show, per run and per user, the nodes, GPUs, start, end, wall time, "
                    "GPU-hours and cost (the share's price per hour times the time) of the runs "
                    "since a moment, from the usage records the fleets' hosts keep (they "
                    "outlive the containers and this controller).")
    usage.add_argument("--since", default="7d", metavar="WHEN",
                       help="the window's start: a duration back from now (30m, 24h, 7d), a "
                            "date (2026-11-01, UTC) or an RFC 3339 time with its offset "
                            "(default: 7d)")
    usage.add_argument("--user", metavar="NAME", help="only this user's runs")
    usage.add_argument("--fleet", metavar="FLEET", help="only this fleet's hosts")
    shown = usage.add_mutually_exclusive_group()
    shown.add_argument("--json", action="store_true",
                       help="print the report as JSON (runs, users, unreachable hosts)")
    shown.add_argument("--csv", action="store_true", help="print one CSV row per run")
    common.fleet_file_option(usage, "an SSH fleet's file (repeatable)")
    usage.set_defaults(handler=_usage)


def _render():
    from .. import api

    api.ensure_importable()
    from ansible_collections.gpufleet.cluster.plugins.module_utils.render import usage_table

    return usage_table


def _usage(args, out, err) -> int:
    from ..api import GpufleetError, usage

    try:
        report = usage(since=args.since, user=args.user, fleet=args.fleet,
                       fleet_files=common.fleet_files(args))
    except GpufleetError as exc:
        return common.failed(exc, err)
    unreachable = report.get("unreachable") or {}
    for host, error in sorted(unreachable.items()):
        err.write(f"gpufleet: {host}: {error} (its usage records are not counted)\n")
    if args.json:
        json.dump(report, out, indent=2)
        out.write("\n")
    elif args.csv:
        out.write(_render().usage_csv(report))
    else:
        for line in _render().usage_lines(report):
            out.write(line + "\n")
    return 1 if unreachable else 0
