# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The runner's branch for a service's replicas (services.replicas.runnable): each replica a
one-node job of its own, its port published on its host's internal address, its container named
as dstack names a replica's job; placement packs them on any fleet; a replica that exits fails
the run; the host reports the published port."""

from __future__ import annotations

import json
import shlex

import pytest
from ansible_collections.gpufleet.cluster.plugins.module_utils.services import replicas
from ansible_collections.gpufleet.cluster.plugins.module_utils.tasks import lifecycle as lc
from ansible_collections.gpufleet.cluster.plugins.module_utils.tasks import listing
from ansible_collections.gpufleet.cluster.plugins.module_utils.tasks import rankplan
from ansible_collections.gpufleet.cluster.plugins.module_utils.tasks.container import (
    SERVICE_LABEL,
    job_container,
)
from ansible_collections.gpufleet.cluster.plugins.module_utils.tasks.hostside import nodeside
from ansible_collections.gpufleet.cluster.plugins.module_utils.tasks.placement import (
    NoHostFits,
    place,
)

from ..configs import task
from .fakes import (RUN, cpu_fact, fleet_of_instances, fleet_with_facts, inspect_entry,
                    placed_job, placement)

PROXY = replicas.proxy_of("svc", "demo-0", "192.0.2.10", None)


def service(count=2, port=8000, **fields):
    """A normalized service config, made by hand as the contract gives it (the grammar is the
    spec's): a task's fields plus the service's."""
    config = dict(task(name="svc", commands=["python3 -m http.server 8000"], **fields),
                  type="service", port=port, replicas={"min": count, "max": count},
                  groups=None, scaling=None, model=None, auth=True, https=None, gateway=None,
                  strip_prefix=True, rate_limits=[], probes=[])
    return config


def runnable(count=2, **fields):
    return replicas.runnable(service(count, **fields), PROXY)


# ---------------------------------------------------------------------------------------------
# services.replicas.runnable


def test_a_service_becomes_one_job_per_replica_with_its_service_key():
    config = runnable(3)
    assert (config["type"], config["run_type"], config["nodes"], config["groups"]) == (
        "task", "service", 3, None)
    assert config["service"] == dict(PROXY, port=8000, replicas=3, respawn=False, scaling=None)
    retried = replicas.runnable(dict(service(2), retry={"on_events": ["error"], "duration": 60}))
    assert retried["service"]["respawn"] is True   # a failed replica is made again alone
    assert config["service"]["url"] == "http://192.0.2.10:3000/proxy/services/main/svc/"
    assert config["service"]["model_url"] is None


def test_an_autoscaled_service_starts_at_its_least_and_its_key_carries_the_rules():
    rules = {"metric": "rps", "target": 5.0, "window": None, "scale_up_delay": 300,
             "scale_down_delay": 600}
    config = dict(service(1), replicas={"min": 1, "max": 4}, scaling=rules)
    made = replicas.runnable(config, PROXY)
    assert made["nodes"] == 1
    # dstack's window of 60 s when none is given; the range with it.
    assert made["service"]["scaling"] == dict(rules, window=60, min=1, max=4)
    assert replicas.runnable(config, PROXY, count=3)["nodes"] == 3
    assert [replicas.clipped(config, n) for n in (0, 2, 9)] == [1, 2, 4]
    assert replicas.replica_range(config) == (1, 4)
    assert replicas.scaling_of(service(2)) is None   # a fixed count: nothing to follow


def test_a_task_is_as_it_is_and_a_service_without_replicas_is_refused():
    plain = task()
    assert replicas.runnable(plain) is plain
    with pytest.raises(replicas.ServiceError, match="at least one replica"):
        replicas.runnable(service(0))


def test_a_model_gives_the_model_url_and_its_name():
    proxy = replicas.proxy_of("svc", "demo-0", "192.0.2.10",
                              {"type": "chat", "name": "tiny", "format": "openai"})
    assert proxy["model_url"] == "http://192.0.2.10:3000/proxy/models/main/"
    assert proxy["model"] == "tiny"
    assert replicas.proxy_of("svc", "h", "fd00::1", "tiny")["url"] == (
        "http://[fd00::1]:3000/proxy/services/main/svc/")


# ---------------------------------------------------------------------------------------------
# tasks.rankplan / tasks.container


def replica_jobs(whole_host=False):
    jobs = [placed_job(0, whole_host=whole_host), placed_job(1, whole_host=whole_host)]
    return rankplan.build_jobs(runnable(2), placement(*jobs), dict(RUN, name="svc"),
                               environ={})


def env_of(spec):
    """The job's env.sh as a mapping (one ``export NAME=value`` line per variable)."""
    words = shlex.split(spec["files"]["env.sh"]["text"])
    return dict(word.split("=", 1) for word in words if word != "export")


def test_each_replica_is_its_own_one_node_run_without_ssh_between_them():
    specs = replica_jobs()   # no SSH key given: a service's replicas need none
    for num, spec in enumerate(specs):
        env = env_of(spec)
        own = "10.1.0.%d" % (num + 2)
        assert (env["DSTACK_NODES_NUM"], env["DSTACK_NODE_RANK"]) == ("1", "0")
        assert env["DSTACK_MASTER_NODE_IP"] == own and env["DSTACK_NODES_IPS"] == own
        assert env["GPUFLEET_MULTINODE"] == "0" and env["GPUFLEET_SSHD"] == "image"
        assert spec["files"]["hostfile"]["text"] == ""
        assert "ssh/config" not in spec["files"]
        assert spec["job_num"] == num and spec["replica"] == num


def test_a_replicas_container_is_named_as_dstack_names_its_job_and_publishes_the_port():
    specs = replica_jobs()
    assert [s["container"] for s in specs] == ["svc-0-0", "svc-0-1"]
    args = specs[1]["docker_args"]
    assert args[args.index("--name") + 1] == "svc-0-1"
    assert args[args.index("-p") + 1] == "10.1.0.3::8000"
    assert args[args.index("--network") + 1] == "bridge"
    labels = specs[1]["labels"]
    assert labels["gpufleet.replica"] == "1" and labels["gpufleet.job"] == "1"
    assert json.loads(labels[SERVICE_LABEL]) == {
        "port": 8000, "proxy_host": "demo-0", "proxy_address": "192.0.2.10",
        "proxy_port": 3000, "url": "http://192.0.2.10:3000/proxy/services/main/svc/",
        "model_url": None, "model": None, "respawn": False}
    assert json.loads(labels["gpufleet.run-spec"])["type"] == "service"
    assert job_container(runnable(2), "svc", 1) == "svc-0-1"
    assert job_container(task(), "train", 1) == "train-1-0"


def test_a_replica_on_its_hosts_network_publishes_nothing():
    args = replica_jobs(whole_host=True)[0]["docker_args"]
    assert "-p" not in args and args[args.index("--network") + 1] == "host"


def test_a_tasks_jobs_are_unchanged():
    jobs = [placed_job(0, whole_host=False), placed_job(1, whole_host=False)]
    specs = rankplan.build_jobs(task(nodes=2), placement(*jobs), dict(RUN), environ={},
                                ssh_key={"private": "k", "public": "p"})
    assert [s["container"] for s in specs] == ["train-0-0", "train-1-0"]
    assert all("-p" not in s["docker_args"] and SERVICE_LABEL not in s["labels"] for s in specs)
    assert env_of(specs[1])["DSTACK_NODES_NUM"] == "2"


# ---------------------------------------------------------------------------------------------
# tasks.placement


def test_replicas_go_to_any_fleet_and_share_a_host_that_holds_them():
    four = {"requested": 4, "total": 4}
    facts = {"any-0": cpu_fact(cpus=8, blocks=four),
             "any-1": cpu_fact(cpus=8, blocks=four, ip="10.1.0.3")}
    fleets = [fleet_of_instances("any", 2, placement="any")]
    plan = place(runnable(3, resources={"cpu": 2}), fleets, facts)
    assert plan["fleet"] == "any"
    assert [j["host"] for j in plan["jobs"]] == ["any-0", "any-0", "any-0"]
    assert all(j["blocks"] == 1 and not j["whole_host"] for j in plan["jobs"])
    # what a replica took counts for the next one: the fourth block, then the other host
    busy = {"any-0": {"blocks": 2, "gpu_ids": []}}
    plan = place(runnable(3, resources={"cpu": 2}), fleets, facts, busy)
    assert [j["host"] for j in plan["jobs"]] == ["any-0", "any-0", "any-1"]


def test_replicas_that_do_not_all_fit_say_so():
    facts = {"any-0": cpu_fact(cpus=8)}
    with pytest.raises(NoHostFits) as caught:
        place(runnable(2, resources={"cpu": 8}), [fleet_of_instances("any", 1, placement="any")],
              facts)
    assert "they do not hold all 2 replicas" in str(caught.value)


# ---------------------------------------------------------------------------------------------
# tasks.lifecycle


def test_a_replica_whose_command_ends_fails_the_service_unless_retry_respawns_it():
    done = (lc.JobStatus.DONE.value, None, 0)
    running = (lc.JobStatus.RUNNING.value, None, None)
    decision = lc.decide({"service": True}, {0: done, 1: running})
    assert decision.stop == {1: lc.TERMINATED_BY_SERVER}
    decision = lc.decide({"service": True}, {0: done, 1: (lc.JobStatus.TERMINATED.value,
                                                          lc.TERMINATED_BY_SERVER, None)})
    assert decision.final and decision.status == lc.RunStatus.FAILED
    assert decision.failed_job == (0, lc.CONTAINER_EXITED_WITH_ERROR, 0)
    retry = {"on_events": ["error", "interruption"], "duration": None}
    decision = lc.decide({"service": True, "retry": retry}, {0: done, 1: running})
    assert decision.respawn == [0] and not decision.resubmit and not decision.final
    # A replica whose host is lost: the whole service is resubmitted on other hosts.
    lost = (lc.JobStatus.FAILED.value, lc.INTERRUPTED_BY_NO_CAPACITY, None)
    decision = lc.decide({"service": True, "retry": retry}, {0: lost, 1: running})
    assert decision.respawn == [] and decision.stop == {1: lc.TERMINATED_BY_SERVER}
    decision = lc.decide({"service": True, "retry": retry}, {0: lost})
    assert decision.resubmit and not decision.final
    # a task's job that ends with 0 is done
    assert lc.decide({}, {0: done}).status == lc.RunStatus.DONE


# ---------------------------------------------------------------------------------------------
# tasks.hostside.nodeside: the published port


def test_the_hosts_status_reports_the_published_host_port(docker, run_root):
    entry = inspect_entry("svc-0-1", run="svc", job=1, network="172.17.0.5")
    entry["NetworkSettings"]["Ports"] = {
        "8000/tcp": [{"HostIp": "10.1.0.3", "HostPort": "49153"}], "22/tcp": None}
    docker.on(["ps"], stdout="aaa111\n")
    docker.on(["inspect"], stdout=json.dumps([entry]))
    (found,) = nodeside.op_status({"run": "svc"})["containers"]
    assert found["published"] == {"8000/tcp": 49153}
    docker.rules[:] = []
    docker.on(["ps"], stdout="aaa111\n")
    docker.on(["inspect"], stdout=json.dumps([inspect_entry("t-0-0", run="t", job=0)]))
    (found,) = nodeside.op_status({"run": "t"})["containers"]
    assert "published" not in found


# ---------------------------------------------------------------------------------------------
# tasks.listing: what ps reads back of a service


def test_ps_reads_where_a_service_moved_from_the_newest_note_beside_its_replicas():
    specs = replica_jobs()
    found = {}
    notes = [{"proxy_host": "demo-1", "proxy_address": "192.0.2.11", "moved_at": 10.0,
              "url": "http://192.0.2.11:3000/proxy/services/main/svc/", "model_url": None,
              "moved_from": "demo-0"},
             {"proxy_host": "demo-2", "proxy_address": "192.0.2.12", "moved_at": 20.0,
              "url": "http://192.0.2.12:3000/proxy/services/main/svc/", "model_url": None,
              "moved_from": "demo-1"}]
    for num, spec in enumerate(specs):
        found.setdefault(spec["host"], []).append({
            "name": spec["container"], "labels": spec["labels"], "state": "running",
            "exit_code": 0, "oom_killed": False, "started_at": None, "finished_at": None,
            "error": None, "published": {"8000/tcp": 49153 + num},
            "files": {"running": "1", "reason": None, "exit_code": None,
                      "proxy": notes[num]}})
    (record,) = listing.run_records(found)
    service = record["service"]
    assert (service["proxy_host"], service["url"], service["moved_from"]) == (
        "demo-2", "http://192.0.2.12:3000/proxy/services/main/svc/", "demo-1")
    assert service["port"] == 8000 and service["replicas"] == 2
    # a replica without a note reads its labels; a gateway's service keeps its gateway
    found["demo-1"][0]["files"].pop("proxy")
    labels = found["demo-0"][0]["labels"]
    on_gateway = dict(json.loads(labels["gpufleet.service"]), gateway="gw")
    read = listing.service_of(dict(labels, **{"gpufleet.service": json.dumps(on_gateway)}), 2,
                              notes[0])
    assert (read["gateway"], read["url"]) == ("gw", notes[0]["url"])
    assert listing.run_records(found)[0]["service"]["proxy_host"] == "demo-1"


def test_ps_reads_the_service_and_its_replicas_from_the_labels():
    specs = replica_jobs()
    found = {}
    for num, spec in enumerate(specs):
        found.setdefault(spec["host"], []).append({
            "name": spec["container"], "labels": spec["labels"], "state": "running",
            "exit_code": 0, "oom_killed": False, "started_at": None, "finished_at": None,
            "error": None, "published": {"8000/tcp": 49153 + num},
            "files": {"running": "1", "reason": None, "exit_code": None}})
    (record,) = listing.run_records(found)
    assert record["type"] == "service" and record["status"] == "running"
    assert record["service"] == {
        "url": "http://192.0.2.10:3000/proxy/services/main/svc/", "model_url": None,
        "proxy_host": "demo-0", "proxy_address": "192.0.2.10", "port": 8000, "model": None,
        "replicas": 2, "respawn": False, "gateway": None, "https": False, "moved_from": None,
        "groups": None}
    assert [(j["replica"], j["container"], j["published"]) for j in record["jobs"]] == [
        (0, "svc-0-0", {"8000/tcp": 49153}), (1, "svc-0-1", {"8000/tcp": 49154})]
    # a replica whose command ended: the service failed, not done
    found["demo-1"][0].update(state="exited", files={"running": "1", "reason": None,
                                                     "exit_code": "0"})
    (record,) = listing.run_records(found)
    assert record["status"] == "terminating"   # its other replica is told to stop
    # a task's record has no service
    (plain,) = listing.run_records({"h": [dict(found["demo-0"][0], labels={
        k: v for k, v in specs[0]["labels"].items() if k != SERVICE_LABEL})]})
    assert plain["service"] is None


def test_a_scaled_service_is_read_with_its_newest_count_and_without_replicas_taken_away():
    two = replica_jobs()
    three = rankplan.build_jobs(runnable(3), placement(placed_job(0), placed_job(1),
                                                       dict(placed_job(1), job_num=2)),
                                dict(RUN, name="svc"), environ={})

    def box(spec, state="running", reason=None):
        return {"name": spec["container"], "labels": spec["labels"], "state": state,
                "exit_code": 0, "oom_killed": False, "started_at": None, "finished_at": None,
                "error": None, "published": {"8000/tcp": 49153 + spec["job_num"]},
                "files": {"running": "1", "reason": reason, "exit_code": None}}

    # Scaled up from two to three: replica 2's labels say three, and where each one is.
    found = {"demo-0": [box(two[0])], "demo-1": [box(two[1]), box(three[2])]}
    (record,) = listing.run_records(found)
    assert record["status"] == "running" and record["nodes"] == 3
    assert record["service"]["replicas"] == 3
    assert [j["job_num"] for j in record["jobs"]] == [0, 1, 2]
    # Scaled down again: replica 2's folder says scaled_down; the service runs two.
    found["demo-1"][1] = box(three[2], state="gone", reason=lc.SCALED_DOWN)
    (record,) = listing.run_records(found)
    assert record["status"] == "running" and record["nodes"] == 2
    assert [j["job_num"] for j in record["jobs"]] == [0, 1]
    # Replicas started when there were three, scaled down to two: their hosts noted the
    # count (booking's recount), and the host that held replica 2 may be gone altogether.
    found = {"demo-0": [box(three[0])], "demo-1": [box(three[1])]}
    for entry in found["demo-0"] + found["demo-1"]:
        entry["files"]["replicas"] = "2"
    (record,) = listing.run_records(found, instances={"demo-0": {}, "demo-1": {}})
    assert record["status"] == "running" and record["nodes"] == 2
    # Scaled up again, replica 2 placed on another host than the one it was taken away from:
    # the live one counts, not its number's tombstone.
    found["demo-2"] = [box(three[2], state="gone", reason=lc.SCALED_DOWN)]
    found["demo-0"].append(box(dict(three[2], labels=dict(three[2]["labels"]))))
    (record,) = listing.run_records(found)
    assert record["status"] == "running" and record["nodes"] == 3
    assert [(j["job_num"], j["status"]) for j in record["jobs"]] == [
        (0, "running"), (1, "running"), (2, "running")]
    # tasks.lifecycle leaves it out the same way for every look (the queue pass, the watch).
    running = (lc.JobStatus.RUNNING.value, None, None)
    retired = (lc.JobStatus.TERMINATED.value, lc.SCALED_DOWN, None)
    decision = lc.decide({"service": True}, {0: running, 1: running, 2: retired})
    assert decision.status == "running" and not decision.stop and not decision.final


# ---------------------------------------------------------------------------------------------
# tasks.runs.Runner.place_beside: more replicas for a running service


def test_more_replicas_are_placed_beside_the_running_ones_and_numbered_after_them(fake_hosts):
    fleet = fleet_with_facts(count=3)
    runner, cluster = fake_hosts(runnable(3), [fleet])
    # Replica 0 runs on gpus-1 (its claim holds the whole host there).
    cluster.nodes["gpus-1"].claims.append({
        "run": "svc", "run_id": "r1", "submission": 0, "jobs": [0], "blocks": 1,
        "total_blocks": 1, "gpu_ids": [], "whole": True, "expires": cluster.now + 900})
    kept = [{"job_num": 0, "host": "gpus-1"}]
    more = runner.place_beside(kept)
    assert [(j["job_num"], j["host"]) for j in more] == [(1, "gpus-0"), (2, "gpus-2")]
    assert not cluster.ops("claim") and not cluster.ops("start")   # a plan: nothing taken
    assert runner.place_beside([{"job_num": n, "host": "x"} for n in range(3)]) == []
    # No room left for them: placement says why, as for a submission.
    cluster.nodes["gpus-2"].claims.append(dict(cluster.nodes["gpus-1"].claims[0], run="other",
                                               run_id="o1"))
    with pytest.raises(NoHostFits, match="no capacity for task svc"):
        runner.place_beside(kept)


def test_a_capped_owners_use_follows_the_service_as_it_scales(fake_hosts):
    fleet = fleet_with_facts(count=3)
    runner, cluster = fake_hosts(runnable(3), [fleet])
    for node in cluster.nodes.values():
        node.limits = {"*": {"nodes": 4}}
    runner.run_id = "r1"
    kept = [{"job_num": 0, "host": "gpus-1"}]
    more = runner.place_beside(kept)
    (queue_node,) = [n for n in cluster.nodes.values() if n.admitted]
    # The whole service admitted: the hosts its three replicas are on.
    hosts = set(j["host"] for j in kept + more)
    assert len(more) == 2 and queue_node.admitted["svc"]["nodes"] == len(hosts) > 1
    # Scaled down to one replica: its owner's use counts one node again.
    runner.readmit({"fleet": fleet["name"], "jobs": kept})
    assert queue_node.admitted["svc"]["nodes"] == 1
    assert queue_node.admitted["svc"]["run_id"] == "r1"


def test_a_services_version_does_not_change_with_its_replica_count():
    from ansible_collections.gpufleet.cluster.plugins.module_utils.tasks.run_preparation import (
        config_digest,
    )

    two, three = runnable(2), runnable(3)
    assert config_digest(two, "img") == config_digest(three, "img")
    assert config_digest(two, "img") != config_digest(runnable(2, env={"V": "2"}), "img")
    assert config_digest(two, "img") != config_digest(two, "img:2")
    # Nor with its autoscaling: rules, a range.
    rules = {"metric": "rps", "target": 5.0, "window": 30, "scale_up_delay": 0,
             "scale_down_delay": 0}
    scaled = replicas.runnable(dict(service(2), replicas={"min": 1, "max": 4}, scaling=rules),
                               PROXY, count=2)
    assert config_digest(scaled, "img") == config_digest(two, "img")
    # And a replica started before the service key carried scaling has the digest it had.
    before = dict(two, service=dict((k, v) for k, v in two["service"].items() if k != "scaling"))
    assert config_digest(before, "img") == config_digest(two, "img")
    # Nor with where it is published (a lost proxy host replaced).
    moved = dict(two, service=dict(two["service"], proxy_host="demo-1", proxy_address="10.0.0.9",
                                   proxy_port=8080,
                                   url="http://10.0.0.9:8080/proxy/services/main/svc/"))
    assert config_digest(moved, "img") == config_digest(two, "img")
    assert config_digest(dict(two, service=dict(two["service"], port=9000)), "img") != (
        config_digest(two, "img"))


# ---------------------------------------------------------------------------------------------
# replica groups


def grouped(**fields):
    """A service with two replica groups (prefill: 1 replica, decode: 2), each its commands and
    resources, normalized as spec/service.py gives it."""
    config = dict(service(1, **fields), replicas=None, commands=[], groups=[
        {"name": "prefill", "replicas": {"min": 1, "max": 1}, "scaling": None,
         "resources": {"cpu": {"min": 2, "max": None}}, "commands": ["serve --prefill"]},
        {"name": "decode", "replicas": {"min": 2, "max": 2}, "scaling": None,
         "resources": {"cpu": {"min": 1, "max": None}}, "commands": ["serve --decode"]}])
    return config


def test_replica_groups_become_the_runners_node_groups_numbered_across_them():
    config = replicas.runnable(grouped(), PROXY)
    assert (config["nodes"], replicas.replica_count(grouped())) == (3, 3)
    assert replicas.replica_range(grouped()) == (3, 3)
    assert [(g["name"], g["nodes"], g["commands"]) for g in config["groups"]] == [
        ("prefill", 1, ["serve --prefill"]), ("decode", 2, ["serve --decode"])]
    assert config["service"]["groups"] == [{"name": "prefill", "replicas": 1},
                                           {"name": "decode", "replicas": 2}]
    assert config["service"]["scaling"] is None
    jobs = [placed_job(n, group=g) for n, g in enumerate(("prefill", "decode", "decode"))]
    specs = rankplan.build_jobs(config, placement(*jobs), dict(RUN, name="svc"), environ={})
    # each replica runs its group's commands, as a one-node run of its own
    assert ["serve --%s" % g in s["files"]["command.sh"]["text"]
            for s, g in zip(specs, ("prefill", "decode", "decode"))] == [True] * 3
    assert [env_of(s)["DSTACK_NODES_NUM"] for s in specs] == ["1", "1", "1"]
    assert [s["labels"]["gpufleet.replica-group"] for s in specs] == [
        "prefill", "decode", "decode"]
    assert [s["container"] for s in specs] == ["svc-0-0", "svc-0-1", "svc-0-2"]
    assert json.loads(specs[0]["labels"][SERVICE_LABEL])["groups"] == config["service"]["groups"]
    # a service without groups keeps the label it had
    assert "groups" not in json.loads(runnable_specs()[0]["labels"][SERVICE_LABEL])
    assert "gpufleet.replica-group" not in runnable_specs()[0]["labels"]


def runnable_specs():
    return replica_jobs()


def test_ps_shows_replica_groups_as_dstack_does():
    from ansible_collections.gpufleet.cluster.plugins.module_utils.render import run_table

    config = replicas.runnable(grouped(), PROXY)
    jobs = [placed_job(n, group=g) for n, g in enumerate(("prefill", "decode", "decode"))]
    specs = rankplan.build_jobs(config, placement(*jobs), dict(RUN, name="svc"), environ={})
    found = {}
    for num, spec in enumerate(specs):
        found.setdefault(spec["host"], []).append({
            "name": spec["container"], "labels": spec["labels"], "state": "running",
            "exit_code": 0, "oom_killed": False, "started_at": None, "finished_at": None,
            "error": None, "address": "localhost",
            "files": {"running": "1", "reason": None, "exit_code": None}})
    (record,) = listing.run_records(found)
    assert [j["group"] for j in record["jobs"]] == ["prefill", "decode", "decode"]
    assert record["service"]["groups"] == config["service"]["groups"]
    assert record["service"]["replicas"] == 3
    lines = run_table.run_table([record])
    names = [line[:len("   group=0 replica=0")].rstrip() for line in lines[2:]]
    assert names == ["   group=0 replica=0", "   group=1 replica=1", "           replica=2"]
