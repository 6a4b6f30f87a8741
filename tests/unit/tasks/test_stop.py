# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""actions.run_stop: how often it asks the hosts (a stop should cost one look at every host, the
stop, and a look at the run's own hosts), and when it moves the queue."""

from __future__ import annotations

import pytest
from ansible_collections.gpufleet.cluster.plugins.module_utils.tasks import actions, surveys

from tests.unit.configs import task
from tests.unit.tasks.fakes import fleet_with_facts


@pytest.fixture
def started(fake_hosts, monkeypatch):
    """A 2-node run started (detached) on a 4-host fleet, and entry routed to the fake hosts."""
    fleets = [fleet_with_facts(count=4)]
    runner, cluster = fake_hosts(task(nodes=2), fleets)
    runner.run(wait=False)
    monkeypatch.setattr(actions, "_fleets", lambda params: ("/state", fleets))
    monkeypatch.setattr(surveys, "nodes_of", lambda found, root=None: dict(cluster.nodes))
    moved = []
    monkeypatch.setattr(actions, "drive_queue", lambda *a, **k: moved.append(a) or {})
    del cluster.log[:]
    return cluster, moved


def statuses(cluster):
    return sorted(h for h, op, _p in cluster.log if op == "status")


def test_a_stop_looks_at_every_host_once_then_only_at_the_runs_hosts(started):
    cluster, moved = started
    answer = actions.run_stop({"name": "train", "abort": False, "fleets": [], "state_dir": None})
    assert answer["changed"] and sorted(answer["run"]["stopped"]) == ["train-0-0", "train-1-0"]
    assert answer["run"]["name"] == "train"
    assert statuses(cluster) == ["gpus-0", "gpus-0", "gpus-1", "gpus-1", "gpus-2", "gpus-3"]
    assert sorted(h for h, op, _p in cluster.log if op == "stop") == ["gpus-0", "gpus-1"]
    assert moved == []   # nothing waits in the queue: no pass over it


@pytest.mark.parametrize("state, passes", [("pending", 1), ("active", 1), ("failed", 0),
                                           ("terminated", 0)])
def test_a_stop_moves_the_queue_when_something_waits_in_it(started, state, passes):
    """A pass follows the stop when an entry waits (pending) or follows a run (active); the
    ended entries a host keeps for a day for ps leave nothing for a pass to do."""
    cluster, moved = started
    cluster.nodes["gpus-3"].queue["later"] = {
        "run": "later", "run_id": "x", "state": state, "priority": 0,
        "submitted_at": "2026-01-01T09:00:00Z", "config": {}}
    actions.run_stop({"name": "train", "abort": True, "fleets": [], "state_dir": None})
    assert len(moved) == passes


def test_a_stop_in_check_mode_says_a_change_for_a_run_with_jobs_up_and_stops_nothing(started):
    cluster, _moved = started
    answer = actions.run_stop({"name": "train", "abort": False, "fleets": [], "state_dir": None},
                              check_mode=True)
    assert answer["changed"] and answer["run"]["name"] == "train"
    assert [op for _h, op, _p in cluster.log if op == "stop"] == []


def test_a_stop_with_delete_removes_the_run_from_its_hosts(started):
    cluster, _moved = started
    answer = actions.run_stop({"name": "train", "abort": True, "fleets": [], "state_dir": None,
                               "delete": True})
    assert answer["run"]["deleted"] == ["gpus-0", "gpus-1"]
    assert sorted(h for h, op, p in cluster.log if op == "remove" and p["run"] == "train") == [
        "gpus-0", "gpus-1"]
    assert all(not n.containers for n in cluster.nodes.values())
    # Gone: ps no longer lists it, a stop says so, and deleting it again changes nothing.
    with pytest.raises(actions.ActionError, match="no run or job array named train"):
        actions.run_stop({"name": "train", "abort": False, "fleets": [], "state_dir": None})
    again = actions.run_stop({"name": "train", "abort": False, "fleets": [], "state_dir": None,
                              "delete": True})
    assert again == {"run": {"name": "train", "deleted": []}, "changed": False}


def test_a_delete_takes_the_runs_queue_entry_too(started):
    cluster, _moved = started
    entry = {"run": "train", "run_id": cluster.nodes["gpus-0"].containers[0]["labels"][
        "gpufleet.run-id"], "state": "failed", "priority": 0,
        "submitted_at": "2026-01-01T09:00:00Z", "config": {}}
    cluster.nodes["gpus-3"].queue["train"] = entry
    answer = actions.run_stop({"name": "train", "abort": True, "fleets": [], "state_dir": None,
                               "delete": True})
    assert answer["run"]["deleted"] == ["gpus-0", "gpus-1", "gpus-3"]
    assert cluster.nodes["gpus-3"].queue == {}


def test_a_run_that_only_waits_in_the_queue_is_deleted_from_it(started):
    cluster, _moved = started
    cluster.nodes["gpus-3"].queue["later"] = {
        "run": "later", "run_id": "x", "state": "pending", "priority": 0,
        "submitted_at": "2026-01-01T09:00:00Z", "config": {}}
    answer = actions.run_stop({"name": "later", "abort": False, "fleets": [],
                               "state_dir": None, "delete": True})
    assert (answer["changed"], answer["run"]["deleted"]) == (True, ["gpus-3"])
    assert "later" not in cluster.nodes["gpus-3"].queue


def test_a_delete_with_a_host_that_does_not_answer_changes_nothing(started):
    cluster, _moved = started
    cluster.nodes["gpus-1"].down = True
    with pytest.raises(actions.ActionError, match="cannot delete run train: gpus-1 of its "
                                                  "hosts does not answer; nothing was changed"):
        actions.run_stop({"name": "train", "abort": False, "fleets": [], "state_dir": None,
                          "delete": True})
    assert not [op for _h, op, _p in cluster.log if op in ("stop", "remove")]
