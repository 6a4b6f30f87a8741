# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""A task with ``schedule`` on the controller's side: submitted, it is placed and kept ready on
its hosts (``arm``) and pending with its next firing, nothing started and nothing left behind
when a host refuses; read back, the run is pending between firings and terminated once
stopped; what the file may not combine with it is refused before anything is placed.
"""

from __future__ import annotations

import time

import pytest
from ansible_collections.gpufleet.cluster.plugins.module_utils.render import run_table as runtable
from ansible_collections.gpufleet.cluster.plugins.module_utils.spec.support import refusals
from ansible_collections.gpufleet.cluster.plugins.module_utils.tasks import lifecycle as lc
from ansible_collections.gpufleet.cluster.plugins.module_utils.tasks import listing
from ansible_collections.gpufleet.cluster.plugins.module_utils.tasks.errors import RunError

from ..configs import task
from .fakes import JOB_LABEL, RUN_LABEL, SUB_LABEL, fleet_with_facts

NIGHTLY = {"cron": ["0 2 * * *"]}


def test_a_scheduled_task_is_kept_ready_on_its_hosts_and_pending(fake_hosts):
    runner, cluster = fake_hosts(task(nodes=2, schedule=NIGHTLY), [fleet_with_facts()])
    result = runner.run(wait=True)
    assert (result["status"], result["reason"]) == (lc.RunStatus.PENDING,
                                                    lc.WAITING_FOR_SCHEDULE)
    assert result["next_run"] == cluster.now + 60
    assert result["message"] == "waiting for schedule, next run %s" % time.strftime(
        "%Y-%m-%d %H:%M UTC", time.gmtime(cluster.now + 60))
    assert cluster.ops("start") == []
    armed = sorted((h, p["job"]["job_num"], p["cron"]) for h, p in cluster.ops("arm"))
    assert armed == [("gpus-0", 0, ["0 2 * * *"]), ("gpus-1", 1, ["0 2 * * *"])]
    assert [e for e in cluster.run_events() if e["status"] == "pending"][-1]["message"] == \
        result["message"]


def test_a_host_that_cannot_keep_it_leaves_nothing_behind(fake_hosts):
    runner, cluster = fake_hosts(task(nodes=2, schedule=NIGHTLY), [fleet_with_facts()])
    cluster.nodes["gpus-1"].fail_start = "disk full"
    with pytest.raises(RunError, match="could not keep job 1 of run train ready.*disk full"):
        runner.run(wait=False)
    assert sorted(h for h, p in cluster.ops("remove") if p["run"] == "train") == [
        "gpus-0", "gpus-1"]
    assert all(not n.claims for n in cluster.nodes.values())


def test_a_scheduled_task_that_fits_nowhere_fails_now(fake_hosts):
    runner, cluster = fake_hosts(task(schedule=NIGHTLY, resources={"cpu": 64}),
                                 [fleet_with_facts()])
    result = runner.run(wait=False)
    assert (result["status"], result["reason"]) == (lc.RunStatus.FAILED, lc.NO_CAPACITY)
    assert result["message"].startswith("no host can keep the scheduled run ready now: ")
    assert cluster.ops("arm") == []


def entry(state, schedule, job=0, **files):
    return {"name": "nightly-%d-0" % job, "state": state, "exit_code": 0,
            "labels": {RUN_LABEL: "nightly", JOB_LABEL: str(job), SUB_LABEL: "0",
                       "gpufleet.submitted": "2026-11-30T10:00:00Z"},
            "files": dict(files, schedule=schedule)}


def kept(**given):
    made = {"cron": ["*/5 * * * *"], "next": 1796032800, "firings": 0, "last": None,
            "stopped": False, "waiting": None, "error": None}
    made.update(given)
    return made


def test_between_firings_the_run_is_pending_with_its_next_one():
    (record,) = listing.run_records({"gpus-0": [entry("scheduled", kept())]})
    assert (record["status"], record["reason"]) == ("pending", lc.WAITING_FOR_SCHEDULE)
    assert record["schedule"]["next"] == 1796032800 and record["jobs"][0]["status"] == \
        "submitted"
    line = runtable.run_table([record], verbose=True)[1]
    assert "pending" in line and "next run 2026-11-30 10:00 UTC" in line
    # After a firing that ended, the job keeps how it ended; the run waits again.
    (record,) = listing.run_records({"gpus-0": [entry("exited", kept(firings=1, last=1),
                                                      running="1", exit_code="0")]})
    assert (record["status"], record["jobs"][0]["status"]) == ("pending", "done")
    assert record["schedule"]["firings"] == 1
    # A firing that runs: the run runs.
    (record,) = listing.run_records({"gpus-0": [entry("running", kept(firings=2),
                                                      running="1")]})
    assert record["status"] == "running"
    # A firing its host could not start yet says why.
    (record,) = listing.run_records({"gpus-0": [entry("scheduled", kept(waiting="busy"))]})
    assert "firing waits: busy" in runtable.run_table([record], verbose=True)[1]


def test_a_stopped_schedule_ends_the_run_terminated_by_the_user():
    (record,) = listing.run_records({"gpus-0": [entry("exited", kept(stopped=True, next=None),
                                                      running="1", exit_code="0")]})
    assert (record["status"], record["reason"]) == ("terminated", lc.TERMINATED_BY_USER)
    assert record["jobs"][0]["status"] == "done"   # its last firing's end stays as it was
    (record,) = listing.run_records({"gpus-0": [entry("scheduled", kept(stopped=True),
                                                      reason="terminated_by_user")]})
    assert (record["status"], record["jobs"][0]["status"]) == ("terminated", "terminated")


def test_what_a_schedule_cannot_be_combined_with_is_refused():
    def refused(config):
        return dict((p.path, p.message) for p in refusals(config))

    assert refused(task(schedule=NIGHTLY)) == {}
    assert refused(task(nodes=2, startup_order="any", schedule=NIGHTLY)) == {}
    why = refused(task(schedule=NIGHTLY, retry={"on_events": ["error"]},
                       nodes=2, startup_order="workers-first"))
    assert set(why) == {("retry",), ("startup_order",)}
    assert "remove `retry`" in why[("retry",)]
    service = task(type="service", port=8000, schedule=NIGHTLY)
    assert refused(service)[("schedule",)].startswith(
        "gpufleet starts tasks on a schedule, not services")


def test_a_stop_reaches_every_job_that_keeps_the_schedule_whatever_its_firing():
    from .fakes import Cluster, container

    cluster = Cluster(["gpus-0", "gpus-1"])
    run = {RUN_LABEL: "nightly", "gpufleet.submitted": "2026-11-30T10:00:00Z",
           "gpufleet.nodes": "2"}
    # Job 0 runs the firing of 10:01; job 1's host was busy then and still waits for it.
    now = container("nightly-0-0", dict(run, **{JOB_LABEL: "0", SUB_LABEL: "29933961"}),
                    state="running", running="1")
    now["files"]["schedule"] = kept(firings=2)
    waiting = container("nightly-1-0", dict(run, **{JOB_LABEL: "1", SUB_LABEL: "29933960"}),
                        state="exited", running="1", exit_code=0)
    waiting["files"]["schedule"] = kept(firings=1, waiting="busy")
    cluster.nodes["gpus-0"].containers = [now]
    cluster.nodes["gpus-1"].containers = [waiting]
    # Both hosts keep the schedule, the one that missed the latest firing too.
    (record,) = listing.run_records({"gpus-0": [now], "gpus-1": [waiting]})
    assert (record["schedule"]["hosts"], record["schedule"]["waiting"]) == (
        ["gpus-0", "gpus-1"], "busy")
    listing.stop_run(cluster.nodes, "nightly", by="ann")
    stops = sorted((h, [j["job_num"] for j in p["jobs"]], p["reason"])
                   for h, p in cluster.ops("stop"))
    assert stops == [("gpus-0", [0], "terminated_by_user"),
                     ("gpus-1", [1], "terminated_by_user")]


def test_a_stop_reaches_job_0_while_it_waits_for_the_others_ends():
    """Job 0 of a multi-node run whose command ended still has its container (its wrapper
    waits for the other jobs' ends, tasks.hostside.wrapper_peers): ps says it ended, and a stop
    of the run still reaches it, so that its wait ends with the user's stop."""
    from .fakes import Cluster, container

    cluster = Cluster(["gpus-0", "gpus-1"])
    run = {RUN_LABEL: "dist", "gpufleet.submitted": "2026-11-30T10:00:00Z",
           "gpufleet.nodes": "2", SUB_LABEL: "0"}
    waits = container("dist-0-0", dict(run, **{JOB_LABEL: "0"}), state="running",
                      running="1", exit_code=0)
    runs = container("dist-1-0", dict(run, **{JOB_LABEL: "1"}), state="running", running="1")
    cluster.nodes["gpus-0"].containers = [waits]
    cluster.nodes["gpus-1"].containers = [runs]
    assert lc.job_status(waits)[0] == "done" and lc.holds_host(waits)
    stopped = listing.stop_run(cluster.nodes, "dist", by="ann")
    assert sorted(stopped["stopped"]) == ["dist-0-0", "dist-1-0"]
    assert sorted((h, [j["job_num"] for j in p["jobs"]]) for h, p in cluster.ops("stop")) == [
        ("gpus-0", [0]), ("gpus-1", [1])]

    # Once every job has ended, the run is over: a stop leaves job 0's wait alone (the ends
    # it waits for are the run's, not a user's stop).
    again = Cluster(["gpus-0", "gpus-1"])
    waits = container("dist-0-0", dict(run, **{JOB_LABEL: "0"}), state="running",
                      running="1", exit_code=0)
    ended = container("dist-1-0", dict(run, **{JOB_LABEL: "1"}), state="exited", running="1",
                      exit_code=0)
    again.nodes["gpus-0"].containers = [waits]
    again.nodes["gpus-1"].containers = [ended]
    listing.stop_run(again.nodes, "dist", by="ann")
    assert again.ops("stop") == []
