# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Every run names its submitter (issue 34): the task action's ``user`` (default
``$GPUFLEET_USER``, else the login name), kept by the Runner, written to the containers'
``gpufleet.user`` label (and so to the job folders' records), to the queue entry and the run
index, and read back as the run record's ``user`` (None for runs made before)."""

from __future__ import annotations

import pytest
from ansible_collections.gpufleet.cluster.plugins.module_utils.tasks import (
    actions, container, listing, rankplan, runbook, runindex, runs)
from ansible_collections.gpufleet.cluster.plugins.module_utils.tasks import lifecycle as lc
from ansible_collections.gpufleet.cluster.plugins.module_utils.tasks.hostside import booking, indexside
from ansible_collections.gpufleet.cluster.plugins.module_utils.teams import identity

from ..configs import task
from .fakes import a_pass, fleet_with_facts, free, occupy

RUN = {"name": "train", "id": "3f2a9c", "submission": 0, "submitted_at": "2026-08-01T10:00:00Z"}
WAIT = {"on_events": ["no-capacity"], "duration": "10m"}


def placed_job(num, gpus=0):
    return {"job_num": num, "group": None, "host": "gpus-%d" % num, "fleet": "gpus",
            "backend": "ssh", "region": "remote", "price": None, "spot": False,
            "internal_ip": "10.1.0.%d" % (num + 2), "whole_host": True, "blocks": 1,
            "total_blocks": 1, "cpus": 16, "memory_mib": 262144, "disk_mib": 1000000,
            "gpu_vendor": "nvidia" if gpus else "none", "gpu_name": "H100" if gpus else None,
            "gpu_memory_mib": 81920 if gpus else 0,
            "gpus": [{"vendor": "nvidia", "name": "H100", "index": i, "id": "GPU-%d-%d" % (num, i),
                      "bus_id": None} for i in range(gpus)],
            "resources": {}}


def build(config, jobs, run=None):
    return rankplan.build_jobs(config, {"fleet": "gpus", "placement": "cluster", "jobs": jobs},
                               dict(run or RUN), environ={},
                               ssh_key={"private": "P", "public": "Q"} if len(jobs) >= 2 else None)


def running(spec):
    """A running container as nodeside.op_status reports it."""
    return {"name": spec["container"], "labels": spec["labels"], "state": "running",
            "exit_code": 0, "oom_killed": False, "started_at": "2026-08-01T10:00:05Z",
            "finished_at": None, "error": None,
            "files": {"running": "1785578405", "reason": None, "exit_code": None}}


# ---------------------------------------------------------------------------------------------
# Labels and records


def test_the_submitter_is_a_label_of_every_container_of_the_run():
    specs = build(task(nodes=2), [placed_job(0, 8), placed_job(1, 8)], dict(RUN, user="ann"))
    for spec in specs:
        assert spec["labels"][container.USER_LABEL] == "ann" == spec["labels"]["gpufleet.user"]
        assert "gpufleet.user=ann" in spec["docker_args"]
    # The task's own `user` (whom its commands run as) is another thing, and stays so.
    specs = build(task(user="root"), [placed_job(0)], dict(RUN, user="bob"))
    assert specs[0]["labels"]["gpufleet.user"] == "bob"
    assert "GPUFLEET_USER=root" in specs[0]["files"]["env.sh"]["text"].replace("'", "")


def test_a_run_without_a_user_has_no_label_and_its_record_says_none():
    config, jobs = task(nodes=2), [placed_job(0, 8), placed_job(1, 8)]
    specs = build(config, jobs)
    assert all("gpufleet.user" not in s["labels"] for s in specs)
    records = listing.run_records({s["host"]: [running(s)] for s in specs})
    assert records[0]["user"] is None


def test_run_records_carry_the_user_of_the_labels():
    specs = build(task(), [placed_job(0)], dict(RUN, user="ann"))
    records = listing.run_records({s["host"]: [running(s)] for s in specs})
    assert records[0]["user"] == "ann"


def test_a_queued_run_is_listed_with_the_user_of_its_entry():
    queues = {"gpus-0": [{"run": "later", "run_id": "x", "user": "bob", "state": "pending",
                          "priority": 0, "submitted_at": "2026-01-01T10:00:00Z",
                          "submitted_epoch": 1.0, "nodes": 1, "submissions": 0},
                         {"run": "older", "run_id": "y", "state": "pending", "priority": 0,
                          "submitted_at": "2026-01-01T09:00:00Z", "submitted_epoch": 0.5,
                          "nodes": 1, "submissions": 0}]}
    records = listing.with_queue([], queues)
    assert dict((r["name"], r["user"]) for r in records) == {"later": "bob", "older": None}
    assert "user" in booking.SUMMARY_FIELDS   # a queue host lists it


def test_of_user_keeps_that_users_runs_and_everyones_without_one():
    records = [{"name": "a", "user": "ann"}, {"name": "b", "user": "bob"},
               {"name": "c", "user": None}]
    assert [r["name"] for r in listing.of_user(records, "ann")] == ["a"]
    assert [r["name"] for r in listing.of_user(records, None)] == ["a", "b", "c"]
    assert [r["name"] for r in listing.of_user(records, "")] == ["a", "b", "c"]
    assert listing.of_user(records, "carol") == []


# ---------------------------------------------------------------------------------------------
# The Runner, the queue and the run index


def test_the_runner_takes_gpufleet_user_else_the_given_user(monkeypatch):
    monkeypatch.setenv("GPUFLEET_USER", "ann")
    fleets = [fleet_with_facts()]
    assert runs.Runner(task(), fleets, environ={}).user == "ann"
    assert runs.Runner(task(), fleets, environ={}, user="bob").user == "bob"
    assert runs.Runner(task(), fleets, environ={}, user="").user is None
    with pytest.raises(identity.IdentityError, match="user 'Bad User' is not valid"):
        runs.Runner(task(), fleets, environ={}, user="Bad User")


def test_a_bad_gpufleet_user_is_one_clear_line_before_anything_is_done(monkeypatch):
    monkeypatch.setenv("GPUFLEET_USER", "Not A Name")
    with pytest.raises(actions.ActionError) as info:
        actions.submitter({})
    assert "$GPUFLEET_USER" in str(info.value) and "\n" not in str(info.value)
    with pytest.raises(actions.ActionError, match="user 'x y' is not valid"):
        actions.submitter({"user": "x y"})
    assert actions.submitter({"user": "carol"}) == "carol"
    assert actions.TASK_ARGS["user"] == {"type": "str"}


def test_a_queued_run_keeps_its_submitter_when_another_controller_starts_it(
        fake_hosts, monkeypatch):
    monkeypatch.setenv("GPUFLEET_USER", "ann")
    fleets = [fleet_with_facts()]
    runner, cluster = fake_hosts(task(nodes=2, retry=WAIT), fleets,
                                 program=lambda job: (None, None))
    occupy(cluster, ["gpus-0"])
    assert runner.run(wait=False)["status"] == lc.RunStatus.PENDING
    entry = cluster.nodes["gpus-0"].queue["train"]
    assert entry["user"] == "ann"
    records = listing.with_queue([], {"gpus-0": [booking.summary(entry)]})
    assert records[0]["user"] == "ann"
    # Bob's controller passes over the queue once the hosts are free: the run is still ann's.
    monkeypatch.setenv("GPUFLEET_USER", "bob")
    free(cluster)
    assert a_pass(cluster, fleets)["started"] == ["train"]
    started = [p["job"]["labels"] for _h, p in cluster.ops("start")]
    assert started and all(labels["gpufleet.user"] == "ann" for labels in started)


def test_an_entry_an_earlier_version_wrote_names_nobody(fake_hosts, monkeypatch):
    monkeypatch.setenv("GPUFLEET_USER", "bob")
    fleets = [fleet_with_facts()]
    runner, _cluster = fake_hosts(task(), fleets)
    entry = runbook.entry_of(runner, ["gpus"])
    assert entry["user"] == "bob"
    del entry["user"]
    assert runs.runner_of(entry, fleets).user is None
    assert runs.runner_of(dict(entry, user="ann"), fleets).user == "ann"


@pytest.fixture
def book(tmp_path, monkeypatch):
    monkeypatch.setattr(booking, "BOOK_ROOT", str(tmp_path / "book"))
    return tmp_path / "book"


def test_the_run_index_keeps_the_submitter_of_a_note_through_rewrites(book, monkeypatch):
    now = [1000.0]
    monkeypatch.setattr(indexside.time, "time", lambda: now[0])
    indexside.op_note({"fleet": "gpus", "run": "a", "hosts": ["gpus-1"], "user": "ann"})
    indexside.op_note({"fleet": "gpus", "run": "b", "hosts": ["gpus-2"]})
    assert indexside._entries("gpus")["a"]["user"] == "ann"
    assert "user" not in indexside._entries("gpus")["b"]
    # Another note of a (idle hosts included) and a whole rewrite keep it.
    indexside.op_note({"fleet": "gpus", "run": "b", "hosts": ["gpus-2"], "idle": ["gpus-1"]})
    assert indexside._entries("gpus")["a"]["user"] == "ann"
    now[0] += indexside.NOTE_MARGIN + 1
    indexside.op_reindex({"fleet": "gpus", "runs": {"a": ["gpus-1"], "b": ["gpus-2"]},
                          "alive": {"a": ["gpus-1"]}, "answered": ["gpus-1", "gpus-2"],
                          "members": ["gpus-1", "gpus-2"], "complete": True})
    entries = indexside._entries("gpus")
    assert entries["a"]["user"] == "ann" and "user" not in entries["b"]
    # The view placements read is what it was.
    assert indexside.index_view("gpus", "a")["hosts"] == ["gpus-1"]


def test_the_note_request_names_the_submitter():
    fleet = fleet_with_facts()
    survey = ({"gpus-0": [], "gpus-1": []}, {}, {}, {})
    placed = {"fleet": "gpus", "jobs": [{"host": "gpus-1"}]}
    host, request = runindex.note_request([fleet], placed, "a", survey, user="ann")
    assert host == "gpus-0" and request["user"] == "ann"
    assert "user" not in runindex.note_request([fleet], placed, "a", survey)[1]
