# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""A detached run's host that stops answering (tasks.silence): ps and the queue's passes count
its silence across their looks, in the facts cache, and judge it by dstack's rule once it
has lasted JOB_DISCONNECTED_GRACE, as the watch of an attached run does."""

from __future__ import annotations

import time
import types

import pytest
from ansible_collections.gpufleet.cluster.plugins.module_utils.fleets import state
from ansible_collections.gpufleet.cluster.plugins.module_utils.tasks import actions, interruption
from ansible_collections.gpufleet.cluster.plugins.module_utils.tasks import lifecycle as lc
from ansible_collections.gpufleet.cluster.plugins.module_utils.tasks import listing, queue, runs, surveys
from ansible_collections.gpufleet.cluster.plugins.module_utils.tasks import silence
from ansible_collections.gpufleet.cluster.plugins.module_utils.tasks.ssh import NodeError

from ..configs import task
from .fakes import fleet_with_facts

GRACE = lc.JOB_DISCONNECTED_GRACE


GAP = silence.SERIES_GAP
DOWN = NodeError("h", "unreachable over SSH: Connection timed out", silent=True)


@pytest.mark.parametrize("cached, silent, answered, changes, seconds", [
    ({}, {"a"}, {"b"}, {"a": (1000.0, 1000.0)}, {"a": 0.0}),                 # first sight
    ({"a": (940.0, 990.0)}, {"a"}, set(), {"a": (940.0, 1000.0)}, {"a": 60.0}),  # the series
    ({"a": (40.0, 1000.0 - GAP)}, {"a"}, set(), {"a": (40.0, 1000.0)}, {"a": 960.0}),
    # Unseen for longer than the gap: a new series (it may have answered in between).
    ({"a": (40.0, 999.0 - GAP)}, {"a"}, set(), {"a": (1000.0, 1000.0)}, {"a": 0.0}),
    ({"a": (40.0, 60.0)}, set(), {"a"}, {"a": None}, {}),                    # it answers
    ({"a": (None, None)}, set(), {"a"}, {}, {}),                             # nothing to clear
    ({"a": (900.0, 1400.0)}, {"a"}, set(), {"a": (1000.0, 1000.0)}, {"a": 0.0}),  # clock back
    ({"a": ("x", 990.0)}, {"a"}, set(), {"a": (1000.0, 1000.0)}, {"a": 0.0}),  # bad values
    ({"a": (True, 990.0)}, {"a"}, set(), {"a": (1000.0, 1000.0)}, {"a": 0.0}),
    ({"a": (float("-inf"), 990.0)}, {"a"}, set(), {"a": (1000.0, 1000.0)}, {"a": 0.0}),
    ({"a": (float("nan"), 990.0)}, {"a"}, set(), {"a": (1000.0, 1000.0)}, {"a": 0.0}),
    ({"a": (950.0, None)}, {"a"}, set(), {"a": (1000.0, 1000.0)}, {"a": 0.0}),
    ({"c": (10.0, 990.0)}, {"a"}, set(), {"a": (1000.0, 1000.0)}, {"a": 0.0}),  # c not looked at
])
def test_a_look_counts_silence_from_the_first_of_a_series_of_silent_looks(
        cached, silent, answered, changes, seconds):
    assert silence.update(cached, silent, answered, 1000.0) == (changes, seconds)


def test_the_series_is_kept_in_the_facts_cache_of_the_hosts_fleet(tmp_path):
    root = str(tmp_path)
    fleets = [fleet_with_facts("gpus", count=3), fleet_with_facts("other", count=1),
              {"instances": [{"name": "x"}]}]
    # gpus-2 was never applied from here: it is not in the cache, and is not counted.
    applied = dict((h, v) for h, v in fleets[0]["facts"].items() if h != "gpus-2")
    state.write_facts(root, "gpus", applied)
    state.write_facts(root, "other", fleets[1]["facts"])
    # other-0 answered, with an error: not silent, not counted, its cache left alone.
    errors = {"gpus-1": DOWN, "gpus-2": DOWN, "other-0": NodeError("other-0", "status failed")}
    first = silence.note(root, fleets, errors, {"gpus-0": []}, now=1000.0)
    assert first == {"gpus-1": 0.0, "gpus-2": 0.0, "other-0": 0.0}
    cached = state.read_facts(root, "gpus")
    assert (cached["gpus-1"][silence.SINCE], cached["gpus-1"][silence.SEEN]) == (1000.0, 1000.0)
    assert "gpus-2" not in cached and silence.SINCE not in cached["gpus-0"]
    assert state.read_facts(root, "other") == fleets[1]["facts"]
    later = silence.note(root, fleets, errors, {}, now=1090.0)
    assert later == {"gpus-1": 90.0, "gpus-2": 0.0, "other-0": 0.0}
    # Check mode counts from the cache and writes nothing.
    assert silence.note(root, fleets, errors, {}, now=1100.0, check_mode=True)["gpus-1"] == 100.0
    assert state.read_facts(root, "gpus")["gpus-1"][silence.SEEN] == 1090.0
    # It answers again: the series ends, and the next silence counts from its own start.
    assert silence.note(root, fleets, {}, {"gpus-1": []}, now=1100.0) == {}
    assert state.read_facts(root, "gpus") == applied
    assert silence.note(root, fleets, {"gpus-1": DOWN}, {}, now=1200.0) == {"gpus-1": 0.0}
    # Without a state dir nothing is kept.
    assert silence.note(None, fleets, {"gpus-1": DOWN}, {}, now=1300.0) == {"gpus-1": 0.0}


def test_a_cache_that_cannot_be_written_only_counts_from_now(tmp_path, monkeypatch):
    root = str(tmp_path)
    fleets = [fleet_with_facts()]
    state.write_facts(root, "gpus", fleets[0]["facts"])

    def refused(*_a, **_k):
        raise state.StateError("cannot write")

    monkeypatch.setattr(state, "edit_facts", refused)
    assert silence.note(root, fleets, {"gpus-1": DOWN}, {}, now=5.0) == {"gpus-1": 0.0}


def detached_with_a_silent_host(fake_hosts):
    """A 2-node run started detached; then gpus-1 stops answering while its backend (here an
    SSH fleet, which only knows the host) has nothing to say of it."""
    fleets = [fleet_with_facts()]
    runner, cluster = fake_hosts(task(nodes=2), fleets)
    runner.run(wait=False)
    cluster.sleep(1)
    cluster.nodes["gpus-1"].down = True
    return fleets, cluster


def look(cluster):
    return surveys.survey_with_queues(dict((h, cluster.nodes[h]) for h in cluster.nodes))


@pytest.mark.parametrize("backend, spot, reason", [
    ("ssh", False, lc.INSTANCE_UNREACHABLE),
    ("aws", False, lc.INSTANCE_UNREACHABLE),
    ("aws", True, lc.INTERRUPTED_BY_NO_CAPACITY),
])
def test_ps_judges_a_silent_host_once_it_was_silent_for_the_grace(fake_hosts, backend, spot,
                                                                  reason):
    fleets, cluster = detached_with_a_silent_host(fake_hosts)
    for inst in fleets[0]["instances"]:
        inst.update(backend=backend, spot=spot)
    instances = interruption.instance_map(fleets)
    survey = look(cluster)
    (found,) = listing.run_records(survey[0], survey[3], instances, {"gpus-1": GRACE - 1})
    assert found["status"] == lc.RunStatus.RUNNING
    assert found["jobs"][1]["status"] == lc.JobStatus.RUNNING and found["jobs"][1]["unreachable"]
    assert found["message"] == "host gpus-1 does not answer (for %d s; its job fails after %d s)" % (
        GRACE - 1, GRACE)
    assert not queue.is_due(survey, instances, {"gpus-1": GRACE - 1})
    (found,) = listing.run_records(survey[0], survey[3], instances, {"gpus-1": GRACE})
    assert found["status"] == lc.RunStatus.TERMINATING   # rank 0 still runs: a pass is due
    assert [(j["job_num"], j["status"], j["reason"]) for j in found["jobs"]] == [
        (0, lc.JobStatus.RUNNING, None), (1, lc.JobStatus.FAILED, reason)]
    assert found["message"].startswith("host gpus-1: ") and "for %d s" % GRACE in found["message"]
    assert queue.is_due(survey, instances, {"gpus-1": GRACE})


def test_ps_counts_the_silence_across_its_looks_and_a_pass_ends_the_run(fake_hosts, tmp_path,
                                                                        monkeypatch):
    """The whole way a user sees it: ``gpufleet ps`` (actions.run_info) once, and again after
    the grace; then the queue's pass that ps runs when one is due stops rank 0, and the run
    ends failed. The host that answers again is forgotten."""
    fleets, cluster = detached_with_a_silent_host(fake_hosts)
    root = str(tmp_path / "state")
    state.write_facts(root, "gpus", fleets[0]["facts"])
    nodes = dict((h, cluster.nodes[h]) for h in cluster.nodes)
    monkeypatch.setattr(actions, "_fleets", lambda params: (root, fleets))
    monkeypatch.setattr(surveys, "nodes_of", lambda *_a, **_k: nodes)
    clock = {"now": 50000.0}
    fake = types.SimpleNamespace(time=lambda: clock["now"], monotonic=time.monotonic,
                                 sleep=time.sleep)
    monkeypatch.setattr(silence, "time", fake)   # when a look began, and its note

    first = actions.run_info({})
    (found,) = first["runs"]
    assert found["status"] == lc.RunStatus.RUNNING
    assert found["message"] == "host gpus-1 does not answer"
    assert list(first["unreachable_hosts"]) == ["gpus-1"] and not first["queue_due"]
    # The fleet it leaves unread is named, with the host and why (ps exits 1 on it).
    assert list(first["unread_fleets"]) == ["gpus"]
    assert list(first["unread_fleets"]["gpus"]) == ["gpus-1"]
    assert state.read_facts(root, "gpus")["gpus-1"][silence.SINCE] == 50000.0

    clock["now"] += GRACE
    later = actions.run_info({})
    (found,) = later["runs"]
    assert [(j["job_num"], j["status"], j["reason"]) for j in found["jobs"]] == [
        (0, lc.JobStatus.RUNNING, None), (1, lc.JobStatus.FAILED, lc.INSTANCE_UNREACHABLE)]
    assert later["queue_due"]

    # The pass (with the test's clock for its waits) judges the same way from the cache.
    report = queue.QueuePass(fleets, runner_of=runs.runner_of, root=root,
                             clock=lambda: clock["now"], sleep=cluster.sleep).run()
    assert report["stopped"] == ["train-0-0"]
    (found,) = actions.run_info({})["runs"]
    assert (found["status"], found["reason"]) == (lc.RunStatus.FAILED, "job_failed")

    # The host answers again, its job still running: the run that ended stays ended. The
    # next pass stops that job too (dstack's server stops it once the instance is back).
    cluster.nodes["gpus-1"].down = False
    back = actions.run_info({})
    assert back["unread_fleets"] == {}
    assert state.read_facts(root, "gpus") == fleets[0]["facts"]
    (found,) = back["runs"]
    assert found["status"] == lc.RunStatus.TERMINATING and back["queue_due"]
    report = queue.QueuePass(fleets, runner_of=runs.runner_of, root=root,
                             clock=lambda: clock["now"], sleep=cluster.sleep).run()
    assert report["stopped"] == ["train-1-0"]
    (found,) = actions.run_info({})["runs"]
    assert (found["status"], found["reason"]) == (lc.RunStatus.TERMINATED, lc.TERMINATED_BY_SERVER)
    assert [(j["job_num"], j["status"], j["reason"]) for j in found["jobs"]] == [
        (0, lc.JobStatus.TERMINATED, lc.TERMINATED_BY_SERVER),
        (1, lc.JobStatus.TERMINATED, lc.TERMINATED_BY_SERVER)]


def test_a_pass_without_a_state_dir_does_not_judge_a_silent_host_running_on(fake_hosts):
    """A QueuePass made without a root (as attached runners' tests make it) counts nothing:
    the host may come back."""
    fleets, cluster = detached_with_a_silent_host(fake_hosts)
    report = queue.QueuePass(fleets, runner_of=runs.runner_of, clock=cluster.clock,
                             sleep=cluster.sleep).run(look(cluster))
    assert report["stopped"] == []


def test_commands_changing_the_facts_cache_at_once_keep_each_others_changes(tmp_path):
    """ps noting a silent host, a health read and an apply all rewrite a fleet's facts.json:
    each read-change-write holds the file's lock, so none undoes another's change."""
    import threading

    root = str(tmp_path)
    hosts = ["h%d" % i for i in range(8)]
    state.write_facts(root, "gpus", dict((h, {"cpus": 1}) for h in hosts))
    start = threading.Barrier(len(hosts))

    def worker(host):
        start.wait(10)
        for n in range(25):
            state.update_facts(root, "gpus", {host: {"n%d" % n: n}})

    threads = [threading.Thread(target=worker, args=(h,)) for h in hosts]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    facts = state.read_facts(root, "gpus")
    assert all(sorted(facts[h]) == sorted(["cpus"] + ["n%d" % n for n in range(25)])
               for h in hosts), dict((h, len(v)) for h, v in facts.items())
