# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""A second copy of each waiting queue entry on the fleet's next host, and the handover when
the queue host is lost (tasks.queue_mirror), on the fake hosts of fakes.py, which keep entries
and copies as tasks.hostside.booking and mirrorside do.
"""

from __future__ import annotations

import copy as copies

from ansible_collections.gpufleet.cluster.plugins.module_utils.tasks import lifecycle as lc
from ansible_collections.gpufleet.cluster.plugins.module_utils.tasks import (
    interruption,
    queue,
    queue_mirror,
    queue_records,
    surveys,
)

from ..configs import task
from .fakes import RUN_LABEL, WAIT, a_pass, fleet_with_facts, free, occupy, submit_detached


def instances_of(fleets):
    return interruption.instance_map(fleets)


def lose(cluster, fleets, host):
    """The queue host is gone: down, and its fleet no longer lists it (a second on)."""
    cluster.now += 1
    cluster.nodes[host].down = True
    for fleet in fleets:
        fleet["instances"] = [i for i in fleet["instances"] if i["name"] != host]


def test_a_waiting_entry_has_a_copy_on_the_next_host_that_follows_it(fake_hosts):
    fleets = [fleet_with_facts(count=3)]
    _runner, cluster = fake_hosts(task(), fleets, program=lambda job: (None, None))
    occupy(cluster, ["gpus-0", "gpus-1", "gpus-2"])
    assert submit_detached(fake_hosts, cluster, task(retry=WAIT), fleets)["status"] == \
        lc.RunStatus.PENDING
    entry = cluster.nodes["gpus-0"].queue["train"]
    kept = cluster.nodes["gpus-1"].mirror["train"]
    assert kept["run_id"] == entry["run_id"] and kept["config"] == entry["config"]
    assert cluster.nodes["gpus-2"].mirror == {}
    # The entry changes (its priority, by another controller): the next pass sees the
    # copy's digest differ, and the copy follows.
    cluster.nodes["gpus-0"].op_update({"run": "train", "run_id": entry["run_id"],
                                       "changes": {"priority": 70}})
    a_pass(cluster, fleets)
    assert cluster.nodes["gpus-1"].mirror["train"]["priority"] == 70
    # A copy on a host that is not the mirror host goes once the mirror host's is current.
    cluster.nodes["gpus-2"].mirror["train"] = copies.deepcopy(
        cluster.nodes["gpus-1"].mirror["train"])
    a_pass(cluster, fleets)
    assert cluster.nodes["gpus-2"].mirror == {} and "train" in cluster.nodes["gpus-1"].mirror
    # Stopped while it waits: the entry ends and its copy goes.
    from ansible_collections.gpufleet.cluster.plugins.module_utils.tasks import actions

    actions._cancel_queued(surveys.nodes_of(fleets), {
        "name": "train", "run_id": entry["run_id"], "status": "pending",
        "queued_on": "gpus-0"}, False)
    queue_mirror.follow(surveys.nodes_of(fleets), fleets, "gpus-0", "train")
    assert cluster.nodes["gpus-0"].queue["train"]["state"] == "terminated"
    assert cluster.nodes["gpus-1"].mirror == {}


def test_a_lost_queue_host_hands_its_entries_over_and_the_next_pass_starts_them(fake_hosts):
    fleets = [fleet_with_facts(count=3)]
    _runner, cluster = fake_hosts(task(), fleets, program=lambda job: (None, None))
    occupy(cluster, ["gpus-0", "gpus-1", "gpus-2"])
    first = submit_detached(fake_hosts, cluster, task(name="one", retry=WAIT), fleets)
    cluster.now += 1
    submit_detached(fake_hosts, cluster, task(name="two", retry=WAIT), fleets)
    assert first["queued_on"] == "gpus-0"
    assert sorted(cluster.nodes["gpus-1"].mirror) == ["one", "two"]
    lose(cluster, fleets, "gpus-0")
    # ps sees work: the copies of a lost queue host wait for a pass.
    survey = surveys.survey_with_queues(surveys.nodes_of(fleets))
    assert queue.is_due(survey, instances_of(fleets)) is True
    assert queue_mirror.handover_due(survey, instances_of(fleets)) is True
    free(cluster)
    report = a_pass(cluster, fleets)
    assert sorted(report["started"]) == ["one", "two"], report
    said = [e["message"] for _t, e in cluster.events if e.get("kind") == "info"]
    assert "run one: its queue host gpus-0 is gone; gpus-1 keeps its entry now" in said, said
    assert cluster.nodes["gpus-1"].mirror == {} and cluster.nodes["gpus-2"].mirror == {}
    started = set(c["labels"][RUN_LABEL] for n in ("gpus-1", "gpus-2")
                  for c in cluster.nodes[n].containers if c["state"] != "exited")
    assert started == {"one", "two"}


def test_a_host_that_only_does_not_answer_keeps_its_entries(fake_hosts):
    """Silent is not lost: the host may come back with its entries, so nothing moves."""
    fleets = [fleet_with_facts(count=3)]
    _runner, cluster = fake_hosts(task(), fleets, program=lambda job: (None, None))
    occupy(cluster, ["gpus-0", "gpus-1", "gpus-2"])
    submit_detached(fake_hosts, cluster, task(retry=WAIT), fleets)
    cluster.nodes["gpus-0"].down = True
    survey = surveys.survey_with_queues(surveys.nodes_of(fleets))
    assert not queue_mirror.handover_due(survey, {i["name"]: i for i in fleets[0]["instances"]})
    a_pass(cluster, fleets)
    assert "train" in cluster.nodes["gpus-1"].mirror and cluster.nodes["gpus-1"].queue == {}


def test_a_copy_older_than_the_start_is_adopted_active_and_never_started_twice(fake_hosts):
    fleets = [fleet_with_facts(count=3)]
    _runner, cluster = fake_hosts(task(), fleets, program=lambda job: (None, None))
    occupy(cluster, ["gpus-0", "gpus-1", "gpus-2"])
    submit_detached(fake_hosts, cluster, task(retry=dict(
        WAIT, on_events=["no-capacity", "error"])), fleets)
    stale = copies.deepcopy(cluster.nodes["gpus-1"].mirror["train"])
    assert stale["state"] == "pending"
    free(cluster)
    occupy(cluster, ["gpus-0"], run="second")
    report = a_pass(cluster, fleets)
    assert report["started"] == ["train"]
    assert cluster.nodes["gpus-1"].mirror["train"]["state"] == "active"   # it followed
    # The queue host went before a pass brought the copy up to date.
    cluster.nodes["gpus-1"].mirror["train"] = stale
    lose(cluster, fleets, "gpus-0")
    report = a_pass(cluster, fleets)
    assert report["started"] == [], report
    entry = cluster.nodes["gpus-1"].queue["train"]
    assert (entry["state"], entry["handed_from"]) == ("active", "gpus-0")
    assert len([c for n in cluster.nodes.values() for c in n.containers
                if c["labels"][RUN_LABEL] == "train"]) == 1


def test_the_old_queue_host_back_loses_the_entries_handed_over(fake_hosts):
    fleets = [fleet_with_facts(count=3)]
    everything = copies.deepcopy(fleets[0]["instances"])
    _runner, cluster = fake_hosts(task(), fleets, program=lambda job: (None, None))
    occupy(cluster, ["gpus-0", "gpus-1", "gpus-2"])
    submit_detached(fake_hosts, cluster, task(retry=WAIT), fleets)
    lose(cluster, fleets, "gpus-0")
    a_pass(cluster, fleets)
    assert cluster.nodes["gpus-1"].queue["train"]["handed_from"] == "gpus-0"
    # gpus-2 now keeps the copy: it is gpus-1's next host.
    assert "train" in cluster.nodes["gpus-2"].mirror
    cluster.nodes["gpus-0"].down = False
    fleets[0]["instances"] = everything
    a_pass(cluster, fleets)
    assert "train" not in cluster.nodes["gpus-0"].queue
    assert cluster.nodes["gpus-1"].queue["train"]["state"] == "pending"
    assert queue_records.mirror_host(fleets, "gpus-1") == "gpus-0"


def test_a_one_host_fleet_keeps_no_copy(fake_hosts):
    fleets = [fleet_with_facts(count=1)]
    _runner, cluster = fake_hosts(task(), fleets, program=lambda job: (None, None))
    occupy(cluster, ["gpus-0"])
    submit_detached(fake_hosts, cluster, task(retry=WAIT), fleets)
    assert queue_records.mirror_host(fleets, "gpus-0") is None
    assert "train" in cluster.nodes["gpus-0"].queue
    # The runner made the entry; no other host was asked for a copy.
    assert [op for _h, op, _p in cluster.log if op.startswith("mirror")] == []


def test_the_old_queue_host_back_after_the_run_started_does_not_start_it_again(fake_hosts):
    fleets = [fleet_with_facts(count=3)]
    everything = copies.deepcopy(fleets[0]["instances"])
    _runner, cluster = fake_hosts(task(), fleets, program=lambda job: (None, None))
    occupy(cluster, ["gpus-0", "gpus-1", "gpus-2"])
    submit_detached(fake_hosts, cluster, task(retry=WAIT), fleets)
    lose(cluster, fleets, "gpus-0")
    free(cluster)
    assert a_pass(cluster, fleets)["started"] == ["train"]
    assert "train" not in cluster.nodes["gpus-1"].queue   # started: no entry kept
    cluster.nodes["gpus-0"].down = False
    fleets[0]["instances"] = everything
    report = a_pass(cluster, fleets)
    assert report["started"] == [], report
    assert "train" not in cluster.nodes["gpus-0"].queue


# -- scheduled runs (tasks.rearm) -----------------------------------------------------------------

NIGHTLY = {"cron": ["0 2 * * *"]}


def armed_on(cluster):
    return sorted(h for h, n in cluster.nodes.items()
                  if any(c["state"] == "scheduled" for c in n.containers))


def test_a_scheduled_run_keeps_an_entry_and_is_armed_again_when_its_host_is_lost(fake_hosts):
    fleets = [fleet_with_facts(count=3)]
    runner, cluster = fake_hosts(task(schedule=NIGHTLY), fleets)
    occupy(cluster, ["gpus-0"])   # another run: the scheduled one is kept on gpus-1
    result = runner.run(wait=False)
    assert result["reason"] == lc.WAITING_FOR_SCHEDULE and armed_on(cluster) == ["gpus-1"]
    entry = cluster.nodes["gpus-0"].queue["train"]
    assert (entry["state"], entry["hosts"]) == ("scheduled", ["gpus-1"])
    assert cluster.nodes["gpus-1"].mirror["train"]["state"] == "scheduled"
    # ps lists the run from its host, once.
    survey = surveys.survey_with_queues(surveys.nodes_of(fleets))
    assert queue.is_due(survey, instances_of(fleets)) is False
    lose(cluster, fleets, "gpus-1")
    assert queue.is_due(surveys.survey_with_queues(surveys.nodes_of(fleets)),
                        instances_of(fleets)) is True
    report = a_pass(cluster, fleets)
    assert report["rearmed"] == ["train"], report
    assert armed_on(cluster) == ["gpus-1", "gpus-2"]   # gpus-1 is down: its job is stale
    entry = cluster.nodes["gpus-0"].queue["train"]
    assert (entry["state"], entry["hosts"], entry["run_id"]) == (
        "scheduled", ["gpus-2"], runner.run_id)
    said = [e["message"] for _t, e in cluster.events if e.get("kind") == "info"]
    assert "run train: its host gpus-1 is lost; its schedule is kept on gpus-2 now" in said
    # The lost host back, with its stale job: the next pass removes it; none is armed twice.
    cluster.nodes["gpus-1"].down = False
    fleets[0]["instances"] = fleet_with_facts(count=3)["instances"]
    assert queue.is_due(surveys.survey_with_queues(surveys.nodes_of(fleets)),
                        instances_of(fleets)) is True   # the stray job
    assert a_pass(cluster, fleets)["rearmed"] == []
    assert armed_on(cluster) == ["gpus-2"]


def test_a_stopped_schedule_is_not_armed_again(fake_hosts):
    from ansible_collections.gpufleet.cluster.plugins.module_utils.tasks import actions

    fleets = [fleet_with_facts(count=3)]
    runner, cluster = fake_hosts(task(schedule=NIGHTLY), fleets)
    occupy(cluster, ["gpus-0"])
    runner.run(wait=False)
    survey = surveys.survey_with_queues(surveys.nodes_of(fleets))
    actions.rearm.drop_entries(surveys.nodes_of(fleets), fleets, survey[2], "train")
    assert cluster.nodes["gpus-0"].queue == {} and cluster.nodes["gpus-1"].mirror == {}
    lose(cluster, fleets, "gpus-1")
    assert a_pass(cluster, fleets)["rearmed"] == []
    assert armed_on(cluster) == ["gpus-1"]


def test_a_schedule_that_cannot_be_armed_again_now_keeps_its_entry(fake_hosts):
    fleets = [fleet_with_facts(count=2)]
    runner, cluster = fake_hosts(task(schedule=NIGHTLY), fleets)
    occupy(cluster, ["gpus-0"])
    runner.run(wait=False)
    lose(cluster, fleets, "gpus-1")   # only gpus-0 is left, and another run holds it
    report = a_pass(cluster, fleets)
    assert report["rearmed"] == []
    entry = cluster.nodes["gpus-0"].queue["train"]
    assert entry["state"] == "scheduled" and entry["hosts"] == ["gpus-1"]
    assert entry["message"].startswith("its host gpus-1 is lost; arming it again failed: ")
    free(cluster)
    assert a_pass(cluster, fleets)["rearmed"] == ["train"]
    assert armed_on(cluster) == ["gpus-0", "gpus-1"]


def test_a_new_run_of_the_name_makes_the_schedule_entry_stale_and_is_left_alone(fake_hosts):
    fleets = [fleet_with_facts(count=3)]
    runner, cluster = fake_hosts(task(schedule=NIGHTLY), fleets)
    occupy(cluster, ["gpus-0"])
    runner.run(wait=False)
    cluster.nodes["gpus-1"].containers = []   # the scheduled run was removed by hand...
    occupy(cluster, ["gpus-2"], run="train")  # ...and a run of its name applied since
    cluster.nodes["gpus-2"].containers[0]["labels"]["gpufleet.run-id"] = "another-id"
    survey = surveys.survey_with_queues(surveys.nodes_of(fleets))
    assert queue.is_due(survey, instances_of(fleets)) is True
    report = a_pass(cluster, fleets)
    assert report["rearmed"] == [] and "train" not in cluster.nodes["gpus-0"].queue
    assert [c["labels"]["gpufleet.run-id"] for c in cluster.nodes["gpus-2"].containers] == [
        "another-id"]


def test_a_stop_of_a_scheduled_run_whose_hosts_are_all_lost_ends_its_entry(fake_hosts,
                                                                           monkeypatch):
    from ansible_collections.gpufleet.cluster.plugins.module_utils.tasks import actions

    fleets = [fleet_with_facts(count=3)]
    runner, cluster = fake_hosts(task(schedule=NIGHTLY), fleets)
    occupy(cluster, ["gpus-0"])
    runner.run(wait=False)
    lose(cluster, fleets, "gpus-1")
    monkeypatch.setattr(actions, "_fleets", lambda params: ("/state", fleets))
    answer = actions.run_stop({"name": "train", "abort": False, "fleets": [],
                               "state_dir": None})
    assert answer == {"run": {"name": "train", "stopped": [], "deleted": []}, "changed": True}
    assert cluster.nodes["gpus-0"].queue == {} and cluster.nodes["gpus-2"].mirror == {}
    assert a_pass(cluster, fleets)["rearmed"] == []


def test_of_two_entries_of_one_run_id_the_one_written_last_counts(fake_hosts):
    """An old queue host back with its entry, and the run's entry written anew meanwhile on
    another host (an attached run's resubmission, say): one pass leaves the newer one only."""
    fleets = [fleet_with_facts(count=3)]
    _runner, cluster = fake_hosts(task(), fleets, program=lambda job: (None, None))
    occupy(cluster, ["gpus-0", "gpus-1", "gpus-2"])
    submit_detached(fake_hosts, cluster, task(retry=WAIT), fleets)
    older = copies.deepcopy(cluster.nodes["gpus-0"].queue["train"])
    cluster.now += 1
    cluster.nodes["gpus-2"].op_enqueue({"entry": dict(older, priority=5)})
    a_pass(cluster, fleets)
    assert "train" not in cluster.nodes["gpus-0"].queue
    assert cluster.nodes["gpus-2"].queue["train"]["priority"] == 5


def test_a_late_copy_of_an_entry_handed_over_is_neither_kept_nor_adopted_again(fake_hosts):
    fleets = [fleet_with_facts(count=3)]
    _runner, cluster = fake_hosts(task(), fleets, program=lambda job: (None, None))
    occupy(cluster, ["gpus-0", "gpus-1", "gpus-2"])
    submit_detached(fake_hosts, cluster, task(retry=WAIT), fleets)
    late = copies.deepcopy(cluster.nodes["gpus-1"].mirror["train"])
    lose(cluster, fleets, "gpus-0")
    a_pass(cluster, fleets)
    keeper = cluster.nodes["gpus-1"]
    assert keeper.queue["train"]["handed_from"] == "gpus-0"
    # A slow controller's copy arrives after the handover: refused.
    assert keeper.op_mirror_put({"entry": late})["kept"] is False
    # One written there before it (a crash between adoption and the copy's removal) goes
    # at the next adoption try, which adopts nothing.
    keeper.mirror["train"] = late
    assert keeper.op_mirror_adopt({"run": "train", "run_id": late["run_id"], "host": "gpus-1",
                                   "from": "gpus-0"})["dropped"] is True
    assert keeper.mirror == {}


def test_an_attached_run_that_waits_follows_its_entry_to_the_host_that_adopted_it(fake_hosts):
    fleets = [fleet_with_facts(count=3)]
    runner, cluster = fake_hosts(task(retry=WAIT), fleets, program=lambda job: (1, 0))
    occupy(cluster, ["gpus-0", "gpus-1", "gpus-2"])
    begun = cluster.now

    def hook(cluster):
        if cluster.now >= begun + 10 and not cluster.nodes["gpus-0"].down:
            lose(cluster, fleets, "gpus-0")
            free(cluster)

    cluster.hook = hook
    result = runner.run(wait=True)
    assert result["status"] == lc.RunStatus.DONE, result
    assert all(c["labels"][RUN_LABEL] != "train" for c in cluster.nodes["gpus-0"].containers)
    # Its own pass handed the entry over, then gave it its submission.
    assert [(h, p["from"]) for h, op, p in cluster.log if op == "mirror_adopt"] == [
        ("gpus-1", "gpus-0")]
    assert cluster.nodes["gpus-1"].queue == {}
