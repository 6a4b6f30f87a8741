# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The task runner over fake hosts: the supervisor's Watch, the Runner's submissions and
retries, run records and busy hosts read back from containers, and the runner's output lines.

The fake hosts answer the node-side operations (tasks.hostside.nodeside) from in-memory container
lists, and a fake clock moves only when the code under test sleeps; at each sleep every container
takes one step of its program (created -> running -> exited with its code).
"""

from __future__ import annotations

import json
import threading

import pytest
from ansible_collections.gpufleet.cluster.plugins.module_utils.tasks import (
    actions,
    listing,
    runs,
    surveys,
    supervisor,
)
from ansible_collections.gpufleet.cluster.plugins.module_utils.tasks import claiming
from ansible_collections.gpufleet.cluster.plugins.module_utils.tasks import run_preparation
from ansible_collections.gpufleet.cluster.plugins.module_utils.tasks import lifecycle as lc
from ansible_collections.gpufleet.cluster.plugins.module_utils.tasks.errors import RunError

from ..configs import task
from .fakes import (
    JOB_LABEL,
    RUN_LABEL,
    STARTED,
    SUB_LABEL,
    Cluster,
    container,
    fleet_with_facts,
)

# ---------------------------------------------------------------------------------------------
# supervisor.Watch over the fake hosts (fakes.Cluster)
# ---------------------------------------------------------------------------------------------


def job_spec(num, host, run="train", submission=0):
    name = "%s-%d-0" % (run, num)
    return {"run": run, "submission": submission, "job_num": num, "host": host,
            "container": name, "stop_duration": 0,
            "labels": {RUN_LABEL: run, JOB_LABEL: str(num), SUB_LABEL: str(submission)}}


def watch(cluster, hosts, policy=None, **kwargs):
    jobs = [job_spec(num, host) for num, host in enumerate(hosts)]
    nodes = {h: cluster.nodes[h] for h in set(hosts)}
    kwargs.setdefault("poll", 1.0)
    return supervisor.Watch(jobs, nodes, policy or {}, cluster.emit, clock=cluster.clock,
                            sleep=cluster.sleep, **kwargs)


def assert_no_repeats(cluster, jobs):
    for num in jobs:
        seen = [(e["status"], e["reason"], e["exit_code"]) for e in cluster.job_events(num)]
        assert all(a != b for a, b in zip(seen, seen[1:])), (num, seen)
    statuses = [e["status"] for e in cluster.run_events()]
    assert all(a != b for a, b in zip(statuses, statuses[1:])), statuses


# ---------------------------------------------------------------------------------------------
# supervisor.Watch
# ---------------------------------------------------------------------------------------------


def test_workers_first_starts_the_master_after_the_workers_run_and_master_done_ends_done():
    hosts = ["h0", "h1", "h2"]
    cluster = Cluster(hosts, program=lambda job: (1, 0) if job["job_num"] == 0 else (None, None))
    decision = watch(cluster, hosts, {"startup_order": "workers-first",
                                      "stop_criteria": "master-done"}).watch()

    order = [(host, num) for host, num, _snap in cluster.started]
    assert sorted(order[:2]) == [("h1", 1), ("h2", 2)]
    assert order[2] == ("h0", 0)
    # When the master was started, both workers were up with their command started.
    assert cluster.started[2][2] == {1: ("running", STARTED), 2: ("running", STARTED)}

    stops = cluster.ops("stop")
    assert sorted(h for h, _p in stops) == ["h1", "h2"]
    assert all(p["reason"] == lc.DONE_BY_RUNNER for _h, p in stops)
    assert sorted(j["job_num"] for _h, p in stops for j in p["jobs"]) == [1, 2]

    assert decision.final and not decision.resubmit
    assert (decision.status, decision.reason, decision.failed_job) == (lc.RunStatus.DONE,
                                                                       "all_jobs_done", None)
    assert [e["status"] for e in cluster.job_events(0)] == ["provisioning", "running", "done"]
    for worker in (1, 2):
        assert [(e["status"], e["reason"]) for e in cluster.job_events(worker)] == [
            ("provisioning", None), ("running", None), ("done", lc.DONE_BY_RUNNER)]
        assert cluster.job_events(worker)[0]["host"] == "h%d" % worker
    assert [e["status"] for e in cluster.run_events()] == ["running", "terminating", "done"]
    assert_no_repeats(cluster, [0, 1, 2])


def test_master_first_starts_the_workers_once_the_master_runs():
    hosts = ["h0", "h1", "h2"]
    cluster = Cluster(hosts, program=lambda job: (2, 0))
    decision = watch(cluster, hosts, {"startup_order": "master-first"}).watch()
    assert cluster.started[0][:2] == ("h0", 0)
    assert cluster.started[0][2] == {}
    assert all(snap[0] == ("running", STARTED) for _h, _n, snap in cluster.started[1:])
    assert decision.final and decision.status == lc.RunStatus.DONE
    assert cluster.ops("stop") == []  # all-done: nothing to stop


def test_a_failed_job_stops_the_others_and_fails_the_run():
    hosts = ["h0", "h1", "h2"]
    cluster = Cluster(hosts, program=lambda job: (1, 3) if job["job_num"] == 1 else (None, None))
    decision = watch(cluster, hosts, {}).watch()

    stops = cluster.ops("stop")
    assert sorted(h for h, _p in stops) == ["h0", "h2"]
    assert all(p["reason"] == lc.TERMINATED_BY_SERVER for _h, p in stops)
    assert decision.final and not decision.resubmit
    assert decision.status == lc.RunStatus.FAILED
    assert decision.reason == "job_failed"
    assert decision.failed_job == (1, lc.CONTAINER_EXITED_WITH_ERROR, 3)
    assert [(e["status"], e["reason"], e["exit_code"]) for e in cluster.job_events(1)] == [
        ("provisioning", None, None), ("running", None, None),
        ("failed", lc.CONTAINER_EXITED_WITH_ERROR, 3)]
    for other in (0, 2):
        assert cluster.job_events(other)[-1]["status"] == lc.JobStatus.TERMINATED
        assert cluster.job_events(other)[-1]["reason"] == lc.TERMINATED_BY_SERVER
    assert [e["status"] for e in cluster.run_events()] == ["running", "terminating", "failed"]
    assert_no_repeats(cluster, [0, 1, 2])


def test_a_failure_with_retry_on_error_asks_for_a_resubmission():
    hosts = ["h0"]
    cluster = Cluster(hosts, program=lambda job: (1, 3))
    decision = watch(cluster, hosts, {"retry": {"on_events": ["error"], "duration": 3600}},
                     retry_since=cluster.now).watch()
    assert decision.resubmit and not decision.final
    assert decision.status == lc.RunStatus.PENDING


def test_a_host_unreachable_longer_than_the_grace_fails_its_job():
    hosts = ["h0", "h1"]

    def hook(cluster):
        if cluster.now == 1003.0:
            cluster.nodes["h1"].down = True

    cluster = Cluster(hosts, hook=hook)
    decision = watch(cluster, hosts, {}, unreachable_grace=10.0).watch()

    assert decision.final and decision.status == lc.RunStatus.FAILED
    assert decision.failed_job == (1, "instance_unreachable", None)
    failed_at = [t for t, e in cluster.events
                 if e["kind"] == "job" and e["job_num"] == 1 and e["status"] == lc.JobStatus.FAILED]
    assert len(failed_at) == 1
    # First seen down at 1003; failed only once more than 10 s had passed.
    assert failed_at[0] == 1014.0
    assert [(h, p["reason"]) for h, p in cluster.ops("stop")] == [
        ("h0", lc.TERMINATED_BY_SERVER)]
    assert cluster.job_events(0)[-1]["status"] == lc.JobStatus.TERMINATED
    assert_no_repeats(cluster, [0, 1])


def test_a_host_back_within_the_grace_is_not_failed():
    hosts = ["h0", "h1"]

    def hook(cluster):
        cluster.nodes["h1"].down = 1003.0 <= cluster.now < 1008.0

    cluster = Cluster(hosts, program=lambda job: (12, 0), hook=hook)
    decision = watch(cluster, hosts, {}, unreachable_grace=10.0).watch()
    assert decision.final and decision.status == lc.RunStatus.DONE
    assert [e["status"] for e in cluster.job_events(1)] == ["provisioning", "running", "done"]


def test_a_start_that_fails_gives_an_executor_error_with_the_message():
    hosts = ["h0", "h1"]
    cluster = Cluster(hosts)
    cluster.nodes["h1"].fail_start = "could not start container train-1-0: no space left"
    decision = watch(cluster, hosts, {}).watch()

    assert decision.final and decision.status == lc.RunStatus.FAILED
    assert decision.failed_job == (1, lc.EXECUTOR_ERROR, None)
    events = cluster.job_events(1)
    assert events == [{"kind": "job", "job_num": 1, "host": "h1", "status": lc.JobStatus.FAILED,
                       "reason": lc.EXECUTOR_ERROR, "exit_code": None,
                       "message": "could not start container train-1-0: no space left"}]
    assert [(h, p["reason"]) for h, p in cluster.ops("stop")] == [
        ("h0", lc.TERMINATED_BY_SERVER)]
    assert_no_repeats(cluster, [0, 1])


def test_a_users_stop_terminates_every_job():
    hosts = ["h0", "h1"]
    stop = threading.Event()

    def hook(cluster):
        if cluster.now >= 1003.0:
            stop.set()

    cluster = Cluster(hosts, hook=hook)
    decision = watch(cluster, hosts, {}, stop_event=stop).watch()
    assert decision.final
    assert (decision.status, decision.reason) == (lc.RunStatus.TERMINATED, lc.TERMINATED_BY_USER)
    assert sorted(h for h, p in cluster.ops("stop") if p["reason"] == lc.TERMINATED_BY_USER) == [
        "h0", "h1"]


def test_observe_counts_only_the_runs_containers_of_the_submission():
    cluster = Cluster(["h0"])
    node = cluster.nodes["h0"]
    node.containers = [
        container("train-0-0", {RUN_LABEL: "train", JOB_LABEL: "0", SUB_LABEL: "1"}),
        container("old", {RUN_LABEL: "train", JOB_LABEL: "1", SUB_LABEL: "0"}),
        container("other", {RUN_LABEL: "other", JOB_LABEL: "1", SUB_LABEL: "1"}),
        container("nojob", {RUN_LABEL: "train", SUB_LABEL: "1"}),
    ]
    found, errors = supervisor.observe(cluster.nodes, "train", 1)
    assert errors == {}
    assert sorted(found) == [0]
    assert found[0]["name"] == "train-0-0" and found[0]["host"] == "h0"


# ---------------------------------------------------------------------------------------------
# runs.Runner
# ---------------------------------------------------------------------------------------------


def test_a_users_stop_as_the_run_fails_by_itself_is_not_followed_by_a_resubmission(
        fake_hosts):
    """Retry on error; the only job exits 3 in the same moment the user stops the run (Ctrl-C):
    nothing is left for the stop to end, and the run ends stopped, not submitted again."""
    config = task(nodes=1, retry={"on_events": ["error"], "duration": "1h"})
    stop = threading.Event()
    runner, cluster = fake_hosts(config, [fleet_with_facts()], lambda job: (2, 3))

    def hook(c):
        if any(b["files"]["exit_code"] for b in c.nodes["gpus-0"].containers):
            stop.set()   # before the watch has seen the job end

    cluster.hook = hook
    result = runner.run(stop_event=stop)
    assert (result["status"], result["reason"]) == (lc.RunStatus.TERMINATED, lc.TERMINATED_BY_USER)
    assert result["submissions"] == 1 and len(cluster.ops("start")) == 1
    assert result["message"] == "job 0 on gpus-0 exited with code 3"


def test_retry_on_error_resubmits_and_the_second_submission_ends_done(fake_hosts):
    config = task(nodes=2, retry={"on_events": ["error"], "duration": "1h"})

    def program(job):
        return (1, 3) if job["submission"] == 0 and job["job_num"] == 1 else (1, 0)

    runner, cluster = fake_hosts(config, [fleet_with_facts()], program)
    result = runner.run()

    assert result["status"] == lc.RunStatus.DONE
    assert result["submissions"] == 2
    assert result["fleet"] == "gpus"
    assert [(j["job_num"], j["host"], j["status"]) for j in result["jobs"]] == [
        (0, "gpus-0", "done"), (1, "gpus-1", "done")]
    starts = [p["job"] for _h, p in cluster.ops("start")]
    assert [(j["labels"][SUB_LABEL], j["job_num"]) for j in sorted(
        starts, key=lambda j: (j["submission"], j["job_num"]))] == [
        ("0", 0), ("0", 1), ("1", 0), ("1", 1)]
    assert [j["submission"] for j in starts] == [0, 0, 1, 1]
    # The first submission's containers were removed before the second one started.
    log = [(h, op) for h, op, _p in cluster.log if op in ("remove", "start")]
    at = [i for i, x in enumerate(log) if x[1] == "start"]
    assert len(at) == 4
    assert {x for x in log[at[1]:at[2]] if x[1] == "remove"} == {
        ("gpus-0", "remove"), ("gpus-1", "remove")}
    pending = [e for _t, e in cluster.events if e["kind"] == "run" and e["status"] == "pending"]
    assert [e.get("message") for e in pending if e.get("message")] == [
        "resubmitting all jobs (retry on error)"]
    assert all(e["run"] == "train" for _t, e in cluster.events)


def test_a_resubmission_reports_pending_once(fake_hosts):
    config = task(retry={"on_events": ["error"], "duration": "1h"})
    runner, cluster = fake_hosts(config, [fleet_with_facts(count=1)],
                                 lambda job: (1, 3) if job["submission"] == 0 else (1, 0))
    assert runner.run()["status"] == lc.RunStatus.DONE
    statuses = [e["status"] for e in cluster.run_events()]
    assert all(a != b for a, b in zip(statuses, statuses[1:])), statuses


def test_no_capacity_without_retry_fails_with_the_reason_and_names_the_fleet(fake_hosts):
    runner, cluster = fake_hosts(task(resources={"cpu": 64}), [fleet_with_facts()])
    result = runner.run()
    assert result["status"] == lc.RunStatus.FAILED
    assert result["reason"] == lc.NO_CAPACITY
    assert "fleet gpus" in result["message"]
    assert "cpu" in result["message"]
    assert result["submissions"] == 0 and result["jobs"] == []
    assert cluster.ops("start") == [] and cluster.sleeps == []


def test_no_capacity_with_retry_backs_off_then_fails(fake_hosts):
    config = task(resources={"cpu": 64}, retry={"on_events": ["no-capacity"], "duration": "30s"})
    runner, cluster = fake_hosts(config, [fleet_with_facts()])
    result = runner.run()
    assert cluster.sleeps == [5, 10, 20]  # the backoff; 35 s after submitting it gives up
    assert result["status"] == lc.RunStatus.FAILED
    assert result["reason"] == lc.NO_CAPACITY
    assert "fleet gpus" in result["message"]
    messages = [e["message"] for _t, e in cluster.events if e["kind"] == "run"]
    # It waited in the queue (kept on the fleet's first host) until its time ran out.
    assert [m.split(":")[0] for m in messages] == [
        "waiting for capacity in the queue (kept on gpus-0)"]
    assert result["message"].startswith("no capacity within retry's duration")
    assert cluster.nodes["gpus-0"].queue["train"]["state"] == "failed"
    assert cluster.ops("start") == []


@pytest.mark.parametrize("exit_code", [None, 3])
def test_a_run_of_the_same_name_still_alive_is_refused(fake_hosts, exit_code):
    """Its job runs, or has just ended and its container is finishing (telling the others)."""
    runner, cluster = fake_hosts(task(), [fleet_with_facts()])
    cluster.nodes["gpus-1"].containers.append(container(
        "train-0-0", {RUN_LABEL: "train", JOB_LABEL: "0", SUB_LABEL: "0"}, state="running",
        running=STARTED, exit_code=exit_code))
    with pytest.raises(runs.RunError) as info:
        runner.run()
    assert "run train is already running (on gpus-1)" in str(info.value)
    assert "gpufleet stop train" in str(info.value)
    assert cluster.ops("start") == [] and cluster.ops("remove") == []


def test_a_finished_run_of_the_same_name_is_replaced(fake_hosts):
    runner, cluster = fake_hosts(task(), [fleet_with_facts(count=1)], program=lambda job: (1, 0))
    cluster.nodes["gpus-0"].containers.append(container(
        "train-0-0", {RUN_LABEL: "train", JOB_LABEL: "0", SUB_LABEL: "0"}, state="exited",
        running=STARTED, exit_code=0))
    result = runner.run()
    assert result["status"] == lc.RunStatus.DONE and result["submissions"] == 1
    # Its host's claim cleared it and said whether the image is there: no requests of their own.
    [(host, claim)] = cluster.ops("claim")
    assert (host, claim["replace"], claim["image"]) == (
        "gpus-0", True, "dstackai/base:0.15-base-ubuntu24.04")
    assert cluster.ops("remove") == [] and cluster.ops("image_info") == []
    assert len(cluster.ops("start")) == 1
    assert runner.images == [("dstackai/base:0.15-base-ubuntu24.04", ["gpus-0"])]
    assert runner.known == {"gpus-0": {"present": True, "entrypoint": None, "cmd": None,
                                       "working_dir": None}}


def test_a_finished_run_of_the_same_name_on_a_host_it_no_longer_uses_is_removed(fake_hosts):
    runner, cluster = fake_hosts(task(), [fleet_with_facts(count=2)], program=lambda job: (1, 0))
    # The earlier run of the name is on gpus-1; gpus-0 is busy with another, ended, run that
    # leaves it free: the new run is placed on gpus-0 (name order) and gpus-1 is cleared.
    cluster.nodes["gpus-1"].containers.append(container(
        "train-0-0", {RUN_LABEL: "train", JOB_LABEL: "0", SUB_LABEL: "0"}, state="exited",
        running=STARTED, exit_code=0))
    result = runner.run()
    assert result["status"] == lc.RunStatus.DONE
    # Every claim clears the name's leftovers on its host, seen or not (tasks.runindex).
    assert [(h, c["replace"]) for h, c in cluster.ops("claim")] == [("gpus-0", True)]
    assert [(h, p["run"], p["keep"]) for h, p in cluster.ops("remove")] == [
        ("gpus-1", "train", runner.run_id)]
    assert not any(c["name"] == "train-0-0" for c in cluster.nodes["gpus-1"].containers)


def test_a_failed_run_result_says_which_job_failed(fake_hosts):
    runner, _cluster = fake_hosts(task(nodes=2), [fleet_with_facts()],
                                  program=lambda job: (1, 7) if job["job_num"] == 1 else
                                  (None, None))
    result = runner.run()
    assert (result["status"], result["reason"]) == (lc.RunStatus.FAILED, "job_failed")
    assert result["message"] == "job 1 on gpus-1 exited with code 7"
    assert [(j["status"], j["reason"], j["exit_code"]) for j in result["jobs"]] == [
        (lc.JobStatus.TERMINATED, lc.TERMINATED_BY_SERVER, 143),
        (lc.JobStatus.FAILED, lc.CONTAINER_EXITED_WITH_ERROR, 7)]
    assert result["jobs"][1]["internal_ip"] == "10.1.0.3"


def test_an_image_that_cannot_be_brought_leaves_the_run_failed_on_its_hosts(fake_hosts,
                                                                            monkeypatch):
    runner, cluster = fake_hosts(task(nodes=2), [fleet_with_facts()])
    recorded = []
    for node in cluster.nodes.values():
        node.op_record_failure = lambda payload, node=node: recorded.append(
            (node.name, payload)) or {"recorded": True}

    def no_image(image, nodes, hosts, **kwargs):
        raise RunError("image nope:1 could not be pulled on gpus-0 (manifest unknown)")

    monkeypatch.setattr(run_preparation, "ensure_image", no_image)
    with pytest.raises(RunError, match="could not be pulled"):
        runner.run()
    assert sorted((h, p["job_num"], p["container"]) for h, p in recorded) == [
        ("gpus-0", 0, "train-0-0"), ("gpus-1", 1, "train-1-0")]
    payload = recorded[0][1]
    assert "could not be pulled" in payload["error"]
    assert payload["labels"][RUN_LABEL] == "train" and payload["labels"][JOB_LABEL] in "01"
    assert not cluster.ops("start")
    assert all(not node.claims for node in cluster.nodes.values())   # released


def test_a_survey_handed_back_serves_the_first_placement_only(fake_hosts):
    runner, cluster = fake_hosts(task(), [fleet_with_facts(count=1)], program=lambda job: (1, 0))
    runner.reuse_survey(runner.survey())
    asked = len(cluster.log)
    result = runner.run()
    assert result["status"] == lc.RunStatus.DONE
    ops = [op for _host, op, _payload in cluster.log[asked:]]
    assert ops.index("claim") < ops.index("status")   # placed on the survey handed back
    assert runner.placing.fresh_survey is None


def competitor(cluster):
    """Another submitter claiming a host whole, between a survey and this runner's claim."""
    def claim(node):
        node.claims.append({"run": "other", "run_id": "x", "submission": 0, "blocks": 1,
                            "total_blocks": 1, "gpu_ids": [], "whole": True,
                            "expires": cluster.now + 900})
    return claim


def test_a_host_claimed_by_another_submitter_after_the_survey_is_not_double_booked(fake_hosts):
    runner, cluster = fake_hosts(task(), [fleet_with_facts()], program=lambda job: (1, 0))

    cluster.nodes["gpus-0"].before_claim = competitor(cluster)
    result = runner.run()
    assert result["status"] == lc.RunStatus.DONE
    # Refused on gpus-0, placed again on gpus-1, and nothing ever started on gpus-0.
    assert [(h, p["run"]) for h, p in cluster.ops("claim")] == [
        ("gpus-0", "train"), ("gpus-1", "train")]
    assert [h for h, _p in cluster.ops("start")] == ["gpus-1"]
    assert [c["run"] for c in cluster.nodes["gpus-0"].claims] == ["other"]


def test_a_multi_node_run_that_loses_one_host_releases_the_other_and_reports_no_capacity(
        fake_hosts):
    runner, cluster = fake_hosts(task(nodes=2), [fleet_with_facts()])

    cluster.nodes["gpus-1"].before_claim = competitor(cluster)
    result = runner.run()
    assert (result["status"], result["reason"]) == (lc.RunStatus.FAILED, lc.NO_CAPACITY)
    assert "gpus-1: busy (1 of 1 blocks in use)" in result["message"]
    assert cluster.nodes["gpus-0"].claims == []  # released, not left to lapse
    assert cluster.ops("start") == []


# ---------------------------------------------------------------------------------------------
# listing.run_records and claiming.busy_map
# ---------------------------------------------------------------------------------------------


def labels(run, job, submission=0, nodes=1, submitted="2026-01-01T10:00:00Z", gpus="",
           blocks="1", spec=None):
    return {
        RUN_LABEL: run, "gpufleet.run-id": "id-" + run, JOB_LABEL: str(job),
        SUB_LABEL: str(submission), "gpufleet.nodes": str(nodes), "gpufleet.fleet": "gpus",
        "gpufleet.submitted": submitted, "gpufleet.gpus": gpus, "gpufleet.blocks": blocks,
        "gpufleet.run-spec": json.dumps(spec or {"backend": "ssh", "region": "remote",
                                                 "price": None, "spot": False,
                                                 "gpu": "H100:80GB:1"}),
    }


def running(name, lab):
    return container(name, lab, state="running", running=STARTED)


def exited(name, lab, code, reason=None, docker_code=None):
    return container(name, lab, state="exited", running=STARTED, exit_code=code, reason=reason,
                     docker_code=code if docker_code is None else docker_code)


def test_run_records_of_a_running_two_node_run():
    records = listing.run_records({
        "h1": [running("dist-1-0", labels("dist", 1, nodes=2, gpus="GPU-1"))],
        "h0": [running("dist-0-0", labels("dist", 0, nodes=2, gpus="GPU-0,GPU-3"))],
    })
    assert len(records) == 1
    record = records[0]
    assert {k: record[k] for k in ("name", "run_id", "submission", "submitted", "status",
                                   "reason", "fleet", "backend", "region", "gpu", "nodes")} == {
        "name": "dist", "run_id": "id-dist", "submission": 0,
        "submitted": "2026-01-01T10:00:00Z", "status": lc.RunStatus.RUNNING, "reason": None,
        "fleet": "gpus", "backend": "ssh", "region": "remote", "gpu": "H100:80GB:1", "nodes": 2}
    assert [(j["job_num"], j["host"], j["container"], j["status"], j["gpus"])
            for j in record["jobs"]] == [
        (0, "h0", "dist-0-0", "running", ["GPU-0", "GPU-3"]),
        (1, "h1", "dist-1-0", "running", ["GPU-1"])]


def test_run_records_statuses_decided_as_while_running():
    spec = {"stop_criteria": "master-done"}
    records = listing.run_records({"h0": [
        exited("a-0-0", labels("a", 0, submitted="2026-01-01T10:00:01Z"), 0),
        exited("b-0-0", labels("b", 0, nodes=2, submitted="2026-01-01T10:00:02Z"), 3),
        exited("b-1-0", labels("b", 1, nodes=2, submitted="2026-01-01T10:00:02Z"), None,
               reason=lc.TERMINATED_BY_SERVER, docker_code=143),
        exited("c-0-0", labels("c", 0, nodes=2, spec=spec, submitted="2026-01-01T10:00:03Z"), 0),
        exited("c-1-0", labels("c", 1, nodes=2, spec=spec, submitted="2026-01-01T10:00:03Z"),
               None, reason=lc.DONE_BY_RUNNER, docker_code=143),
    ]})
    by_name = {r["name"]: r for r in records}
    assert (by_name["a"]["status"], by_name["a"]["reason"]) == (lc.RunStatus.DONE, "all_jobs_done")
    assert (by_name["b"]["status"], by_name["b"]["reason"]) == (lc.RunStatus.FAILED, "job_failed")
    assert [(j["status"], j["reason"], j["exit_code"]) for j in by_name["b"]["jobs"]] == [
        (lc.JobStatus.FAILED, lc.CONTAINER_EXITED_WITH_ERROR, 3),
        (lc.JobStatus.TERMINATED, lc.TERMINATED_BY_SERVER, 143)]
    assert (by_name["c"]["status"], by_name["c"]["reason"]) == (lc.RunStatus.DONE, "all_jobs_done")
    # Newest first.
    assert [r["name"] for r in records] == ["c", "b", "a"]


def test_run_records_keep_the_latest_submission_only():
    records = listing.run_records({
        "h0": [exited("r-0-0", labels("r", 0, submission=0, nodes=2), 3),
               running("r-0-0b", labels("r", 0, submission=1, nodes=2))],
        "h1": [exited("r-1-0", labels("r", 1, submission=0, nodes=2), 0)],
    })
    assert len(records) == 1
    assert records[0]["submission"] == 1
    assert [(j["job_num"], j["container"]) for j in records[0]["jobs"]] == [(0, "r-0-0b")]
    # Job 1 of submission 1 is not created yet: the run is still coming up, not failed.
    assert records[0]["status"] == lc.RunStatus.RUNNING
    assert records[0]["nodes"] == 2


def test_run_records_of_nothing():
    assert listing.run_records({}) == []
    assert listing.run_records({"h0": []}) == []


def test_busy_map_counts_alive_containers_only():
    busy = claiming.busy_map({
        "h0": [running("a-0-0", labels("a", 0, gpus="GPU-0,GPU-1", blocks="2")),
               container("b-0-0", labels("b", 0, gpus="GPU-2", blocks="1")),  # created
               container("c-0-0", labels("c", 0, gpus="GPU-3", blocks="1"), state="running",
                         running=STARTED, reason=lc.TERMINATED_BY_USER),  # terminating
               exited("d-0-0", labels("d", 0, gpus="GPU-4", blocks="4"), 0)],
        "h1": [exited("e-0-0", labels("e", 0, gpus="GPU-0", blocks="8"), 1)],
        "h2": [running("f-0-0", labels("f", 0, gpus="", blocks=""))],
    })
    assert busy == {"h0": {"blocks": 4, "gpu_ids": ["GPU-0", "GPU-1", "GPU-2", "GPU-3"]},
                    "h2": {"blocks": 0, "gpu_ids": []}}


# ---------------------------------------------------------------------------------------------
# actions.event_line and actions.failure_summary
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("event, line", [
    ({"kind": "log", "run": "train", "rank": 1, "line": "epoch 1"}, "[train-1] epoch 1"),
    ({"kind": "job", "run": "train", "job_num": 0, "host": "h0", "status": "running",
      "reason": None, "exit_code": None}, "train job 0 on h0: running"),
    ({"kind": "job", "run": "train", "job_num": 0, "host": "h0", "status": "done",
      "reason": None, "exit_code": 0}, "train job 0 on h0: done"),
    ({"kind": "job", "run": "train", "job_num": 1, "host": "h1", "status": "failed",
      "reason": "container_exited_with_error", "exit_code": 3},
     "train job 1 on h1: failed (exit code 3) [container_exited_with_error]"),
    ({"kind": "job", "run": "train", "job_num": 2, "host": "h2", "status": "done",
      "reason": "done_by_runner", "exit_code": 143},
     "train job 2 on h2: done (exit code 143) [done_by_runner]"),
    ({"kind": "job", "job_num": 0, "host": "h0", "status": "pulling", "reason": None,
      "exit_code": None}, "run job 0 on h0: pulling"),
    ({"kind": "run", "run": "train", "status": "running"}, "train: running"),
    ({"kind": "run", "run": "train", "status": "pending", "message": "no capacity"},
     "train: pending: no capacity"),
    ({"kind": "info", "run": "train", "message": "pulling img on h0"},
     "train: pulling img on h0"),
])
def test_event_line(event, line):
    assert actions.event_line(event) == line


def test_event_line_of_an_unknown_kind_is_none():
    assert actions.event_line({"kind": "progress", "run": "train"}) is None
    assert actions.event_line({}) is None


def test_event_line_of_a_failed_start_names_the_reason_and_message():
    line = actions.event_line({"kind": "job", "run": "train", "job_num": 1, "host": "h1",
                               "status": "failed", "reason": "executor_error", "exit_code": None,
                               "message": "no space left"})
    assert line.startswith("train job 1 on h1: failed")
    assert line.endswith("[executor_error]: no space left")


def test_event_line_says_nothing_of_an_unknown_exit_code():
    line = actions.event_line({"kind": "job", "run": "train", "job_num": 1, "host": "h1",
                               "status": "failed", "reason": "instance_unreachable",
                               "exit_code": None})
    assert line == "train job 1 on h1: failed [instance_unreachable]"


@pytest.mark.parametrize("result, text", [
    ({"run": "train", "status": "failed", "reason": "job_failed",
      "message": "job 1 on h1 exited with code 3"},
     "run train failed (job_failed): job 1 on h1 exited with code 3"),
    ({"run": "train", "status": "failed", "reason": lc.NO_CAPACITY, "message": None},
     "run train failed (failed_to_start_due_to_no_capacity)"),
    ({"run": "train", "status": "terminated"}, "run train terminated"),
    ({"run": "train", "status": "submitted", "message": "still starting"},
     "run train submitted: still starting"),
])
def test_failure_summary(result, text):
    assert actions.failure_summary(result) == text


def test_fields_the_runner_cannot_honour_are_refused_or_warned():
    from ansible_collections.gpufleet.cluster.plugins.module_utils.spec import parse_data

    def config(**extra):
        data = {"type": "task", "commands": ["true"]}
        data.update(extra)
        return parse_data(data)[0]

    runs.Runner(config(schedule={"cron": "0 * * * *"}), [])   # kept on its hosts
    with pytest.raises(runs.RunError, match="retry: a scheduled task runs once at each firing"):
        runs.Runner(config(schedule={"cron": "0 * * * *"}, retry=True), [])
    with pytest.raises(runs.RunError, match=r"repos\[0\]\.url: unsupported URL scheme ftp"):
        runs.Runner(config(repos=[{"url": "ftp://example.com/org/repo.git"}]), [])
    # ports are forwarded by gpufleet attach (and apply, which attaches): no note.
    notes = actions.ignored_fields(config(ports=[8080], dstack=True))
    assert [n.split(":")[0] for n in notes] == ["dstack"]
    assert actions.ignored_fields(config()) == []


def test_fleets_come_from_files_labels_and_remembered_files(tmp_path):
    from ansible_collections.gpufleet.cluster.plugins.module_utils.fleets import state

    root = str(tmp_path / "state")
    fleet = tmp_path / "lab.dstack.yml"
    fleet.write_text("type: fleet\nname: lab\nplacement: cluster\nssh_config:\n  user: ubuntu\n"
                     "  identity_file: id_ed25519\n  hosts: [10.0.0.1, 10.0.0.2]\n")
    state.remember_file(root, "lab", str(fleet))
    state.ensure_fleet_dir(root, "lab")
    with open(state.facts_path(root, "lab"), "w") as handle:
        handle.write('{"lab-0": {"cpus": 4}}')
    broken = tmp_path / "gone.dstack.yml"
    broken.write_text("type: fleet\nname: gone\nnodes: x\n")
    state.remember_file(root, "gone", str(broken))
    found = surveys.collect_fleets((), docker=None, root=root)
    assert [f["name"] for f in found] == ["lab"]  # the unreadable remembered file is skipped
    statuses = dict((i["name"], i["status"]) for i in found[0]["instances"])
    assert statuses == {"lab-0": "idle", "lab-1": "pending"}  # facts mean it passed its checks
    with pytest.raises(runs.RunError):
        surveys.collect_fleets((str(broken),), docker=None, root=root)  # a file given must read


def test_a_fleets_bare_env_names_come_from_the_controller():
    from ansible_collections.gpufleet.cluster.plugins.module_utils.spec import parse_data

    config = parse_data({"type": "task", "image": "busybox", "commands": ["true"]})[0]
    fleets = [{"name": "lab", "env": {"HTTP_PROXY": None, "NO_PROXY": "localhost"},
               "instances": []}]
    runner = runs.Runner(config, fleets, environ={"HTTP_PROXY": "http://proxy:3128"})
    assert runner.fleet_env("lab") == {"HTTP_PROXY": "http://proxy:3128",
                                       "NO_PROXY": "localhost"}
    assert runner.fleet_env("other") == {}
    runner = runs.Runner(config, fleets, environ={})
    with pytest.raises(runs.RunError, match="fleet lab: env.HTTP_PROXY has no value"):
        runner.fleet_env("lab")


def test_the_local_engine_is_listed_once_for_fleet_files_and_discovered_fleets(tmp_path):
    """A command reads every fleet: the files it remembers and what the backends hold. Local
    fleets of both come from one listing of the engine (a docker call costs ~20 ms)."""
    import json

    from ansible_collections.gpufleet.cluster.plugins.module_utils.backends import local
    from ansible_collections.gpufleet.cluster.plugins.module_utils.backends.docker_cli import (
        Docker,
    )
    from ansible_collections.gpufleet.cluster.plugins.module_utils.fleets import state

    def node(fleet, num):
        return {"Id": "%s%d" % (fleet, num), "Name": "/%s-%d" % (fleet, num),
                "State": {"Status": "running"},
                "Config": {"Labels": {local.FLEET_LABEL: fleet, local.INSTANCE_LABEL: str(num),
                                      local.CREATED_LABEL: "2026-11-26T00:00:00Z"}},
                "NetworkSettings": {"Networks": {"gpufleet-" + fleet: {
                    "IPAddress": "10.9.%d.%d" % (len(fleet), num + 2)}}}}

    nodes = [node("lab", 0), node("lab", 1), node("spare", 0)]
    calls = []

    def runner(argv, stdin=None):
        calls.append(argv[1:])
        if argv[1] == "ps":
            return 0, "\n".join(n["Id"] for n in nodes).encode(), b""
        if argv[1] == "inspect":
            return 0, json.dumps([n for n in nodes if n["Id"] in argv[2:]]).encode(), b""
        return 1, b"", b"unexpected"

    root = str(tmp_path / "state")
    fleet = tmp_path / "lab.dstack.yml"
    fleet.write_text("type: fleet\nname: lab\nnodes: 2\nplacement: cluster\nbackends: [local]\n")
    state.remember_file(root, "lab", str(fleet))
    found = surveys.collect_fleets((), docker=Docker("docker", runner), root=root)
    assert sorted(f["name"] for f in found) == ["lab", "spare"]
    lab = next(f for f in found if f["name"] == "lab")
    assert lab.get("file") == str(fleet)   # described from its file, not only its labels
    assert sorted(i["name"] for i in lab["instances"]) == ["lab-0", "lab-1"]
    assert [c[0] for c in calls] == ["ps", "inspect"]
    # A file given alone (no discovery) still asks for its own fleet.
    calls[:] = []
    only = surveys.collect_fleets((str(fleet),), docker=Docker("docker", runner), root=root,
                                  discover=False)
    assert [f["name"] for f in only] == ["lab"]
    assert [c[0] for c in calls] == ["ps", "inspect"]
    assert "label=%s=lab" % local.FLEET_LABEL in calls[0]
    # An engine that does not answer: the remembered local fleet is passed over, nothing
    # local is discovered, and no error comes out.

    def down(argv, stdin=None):
        calls.append(argv[1:])
        return 1, b"", b"Cannot connect to the Docker daemon"

    assert surveys.collect_fleets((), docker=Docker("docker", down), root=root) == []


def test_replicas_that_share_a_host_claim_it_once_for_what_they_hold_together():
    run = {"name": "svc", "id": "r1"}
    jobs = [{"job_num": 0, "host": "a", "blocks": 1, "total_blocks": 4, "gpus": [{"id": "0"}]},
            {"job_num": 1, "host": "b", "blocks": 2, "total_blocks": 4, "gpus": []},
            {"job_num": 2, "host": "a", "blocks": 2, "total_blocks": 4, "gpus": [{"id": "1"}]}]
    claims = claiming.host_claims(jobs, run, 3, by="me:1")
    assert sorted(claims) == ["a", "b"]
    both = claims["a"]
    assert (both["jobs"], both["blocks"], both["gpu_ids"]) == ([0, 2], 3, ["0", "1"])
    assert both["shares"] == {"0": {"blocks": 1, "gpu_ids": ["0"], "whole": False},
                              "2": {"blocks": 2, "gpu_ids": ["1"], "whole": False}}
    assert claims["b"]["jobs"] == [1] and claims["b"]["submission"] == 3


def test_busy_map_counts_a_running_job_its_runs_claim_has_no_share_for():
    boxes = {"a": [{"name": "svc-0-%d" % n, "state": "running", "files": {"running": "1"},
                    "labels": {"gpufleet.run": "svc", "gpufleet.submission": "0",
                               "gpufleet.job": str(n), "gpufleet.blocks": "1"}}
                   for n in (0, 1)]}
    shares = {"a": [{"run": "svc", "submission": 0, "blocks": 1, "gpu_ids": [],
                     "shares": {"0": {"blocks": 1, "gpu_ids": [], "whole": False}}}]}
    assert claiming.busy_map(boxes, shares)["a"]["blocks"] == 2   # job 1's container counts
    whole = {"a": [{"run": "svc", "submission": 0, "blocks": 1, "gpu_ids": []}]}
    assert claiming.busy_map(boxes, whole)["a"]["blocks"] == 1    # an older claim covers all
