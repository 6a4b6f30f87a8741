"""The aws backend's calls against a local EC2 endpoint (moto behind a recording proxy,
tests/doubles/ec2.py): what a launch creates, the exact RunInstances parameters on the wire,
idempotent re-runs, capacity errors moving on to the next offer, and delete leaving nothing."""

from __future__ import annotations

import subprocess

import boto3
import pytest
from ansible_collections.gpufleet.cluster.plugins.module_utils.backends import aws_layout as L
from ansible_collections.gpufleet.cluster.plugins.module_utils.backends.aws import (
    Aws,
    AwsError,
    instance_records,
)
from ansible_collections.gpufleet.cluster.plugins.module_utils.backends.errors import NoCapacity
from botocore.serialize import create_serializer

from tests.doubles.ec2 import Ec2Double

REGION = "us-east-1"
pytestmark = pytest.mark.cloud


@pytest.fixture(scope="module")
def double():
    ec2 = Ec2Double()
    yield ec2
    ec2.stop()


@pytest.fixture(scope="module")
def image(double):
    with pytest.MonkeyPatch.context() as patch:
        for key, value in double.env().items():
            patch.setenv(key, value)
        return boto3.client("ec2", region_name=REGION).describe_images(
            Owners=["amazon"], Filters=[{"Name": "architecture", "Values": ["x86_64"]}]
        )["Images"][0]["ImageId"]


@pytest.fixture
def aws(double, image, monkeypatch):
    for key, value in double.env().items():
        monkeypatch.setenv(key, value)
    double.clear()
    return Aws({"image_id": image}, session=boto3.session.Session(), poll=0.05)


@pytest.fixture(scope="module")
def public_key(tmp_path_factory):
    path = tmp_path_factory.mktemp("key") / "id"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(path)], check=True)
    return path.with_suffix(".pub").read_text().strip()


def offer(instance_type, zones=("us-east-1a",), spot=False, price=1.0, region=REGION):
    return {"backend": "aws", "region": region, "zones": list(zones),
            "instance_type": instance_type, "spot": spot, "price": price, "reservation": None}


def config(placement="cluster", **extra):
    base = {"placement": placement, "blocks": 1, "tags": {"team": "ml"}, "reservation": None}
    base.update(extra)
    return base


def on_the_wire(operation, params):
    """``params`` as the EC2 query protocol sends them (what the double records)."""
    model = boto3.client("ec2", region_name=REGION).meta.service_model
    body = create_serializer("ec2").serialize_to_request(
        params, model.operation_model(operation))["body"]
    return dict((k, str(v)) for k, v in body.items() if k not in ("Action", "Version"))


def sent(call):
    return dict((k, v) for k, v in call["params"].items() if k not in ("Action", "Version"))


def test_a_cluster_launch_creates_its_resources_once_and_one_run_instances(aws, double,
                                                                           public_key):
    placed = aws.launch_group("alpha", [0, 1, 2], [offer("g5.xlarge", price=1.006)],
                              config(), public_key, 200, all_at_once=True)
    assert [c["action"] for c in double.mutating()] == [
        "CreateSecurityGroup", "CreateSecurityGroup", "AuthorizeSecurityGroupIngress",
        "CreatePlacementGroup", "ImportKeyPair", "RunInstances"]
    run = double.calls("RunInstances")[0]
    group_id = double.calls("AuthorizeSecurityGroupIngress")[0]["params"]["GroupId"]
    subnet = run["params"]["NetworkInterface.1.SubnetId"]
    expected = L.run_instances_request({
        "fleet": "alpha", "nums": [0, 1, 2], "offer": offer("g5.xlarge", price=1.006),
        "zone": "us-east-1a", "image_id": aws.settings["image_id"], "key_name": "gpufleet-alpha",
        "subnet_id": subnet, "group_ids": [group_id], "public_ips": True, "interfaces": None,
        "placement_group": "gpufleet-alpha", "disk_gb": 200, "tags": {"team": "ml"},
        "placement": "cluster", "blocks": 1, "min_count": None, "attempt": 0})
    assert sent(run) == on_the_wire("RunInstances", expected)
    records = instance_records(placed, "alpha", "/k")
    assert [(r["name"], r["num"], r["instance_type"], r["price"]) for r in records] == [
        ("alpha-0", 0, "g5.xlarge", 1.006), ("alpha-1", 1, "g5.xlarge", 1.006),
        ("alpha-2", 2, "g5.xlarge", 1.006)]
    # The VPC's gateways' group first (no rule of its own), then the fleet's.
    gateways = sent(double.calls("CreateSecurityGroup")[0])
    assert gateways["GroupName"] == L.GATEWAYS_GROUP
    gateways_id = aws._find_group("us-east-1", gateways["VpcId"], L.GATEWAYS_GROUP)
    # Ingress: SSH from anywhere, everything from the group itself, TCP from the gateways.
    ingress = sent(double.calls("AuthorizeSecurityGroupIngress")[0])
    assert ingress == on_the_wire("AuthorizeSecurityGroupIngress", {
        "GroupId": group_id, "IpPermissions": L.security_group_rules(group_id, gateways_id)})
    assert L.security_group_rules(group_id, gateways_id)[2]["UserIdGroupPairs"] == [
        {"GroupId": gateways_id, "Description": "gateways to the services' replicas"}]
    # The fleet's other resources, parameter for parameter, all tagged with the fleet.
    tags = L.fleet_tags("alpha", {"team": "ml"})
    vpc = sent(double.calls("CreateSecurityGroup")[1])["VpcId"]
    assert sent(double.calls("CreateSecurityGroup")[1]) == on_the_wire("CreateSecurityGroup", {
        "GroupName": "gpufleet-alpha", "VpcId": vpc,
        "Description": "gpufleet fleet alpha: SSH in, all traffic between its instances",
        "TagSpecifications": L.tag_specifications(tags, ("security-group",))})
    assert sent(double.calls("CreatePlacementGroup")[0]) == on_the_wire("CreatePlacementGroup", {
        "GroupName": "gpufleet-alpha", "Strategy": "cluster",
        "TagSpecifications": L.tag_specifications(tags, ("placement-group",))})
    assert sent(double.calls("ImportKeyPair")[0]) == on_the_wire("ImportKeyPair", {
        "KeyName": "gpufleet-alpha", "PublicKeyMaterial": public_key.encode(),
        "TagSpecifications": L.tag_specifications(tags, ("key-pair",))})

    # The same launch again (a re-run, or a retried call) launches nothing new, and the
    # fleet's resources are found by their tags instead of created again.
    double.clear()
    again = aws.launch_group("alpha", [0, 1, 2], [offer("g5.xlarge", price=1.006)],
                             config(), public_key, 200, all_at_once=True)
    assert [i["InstanceId"] for _r, i in again] == [i["InstanceId"] for _r, i in placed]
    assert [c["action"] for c in double.mutating()] == ["RunInstances"]
    assert len(aws.fleet_instances("alpha", [REGION])) == 3


def test_a_gateways_host_takes_http_and_https_and_joins_the_gateways_group(aws, double,
                                                                           public_key):
    aws.launch_group("gwy", [0], [offer("t3.small", price=0.02)],
                     config("any", gateway={"domain": "example.com"}), public_key, 50,
                     all_at_once=False)
    run = double.calls("RunInstances")[-1]["params"]
    own = double.calls("AuthorizeSecurityGroupIngress")[-1]["params"]["GroupId"]
    vpc = sent(double.calls("CreateSecurityGroup")[-1])["VpcId"]
    gateways_id = aws._find_group(REGION, vpc, L.GATEWAYS_GROUP)
    groups = sorted(v for k, v in run.items() if "SecurityGroupId" in k or ".Groups." in k
                    or k.startswith("SecurityGroupId"))
    assert groups == sorted([own, gateways_id])
    rules = L.security_group_rules(own, gateways_id, gateway=True)
    assert sent(double.calls("AuthorizeSecurityGroupIngress")[-1]) == on_the_wire(
        "AuthorizeSecurityGroupIngress", {"GroupId": own, "IpPermissions": rules})
    assert [(r.get("FromPort"), r.get("IpRanges")) for r in rules[3:]] == [
        (port, [{"CidrIp": "0.0.0.0/0", "Description": "gateway services"}])
        for port in (80, 443)]


def test_a_fleets_group_made_before_gateways_gets_their_rule_once(aws, double, public_key):
    ec2 = aws.ec2(REGION)
    vpc = ec2.describe_vpcs()["Vpcs"][0]["VpcId"]
    old = ec2.create_security_group(GroupName="gpufleet-older", VpcId=vpc,
                                    Description="an earlier version's")["GroupId"]
    ec2.authorize_security_group_ingress(GroupId=old, IpPermissions=L.security_group_rules(old))
    before = len(double.calls("AuthorizeSecurityGroupIngress"))
    for _attempt in range(2):
        aws.launch_group("older", [0], [offer("g5.xlarge")], config("any"), public_key, 50,
                         all_at_once=False)
    added = [sent(c) for c in double.calls("AuthorizeSecurityGroupIngress")[before:]
             if sent(c)["GroupId"] == old]
    gateways_id = aws._find_group(REGION, vpc, L.GATEWAYS_GROUP)
    assert added == [on_the_wire("AuthorizeSecurityGroupIngress", {
        "GroupId": old, "IpPermissions": [L.security_group_rules(old, gateways_id)[2]]})]


@pytest.mark.parametrize("count", [1, 8])
def test_mutating_calls_do_not_grow_with_the_number_of_instances(aws, double, public_key,
                                                                 count):
    fleet = "size-%d" % count
    aws.launch_group(fleet, list(range(count)), [offer("g5.xlarge")], config("any"),
                     public_key, 100, all_at_once=False)
    assert [c["action"] for c in double.mutating()] == [
        "CreateSecurityGroup", "AuthorizeSecurityGroupIngress", "ImportKeyPair", "RunInstances"]
    assert double.calls("RunInstances")[0]["params"]["MinCount"] == "1"
    assert len(aws.fleet_instances(fleet, [REGION])) == count


def test_multi_efa_instances_get_the_dstack_layout_and_an_elastic_ip_each(aws, double,
                                                                          public_key):
    placed = aws.launch_group("efa", [0, 1], [offer("p4d.24xlarge", price=21.96)], config(),
                              public_key, 100, all_at_once=True)
    params = double.calls("RunInstances")[0]["params"]
    assert [params["NetworkInterface.%d.InterfaceType" % n] for n in range(1, 5)] == \
        ["efa", "efa-only", "efa-only", "efa-only"]
    assert params["NetworkInterface.1.AssociatePublicIpAddress"] == "false"
    assert [c["action"] for c in double.mutating()][-4:] == [
        "AllocateAddress", "AssociateAddress", "AllocateAddress", "AssociateAddress"]
    addresses = boto3.client("ec2", region_name=REGION).describe_addresses(
        Filters=[{"Name": "tag:gpufleet:fleet", "Values": ["efa"]}])["Addresses"]
    primaries = set()
    for _region, instance in placed:
        primaries.update(n["NetworkInterfaceId"] for n in instance["NetworkInterfaces"]
                         if n["Attachment"]["DeviceIndex"] == 0)
    assert len(addresses) == 2
    assert set(a["NetworkInterfaceId"] for a in addresses) <= primaries


def test_capacity_errors_move_on_to_the_next_zone_and_offer(aws, double, public_key):
    double.fail("RunInstances", "InsufficientInstanceCapacity",
                when=lambda p: p.get("Placement.AvailabilityZone") == "us-east-1a")
    double.fail("RunInstances", "VcpuLimitExceeded",
                when=lambda p: p.get("InstanceType") == "p5.48xlarge")
    offers = [offer("p5.48xlarge", zones=["us-east-1b"], price=55.04),
              offer("p4de.24xlarge", zones=["us-east-1a", "us-east-1c"], price=40.97)]
    placed = aws.launch_group("cap", [0], offers, config("any"), public_key, 100,
                              all_at_once=True)
    assert [(i["InstanceType"], i["Placement"]["AvailabilityZone"]) for _r, i in placed] == \
        [("p4de.24xlarge", "us-east-1c")]


def test_a_fleet_without_cluster_placement_takes_what_each_zone_has(aws, double, public_key):
    double.capacity["us-east-1a"] = 2
    placed = aws.launch_group("spread", [0, 1, 2, 3, 4], [offer("g5.xlarge", zones=[
        "us-east-1a", "us-east-1b"])], config("any"), public_key, 100, all_at_once=False)
    zones = sorted((L.instance_nums(i), i["Placement"]["AvailabilityZone"]) for _r, i in placed)
    assert zones == [(0, "us-east-1a"), (1, "us-east-1a"), (2, "us-east-1b"),
                     (3, "us-east-1b"), (4, "us-east-1b")]
    assert [c["params"]["MinCount"] for c in double.calls("RunInstances")] == ["1", "1"]
    # A cluster needs them all in one zone: the short zone is passed over.
    double.clear()
    double.capacity["us-east-1a"] = 2
    placed = aws.launch_group("tight", [0, 1, 2], [offer("g5.xlarge", zones=[
        "us-east-1a", "us-east-1b"])], config(), public_key, 100, all_at_once=True)
    assert set(i["Placement"]["AvailabilityZone"] for _r, i in placed) == {"us-east-1b"}


def test_no_capacity_anywhere_names_every_attempt(aws, double, public_key):
    double.fail("RunInstances", "InsufficientInstanceCapacity")
    with pytest.raises(NoCapacity) as info:
        aws.launch_group("none", [0, 1], [offer("g5.xlarge", zones=["us-east-1a", "us-east-1b"])],
                         config(), public_key, 100, all_at_once=True)
    assert [(a["zone"], a["error"]) for a in info.value.attempts] == [
        ("us-east-1a", "InsufficientInstanceCapacity"),
        ("us-east-1b", "InsufficientInstanceCapacity")]
    assert str(info.value).startswith("fleet none: no capacity for 2 instance(s) in 2 offer(s)")
    assert aws.fleet_instances("none", [REGION]) == []


def test_other_launch_errors_stop_with_the_message(aws, double, public_key):
    double.fail("RunInstances", "InvalidAMIID.NotFound", "The image id does not exist")
    with pytest.raises(AwsError, match=r"launching g5.xlarge in us-east-1a failed: "
                                       r"InvalidAMIID.NotFound: The image id does not exist"):
        aws.launch_group("bad", [0], [offer("g5.xlarge")], config(), public_key, 100, True)


def test_without_an_image_setting_the_default_image_is_looked_up(double, monkeypatch):
    for key, value in double.env().items():
        monkeypatch.setenv(key, value)
    aws = Aws({}, session=boto3.session.Session())
    info = aws.type_info(REGION, "g5.xlarge")
    with pytest.raises(AwsError, match=r"no image named 'Deep Learning Base OSS Nvidia Driver "
                                       r"GPU AMI \(Ubuntu 22.04\) \*' \(x86_64, owners amazon\) "
                                       r"in us-east-1: set image_id"):
        aws.image_id(REGION, info)


def test_delete_removes_instances_and_everything_the_fleet_created(aws, double, public_key):
    aws.launch_group("gone", [0, 1], [offer("p4d.24xlarge")], config(), public_key, 100, True)
    planned = aws.delete_fleet("gone", [REGION], check_mode=True)
    assert len(planned["instances"]) == 2 and len(planned["addresses"]) == 2
    assert planned["placement_groups"] == ["gpufleet-gone"]
    assert planned["key_pairs"] == ["gpufleet-gone"] and len(planned["security_groups"]) == 1
    assert aws.fleet_instances("gone", [REGION])   # check mode removed nothing
    removed = aws.delete_fleet("gone", [REGION])
    assert removed == planned
    assert aws.fleet_instances("gone", [REGION]) == []
    assert aws.delete_fleet("gone", [REGION]) == {
        "instances": [], "addresses": [], "security_groups": [], "placement_groups": [],
        "key_pairs": []}


def test_a_reclaimed_spot_instance_is_an_interruption(aws, double, public_key):
    """EC2 takes spot instances back mid-run. One that stops on interruption stays in the fleet,
    its record saying why (Server.SpotInstanceTermination); one terminated leaves the fleet. The
    job on either is interrupted (tasks.interruption)."""
    from ansible_collections.gpufleet.cluster.plugins.module_utils.tasks import interruption
    from ansible_collections.gpufleet.cluster.plugins.module_utils.tasks import lifecycle

    placed = aws.launch_group("reclaim", [0, 1], [offer("g5.xlarge", spot=True)],
                              config("any"), public_key, 100, all_at_once=True)
    ids = dict((L.instance_nums(i), i["InstanceId"]) for _r, i in placed)
    before = instance_records(aws.fleet_instances("reclaim", [REGION]), "reclaim", None)
    assert [(r["spot"], r["error"]) for r in before] == [(True, None), (True, None)]
    double.reclaim_spot(ids[0], action="stop")
    double.reclaim_spot(ids[1])
    after = instance_records(aws.fleet_instances("reclaim", [REGION]), "reclaim", None)
    assert [(r["name"], r["status"], r["error"]) for r in after] == [
        ("reclaim-0", "stopped", "Server.SpotInstanceTermination: Spot instance termination")]
    assert interruption.judge("reclaim-0", after[0], 0) == (
        lifecycle.INTERRUPTED_BY_NO_CAPACITY,
        "host reclaim-0: Server.SpotInstanceTermination: Spot instance termination (spot)")
    assert interruption.judge("reclaim-1", None, 0) == (
        lifecycle.INTERRUPTED_BY_NO_CAPACITY,
        "host reclaim-1: the instance is gone (its backend no longer has it)")


def test_members_are_tags_on_every_instance_and_new_ones_get_them(aws, double, public_key):
    """fleets/access.py publishes a member as the tag gpufleet:member:<user> on every
    instance; the creator goes on at launch; withdrawing takes the tag off."""
    aws.launch_group("team", [0, 1], [offer("p4d.24xlarge")], dict(config(), creator="alice"),
                     public_key, 100, True)
    placed = aws.fleet_instances("team", [REGION])
    assert aws.fleet_members("team", placed) == {}
    double.clear()
    assert aws.set_member("team", placed, "bob", "SHA256:abc") is True
    tagged = double.calls("CreateTags")
    assert len(tagged) == 1   # one call for the region, every instance in it
    placed = aws.fleet_instances("team", [REGION])
    assert aws.fleet_members("team", placed) == {"bob": "SHA256:abc"}
    records = aws.records(placed, "team", "/k")
    assert [r["members"] for r in records] == [{"bob": "SHA256:abc"}] * 2
    assert [r["creator"] for r in records] == ["alice", "alice"]
    assert aws.set_member("team", placed, "bob", "SHA256:abc") is False  # already there
    assert aws.set_member("team", placed, "bob", None) is True
    placed = aws.fleet_instances("team", [REGION])
    assert aws.fleet_members("team", placed) == {}
    assert "members" not in aws.records(placed, "team", "/k")[0]
    aws.delete_fleet("team", [REGION])
