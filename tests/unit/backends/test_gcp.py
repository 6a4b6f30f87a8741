"""gcp fleets against a local Compute Engine double (tests/doubles/gce.py), with google-auth's
real service-account credentials: each request body (NIC layout, placement policy,
scheduling), idempotent re-applies, capacity moving on to the next zone, and delete."""

from __future__ import annotations

import pytest
from ansible_collections.gpufleet.cluster.plugins.module_utils.backends import gcp_layout as G
from ansible_collections.gpufleet.cluster.plugins.module_utils.backends.gcp import Gcp, GcpError
from ansible_collections.gpufleet.cluster.plugins.module_utils.fleets import cloud
from ansible_collections.gpufleet.cluster.plugins.module_utils.offers import catalog
from ansible_collections.gpufleet.cluster.plugins.module_utils.spec import parse_data

from tests.doubles.catalogs import catalog as make_catalog
from tests.doubles.catalogs import machine
from tests.doubles.gce import GceDouble

pytestmark = pytest.mark.cloud
REGION = "us-central1"


def gpu_machine(name, cpus, memory_gib, gpu_name, gpu_mib, count, zones, price, spot):
    return machine(name, cpus, memory_gib * 1024, (gpu_name, gpu_mib, count), REGION, zones,
                   price, spot)


CATALOG = make_catalog(
    "gcp",
    gpu_machine("a3-megagpu-8g", 208, 1872, "H100", 81920, 8, ["us-central1-a"], 88.25, 25.0),
    gpu_machine("a4-highgpu-8g", 224, 3968, "B200", 184320, 8, ["us-central1-b"], 100.0, None),
    gpu_machine("g2-standard-4", 4, 16, "L4", 24576, 1, ["us-central1-a", "us-central1-c"],
                0.71, 0.28),
    gpu_machine("n1-standard-8", 8, 30, "T4", 16384, 2, ["us-central1-a"], 1.08, 0.4),
)


@pytest.fixture(scope="module")
def gce(tmp_path_factory):
    """The local GCE double with the extra and RoCE VPCs' subnetworks, for the module."""
    gce = GceDouble()
    for n in range(8):
        gce.add_subnetwork(REGION, "gpu-%d-sub" % n, "gpu-%d" % n)
        gce.add_subnetwork(REGION, "roce-sub-%d" % n, "roce")
    gce.key = gce.credentials_file(str(tmp_path_factory.mktemp("gce") / "sa.json"))
    yield gce
    gce.stop()


@pytest.fixture
def gcp_cloud(gce, tmp_path, monkeypatch):
    """What cloud.apply needs against the GCE double: its state root, a catalog and the gcp
    settings, and the Gcp client (the double under "double")."""
    monkeypatch.setenv("GOOGLE_APPLICATION_CREDENTIALS", gce.key)
    monkeypatch.setenv("GPUFLEET_GCP_ENDPOINT", gce.endpoint)
    gce.clear()
    catalog.write(CATALOG, str(tmp_path / "catalog" / "gcp.json"))
    section = {"regions": [REGION], "extra_vpcs": ["gpu-%d" % n for n in range(8)],
               "roce_vpcs": ["roce"], "service_account": "vm@test-project.iam"}
    settings = {"gcp": dict(section, retry_delays=[5])}
    return {"root": str(tmp_path / "state"), "catalog_dir": str(tmp_path / "catalog"),
            "settings": settings, "client": Gcp(section, poll=0.01), "double": gce}


def fleet(name="train", **fields):
    data = {"type": "fleet", "name": name, "nodes": 2, "placement": "cluster",
            "backends": ["gcp"], "resources": {"gpu": "H100:8"}}
    data.update(fields)
    return parse_data(data)[0]


def apply(gcp_cloud, config, check_mode=False):
    return cloud.apply(config, config["name"], gcp_cloud["root"], gcp_cloud["settings"],
                       check_mode=check_mode, client=gcp_cloud["client"],
                       catalog_dir=gcp_cloud["catalog_dir"], sleep=lambda s: None)[:3]


def test_a3_mega_cluster_is_one_bulk_insert_with_tcpxo_nics_and_a_compact_policy(gcp_cloud):
    instances, plan, changed = apply(gcp_cloud, fleet(tags={"Team": "ML"}))
    assert changed and plan["create"] == ["train-0", "train-1"]
    assert [(i["name"], i["zone"], i["instance_type"], i["status"], i["price"])
            for i in instances] == [("train-0", "us-central1-a", "a3-megagpu-8g", "idle", 88.25),
                                    ("train-1", "us-central1-a", "a3-megagpu-8g", "idle", 88.25)]
    assert all(i["hostname"].startswith("34.1.") and i["user"] == "ubuntu" for i in instances)
    gce = gcp_cloud["double"]
    inserts = gce.calls("POST", r"/instances/bulkInsert$")
    assert len(inserts) == 1
    body = inserts[0]["body"]
    assert body["count"] == "2" and body["minCount"] == "2"
    assert sorted(body["perInstanceProperties"]) == ["train-0", "train-1"]
    properties = body["instanceProperties"]
    assert [n["nicType"] for n in properties["networkInterfaces"]] == ["GVNIC"] * 9
    assert [n["subnetwork"].rsplit("/", 1)[1] for n in properties["networkInterfaces"][1:]] == \
        ["gpu-%d-sub" % n for n in range(8)]
    assert properties["resourcePolicies"] == [
        "projects/test-project/regions/us-central1/resourcePolicies/gpufleet-train"]
    assert properties["scheduling"]["onHostMaintenance"] == "TERMINATE"
    assert properties["labels"]["team"] == "ml"
    assert properties["serviceAccounts"][0]["email"] == "vm@test-project.iam"
    policy = gce.calls("POST", r"/resourcePolicies$")[0]["body"]
    assert policy == G.resource_policy_body("train")
    # Firewall rules on the main VPC and each extra one: SSH and intra-fleet traffic; on the
    # main one, TCP from the gateways' hosts too.
    assert len(gce.calls("POST", r"/global/firewalls$")) == 19
    # The same apply again changes nothing and creates nothing.
    gce.clear()
    again, plan, changed = apply(gcp_cloud, fleet(tags={"Team": "ML"}))
    assert not changed and plan["keep"] == ["train-0", "train-1"]
    assert gce.mutating() == []
    assert [i["instance_id"] for i in again] == [i["instance_id"] for i in instances]
    removed, changed = cloud.delete(fleet(), "train", gcp_cloud["settings"],
                                    client=gcp_cloud["client"],
                                    catalog_dir=gcp_cloud["catalog_dir"])
    assert changed and removed["instances"] == ["train-0", "train-1"]
    assert removed["resource_policies"] == ["gpufleet-train"] and len(removed["firewalls"]) == 19
    assert gce.instances == {} and gce.policies == {} and gce.firewalls == {}


def test_a4_gets_one_extra_vpc_and_eight_rdma_nics(gcp_cloud):
    instances, _plan, _changed = apply(gcp_cloud,
                                       fleet("roce", nodes=1, resources={"gpu": "B200:8"}))
    assert instances[0]["instance_type"] == "a4-highgpu-8g"
    nics = gcp_cloud["double"].calls("POST", r"/bulkInsert$")[0]["body"]["instanceProperties"][
        "networkInterfaces"]
    assert [n["nicType"] for n in nics] == ["GVNIC", "GVNIC"] + ["MRDMA"] * 8
    assert [n["subnetwork"].rsplit("/", 1)[1] for n in nics[2:]] == \
        ["roce-sub-%d" % n for n in range(8)]


def test_spot_n1_with_attached_gpus_and_capacity_moving_to_the_next_zone(gcp_cloud):
    gcp_cloud["double"].capacity["us-central1-a"] = 0
    instances, _plan, _changed = apply(gcp_cloud, fleet(
        "cheap", nodes=1, placement="any", spot_policy="spot", resources={"gpu": "L4"}))
    assert [(i["zone"], i["spot"], i["price"]) for i in instances] == \
        [("us-central1-c", True, 0.28)]
    properties = gcp_cloud["double"].calls("POST", r"/bulkInsert$")[-1]["body"][
        "instanceProperties"]
    assert properties["scheduling"]["provisioningModel"] == "SPOT"
    assert "resourcePolicies" not in properties
    gcp_cloud["double"].clear()
    apply(gcp_cloud, fleet("tesla", nodes=1, placement="any", resources={"gpu": "T4:2"}))
    properties = gcp_cloud["double"].calls("POST", r"/bulkInsert$")[0]["body"]["instanceProperties"]
    assert properties["guestAccelerators"] == [{"acceleratorType": "nvidia-tesla-t4",
                                                "acceleratorCount": 2}]


def test_no_capacity_anywhere_fails_naming_the_zones(gcp_cloud):
    gcp_cloud["double"].capacity.update({"us-central1-a": 0, "us-central1-c": 0})
    with pytest.raises(cloud.CloudError, match=r"fleet full: no capacity for 1 instance\(s\) in "
                                               r"2 offer\(s\) tried: g2-standard-4 us-central1 "
                                               r"in us-central1-a \(ZONE_RESOURCE_POOL_EXHAUSTED"):
        apply(gcp_cloud, fleet("full", nodes=1, placement="any", resources={"gpu": "L4"}))


def test_missing_credentials_and_bad_settings_say_what_to_do(gcp_cloud, monkeypatch):
    with pytest.raises(GcpError, match="roce_vpcs takes at most one network"):
        Gcp({"roce_vpcs": ["a", "b"]})
    monkeypatch.setenv("GOOGLE_APPLICATION_CREDENTIALS", "/nonexistent/key.json")
    with pytest.raises(GcpError, match="no Google Cloud credentials: .* Set "
                                       "GOOGLE_APPLICATION_CREDENTIALS"):
        Gcp({})


def test_the_key_and_project_awx_injects_are_used_without_google_application_credentials(
        gcp_cloud, monkeypatch):
    # Older AWX injects a GCE credential only as these (and GCP_PROJECT for the project).
    monkeypatch.delenv("GOOGLE_APPLICATION_CREDENTIALS")
    for name in ("GOOGLE_CLOUD_PROJECT", "GCE_PROJECT", "GCE_CREDENTIALS_FILE_PATH"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("GCP_SERVICE_ACCOUNT_FILE", gcp_cloud["double"].key)
    monkeypatch.setenv("GCP_PROJECT", "awx-project")
    tokens_before = gcp_cloud["double"].tokens
    client = Gcp({"regions": [REGION]}, poll=0.01)
    assert client.project == "awx-project"
    assert client.fleet_instances("nothing-here", [REGION]) == []
    # The key's token URI is the double's: the token came from the injected key file.
    assert gcp_cloud["double"].tokens > tokens_before
    assert all("/projects/awx-project/" in r["path"]
               for r in gcp_cloud["double"].calls("GET", "/instances"))
    monkeypatch.delenv("GCP_SERVICE_ACCOUNT_FILE")
    monkeypatch.setenv("GCE_CREDENTIALS_FILE_PATH", "/nonexistent/awx-key.json")
    with pytest.raises(GcpError, match="no Google Cloud credentials: /nonexistent/awx-key.json"):
        Gcp({})


def test_a_specific_reservation_pins_the_machine_and_zone_without_a_placement_policy(gcp_cloud):
    gce = gcp_cloud["double"]
    gce.reservations[("us-central1-a", "my-res")] = "g2-standard-4"
    instances, _plan, _changed = apply(gcp_cloud, fleet("reserved", nodes=1, reservation="my-res",
                                                        resources={"gpu": "L4"}))
    assert [(i["instance_type"], i["zone"]) for i in instances] == \
        [("g2-standard-4", "us-central1-a")]
    properties = gce.calls("POST", r"/bulkInsert$")[0]["body"]["instanceProperties"]
    assert properties["reservationAffinity"]["values"] == ["my-res"]
    assert "resourcePolicies" not in properties
    with pytest.raises(cloud.CloudError, match="reservation nope was not found"):
        apply(gcp_cloud, fleet("nope", nodes=1, reservation="nope", resources={"gpu": "L4"}))


def test_gcp_fleets_are_found_from_their_labels_alone(gcp_cloud):
    apply(gcp_cloud, fleet("seen", nodes=1, placement="any", resources={"gpu": "L4"}))
    held = cloud.discover({"gcp": {"regions": [REGION]}}, gcp_cloud["root"],
                          gcp_cloud["catalog_dir"])
    # (the module's double still holds the other tests' fleets)
    assert [(b, n, p, [i["name"] for i in inst]) for b, n, p, g, inst in held
            if n == "seen" and not g] == [("gcp", "seen", "any", ["seen-0"])]


def test_a_preempted_spot_vm_is_an_interruption(gcp_cloud):
    """Compute Engine preempts a spot VM mid-run: the fleet's record says stopped and why, and
    the run's job on it is interrupted (tasks.interruption)."""
    from ansible_collections.gpufleet.cluster.plugins.module_utils.tasks import interruption
    from ansible_collections.gpufleet.cluster.plugins.module_utils.tasks import lifecycle

    instances, _plan, _changed = apply(gcp_cloud, fleet(
        "preempt", nodes=1, placement="any", spot_policy="spot", resources={"gpu": "L4"}))
    (inst,) = instances
    assert inst["error"] is None
    gcp_cloud["double"].preempt(inst["zone"], "preempt-0")
    (after,) = gcp_cloud["client"].records(gcp_cloud["client"].fleet_instances("preempt", [REGION]),
                                           "preempt", None)
    assert after["status"] == "stopped"
    assert after["error"].startswith("preempted by Compute Engine (spot VM stopped at ")
    reason, message = interruption.judge(after["name"], after, 0)
    assert reason == lifecycle.INTERRUPTED_BY_NO_CAPACITY
    assert message.startswith("host preempt-0: preempted by Compute Engine") and message.endswith(
        "(spot)")


def test_instances_made_for_a_run_carry_its_name_and_idle_limit_in_metadata(gcp_cloud):
    """The new instances of a fleet a run grows keep the run and their idle limit in their
    metadata; the fleet's own instance does not; both read back from Compute Engine alone."""
    from ansible_collections.gpufleet.cluster.plugins.module_utils.fleets.apply import at_least

    config = fleet("grows", nodes="1..3", placement="any", resources={"gpu": "L4"})
    apply(gcp_cloud, config)
    grown = dict(at_least(config, 2), made_for={"run": "sweep-3", "idle_duration": "off"})
    instances, plan, _changed = apply(gcp_cloud, grown)
    assert plan["create"] == ["grows-1"]
    assert [(i["name"], i["made_for_run"], i["idle_duration"]) for i in instances] == \
        [("grows-0", None, None), ("grows-1", "sweep-3", "off")]
    again = gcp_cloud["client"].records(gcp_cloud["client"].fleet_instances("grows", [REGION]),
                                        "grows", None)
    assert [(i["made_for_run"], i["idle_duration"]) for i in again] == \
        [(None, None), ("sweep-3", "off")]


def test_members_are_labels_holding_a_digest_and_new_instances_get_them(gcp_cloud):
    """A member is the label gpufleet-member-<user> on every instance, holding a digest of the
    key's fingerprint (a label value allows only [a-z0-9_-]); an instance made later by apply
    gets the fleet's members; the creator is a label from launch."""
    client, gce = gcp_cloud["client"], gcp_cloud["double"]
    apply(gcp_cloud, fleet(nodes={"min": 1, "max": 2}))
    placed = client.fleet_instances("train", [REGION])
    mark = client.member_mark("SHA256:Ab+/cd")
    assert mark == G.member_mark("SHA256:Ab+/cd") and len(mark) == 40
    assert set(mark) <= set("0123456789abcdef")
    assert client.set_member("train", placed, "bob", mark) is True
    assert len(gce.calls("POST", r"/instances/[^/]+/setLabels$")) == 1
    placed = client.fleet_instances("train", [REGION])
    assert client.fleet_members("train", placed) == {"bob": mark}
    records = client.records(placed, "train", "/k")
    assert records[0]["members"] == {"bob": mark} and records[0]["creator"]
    assert records[0]["creator"] == G.label_value(records[0]["creator"])
    # A second instance made by apply gets bob's label too.
    instances, _plan, _changed = apply(gcp_cloud, fleet(nodes={"min": 2, "max": 2}))
    assert [i.get("members") for i in instances] == [{"bob": mark}] * 2
    placed = client.fleet_instances("train", [REGION])
    assert client.set_member("train", placed, "bob", None) is True
    assert client.fleet_members("train", client.fleet_instances("train", [REGION])) == {}
    cloud.delete(fleet(), "train", gcp_cloud["settings"], client=client,
                 catalog_dir=gcp_cloud["catalog_dir"])
