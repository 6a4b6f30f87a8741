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
