"""``gpufleet metrics``: a run's CPU, memory and GPU use, as ``dstack metrics`` charts it."""

from __future__ import annotations

import json
import shutil
import time

from . import common

# As dstack: the jobs sample every 10 seconds, so a refresh sooner shows nothing new.
WATCH_INTERVAL = 10


def add_metrics(commands):
    """Add ``gpufleet metrics`` to the command parser."""
    metrics = commands.add_parser(
        "metrics", help="show a run's CPU, memory and GPU use",
        description="Chart the CPU, memory and GPU use of every job of a run over the last "
                    "hour, as dstack metrics does.")
    metrics.add_argument("run", metavar="RUN", help="the run's name")
    metrics.add_argument("-w", "--watch", action="store_true",
                         help="keep the charts updating until Ctrl-C")
    metrics.add_argument("--job", type=int, metavar="N",
                         help="only this job number (default: every job)")
    metrics.add_argument("--json", action="store_true", help="print the metrics as JSON")
    common.fleet_file_option(metrics, "an SSH fleet's file (repeatable)")
    metrics.set_defaults(handler=_metrics)


def _render():
    from .. import api

    api.ensure_importable()
    from ansible_collections.gpufleet.cluster.plugins.module_utils.render import (
        metrics_table,
    )

    return metrics_table


def _show(record, args, out, err, render):
    if args.json:
        json.dump(record, out, indent=2)
        out.write("\n")
        return
    for host, error in sorted((record.get("unreachable_hosts") or {}).items()):
        err.write(f"gpufleet: {host}: {error}\n")
    columns = shutil.get_terminal_size((100, 24)).columns
    for line in render.metrics_lines(record, columns=columns):
        out.write(line + "\n")
    out.flush()


def _metrics(args, out, err) -> int:
    from ..api import GpufleetError, metrics

    render = _render()
    options = {"fleet_files": common.fleet_files(args)}
    try:
        record = metrics(args.run, job=args.job, **options)
        _show(record, args, out, err, render)
        while args.watch:
            time.sleep(WATCH_INTERVAL)
            record = metrics(args.run, job=args.job, **options)
            if not args.json and getattr(out, "isatty", lambda: False)():
                out.write("\x1b[H\x1b[2J")   # redraw in place, as dstack's live view
            else:
                out.write("\n")
            _show(record, args, out, err, render)
    except KeyboardInterrupt:
        return 0
    except GpufleetError as exc:
        return common.failed(exc, err)
    return 0
