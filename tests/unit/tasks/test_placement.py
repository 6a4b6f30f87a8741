# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Task placement: which fleet, which hosts, which rank
(docs/reference/dstack-files.md#resource-grammar, docs/reference/dstack-runtime.md#blocks,
docs/reference/dstack-runtime.md#health, docs/reference/dstack-runtime.md#placement)."""

from __future__ import annotations

import copy

import pytest
from ansible_collections.gpufleet.cluster.plugins.module_utils.fleets.status import InstanceStatus
from ansible_collections.gpufleet.cluster.plugins.module_utils.offers.match import (
    host_offer,
    matches,
)
from ansible_collections.gpufleet.cluster.plugins.module_utils.tasks.placement import (
    NoHostFits,
    PlacementError,
    job_requirements,
    place,
)

from ..configs import task
from .fakes import cpu_fact, fleet_of_instances, instance

# ---------------------------------------------------------------------------------------------
# Hand-built gpufleet_host facts, fleets and tasks
# ---------------------------------------------------------------------------------------------


def h100_fact(ip="10.1.0.10", blocks=8):
    devices = [
        {"vendor": "nvidia", "name": "H100", "memory_mib": 81559, "index": i,
         "id": "GPU-%d" % i, "bus_id": None}
        for i in range(8)
    ]
    return {
        "cpus": 128,
        "memory": {"bytes": 2048 * 1024 * 2**20, "mib": 2048 * 1024},
        "disk": {"available_bytes": 2000000 * 2**20, "available_mib": 2000000},
        "internal_ip": ip,
        "gpu": {"vendor": "nvidia", "count": 8, "name": "H100", "memory_mib": 81920,
                "devices": devices},
        "blocks": {"requested": "auto", "total": blocks},
    }


def t4_fact(ip="10.1.0.20"):
    fact = cpu_fact(cpus=16, memory_mib=65536, ip=ip)
    fact["gpu"] = {
        "vendor": "nvidia", "count": 1, "name": "T4", "memory_mib": 16384,
        "devices": [{"vendor": "nvidia", "name": "T4", "memory_mib": 15360, "index": 0,
                     "id": "GPU-t4", "bus_id": None}],
    }
    return fact


def amd_fact(ip="10.1.0.30"):
    devices = [
        {"vendor": "amd", "name": "MI300X", "memory_mib": 196592, "index": i,
         "id": "/dev/dri/renderD%d" % (128 + i), "bus_id": "0000:%02x:00.0" % (0x11 + i)}
        for i in range(8)
    ]
    fact = cpu_fact(cpus=192, memory_mib=2048 * 1024, disk_mib=1000000, ip=ip)
    fact["gpu"] = {"vendor": "amd", "count": 8, "name": "MI300X", "memory_mib": 196608,
                   "devices": devices}
    return fact


def spec(resources, **fields):
    """Resources as the real parser gives them for a task with ``resources``."""
    return task(resources=resources, **fields)["resources"]


def no_capacity(*args, **kwargs):
    with pytest.raises(NoHostFits) as info:
        place(*args, **kwargs)
    return info.value


# ---------------------------------------------------------------------------------------------
# job_requirements
# ---------------------------------------------------------------------------------------------


def test_nodes_give_that_many_jobs_with_the_task_resources():
    config = task(nodes=3, resources={"cpu": 4})
    jobs = job_requirements(config)
    assert [j["job_num"] for j in jobs] == [0, 1, 2]
    assert all(j["group"] is None for j in jobs)
    assert all(j["resources"]["cpu"]["count"] == {"min": 4, "max": 4} for j in jobs)


def test_groups_expand_in_order_with_their_own_resources():
    config = task(
        commands=None,
        groups=[
            {"name": "prefill", "nodes": 1, "commands": ["a"], "resources": {"gpu": "H100:8"}},
            {"name": "decode", "nodes": 2, "commands": ["b"], "resources": {"cpu": 16}},
        ],
    )
    jobs = job_requirements(config)
    assert [(j["job_num"], j["group"]) for j in jobs] == [
        (0, "prefill"), (1, "decode"), (2, "decode")]
    assert jobs[0]["resources"]["gpu"]["name"] == ["H100"]
    assert jobs[1]["resources"]["cpu"]["count"] == {"min": 16, "max": 16}
    # groups do not inherit anything from the task level: decode has the run default GPU spec
    assert jobs[2]["resources"]["gpu"]["count"] == {"min": 0, "max": None}


def test_job_requirements_rejects_bad_input_with_placement_error():
    with pytest.raises(PlacementError, match="nodes must be a whole number of at least 1"):
        job_requirements({"nodes": 0, "resources": {}})
    with pytest.raises(PlacementError, match="resources must be a mapping"):
        job_requirements({"nodes": 1, "resources": None})
    with pytest.raises(PlacementError, match="task config must be a mapping"):
        job_requirements(["not", "a", "config"])


# ---------------------------------------------------------------------------------------------
# host_offer
# ---------------------------------------------------------------------------------------------


def test_one_block_of_eight_is_an_eighth_but_keeps_the_whole_disk():
    offer = host_offer(h100_fact(), 1, 8)
    assert offer == {
        "cpus": 16, "memory_mib": 262144, "disk_mib": 2000000, "gpu_vendor": "nvidia",
        "gpu_name": "H100", "gpu_memory_mib": 81920, "gpu_count": 1, "arch": "x86",
    }
    assert host_offer(h100_fact(), 3, 8)["gpu_count"] == 3
    assert host_offer(h100_fact(), 8, 8)["cpus"] == 128


def test_cpu_host_offer_has_vendor_none_and_arch_from_facts():
    offer = host_offer(cpu_fact(arch="aarch64"), 1, 1)
    assert offer["gpu_vendor"] == "none"
    assert offer["gpu_count"] == 0
    assert offer["gpu_name"] is None
    assert offer["arch"] == "arm"
    assert host_offer(cpu_fact(), 1, 1)["arch"] == "x86"


def test_host_offer_rejects_bad_blocks_and_incomplete_facts():
    with pytest.raises(PlacementError, match="1 to 8 blocks, not 9"):
        host_offer(h100_fact(), 9, 8)
    fact = h100_fact()
    del fact["disk"]
    with pytest.raises(PlacementError, match="lack disk.available_mib"):
        host_offer(fact, 1, 8)
    with pytest.raises(PlacementError, match="arch of .* 'sparc64'"):
        host_offer(cpu_fact(arch="sparc64"), 1, 1)


# ---------------------------------------------------------------------------------------------
# matches, against specs from the real parser (docs/reference/dstack-files.md#examples)
# ---------------------------------------------------------------------------------------------


def whole(fact):
    return host_offer(fact, fact["blocks"]["total"], fact["blocks"]["total"])


@pytest.mark.parametrize(
    "resources, fact, reason",
    [
        ({"cpu": 4}, cpu_fact(cpus=2), "cpu 2 < 4"),
        ({"cpu": 32}, cpu_fact(cpus=64), "cpu 64 > 32"),
        ({"cpu": "16.."}, cpu_fact(cpus=64), None),
        ({"cpu": "arm:4"}, cpu_fact(cpus=4), "cpu arch x86, not arm"),
        ({"cpu": "2..:ARM"}, cpu_fact(arch="aarch64"), None),
        ({"memory": "8GB.."}, cpu_fact(memory_mib=7680), "memory 7.5GB < 8GB"),
        ({"memory": "200GB"}, cpu_fact(memory_mib=256 * 1024), "memory 256GB > 200GB"),
        ({"memory": "..1 TB"}, cpu_fact(memory_mib=256 * 1024), None),
        ({"disk": "100GB.."}, cpu_fact(disk_mib=51200), "disk 50GB < 100GB"),
        ({"disk": "50GB.."}, cpu_fact(disk_mib=51200), None),
        ({"gpu": "H100:8"}, h100_fact(), None),
        ({"gpu": "H100:8"}, t4_fact(), "gpu count 1 < 8"),
        ({"gpu": "H100"}, t4_fact(), "gpu name T4 not in [H100]"),
        ({"gpu": "A10G,A100"}, t4_fact(), "gpu name T4 not in [A10G, A100]"),
        ({"gpu": "h100:8"}, h100_fact(), None),
        ({"gpu": "MI300X:AMD"}, h100_fact(), "gpu vendor nvidia, not amd"),
        ({"gpu": "MI300X:8"}, amd_fact(), None),
        ({"gpu": "24GB"}, h100_fact(), "gpu memory 80GB > 24GB"),
        ({"gpu": "40GB..80GB:1..8"}, h100_fact(), None),
        ({"gpu": "amd:..80GB"}, amd_fact(), "gpu memory 192GB > 80GB"),
        ({"gpu": {"name": ["H100"], "count": {"min": 2}, "total_memory": "700GB.."}},
         h100_fact(), "gpu total memory 640GB < 700GB"),
        ({"gpu": {"name": ["H100"], "compute_capability": "9.0"}}, h100_fact(), None),
        ({"gpu": 0}, h100_fact(), "gpu count 8 > 0"),
        ({"gpu": 0}, cpu_fact(), None),
        # on the default image a GPU spec without vendor means nvidia
        # (docs/reference/dstack-files.md#gpu)
        ({"gpu": 1}, cpu_fact(), "gpu vendor none, not nvidia"),
        ({"gpu": "nvidia:0.."}, cpu_fact(), "gpu vendor none, not nvidia"),
        ({"shm_size": "24GB"}, cpu_fact(), None),
    ],
)
def test_matches_grammar_examples(resources, fact, reason):
    assert matches(spec(resources), whole(fact)) == reason


def test_gpu_count_without_vendor_on_a_custom_image():
    resources = spec({"gpu": 1}, image="ubuntu:24.04")
    assert resources["gpu"]["vendor"] is None
    assert matches(resources, whole(cpu_fact())) == "gpu count 0 < 1"
    assert matches(resources, whole(t4_fact())) is None


def test_run_default_gpu_spec_takes_hosts_with_and_without_gpus():
    # `gpu: 0..` is a plain range: a host with 8 GPUs matches it as well as a CPU-only host.
    default = spec({})
    assert default["gpu"]["vendor"] is None
    assert matches(default, whole(h100_fact())) is None
    assert matches(default, whole(cpu_fact())) is None


def test_disk_none_means_no_disk_requirement():
    assert matches(spec({"disk": None}), whole(cpu_fact(disk_mib=10))) is None
    assert matches(spec({}), whole(cpu_fact(disk_mib=10))) == "disk 0GB < 100GB"


def test_matches_shows_enough_decimals_to_tell_values_apart():
    assert matches(spec({"memory": "8GB.."}), whole(cpu_fact(memory_mib=8191))) == (
        "memory 7.999GB < 8GB")


# ---------------------------------------------------------------------------------------------
# place: single node and blocks
# ---------------------------------------------------------------------------------------------


def test_single_node_takes_one_block_of_eight_and_leaves_busy_gpus_out():
    config = task(resources={"gpu": 1})
    fleets = [fleet_of_instances("gpu", 1, placement="any")]
    busy = {"gpu-0": {"blocks": 2, "gpu_ids": ["GPU-0", "GPU-2"]}}
    plan = place(config, fleets, {"gpu-0": h100_fact()}, busy)
    (job,) = plan["jobs"]
    assert plan["fleet"] == "gpu" and plan["placement"] == "any"
    assert job["host"] == "gpu-0"
    assert (job["blocks"], job["total_blocks"], job["whole_host"]) == (1, 8, False)
    assert (job["cpus"], job["memory_mib"], job["disk_mib"]) == (16, 262144, 2000000)
    assert [g["id"] for g in job["gpus"]] == ["GPU-1"]
    assert (job["gpu_vendor"], job["gpu_name"], job["gpu_memory_mib"]) == ("nvidia", "H100", 81920)

    config = task(resources={"gpu": 2})
    (job,) = place(config, fleets, {"gpu-0": h100_fact()}, busy)["jobs"]
    assert job["blocks"] == 2
    assert [g["id"] for g in job["gpus"]] == ["GPU-1", "GPU-3"]


def test_single_node_takes_the_fewest_blocks_that_match():
    config = task(resources={"cpu": "40..", "gpu": "0.."})
    (job,) = place(config, [fleet_of_instances("gpu", 1)], {"gpu-0": h100_fact()})["jobs"]
    assert job["blocks"] == 3  # 16 CPUs a block
    assert job["cpus"] == 48
    assert len(job["gpus"]) == 3


def test_single_node_whole_host_when_the_host_is_one_block():
    plan = place(task(), [fleet_of_instances("cpu", 1)], {"cpu-0": cpu_fact()})
    (job,) = plan["jobs"]
    assert job["whole_host"] is True and job["blocks"] == job["total_blocks"] == 1
    assert job["gpus"] == [] and job["gpu_vendor"] == "none"
    assert job["internal_ip"] == "10.1.0.2"
    assert job["resources"]["cpu"]["arch"] == "x86"


def test_fully_busy_host_and_busy_gpus_are_reported():
    busy = {"gpu-0": {"blocks": 8, "gpu_ids": ["GPU-%d" % i for i in range(8)]}}
    exc = no_capacity(task(resources={"gpu": 1}), [fleet_of_instances("gpu", 1)],
                      {"gpu-0": h100_fact()}, busy)
    assert "gpu-0: busy (all 8 blocks in use)" in str(exc)
    busy = {"gpu-0": {"blocks": 0, "gpu_ids": ["GPU-%d" % i for i in range(8)]}}
    exc = no_capacity(task(resources={"gpu": 1}), [fleet_of_instances("gpu", 1)],
                      {"gpu-0": h100_fact()}, busy)
    assert "gpu-0: only 0 of 8 GPUs free" in str(exc)


def test_amd_host_gives_render_nodes():
    config = task(resources={"gpu": "MI300X"})
    (job,) = place(config, [fleet_of_instances("amd", 1)], {"amd-0": amd_fact()})["jobs"]
    assert job["gpu_vendor"] == "amd"
    assert [g["id"] for g in job["gpus"]] == [
        "/dev/dri/renderD128", "/dev/dri/renderD129", "/dev/dri/renderD130",
        "/dev/dri/renderD131", "/dev/dri/renderD132", "/dev/dri/renderD133",
        "/dev/dri/renderD134", "/dev/dri/renderD135"]
    assert job["whole_host"] is True  # one block: the whole host, all of its GPUs
    exc = no_capacity(config, [fleet_of_instances("nv", 1)], {"nv-0": h100_fact()})
    assert "nv-0: gpu vendor nvidia, not amd" in str(exc)


# ---------------------------------------------------------------------------------------------
# place: multi-node
# ---------------------------------------------------------------------------------------------


def test_multi_node_needs_a_cluster_fleet():
    facts = {"any-%d" % i: cpu_fact() for i in range(3)}
    facts.update({"clu-%d" % i: cpu_fact() for i in range(2)})
    config = task(nodes=2)
    exc = no_capacity(config, [fleet_of_instances("any", 3, placement="any")], facts)
    assert "fleet any: placement is any; multi-node tasks need placement: cluster" in str(exc)
    plan = place(config, [fleet_of_instances("any", 3, placement="any"),
                          fleet_of_instances("clu", 2)], facts)
    assert plan["fleet"] == "clu" and plan["placement"] == "cluster"
    # the same one-node task may use the `any` fleet
    assert place(task(), [fleet_of_instances("any", 3, placement="any")], facts)["fleet"] == "any"


def test_multi_node_takes_whole_free_hosts_only():
    facts = {"gpu-%d" % i: h100_fact(ip="10.1.0.%d" % (10 + i)) for i in range(3)}
    busy = {"gpu-0": {"blocks": 1, "gpu_ids": ["GPU-0"]}}
    config = task(nodes=2, resources={"gpu": "H100:1"})
    # a whole host has 8 GPUs: `gpu: H100:1` is an exact count and does not fit whole hosts
    exc = no_capacity(config, [fleet_of_instances("gpu", 3)], facts, busy)
    assert "gpu-1: gpu count 8 > 1" in str(exc)
    assert "gpu-0: busy (1 of 8 blocks in use); multi-node tasks need whole free hosts" in str(
        exc)
    plan = place(task(nodes=2, resources={"gpu": "H100:8"}), [fleet_of_instances("gpu", 3)], facts,
                 busy)
    assert [j["host"] for j in plan["jobs"]] == ["gpu-1", "gpu-2"]
    for job in plan["jobs"]:
        assert job["whole_host"] is True and job["blocks"] == 8 and len(job["gpus"]) == 8
    assert [j["internal_ip"] for j in plan["jobs"]] == ["10.1.0.11", "10.1.0.12"]


def test_ranks_follow_price_then_instance_number_and_are_stable():
    records = [
        instance("cloud", 0, backend="aws", region="us-east-1", price=3.0),
        instance("cloud", 1, backend="aws", region="us-east-1", price=1.0),
        instance("cloud", 2, backend="aws", region="us-east-1", price=2.0),
        instance("cloud", 3, backend="aws", region="us-east-1", price=1.0),
    ]
    fleets = [{"name": "cloud", "placement": "cluster", "instances": records}]
    facts = {r["name"]: cpu_fact(ip="10.2.0.%d" % r["num"]) for r in records}
    config = task(nodes=3)
    plan = place(config, fleets, facts)
    assert [(j["job_num"], j["host"]) for j in plan["jobs"]] == [
        (0, "cloud-1"), (1, "cloud-3"), (2, "cloud-2")]
    assert plan["jobs"][0]["price"] == 1.0
    shuffled = [{"name": "cloud", "placement": "cluster",
                 "instances": [records[2], records[0], records[3], records[1]]}]
    assert place(config, shuffled, facts) == plan
    assert place(copy.deepcopy(config), fleets, facts) == plan


def test_other_jobs_stay_in_the_masters_backend_and_region():
    records = [
        instance("mix", 0, backend="aws", region="us-east-1", price=1.0),
        instance("mix", 1, backend="aws", region="eu-west-1", price=2.0),
        instance("mix", 2, backend="aws", region="eu-west-1", price=3.0),
    ]
    fleets = [{"name": "mix", "placement": "cluster", "instances": records}]
    facts = {r["name"]: cpu_fact() for r in records}
    plan = place(task(nodes=2), fleets, facts)
    assert [j["host"] for j in plan["jobs"]] == ["mix-1", "mix-2"]
    exc = no_capacity(task(nodes=3), fleets, facts)
    assert "3 of 3 hosts match, but no single backend and region has enough" in str(exc)


# ---------------------------------------------------------------------------------------------
# place: groups
# ---------------------------------------------------------------------------------------------


def test_groups_get_hosts_that_match_their_own_resources():
    config = task(
        commands=None,
        groups=[
            {"name": "head", "nodes": 1, "commands": ["a"], "resources": {"cpu": "2.."}},
            {"name": "gpu", "nodes": 1, "commands": ["b"], "resources": {"gpu": "H100:8"}},
        ],
    )
    # The cheapest host is the H100 one: job 0 would take it first, leaving job 1 nothing; the
    # H100 host must go to the group that needs it.
    records = [instance("c", 0, price=0.5), instance("c", 1, price=1.0)]
    fleets = [{"name": "c", "placement": "cluster", "instances": records}]
    facts = {"c-0": h100_fact(), "c-1": cpu_fact()}
    plan = place(config, fleets, facts)
    assert [(j["job_num"], j["group"], j["host"]) for j in plan["jobs"]] == [
        (0, "head", "c-1"), (1, "gpu", "c-0")]
    assert plan["jobs"][1]["resources"]["gpu"]["name"] == ["H100"]
    assert plan["jobs"][0]["resources"]["gpu"]["count"]["min"] == 0


def test_group_reasons_name_the_group():
    config = task(
        commands=None,
        groups=[
            {"name": "a", "nodes": 1, "commands": ["x"], "resources": {"cpu": 64}},
            {"name": "b", "nodes": 1, "commands": ["x"], "resources": {"gpu": "H100:8"}},
        ],
    )
    exc = no_capacity(config, [fleet_of_instances("c", 2)], {"c-0": cpu_fact(), "c-1": cpu_fact()})
    message = str(exc)
    assert "needs 2 nodes (group a: 1, group b: 1)" in message
    assert "c-0: cpu 8 < 64 [group a], gpu vendor none, not nvidia [group b]" in message


# ---------------------------------------------------------------------------------------------
# place: fleets, instances and profile filters
# ---------------------------------------------------------------------------------------------


def test_fleets_filter_accepts_project_prefixed_names():
    fleets = [fleet_of_instances("alpha", 1), fleet_of_instances("beta", 1)]
    facts = {"alpha-0": cpu_fact(), "beta-0": cpu_fact()}
    assert place(task(), fleets, facts)["fleet"] == "alpha"
    assert place(task(fleets=["main/beta"]), fleets, facts)["fleet"] == "beta"
    assert place(task(fleets=["beta"]), fleets, facts)["jobs"][0]["host"] == "beta-0"
    exc = no_capacity(task(fleets=["ghost"]), fleets, facts)
    assert "fleet ghost: no such fleet" in str(exc)
    assert "known fleets: alpha, beta" in str(exc)


def test_instances_pin_the_run():
    fleets = [fleet_of_instances("demo", 3)]
    facts = {"demo-%d" % i: cpu_fact() for i in range(3)}
    assert place(task(instances=["demo-2"]), fleets, facts)["jobs"][0]["host"] == "demo-2"
    pinned = task(instances=[{"hostname": "192.0.2.2"}])
    assert place(pinned, fleets, facts)["jobs"][0]["host"] == "demo-1"
    pinned = task(instances=[{"fleet": "main/demo", "instance": 2}])
    assert place(pinned, fleets, facts)["jobs"][0]["host"] == "demo-2"
    exc = no_capacity(task(instances=["other-0"]), fleets, facts)
    assert "demo-0: not selected by instances" in str(exc)


def test_unhealthy_and_unavailable_hosts_are_skipped():
    fleets = [fleet_of_instances("demo", 4)]
    fleets[0]["instances"][1]["status"] = "terminated"
    facts = {
        "demo-0": cpu_fact(health="failure"),
        "demo-1": cpu_fact(),
        "demo-3": cpu_fact(health="warning"),
    }
    plan = place(task(), fleets, facts)
    assert plan["jobs"][0]["host"] == "demo-3"  # warning is still schedulable
    exc = no_capacity(task(nodes=2), fleets, facts)
    message = str(exc)
    assert "demo-0: health failure" in message
    assert "demo-1: status terminated" in message
    assert "demo-2: no host facts (apply the fleet first)" in message
    assert "pending" in InstanceStatus.unavailable_statuses()


def test_no_capacity_message_names_every_fleet_and_host():
    fleets = [fleet_of_instances("demo", 3), fleet_of_instances("x", 1, placement="any")]
    facts = {"demo-0": cpu_fact(cpus=4), "demo-1": cpu_fact(cpus=8), "demo-2": cpu_fact(cpus=2),
             "x-0": cpu_fact()}
    exc = no_capacity(task(nodes=3, resources={"cpu": "4.."}), fleets, facts)
    assert str(exc) == (
        "no capacity for task train: needs 3 nodes; fleet demo: 2 of 3 hosts match "
        "(demo-2: cpu 2 < 4); fleet x: placement is any; multi-node tasks need placement: "
        "cluster. To run it, apply a fleet with enough hosts, free busy hosts, or relax "
        "resources."
    )
    assert exc.reasons == [
        "fleet demo: 2 of 3 hosts match",
        "demo-2: cpu 2 < 4",
        "fleet x: placement is any; multi-node tasks need placement: cluster",
    ]


def test_no_capacity_caps_the_host_list():
    facts = {"big-%d" % i: cpu_fact(cpus=2) for i in range(9)}
    exc = no_capacity(task(resources={"cpu": 4}), [fleet_of_instances("big", 9)], facts)
    assert "and 4 more" in str(exc)
    assert "big-8" not in str(exc)
    assert "big-8: cpu 2 < 4" in exc.reasons


def test_no_fleets_at_all():
    exc = no_capacity(task(), [], {})
    assert "no fleets (apply a fleet first)" in str(exc)


def test_backends_regions_prices_and_spot_policy_filter_hosts():
    ssh = [fleet_of_instances("ssh", 1)]
    facts = {"ssh-0": cpu_fact(), "cloud-0": cpu_fact()}
    assert place(task(backends=["remote"]), ssh, facts)["fleet"] == "ssh"
    exc = no_capacity(task(backends=["aws"]), ssh, facts)
    assert "ssh-0: backend ssh not in [aws]" in str(exc)
    cloud = [fleet_of_instances("cloud", 1, backend="aws", region="us-east-1",
                                instance_type="g5.xlarge", price=1.5, spot=True)]
    exc = no_capacity(task(spot_policy="auto", regions=["eu-west-1"]), cloud, facts)
    assert "cloud-0: region us-east-1 not in [eu-west-1]" in str(exc)
    exc = no_capacity(task(spot_policy="auto", instance_types=["p5.48xlarge"]), cloud, facts)
    assert "instance type g5.xlarge not in [p5.48xlarge]" in str(exc)
    exc = no_capacity(task(spot_policy="auto", max_price=1.0), cloud, facts)
    assert "cloud-0: price $1.5 > max_price $1" in str(exc)
    exc = no_capacity(task(), cloud, facts)
    assert "cloud-0: spot instance; spot_policy is on-demand" in str(exc)
    plan = place(task(spot_policy="spot", regions=["US-EAST-1"], max_price=2), cloud, facts)
    assert plan["jobs"][0]["spot"] is True and plan["jobs"][0]["price"] == 1.5
    exc = no_capacity(task(spot_policy="spot"), ssh, facts)
    assert "ssh-0: on-demand instance; spot_policy is spot" in str(exc)


def test_default_image_means_x86_custom_image_takes_any_arch():
    fleets = [fleet_of_instances("arm", 1)]
    facts = {"arm-0": cpu_fact(arch="aarch64")}
    exc = no_capacity(task(), fleets, facts)
    assert "arm-0: cpu arch arm, not x86" in str(exc)
    plan = place(task(image="ubuntu:24.04"), fleets, facts)
    assert plan["jobs"][0]["arch"] == "arm"
    assert plan["jobs"][0]["resources"]["cpu"]["arch"] is None


def test_internal_ip_prefers_the_instance_record():
    fleets = [fleet_of_instances("demo", 1, internal_ip="172.16.0.9")]
    plan = place(task(), fleets, {"demo-0": cpu_fact(ip="10.9.9.9")})
    assert plan["jobs"][0]["internal_ip"] == "172.16.0.9"


def test_incomplete_facts_of_one_host_do_not_stop_the_others():
    facts = {"demo-0": {"cpus": 8}, "demo-1": cpu_fact()}
    plan = place(task(), [fleet_of_instances("demo", 2)], facts)
    assert plan["jobs"][0]["host"] == "demo-1"
    exc = no_capacity(task(nodes=2), [fleet_of_instances("demo", 2)], facts)
    assert "demo-0: host facts of demo-0 lack memory.mib" in str(exc)


def test_bad_input_raises_placement_error():
    with pytest.raises(PlacementError, match="task config must be a mapping"):
        place(None, [], {})
    with pytest.raises(PlacementError, match=r"fleets\[0\] has no name"):
        place(task(), [{"instances": []}], {})
    with pytest.raises(PlacementError, match="price must be a number"):
        place(task(), [fleet_of_instances("demo", 1, price="cheap")], {"demo-0": cpu_fact()})


def test_place_does_not_change_its_input():
    config = task(nodes=2)
    fleets = [fleet_of_instances("demo", 2)]
    facts = {"demo-0": cpu_fact(), "demo-1": cpu_fact()}
    before = copy.deepcopy((config, fleets, facts))
    place(config, fleets, facts)
    assert (config, fleets, facts) == before


def test_availability_zones_narrow_hosts_to_their_zone():
    from ansible_collections.gpufleet.cluster.plugins.module_utils.tasks.placement import (
        _profile_reason,
    )

    config = {"availability_zones": ["us-east-1b"], "spot_policy": "auto"}
    assert _profile_reason({"status": "idle", "zone": "us-east-1b"}, config) is None
    assert _profile_reason({"status": "idle", "zone": "us-east-1a"}, config) == \
        "zone us-east-1a not in [us-east-1b]"
    assert _profile_reason({"status": "idle"}, config) == "zone none not in [us-east-1b]"
