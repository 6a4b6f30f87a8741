"""``gpufleet ps``, ``logs`` and ``stop``: the runs on the fleets' hosts."""

from __future__ import annotations

from . import common


def add_ps(commands):
    """Add ``gpufleet ps`` to the command parser."""
    ps = commands.add_parser(
        "ps", help="list task runs",
        description="List task runs as dstack ps does, from the labels of their containers.")
    ps.add_argument("-v", "--verbose", action="store_true", help="show resources and errors")
    ps.add_argument("--json", action="store_true", help="print the run records as JSON")
    ps.add_argument("--user", metavar="NAME",
                    help="only the runs NAME submitted (default: every user's runs)")
    common.fleet_file_option(ps, "an SSH fleet's file (repeatable)")
    ps.set_defaults(handler=_ps)


def add_logs(commands):
    """Add ``gpufleet logs`` to the command parser."""
    logs = commands.add_parser(
        "logs", help="show a run's logs",
        description="Show the logs of every job of a run, each line prefixed with the run "
                    "and rank, as the hosts keep them (also after the containers are gone).")
    logs.add_argument("run", metavar="RUN", help="the run's name")
    logs.add_argument("-f", "--follow", action="store_true",
                      help="keep streaming new lines until the run ends")
    logs.add_argument("--job", type=int, metavar="N",
                      help="only job N's output, without the rank prefix (as dstack logs)")
    logs.add_argument("--since", metavar="WHEN",
                      help="only output printed since then: a duration (10s, 5m, 1d) or an "
                           "RFC 3339 time with its offset (2026-09-24T15:30:00Z)")
    common.fleet_file_option(logs, "an SSH fleet's file (repeatable)")
    logs.set_defaults(handler=_logs)


def add_stop(commands):
    """Add ``gpufleet stop`` to the command parser."""
    stop = commands.add_parser(
        "stop", help="stop a run",
        description="Stop every job of a run: TERM, then KILL after its stop_duration.")
    stop.add_argument("run", metavar="RUN", help="the run's name")
    stop.add_argument("-y", "--yes", action="store_true", help="stop without asking")
    stop.add_argument("-x", "--abort", action="store_true", help="kill at once")
    stop.add_argument("--force", action="store_true",
                      help="stop it even if another user submitted it (without it, only its "
                           "owner or an admin of its fleet may)")
    common.fleet_file_option(stop, "an SSH fleet's file (repeatable)")
    stop.set_defaults(handler=_stop)


def _ps(args, out, err) -> int:
    from ..api import GpufleetError, runs

    try:
        # In this process: the same functions as ps.yml's modules.
        found = runs(in_process=True, fleet_files=common.fleet_files(args),
                     **({"user": args.user} if args.user else {}))
    except GpufleetError as exc:
        return common.failed(exc, err)
    unread = found.get("unread") or {}
    told = set(h for hosts in unread.values() for h in hosts)
    for host, error in sorted(found["unreachable"].items()):
        if host not in told:
            err.write(f"gpufleet: {host}: {error}\n")
    empty = "No runs." if not unread else "No runs on the fleets that could be read."
    common.print_records(found["runs"], args, out, empty, common.run_tables().run_table)
    # What could not be read comes last, and fails the command: its runs may be running.
    for fleet, hosts in sorted(unread.items()):
        detail = "; ".join(f"{host}: {reason}" for host, reason in sorted(hosts.items()))
        err.write(f"gpufleet: could not read fleet {fleet}, its runs are not listed: "
                  f"{detail}\n")
    return 1 if unread else 0


def _logs(args, out, err) -> int:
    from ..api import GpufleetError, logs, wait

    try:
        if args.follow:
            wait(args.run, check=False, job=args.job, since=args.since, output=out,
                 fleet_files=common.fleet_files(args), on_event=common.run_printer(out, err))
            return 0
        # Streamed: the lines come as the hosts' pages are read, whatever the run printed; in
        # this process, with the same function as logs.yml's module.
        logs(args.run, job=args.job, since=args.since, stream=True, in_process=True,
             output=out, fleet_files=common.fleet_files(args))
    except GpufleetError as exc:
        return common.failed(exc, err)
    return 0


def _stop(args, out, err) -> int:
    from ..api import GpufleetError, stop

    if not common.confirm(f"Stop the run {args.run}?", args, out, err):
        out.write("Nothing was stopped.\n")
        return 1
    try:
        # In this process: the function stop.yml's module calls.
        record = stop(args.run, abort=args.abort, in_process=True,
                      fleet_files=common.fleet_files(args),
                      **({"force": True} if args.force else {}))
    except GpufleetError as exc:
        return common.failed(exc, err)
    if record.get("runs") is not None:
        out.write(f"Job array {args.run}: {len(record.get('stopped') or [])} containers of "
                  f"{len(record['runs'])} runs stopped.\n")
        return 0
    out.write(f"Run {args.run} {record.get('status', 'stopped')}.\n")
    return 0
