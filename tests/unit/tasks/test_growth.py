# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Instances made on demand (tasks.growth): what exists first, then the fewest new instances
of a backend fleet that may grow, never past nodes.max, never with creation_policy: reuse."""

from __future__ import annotations

import pytest
from ansible_collections.gpufleet.cluster.plugins.module_utils.fleets.apply import at_least
from ansible_collections.gpufleet.cluster.plugins.module_utils.tasks import growth, placement

from .test_runs import cpu_fact, task


@pytest.fixture(autouse=True)
def machine(monkeypatch):
    """A new local node has this machine's resources: here, a fixed 8-CPU one."""
    monkeypatch.setattr(growth, "local_machine_fact", lambda blocks=1: cpu_fact(None))


def backend_fleet(name="el", count=0, nodes=None, file="/f/el.dstack.yml", backends=("local",)):
    instances = [{"name": "%s-%d" % (name, n), "num": n, "fleet": name, "backend": "local",
                  "region": "local", "price": 0.0, "spot": False, "status": "idle",
                  "hostname": "172.30.0.%d" % (n + 2)} for n in range(count)]
    return {"name": name, "fleet_type": "backend", "placement": "cluster",
            "nodes": nodes or {"min": 0, "target": 0, "max": 2}, "backends": list(backends),
            "blocks": 1, "file": file, "instances": instances}


def facts_of(fleet):
    return dict((i["name"], cpu_fact("10.0.0.%d" % (i["num"] + 2))) for i in fleet["instances"])


def test_what_exists_is_used_first():
    fleet = backend_fleet(count=2)
    plan = growth.place(task(nodes=2), [fleet], facts_of(fleet))
    assert "create" not in plan


def test_a_template_fleet_grows_by_what_the_run_needs():
    fleet = backend_fleet(count=0)
    plan = growth.place(task(nodes=2), [fleet], {})
    assert plan["create"] == {"fleet": "el", "file": "/f/el.dstack.yml", "instances": 2,
                              "at_least": 2, "price": 0.0, "backend": "local",
                              "region": "local",
                              # Neither file sets idle_duration: dstack's 5m for run-made ones.
                              "made_for": {"run": "train", "idle_duration": 300}}
    assert [j["host"] for j in growth.new_hosts(plan)] == ["new:el-0", "new:el-1"]


def test_a_fleet_with_one_busy_instance_grows_by_one_like_it():
    fleet = backend_fleet(count=1)
    facts = facts_of(fleet)
    busy = {"el-0": {"blocks": 1, "gpu_ids": []}}
    plan = growth.place(task(nodes=1), [fleet], facts, busy=busy)
    assert plan["create"]["instances"] == 1 and plan["create"]["at_least"] == 2
    # The new instance looks like the existing one (its measured facts).
    assert plan["jobs"][0]["cpus"] == facts["el-0"]["cpus"]


def test_past_nodes_max_the_run_is_refused_saying_so():
    fleet = backend_fleet(count=0)
    with pytest.raises(placement.NoHostFits, match=r"fleet el may grow by 2 instances "
                                                   r"\(nodes.max\), not enough"):
        growth.place(task(nodes=3), [fleet], {})
    full = backend_fleet(count=2)
    busy = dict((h, {"blocks": 1, "gpu_ids": []}) for h in ("el-0", "el-1"))
    with pytest.raises(placement.NoHostFits, match="fleet el has nodes.max = 2 instances"):
        growth.place(task(), [full], facts_of(full), busy)


def test_creation_policy_reuse_never_grows():
    with pytest.raises(placement.NoHostFits) as info:
        growth.place(task(creation_policy="reuse"), [backend_fleet()], {})
    assert "Growing" not in str(info.value)


def test_an_ssh_fleet_or_an_unknown_file_does_not_grow():
    ssh = dict(backend_fleet(), fleet_type="ssh")
    with pytest.raises(placement.NoHostFits):
        growth.place(task(), [ssh], {})
    with pytest.raises(placement.NoHostFits, match="its file is not known"):
        growth.place(task(), [backend_fleet(file=None)], {})


def test_a_cloud_template_fleet_takes_its_cheapest_offer():
    fleet = backend_fleet(backends=("aws",))
    offer = {"backend": "aws", "region": "us-east-1", "price": 0.5,
             "resources": {"cpus": 8, "memory": {"mib": 32768},
                           "disk": {"available_mib": 102400}, "arch": "x86_64",
                           "gpu": {"vendor": None, "name": None, "memory_mib": 0, "count": 0}}}
    plan = growth.place(task(), [fleet], {}, offer_for=lambda f: offer)
    assert (plan["create"]["price"], plan["create"]["region"]) == (0.5, "us-east-1")
    with pytest.raises(placement.NoHostFits, match="no offer for a new instance"):
        growth.place(task(), [fleet], {}, offer_for=lambda f: None)


def test_at_least_raises_the_target_within_max():
    config = {"fleet_type": "backend", "nodes": {"min": 0, "target": 0, "max": 2}}
    assert at_least(config, 2)["nodes"]["target"] == 2
    assert at_least(config, 5)["nodes"]["target"] == 2
    assert at_least(dict(config, nodes={"min": 3, "target": 3, "max": None}), 1)["nodes"][
        "target"] == 3
    ssh = {"fleet_type": "ssh"}
    assert at_least(ssh, 4) is ssh


def test_a_run_no_fleet_can_ever_hold_is_told_so_rather_than_queued():
    fleet = backend_fleet(count=1, nodes={"min": 0, "target": 1, "max": 2})
    assert growth.never_fits(task(nodes=2), [fleet]) is None
    assert growth.never_fits(task(nodes=3), [fleet]) == (
        "needs 3 nodes, and no fleet can ever have that many (el: at most 2); waiting for "
        "capacity cannot help: use a fleet with more nodes (nodes.max)")
    # reuse: only the instances there are; no max: any size may come.
    assert "el: at most 1" in growth.never_fits(task(nodes=2, creation_policy="reuse"), [fleet])
    unlimited = backend_fleet(nodes={"min": 0, "target": 0, "max": None})
    assert growth.never_fits(task(nodes=9), [unlimited]) is None


def test_a_run_too_big_for_every_fleet_fails_even_with_retry(monkeypatch):
    from ansible_collections.gpufleet.cluster.plugins.module_utils.tasks import runs, surveys

    fleet = backend_fleet(count=0)
    runner = runs.Runner(task(nodes=3, retry={"on_events": ["no-capacity"], "duration": "1h"}),
                         [fleet], environ={}, create=True)
    monkeypatch.setattr(surveys, "survey_with_queues", lambda nodes, **_: ({}, {}, {}, {}))
    result = runner.run(wait=False)
    assert (result["status"], result["reason"]) == ("failed", "failed_to_start_due_to_no_capacity")
    assert "no fleet can ever have that many (el: at most 2)" in result["message"]
