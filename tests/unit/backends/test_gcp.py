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
def double(tmp_path_factory):
    gce = GceDouble()
    for n in range(8):
        gce.add_subnetwork(REGION, "gpu-%d-sub" % n, "gpu-%d" % n)
        gce.add_subnetwork(REGION, "roce-sub-%d" % n, "roce")
    gce.key = gce.credentials_file(str(tmp_path_factory.mktemp("gce") / "sa.json"))
    yield gce
    gce.stop()


@pytest.fixture
def world(double, tmp_path, monkeypatch):
    monkeypatch.setenv("GOOGLE_APPLICATION_CREDENTIALS", double.key)
    monkeypatch.setenv("GPUFLEET_GCP_ENDPOINT", double.endpoint)
    double.clear()
    catalog.write(CATALOG, str(tmp_path / "catalog" / "gcp.json"))
    section = {"regions": [REGION], "extra_vpcs": ["gpu-%d" % n for n in range(8)],
               "roce_vpcs": ["roce"], "service_account": "vm@test-project.iam"}
    settings = {"gcp": dict(section, retry_delays=[5])}
    return {"root": str(tmp_path / "state"), "catalog_dir": str(tmp_path / "catalog"),
            "settings": settings, "client": Gcp(section, poll=0.01), "double": double}


def fleet(name="train", **fields):
    data = {"type": "fleet", "name": name, "nodes": 2, "placement": "cluster",
            "backends": ["gcp"], "resources": {"gpu": "H100:8"}}
    data.update(fields)
    return parse_data(data)[0]


def apply(world, config, check_mode=False):
    return cloud.apply(config, config["name"], world["root"], world["settings"],
                       check_mode=check_mode, client=world["client"],
                       catalog_dir=world["catalog_dir"], sleep=lambda s: None)[:3]


def test_a3_mega_cluster_is_one_bulk_insert_with_tcpxo_nics_and_a_compact_policy(world):
    instances, plan, changed = apply(world, fleet(tags={"Team": "ML"}))
    assert changed and plan["create"] == ["train-0", "train-1"]
    assert [(i["name"], i["zone"], i["instance_type"], i["status"], i["price"])
            for i in instances] == [("train-0", "us-central1-a", "a3-megagpu-8g", "idle", 88.25),
                                    ("train-1", "us-central1-a", "a3-megagpu-8g", "idle", 88.25)]
    assert all(i["hostname"].startswith("34.1.") and i["user"] == "ubuntu" for i in instances)
    double = world["double"]
    inserts = double.calls("POST", r"/instances/bulkInsert$")
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
    policy = double.calls("POST", r"/resourcePolicies$")[0]["body"]
    assert policy == G.resource_policy_body("train")
    # Firewall rules on the main VPC and each extra one: SSH and intra-fleet traffic.
    assert len(double.calls("POST", r"/global/firewalls$")) == 18
    # The same apply again changes nothing and creates nothing.
    double.clear()
    again, plan, changed = apply(world, fleet(tags={"Team": "ML"}))
    assert not changed and plan["keep"] == ["train-0", "train-1"]
    assert double.mutating() == []
    assert [i["instance_id"] for i in again] == [i["instance_id"] for i in instances]
    removed, changed = cloud.delete(fleet(), "train", world["settings"], client=world["client"],
                                    catalog_dir=world["catalog_dir"])
    assert changed and removed["instances"] == ["train-0", "train-1"]
    assert removed["resource_policies"] == ["gpufleet-train"] and len(removed["firewalls"]) == 18
    assert double.instances == {} and double.policies == {} and double.firewalls == {}


def test_a4_gets_one_extra_vpc_and_eight_rdma_nics(world):
    instances, _plan, _changed = apply(world, fleet("roce", nodes=1, resources={"gpu": "B200:8"}))
    assert instances[0]["instance_type"] == "a4-highgpu-8g"
    nics = world["double"].calls("POST", r"/bulkInsert$")[0]["body"]["instanceProperties"][
        "networkInterfaces"]
    assert [n["nicType"] for n in nics] == ["GVNIC", "GVNIC"] + ["MRDMA"] * 8
    assert [n["subnetwork"].rsplit("/", 1)[1] for n in nics[2:]] == \
        ["roce-sub-%d" % n for n in range(8)]


def test_spot_n1_with_attached_gpus_and_capacity_moving_to_the_next_zone(world):
    world["double"].capacity["us-central1-a"] = 0
    instances, _plan, _changed = apply(world, fleet(
        "cheap", nodes=1, placement="any", spot_policy="spot", resources={"gpu": "L4"}))
    assert [(i["zone"], i["spot"], i["price"]) for i in instances] == \
        [("us-central1-c", True, 0.28)]
    properties = world["double"].calls("POST", r"/bulkInsert$")[-1]["body"]["instanceProperties"]
    assert properties["scheduling"]["provisioningModel"] == "SPOT"
    assert "resourcePolicies" not in properties
    world["double"].clear()
    apply(world, fleet("tesla", nodes=1, placement="any", resources={"gpu": "T4:2"}))
    properties = world["double"].calls("POST", r"/bulkInsert$")[0]["body"]["instanceProperties"]
    assert properties["guestAccelerators"] == [{"acceleratorType": "nvidia-tesla-t4",
                                                "acceleratorCount": 2}]


def test_no_capacity_anywhere_fails_naming_the_zones(world):
    world["double"].capacity.update({"us-central1-a": 0, "us-central1-c": 0})
    with pytest.raises(cloud.CloudError, match=r"fleet full: no capacity for 1 instance\(s\) in "
                                               r"2 offer\(s\) tried: g2-standard-4 us-central1 "
                                               r"in us-central1-a \(ZONE_RESOURCE_POOL_EXHAUSTED"):
        apply(world, fleet("full", nodes=1, placement="any", resources={"gpu": "L4"}))


def test_missing_credentials_and_bad_settings_say_what_to_do(world, monkeypatch):
    with pytest.raises(GcpError, match="roce_vpcs takes at most one network"):
        Gcp({"roce_vpcs": ["a", "b"]})
    monkeypatch.setenv("GOOGLE_APPLICATION_CREDENTIALS", "/nonexistent/key.json")
    with pytest.raises(GcpError, match="no Google Cloud credentials: .* Set "
                                       "GOOGLE_APPLICATION_CREDENTIALS"):
        Gcp({})


def test_the_key_and_project_awx_injects_are_used_without_google_application_credentials(
        world, monkeypatch):
    # Older AWX injects a GCE credential only as these (and GCP_PROJECT for the project).
    monkeypatch.delenv("GOOGLE_APPLICATION_CREDENTIALS")
    for name in ("GOOGLE_CLOUD_PROJECT", "GCE_PROJECT", "GCE_CREDENTIALS_FILE_PATH"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("GCP_SERVICE_ACCOUNT_FILE", world["double"].key)
    monkeypatch.setenv("GCP_PROJECT", "awx-project")
    tokens_before = world["double"].tokens
    client = Gcp({"regions": [REGION]}, poll=0.01)
    assert client.project == "awx-project"
    assert client.fleet_instances("nothing-here", [REGION]) == []
    # The key's token URI is the double's: the token came from the injected key file.
    assert world["double"].tokens > tokens_before
    assert all("/projects/awx-project/" in r["path"]
               for r in world["double"].calls("GET", "/instances"))
    monkeypatch.delenv("GCP_SERVICE_ACCOUNT_FILE")
    monkeypatch.setenv("GCE_CREDENTIALS_FILE_PATH", "/nonexistent/awx-key.json")
    with pytest.raises(GcpError, match="no Google Cloud credentials: /nonexistent/awx-key.json"):
        Gcp({})


def test_a_specific_reservation_pins_the_machine_and_zone_without_a_placement_policy(world):
    double = world["double"]
    double.reservations[("us-central1-a", "my-res")] = "g2-standard-4"
    instances, _plan, _changed = apply(world, fleet("reserved", nodes=1, reservation="my-res",
                                                    resources={"gpu": "L4"}))
    assert [(i["instance_type"], i["zone"]) for i in instances] == \
        [("g2-standard-4", "us-central1-a")]
    properties = double.calls("POST", r"/bulkInsert$")[0]["body"]["instanceProperties"]
    assert properties["reservationAffinity"]["values"] == ["my-res"]
    assert "resourcePolicies" not in properties
    with pytest.raises(cloud.CloudError, match="reservation nope was not found"):
        apply(world, fleet("nope", nodes=1, reservation="nope", resources={"gpu": "L4"}))


def test_gcp_fleets_are_found_from_their_labels_alone(world):
    apply(world, fleet("seen", nodes=1, placement="any", resources={"gpu": "L4"}))
    held = cloud.discover({"gcp": {"regions": [REGION]}}, world["root"], world["catalog_dir"])
    # (the module's double still holds the other tests' fleets)
    assert [(b, n, p, [i["name"] for i in inst]) for b, n, p, inst in held
            if n == "seen"] == [("gcp", "seen", "any", ["seen-0"])]


def test_a_preempted_spot_vm_is_an_interruption(world):
    """Compute Engine preempts a spot VM mid-run: the fleet's record says stopped and why, and
    the run's job on it is interrupted (tasks.interruption)."""
    from ansible_collections.gpufleet.cluster.plugins.module_utils.tasks import interruption
    from ansible_collections.gpufleet.cluster.plugins.module_utils.tasks import lifecycle

    instances, _plan, _changed = apply(world, fleet(
        "preempt", nodes=1, placement="any", spot_policy="spot", resources={"gpu": "L4"}))
    (inst,) = instances
    assert inst["error"] is None
    world["double"].preempt(inst["zone"], "preempt-0")
    (after,) = world["client"].records(world["client"].fleet_instances("preempt", [REGION]),
                                       "preempt", None)
    assert after["status"] == "stopped"
    assert after["error"].startswith("preempted by Compute Engine (spot VM stopped at ")
    reason, message = interruption.judge(after["name"], after, 0)
    assert reason == lifecycle.INTERRUPTED_BY_NO_CAPACITY
    assert message.startswith("host preempt-0: preempted by Compute Engine") and message.endswith(
        "(spot)")


def test_instances_made_for_a_run_carry_its_name_and_idle_limit_in_metadata(world):
    """The new instances of a fleet a run grows keep the run and their idle limit in their
    metadata; the fleet's own instance does not; both read back from Compute Engine alone."""
    from ansible_collections.gpufleet.cluster.plugins.module_utils.fleets.apply import at_least

    config = fleet("grows", nodes="1..3", placement="any", resources={"gpu": "L4"})
    apply(world, config)
    grown = dict(at_least(config, 2), made_for={"run": "sweep-3", "idle_duration": "off"})
    instances, plan, _changed = apply(world, grown)
    assert plan["create"] == ["grows-1"]
    assert [(i["name"], i["made_for_run"], i["idle_duration"]) for i in instances] == \
        [("grows-0", None, None), ("grows-1", "sweep-3", "off")]
    again = world["client"].records(world["client"].fleet_instances("grows", [REGION]),
                                    "grows", None)
    assert [(i["made_for_run"], i["idle_duration"]) for i in again] == \
        [(None, None), ("sweep-3", "off")]
