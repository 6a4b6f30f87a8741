"""``gpufleet event``: what happened to runs, jobs, fleets, instances and members, as ``dstack
event`` shows it, from the event records the fleets' hosts keep."""

from __future__ import annotations

import json
import time

from . import common

WATCH_EVERY = 2.0


def add_event(commands):
    """Add ``gpufleet event`` to the command parser."""
    event = commands.add_parser(
        "event", help="show what happened to runs, jobs, fleets and members",
        description="Show the events the fleets' hosts recorded, oldest first, one line each "
                    "as dstack event prints them: when (UTC), who acted, what it is about and "
                    "what happened. A run's status changes are derived from its jobs' "
                    "events. Without --since, the last 100 events.")
    event.add_argument("action", nargs="?", choices=["list"],
                       help="list the events (the default, as dstack event list)")
    event.add_argument("-w", "--watch", action="store_true",
                       help="keep printing new events as they are recorded (Ctrl-C stops)")
    event.add_argument("--since", metavar="WHEN",
                       help="only events since then: a duration back from now (10s, 5m, 1d), "
                            "a date (2026-11-01, UTC) or an RFC 3339 time with its offset")
    targets = event.add_mutually_exclusive_group()
    targets.add_argument("--target-fleet", action="append", metavar="NAME",
                         dest="target_fleets", help="only events about these fleets")
    targets.add_argument("--target-run", action="append", metavar="NAME", dest="target_runs",
                         help="only events about these runs")
    within = event.add_mutually_exclusive_group()
    within.add_argument("--within-fleet", action="append", metavar="NAME",
                        dest="within_fleets",
                        help="only events about these fleets or their instances")
    within.add_argument("--within-run", action="append", metavar="NAME", dest="within_runs",
                        help="only events about these runs or their jobs")
    event.add_argument("--include-target-type", action="append", metavar="TYPE",
                       dest="include_target_types",
                       choices=["fleet", "instance", "run", "job", "user"],
                       help="only events about a target of this type (repeatable)")
    event.add_argument("--fleet", metavar="FLEET", help="ask only this fleet's hosts")
    event.add_argument("--json", action="store_true",
                       help="print the events as JSON ({since, now, events, unreachable})")
    common.fleet_file_option(event, "an SSH fleet's file (repeatable)")
    event.set_defaults(handler=_event)


def _render():
    from .. import api

    api.ensure_importable()
    from ansible_collections.gpufleet.cluster.plugins.module_utils.render import event_table

    return event_table


def _ask(args, since):
    from ..api import events

    return events(since=since, fleet=args.fleet, target_fleets=args.target_fleets or (),
                  target_runs=args.target_runs or (), within_fleets=args.within_fleets or (),
                  within_runs=args.within_runs or (),
                  include_target_types=args.include_target_types or (), in_process=True,
                  fleet_files=common.fleet_files(args))


def _event(args, out, err) -> int:
    from ..api import GpufleetError

    if args.watch and args.json:
        return common.failed(GpufleetError("--watch prints lines as they come; it does not go "
                                           "with --json"), err)
    try:
        report = _ask(args, args.since)
    except GpufleetError as exc:
        return common.failed(exc, err)
    told = set()
    for host, error in sorted((report.get("unreachable") or {}).items()):
        told.add(host)
        err.write(f"gpufleet: {host}: {error} (its events are not shown)\n")
    if args.json:
        json.dump(report, out, indent=2)
        out.write("\n")
        return 1 if report.get("unreachable") else 0
    table = _render()
    seen = set()
    for event in report.get("events") or []:
        seen.add(event.get("id"))
        out.write(table.event_line(event) + "\n")
    if not args.watch:
        return 1 if report.get("unreachable") else 0
    return _watch(args, out, err, report, seen, told, table)


def _watch(args, out, err, report, seen, told, table) -> int:
    """Ask again every WATCH_EVERY seconds for what was recorded since the last look (from a
    minute before it: a host's clock and a job's facts may come in late); print the new ones."""
    from ..api import GpufleetError

    last = float(report.get("now") or time.time())
    try:
        while True:
            out.flush()
            time.sleep(WATCH_EVERY)
            try:
                report = _ask(args, _rfc3339(last - 60))
            except GpufleetError as exc:
                return common.failed(exc, err)
            for host, error in sorted((report.get("unreachable") or {}).items()):
                if host not in told:
                    told.add(host)
                    err.write(f"gpufleet: {host}: {error} (its events are not shown)\n")
            for event in report.get("events") or []:
                if event.get("id") not in seen:
                    seen.add(event.get("id"))
                    out.write(table.event_line(event) + "\n")
            last = float(report.get("now") or last)
    except KeyboardInterrupt:
        return 0


def _rfc3339(epoch: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(epoch))
