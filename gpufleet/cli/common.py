"""What the ``gpufleet`` commands share: reading and checking a file before a playbook runs,
asking before a change, printing records and failures, and the collection's text tables.

The commands import gpufleet.api and, to print tables, the collection's render package (the
edge: text made from records); nothing else of the collection."""

from __future__ import annotations

import json
import os
import sys

from .. import api


def fleet_file_option(parser, help_text):
    """``--fleet-file FILE`` (repeatable): fleet files the task commands are told about."""
    parser.add_argument("--fleet-file", action="append", default=[], metavar="FILE",
                        dest="fleet_files", help=help_text)


def fleet_files(args):
    return [os.path.abspath(p) for p in args.fleet_files]


def shown_path(path):
    """A file named on the command line, for a message: whole when it is there, shortened
    (core.text) when it is not, since then it may be any text at all."""
    return path if os.path.exists(path) else api.shorten(path, 200)


def tables():
    """The collection's table renderer (plugins/module_utils/render/fleet_table.py)."""
    api.ensure_importable()
    from ansible_collections.gpufleet.cluster.plugins.module_utils.render import fleet_table as fleets

    return fleets


def gateway_tables():
    """The gateways table (plugins/module_utils/render/gateway_table.py)."""
    api.ensure_importable()
    from ansible_collections.gpufleet.cluster.plugins.module_utils.render import gateway_table

    return gateway_table


def member_tables():
    """The members table (plugins/module_utils/render/member_table.py)."""
    api.ensure_importable()
    from ansible_collections.gpufleet.cluster.plugins.module_utils.render import member_table

    return member_table


def run_tables():
    api.ensure_importable()
    from ansible_collections.gpufleet.cluster.plugins.module_utils.render import run_table as runtable

    return runtable


def read_config(path, err, types=("fleet",)):
    """Validate a file before any playbook runs; returns its config or None. (What apply
    refuses in a valid file, the files and repo it names included, the playbook's module says
    with the same messages.)"""
    result = api.validate_file(path)
    for error in result["errors"]:
        err.write(f"{shown_path(path)}: {where(error)}{error['message']}\n")
    if not result["ok"]:
        return None
    if result["config"]["type"] not in types:
        err.write(
            f"{path}: this is a {result['config']['type']} configuration; expected "
            f"{' or '.join(types)}\n"
        )
        return None
    return result["config"]


def read_fleet(path, err):
    return read_config(path, err, ("fleet",))


def confirm(question, args, out, err) -> bool:
    if args.yes:
        return True
    if not sys.stdin.isatty():
        err.write("gpufleet: no terminal to ask on; pass -y to go ahead without asking\n")
        return False
    out.write(f"{question} [y/n] ")
    out.flush()
    answer = sys.stdin.readline().strip().lower()
    return answer in ("y", "yes")


def failed(exc, err) -> int:
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
    return failed_code(exc)


def failed_code(exc) -> int:
    """The exit status of a GpufleetError: an operation that ran and failed (a playbook's, or
    one answered in this process) is 1; one that could not start (no playbook ran) is 2."""
    return 2 if exc.result is None and not isinstance(exc, api.CommandError) else 1


def print_records(records, args, out, empty, table):
    """Records as JSON (``--json``), a line saying there are none, or their table."""
    if args.json:
        json.dump(records, out, indent=2)
        out.write("\n")
    elif not records:
        out.write(empty + "\n")
    else:
        for line in table(records, verbose=args.verbose):
            out.write(line + "\n")


def run_printer(out, err):
    """Prints what the task runner says while a run goes on (one line per node change, and
    the rank-prefixed logs), and errors; not the playbook's task names. What was answered in
    this process (``in_process`` events) is printed exactly as it was written."""
    def on_event(event):
        if event.get("in_process") and event.get("event") == "verbose":
            out.write((event.get("stdout") or "") + "\n")
            out.flush()
        elif event.get("event") in ("verbose", "error", "warning"):
            # Lines of one event come joined with the pty's CRLF.
            text = (event.get("stdout") or "").replace("\r\n", "\n").rstrip("\n")
            if text.strip():
                stream = out if event.get("event") == "verbose" else err
                stream.write(text + "\n")
                stream.flush()
    return on_event


def where(problem) -> str:
    return f"{problem['path']}: " if problem["path"] else ""
