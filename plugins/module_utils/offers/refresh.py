# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Refreshing a catalog (catalog.py) from the cloud's own APIs.

GCP: the Compute API's aggregated machineTypes (GPU machine types with their vCPUs, memory,
GPUs and zones; N1 shapes with the cards each zone can attach) and acceleratorTypes, and the
Cloud Billing Catalog API's Compute Engine SKUs: a machine's price is its vCPUs, memory and
GPUs at its family's and region's rates, on-demand and spot. A machine whose rates are not all
found keeps the previous catalog's prices, noted.

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
import re

from ..core.errors import GpufleetError
from .catalog import check

# GPU memory as dstack shows it, where EC2 reports less than the card's nominal size.
NOMINAL_GPU_MIB = {"A10G": 24576, "L4": 24576}
VENDORS = {"nvidia": "nvidia", "amd": "amd", "habana": "intel", "intel": "intel"}
SPOT_CHUNK = 50


class RefreshError(GpufleetError):
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
            raise RefreshError("DescribeInstanceTypes in %s failed: %s" % (region, exc)) from exc
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
            raise RefreshError("DescribeInstanceTypeOfferings in %s failed: %s"
                               % (region, exc)) from exc
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


# ---------------------------------------------------------------------------------------------
# GCP: machine types and accelerator types from the Compute API, prices from the Cloud Billing
# Catalog API (the SKUs of the Compute Engine service: per-hour vCPU, GiB-hour memory and
# per-hour GPU rates of each machine family and region, on-demand and spot).

COMPUTE_SERVICE_ID = "6F81-5844-456A"
# Accelerator types as the catalog names them, and the words of their billing SKUs.
GCP_ACCELERATORS = {
    "nvidia-tesla-t4": ("T4", 16384, r"Nvidia Tesla T4 GPU"),
    "nvidia-tesla-v100": ("V100", 16384, r"Nvidia Tesla V100 GPU"),
    "nvidia-tesla-p100": ("P100", 16384, r"Nvidia Tesla P100 GPU"),
    "nvidia-tesla-p4": ("P4", 8192, r"Nvidia Tesla P4 GPU"),
    "nvidia-l4": ("L4", 24576, r"Nvidia L4 GPU"),
    "nvidia-tesla-a100": ("A100", 40960, r"Nvidia Tesla A100 GPU"),
    "nvidia-a100-80gb": ("A100", 81920, r"Nvidia Tesla A100 80GB GPU"),
    "nvidia-h100-80gb": ("H100", 81920, r"Nvidia H100 80GB GPU"),
    "nvidia-h100-mega-80gb": ("H100", 81920, r"Nvidia H100 80GB Mega GPU"),
    "nvidia-h200-141gb": ("H200", 144384, r"Nvidia H200 141GB GPU"),
    "nvidia-b200": ("B200", 184320, r"Nvidia B200 GPU"),
}
# The words of each machine family's vCPU and memory SKUs.
GCP_FAMILIES = (
    ("a3-megagpu", "A3 ?Mega"), ("a3-ultragpu", "A3 ?Ultra"), ("a3-", "A3"), ("a2-", "A2"),
    ("a4-", "A4"), ("g2-", "G2"), ("n1-", "N1 Predefined"),
)
# The N1 shapes offered with attached GPUs, and how many cards of each type they take.
N1_SHAPES = {"n1-standard-4": 4, "n1-standard-8": 8, "n1-standard-16": 16,
             "n1-standard-32": 32}
N1_CARDS = {"nvidia-tesla-t4": (1, 2, 4), "nvidia-tesla-v100": (1, 2, 4, 8),
            "nvidia-tesla-p100": (1, 2, 4), "nvidia-tesla-p4": (1, 2, 4)}


def _pages(get, url, params=None):
    params = dict(params or {})
    while True:
        page = get(url, params)
        yield page
        token = page.get("nextPageToken")
        if not token:
            return
        params["pageToken"] = token


def _unit_price(sku):
    for info in sku.get("pricingInfo") or []:
        rates = (info.get("pricingExpression") or {}).get("tieredRates") or []
        if rates:
            money = rates[-1].get("unitPrice") or {}
            return int(money.get("units") or 0) + int(money.get("nanos") or 0) / 1e9
    return None


def _family_words(machine_type):
    for prefix, words in GCP_FAMILIES:
        if machine_type.startswith(prefix):
            return words
    return None


def gcp_prices(skus):
    """``{(kind, key, region, spot): USD}`` from Compute Engine SKUs: kind ``core`` and
    ``ram`` keyed by family words, ``gpu`` keyed by accelerator type."""
    prices = {}
    for sku in skus:
        description = sku.get("description") or ""
        category = sku.get("category") or {}
        spot = category.get("usageType") == "Preemptible"
        if category.get("usageType") not in ("OnDemand", "Preemptible"):
            continue
        price = _unit_price(sku)
        if price is None:
            continue
        keys = []
        for accelerator, (_name, _mib, words) in GCP_ACCELERATORS.items():
            if re.search(r"(^|Preemptible )%s running in" % words, description):
                keys.append(("gpu", accelerator))
        for _prefix, words in GCP_FAMILIES:
            for kind, noun in (("core", "Core"), ("ram", "Ram")):
                if re.search(r"(^|Preemptible )%s Instance %s running in" % (words, noun),
                             description):
                    keys.append((kind, words))
        for region in sku.get("serviceRegions") or []:
            for kind, key in keys:
                prices[(kind, key, region, spot)] = price
    return prices


def _gcp_price(prices, machine_type, cpus, memory_mib, accelerator, count, region, spot):
    words = _family_words(machine_type)
    core = prices.get(("core", words, region, spot))
    ram = prices.get(("ram", words, region, spot))
    gpu = prices.get(("gpu", accelerator, region, spot))
    if None in (core, ram, gpu):
        return None
    return round(cpus * core + memory_mib / 1024.0 * ram + count * gpu, 6)


def gcp_catalog(get, project, regions, compute_url, billing_url, previous=None, today=None):
    """A fresh GCP catalog for ``regions``. ``get(url, params)`` returns the JSON of an
    authorized GET."""
    today = today or datetime.date.today().isoformat()
    before = _previous_prices(previous)
    wanted = set(regions)
    notes = []
    shapes = {}       # (machine type, accelerator, count) -> {"cpus", "memory_mib", "zones"}
    cards = {}        # zone -> {accelerator: max cards}
    try:
        for page in _pages(get, "%s/projects/%s/aggregated/acceleratorTypes"
                           % (compute_url, project)):
            for scope, bucket in (page.get("items") or {}).items():
                zone = scope.rsplit("/", 1)[-1]
                for item in bucket.get("acceleratorTypes") or []:
                    cards.setdefault(zone, {})[item["name"]] = int(
                        item.get("maximumCardsPerInstance") or 0)
        for page in _pages(get, "%s/projects/%s/aggregated/machineTypes"
                           % (compute_url, project)):
            for scope, bucket in (page.get("items") or {}).items():
                zone = scope.rsplit("/", 1)[-1]
                if zone.rsplit("-", 1)[0] not in wanted:
                    continue
                for item in bucket.get("machineTypes") or []:
                    name = item["name"]
                    base = {"cpus": int(item["guestCpus"]), "memory_mib": int(item["memoryMb"])}
                    for accel in item.get("accelerators") or []:
                        kind = accel.get("guestAcceleratorType")
                        if kind in GCP_ACCELERATORS:
                            key = (name, kind, int(accel["guestAcceleratorCount"]))
                            shapes.setdefault(key, dict(base, zones=set()))["zones"].add(zone)
                    if name in N1_SHAPES:
                        for kind, counts in N1_CARDS.items():
                            limit = (cards.get(zone) or {}).get(kind, 0)
                            for count in counts:
                                if count <= limit:
                                    key = (name, kind, count)
                                    shapes.setdefault(key, dict(base, zones=set()))[
                                        "zones"].add(zone)
    except Exception as exc:  # pylint: disable=broad-exception-caught
        raise RefreshError("listing machine and accelerator types failed: %s" % exc) from exc
    try:
        url = "%s/v1/services/%s/skus" % (billing_url, COMPUTE_SERVICE_ID)
        skus = [sku for page in _pages(get, url, {"currencyCode": "USD"})
                for sku in page.get("skus") or []]
        prices = gcp_prices(skus)
    except Exception as exc:  # pylint: disable=broad-exception-caught
        prices = {}
        notes.append("the Cloud Billing Catalog API failed (%s); prices are the previous "
                     "catalog's" % exc)
    entries = {}
    for (name, kind, count), shape in sorted(shapes.items()):
        gpu_name, gpu_mib, _words = GCP_ACCELERATORS[kind]
        for region in sorted(set(z.rsplit("-", 1)[0] for z in shape["zones"])):
            args = (prices, name, shape["cpus"], shape["memory_mib"], kind, count, region)
            price = _gcp_price(*(args + (False,)))
            spot_price = _gcp_price(*(args + (True,)))
            old = before.get((name, region))
            if price is None and old is not None:
                price, spot_price = old["price"], old["spot_price"]
                notes.append("%s (%d x %s) in %s: prices kept from the previous catalog"
                             % (name, count, gpu_name, region))
            if price is None:
                notes.append("%s (%d x %s) in %s: left out (no price)"
                             % (name, count, gpu_name, region))
                continue
            if spot_price is not None and spot_price >= price:
                spot_price = None
            entry = entries.setdefault((name, gpu_name, count), {
                "name": name, "cpus": shape["cpus"], "memory_mib": shape["memory_mib"],
                "arch": "x86", "gpu": {"vendor": "nvidia", "name": gpu_name,
                                       "memory_mib": gpu_mib, "count": count},
                "offers": []})
            entry["offers"].append({
                "region": region,
                "zones": sorted(z for z in shape["zones"] if z.rsplit("-", 1)[0] == region),
                "price": price, "spot_price": spot_price})
    if not entries:
        raise RefreshError("no GPU machine type with a price was found in %s"
                           % ", ".join(regions))
    data = {
        "backend": "gcp", "as_of": today, "currency": "USD",
        "source": "Compute Engine machineTypes and acceleratorTypes (aggregated lists) and the "
                  "Cloud Billing Catalog API (Compute Engine SKUs, on-demand and spot)",
        "notes": notes,
        "instance_types": [entries[key] for key in sorted(
            entries, key=lambda k: (k[0], k[1], k[2]))],
    }
    return check(data, "gcp", "the refreshed gcp catalog")
