# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The ``aws`` backend: a backend fleet's nodes are EC2 instances, launched with boto3.

Requests are built by aws_layout.py (plain data, unit-tested); this file makes the calls and
follows a fleet's resources by their tags (``gpufleet:fleet``), which are the only record:

    aws = Aws(settings)                         # settings: the aws backend's settings
    instances = aws.fleet_instances(fleet, regions)
    launched = aws.launch_group(fleet, nums, offers, ...)   # tries offers cheapest first
    aws.delete_fleet(fleet, regions)            # instances, then what the fleet created

Credentials come from boto3's usual chain (environment, shared files, instance profile), as
AWX injects them; ``AWS_ENDPOINT_URL`` points every call at another endpoint (tests use a local
EC2 double).
"""

from __future__ import annotations

from typing import Any

from . import aws_layout as layout
from .aws_layout import instance_records
from .cloud_common import launch_in_turn, merged_settings
from .errors import BackendError, CapacityError
from .interface import CloudBackend
from ..spec.gateway import GATEWAY_TAG

try:
    import boto3
    from botocore.config import Config
    from botocore.exceptions import BotoCoreError, ClientError, WaiterError
    HAS_BOTO3 = True
except ImportError:  # pragma: no cover - reported by the module
    HAS_BOTO3 = False

# The images a node boots when the settings name none: AWS's Deep Learning Base AMI (NVIDIA
# driver, Docker and the container toolkit installed) on GPU types, Canonical's Ubuntu 22.04
# elsewhere. Both log in as ubuntu.
GPU_IMAGE = ("amazon", "Deep Learning Base OSS Nvidia Driver GPU AMI (Ubuntu 22.04) *")
CPU_IMAGE = ("099720109477", "ubuntu/images/hvm-ssd*/ubuntu-jammy-22.04-*-server-*")
ARCHES = {"x86": "x86_64", "arm": "arm64"}
# EC2 states of the instances a fleet lists as its own (every state but the gone ones).
LISTED_STATES = ("pending", "running", "stopping", "stopped")
# How long to wait for launched instances to run, and between polls.
RUNNING_TIMEOUT = 600

DEFAULT_SETTINGS: dict[str, Any] = {
    "regions": None,          # the regions to use (default: every region of the catalog)
    "vpc_ids": {},            # region -> VPC id (default: the region's default VPC)
    "subnet_ids": {},         # region -> [subnet ids] (default: the VPC's subnets)
    "public_ips": True,       # give instances public IPv4 addresses
    "image_id": None,         # an AMI id, or region -> AMI id
    "image_owners": None,     # who may own the default images (default: as above)
    "tags": {},               # tags on everything, under the fleet's own tags
    "iam_instance_profile": None,
    "ssh_user": "ubuntu",     # the login user of the image (ubuntu on the default images)
}


class AwsError(BackendError):
    """An EC2 call or a setting that failed; the message says what and what to do."""


def settings_with_defaults(settings):
    return merged_settings("aws", DEFAULT_SETTINGS, settings, AwsError)


def _code(error):
    return error.response.get("Error", {}).get("Code", "") if isinstance(error, ClientError) \
        else type(error).__name__


def _message(error):
    if isinstance(error, ClientError):
        return "%s: %s" % (_code(error), error.response.get("Error", {}).get("Message", ""))
    return str(error)


class Aws(CloudBackend):
    """EC2 in the regions a fleet uses, with clients made once per region (the contract:
    interface.CloudBackend)."""

    name = "aws"

    def __init__(self, settings=None, session=None, poll=5):
        if not HAS_BOTO3:
            raise AwsError("the aws backend needs boto3 on the controller: pip install boto3")
        self.settings = settings_with_defaults(settings)
        self.session = session or boto3.session.Session()
        self.poll = poll            # seconds between polls of waiters
        self._clients = {}
        self._types = {}

    def ec2(self, region):
        if region not in self._clients:
            self._clients[region] = self.session.client(
                "ec2", region_name=region,
                config=Config(retries={"mode": "standard", "max_attempts": 3},
                              user_agent_extra="gpufleet"))
        return self._clients[region]

    def _call(self, region, what, operation, **params):
        try:
            return getattr(self.ec2(region), operation)(**params)
        except (ClientError, BotoCoreError) as exc:
            raise AwsError("%s in %s failed: %s" % (what, region, _message(exc))) from exc

    # -- reading ------------------------------------------------------------------------------

    def fleet_instances(self, fleet, regions):
        """``[(region, instance)]`` of the fleet's instances that are not gone, by tag."""
        found = []
        for region in regions:
            pages = self.ec2(region).get_paginator("describe_instances").paginate(Filters=[
                {"Name": "tag:" + layout.TAG_FLEET, "Values": [fleet]},
                {"Name": "instance-state-name", "Values": list(LISTED_STATES)},
            ])
            try:
                for page in pages:
                    for reservation in page["Reservations"]:
                        found.extend((region, i) for i in reservation["Instances"])
            except (ClientError, BotoCoreError) as exc:
                raise AwsError("listing the instances of fleet %s in %s failed: %s"
                               % (fleet, region, _message(exc))) from exc
        return found

    def all_fleet_instances(self, regions):
        """``{fleet: [(region, instance)]}`` of every gpufleet instance in ``regions``."""
        found = {}
        for region in regions:
            pages = self.ec2(region).get_paginator("describe_instances").paginate(Filters=[
                {"Name": "tag-key", "Values": [layout.TAG_FLEET]},
                {"Name": "instance-state-name", "Values": list(LISTED_STATES)},
            ])
            try:
                for page in pages:
                    for reservation in page["Reservations"]:
                        for instance in reservation["Instances"]:
                            fleet = layout.tags_of(instance).get(layout.TAG_FLEET)
                            found.setdefault(fleet, []).append((region, instance))
            except (ClientError, BotoCoreError) as exc:
                raise AwsError("listing gpufleet instances in %s failed: %s"
                               % (region, _message(exc))) from exc
        return found

    def type_info(self, region, instance_type):
        key = (region, instance_type)
        if key not in self._types:
            answer = self._call(region, "describing %s" % instance_type,
                                "describe_instance_types", InstanceTypes=[instance_type])
            if not answer["InstanceTypes"]:
                raise AwsError("instance type %s is not offered in %s" % (instance_type, region))
            self._types[key] = answer["InstanceTypes"][0]
        return self._types[key]

    def network(self, region, zone):
        """``(vpc id, subnet id)`` for a launch in ``zone``."""
        vpc_id = (self.settings["vpc_ids"] or {}).get(region)
        if not vpc_id:
            vpcs = self._call(region, "finding the default VPC", "describe_vpcs",
                              Filters=[{"Name": "isDefault", "Values": ["true"]}])["Vpcs"]
            if not vpcs:
                raise AwsError("%s has no default VPC: set vpc_ids.%s (and subnet_ids) in the "
                               "aws backend settings" % (region, region))
            vpc_id = vpcs[0]["VpcId"]
        filters = [{"Name": "vpc-id", "Values": [vpc_id]},
                   {"Name": "availability-zone", "Values": [zone]}]
        wanted = (self.settings["subnet_ids"] or {}).get(region)
        if wanted:
            filters.append({"Name": "subnet-id", "Values": list(wanted)})
        subnets = self._call(region, "finding a subnet", "describe_subnets",
                             Filters=filters)["Subnets"]
        if not subnets:
            return vpc_id, None
        subnets.sort(key=lambda s: (not s.get("DefaultForAz"), s["SubnetId"]))
        return vpc_id, subnets[0]["SubnetId"]

    def image_id(self, region, type_info):
        chosen = self.settings["image_id"]
        if isinstance(chosen, dict):
            chosen = chosen.get(region)
        if chosen:
            return chosen
        gpu = bool((type_info.get("GpuInfo") or {}).get("Gpus"))
        owner, pattern = GPU_IMAGE if gpu else CPU_IMAGE
        owners = self.settings["image_owners"] or [owner]
        arches = (type_info.get("ProcessorInfo") or {}).get("SupportedArchitectures") or []
        arch = "arm64" if "arm64" in arches and "x86_64" not in arches else "x86_64"
        images = self._call(region, "finding the image", "describe_images", Owners=owners,
                            Filters=[{"Name": "name", "Values": [pattern]},
                                     {"Name": "architecture", "Values": [arch]},
                                     {"Name": "state", "Values": ["available"]}])["Images"]
        if not images:
            raise AwsError("no image named %r (%s, owners %s) in %s: set image_id in the aws "
                           "backend settings" % (pattern, arch, ", ".join(owners), region))
        return max(images, key=lambda i: i.get("CreationDate") or "")["ImageId"]

    def reservation(self, reservation_id, regions):
        """What EC2 says of a capacity reservation or Capacity Block: ``{"backend",
        "instance_type", "region", "zone", "capacity_block", "state"}``."""
        for region in regions:
            try:
                found = self.ec2(region).describe_capacity_reservations(
                    CapacityReservationIds=[reservation_id])["CapacityReservations"]
            except (ClientError, BotoCoreError) as exc:
                if _code(exc).startswith("InvalidCapacityReservationId"):
                    continue
                raise AwsError("looking up capacity reservation %s in %s failed: %s"
                               % (reservation_id, region, _message(exc))) from exc
            if found:
                item = found[0]
                return {"backend": "aws", "instance_type": item["InstanceType"],
                        "region": region, "zone": item["AvailabilityZone"],
                        "capacity_block": item.get("ReservationType") == "capacity-block",
                        "state": item.get("State")}
        raise AwsError("capacity reservation %s was not found in %s: check the id and the "
                       "regions of the aws backend settings"
                       % (reservation_id, ", ".join(regions)))

    # -- what a fleet creates before its instances ---------------------------------------------

    def _tags(self, fleet, config_tags, kind):
        tags = dict(self.settings["tags"] or {})
        tags.update(config_tags or {})
        return layout.tag_specifications(layout.fleet_tags(fleet, tags), (kind,))

    def ensure_key_pair(self, region, fleet, public_key, config_tags=None):
        name = layout.resource_name(fleet)
        found = self._call(region, "finding the key pair", "describe_key_pairs", Filters=[
            {"Name": "key-name", "Values": [name]}])["KeyPairs"]
        if not found:
            self._call(region, "importing the key pair %s" % name, "import_key_pair",
                       KeyName=name, PublicKeyMaterial=public_key.encode(),
                       TagSpecifications=self._tags(fleet, config_tags, "key-pair"))
        return name

    def _group(self, region, vpc_id, name):
        found = self._call(region, "finding the security group", "describe_security_groups",
                           Filters=[{"Name": "group-name", "Values": [name]},
                                    {"Name": "vpc-id", "Values": [vpc_id]}])["SecurityGroups"]
        return found[0] if found else None

    def _find_group(self, region, vpc_id, name):
        return (self._group(region, vpc_id, name) or {}).get("GroupId")

    def ensure_gateways_group(self, region, vpc_id):
        """The VPC's security group of gateways' hosts (layout.GATEWAYS_GROUP), with no rule of
        its own: the fleets' groups let it in. Shared by every fleet of the VPC, it stays when
        a fleet goes."""
        name = layout.GATEWAYS_GROUP
        return self._find_group(region, vpc_id, name) or self._call(
            region, "creating the security group %s" % name, "create_security_group",
            GroupName=name, VpcId=vpc_id,
            Description="gpufleet gateways: the fleets' groups let it reach their replicas",
            TagSpecifications=[{"ResourceType": "security-group", "Tags": [
                {"Key": "gpufleet:shared", "Value": "gateways"}]}])["GroupId"]

    def ensure_security_group(self, region, vpc_id, fleet, config_tags=None, gateway=False):
        """The fleet's security group in the VPC: SSH from anywhere, everything between the
        fleet's instances (docs/reference/dstack-runtime.md#aws-instances), TCP from the VPC's
        gateways; a gateway's host also HTTP and HTTPS from anywhere."""
        name = layout.resource_name(fleet)
        gateways = self.ensure_gateways_group(region, vpc_id)
        found = self._group(region, vpc_id, name)
        if found:   # made by an earlier version, or for a fleet of the name: what it lacks
            missing = layout.missing_rules(found, layout.security_group_rules(
                found["GroupId"], gateways, gateway))
            if missing:
                self._call(region, "opening the security group %s" % name,
                           "authorize_security_group_ingress", GroupId=found["GroupId"],
                           IpPermissions=missing)
            return found["GroupId"]
        group_id = self._call(
            region, "creating the security group %s" % name, "create_security_group",
            GroupName=name, VpcId=vpc_id,
            Description="gpufleet fleet %s: SSH in, all traffic between its instances" % fleet,
            TagSpecifications=self._tags(fleet, config_tags, "security-group"))["GroupId"]
        self._call(region, "opening the security group %s" % name,
                   "authorize_security_group_ingress", GroupId=group_id,
                   IpPermissions=layout.security_group_rules(group_id, gateways, gateway))
        return group_id

    def ensure_placement_group(self, region, fleet, config_tags=None):
        name = layout.resource_name(fleet)
        found = self._call(region, "finding the placement group", "describe_placement_groups",
                           Filters=[{"Name": "tag:" + layout.TAG_FLEET, "Values": [fleet]}])
        if found["PlacementGroups"]:
            return found["PlacementGroups"][0]["GroupName"]
        self._call(region, "creating the placement group %s" % name, "create_placement_group",
                   GroupName=name, Strategy="cluster",
                   TagSpecifications=self._tags(fleet, config_tags, "placement-group"))
        return name

    # -- launching ----------------------------------------------------------------------------

    def launch_group(self, fleet, nums, offers, config, public_key, disk_gb, all_at_once):
        """Launch instances numbered ``nums`` from the first offers that have capacity.

        Each offer (cheapest first) and each of its zones gets one RunInstances call for the
        numbers still missing: all of them at once when ``all_at_once`` (a cluster), else as
        many as EC2 has (MinCount 1), the rest going on to the next offer. Capacity and quota
        errors move on; any other error stops. Returns ``[(region, instance)]``; raises
        NoCapacity, listing every attempt, when numbers remain.
        """
        return launch_in_turn(
            fleet, nums, offers,
            lambda missing, offer, zone: [(offer["region"], i) for i in self._launch(
                fleet, missing, offer, zone, config, public_key, disk_gb, all_at_once)],
            lambda item: layout.instance_nums(item[1]))

    def _launch(self, fleet, nums, offer, zone, config, public_key, disk_gb, all_at_once):
        region = offer["region"]
        info = self.type_info(region, offer["instance_type"])
        vpc_id, subnet_id = self.network(region, zone)
        if subnet_id is None:
            raise CapacityError("NoSubnetInZone")
        tags = config.get("tags")
        gateway = bool(config.get("gateway"))
        group_ids = [self.ensure_security_group(region, vpc_id, fleet, tags, gateway)]
        if gateway:   # its host is in the group the fleets let in
            group_ids.append(self.ensure_gateways_group(region, vpc_id))
        public_ips = bool(self.settings["public_ips"])
        interfaces = layout.network_interfaces(info, subnet_id, group_ids, public_ips)
        placement_group = None
        if layout.uses_placement_group(config, offer["instance_type"]):
            placement_group = self.ensure_placement_group(region, fleet, tags)
        user_tags = dict(self.settings["tags"] or {})
        user_tags.update(tags or {})
        launch = {
            "fleet": fleet, "nums": nums, "offer": offer, "zone": zone,
            "image_id": self.image_id(region, info),
            "key_name": self.ensure_key_pair(region, fleet, public_key, tags),
            "subnet_id": subnet_id, "group_ids": group_ids, "public_ips": public_ips,
            "interfaces": interfaces, "placement_group": placement_group, "disk_gb": disk_gb,
            "tags": user_tags, "placement": config.get("placement") or "any",
            "blocks": config.get("blocks") or 1, "min_count": None if all_at_once else 1,
            "reservation": config.get("reservation"),
            "capacity_block": bool(config.get("capacity_block")),
            "made_for": config.get("made_for"), "creator": config.get("creator"),
        }
        for attempt in range(3):
            launch["attempt"] = attempt
            request = layout.run_instances_request(launch)
            if self.settings["iam_instance_profile"]:
                request["IamInstanceProfile"] = {"Name": self.settings["iam_instance_profile"]}
            try:
                answer = self.ec2(region).run_instances(**request)
            except (ClientError, BotoCoreError) as exc:
                code = _code(exc)
                if code in layout.CAPACITY_ERRORS or code in layout.QUOTA_ERRORS:
                    raise CapacityError(code) from exc
                raise AwsError("launching %s in %s failed: %s"
                               % (offer["instance_type"], zone, _message(exc))) from exc
            instances = answer["Instances"]
            # A token EC2 has seen answers with that launch again: fine when it is this one
            # (a retried call), wrong when those instances are gone (an old launch of the
            # same numbers); then the next attempt gets a token of its own.
            if any(i["State"]["Name"] not in layout.GONE for i in instances):
                break
        else:
            raise AwsError("launching fleet %s in %s: EC2 answered every idempotency token with "
                           "terminated instances" % (fleet, zone))
        if layout.needs_elastic_ip(interfaces, public_ips):
            instances = self._wait_running(region, [i["InstanceId"] for i in instances])
            for instance in instances:
                self._elastic_ip(region, fleet, instance, tags)
        return instances

    def _elastic_ip(self, region, fleet, instance, config_tags):
        primary = next(n for n in instance["NetworkInterfaces"]
                       if n["Attachment"]["DeviceIndex"] == 0
                       and n["Attachment"].get("NetworkCardIndex", 0) == 0)
        if primary.get("Association", {}).get("PublicIp"):
            return
        allocation = self._call(region, "allocating an Elastic IP", "allocate_address",
                                Domain="vpc",
                                TagSpecifications=self._tags(fleet, config_tags, "elastic-ip"))
        self._call(region, "associating an Elastic IP", "associate_address",
                   AllocationId=allocation["AllocationId"],
                   NetworkInterfaceId=primary["NetworkInterfaceId"])

    def _wait_running(self, region, ids):
        try:
            self.ec2(region).get_waiter("instance_running").wait(
                InstanceIds=ids, WaiterConfig={"Delay": self.poll,
                                               "MaxAttempts": int(RUNNING_TIMEOUT / self.poll)})
        except WaiterError as exc:
            raise AwsError("instances %s in %s did not start running: %s"
                           % (", ".join(ids), region, exc)) from exc
        answer = self._call(region, "describing the new instances", "describe_instances",
                            InstanceIds=ids)
        return [i for r in answer["Reservations"] for i in r["Instances"]]

    def wait_running(self, placed):
        """The instances of ``[(region, instance)]`` once every one runs (IPs assigned)."""
        by_region = {}
        for region, instance in placed:
            by_region.setdefault(region, []).append(instance["InstanceId"])
        result = []
        for region, ids in sorted(by_region.items()):
            result.extend((region, i) for i in self._wait_running(region, ids))
        return result

    # -- network volumes (EBS) -----------------------------------------------------------------

    def volume(self, name, region):
        """The EBS volume tagged as the gpufleet volume ``name``, described; None if none."""
        found = self._call(region, "finding volume %s" % name, "describe_volumes", Filters=[
            {"Name": "tag:" + layout.TAG_VOLUME, "Values": [name]}])["Volumes"]
        found = [v for v in found if v.get("State") not in ("deleting", "deleted")]
        return found[0] if found else None

    def all_volumes(self, regions):
        found = []
        for region in regions:
            params = {"Filters": [{"Name": "tag-key", "Values": [layout.TAG_VOLUME]}],
                      "MaxResults": 500}
            while True:
                page = self._call(region, "listing gpufleet volumes", "describe_volumes",
                                  **params)
                for described in page.get("Volumes") or []:
                    name = layout.tags_of(described).get(layout.TAG_VOLUME)
                    if name and described.get("State") not in ("deleting", "deleted"):
                        found.append((name, region, described))
                if not page.get("NextToken"):
                    break
                params = dict(params, NextToken=page["NextToken"])
        return found

    def first_zone(self, region):
        zones = self._call(region, "listing availability zones",
                           "describe_availability_zones",
                           Filters=[{"Name": "state", "Values": ["available"]}])
        names = sorted(z["ZoneName"] for z in zones["AvailabilityZones"])
        if not names:
            raise AwsError("%s has no available zone" % region)
        return names[0]

    def create_volume(self, name, region, zone, size_gb, config_tags=None):
        """A new gp3 volume for the gpufleet volume ``name`` (idempotent by its token)."""
        tags = dict(self.settings["tags"] or {})
        tags.update(config_tags or {})
        tags.update({layout.TAG_VOLUME: name, layout.TAG_CREATED_BY: layout.CREATED_BY,
                     "Name": name})
        return self._call(region, "creating volume %s" % name, "create_volume",
                          AvailabilityZone=zone, Size=int(size_gb), VolumeType="gp3",
                          ClientToken="gpufleet-volume-%s-%s" % (name, zone),
                          TagSpecifications=layout.tag_specifications(tags, ("volume",)))

    def register_volume(self, name, region, volume_id):
        """Take an existing EBS volume as the gpufleet volume ``name`` (tags it; delete
        only untags it)."""
        found = self._call(region, "finding volume %s" % volume_id, "describe_volumes",
                           VolumeIds=[volume_id])["Volumes"]
        if not found:
            raise AwsError("volume %s was not found in %s" % (volume_id, region))
        self._call(region, "tagging volume %s" % volume_id, "create_tags",
                   Resources=[volume_id],
                   Tags=layout.tag_list({layout.TAG_VOLUME: name, layout.TAG_EXTERNAL: "true"}))
        return self._call(region, "finding volume %s" % volume_id, "describe_volumes",
                          VolumeIds=[volume_id])["Volumes"][0]

    def delete_volume(self, name, region, volume):
        """Delete a volume gpufleet created; an external one only loses its gpufleet tags."""
        attached = [a.get("InstanceId") for a in volume.get("Attachments") or []
                    if a.get("State") in ("attaching", "attached")]
        if attached:
            raise AwsError("volume %s (%s) is attached to %s: stop the runs that use it "
                           "first" % (name, volume["VolumeId"], ", ".join(attached)))
        if layout.tags_of(volume).get(layout.TAG_EXTERNAL) == "true":
            self._call(region, "untagging volume %s" % volume["VolumeId"], "delete_tags",
                       Resources=[volume["VolumeId"]],
                       Tags=[{"Key": layout.TAG_VOLUME}, {"Key": layout.TAG_EXTERNAL}])
            return
        self._call(region, "deleting volume %s" % volume["VolumeId"], "delete_volume",
                   VolumeId=volume["VolumeId"])

    def host_instance(self, record):
        """The described EC2 instance of an instance record (fleets.records)."""
        answer = self._call(record["region"], "describing %s" % record["name"],
                            "describe_instances", InstanceIds=[record["instance_id"]])
        found = [i for r in answer["Reservations"] for i in r["Instances"]]
        if not found:
            raise AwsError("instance %s (%s) is gone" % (record["name"], record["instance_id"]))
        return found[0]

    def attach_volume(self, name, region, volume, instance):
        """Attach the volume to the instance (both described) unless it is already; returns
        the device paths the host may see it under, most specific first."""
        volume_id = volume["VolumeId"]
        nvme = "/dev/disk/by-id/nvme-Amazon_Elastic_Block_Store_" + volume_id.replace("-", "")
        for attachment in volume.get("Attachments") or []:
            if attachment.get("State") not in ("attaching", "attached"):
                continue
            if attachment.get("InstanceId") == instance["InstanceId"]:
                device = attachment.get("Device")
                return [nvme, device, device.replace("/dev/sd", "/dev/xvd")]
            raise AwsError("volume %s (%s) is attached to %s: stop the runs that use it there "
                           "first" % (name, volume_id, attachment.get("InstanceId")))
        zone = (instance.get("Placement") or {}).get("AvailabilityZone")
        if volume.get("AvailabilityZone") != zone:
            raise AwsError("volume %s is in %s and the host %s in %s: a volume can only be "
                           "attached in its own zone" % (name, volume.get("AvailabilityZone"),
                                                         instance["InstanceId"], zone))
        used = set(m.get("DeviceName") for m in instance.get("BlockDeviceMappings") or [])
        device = next(("/dev/sd" + letter for letter in "fghijklmnop"
                       if "/dev/sd" + letter not in used
                       and "/dev/xvd" + letter not in used), None)
        if device is None:
            raise AwsError("instance %s has no free device name for volume %s"
                           % (instance["InstanceId"], name))
        self._call(region, "attaching volume %s" % name, "attach_volume", VolumeId=volume_id,
                   InstanceId=instance["InstanceId"], Device=device)
        try:
            self.ec2(region).get_waiter("volume_in_use").wait(
                VolumeIds=[volume_id], WaiterConfig={"Delay": self.poll, "MaxAttempts": 60})
        except WaiterError as exc:
            raise AwsError("volume %s did not attach: %s" % (name, exc)) from exc
        return [nvme, device, device.replace("/dev/sd", "/dev/xvd")]

    def detach_volume(self, name, region, volume):
        attached = [a for a in volume.get("Attachments") or []
                    if a.get("State") in ("attaching", "attached")]
        if not attached:
            return False
        self._call(region, "detaching volume %s" % name, "detach_volume",
                   VolumeId=volume["VolumeId"], InstanceId=attached[0]["InstanceId"],
                   Device=attached[0]["Device"])
        try:
            self.ec2(region).get_waiter("volume_available").wait(
                VolumeIds=[volume["VolumeId"]],
                WaiterConfig={"Delay": self.poll, "MaxAttempts": 60})
        except WaiterError as exc:
            raise AwsError("volume %s did not detach: %s" % (name, exc)) from exc
        return True

    # -- the backend-neutral view fleets/cloud.py works with -----------------------------------

    @staticmethod
    def view(placed):
        """What fleets/cloud.py needs of a described instance: number, plan state, placement,
        region, zone and instance type."""
        region, instance = placed
        state = instance["State"]["Name"]
        return {
            "num": layout.instance_nums(instance),
            "state": "stopped" if state in ("stopping", "stopped") else "running",
            "starting": state == "pending",
            "placement": layout.tags_of(instance).get(layout.TAG_PLACEMENT) or "any",
            "gateway": layout.tags_of(instance).get(GATEWAY_TAG) == "true",
            "region": region,
            "zone": (instance.get("Placement") or {}).get("AvailabilityZone"),
            "instance_type": instance.get("InstanceType"),
        }

    def records(self, placed, fleet, key_file):
        return instance_records(placed, fleet, key_file, self.settings["public_ips"],
                                self.settings["ssh_user"])

    # -- published members (fleets/access.py) -------------------------------------------------

    @staticmethod
    def member_mark(fingerprint):
        """A member's fingerprint is kept as it is."""
        return fingerprint

    def fleet_members(self, fleet, placed):
        """``{user: fingerprint}`` the fleet's instances' tags publish (their union)."""
        found = {}
        for _region, instance in placed:
            found.update(layout.members_of(layout.tags_of(instance)))
        return found

    def set_member(self, fleet, placed, user, mark):
        """Tag every instance in ``placed`` with ``user``'s fingerprint (``mark``), or take
        the tag off (None)."""
        key = layout.TAG_MEMBER + user
        changed = False
        for region, ids in _ids_by_region(
                [(r, i) for r, i in placed
                 if layout.tags_of(i).get(key) != mark]).items():
            if mark:
                self._call(region, "tagging %s" % ", ".join(ids), "create_tags",
                           Resources=ids, Tags=layout.tag_list({key: mark}))
            else:
                self._call(region, "untagging %s" % ", ".join(ids), "delete_tags",
                           Resources=ids, Tags=[{"Key": key}])
            changed = True
        return changed

    # -- starting, stopping, removing ---------------------------------------------------------

    def start(self, placed):
        for region, ids in _ids_by_region(placed).items():
            self._call(region, "starting %s" % ", ".join(ids), "start_instances",
                       InstanceIds=ids)

    def terminate(self, placed, wait=False):
        for region, ids in _ids_by_region(placed).items():
            self._call(region, "terminating %s" % ", ".join(ids), "terminate_instances",
                       InstanceIds=ids)
            if wait:
                try:
                    self.ec2(region).get_waiter("instance_terminated").wait(
                        InstanceIds=ids, WaiterConfig={
                            "Delay": self.poll, "MaxAttempts": int(RUNNING_TIMEOUT / self.poll)})
                except WaiterError as exc:
                    raise AwsError("instances %s in %s did not terminate: %s"
                                   % (", ".join(ids), region, exc)) from exc

    def delete_fleet(self, fleet, regions, check_mode=False):
        """Terminate the fleet's instances, then remove what it created: Elastic IPs, the
        security group, the placement group, the key pair. Returns what was (in check mode:
        would be) removed, by kind."""
        removed = {"instances": [], "addresses": [], "security_groups": [],
                   "placement_groups": [], "key_pairs": []}
        by_tag = [{"Name": "tag:" + layout.TAG_FLEET, "Values": [fleet]}]
        for region in regions:
            placed = self.fleet_instances(fleet, [region])
            removed["instances"].extend(i["InstanceId"] for _r, i in placed)
            addresses = self._call(region, "listing Elastic IPs", "describe_addresses",
                                   Filters=by_tag)["Addresses"]
            groups = self._call(region, "listing security groups", "describe_security_groups",
                                Filters=by_tag)["SecurityGroups"]
            placement = self._call(region, "listing placement groups",
                                   "describe_placement_groups", Filters=by_tag)["PlacementGroups"]
            keys = self._call(region, "listing key pairs", "describe_key_pairs",
                              Filters=by_tag)["KeyPairs"]
            removed["addresses"].extend(a["AllocationId"] for a in addresses)
            removed["security_groups"].extend(g["GroupId"] for g in groups)
            removed["placement_groups"].extend(g["GroupName"] for g in placement)
            removed["key_pairs"].extend(k["KeyName"] for k in keys)
            if check_mode:
                continue
            if placed:
                self.terminate(placed, wait=True)
            for address in addresses:
                if address.get("AssociationId"):
                    self._call(region, "detaching an Elastic IP", "disassociate_address",
                               AssociationId=address["AssociationId"])
                self._call(region, "releasing an Elastic IP", "release_address",
                           AllocationId=address["AllocationId"])
            for group in groups:
                self._call(region, "deleting the security group", "delete_security_group",
                           GroupId=group["GroupId"])
            for group in placement:
                self._call(region, "deleting the placement group", "delete_placement_group",
                           GroupName=group["GroupName"])
            for key in keys:
                self._call(region, "deleting the key pair", "delete_key_pair",
                           KeyName=key["KeyName"])
        return removed


def _ids_by_region(placed):
    found = {}
    for region, instance in placed:
        found.setdefault(region, []).append(instance["InstanceId"])
    return found
