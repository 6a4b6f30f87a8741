# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""What the aws backend asks EC2 for, and what EC2's answers become (instance and volume
records), as plain data: no boto3, no network.

Every request the backend makes is built here, so its exact parameters are unit-tested and the
calls themselves (aws.py) stay thin:

    interfaces = network_interfaces(type_info, subnet, [group], public_ips)   # EFA layout
    request = run_instances_request(launch)                                   # RunInstances
    nums = instance_nums(instance)                                            # from tags

Truth lives in tags. Every resource a fleet makes carries ``gpufleet:fleet=<fleet>``. One
RunInstances call launches a group of instances with the same tags, so an instance's number is
not a tag of its own: ``gpufleet:nums`` lists the numbers of the group (``3,4,5``) and each
instance takes the one at its launch index (EC2's ``AmiLaunchIndex``). That keeps the number
of mutating calls the same for 1 or 32 instances.
"""

from __future__ import annotations

import datetime
import hashlib
import json
import re
from typing import Any, Iterable, Mapping

from .cloud_common import instance_record
from .errors import LayoutError
from .made_for import values as made_for_values

TAG_FLEET = "gpufleet:fleet"
TAG_NUMS = "gpufleet:nums"
TAG_PLACEMENT = "gpufleet:placement"
TAG_BLOCKS = "gpufleet:blocks"
TAG_PRICE = "gpufleet:price"
TAG_CREATED_BY = "gpufleet:created-by"
# The gpufleet user who created an instance, and each published member's key fingerprint
# (``gpufleet:member:<user>``, fleets/access.py).
TAG_CREATOR = "gpufleet:creator"
TAG_MEMBER = "gpufleet:member:"
TAG_VOLUME = "gpufleet:volume"
TAG_EXTERNAL = "gpufleet:external"
# An instance made because a run needed it: the run and its idle limit (made_for.py).
TAG_MADE_FOR = "gpufleet:made-for-run"
TAG_IDLE = "gpufleet:idle-duration"
CREATED_BY = "gpufleet"
SSH_USER = "ubuntu"

# Instance types whose first network card carries no EFA interface
# (docs/reference/dstack-runtime.md#aws-instances).
PRIMARY_CARD_ENA_ONLY = ("p6-b300.48xlarge",)
# Types on which every fourth network card gets a full EFA interface (with IP) instead of an
# EFA-only one.
EVERY_FOURTH_CARD_EFA = ("p5.48xlarge",)
# Burstable types cannot join a cluster placement group.
NO_CLUSTER_PLACEMENT = re.compile(r"^t[23]\.")

# RunInstances errors that mean "not now, not here": the next offer (zone, region, instance
# type) may have capacity; when none has, the fleet's retry policy sees a no-capacity event.
CAPACITY_ERRORS = frozenset((
    "InsufficientInstanceCapacity",
    "InsufficientHostCapacity",
    "InsufficientReservedInstanceCapacity",
    "InsufficientCapacityOnOutpost",
    "InsufficientCapacity",
    "SpotMaxPriceTooLow",
    "MaxSpotInstanceCountExceeded",
    "Unsupported",                      # the type is not offered in that zone
))
# Quota errors: also no capacity for this account, reported with what to raise.
QUOTA_ERRORS = frozenset(("VcpuLimitExceeded", "InstanceLimitExceeded"))

ROOT_DEVICE = "/dev/sda1"


def fleet_tags(fleet: str, config_tags: dict[str, str] | None = None,
               extra: dict[str, str] | None = None) -> dict[str, str]:
    """The tags every resource of the fleet gets: the fleet's ``tags`` first, ours last (ours
    win, so a user tag cannot detach a resource from its fleet)."""
    tags = dict(config_tags or {})
    tags.update({TAG_FLEET: fleet, TAG_CREATED_BY: CREATED_BY, "Name": fleet})
    tags.update(extra or {})
    return tags


def tag_list(tags: Mapping[str, object]) -> list[dict[str, str]]:
    return [{"Key": k, "Value": str(v)} for k, v in sorted(tags.items())]


def tags_of(resource: dict[str, Any]) -> dict[str, str]:
    return dict((t["Key"], t["Value"]) for t in resource.get("Tags") or [])


def tag_specifications(tags: Mapping[str, object],
                       kinds: Iterable[str] = ("instance", "volume", "network-interface"),
                       ) -> list[dict[str, Any]]:
    return [{"ResourceType": kind, "Tags": tag_list(tags)} for kind in kinds]


def resource_name(fleet: str, what: str | None = None) -> str:
    """``gpufleet-<fleet>`` (or ``gpufleet-<fleet>-<what>``): security group, placement group
    and key pair names."""
    return "gpufleet-%s" % fleet + ("-%s" % what if what else "")


# The security group every gateway's host of a VPC is in, besides its own fleet's: each fleet's
# group lets it in over TCP, so that a gateway reaches the replicas of the services it publishes.
# (A fleet's group is gpufleet-NAME, NAME starting with a letter: this name is none of them.)
GATEWAYS_GROUP = "gpufleet--gateways"


def security_group_rules(group_id: str, gateways_group: str | None = None,
                         gateway: bool = False) -> list[dict[str, Any]]:
    """Ingress of a fleet's security group: SSH from anywhere, all traffic from the group
    itself, which EFA and NCCL between the fleet's instances need, and TCP from the VPC's
    gateways (``gateways_group``); a gateway's host also takes HTTP and HTTPS from anywhere."""
    rules: list[dict[str, Any]] = [
        {"IpProtocol": "tcp", "FromPort": 22, "ToPort": 22,
         "IpRanges": [{"CidrIp": "0.0.0.0/0", "Description": "SSH"}],
         "Ipv6Ranges": [{"CidrIpv6": "::/0", "Description": "SSH"}]},
        {"IpProtocol": "-1",
         "UserIdGroupPairs": [{"GroupId": group_id,
                               "Description": "all traffic between the fleet's instances"}]},
    ]
    if gateways_group:
        rules.append({"IpProtocol": "tcp", "FromPort": 0, "ToPort": 65535,
                      "UserIdGroupPairs": [{"GroupId": gateways_group,
                                            "Description": "gateways to the services' replicas"}]})
    for port in ((80, 443) if gateway else ()):
        rules.append({"IpProtocol": "tcp", "FromPort": port, "ToPort": port,
                      "IpRanges": [{"CidrIp": "0.0.0.0/0", "Description": "gateway services"}],
                      "Ipv6Ranges": [{"CidrIpv6": "::/0", "Description": "gateway services"}]})
    return rules


def missing_rules(group: dict[str, Any], rules: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The ``rules`` a described security group (``IpPermissions``) does not have, by
    protocol, ports and source (an address range or a group)."""
    def sources(rule):
        found = set()
        for pair in rule.get("UserIdGroupPairs") or []:
            found.add((rule.get("IpProtocol"), rule.get("FromPort"), rule.get("ToPort"),
                       pair.get("GroupId")))
        for block in rule.get("IpRanges") or []:
            found.add((rule.get("IpProtocol"), rule.get("FromPort"), rule.get("ToPort"),
                       block.get("CidrIp")))
        return found

    held = set()
    for rule in group.get("IpPermissions") or []:
        held |= sources(rule)
    return [rule for rule in rules if not sources(rule) <= held]


def efa_interfaces(type_info: dict[str, Any]) -> int:
    """How many EFA interfaces an instance type takes (0: none), from DescribeInstanceTypes."""
    network = type_info.get("NetworkInfo") or {}
    if not network.get("EfaSupported"):
        return 0
    return int((network.get("EfaInfo") or {}).get("MaximumEfaInterfaces") or 0)


def network_interfaces(type_info: dict[str, Any], subnet_id: str, group_ids: list[str],
                       public_ip: bool) -> list[dict[str, Any]] | None:
    """The NetworkInterfaces of a launch on an EFA type, laid out as dstack does; None for a
    type without EFA (the launch then names the subnet and groups itself).

    The primary interface (card 0, device 0) is ``efa`` unless the type's first card is
    ENA-only. Types with several EFA interfaces get one more per network card (device 1),
    ``efa-only``, or ``efa`` on every fourth card of a p5.48xlarge. EC2 gives no public IPv4 to
    a launch with several interfaces, so then ``public_ip`` is left to an Elastic IP
    (``needs_elastic_ip``).
    """
    count = efa_interfaces(type_info)
    if not count:
        return None
    if not subnet_id:
        raise LayoutError("EFA requires a subnet: set subnet ids for the region in the aws "
                          "backend settings, or use a VPC with a subnet in the zone")
    name = type_info.get("InstanceType")
    primary_efa = name not in PRIMARY_CARD_ENA_ONLY
    cards = count if primary_efa else count + 1
    single = cards == 1

    def interface(card, device, kind):
        spec = {"NetworkCardIndex": card, "DeviceIndex": device, "SubnetId": subnet_id,
                "Groups": list(group_ids), "DeleteOnTermination": True}
        if kind:
            spec["InterfaceType"] = kind
        return spec

    first = interface(0, 0, "efa" if primary_efa else None)
    first["AssociatePublicIpAddress"] = bool(public_ip) and single
    layout = [first]
    for card in range(1, cards):
        every_fourth = name in EVERY_FOURTH_CARD_EFA and card % 4 == 0
        layout.append(interface(card, 1, "efa" if every_fourth else "efa-only"))
    return layout


def needs_elastic_ip(interfaces, public_ips):
    """Whether each instance gets an Elastic IP on its primary interface after launch: public
    IPs are wanted and the launch has more than one interface."""
    return bool(public_ips) and bool(interfaces) and len(interfaces) > 1


def uses_placement_group(config: dict[str, Any], instance_type: str) -> bool:
    return config.get("placement") == "cluster" and not NO_CLUSTER_PLACEMENT.match(instance_type)


def client_token(fleet: str, nums: list[int], offer: dict[str, Any], zone: str,
                 attempt: int = 0) -> str:
    """The idempotency token of one launch: the same fleet, numbers, offer and zone give the
    same token, so a retried or re-run call returns the instances already launched instead of
    launching more. ``attempt`` moves on when EC2 answers a token with instances that are
    gone (a later launch of the same numbers after they were terminated)."""
    key = json.dumps([fleet, sorted(nums), offer["instance_type"], offer["region"], zone,
                      bool(offer["spot"]), attempt], sort_keys=True)
    return "gpufleet-" + hashlib.sha256(key.encode()).hexdigest()[:48]


def run_instances_request(launch: dict[str, Any]) -> dict[str, Any]:
    """The RunInstances parameters of one launch.

    ``launch``: {fleet, nums, offer (offers/select.py), zone, image_id, key_name, subnet_id,
    group_ids, public_ips, interfaces (network_interfaces(), or None), placement_group,
    disk_gb, tags, min_count, reservation (id or None), capacity_block (bool), user_data,
    attempt, made_for (made_for.py; None for the fleet's own instances)}.
    """
    offer = launch["offer"]
    nums = list(launch["nums"])
    ours = {
        TAG_NUMS: ",".join(str(n) for n in nums),
        TAG_PLACEMENT: launch.get("placement") or "any",
        TAG_BLOCKS: str(launch.get("blocks") or 1),
        TAG_PRICE: repr(float(offer["price"])),
    }
    marks = made_for_values(launch.get("made_for"))
    if marks:
        ours.update({TAG_MADE_FOR: marks[0], TAG_IDLE: marks[1]})
    if launch.get("creator"):
        ours[TAG_CREATOR] = launch["creator"]
    tags = fleet_tags(launch["fleet"], launch.get("tags"), ours)
    request = {
        "ImageId": launch["image_id"],
        "InstanceType": offer["instance_type"],
        "MinCount": launch.get("min_count") or len(nums),
        "MaxCount": len(nums),
        "KeyName": launch["key_name"],
        "ClientToken": client_token(launch["fleet"], nums, offer, launch["zone"],
                                    launch.get("attempt") or 0),
        "TagSpecifications": tag_specifications(tags),
        "BlockDeviceMappings": [{
            "DeviceName": launch.get("root_device") or ROOT_DEVICE,
            "Ebs": {"VolumeSize": int(launch["disk_gb"]), "VolumeType": "gp3",
                    "DeleteOnTermination": True},
        }],
        "MetadataOptions": {"HttpTokens": "required", "HttpEndpoint": "enabled",
                            "HttpPutResponseHopLimit": 2},
        "Placement": {"AvailabilityZone": launch["zone"]},
    }
    if launch.get("placement_group"):
        request["Placement"]["GroupName"] = launch["placement_group"]
    interfaces = launch.get("interfaces")
    if interfaces:
        request["NetworkInterfaces"] = interfaces
    else:
        request["NetworkInterfaces"] = [{
            "DeviceIndex": 0, "SubnetId": launch["subnet_id"],
            "Groups": list(launch["group_ids"]),
            "AssociatePublicIpAddress": bool(launch.get("public_ips", True)),
            "DeleteOnTermination": True,
        }]
    if launch.get("capacity_block"):
        request["InstanceMarketOptions"] = {"MarketType": "capacity-block"}
    elif offer["spot"]:
        request["InstanceMarketOptions"] = {
            "MarketType": "spot",
            "SpotOptions": {"SpotInstanceType": "one-time",
                            "InstanceInterruptionBehavior": "terminate"},
        }
    if launch.get("reservation"):
        request["CapacityReservationSpecification"] = {
            "CapacityReservationTarget": {"CapacityReservationId": launch["reservation"]}}
    if launch.get("user_data"):
        request["UserData"] = launch["user_data"]
    return request


def instance_nums(instance: dict[str, Any]) -> int | None:
    """The instance number of a described instance: its launch index into ``gpufleet:nums``;
    None for an instance that is not one of ours or whose tags are damaged."""
    tags = tags_of(instance)
    try:
        nums = [int(n) for n in tags.get(TAG_NUMS, "").split(",")]
        return nums[int(instance.get("AmiLaunchIndex", 0))]
    except (ValueError, IndexError):
        return None


# EC2 instance states as gpufleet instance statuses (fleets.records).
STATUSES = {
    "pending": "provisioning",
    "running": "idle",
    "stopping": "stopped",
    "stopped": "stopped",
    "shutting-down": "terminating",
    "terminated": "terminated",
}
GONE = ("shutting-down", "terminated")


# --- What EC2's answers become: volume and instance records ----------------------------------

VOLUME_STATUSES = {"creating": "submitted", "available": "active", "in-use": "active",
                   "deleting": "terminating", "deleted": "terminated", "error": "failed"}


def volume_record(name, region, volume):
    """A volume record (docs/volumes.md) from a described EBS volume."""
    tags = tags_of(volume)
    attachments = [a.get("InstanceId") for a in volume.get("Attachments") or []
                   if a.get("State") in ("attaching", "attached")]
    return {
        "name": name, "backend": "aws", "region": region,
        "availability_zone": volume.get("AvailabilityZone"),
        "size": volume.get("Size"), "volume_id": volume["VolumeId"],
        "status": VOLUME_STATUSES.get(volume.get("State"), volume.get("State")),
        "external": tags.get(TAG_EXTERNAL) == "true",
        "attached_to": attachments,
        "created": _iso(volume.get("CreateTime")),
    }


def members_of(tags: Mapping[str, str]) -> dict[str, str]:
    """``{user: fingerprint}`` of the members an instance's tags publish."""
    return dict((key[len(TAG_MEMBER):], value) for key, value in tags.items()
                if key.startswith(TAG_MEMBER) and key[len(TAG_MEMBER):] and value)


def _iso(value):
    if isinstance(value, datetime.datetime):
        if value.tzinfo is None:
            value = value.replace(tzinfo=datetime.timezone.utc)
        return value.astimezone(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    return value


def instance_records(placed: list[tuple[str, dict[str, Any]]], fleet: str, key_file: str,
                     public_ips: bool = True, user: str = SSH_USER) -> list[dict[str, Any]]:
    """Instance records (fleets.records) of the fleet's described instances."""
    records = []
    for region, instance in placed:
        num = instance_nums(instance)
        tags = tags_of(instance)
        if tags.get(TAG_FLEET) != fleet or num is None:
            continue
        state = instance["State"]["Name"]
        reason = (instance.get("StateReason") or {}).get("Message")
        records.append(instance_record(fleet, num, "aws", {
            # Why it is not running (a spot instance reclaimed: Server.SpotInstanceTermination).
            "error": reason if state != "running" and reason else None,
            "region": region,
            "zone": (instance.get("Placement") or {}).get("AvailabilityZone"),
            "instance_type": instance.get("InstanceType"),
            "instance_id": instance["InstanceId"],
            "spot": instance.get("InstanceLifecycle") == "spot",
            "status": STATUSES.get(state, state),
            "created": _iso(instance.get("LaunchTime")),
            "public": instance.get("PublicIpAddress"),
            "private": instance.get("PrivateIpAddress"),
            "price": tags.get(TAG_PRICE), "blocks": tags.get(TAG_BLOCKS),
            "placement": tags.get(TAG_PLACEMENT),
            "made_for_run": tags.get(TAG_MADE_FOR), "idle_duration": tags.get(TAG_IDLE),
            "creator": tags.get(TAG_CREATOR), "members": members_of(tags),
        }, key_file, user, public_ips))
    records.sort(key=lambda r: r["num"])
    return records
