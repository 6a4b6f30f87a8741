# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The run index (tasks.runindex on the controller, tasks.hostside.indexside on the record host): a
placement asks only the hosts it needs while the index can be trusted, and every host when it
cannot; what it skips never double-books a host, hides a live run of the same name, or leaves
an old run's containers behind.

The Runner tests use the fake hosts of fakes.py, several runners sharing one cluster (one
controller after another). The host-side tests use the real files under a temporary BOOK_ROOT.
"""

from __future__ import annotations

import json
import os

import pytest
from ansible_collections.gpufleet.cluster.plugins.module_utils.tasks import (
    listing,
    queue_records,
    run_preparation,
    runindex,
    runs,
    ssh,
    surveys,
)
from ansible_collections.gpufleet.cluster.plugins.module_utils.tasks.hostside import (
    booking,
    indexside,
)
from ansible_collections.gpufleet.cluster.plugins.module_utils.tasks import lifecycle as lc

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


@pytest.fixture
def shared(monkeypatch, tmp_path):
    """``(cluster, submit)``: one fake cluster of ``fleet_with_facts(count=6)``; ``submit(config)``
    runs a new Runner (a new submission, as from another ``gpufleet apply``) to its end and returns
    ``(result, ops)``, the requests it sent as ``[(host, op)]``."""
    monkeypatch.setenv("GPUFLEET_STATE_DIR", str(tmp_path / "state"))
    fleets = [fleet_with_facts(count=6)]
    cluster = Cluster([i["name"] for i in fleets[0]["instances"]], program=lambda job: (None, None))
    monkeypatch.setattr(surveys, "Node", lambda instance, root=None, connect_timeout=20: (
        cluster.nodes[instance["name"]]))
    monkeypatch.setattr(run_preparation, "run_key", lambda: {"private": "PRIVATE", "public": "PUBLIC"})
    monkeypatch.setattr(run_preparation, "ensure_image", lambda image, nodes, hosts, **kw: dict(
        (h, {"present": True, "entrypoint": None, "cmd": None, "working_dir": None})
        for h in hosts))

    def submit(config, queue_first=None):
        before = len(cluster.log)
        runner = runs.Runner(config, fleets, emit=cluster.emit, clock=cluster.clock,
                             sleep=cluster.sleep, poll=1.0, environ={})
        if queue_first is not None:
            runner.queue_first = lambda: queue_first(runner)
        result = runner.run(wait=False)
        return result, [(h, op) for h, op, _p in cluster.log[before:]]

    return cluster, submit


def statuses(ops):
    return sorted(h for h, op in ops if op == "status")


def alive(run, job=0):
    labels = {RUN_LABEL: run, JOB_LABEL: str(job), SUB_LABEL: "0", "gpufleet.blocks": "1"}
    return container("%s-%d-0" % (run, job), labels, state="running", running=STARTED)


def test_a_placement_asks_the_record_host_and_the_hosts_it_claims_once_the_index_is_whole(
        shared):
    cluster, submit = shared
    first, ops = submit(task(name="ra", nodes=2))
    assert first["status"] == "submitted"
    # No index yet: the record host said so, then every host was asked, and the record host
    # got the whole fleet's view.
    assert statuses(ops) == ["gpus-0"] + ["gpus-%d" % n for n in range(6)]
    assert sorted((h, op) for h, op in ops if op in ("reindex", "note")) == [
        ("gpus-0", "note"), ("gpus-0", "reindex")]   # both on their way while it claims
    index = cluster.nodes["gpus-0"].index["gpus"]
    assert cluster.now - 1 < index["completed"] <= cluster.now   # when that survey began
    assert index["entries"]["ra"] == {
        "hosts": {"gpus-0": cluster.now, "gpus-1": cluster.now}, "alive": ["gpus-0", "gpus-1"]}

    second, ops = submit(task(name="rb", nodes=2))
    assert second["status"] == "submitted"
    # The record host, then gpus-1, where its index says a may be alive; nothing else. b goes
    # to the first two free hosts, whose claims are granted at the first try.
    assert statuses(ops) == ["gpus-0", "gpus-1"]
    assert [h for h, op in ops if op == "claim"] == ["gpus-2", "gpus-3"]
    assert [j["host"] for j in second["jobs"]] == ["gpus-2", "gpus-3"]
    assert "reindex" not in [op for _h, op in ops]
    entries = cluster.nodes["gpus-0"].index["gpus"]["entries"]
    assert sorted(entries["rb"]["hosts"]) == ["gpus-2", "gpus-3"]

    third, ops = submit(task(name="rc", nodes=2))
    assert [j["host"] for j in third["jobs"]] == ["gpus-4", "gpus-5"]
    assert statuses(ops) == ["gpus-0", "gpus-1", "gpus-2", "gpus-3"]
    # With every host taken, the next run learns it from the five it asks, and fails without
    # claiming anything.
    fourth, ops = submit(task(name="rd"))
    assert fourth["reason"] == lc.NO_CAPACITY
    assert statuses(ops) == ["gpus-%d" % n for n in range(6)]
    assert "claim" not in [op for _h, op in ops]


def test_hosts_whose_runs_ended_stop_being_asked_after_the_next_submission(shared):
    cluster, submit = shared
    submit(task(name="ra", nodes=3))   # gpus-0, 1 and 2
    for node in cluster.nodes.values():
        for box in node.containers:
            box["state"] = "exited"
        node.claims = []
    cluster.now += indexside.IDLE_MARGIN
    result, ops = submit(task(name="rb"))
    # Still sent to the three hosts where ra was alive; they say it ended, and rb's note says so.
    assert statuses(ops) == ["gpus-0", "gpus-1", "gpus-2"]
    assert [j["host"] for j in result["jobs"]] == ["gpus-0"]
    note = [p for h, p in cluster.ops("note") if p["run"] == "rb"][0]
    assert note["idle"] == ["gpus-0", "gpus-1", "gpus-2"]
    _result, ops = submit(task(name="rc"))
    assert statuses(ops) == ["gpus-0"]


def test_a_run_placed_where_an_ended_run_was_noted_takes_that_mark_off(shared):
    cluster, submit = shared
    submit(task(name="ra", nodes=3))   # gpus-0, 1 and 2
    _ended(cluster, "ra")
    cluster.now += indexside.IDLE_MARGIN
    _result, ops = submit(task(name="rb", nodes=3))
    assert statuses(ops) == ["gpus-0", "gpus-1", "gpus-2"]   # where ra may have been alive
    entries = cluster.nodes["gpus-0"].index["gpus"]["entries"]
    assert entries["ra"]["alive"] == [] and entries["rb"]["alive"] == [
        "gpus-0", "gpus-1", "gpus-2"]
    # rb's hosts are named for rb alone now: applied again once it ended, it asks none of them.
    _ended(cluster, "rb")
    _result, ops = submit(task(name="rb", nodes=3))
    assert statuses(ops) == ["gpus-0"]


def test_the_index_tells_a_live_run_of_the_same_name_on_a_host_not_otherwise_asked(shared):
    cluster, submit = shared
    submit(task(name="warm"))   # a whole survey writes the index
    cluster.nodes["gpus-4"].containers.append(alive("ra"))
    cluster.nodes["gpus-0"].op_note({"fleet": "gpus", "run": "ra", "hosts": ["gpus-4"]})
    with pytest.raises(runs.RunError) as info:
        submit(task(name="ra"))
    assert "run ra is already running (on gpus-4)" in str(info.value)
    # The record host, then the host its index names for a: no other host was asked.
    ops = cluster.log[-2:]
    assert [(h, op) for h, op, _p in ops] == [("gpus-0", "status"), ("gpus-4", "status")]
    assert ops[0][2]["index"] == {"fleet": "gpus", "run": "ra"}


def test_an_old_run_of_the_same_name_is_cleared_from_a_host_the_index_names(shared):
    cluster, submit = shared
    submit(task(name="warm"))
    cluster.nodes["gpus-5"].containers.append(container(
        "ra-0-0", {RUN_LABEL: "ra", JOB_LABEL: "0", SUB_LABEL: "0"}, state="exited",
        running=STARTED, exit_code=0))
    cluster.nodes["gpus-0"].op_note({"fleet": "gpus", "run": "ra", "hosts": ["gpus-5"]})
    result, ops = submit(task(name="ra"))
    assert result["status"] == "submitted"
    assert [j["host"] for j in result["jobs"]] != ["gpus-5"]
    assert ("gpus-5", "remove") in ops
    assert cluster.nodes["gpus-5"].containers == []
    assert statuses(ops) == ["gpus-0", "gpus-5"]


def test_a_host_busy_behind_the_index_refuses_the_claim_and_the_next_try_asks_every_host(
        shared):
    cluster, submit = shared
    submit(task(name="warm"))   # placed on gpus-0
    cluster.nodes["gpus-1"].containers.append(alive("hand"))   # started without a note
    result, ops = submit(task(name="rb"))
    assert result["status"] == "submitted"
    assert [j["host"] for j in result["jobs"]] == ["gpus-2"]
    claims = [h for h, op in ops if op == "claim"]
    assert claims == ["gpus-1", "gpus-2"]
    # The first look asked the record host only; after the refusal, every host.
    assert ops[0] == ("gpus-0", "status")
    assert statuses(ops) == ["gpus-0"] + ["gpus-%d" % n for n in range(6)]
    assert [c["run"] for c in cluster.nodes["gpus-1"].claims] == []


@pytest.mark.parametrize("why", ["old", "queue", "record host down", "never whole"])
def test_every_host_is_asked_when_the_index_cannot_be_trusted(shared, why):
    cluster, submit = shared
    submit(task(name="warm"))
    record = cluster.nodes["gpus-0"]
    if why == "old":
        cluster.now += runindex.MAX_AGE + 1
    elif why == "queue":
        record.queue["waits"] = {"run": "waits", "run_id": "w", "state": "pending",
                                 "priority": 0, "submitted_epoch": 1}
    elif why == "record host down":
        record.down = True
    else:
        record.index["gpus"]["completed"] = None
    result, ops = submit(task(name="rb"))
    assert result["status"] == "submitted"
    assert statuses(ops)[-6:] == ["gpus-%d" % n for n in range(6)]
    if why == "record host down":
        # No index to note in: the run goes on without it, and not on the silent host.
        assert ("gpus-0", "note") not in ops
        assert [j["host"] for j in result["jobs"]] == ["gpus-1"]


def test_the_runner_says_whether_its_look_was_whole(shared, monkeypatch):
    """actions.submit passes over the queue only after a look at every host: a partial look
    shows a run's jobs in part, and a pass would stop the jobs it cannot see."""
    cluster, submit = shared
    runner = runs.Runner(task(name="rb"), [fleet_with_facts(count=6)], emit=cluster.emit,
                         clock=cluster.clock, sleep=cluster.sleep, environ={})
    runner.survey()
    assert runner.surveyed_whole is True   # no index yet
    submit(task(name="warm"))
    runner.survey()
    assert runner.surveyed_whole is False
    cluster.nodes["gpus-0"].down = True
    runner.survey()
    assert runner.surveyed_whole is True


def test_an_ended_queue_entry_does_not_stop_the_index_from_serving(shared):
    cluster, submit = shared
    submit(task(name="warm"))
    cluster.nodes["gpus-0"].queue["gone"] = {"run": "gone", "run_id": "g", "state": "failed",
                                             "priority": 0, "submitted_epoch": 1}
    _result, ops = submit(task(name="rb"))
    assert statuses(ops) == ["gpus-0"]


def test_a_note_that_fails_lets_the_hosts_go_and_the_run_is_placed_after_a_whole_survey(
        shared, monkeypatch):
    cluster, submit = shared
    submit(task(name="warm"))
    record = cluster.nodes["gpus-0"]
    real = record.op_note
    calls = []

    def note_once_down(payload):
        calls.append(payload["run"])
        if len(calls) == 1:
            raise ssh.NodeError("gpus-0", "unreachable over SSH: Connection timed out")
        return real(payload)

    monkeypatch.setattr(record, "op_note", note_once_down)
    result, ops = submit(task(name="rb"))
    assert result["status"] == "submitted"
    host = result["jobs"][0]["host"]
    assert ("gpus-1", "release") in ops
    assert calls == ["rb", "rb"]
    assert host in record.index["gpus"]["entries"]["rb"]["hosts"]


def test_a_note_that_always_fails_does_not_stop_a_run_on_a_whole_look(shared, monkeypatch):
    cluster, submit = shared
    submit(task(name="warm"))

    def down(payload):
        raise ssh.NodeError("gpus-0", "No space left on device")

    monkeypatch.setattr(cluster.nodes["gpus-0"], "op_note", down)
    result, ops = submit(task(name="rb"))
    assert result["status"] == "submitted"
    assert [op for _h, op in ops].count("note") == 2   # partial, released; whole, went on


def test_a_plan_in_check_mode_asks_every_host_and_writes_nothing(shared):
    cluster, submit = shared
    submit(task(name="warm"))
    before = len(cluster.log)
    runner = runs.Runner(task(name="rb"), [fleet_with_facts(count=6)], emit=cluster.emit,
                         clock=cluster.clock, sleep=cluster.sleep, environ={})
    runner.read_only = True
    placed = runner.place()
    assert [j["host"] for j in placed["jobs"]] == ["gpus-1"]
    ops = [(h, op) for h, op, _p in cluster.log[before:]]
    assert statuses(ops) == ["gpus-%d" % n for n in range(6)]
    assert set(op for _h, op in ops) == {"status"}


def test_a_waiting_entry_on_a_host_the_index_names_means_every_host_is_asked(shared):
    cluster, submit = shared
    submit(task(name="warm"))
    cluster.nodes["gpus-0"].op_note({"fleet": "gpus", "run": "rb", "hosts": ["gpus-3"]})
    cluster.nodes["gpus-0"].op_note({"fleet": "gpus", "run": "other", "hosts": ["gpus-3"]})
    cluster.nodes["gpus-3"].queue["waits"] = {"run": "waits", "run_id": "w",
                                              "state": "pending", "priority": 0,
                                              "submitted_epoch": 1}
    _result, ops = submit(task(name="rb"))
    # The record host and gpus-3 (where the index says another run may be alive), whose queue
    # holds a waiting run; then every host.
    assert statuses(ops) == sorted(["gpus-0", "gpus-3"] + ["gpus-%d" % n for n in range(6)])


def _ended(cluster, run):
    """Every container of ``run`` exited, its claims gone with them."""
    for node in cluster.nodes.values():
        for box in node.containers:
            if box["labels"][RUN_LABEL] == run:
                box["state"] = "exited"


def test_a_run_applied_again_takes_the_hosts_of_its_ended_run_as_free_without_asking_them(
        shared):
    """The usual re-apply: the index names the hosts of the ended run for its name alone, so
    they are not asked; their claims show they are free, and each start clears the old run's
    container before it starts the new one."""
    cluster, submit = shared
    submit(task(name="ra", nodes=3))   # gpus-0, 1 and 2, after a whole survey
    _ended(cluster, "ra")
    result, ops = submit(task(name="ra", nodes=3))
    assert result["status"] == "submitted"
    assert [j["host"] for j in result["jobs"]] == ["gpus-0", "gpus-1", "gpus-2"]
    assert statuses(ops) == ["gpus-0"]   # the record host alone
    claims = [(h, p) for h, op, p in cluster.log if op == "claim"][-3:]
    # No claim clears anything: the old run is cleared by the starts.
    assert [(h, p.get("replace")) for h, p in claims] == [
        ("gpus-0", False), ("gpus-1", False), ("gpus-2", False)]
    starts = [(h, p["job"]["claim"].get("replace")) for h, op, p in cluster.log
              if op == "start"]
    assert starts[-3:] == [("gpus-0", True), ("gpus-1", True), ("gpus-2", True)]
    assert "remove" not in [op for _h, op in ops]
    for host in ("gpus-0", "gpus-1", "gpus-2"):
        (box,) = cluster.nodes[host].containers
        assert box["labels"]["gpufleet.run-id"] == str(result["run_id"])
        assert box["state"] != "exited"


def test_a_host_taken_as_free_where_the_name_is_still_alive_refuses_and_nothing_is_cleared(
        shared):
    cluster, submit = shared
    first, _ops = submit(task(name="ra", nodes=3))
    # Two of the old run's nodes ended; the third still runs.
    for host in ("gpus-0", "gpus-1"):
        for box in cluster.nodes[host].containers:
            box["state"] = "exited"
    with pytest.raises(runs.RunError) as info:
        submit(task(name="ra", nodes=3))
    assert "run ra is already running (on gpus-2)" in str(info.value)
    # The claim of gpus-2 was refused, the others let go, and the ended nodes of the live run
    # kept what they left (a claim that clears at once would have removed gpus-0's).
    for host in ("gpus-0", "gpus-1", "gpus-2"):
        (box,) = cluster.nodes[host].containers
        assert box["labels"]["gpufleet.run-id"] == str(first["run_id"])
    assert not [c for node in cluster.nodes.values() for c in node.claims
                if c.get("run_id") != first["run_id"]]


def test_an_image_that_cannot_be_brought_clears_the_ended_run_before_recording_the_failure(
        shared, monkeypatch):
    cluster, submit = shared
    submit(task(name="ra", nodes=2))   # gpus-0 and 1
    _ended(cluster, "ra")

    def no_image(image, nodes, hosts, **kw):
        raise runs.RunError("image nope: not found")

    monkeypatch.setattr(run_preparation, "ensure_image", no_image)
    with pytest.raises(runs.RunError):
        submit(task(name="ra", nodes=2))
    # gpus-1 was taken as free unasked, so its claim cleared nothing; the failure's record
    # comes after the ended run's containers went, on both hosts.
    ops = [(h, op) for h, op, _p in cluster.log]
    for host in ("gpus-0", "gpus-1"):
        assert ops.index((host, "remove")) < ops.index((host, "record_failure"))
        assert cluster.nodes[host].containers == []


def test_a_host_taken_as_free_but_not_placed_on_is_asked_before_any_claim(shared):
    cluster, submit = shared
    submit(task(name="ra", nodes=3))   # gpus-0, 1 and 2
    _ended(cluster, "ra")
    # gpus-2 still runs a (the index does not know it: started by hand, say): the next ra is
    # smaller and goes elsewhere; gpus-2 is asked once the placement leaves it out.
    cluster.nodes["gpus-2"].containers = [alive("ra", job=2)]
    with pytest.raises(runs.RunError) as info:
        submit(task(name="ra", nodes=2))
    assert "run ra is already running (on gpus-2)" in str(info.value)
    ops = [(h, op) for h, op, _p in cluster.log[-2:]]
    assert ops == [("gpus-0", "status"), ("gpus-2", "status")]
    # Ended there, it is cleared by a request of its own, after the claims.
    cluster.nodes["gpus-2"].containers[0]["state"] = "exited"
    result, ops = submit(task(name="ra", nodes=2))
    assert result["status"] == "submitted"
    assert ops.index(("gpus-2", "remove")) > ops.index(("gpus-1", "claim"))
    assert cluster.nodes["gpus-2"].containers == []


@pytest.mark.parametrize("placed_on", [True, False])
def test_runs_waiting_on_a_host_taken_as_free_go_first(shared, placed_on):
    """A host the index names for the run's name alone is not asked, so its queue is read with
    its claim (or, not placed on, when it is asked): runs waiting there go first, as if the
    first look had seen them, and the run is placed after them."""
    cluster, submit = shared
    submit(task(name="ra", nodes=3))   # gpus-0, 1 and 2
    _ended(cluster, "ra")
    cluster.nodes["gpus-2"].queue["waits"] = {"run": "waits", "run_id": "w",
                                              "state": "pending", "priority": 0,
                                              "submitted_epoch": 1}
    passes = []

    def queue_first(runner):
        # As tasks.actions: a look at every host, and the waiting run goes (here: dequeued).
        runner.survey(whole=True)
        passes.append(runner.surveyed_whole)
        cluster.nodes["gpus-2"].queue.clear()

    result, ops = submit(task(name="ra", nodes=3 if placed_on else 2), queue_first=queue_first)
    assert result["status"] == "submitted"
    assert passes == [True]
    if placed_on:
        # Its claim said so: the claims were let go before the pass.
        assert [h for h, op in ops if op == "release"] == ["gpus-0", "gpus-1", "gpus-2"]
        assert ops.index(("gpus-2", "claim")) < ops.index(("gpus-2", "release"))
    else:
        assert "claim" not in [op for h, op in ops[:ops.index(("gpus-2", "status"))]]
        assert "release" not in [op for _h, op in ops]
    assert sorted(set(statuses(ops))) == ["gpus-%d" % n for n in range(6)]


# ---------------------------------------------------------------------------------------------
# The controller's pure pieces
# ---------------------------------------------------------------------------------------------


def test_the_record_host_is_the_lowest_numbered_instance_its_backend_does_not_call_gone():
    record = fleet_with_facts(count=3)
    for inst in record["instances"]:
        inst["backend"] = "local"
    record["instances"][0]["status"] = "provisioning"
    record["instances"].reverse()
    assert runindex.record_host(record) == "gpus-1"
    for inst in record["instances"]:
        inst["status"] = "terminated"
    assert runindex.record_host(record) is None
    nodes = dict((i["name"], None) for i in record["instances"])
    assert runindex.index_requests([record], nodes, "a") is None
    # An SSH fleet's status depends on what this controller measured: not used, so that every
    # controller picks the same host.
    ssh = fleet_with_facts(count=2)
    ssh["instances"][0]["status"] = "pending"
    assert runindex.record_host(ssh) == "gpus-0"


def test_the_waiting_states_are_the_queues():
    assert runindex.WAITING is queue_records.WAITING
    assert set(queue_records.WAITING) == {queue_records.PENDING, queue_records.ACTIVE}


def test_a_whole_survey_becomes_one_reindex_per_fleet_whose_record_host_answered():
    fleets = [fleet_with_facts("x", 3), fleet_with_facts("y", 2)]
    nodes = dict((i["name"], None) for f in fleets for i in f["instances"])
    containers = {"x-0": [alive("a")], "x-1": [], "y-1": [alive("b")]}
    claims = {"x-0": [], "x-1": [{"run": "c"}], "y-1": []}
    requests = runindex.reindex_requests(fleets, nodes, (containers, claims, {}, {"x-2": "down"}))
    # y's record host (y-0) did not answer: nothing to write there.
    assert requests == {"x-0": {"fleet": "x", "runs": {"a": ["x-0"], "c": ["x-1"]},
                                "alive": {"a": ["x-0"], "c": ["x-1"]},
                                "answered": ["x-0", "x-1"], "members": ["x-0", "x-1", "x-2"],
                                "age": 0.0, "complete": False}}


# ---------------------------------------------------------------------------------------------
# On the record host: the files
# ---------------------------------------------------------------------------------------------


@pytest.fixture
def book(tmp_path, monkeypatch):
    monkeypatch.setattr(booking, "BOOK_ROOT", str(tmp_path / "book"))
    return tmp_path / "book"


def test_notes_and_a_whole_rewrite_on_the_record_host(book, monkeypatch):
    now = [1000.0]
    monkeypatch.setattr(indexside.time, "time", lambda: now[0])
    assert indexside.index_view("gpus", "a") == {"age": None, "hosts": [], "busy": [],
                                                 "others": []}
    indexside.op_note({"fleet": "gpus", "run": "a", "hosts": ["gpus-1", "gpus-2"]})
    now[0] += indexside.NOTE_MARGIN + 1
    indexside.op_note({"fleet": "gpus", "run": "b", "hosts": ["gpus-3"]})
    # One whole survey: a is on gpus-2 only now, and ended; d lives on gpus-0; b was noted a
    # moment ago (its claims are on the way); gpus-4 did not answer, so what the index said of
    # it stays.
    indexside.op_note({"fleet": "gpus", "run": "c", "hosts": ["gpus-4"]})
    now[0] += 1
    indexside.op_reindex({"fleet": "gpus", "runs": {"a": ["gpus-2"], "d": ["gpus-0"]},
                          "alive": {"d": ["gpus-0"]},
                          "answered": ["gpus-0", "gpus-1", "gpus-2", "gpus-3"],
                          "complete": True})
    assert indexside.index_view("gpus", "a") == {"age": 0.0, "hosts": ["gpus-2"],
                                                 "busy": ["gpus-0", "gpus-3", "gpus-4"],
                                                 "others": ["gpus-0", "gpus-3", "gpus-4"]}
    # Where a run other than the one asked about may be alive: not where only d is.
    assert indexside.index_view("gpus", "d")["others"] == ["gpus-3", "gpus-4"]
    assert indexside.index_view("gpus", "b")["hosts"] == ["gpus-3"]
    assert indexside.index_view("gpus", "c")["hosts"] == ["gpus-4"]
    assert indexside.index_view("gpus", "d")["hosts"] == ["gpus-0"]
    now[0] += 30
    assert indexside.index_view("gpus", "a")["age"] == 30.0
    # Later, with every host answering and nothing found, the entries go.
    now[0] += indexside.NOTE_MARGIN
    indexside.op_reindex({"fleet": "gpus", "runs": {}, "complete": False,
                          "answered": ["gpus-%d" % n for n in range(5)]})
    assert sorted(os.listdir(str(book / "index" / "gpus"))) == ["complete"]
    assert json.loads((book / "index" / "gpus" / "complete").read_text())["at"] == 1000.0 + (
        indexside.NOTE_MARGIN + 2)
    assert oct(os.stat(str(book / "index" / "gpus" / "complete")).st_mode & 0o777) == "0o600"


def test_a_note_takes_idle_hosts_off_every_run_but_not_a_fresh_note(book, monkeypatch):
    now = [1000.0]
    monkeypatch.setattr(indexside.time, "time", lambda: now[0])
    indexside.op_note({"fleet": "gpus", "run": "a", "hosts": ["gpus-1", "gpus-2"]})
    now[0] += indexside.IDLE_MARGIN
    indexside.op_note({"fleet": "gpus", "run": "b", "hosts": ["gpus-3"]})
    now[0] += 1
    indexside.op_note({"fleet": "gpus", "run": "c", "hosts": ["gpus-4"],
                       "idle": ["gpus-1", "gpus-2", "gpus-3"]})
    # a ended on 1 and 2 (its containers stay, for the next run of its name to clear); b was
    # noted a second ago, after the look that found gpus-3 idle.
    assert indexside.index_view("gpus", "a") == {"age": None, "hosts": ["gpus-1", "gpus-2"],
                                                 "busy": ["gpus-3", "gpus-4"],
                                                 "others": ["gpus-3", "gpus-4"]}


def test_a_rewrite_from_a_slow_survey_keeps_what_was_noted_since_it_began(book, monkeypatch):
    now = [1000.0]
    monkeypatch.setattr(indexside.time, "time", lambda: now[0])
    indexside.op_note({"fleet": "gpus", "run": "a", "hosts": ["gpus-1"]})
    # A survey began at 1000 and took 200 s; it saw gpus-1 before a's claim landed there.
    now[0] += 200
    indexside.op_reindex({"fleet": "gpus", "runs": {}, "alive": {}, "answered": ["gpus-1"],
                          "members": ["gpus-0", "gpus-1"], "age": 200, "complete": True})
    view = indexside.index_view("gpus", "a")
    assert view == {"age": 200.0, "hosts": ["gpus-1"], "busy": ["gpus-1"], "others": []}
    # A host that left the fleet goes from every entry.
    indexside.op_note({"fleet": "gpus", "run": "b", "hosts": ["gpus-9"]})
    indexside.op_reindex({"fleet": "gpus", "runs": {}, "alive": {}, "answered": [],
                          "members": ["gpus-0", "gpus-1"], "age": 0, "complete": False})
    assert indexside.index_view("gpus", "b")["hosts"] == []
    # A marker from the future (the clock went back) is not trusted.
    now[0] -= 300
    assert indexside.index_view("gpus", "a")["age"] is None


def test_a_fleet_or_run_name_that_is_not_a_name_is_refused_on_the_host(book):
    with pytest.raises(Exception) as info:
        indexside.op_note({"fleet": "../etc", "run": "a", "hosts": []})
    assert "not a run name" in str(info.value)


def test_the_survey_carries_the_index_request_and_its_answer(book, monkeypatch):
    indexside.op_note({"fleet": "gpus", "run": "a", "hosts": ["gpus-1"]})
    monkeypatch.setattr(indexside, "_STATUS_BEFORE_INDEX", lambda payload: {"containers": []})
    answer = booking.BOOK_OPS["status"]({"index": {"fleet": "gpus", "run": "a"}})
    assert answer["index"] == {"age": None, "hosts": ["gpus-1"], "busy": ["gpus-1"],
                               "others": []}
    assert "index" not in booking.BOOK_OPS["status"]({})


def test_applying_one_name_again_and_again_costs_the_same_requests_each_time(shared):
    """Issue 32 (7): a user re-applies the same 4-node task all day, each time after ``stop
    -x``. Each re-run must send the same requests to the same hosts with answers of the same
    size, however many runs of the name came before: nothing kept per submission of the name
    (containers, claims, index entries, queue entries) may pile up and be read or cleared."""
    cluster, submit = shared
    answers = []
    for node in cluster.nodes.values():
        def call(op, payload=None, timeout=120, _call=node.call):
            answer = _call(op, payload, timeout)
            answers.append(len(json.dumps(answer, sort_keys=True)))
            return answer
        node.call = call
    config = task(name="train", nodes=4)
    sent = []
    for _round in range(8):
        before = len(cluster.log)
        del answers[:]
        result, ops = submit(config)
        assert result["status"] == "submitted"
        cost = sum(len(json.dumps(p, sort_keys=True)) for _h, _op, p in cluster.log[before:])
        sent.append((sorted(ops), cost + sum(answers)))
        stopped = listing.stop_run(cluster.nodes, "train", abort=True)
        assert stopped["status"] == lc.RunStatus.TERMINATED
        # What stop -x leaves: the latest run's containers (ps -a and logs show it), one
        # claim per host at most, one index entry for the name.
        boxes = [c for n in cluster.nodes.values() for c in n.containers]
        assert len(boxes) == 4
        assert set(c["labels"]["gpufleet.run-id"] for c in boxes) == {str(result["run_id"])}
        assert all(len(n.claims) <= 1 for n in cluster.nodes.values())
        assert list(cluster.nodes["gpus-0"].index["gpus"]["entries"]) == ["train"]
        assert not any(n.queue for n in cluster.nodes.values())
        cluster.now += 5   # a whole survey comes once per health period (MAX_AGE) anyway
    # The first submission surveyed every host (no index yet); from the second on, each one
    # is the same: the record host's status, four claims, the note, four starts.
    assert len(set(tuple(ops) for ops, _cost in sent[1:])) == 1, [ops for ops, _c in sent]
    assert sorted(op for _h, op in sent[1][0]) == ["claim"] * 4 + ["note"] + ["start"] * 4 + [
        "status"]
    costs = [cost for _ops, cost in sent[1:]]
    # The same bytes both ways (requests and answers), up to the digits of times and ids.
    assert max(costs) - min(costs) <= 32, costs
