"""``gpufleet volume``: the network volumes the clouds hold (``list``, the default), as
``dstack volume`` lists them. Creating and deleting a volume are ``apply -f`` and
``delete -f`` with its file."""

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
            "backends.yml), newest first. The local backend has no network volumes. Without a "
            "subcommand: list."
        ),
    )
    volume.set_defaults(handler=_list)
    actions = volume.add_subparsers(dest="action", metavar="ACTION")
    listing = actions.add_parser(
        "list", help="list volumes",
        description="List volumes as dstack volume list does (the same as gpufleet volume).")
    listing.set_defaults(handler=_list)
    for parser in (volume, listing):
        parser.add_argument("-v", "--verbose", action="store_true",
                            help="show the region and zone, the fleets a volume is attached "
                                 "to, and errors")
        parser.add_argument("--json", action="store_true",
                            help="print the volume records as JSON")


def _tables():
    common.spec()  # makes the collection importable
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
