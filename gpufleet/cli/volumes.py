"""``gpufleet volume``: the network volumes the clouds and the local pool hold (``list``, the
default), as ``dstack volume`` lists them, and ``delete NAME``. Creating a volume is ``apply -f``
with its file (``delete -f`` deletes it too)."""

from __future__ import annotations

from . import common


def add_volume(commands):
    """Add ``gpufleet volume`` (list) to the command parser."""
    volume = commands.add_parser(
        "volume",
        help="list volumes",
        description=(
            "List network volumes as dstack volume list does, with playbooks/volume_list.yml: "
            "every EBS volume and persistent disk gpufleet made or registered, found by its tag "
            "or label in the cloud backends the backend settings configure (<state dir>/"
            "backends.yml), and the local volumes of this machine's Docker engine (when it "
            "answers), newest first. Without a subcommand: list."
        ),
    )
    volume.set_defaults(handler=_list)
    actions = volume.add_subparsers(dest="action", metavar="ACTION")
    listing = actions.add_parser(
        "list", help="list volumes",
        description="List volumes as dstack volume list does (the same as gpufleet volume).")
    listing.set_defaults(handler=_list)
    deleting = actions.add_parser(
        "delete", help="delete a volume",
        description="Delete the volume NAME as dstack volume delete does: found as gpufleet "
                    "volume lists it, deleted as gpufleet delete -f with its file would (a "
                    "registered cloud volume only loses gpufleet's marks). A volume in use by "
                    "a run is refused: stop the run first.")
    deleting.add_argument("name", help="the volume's name")
    deleting.add_argument("-y", "--yes", action="store_true", help="do not ask for confirmation")
    deleting.set_defaults(handler=_delete)
    for parser in (volume, listing):
        parser.add_argument("-v", "--verbose", action="store_true",
                            help="show the region and zone, the fleets a volume is attached "
                                 "to, and errors")
        parser.add_argument("--json", action="store_true",
                            help="print the volume records as JSON")


def _tables():
    from .. import api

    api.ensure_importable()
    from ansible_collections.gpufleet.cluster.plugins.module_utils.render import volume_table

    return volume_table


def _list(args, out, err) -> int:
    from ..api import GpufleetError, volumes

    try:
        records = volumes()
    except GpufleetError as exc:
        return common.failed(exc, err)
    common.print_records(records, args, out, "No volumes.", _tables().volume_table)
    return 0


def _delete(args, out, err) -> int:
    from ..api import GpufleetError, delete_volume

    if not common.confirm(f"Delete the volume {args.name}?", args, out, err):
        out.write("Nothing was changed.\n")
        return 1
    try:
        record = delete_volume(args.name)
    except GpufleetError as exc:
        return common.failed(exc, err)
    out.write(f"Volume {record['name']} deleted ({record['backend']}).\n")
    return 0
