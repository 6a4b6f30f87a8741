# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Per-user limits on the controller (tasks.admission) and in the queue (tasks.queue): a capped
user's run is admitted by the fleet's queue host before it claims hosts; over the cap it waits as
``pending`` with the reason ``user limit`` (whatever retry says) until a pass finds the owner's
use dropped; among equal priorities the user who used less in the last 24 h goes first.

The fake hosts of fakes.py keep the ledger with tasks.hostside.admitside's own decision.
"""

from __future__ import annotations

from ansible_collections.gpufleet.cluster.plugins.module_utils.tasks import admission
from ansible_collections.gpufleet.cluster.plugins.module_utils.tasks import lifecycle as lc
from ansible_collections.gpufleet.cluster.plugins.module_utils.tasks import (
    listing,
    queue,
    queue_records,
    runs,
)

from ..configs import task
from .fakes import JOB_LABEL, RUN_LABEL, SUB_LABEL, container, fleet_with_facts


def pending(run, user, epoch, priority=0):
    return {"run": run, "user": user, "state": "pending", "submitted_epoch": epoch,
            "priority": priority}


def test_fair_share_puts_the_lighter_user_first_among_equal_priorities():
    entries = [("h", pending("heavy-early", "hank", 1.0)),
               ("h", pending("light-late", "lena", 5.0)),
               ("h", pending("urgent", "hank", 9.0, priority=50)),
               ("h", pending("nobody", None, 3.0))]
    usage = queue_records.fleet_usage({"h0": {"hank": 7200, "lena": 100},
                                       "h1": {"hank": 10, "lena": "bad"}, "h2": None})
    assert usage == {"hank": 7210.0, "lena": 100.0}
    order = [e["run"] for _h, e in queue_records.priority_order(entries, usage)]
    # Priority first; then usage (no usage counts 0); then first submitted.
    assert order == ["urgent", "nobody", "light-late", "heavy-early"]
    assert [e["run"] for _h, e in queue_records.priority_order(entries)] == [
        "urgent", "heavy-early", "nobody", "light-late"]
    assert queue_records.positions(entries, usage)["light-late"] == 3


def test_caps_come_from_the_placed_fleets_hosts_and_none_means_not_capped():
    limits = {"gpus-1": {"*": {"runs": 2}, "carol": {"gpus": 1}}}
    assert admission.caps(limits, ["gpus-0", "gpus-1"], "carol") == {
        "runs": 2, "gpus": 1, "nodes": None}
    assert admission.caps(limits, ["other-0"], "carol") is None
    assert admission.caps({"gpus-0": {"dave": {"runs": 1}}}, ["gpus-0"], "carol") is None
    assert admission.caps(limits, ["gpus-1"], None) is None


def test_alive_and_ended_runs_from_a_survey():
    containers = {
        "h0": [container("a-0-0", {RUN_LABEL: "a", JOB_LABEL: "0", SUB_LABEL: "0",
                                   "gpufleet.user": "carol", "gpufleet.gpus": "0,1"},
                         state="running"),
               container("b-0-0", {RUN_LABEL: "b", JOB_LABEL: "0", SUB_LABEL: "0"},
                         state="exited")],
        "h1": [container("a-1-0", {RUN_LABEL: "a", JOB_LABEL: "1", SUB_LABEL: "0",
                                   "gpufleet.user": "carol", "gpufleet.gpus": "0"},
                         state="running")]}
    claims = {"h1": [{"run": "c", "run_id": "c-id", "gpu_ids": ["1"]}]}
    alive, ended = admission.alive_and_ended(containers, claims)
    assert alive == [{"run": "a", "run_id": None, "user": "carol", "gpus": 3, "nodes": 2},
                     {"run": "c", "run_id": "c-id", "user": None, "gpus": 1, "nodes": 1}]
    assert ended == ["b"]


def submit(cluster, config, fleets, user):
    runner = runs.Runner(config, fleets, emit=cluster.emit, clock=cluster.clock,
                         sleep=cluster.sleep, poll=1.0, environ={})
    runner.user = user
    return runner.run(wait=False)


def a_pass(cluster, fleets):
    return queue.QueuePass(fleets, runner_of=runs.runner_of, clock=cluster.clock,
                           sleep=cluster.sleep, poll=1.0, emit=cluster.emit).run()


def end(cluster, run):
    for node in cluster.nodes.values():
        for box in node.containers:
            if box["labels"][RUN_LABEL] == run:
                box["state"] = "exited"
                box["files"]["exit_code"] = "0"


def test_a_run_over_its_owners_cap_waits_as_pending_and_starts_once_use_drops(fake_hosts):
    fleets = [fleet_with_facts()]
    _runner, cluster = fake_hosts(task(), fleets)
    for node in cluster.nodes.values():
        node.limits = {"carol": {"runs": 1}}
    first = submit(cluster, task(name="first"), fleets, "carol")
    assert first["status"] not in (lc.RunStatus.FAILED, lc.RunStatus.PENDING)
    assert list(cluster.nodes["gpus-0"].admitted) == ["first"]
    # No retry at all: over the cap the run waits anyway, with the reason user limit.
    second = submit(cluster, task(name="second"), fleets, "carol")
    assert second["status"] == lc.RunStatus.PENDING
    assert second["reason"] == "user limit"
    assert second["message"] == ("waiting for user limit (queue position 1, kept on gpus-0): "
                                 "user limit: user carol: 1 of 1 runs in use, this run wants 1")
    entry = cluster.nodes["gpus-0"].queue["second"]
    assert (entry["state"], entry["reason"], entry["user"]) == ("pending", "user limit",
                                                                "carol")
    assert [p["job"]["run"] for _h, p in cluster.ops("start")] == ["first"]
    # Another user is not held, though the hosts are free for carol's second run too.
    other = submit(cluster, task(name="other"), fleets, "erin")
    assert other["status"] not in (lc.RunStatus.FAILED, lc.RunStatus.PENDING)
    # ps says why it waits.
    records = listing.with_queue([], {"gpus-0": [dict(entry)]})
    assert (records[0]["status"], records[0]["reason"]) == ("pending", "user limit")
    # A pass while carol's first run lives: it waits on, neither failed nor started.
    report = a_pass(cluster, fleets)
    assert report["started"] == [] and report["expired"] == [] and report["failed"] == []
    assert cluster.nodes["gpus-0"].queue["second"]["state"] == "pending"
    end(cluster, "first")
    assert a_pass(cluster, fleets)["started"] == ["second"]
    assert sorted(cluster.nodes["gpus-0"].admitted) == ["second"]


def test_a_pass_tries_a_capped_users_entries_once(fake_hosts):
    fleets = [fleet_with_facts(count=3)]
    _runner, cluster = fake_hosts(task(), fleets)
    for node in cluster.nodes.values():
        node.limits = {"carol": {"runs": 1}}
    submit(cluster, task(name="first"), fleets, "carol")
    for name in ("second", "third"):
        cluster.now += 1
        assert submit(cluster, task(name=name), fleets, "carol")["reason"] == "user limit"
    before = len(cluster.ops("admit"))
    assert a_pass(cluster, fleets)["started"] == []
    # second is refused; third, of the same owner, is not tried again in that pass.
    assert len(cluster.ops("admit")) == before + 1


def test_the_pass_starts_the_lighter_users_run_first(fake_hosts):
    fleets = [fleet_with_facts(count=1)]
    _runner, cluster = fake_hosts(task(), fleets)
    node = cluster.nodes["gpus-0"]
    node.containers.append(container("busy-0-0", {RUN_LABEL: "busy", JOB_LABEL: "0",
                                                  SUB_LABEL: "0", "gpufleet.blocks": "1"},
                                     state="running"))
    wait = {"on_events": ["no-capacity"], "duration": "1h"}
    assert submit(cluster, task(name="heavy", retry=wait), fleets, "hank")["status"] == "pending"
    cluster.now += 5
    assert submit(cluster, task(name="light", retry=wait), fleets, "lena")["status"] == "pending"
    node.usage_24h = {"hank": 36000.0, "lena": 60.0}
    end(cluster, "busy")
    report = a_pass(cluster, fleets)
    assert report["started"] == ["light"]
    assert node.queue["heavy"]["state"] == "pending"


def test_a_user_without_caps_costs_no_admit_request(fake_hosts):
    fleets = [fleet_with_facts()]
    _runner, cluster = fake_hosts(task(), fleets)
    for node in cluster.nodes.values():
        node.limits = {"dave": {"runs": 1}}
    submit(cluster, task(name="run-a"), fleets, "carol")
    submit(cluster, task(name="run-b"), fleets, "carol")
    assert cluster.ops("admit") == []
