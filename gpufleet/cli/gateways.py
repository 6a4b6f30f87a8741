"""``gpufleet gateway``: the gateways this controller knows (``list``, the default), as
``dstack gateway list`` lists them, and ``delete NAME``. Making one is ``apply -f`` of its file
(playbooks/gateway.yml)."""

from __future__ import annotations

from . import common


def add_gateway(commands):
    """Add ``gpufleet gateway`` (list, delete) to the command parser."""
    gateway = commands.add_parser(
        "gateway",
        help="list gateways",
        description=(
            "List gateways as dstack gateway list does, with playbooks/gateway_list.yml: every "
            "gateway this controller knows (made with gpufleet apply -f of a type: gateway "
            "file), each one's host asked what it serves. DEFAULT marks the one services "
            "without `gateway` get."
        ),
    )
    gateway.set_defaults(handler=_list)
    actions = gateway.add_subparsers(dest="action", metavar="ACTION")
    listing = actions.add_parser(
        "list", help="list gateways",
        description="List gateways as dstack gateway list does (the same as gpufleet gateway).")
    listing.set_defaults(handler=_list)
    deleting = actions.add_parser(
        "delete", help="delete a gateway",
        description="Delete the gateway NAME as dstack gateway delete does: its host is removed "
                    "as a fleet's is (gpufleet delete -f with its file does the same); the "
                    "services it published are no longer reachable there.")
    deleting.add_argument("name", help="the gateway's name")
    deleting.add_argument("-y", "--yes", action="store_true", help="do not ask for confirmation")
    deleting.set_defaults(handler=_delete)
    for parser in (gateway, listing):
        parser.add_argument("-v", "--verbose", action="store_true",
                            help="show why a gateway's host did not answer")
        parser.add_argument("--json", action="store_true",
                            help="print the gateway records as JSON")


def _list(args, out, err) -> int:
    from ..api import GpufleetError, gateways

    try:
        records = gateways(verbose=getattr(args, "verbose", False))
    except GpufleetError as exc:
        return common.failed(exc, err)
    common.print_records(records, args, out, "No gateways.",
                         common.gateway_tables().gateway_table)
    return 0


def _delete(args, out, err) -> int:
    from ..api import GpufleetError, delete_gateway, progress_printer

    if not common.confirm(f"Delete the gateway {args.name}?", args, out, err):
        out.write("Nothing was changed.\n")
        return 1
    try:
        delete_gateway(args.name, on_event=progress_printer(err))
    except GpufleetError as exc:
        return common.failed(exc, err)
    out.write(f"Gateway {args.name} deleted.\n")
    return 0
