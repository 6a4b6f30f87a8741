"""``gpufleet offer`` and ``gpufleet catalog refresh``: cloud offers and their catalogs."""

from __future__ import annotations

import json
import os

from .._collection import config_model
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
    if common.read_config(path, err, ("fleet", "task", "dev-environment")) is None:
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


def _aws_refresh(regions, current):
    import boto3

    from ansible_collections.gpufleet.cluster.plugins.module_utils.offers import refresh

    return refresh.aws_catalog(lambda service, region: boto3.client(
        service, region_name=region), regions, previous=current)


def _gcp_refresh(regions, current, project):
    import google.auth
    from google.auth.transport.requests import AuthorizedSession

    from ansible_collections.gpufleet.cluster.plugins.module_utils.offers import refresh

    credentials, found = google.auth.default(
        scopes=["https://www.googleapis.com/auth/cloud-platform"])
    session = AuthorizedSession(credentials)

    def get(url, params):
        response = session.get(url, params=params, timeout=120)
        if response.status_code >= 400:
            raise refresh.RefreshError(f"GET {url}: HTTP {response.status_code} "
                                       f"{response.text[:300]}")
        return response.json()

    project = project or found
    if not project:
        raise refresh.RefreshError("no Google Cloud project: pass --project")
    compute = os.environ.get("GPUFLEET_GCP_ENDPOINT") or \
        "https://compute.googleapis.com/compute/v1"
    billing = os.environ.get("GPUFLEET_GCP_BILLING_ENDPOINT") or \
        "https://cloudbilling.googleapis.com"
    return refresh.gcp_catalog(get, project, regions, compute.rstrip("/"), billing.rstrip("/"),
                               previous=current)


def _catalog_refresh(args, out, err) -> int:
    config_model()  # makes the collection importable
    from ansible_collections.gpufleet.cluster.plugins.module_utils.fleets import state
    from ansible_collections.gpufleet.cluster.plugins.module_utils.offers import (
        catalog,
        refresh,
    )

    root = state.state_dir(None)
    try:
        current, _source = catalog.load(args.backend, catalog.directory(root))
        settings = (state.backend_settings(root).get(args.backend) or {})
    except (catalog.CatalogError, state.StateError) as exc:
        err.write(f"gpufleet: {exc}\n")
        return 2
    if args.regions:
        regions = [r.strip() for r in args.regions.split(",") if r.strip()]
    else:
        regions = settings.get("regions") or sorted(set(
            o["region"] for e in current["instance_types"] for o in e["offers"]))
    try:
        if args.backend == "aws":
            data = _aws_refresh(regions, current)
        else:
            data = _gcp_refresh(regions, current, args.project or settings.get("project_id"))
    except ImportError as exc:
        err.write(f"gpufleet: refreshing the {args.backend} catalog needs {exc.name}: "
                  f"pip install 'gpufleet[{args.backend}]'\n")
        return 2
    except (refresh.RefreshError, catalog.CatalogError) as exc:
        err.write(f"gpufleet: {exc}\n")
        return 1
    except Exception as exc:  # noqa: BLE001 - credentials, network: the libraries' own kinds
        err.write(f"gpufleet: refreshing the {args.backend} catalog failed: "
                  f"{type(exc).__name__}: {exc}\n")
        return 1
    path = args.output or os.path.join(catalog.directory(root), args.backend + ".json")
    catalog.write(data, path)
    offers = sum(len(e["offers"]) for e in data["instance_types"])
    out.write(f"{path}: {len(data['instance_types'])} instance types, {offers} offers in "
              f"{len(regions)} regions\n")
    for note in data["notes"]:
        out.write(f"note: {note}\n")
    if args.ship:
        shipped = os.path.join(os.path.dirname(catalog.__file__),
                               "_catalog_%s.py" % args.backend)
        with open(shipped, "w") as handle:
            handle.write(catalog.module_source(data))
        out.write(f"{shipped}: rewritten\n")
    return 0
