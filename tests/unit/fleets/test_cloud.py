"""Cloud fleets converge like local ones (fleets/cloud.py), against the local EC2 double: create
up to nodes.target, keep on re-apply, grow in the cluster's zone, shrink above nodes.max, check
mode, the retry policy on no capacity, and delete."""

from __future__ import annotations

import boto3
import pytest
from ansible_collections.gpufleet.cluster.plugins.module_utils.backends.aws import Aws
from ansible_collections.gpufleet.cluster.plugins.module_utils.fleets import cloud
from ansible_collections.gpufleet.cluster.plugins.module_utils.offers import catalog
from ansible_collections.gpufleet.cluster.plugins.module_utils.spec import parse_data

from tests.doubles.catalogs import catalog as make_catalog
from tests.doubles.catalogs import machine
from tests.doubles.ec2 import Ec2Double

pytestmark = pytest.mark.cloud
REGION = "us-east-1"
ZONES = ["us-east-1a", "us-east-1b"]
CATALOG = make_catalog(
    "aws",
    machine("g5.xlarge", 4, 16384, ("A10G", 24576, 1), REGION, ZONES, 1.006, 0.4),
    machine("g5.2xlarge", 8, 32768, ("A10G", 24576, 1), REGION, ZONES, 1.212, 0.5))


@pytest.fixture(scope="module")
def double():
    ec2 = Ec2Double()
    yield ec2
    ec2.stop()


@pytest.fixture
def aws_cloud(double, tmp_path, monkeypatch):
    """What cloud.apply needs against the EC2 double: its state root, a catalog and the aws
    settings, and the Aws client (the double under "double")."""
    for key, value in double.env().items():
        monkeypatch.setenv(key, value)
    double.clear()
    catalog.write(CATALOG, str(tmp_path / "catalog" / "aws.json"))
    image = boto3.client("ec2", region_name=REGION).describe_images(
        Owners=["amazon"], Filters=[{"Name": "architecture", "Values": ["x86_64"]}]
    )["Images"][0]["ImageId"]
    settings = {"aws": {"regions": [REGION], "image_id": image, "retry_delays": [5, 10]}}
    aws_settings = dict(settings["aws"])
    aws_settings.pop("retry_delays")
    return {"root": str(tmp_path / "state"), "catalog_dir": str(tmp_path / "catalog"),
            "settings": settings, "client": Aws(aws_settings, poll=0.05), "double": double}


def fleet(name="train", **fields):
    data = {"type": "fleet", "name": name, "nodes": 2, "placement": "cluster",
            "backends": ["aws"], "resources": {"gpu": "A10G"}}
    data.update(fields)
    return parse_data(data)[0]


def apply(aws_cloud, config, check_mode=False, sleep=None):
    return cloud.apply(config, config["name"], aws_cloud["root"], aws_cloud["settings"],
                       check_mode=check_mode, client=aws_cloud["client"],
                       catalog_dir=aws_cloud["catalog_dir"], sleep=sleep or (lambda s: None))[:3]


def test_a_cluster_fleet_comes_up_grows_in_its_zone_and_shrinks(aws_cloud):
    planned, plan, changed = apply(aws_cloud, fleet(), check_mode=True)
    assert changed and plan["create"] == ["train-0", "train-1"]
    assert [(i["status"], i["instance_type"], i["price"]) for i in planned] == \
        [("pending", "g5.xlarge", 1.006)] * 2
    assert aws_cloud["double"].calls("RunInstances") == []

    instances, plan, changed = apply(aws_cloud, fleet())
    assert changed and plan["create"] == ["train-0", "train-1"]
    assert [(i["name"], i["status"], i["zone"]) for i in instances] == \
        [("train-0", "idle", "us-east-1a"), ("train-1", "idle", "us-east-1a")]
    assert all(i["hostname"] and i["internal_ip"] and i["user"] == "ubuntu" for i in instances)
    assert instances[0]["identity_file"].endswith("/fleets/train/id_ed25519")

    aws_cloud["double"].clear()
    again, plan, changed = apply(aws_cloud, fleet())
    assert not changed and plan["keep"] == ["train-0", "train-1"]
    assert [c["action"] for c in aws_cloud["double"].mutating()] == []
    assert [i["instance_id"] for i in again] == [i["instance_id"] for i in instances]

    # Zone a is full now: a cluster still grows there (or not at all), never elsewhere.
    aws_cloud["double"].capacity["us-east-1a"] = 0
    with pytest.raises(cloud.CloudError, match="no capacity for 1 instance"):
        apply(aws_cloud, fleet(nodes=3))
    aws_cloud["double"].capacity.clear()
    grown, plan, changed = apply(aws_cloud, fleet(nodes=3))
    assert plan["create"] == ["train-2"] and plan["keep"] == ["train-0", "train-1"]
    assert [(i["zone"], i["instance_type"]) for i in grown] == [("us-east-1a", "g5.xlarge")] * 3

    shrunk, plan, changed = apply(aws_cloud, fleet(nodes=1))
    assert plan["remove"] == ["train-1", "train-2"]
    assert [i["name"] for i in shrunk if i["status"] not in ("terminating", "terminated")] == \
        ["train-0"]

    with pytest.raises(cloud.CloudError, match="exists with placement cluster; the file says "
                                               "any"):
        apply(aws_cloud, fleet(nodes=1, placement="any"))

    removed, changed = cloud.delete(fleet(), "train", aws_cloud["settings"],
                                    client=aws_cloud["client"],
                                    catalog_dir=aws_cloud["catalog_dir"])
    assert changed and len(removed["instances"]) == 1
    assert removed["placement_groups"] == ["gpufleet-train"]
    assert apply(aws_cloud, fleet(nodes=0))[0] == []


def test_no_capacity_is_retried_as_the_retry_policy_says(aws_cloud):
    double = aws_cloud["double"]
    full = {"on": True, "until": 2}
    double.fail("RunInstances", "InsufficientInstanceCapacity", when=lambda p: full["on"])
    slept = []

    def sleep(seconds):
        slept.append(seconds)
        if len(slept) == full["until"]:
            full["on"] = False      # capacity comes back after that many waits

    config = fleet("patient", nodes=1, retry={"on_events": ["no-capacity"], "duration": "1h"})
    instances, _plan, _changed = apply(aws_cloud, config, sleep=sleep)
    assert slept == [5, 10]
    assert [i["status"] for i in instances] == ["idle"]
    # Once the duration is spent, it gives up, saying so.
    full.update(on=True, until=None)
    slept.clear()
    config = fleet("short", nodes=1, retry={"on_events": ["no-capacity"], "duration": "20s"})
    with pytest.raises(cloud.CloudError, match=r"gave up after 2 retries \(retry.duration\)"):
        apply(aws_cloud, config, sleep=sleep)
    assert slept == [5, 10]
    # Without no-capacity among its events, there is no retry at all.
    slept.clear()
    with pytest.raises(cloud.CloudError, match="does not retry no-capacity"):
        apply(aws_cloud, fleet("hasty", nodes=1, retry={"on_events": ["error"], "duration": "1h"}),
              sleep=sleep)
    assert slept == []


def test_no_offers_say_why_before_anything_is_created(aws_cloud):
    with pytest.raises(cloud.CloudError, match=r"fleet pricey: no offers; .* 2 cost more than "
                                               r"max_price"):
        apply(aws_cloud, fleet("pricey", max_price=0.1))
    assert aws_cloud["double"].mutating() == []


def test_regions_outside_the_backend_settings_are_refused(aws_cloud):
    with pytest.raises(cloud.CloudError, match=r"regions eu-west-1 are not among the aws "
                                               r"backend's regions \(us-east-1\)"):
        apply(aws_cloud, fleet("far", regions=["eu-west-1"]))


def test_a_capacity_block_pins_type_and_zone_and_launches_as_one(aws_cloud):
    double = aws_cloud["double"]
    double.reservations[(REGION, "cr-0block")] = {"instance_type": "g5.2xlarge",
                                                  "zone": "us-east-1b", "type": "capacity-block"}
    config = fleet("blocked", reservation="cr-0block", spot_policy="auto")
    instances, _plan, _changed = apply(aws_cloud, config)
    # (moto reports any market-options launch as spot, so the request is what is checked)
    assert [(i["instance_type"], i["zone"]) for i in instances] == [("g5.2xlarge", "us-east-1b")] * 2
    run = double.calls("RunInstances")[0]["params"]
    assert "InstanceMarketOptions.SpotOptions.SpotInstanceType" not in run
    assert run["InstanceMarketOptions.MarketType"] == "capacity-block"
    assert run["CapacityReservationSpecification.CapacityReservationTarget."
               "CapacityReservationId"] == "cr-0block"
    with pytest.raises(cloud.CloudError, match="fleet lost: capacity reservation cr-0nope was "
                                               "not found in us-east-1"):
        apply(aws_cloud, fleet("lost", reservation="cr-0nope"))


def test_cloud_fleets_are_found_from_their_tags_alone(aws_cloud):
    from ansible_collections.gpufleet.cluster.plugins.module_utils.fleets import apply as fleets

    apply(aws_cloud, fleet("found", nodes=2, placement="any"))
    held = cloud.discover({"aws": {"regions": [REGION]}}, aws_cloud["root"],
                          aws_cloud["catalog_dir"])
    mine = [(backend, name, placement, [i["name"] for i in instances])
            for backend, name, placement, gateway, instances in held
            if name == "found" and not gateway]
    assert mine == [("aws", "found", "any", ["found-0", "found-1"])]
    records = [r for r in fleets.discover(None, aws_cloud["root"],
                                          settings={"aws": {"regions": [REGION]}})
               if r["name"] == "found"]
    assert records[0]["backends"] == ["aws"] and len(records[0]["instances"]) == 2
    # Backends the settings do not configure are not asked.
    assert cloud.discover({}, aws_cloud["root"]) == []


def test_instances_made_for_a_run_carry_its_name_and_idle_limit_in_ec2_tags(aws_cloud):
    """A run grows a template fleet (nodes 0..3, at_least 2): the new instances are tagged with
    the run and their limit, the fleet's own instance is not, and reconcile reads both back
    from the cloud alone."""
    import datetime

    from ansible_collections.gpufleet.cluster.plugins.module_utils.fleets.apply import at_least
    from ansible_collections.gpufleet.cluster.plugins.module_utils.tasks import reconcile

    config = fleet("elastic", nodes="1..3", placement="any", idle_duration="1h")
    own, _plan, _changed = apply(aws_cloud, config)
    grown_config = dict(at_least(config, 3), made_for={"run": "train", "idle_duration": 300})
    planned, plan, _changed = apply(aws_cloud, grown_config, check_mode=True)
    assert plan["create"] == ["elastic-1", "elastic-2"]
    assert [(i["made_for_run"], i["idle_duration"]) for i in planned] == \
        [(None, None), ("train", 300), ("train", 300)]
    grown, plan, _changed = apply(aws_cloud, grown_config)
    assert [(i["name"], i["made_for_run"], i["idle_duration"]) for i in grown] == \
        [("elastic-0", None, None), ("elastic-1", "train", 300), ("elastic-2", "train", 300)]
    tags = [dict((t["Key"], t["Value"]) for t in i.get("Tags") or [])
            for r in boto3.client("ec2", region_name=REGION).describe_instances()["Reservations"]
            for i in r["Instances"]]
    made = [t for t in tags if t.get("gpufleet:fleet") == "elastic"
            and t.get("gpufleet:made-for-run")]
    assert [(t["gpufleet:made-for-run"], t["gpufleet:idle-duration"]) for t in made] == \
        [("train", "300")] * 2
    # Described again from EC2 alone, as reconcile sees them 20 minutes after creation.
    described = cloud.describe(config, "elastic", None, aws_cloud["settings"],
                               client=aws_cloud["client"], catalog_dir=aws_cloud["catalog_dir"])
    now = max(datetime.datetime.strptime(i["created"][:19], "%Y-%m-%dT%H:%M:%S")
              for i in described).replace(tzinfo=datetime.timezone.utc) + \
        datetime.timedelta(minutes=20)
    # Every host answered the survey with no task container (a host not asked is kept).
    answered = dict((i["name"], []) for i in described)
    decision = reconcile.decide(config, described, answered, {}, now)
    assert decision["remove"] == ["elastic-1", "elastic-2"]
    assert decision["reasons"]["elastic-0"].startswith("kept: idle ")
    assert decision["reasons"]["elastic-2"].endswith("idle_duration 5m (made for run train)")
