"""What the aws backend asks EC2 for: EFA network interfaces as dstack lays them out, the exact
RunInstances parameters, idempotency tokens and instance numbers from tags
(docs/reference/dstack-runtime.md#aws-instances)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from ansible_collections.gpufleet.cluster.plugins.module_utils.backends import aws_layout as L

TYPES = dict(
    (t["InstanceType"], t) for t in json.loads(
        (Path(__file__).parents[1] / "fixtures" / "aws_instance_types.json").read_text()
    )["InstanceTypes"]
)


def offer(instance_type="p5.48xlarge", spot=False, price=55.04, region="us-east-1"):
    return {"backend": "aws", "region": region, "zones": [region + "a"],
            "instance_type": instance_type, "spot": spot, "price": price, "reservation": None}


def launch(**changes):
    base = {
        "fleet": "train", "nums": [0, 1], "offer": offer(), "zone": "us-east-1a",
        "image_id": "ami-0123", "key_name": "gpufleet-train", "subnet_id": "subnet-1",
        "group_ids": ["sg-1"], "public_ips": True, "interfaces": None, "placement_group": None,
        "disk_gb": 100, "tags": {"team": "ml"}, "placement": "cluster", "blocks": 1,
    }
    base.update(changes)
    return base


# ---------------------------------------------------------------------------------------------
# EFA interfaces
# ---------------------------------------------------------------------------------------------


def test_a_type_without_efa_gets_no_interface_layout():
    assert L.efa_interfaces(TYPES["g5.xlarge"]) == 0
    assert L.network_interfaces(TYPES["g5.xlarge"], "subnet-1", ["sg-1"], True) is None


def test_single_efa_type_has_one_efa_interface_with_a_public_ip():
    layout = L.network_interfaces(TYPES["g5.8xlarge"], "subnet-1", ["sg-1"], True)
    assert layout == [{"NetworkCardIndex": 0, "DeviceIndex": 0, "SubnetId": "subnet-1",
                       "Groups": ["sg-1"], "DeleteOnTermination": True, "InterfaceType": "efa",
                       "AssociatePublicIpAddress": True}]
    assert not L.needs_elastic_ip(layout, True)


def test_p4d_gets_an_efa_only_interface_on_each_further_card():
    layout = L.network_interfaces(TYPES["p4d.24xlarge"], "subnet-1", ["sg-1"], True)
    assert [(i["NetworkCardIndex"], i["DeviceIndex"], i.get("InterfaceType")) for i in layout] == \
        [(0, 0, "efa"), (1, 1, "efa-only"), (2, 1, "efa-only"), (3, 1, "efa-only")]
    # Several interfaces: no public IP at launch, an Elastic IP afterwards.
    assert layout[0]["AssociatePublicIpAddress"] is False
    assert L.needs_elastic_ip(layout, True)
    assert not L.needs_elastic_ip(layout, False)


def test_p5_has_32_cards_and_every_fourth_is_a_full_efa_interface():
    layout = L.network_interfaces(TYPES["p5.48xlarge"], "subnet-1", ["sg-1"], False)
    assert len(layout) == 32
    kinds = [i.get("InterfaceType") for i in layout]
    assert [n for n, kind in enumerate(kinds) if kind == "efa"] == [0, 4, 8, 12, 16, 20, 24, 28]
    assert kinds.count("efa-only") == 24
    assert [i["NetworkCardIndex"] for i in layout] == list(range(32))


def test_p6_b300_keeps_its_first_card_ena_and_puts_efa_on_the_sixteen_others():
    layout = L.network_interfaces(TYPES["p6-b300.48xlarge"], "subnet-1", ["sg-1"], True)
    assert "InterfaceType" not in layout[0]
    assert [i["InterfaceType"] for i in layout[1:]] == ["efa-only"] * 16
    assert [i["NetworkCardIndex"] for i in layout] == list(range(17))


def test_efa_needs_a_subnet():
    with pytest.raises(L.LayoutError, match="EFA requires a subnet"):
        L.network_interfaces(TYPES["p5en.48xlarge"], None, ["sg-1"], True)


# ---------------------------------------------------------------------------------------------
# RunInstances
# ---------------------------------------------------------------------------------------------


def test_run_instances_request_for_an_on_demand_group():
    request = L.run_instances_request(launch(offer=offer("g5.xlarge", price=1.006)))
    tags = L.tags_of({"Tags": request["TagSpecifications"][0]["Tags"]})
    assert tags == {"team": "ml", "gpufleet:fleet": "train", "gpufleet:created-by": "gpufleet",
                    "Name": "train", "gpufleet:nums": "0,1", "gpufleet:placement": "cluster",
                    "gpufleet:blocks": "1", "gpufleet:price": "1.006"}
    assert [s["ResourceType"] for s in request["TagSpecifications"]] == \
        ["instance", "volume", "network-interface"]
    assert (request["MinCount"], request["MaxCount"]) == (2, 2)
    assert request["InstanceType"] == "g5.xlarge" and request["ImageId"] == "ami-0123"
    assert request["Placement"] == {"AvailabilityZone": "us-east-1a"}
    assert request["NetworkInterfaces"] == [{"DeviceIndex": 0, "SubnetId": "subnet-1",
                                             "Groups": ["sg-1"],
                                             "AssociatePublicIpAddress": True,
                                             "DeleteOnTermination": True}]
    assert request["BlockDeviceMappings"][0]["Ebs"] == {"VolumeSize": 100, "VolumeType": "gp3",
                                                        "DeleteOnTermination": True}
    assert request["MetadataOptions"]["HttpTokens"] == "required"
    assert "InstanceMarketOptions" not in request
    assert "CapacityReservationSpecification" not in request


def test_spot_capacity_blocks_reservations_and_placement_groups():
    spot = L.run_instances_request(launch(offer=offer(spot=True, price=21.5),
                                          placement_group="gpufleet-train"))
    assert spot["InstanceMarketOptions"] == {
        "MarketType": "spot", "SpotOptions": {"SpotInstanceType": "one-time",
                                              "InstanceInterruptionBehavior": "terminate"}}
    assert spot["Placement"] == {"AvailabilityZone": "us-east-1a", "GroupName": "gpufleet-train"}
    block = L.run_instances_request(launch(reservation="cr-0abc", capacity_block=True))
    assert block["InstanceMarketOptions"] == {"MarketType": "capacity-block"}
    assert block["CapacityReservationSpecification"] == {
        "CapacityReservationTarget": {"CapacityReservationId": "cr-0abc"}}
    # A launch that takes what EC2 has (placement any) asks for at least one.
    assert L.run_instances_request(launch(min_count=1))["MinCount"] == 1


def test_efa_launch_uses_the_interface_layout():
    interfaces = L.network_interfaces(TYPES["p4d.24xlarge"], "subnet-1", ["sg-1"], True)
    request = L.run_instances_request(launch(offer=offer("p4d.24xlarge"),
                                             interfaces=interfaces))
    assert request["NetworkInterfaces"] is interfaces


def test_client_tokens_repeat_for_the_same_launch_only():
    base = L.client_token("train", [0, 1], offer(), "us-east-1a")
    assert base == L.client_token("train", [1, 0], offer(), "us-east-1a")
    assert base.startswith("gpufleet-") and len(base) <= 64   # EC2 takes up to 64 characters
    others = [
        L.client_token("train", [0, 1, 2], offer(), "us-east-1a"),
        L.client_token("other", [0, 1], offer(), "us-east-1a"),
        L.client_token("train", [0, 1], offer(spot=True), "us-east-1a"),
        L.client_token("train", [0, 1], offer(), "us-east-1b"),
        L.client_token("train", [0, 1], offer(), "us-east-1a", attempt=1),
    ]
    assert len(set(others + [base])) == 6


def test_instance_numbers_come_from_the_launch_index():
    tags = [{"Key": "gpufleet:nums", "Value": "3,4,7"}]
    assert [L.instance_nums({"Tags": tags, "AmiLaunchIndex": i}) for i in range(3)] == [3, 4, 7]
    assert L.instance_nums({"Tags": tags, "AmiLaunchIndex": 3}) is None
    assert L.instance_nums({"Tags": [], "AmiLaunchIndex": 0}) is None
    assert L.instance_nums({"Tags": [{"Key": "gpufleet:nums", "Value": "x"}]}) is None


def test_user_tags_cannot_take_a_resource_out_of_its_fleet():
    tags = L.fleet_tags("train", {"gpufleet:fleet": "other", "Name": "mine", "team": "ml"})
    assert tags["gpufleet:fleet"] == "train" and tags["team"] == "ml"


def test_burstable_types_stay_out_of_cluster_placement_groups():
    assert L.uses_placement_group({"placement": "cluster"}, "p5.48xlarge")
    assert not L.uses_placement_group({"placement": "cluster"}, "t3.large")
    assert not L.uses_placement_group({"placement": "any"}, "p5.48xlarge")
