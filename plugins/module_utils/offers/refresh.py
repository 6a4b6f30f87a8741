# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Refreshing a catalog (catalog.py) from the cloud's own APIs.

AWS: EC2's DescribeInstanceTypes (GPU types, their vCPUs, memory, architecture and GPUs),
DescribeInstanceTypeOfferings (the zones of each region that offer them),
DescribeSpotPriceHistory (the lowest current spot price of each type in the region) and the
Price List API (on-demand Linux prices, shared tenancy). A price the Price List API does not give
(no permission, a new type) is kept from the previous catalog and noted; an offer without any
on-demand price is left out and noted.

    data = aws_catalog(client_for, ["us-east-1", "us-west-2"], previous=catalog.shipped("aws"))
"""

from __future__ import annotations

import datetime
import json

from .catalog import check

# GPU memory as dstack shows it, where EC2 reports less than the card's nominal size.
NOMINAL_GPU_MIB = {"A10G": 24576, "L4": 24576}
VENDORS = {"nvidia": "nvidia", "amd": "amd", "habana": "intel", "intel": "intel"}
SPOT_CHUNK = 50


class RefreshError(Exception):
    """A catalog could not be refreshed; the message says which call failed and why."""


def _gpu(info):
    gpus = (info.get("GpuInfo") or {}).get("Gpus") or []
    if not gpus:
        return None
    first = gpus[0]
    name = str(first.get("Name") or "").upper().replace("RADEON PRO ", "")
    vendor = VENDORS.get(str(first.get("Manufacturer") or "").lower())
    if not name or vendor is None:
        return None
    memory = NOMINAL_GPU_MIB.get(name, int((first.get("MemoryInfo") or {}).get("SizeInMiB") or 0))
    count = sum(int(g.get("Count") or 0) for g in gpus)
    if not memory or not count:
        return None
    return {"vendor": vendor, "name": name, "memory_mib": memory, "count": count}


def _arch(info):
    arches = (info.get("ProcessorInfo") or {}).get("SupportedArchitectures") or []
    return "arm" if "arm64" in arches and "x86_64" not in arches else "x86"


def _on_demand_prices(pricing, region, names):
    """``{instance type: USD per hour}`` from the Price List API, for Linux, shared tenancy."""
    prices = {}
    filters = [
        {"Type": "TERM_MATCH", "Field": "regionCode", "Value": region},
        {"Type": "TERM_MATCH", "Field": "operatingSystem", "Value": "Linux"},
        {"Type": "TERM_MATCH", "Field": "tenancy", "Value": "Shared"},
        {"Type": "TERM_MATCH", "Field": "preInstalledSw", "Value": "NA"},
        {"Type": "TERM_MATCH", "Field": "capacitystatus", "Value": "Used"},
    ]
    token = None
    while True:
        params = {"ServiceCode": "AmazonEC2", "Filters": filters, "FormatVersion": "aws_v1",
                  "MaxResults": 100}
        if token:
            params["NextToken"] = token
        page = pricing.get_products(**params)
        for text in page.get("PriceList") or []:
            product = json.loads(text) if isinstance(text, str) else text
            name = ((product.get("product") or {}).get("attributes") or {}).get("instanceType")
            if name not in names:
                continue
            for term in ((product.get("terms") or {}).get("OnDemand") or {}).values():
                for dimension in (term.get("priceDimensions") or {}).values():
                    usd = (dimension.get("pricePerUnit") or {}).get("USD")
                    try:
                        value = float(usd)
                    except (TypeError, ValueError):
                        continue
                    if value > 0:
                        prices[name] = value
        token = page.get("NextToken")
        if not token:
            return prices


def _previous_prices(previous):
    found = {}
    for entry in (previous or {}).get("instance_types") or []:
        for offer in entry["offers"]:
            found[(entry["name"], offer["region"])] = offer
    return found


def aws_catalog(client_for, regions, previous=None, today=None):
    """A fresh AWS catalog for ``regions``. ``client_for(service, region)`` makes boto3
    clients (``ec2`` per region, ``pricing`` in us-east-1)."""
    today = today or datetime.date.today().isoformat()
    before = _previous_prices(previous)
    types = {}
    notes = []
    try:
        pricing = client_for("pricing", "us-east-1")
    except Exception as exc:  # pylint: disable=broad-exception-caught
        pricing = None
        notes.append("the Price List API could not be reached (%s); on-demand prices are the "
                     "previous catalog's" % exc)
    for region in regions:
        ec2 = client_for("ec2", region)
        try:
            infos = [info for page in ec2.get_paginator("describe_instance_types").paginate()
                     for info in page["InstanceTypes"] if _gpu(info)]
        except Exception as exc:  # pylint: disable=broad-exception-caught
            raise RefreshError("DescribeInstanceTypes in %s failed: %s" % (region, exc))
        names = sorted(info["InstanceType"] for info in infos)
        if not names:
            continue
        zones = {}
        try:
            pages = ec2.get_paginator("describe_instance_type_offerings").paginate(
                LocationType="availability-zone",
                Filters=[{"Name": "instance-type", "Values": names}])
            for page in pages:
                for item in page["InstanceTypeOfferings"]:
                    zones.setdefault(item["InstanceType"], set()).add(item["Location"])
        except Exception as exc:  # pylint: disable=broad-exception-caught
            raise RefreshError("DescribeInstanceTypeOfferings in %s failed: %s" % (region, exc))
        spot = {}
        now = datetime.datetime.now(datetime.timezone.utc)
        for start in range(0, len(names), SPOT_CHUNK):
            try:
                history = ec2.describe_spot_price_history(
                    InstanceTypes=names[start:start + SPOT_CHUNK],
                    ProductDescriptions=["Linux/UNIX"], StartTime=now)
            except Exception as exc:  # pylint: disable=broad-exception-caught
                notes.append("no spot prices in %s (%s)" % (region, exc))
                break
            for item in history.get("SpotPriceHistory") or []:
                value = float(item["SpotPrice"])
                name = item["InstanceType"]
                spot[name] = min(value, spot.get(name, value))
        prices = {}
        if pricing is not None:
            try:
                prices = _on_demand_prices(pricing, region, set(names))
            except Exception as exc:  # pylint: disable=broad-exception-caught
                notes.append("the Price List API failed for %s (%s); on-demand prices there "
                             "are the previous catalog's" % (region, exc))
        for info in infos:
            name = info["InstanceType"]
            price = prices.get(name)
            if price is None and (name, region) in before:
                price = before[(name, region)]["price"]
                notes.append("%s in %s: on-demand price kept from the previous catalog"
                             % (name, region))
            if price is None or not zones.get(name):
                notes.append("%s in %s: left out (%s)" % (
                    name, region, "no on-demand price" if price is None else "no zone offers it"))
                continue
            spot_price = spot.get(name)
            if spot_price is not None and spot_price >= price:
                spot_price = None
            entry = types.setdefault(name, {
                "name": name, "cpus": int(info["VCpuInfo"]["DefaultVCpus"]),
                "memory_mib": int(info["MemoryInfo"]["SizeInMiB"]), "arch": _arch(info),
                "gpu": _gpu(info), "offers": []})
            entry["offers"].append({"region": region, "zones": sorted(zones[name]),
                                    "price": round(price, 6),
                                    "spot_price": None if spot_price is None
                                    else round(spot_price, 6)})
    if not types:
        raise RefreshError("no GPU instance type with a price was found in %s"
                           % ", ".join(regions))
    for entry in types.values():
        entry["offers"].sort(key=lambda o: o["region"])
    data = {
        "backend": "aws", "as_of": today, "currency": "USD",
        "source": "EC2 DescribeInstanceTypes, DescribeInstanceTypeOfferings and "
                  "DescribeSpotPriceHistory, and the AWS Price List API (Linux, shared tenancy)",
        "notes": notes,
        "instance_types": [types[name] for name in sorted(types)],
    }
    return check(data, "aws", "the refreshed aws catalog")
