# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""What the gcp backend asks the Compute Engine API for, as plain data: no HTTP, no auth.

    interfaces = network_interfaces(machine_type, networks, public_ip)     # gVNIC / MRDMA NICs
    body = bulk_insert_body(names, properties, all_at_once)                # instances.bulkInsert
    request_id = request_id(fleet, names, offer, zone)                     # idempotency

Truth lives in labels: every instance and resource policy of a fleet carries
``gpufleet-fleet=<fleet>``. An instance is named ``<fleet>-<num>`` (instance names are unique
per zone), so its number is its name's last part, and a repeated bulkInsert of the same names
creates nothing twice.
"""

from __future__ import annotations

import hashlib
import re
import uuid
from typing import Any, Iterable

from .errors import LayoutError
from .made_for import values as made_for_values

LABEL_FLEET = "gpufleet-fleet"
LABEL_PLACEMENT = "gpufleet-placement"
LABEL_CREATED_BY = "gpufleet-created-by"
# The gpufleet user who created an instance, and each published member (fleets/access.py):
# ``gpufleet-member-<user>`` holds member_mark(fingerprint), since a label value allows only
# lowercase letters, digits, '_' and '-' (63 at most) and a fingerprint has others.
LABEL_CREATOR = "gpufleet-creator"
LABEL_MEMBER = "gpufleet-member-"
LABEL_VOLUME = "gpufleet-volume"
LABEL_EXTERNAL = "gpufleet-external"
META_PRICE = "gpufleet-price"
META_BLOCKS = "gpufleet-blocks"
# An instance made because a run needed it: the run and its idle limit (made_for.py).
META_MADE_FOR = "gpufleet-made-for-run"
META_IDLE = "gpufleet-idle-duration"
SSH_USER = "ubuntu"
SCOPES = ("https://www.googleapis.com/auth/cloud-platform",)

# Extra gVNIC NICs from extra_vpcs, by machine type (docs/reference/dstack-runtime.md#gcp-instances;
# docs/reference/interconnect.md#gcp-machine-types): the
# GPUDirect-TCPX(O) data NICs of A3, the one extra VPC of A3 Ultra and A4.
EXTRA_VPCS = {
    "a3-megagpu-8g": 8,
    "a3-highgpu-8g": 4,
    "a3-edgegpu-8g": 4,
    "a3-ultragpu-8g": 1,
    "a4-highgpu-8g": 1,
}
# Machine types with 8 RDMA NICs (nicType MRDMA) on the subnets of the RoCE VPC.
ROCE_NICS = {"a3-ultragpu-8g": 8, "a4-highgpu-8g": 8}
# GPUs attached to N1 machine types, by the catalog's name; other families come with theirs.
ATTACHED_GPUS = {"T4": "nvidia-tesla-t4", "V100": "nvidia-tesla-v100",
                 "P100": "nvidia-tesla-p100", "P4": "nvidia-tesla-p4"}
_LABEL_BAD = re.compile(r"[^a-z0-9_-]")

# Compute Engine answers that mean "not now, not here": the next zone or offer may do.
CAPACITY_ERRORS = frozenset((
    "ZONE_RESOURCE_POOL_EXHAUSTED",
    "ZONE_RESOURCE_POOL_EXHAUSTED_WITH_DETAILS",
    "RESOURCE_POOL_EXHAUSTED",
    "QUOTA_EXCEEDED",
    "RESOURCE_NOT_FOUND_IN_ZONE",
    "UNSUPPORTED_OPERATION",
))


def label_value(value: object) -> str:
    """A label value as Compute Engine takes it: lower-case letters, digits, ``_`` and ``-``,
    at most 63 characters."""
    return _LABEL_BAD.sub("-", str(value).lower())[:63]


def member_mark(fingerprint: str) -> str:
    """What a member label holds for a key fingerprint: 40 hex digits of its SHA-256."""
    return hashlib.sha256(fingerprint.encode("utf-8")).hexdigest()[:40]


def members_of(labels: dict[str, str]) -> dict[str, str]:
    """``{user: mark}`` of the members an instance's labels publish."""
    return dict((key[len(LABEL_MEMBER):], value) for key, value in (labels or {}).items()
                if key.startswith(LABEL_MEMBER) and key[len(LABEL_MEMBER):] and value)


def fleet_labels(fleet: str, tags: dict[str, object] | None = None,
                 placement: str | None = "any") -> dict[str, str]:
    """The fleet's ``tags`` as labels, then ours (ours win)."""
    labels = dict((label_value(k), label_value(v)) for k, v in (tags or {}).items())
    labels.update({LABEL_FLEET: label_value(fleet), LABEL_CREATED_BY: "gpufleet",
                   LABEL_PLACEMENT: label_value(placement)})
    return labels


def network_tag(fleet: str) -> str:
    """The network tag the fleet's firewall rules target."""
    return "gpufleet-" + fleet


# The network tag of every gateway's host, which each fleet's firewall lets in over TCP (a
# fleet's tag is gpufleet-NAME, NAME starting with a letter: this tag is none of them).
GATEWAY_TAG = "gpufleet--gateway"


def resource_name(fleet: str, what: str | None = None) -> str:
    return "gpufleet-%s" % fleet + ("-%s" % what if what else "")


def _network_url(project, name):
    return name if "/" in name else "projects/%s/global/networks/%s" % (project, name)


def _subnet_url(project, region, name):
    return name if "/" in name else "projects/%s/regions/%s/subnetworks/%s" % (
        project, region, name)


def network_interfaces(machine_type: str, project: str, region: str, main: dict[str, Any],
                       extras: Iterable[dict[str, Any]] = (), roce: dict[str, Any] | None = None,
                       public_ip: bool = True) -> list[dict[str, Any]]:
    """The networkInterfaces of an instance, laid out as dstack lays them out.

    ``main`` is ``{"network", "subnetwork"}`` (subnetwork may be None: the network's subnet in
    the region); ``extras`` the ``extra_vpcs`` as ``{"network", "subnetwork"}``, of which the
    machine type takes its count (EXTRA_VPCS); ``roce`` is ``{"network", "subnetworks": [...]}``
    for the RoCE VPC. With extra NICs the primary NIC is gVNIC too.
    """
    wanted = EXTRA_VPCS.get(machine_type, 0)
    chosen = list(extras)[:wanted]
    rdma = ROCE_NICS.get(machine_type, 0)
    primary = {"network": _network_url(project, main["network"])}
    if main.get("subnetwork"):
        primary["subnetwork"] = _subnet_url(project, region, main["subnetwork"])
    if public_ip:
        primary["accessConfigs"] = [{"name": "External NAT", "type": "ONE_TO_ONE_NAT"}]
    if chosen or (rdma and roce):
        primary["nicType"] = "GVNIC"
    layout = [primary]
    for extra in chosen:
        nic = {"network": _network_url(project, extra["network"]), "nicType": "GVNIC"}
        if extra.get("subnetwork"):
            nic["subnetwork"] = _subnet_url(project, region, extra["subnetwork"])
        layout.append(nic)
    if rdma and roce:
        subnets = list(roce.get("subnetworks") or [])
        if len(subnets) < rdma:
            raise LayoutError("%s requires %d RoCE subnets, but only %d are available in VPC %s"
                              % (machine_type, rdma, len(subnets), roce["network"]))
        for subnet in subnets[:rdma]:
            layout.append({"network": _network_url(project, roce["network"]),
                           "subnetwork": _subnet_url(project, region, subnet),
                           "nicType": "MRDMA"})
    return layout


def _made_for_items(made_for):
    marks = made_for_values(made_for)
    if not marks:
        return []
    return [{"key": META_MADE_FOR, "value": marks[0]}, {"key": META_IDLE, "value": marks[1]}]


def instance_properties(launch):
    """The instanceProperties of a bulkInsert (the part every instance of a launch shares).

    ``launch``: {project, fleet, offer, gpu (the catalog's gpu or None), zone, image,
    disk_gb, interfaces, public_key, placement, blocks, tags, resource_policy (URL or None),
    reservation, service_account, made_for (made_for.py; None for the fleet's own instances)}.
    """
    offer = launch["offer"]
    gpu = launch.get("gpu") or {}
    spot = bool(offer["spot"])
    properties = {
        "machineType": offer["instance_type"],
        "labels": dict(fleet_labels(launch["fleet"], launch.get("tags"), launch.get("placement")),
                       **({LABEL_CREATOR: label_value(launch["creator"])}
                          if launch.get("creator") else {})),
        "tags": {"items": [network_tag(launch["fleet"])]
                 + ([GATEWAY_TAG] if launch.get("gateway") else [])},
        "metadata": {"items": [
            {"key": "ssh-keys", "value": "%s:%s" % (launch.get("ssh_user") or SSH_USER,
                                                    launch["public_key"])},
            {"key": META_PRICE, "value": repr(float(offer["price"]))},
            {"key": META_BLOCKS, "value": str(launch.get("blocks") or 1)},
        ] + _made_for_items(launch.get("made_for"))},
        "disks": [{
            "boot": True, "autoDelete": True, "type": "PERSISTENT",
            "initializeParams": {"sourceImage": launch["image"],
                                 "diskSizeGb": str(int(launch["disk_gb"])),
                                 "diskType": "pd-balanced"},
        }],
        "networkInterfaces": launch["interfaces"],
        "scheduling": {
            # GPUs cannot move with a live migration.
            "onHostMaintenance": "TERMINATE" if gpu else "MIGRATE",
            "automaticRestart": not spot,
            "provisioningModel": "SPOT" if spot else "STANDARD",
        },
    }
    if spot:
        properties["scheduling"]["instanceTerminationAction"] = "DELETE"
    attached = ATTACHED_GPUS.get(gpu.get("name")) if offer["instance_type"].startswith("n1-") \
        else None
    if attached:
        properties["guestAccelerators"] = [{"acceleratorType": attached,
                                            "acceleratorCount": gpu["count"]}]
    if launch.get("resource_policy"):
        properties["resourcePolicies"] = [launch["resource_policy"]]
    if launch.get("reservation"):
        properties["reservationAffinity"] = {
            "consumeReservationType": "SPECIFIC_RESERVATION",
            "key": "compute.googleapis.com/reservation-name",
            "values": [launch["reservation"]],
        }
    if launch.get("service_account"):
        properties["serviceAccounts"] = [{"email": launch["service_account"],
                                          "scopes": list(SCOPES)}]
    return properties


def bulk_insert_body(names: list[str], properties: dict[str, Any],
                     all_at_once: bool) -> dict[str, Any]:
    """instances.bulkInsert: the named instances, all of them or as many as the zone has."""
    return {
        "count": str(len(names)),
        "minCount": str(len(names) if all_at_once else 1),
        "perInstanceProperties": dict((name, {}) for name in names),
        "instanceProperties": properties,
    }


def request_id(fleet: str, names: list[str], offer: dict[str, Any], zone: str,
               attempt: int = 0) -> str:
    """The requestId of one launch: the same launch repeated is the same request."""
    key = "|".join([fleet, ",".join(sorted(names)), offer["instance_type"], offer["region"],
                    zone, "spot" if offer["spot"] else "standard", str(attempt)])
    return str(uuid.uuid5(uuid.NAMESPACE_URL, "gpufleet:" + key))


def disk_body(name: str, zone: str, size_gb: int | float,
              tags: dict[str, object] | None = None) -> dict[str, Any]:
    """disks.insert of a network volume: a balanced persistent disk, labelled."""
    labels = dict((label_value(k), label_value(v)) for k, v in (tags or {}).items())
    labels.update({LABEL_VOLUME: label_value(name), LABEL_CREATED_BY: "gpufleet"})
    return {"name": name, "sizeGb": str(int(size_gb)),
            "type": "zones/%s/diskTypes/pd-balanced" % zone, "labels": labels}


def resource_policy_body(fleet: str) -> dict[str, Any]:
    """The compact placement policy of a cluster fleet (one availability domain)."""
    return {
        "name": resource_name(fleet),
        "description": "gpufleet fleet %s: compact placement" % fleet,
        "groupPlacementPolicy": {"availabilityDomainCount": 1, "collocation": "COLLOCATED"},
    }


def firewall_bodies(project: str, fleet: str, networks: Iterable[str],
                    gateway: bool = False) -> list[dict[str, Any]]:
    """SSH from anywhere and all traffic among the fleet's instances, on each network the
    instances use (the main VPC and the extra ones); on the main one, TCP from the gateways'
    hosts (GATEWAY_TAG), and HTTP and HTTPS from anywhere to a gateway's host."""
    tag = network_tag(fleet)
    networks = list(networks)
    rules = []
    for index, network in enumerate(networks):
        suffix = "" if index == 0 else "-%d" % index
        rules.append({
            "name": resource_name(fleet, "ssh" + suffix),
            "network": _network_url(project, network),
            "direction": "INGRESS", "priority": 1000,
            "allowed": [{"IPProtocol": "tcp", "ports": ["22"]}],
            "sourceRanges": ["0.0.0.0/0"], "targetTags": [tag],
            "description": "gpufleet fleet %s: SSH" % fleet,
        })
        rules.append({
            "name": resource_name(fleet, "internal" + suffix),
            "network": _network_url(project, network),
            "direction": "INGRESS", "priority": 1000,
            "allowed": [{"IPProtocol": "all"}],
            "sourceTags": [tag], "targetTags": [tag],
            "description": "gpufleet fleet %s: all traffic between its instances" % fleet,
        })
    main = _network_url(project, networks[0]) if networks else None
    if main:
        rules.append({
            "name": resource_name(fleet, "gateways"), "network": main,
            "direction": "INGRESS", "priority": 1000,
            "allowed": [{"IPProtocol": "tcp"}],
            "sourceTags": [GATEWAY_TAG], "targetTags": [tag],
            "description": "gpufleet fleet %s: gateways to the services' replicas" % fleet,
        })
    if main and gateway:
        rules.append({
            "name": resource_name(fleet, "web"), "network": main,
            "direction": "INGRESS", "priority": 1000,
            "allowed": [{"IPProtocol": "tcp", "ports": ["80", "443"]}],
            "sourceRanges": ["0.0.0.0/0"], "targetTags": [tag],
            "description": "gpufleet gateway %s: its services" % fleet,
        })
    return rules


def instance_num(instance: dict[str, Any], fleet: str) -> int | None:
    """The number in ``<fleet>-<num>``; None for another name."""
    name = instance.get("name") or ""
    prefix = fleet + "-"
    if not name.startswith(prefix) or not name[len(prefix):].isdigit():
        return None
    return int(name[len(prefix):])


STATUSES = {
    "PROVISIONING": "provisioning",
    "STAGING": "provisioning",
    "RUNNING": "idle",
    "STOPPING": "stopped",
    "STOPPED": "stopped",
    "SUSPENDING": "stopped",
    "SUSPENDED": "stopped",
    "REPAIRING": "unreachable",
    "TERMINATED": "stopped",
}
