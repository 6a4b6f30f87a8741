"""What the gcp backend asks Compute Engine for: NIC layouts for A3 High/Mega, A3 Ultra and A4
(docs/reference/dstack-runtime.md#gcp-instances,
docs/reference/interconnect.md#gcp-machine-types), the bulkInsert body, labels, scheduling,
placement."""

from __future__ import annotations

import pytest
from ansible_collections.gpufleet.cluster.plugins.module_utils.backends import gcp_layout as G

MAIN = {"network": "default", "subnetwork": None}
EXTRAS = [{"network": "gpu-%d" % n, "subnetwork": "gpu-%d-sub" % n} for n in range(8)]
ROCE = {"network": "roce", "subnetworks": ["roce-%d" % n for n in range(8)]}


def offer(machine_type="a3-highgpu-8g", spot=False, price=88.25):
    return {"backend": "gcp", "region": "us-central1", "zones": ["us-central1-a"],
            "instance_type": machine_type, "spot": spot, "price": price, "reservation": None}


def nics(machine_type, **kwargs):
    return G.network_interfaces(machine_type, "proj", "us-central1", MAIN, **kwargs)


def test_a_plain_machine_has_one_nic_with_an_external_address():
    assert nics("g2-standard-4", extras=EXTRAS) == [{
        "network": "projects/proj/global/networks/default",
        "accessConfigs": [{"name": "External NAT", "type": "ONE_TO_ONE_NAT"}]}]
    assert "accessConfigs" not in nics("g2-standard-4", public_ip=False)[0]


@pytest.mark.parametrize("machine_type, extra", [
    ("a3-highgpu-8g", 4), ("a3-edgegpu-8g", 4), ("a3-megagpu-8g", 8)])
def test_a3_takes_the_first_extra_vpcs_as_gvnic_data_nics(machine_type, extra):
    layout = nics(machine_type, extras=EXTRAS)
    assert len(layout) == 1 + extra
    assert all(n["nicType"] == "GVNIC" for n in layout)
    assert [n["network"].rsplit("/", 1)[1] for n in layout[1:]] == \
        ["gpu-%d" % n for n in range(extra)]
    assert layout[1]["subnetwork"] == "projects/proj/regions/us-central1/subnetworks/gpu-0-sub"
    assert all("accessConfigs" not in n for n in layout[1:])


def test_without_extra_vpcs_an_a3_is_a_plain_machine():
    assert len(nics("a3-megagpu-8g")) == 1 and "nicType" not in nics("a3-megagpu-8g")[0]


@pytest.mark.parametrize("machine_type", ["a4-highgpu-8g", "a3-ultragpu-8g"])
def test_roce_machines_get_one_extra_vpc_and_eight_mrdma_nics(machine_type):
    layout = nics(machine_type, extras=EXTRAS, roce=ROCE)
    assert [n["nicType"] for n in layout] == ["GVNIC", "GVNIC"] + ["MRDMA"] * 8
    assert [n["subnetwork"].rsplit("/", 1)[1] for n in layout[2:]] == \
        ["roce-%d" % n for n in range(8)]
    with pytest.raises(G.LayoutError, match=r"^%s requires 8 RoCE subnets, but only 3 are "
                                            r"available in VPC roce$" % machine_type):
        nics(machine_type, roce={"network": "roce", "subnetworks": ["a", "b", "c"]})


def launch(**changes):
    base = {"project": "proj", "fleet": "train", "offer": offer(),
            "gpu": {"vendor": "nvidia", "name": "H100", "memory_mib": 81920, "count": 8},
            "zone": "us-central1-a", "image": "projects/img/global/images/family/x",
            "disk_gb": 200, "interfaces": nics("g2-standard-4"), "public_key": "ssh-ed25519 AAA k",
            "placement": "cluster", "blocks": 1, "tags": {"Team": "ML Ops"},
            "resource_policy": "projects/proj/regions/us-central1/resourcePolicies/gpufleet-train",
            "reservation": None, "service_account": None}
    base.update(changes)
    return base


def test_instance_properties_of_an_on_demand_gpu_launch():
    properties = G.instance_properties(launch())
    assert properties["machineType"] == "a3-highgpu-8g"
    assert properties["labels"] == {"team": "ml-ops", "gpufleet-fleet": "train",
                                    "gpufleet-created-by": "gpufleet",
                                    "gpufleet-placement": "cluster"}
    assert properties["tags"] == {"items": ["gpufleet-train"]}
    assert properties["scheduling"] == {"onHostMaintenance": "TERMINATE",
                                        "automaticRestart": True,
                                        "provisioningModel": "STANDARD"}
    assert properties["resourcePolicies"] == [
        "projects/proj/regions/us-central1/resourcePolicies/gpufleet-train"]
    assert properties["disks"][0]["initializeParams"] == {
        "sourceImage": "projects/img/global/images/family/x", "diskSizeGb": "200",
        "diskType": "pd-balanced"}
    metadata = dict((i["key"], i["value"]) for i in properties["metadata"]["items"])
    assert metadata == {"ssh-keys": "ubuntu:ssh-ed25519 AAA k", "gpufleet-price": "88.25",
                        "gpufleet-blocks": "1"}
    assert "guestAccelerators" not in properties


def test_a_gateways_host_carries_the_gateways_network_tag():
    assert G.instance_properties(launch(gateway=True))["tags"]["items"] == [
        G.network_tag("train"), G.GATEWAY_TAG]
    assert G.instance_properties(launch())["tags"]["items"] == [G.network_tag("train")]


def test_spot_reservations_service_accounts_and_attached_gpus():
    spot = G.instance_properties(launch(offer=offer(spot=True, price=25.0)))
    assert spot["scheduling"] == {"onHostMaintenance": "TERMINATE", "automaticRestart": False,
                                  "provisioningModel": "SPOT",
                                  "instanceTerminationAction": "DELETE"}
    reserved = G.instance_properties(launch(reservation="my-res", service_account="sa@p.iam"))
    assert reserved["reservationAffinity"] == {
        "consumeReservationType": "SPECIFIC_RESERVATION",
        "key": "compute.googleapis.com/reservation-name", "values": ["my-res"]}
    assert reserved["serviceAccounts"] == [{"email": "sa@p.iam",
                                            "scopes": ["https://www.googleapis.com/auth/"
                                                       "cloud-platform"]}]
    n1 = G.instance_properties(launch(offer=offer("n1-standard-8", price=1.1),
                                      gpu={"vendor": "nvidia", "name": "T4",
                                           "memory_mib": 16384, "count": 2}))
    assert n1["guestAccelerators"] == [{"acceleratorType": "nvidia-tesla-t4",
                                        "acceleratorCount": 2}]
    cpu = G.instance_properties(launch(offer=offer("n2-standard-8"), gpu=None))
    assert cpu["scheduling"]["onHostMaintenance"] == "MIGRATE"


def test_bulk_insert_names_every_instance_and_request_ids_repeat_for_the_same_launch():
    body = G.bulk_insert_body(["train-0", "train-1"], {"machineType": "x"}, all_at_once=True)
    assert body == {"count": "2", "minCount": "2",
                    "perInstanceProperties": {"train-0": {}, "train-1": {}},
                    "instanceProperties": {"machineType": "x"}}
    assert G.bulk_insert_body(["a-0"], {}, all_at_once=False)["minCount"] == "1"
    first = G.request_id("train", ["train-0", "train-1"], offer(), "us-central1-a")
    assert first == G.request_id("train", ["train-1", "train-0"], offer(), "us-central1-a")
    assert first != G.request_id("train", ["train-0", "train-1"], offer(), "us-central1-b")
    assert first != G.request_id("train", ["train-0", "train-1"], offer(spot=True),
                                 "us-central1-a")


def test_placement_policy_firewall_and_numbers():
    assert G.resource_policy_body("train")["groupPlacementPolicy"] == {
        "availabilityDomainCount": 1, "collocation": "COLLOCATED"}
    rules = G.firewall_bodies("proj", "train", ["default", "gpu-0"])
    assert [r["name"] for r in rules] == ["gpufleet-train-ssh", "gpufleet-train-internal",
                                          "gpufleet-train-ssh-1", "gpufleet-train-internal-1",
                                          "gpufleet-train-gateways"]
    assert rules[0]["allowed"] == [{"IPProtocol": "tcp", "ports": ["22"]}]
    assert rules[1]["sourceTags"] == rules[1]["targetTags"] == ["gpufleet-train"]
    # The gateways' hosts reach the replicas over TCP on the main network.
    assert (rules[4]["sourceTags"], rules[4]["targetTags"], rules[4]["network"]) == (
        [G.GATEWAY_TAG], ["gpufleet-train"], "projects/proj/global/networks/default")
    # A gateway's host also takes HTTP and HTTPS from anywhere, and carries the gateways' tag.
    web = G.firewall_bodies("proj", "gw", ["default"], gateway=True)[-1]
    assert (web["name"], web["allowed"], web["sourceRanges"]) == (
        "gpufleet-gw-web", [{"IPProtocol": "tcp", "ports": ["80", "443"]}], ["0.0.0.0/0"])
    assert G.GATEWAY_TAG not in G.firewall_bodies("proj", "gw", ["default"])[-1].get(
        "targetTags", [])
    assert [G.instance_num({"name": n}, "train") for n in ("train-3", "train-x", "other-1")] == \
        [3, None, None]
