"""``gpufleet offer`` and ``gpufleet catalog refresh``: cloud offers and their catalogs."""

from __future__ import annotations

import json
import os

from . import common


def add_offer(commands):
    """Add ``gpufleet offer`` to the command parser."""
    offer = commands.add_parser(
        "offer",
        help="list the cloud offers a fleet or task would take",
        description=(
            "List the cloud offers (instance type, region, on-demand or spot) that a fleet or "
            "task file matches, cheapest first, from the AWS and GCP catalogs, with "
            "playbooks/offer.yml. Nothing is created and no cloud API is called."
        ),
    )
    offer.add_argument("-f", "--file", required=True, metavar="FILE",
                       help="the fleet or task file")
    offer.add_argument("--max-offers", type=int, default=10, metavar="N",
                       help="show at most N offers (default: 10)")
    offer.add_argument("--json", action="store_true",
                       help="print every offer, and why others were ruled out, as JSON")
    offer.set_defaults(handler=_offer)


def add_catalog(commands):
    """Add ``gpufleet catalog`` to the command parser."""
    catalog_cmd = commands.add_parser(
        "catalog", help="refresh the offer catalogs",
        description="Refresh an offer catalog from the cloud's own APIs (docs/offers.md).")
    catalog_actions = catalog_cmd.add_subparsers(dest="action", metavar="ACTION")
    catalog_actions.required = True
    refresh = catalog_actions.add_parser(
        "refresh", help="rebuild a backend's catalog from its APIs",
        description=(
            "Rebuild a catalog from the cloud's APIs: aws from EC2 (GPU instance types, the "
            "zones offering them, spot prices) and the AWS Price List API, with the credentials "
            "boto3 finds; gcp from the Compute API (machine and accelerator types) and the "
            "Cloud Billing Catalog API, with Application Default Credentials. Writes "
            "<state dir>/catalog/<backend>.json, which every gpufleet command and module on "
            "this controller then uses instead of the shipped catalog."))
    refresh.add_argument("backend", choices=["aws", "gcp"], help="the backend")
    refresh.add_argument("--project", help="gcp: the project whose APIs are asked (default: "
                                           "gcp.project_id of backends.yml, else the "
                                           "credentials' project)")
    refresh.add_argument("--regions", metavar="R1,R2",
                         help="regions to cover (default: aws.regions of backends.yml, else "
                              "the regions of the current catalog)")
    refresh.add_argument("-o", "--output", metavar="FILE",
                         help="where to write the catalog (default: <state dir>/catalog/"
                              "<backend>.json)")
    refresh.add_argument("--ship", action="store_true",
                         help="also rewrite the catalog shipped in this checkout "
                              "(maintainers)")
    refresh.set_defaults(handler=_catalog_refresh)


def _offer(args, out, err) -> int:
    from ..api import GpufleetError, offers

    path = os.path.abspath(args.file)
    if args.max_offers < 1:
        err.write("gpufleet: --max-offers must be at least 1\n")
        return 2
    if common.read_config(path, err, ("fleet", "task", "dev-environment", "service")) is None:
        return 1
    try:
        found = offers(path, limit=args.max_offers)
    except GpufleetError as exc:
        return common.failed(exc, err)
    if args.json:
        json.dump(found, out, indent=2)
        out.write("\n")
    elif not found["offers"]:
        out.write(found["msg"] + "\n")
    else:
        for line in common.tables().offer_table(found["offers"], args.max_offers):
            out.write(line + "\n")
    return 0 if found["offers"] else 1


def _catalog_refresh(args, out, err) -> int:
    from ..api import GpufleetError, refresh_catalog

    regions = [r.strip() for r in args.regions.split(",") if r.strip()] if args.regions \
        else None
    try:
        done = refresh_catalog(args.backend, regions=regions, project=args.project,
                               output=args.output, ship=args.ship)
    except GpufleetError as exc:
        err.write(f"gpufleet: {exc}\n")
        return common.failed_code(exc)
    out.write(f"{done['path']}: {done['instance_types']} instance types, {done['offers']} "
              f"offers in {len(done['regions'])} regions\n")
    for note in done["notes"]:
        out.write(f"note: {note}\n")
    if done["shipped"]:
        out.write(f"{done['shipped']}: rewritten\n")
    return 0
