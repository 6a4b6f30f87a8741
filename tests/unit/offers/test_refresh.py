"""Refreshing the AWS catalog from EC2 (the moto double) and the Price List API (a botocore
Stubber: moto has no Price List API): specs, zones, spot and on-demand prices, prices kept
from the previous catalog, and what is left out."""

from __future__ import annotations

import json

import boto3
import pytest
from ansible_collections.gpufleet.cluster.plugins.module_utils.offers import catalog
from ansible_collections.gpufleet.cluster.plugins.module_utils.offers.refresh import (
    RefreshError,
    aws_catalog,
)
from botocore.stub import Stubber

from tests.doubles.ec2 import Ec2Double

pytestmark = pytest.mark.cloud


def product(name, usd):
    return json.dumps({
        "product": {"attributes": {"instanceType": name, "regionCode": "us-east-1"}},
        "terms": {"OnDemand": {"T1": {"priceDimensions": {"D1": {
            "unit": "Hrs", "pricePerUnit": {"USD": "%.4f" % usd}}}}}},
    })


@pytest.fixture
def ec2(monkeypatch):
    double = Ec2Double()
    for key, value in double.env().items():
        monkeypatch.setenv(key, value)
    yield double
    double.stop()


def stubbed_pricing(pages):
    client = boto3.client("pricing", region_name="us-east-1", aws_access_key_id="x",
                          aws_secret_access_key="y")
    stubber = Stubber(client)
    for page in pages:
        stubber.add_response("get_products", page)
    stubber.activate()
    return client


def test_an_aws_catalog_from_ec2_and_the_price_list(ec2):
    pricing = stubbed_pricing([
        {"PriceList": [product("g5.xlarge", 1.006), product("m5.large", 0.096)],
         "FormatVersion": "aws_v1", "NextToken": "page-2"},
        {"PriceList": [product("p5.48xlarge", 55.04)], "FormatVersion": "aws_v1"},
    ])
    previous = {"instance_types": [{"name": "g4dn.xlarge", "offers": [
        {"region": "us-east-1", "zones": ["us-east-1a"], "price": 0.526, "spot_price": 0.2}]}]}

    def client_for(service, region):
        return pricing if service == "pricing" else boto3.client(service, region_name=region)

    data = aws_catalog(client_for, ["us-east-1"], previous, today="2026-11-22")
    assert data["as_of"] == "2026-11-22"
    entries = dict((e["name"], e) for e in data["instance_types"])
    assert sorted(entries) == ["g4dn.xlarge", "g5.xlarge", "p5.48xlarge"]
    g5 = entries["g5.xlarge"]
    assert (g5["cpus"], g5["memory_mib"], g5["arch"]) == (4, 16384, "x86")
    assert g5["gpu"] == {"vendor": "nvidia", "name": "A10G", "memory_mib": 24576, "count": 1}
    offer = g5["offers"][0]
    assert offer["region"] == "us-east-1" and offer["price"] == 1.006
    assert offer["zones"] and all(z.startswith("us-east-1") for z in offer["zones"])
    assert 0 < offer["spot_price"] < offer["price"]
    assert entries["p5.48xlarge"]["gpu"] == {"vendor": "nvidia", "name": "H100",
                                             "memory_mib": 81920, "count": 8}
    assert entries["g4dn.xlarge"]["offers"][0]["price"] == 0.526
    assert "g4dn.xlarge in us-east-1: on-demand price kept from the previous catalog" in \
        data["notes"]
    assert "p4d.24xlarge in us-east-1: left out (no on-demand price)" in data["notes"]
    # What a refresh makes is a catalog the loader takes.
    assert catalog.check(data, "aws", "refreshed") is data


def test_without_the_price_list_every_price_comes_from_the_previous_catalog(ec2):
    previous = catalog.shipped("aws")

    def client_for(service, region):
        if service == "pricing":
            raise RuntimeError("no credentials for the Price List API")
        return boto3.client(service, region_name=region)

    data = aws_catalog(client_for, ["us-west-2"], previous)
    assert data["notes"][0].startswith("the Price List API could not be reached")
    shipped = dict(((e["name"], o["region"]), o["price"])
                   for e in previous["instance_types"] for o in e["offers"])
    for entry in data["instance_types"]:
        assert entry["offers"][0]["price"] == shipped[(entry["name"], "us-west-2")]
    with pytest.raises(RefreshError, match="no GPU instance type with a price was found"):
        aws_catalog(client_for, ["us-west-2"], None)


def test_the_refresh_command_writes_the_catalog_the_loader_then_uses(
        ec2, tmp_path, monkeypatch, capsys):
    from gpufleet import cli

    monkeypatch.setenv("GPUFLEET_STATE_DIR", str(tmp_path))
    code = cli.main(["catalog", "refresh", "aws", "--regions", "eu-west-1"])
    out = capsys.readouterr().out
    # moto has no Price List API: prices come from the shipped catalog, as the notes say.
    assert code == 0, out
    # (moto's server prints its own complaint about the Price List API to the same stdout)
    assert "\n" + str(tmp_path / "catalog" / "aws.json") + ": " in "\n" + out
    assert "on-demand price kept from the previous catalog" in out
    data, source = catalog.load("aws", str(tmp_path / "catalog"))
    assert source == str(tmp_path / "catalog" / "aws.json")
    assert {o["region"] for e in data["instance_types"] for o in e["offers"]} == {"eu-west-1"}


# ---------------------------------------------------------------------------------------------
# GCP, against the Compute Engine double's machine types and billing SKUs


def sku(description, regions, usd, spot=False, unit="h"):
    units = int(usd)
    return {"description": ("Spot Preemptible " if spot else "") + description,
            "category": {"resourceFamily": "Compute",
                         "usageType": "Preemptible" if spot else "OnDemand"},
            "serviceRegions": regions,
            "pricingInfo": [{"pricingExpression": {"usageUnit": unit, "tieredRates": [
                {"startUsageAmount": 0, "unitPrice": {"currencyCode": "USD", "units": str(units),
                                                      "nanos": int(round((usd - units) * 1e9))}}
            ]}}]}


def test_a_gcp_catalog_from_machine_types_and_billing_skus(tmp_path):
    from ansible_collections.gpufleet.cluster.plugins.module_utils.offers.refresh import (
        gcp_catalog,
    )
    from google.auth.transport.requests import AuthorizedSession
    from google.oauth2 import service_account

    from tests.doubles.gce import GceDouble

    double = GceDouble()
    try:
        double.machine_types["us-central1-a"] = [
            {"name": "g2-standard-8", "guestCpus": 8, "memoryMb": 32768,
             "accelerators": [{"guestAcceleratorType": "nvidia-l4",
                               "guestAcceleratorCount": 1}]},
            {"name": "n1-standard-8", "guestCpus": 8, "memoryMb": 30720},
            {"name": "e2-medium", "guestCpus": 2, "memoryMb": 4096},
        ]
        double.machine_types["europe-west4-a"] = list(double.machine_types["us-central1-a"])
        double.accelerator_types["us-central1-a"] = [
            {"name": "nvidia-tesla-t4", "maximumCardsPerInstance": 2}]
        regions = ["us-central1"]
        double.skus = [
            sku("G2 Instance Core running in Americas", regions, 0.025),
            sku("G2 Instance Ram running in Americas", regions, 0.003, unit="GiBy.h"),
            sku("Nvidia L4 GPU running in Americas", regions, 0.56),
            sku("G2 Instance Core running in Americas", regions, 0.01, spot=True),
            sku("G2 Instance Ram running in Americas", regions, 0.001, spot=True),
            sku("Nvidia L4 GPU running in Americas", regions, 0.2, spot=True),
            sku("N1 Predefined Instance Core running in Americas", regions, 0.0316),
            sku("N1 Predefined Instance Ram running in Americas", regions, 0.0042),
            sku("Nvidia Tesla T4 GPU running in Americas", regions, 0.35),
        ]
        credentials = service_account.Credentials.from_service_account_file(
            double.credentials_file(str(tmp_path / "sa.json")),
            scopes=["https://www.googleapis.com/auth/cloud-platform"])
        session = AuthorizedSession(credentials)

        def get(url, params):
            response = session.get(url, params=params, timeout=30)
            response.raise_for_status()
            return response.json()

        data = gcp_catalog(get, double.project, regions, double.endpoint, double.url,
                           today="2026-11-22")
    finally:
        double.stop()
    entries = dict(((e["name"], e["gpu"]["count"]), e) for e in data["instance_types"])
    assert sorted(entries) == [("g2-standard-8", 1), ("n1-standard-8", 1), ("n1-standard-8", 2)]
    g2 = entries[("g2-standard-8", 1)]
    assert g2["gpu"] == {"vendor": "nvidia", "name": "L4", "memory_mib": 24576, "count": 1}
    # 8 vCPU x 0.025 + 32 GiB x 0.003 + 1 L4 x 0.56; spot at the spot rates.
    assert g2["offers"] == [{"region": "us-central1", "zones": ["us-central1-a"],
                             "price": 0.856, "spot_price": 0.312}]
    t4 = entries[("n1-standard-8", 2)]
    assert t4["offers"][0]["price"] == round(8 * 0.0316 + 30 * 0.0042 + 2 * 0.35, 6)
    assert t4["offers"][0]["spot_price"] is None      # no spot SKUs given
    # Only the regions asked for; the N1 cards follow the zone's limit (2 T4s here).
    assert all(o["region"] == "us-central1" for e in data["instance_types"]
               for o in e["offers"])


def test_the_refresh_command_for_gcp_with_application_default_credentials(tmp_path,
                                                                          monkeypatch, capsys):
    from gpufleet import cli
    from tests.doubles.gce import GceDouble

    double = GceDouble()
    try:
        double.machine_types["us-central1-b"] = [
            {"name": "g2-standard-4", "guestCpus": 4, "memoryMb": 16384,
             "accelerators": [{"guestAcceleratorType": "nvidia-l4",
                               "guestAcceleratorCount": 1}]}]
        double.skus = [sku("G2 Instance Core running in Americas", ["us-central1"], 0.025),
                       sku("G2 Instance Ram running in Americas", ["us-central1"], 0.003),
                       sku("Nvidia L4 GPU running in Americas", ["us-central1"], 0.56)]
        monkeypatch.setenv("GPUFLEET_STATE_DIR", str(tmp_path))
        monkeypatch.setenv("GOOGLE_APPLICATION_CREDENTIALS",
                           double.credentials_file(str(tmp_path / "sa.json")))
        monkeypatch.setenv("GPUFLEET_GCP_ENDPOINT", double.endpoint)
        monkeypatch.setenv("GPUFLEET_GCP_BILLING_ENDPOINT", double.url)
        code = cli.main(["catalog", "refresh", "gcp", "--regions", "us-central1"])
    finally:
        double.stop()
    out = capsys.readouterr().out
    assert code == 0, out
    assert out.startswith(str(tmp_path / "catalog" / "gcp.json") + ": 1 instance types, "
                          "1 offers in 1 regions")
    data, _source = catalog.load("gcp", str(tmp_path / "catalog"))
    expected = round(4 * 0.025 + 16 * 0.003 + 0.56, 6)
    assert data["instance_types"][0]["offers"][0]["price"] == expected
