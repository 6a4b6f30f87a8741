# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The event record on a host (tasks.hostside.eventside): a job's changes recorded from the
facts its folder keeps, at the moments they happened and once each; queue entries' and
members' changes; what a controller sends; the record read back. EVENTS_ROOT, RUN_ROOT and
BOOK_ROOT point into a temporary folder; Docker is not asked.
"""

from __future__ import annotations

import itertools
import json
import os
import shutil
import stat

import pytest
from ansible_collections.gpufleet.cluster.plugins.module_utils.tasks import eventlog, lifecycle
from ansible_collections.gpufleet.cluster.plugins.module_utils.tasks.hostside import (
    booking,
    eventside,
    nodeside,
    runendside,
)

T0 = 1780000000.0


@pytest.fixture
def host(tmp_path, monkeypatch):
    monkeypatch.setattr(eventside, "EVENTS_ROOT", str(tmp_path / "events"))
    monkeypatch.setattr(eventside, "RUN_ROOT", str(tmp_path / "runs"))
    monkeypatch.setattr(nodeside, "RUN_ROOT", str(tmp_path / "runs"))
    monkeypatch.setattr(booking, "BOOK_ROOT", str(tmp_path / "book"))
    monkeypatch.setattr(eventside, "op_status", lambda payload: {"containers": running(tmp_path)})
    return tmp_path


def running(root):
    """Every job's container, running (what status answers while no test says otherwise)."""
    return [{"name": json.loads(p.read_text())["container"], "state": "running"}
            for p in sorted((root / "runs").glob("*/*/record.json"))]


def touch(path, text, when):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    os.utime(str(path), (when, when))


def job(root, run="train", num=0, submission=0, user="ann", created=T0, running=None,
        code=None, ended=None, reason=None, reason_at=None):
    folder = root / "runs" / run / str(num)
    labels = {"gpufleet.run": run, "gpufleet.job": str(num), "gpufleet.run-id": "id-" + run,
              "gpufleet.submission": str(submission), "gpufleet.fleet": "gpus",
              "gpufleet.user": user, "gpufleet.nodes": "2",
              "gpufleet.run-spec": json.dumps({"type": "task", "stop_criteria": "all-done"})}
    touch(folder / "record.json", json.dumps({"container": "%s-%d-0" % (run, num),
                                              "labels": labels}), created or T0)
    if created is not None:
        touch(folder / "created", "abc\n", created)
    if running is not None:
        touch(folder / "state" / "running", "%d\n" % running, running)
    if reason is not None:
        touch(folder / "state" / "reason", reason + "\n", reason_at or ended)
    if code is not None:
        touch(folder / "state" / "exit_code", "%d\n" % code, ended)
    return folder


def recorded(root):
    path = root / "events" / "log.jsonl"
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_a_jobs_changes_are_recorded_at_the_moments_they_happened_and_once(host):
    job(host, created=T0, running=T0 + 2, code=0, ended=T0 + 60)

    assert eventside.event_sweep() == 3
    events = recorded(host)
    assert [(e["kind"], e["at"]) for e in events] == [
        ("job.created", T0), ("job.started", T0 + 2), ("job.ended", T0 + 60)]
    # One container's life: the run's id, its submission and the container's id.
    assert [e["id"] for e in events] == ["id-train/0/abc/0/job.created",
                                         "id-train/0/abc/0/job.started",
                                         "id-train/0/abc/0/job.ended"]
    created, _started, ended = events
    assert created["actor"] == "ann" and created["fleet"] == "gpus"
    assert created["job_name"] == "train-0-0" and created["run_id"] == "id-train"
    assert created["nodes"] == 2 and created["policy"] == {"type": "task",
                                                           "stop_criteria": "all-done"}
    assert ended["exit_code"] == 0 and ended["started"] is True and ended["reason"] is None
    # Only root reads the record.
    folder = host / "events"
    assert stat.S_IMODE(folder.stat().st_mode) == 0o700
    assert stat.S_IMODE((folder / "log.jsonl").stat().st_mode) == 0o600

    assert eventside.event_sweep() == 0
    assert len(recorded(host)) == 3


def test_a_job_still_running_gets_its_end_recorded_by_a_later_sweep(host):
    folder = job(host, created=T0, running=T0 + 1)
    assert eventside.event_sweep() == 2

    touch(folder / "state" / "exit_code", "3\n", T0 + 30)
    assert eventside.event_sweep() == 1
    last = recorded(host)[-1]
    assert (last["kind"], last["exit_code"], last["at"]) == ("job.ended", 3, T0 + 30)


def test_a_new_submission_in_the_same_folder_is_recorded_again(host):
    job(host, created=T0, running=T0 + 1, code=1, ended=T0 + 5)
    eventside.event_sweep()
    shutil.rmtree(str(host / "runs" / "train" / "0"))   # as a start does
    job(host, submission=1, created=T0 + 100, running=T0 + 101)

    assert eventside.event_sweep() == 2
    assert [e["id"] for e in recorded(host)[-2:]] == ["id-train/1/abc/0/job.created",
                                                      "id-train/1/abc/0/job.started"]


def test_a_killed_wrapper_ends_the_job_with_its_containers_exit(host):
    job(host, created=T0, running=T0 + 1)
    container = {"name": "train-0-0", "state": "exited", "exit_code": 137,
                 "finished_at": "2026-05-28T20:27:40Z"}

    eventside.event_sweep([container])
    last = recorded(host)[-1]
    assert (last["kind"], last["exit_code"], last["at"]) == ("job.ended", 137, T0 + 60)


def test_a_job_that_could_not_be_made_ends_at_once(host):
    folder = job(host, created=None)
    touch(folder / "state" / "setup_error", "could not start container: no such image\n",
          T0 + 3)

    eventside.event_sweep()
    created, ended = recorded(host)
    assert created["kind"] == "job.created" and "no such image" in created["detail"]
    assert (ended["kind"], ended["reason"], ended["started"]) == (
        "job.ended", "executor_error", False)


def test_a_stop_names_who_asked_and_why(host, monkeypatch):
    folder = job(host, created=T0, running=T0 + 1)
    calls = []

    def stop(payload):
        calls.append(payload)
        touch(folder / "state" / "reason", payload["reason"] + "\n", T0 + 40)
        touch(folder / "state" / "exit_code", "143\n", T0 + 41)
        return {"stopped": ["train-0-0"], "ended": []}

    monkeypatch.setitem(eventside._EVENTS_BEFORE, "stop", stop)
    answer = eventside.op_stop_events({"reason": "terminated_by_user", "by": "bob",
                                       "jobs": [{"run": "train", "job_num": 0,
                                                 "container": "train-0-0"}]})

    assert answer == {"stopped": ["train-0-0"], "ended": []} and calls
    kinds = [(e["kind"], e.get("reason"), e.get("actor")) for e in recorded(host)]
    assert kinds[-2:] == [("job.stopping", "terminated_by_user", "bob"),
                          ("job.ended", "terminated_by_user", None)]


def test_a_failing_record_never_fails_the_listing(host, monkeypatch):
    job(host, created=T0)
    (host / "events").write_text("not a folder")
    monkeypatch.setitem(eventside._EVENTS_BEFORE, "status", lambda payload: {"containers": []})

    answer = eventside.op_status_events({})
    assert answer["containers"] == []
    assert "events_error" in answer


def entry(state="pending", reason="dependency", user="ann"):
    return {"run": "post", "run_id": "id-post", "user": user, "state": state, "reason": reason,
            "fleets": ["gpus"], "message": "waiting for train (ok)", "submissions": 0}


def test_a_queue_entry_records_each_change_of_its_state(host):
    enqueue = eventside._event_queue_op("enqueue")
    update = eventside._event_queue_op("update")
    dequeue = eventside._event_queue_op("dequeue")

    assert enqueue({"entry": entry()}) == {"queued": True}
    update({"run": "post", "run_id": "id-post", "by": "bob",
            "changes": {"state": "terminated", "reason": "dependency_failed",
                        "message": "train ended failed"}})
    dequeue({"run": "post", "run_id": "id-post"})
    dequeue({"run": "post", "run_id": "id-post"})   # nothing there: nothing recorded

    events = recorded(host)
    assert [(e["state"], e["old_state"], e["reason"], e["actor"]) for e in events] == [
        ("pending", None, "dependency", "ann"),
        ("terminated", "pending", "dependency_failed", "bob"),
        ("removed", "terminated", None, None)]
    assert events[0]["fleet"] == "gpus" and events[1]["detail"] == "train ended failed"


def test_an_unchanged_queue_entry_records_nothing(host):
    update = eventside._event_queue_op("update")
    eventside._event_queue_op("enqueue")({"entry": entry()})
    update({"run": "post", "run_id": "id-post", "changes": {"retry_since": 5}})
    assert len(recorded(host)) == 1


def test_a_member_change_is_recorded_once_per_change_on_every_host(host, monkeypatch):
    answers = [{"applied": True, "doc": {"fleet": "gpus"}}, {"applied": False, "doc": {}}]
    monkeypatch.setitem(eventside._EVENTS_BEFORE, "members_change",
                        lambda payload: answers.pop(0))
    change = {"kind": "grant", "user": "carl", "role": "member", "by": "ann",
              "stamp": [T0, "ctl"]}

    eventside.op_members_change_events({"change": change})
    eventside.op_members_change_events({"change": change})   # not applied: nothing

    (event,) = recorded(host)
    assert (event["kind"], event["user"], event["actor"], event["role"], event["at"]) == (
        "member.granted", "carl", "ann", "member", T0)
    assert event["id"] == "member/gpus/grant/carl/%s" % T0


def test_sent_events_are_recorded_with_their_ids_and_unknown_kinds_refused(host):
    sent = {"id": "apply-1/fleet", "kind": "fleet.applied", "fleet": "gpus", "at": T0,
            "actor": "ann", "detail": "Instances added: gpus-1", "secret": "dropped"}
    assert eventside.op_event_add({"events": [sent]}) == {"recorded": 1}
    (event,) = recorded(host)
    assert event["id"] == "apply-1/fleet" and "secret" not in event

    with pytest.raises(nodeside.Failure, match="cannot record"):
        eventside.op_event_add({"events": [{"kind": "job.ended"}]})


def test_the_record_is_read_back_newer_than_since_of_one_run(host):
    job(host, created=T0, running=T0 + 1, code=0, ended=T0 + 9)
    job(host, run="eval", created=T0 + 5)

    answer = eventside.op_events({"since": T0 + 1, "run": "train"})
    assert [e["kind"] for e in answer["events"]] == ["job.started", "job.ended"]
    # A torn last line (a write cut short) is skipped.
    with open(str(host / "events" / "log.jsonl"), "a") as handle:
        handle.write('{"id": "x", "at": ')
    assert len(eventside.op_events({})["events"]) == 4

    with pytest.raises(nodeside.Failure, match="since"):
        eventside.op_events({"since": "yesterday"})
    with pytest.raises(nodeside.Failure, match="run name"):
        eventside.op_events({"run": "../etc"})


def test_a_full_record_is_rotated_and_both_parts_read(host, monkeypatch):
    monkeypatch.setattr(eventside, "EVENTS_ROTATE", 10)
    eventside.event_append([{"id": "a", "at": T0, "kind": "fleet.applied"}])
    eventside.event_append([{"id": "b", "at": T0 + 1, "kind": "fleet.applied"}])

    assert (host / "events" / "log.1.jsonl").exists()
    assert [e["id"] for e in eventside.event_read()] == ["a", "b"]


def test_a_job_is_made_before_its_command_begins_whatever_docker_run_took(host):
    # ``created`` is written once ``docker run`` returns: the command may have begun by then.
    folder = job(host, created=T0 + 5, running=T0 + 2)
    touch(folder / "record.json", (folder / "record.json").read_text(), T0)
    touch(folder / "state" / "running", "%d\n" % (T0 + 2), T0 + 2.7)

    eventside.event_sweep()
    assert [(e["kind"], e["at"]) for e in recorded(host)] == [
        ("job.created", T0), ("job.started", T0 + 2.7)]


def test_a_run_of_the_same_name_again_and_a_respawned_container_are_recorded_anew(host):
    folder = job(host, created=T0, running=T0 + 1, code=0, ended=T0 + 2)
    eventside.event_sweep(running(host))
    # The same name applied again: another run id, its submission 0 again.
    shutil.rmtree(str(folder))
    folder = job(host, created=T0 + 10, running=T0 + 11)
    record = json.loads((folder / "record.json").read_text())
    record["labels"]["gpufleet.run-id"] = "id-again"
    touch(folder / "record.json", json.dumps(record), T0 + 10)
    assert eventside.event_sweep(running(host)) == 2
    # Its container made again in the same folder (a replica's respawn): a new life.
    touch(folder / "created", "def\n", T0 + 20)
    (folder / "state" / "running").unlink()
    assert eventside.event_sweep(running(host)) == 1
    ids = [e["id"] for e in recorded(host)]
    assert len(ids) == len(set(ids)) == 6
    assert ids[-1] == "id-again/0/def/0/job.created"


def test_a_multi_node_jobs_name_is_its_containers(host):
    job(host, num=1, created=T0)
    eventside.event_sweep(running(host))
    assert recorded(host)[0]["job_name"] == "train-1-0"


def test_a_job_folder_its_container_spoiled_stops_only_its_own_record(host):
    spoiled = job(host, run="bad", created=T0, running=T0 + 1)
    touch(spoiled / "state" / "running", "9" * 400 + "\n", 0)
    touch(spoiled / "state" / "exit_code", "7" * 5000 + "\n", 4102444800)   # year 2100
    job(host, run="good", created=T0, running=T0 + 1, code=0, ended=T0 + 3)

    eventside.event_sweep(running(host))
    events = recorded(host)
    assert [e["kind"] for e in events if e["run"] == "good"] == [
        "job.created", "job.started", "job.ended"]
    # Numbers no wrapper writes are not read; a moment is held between the folder's making
    # and now.
    assert [e["kind"] for e in events if e["run"] == "bad"] == ["job.created"]
    assert all(T0 <= e["at"] <= os.stat(str(host / "events" / "log.jsonl")).st_mtime
               for e in events)


def test_a_container_removed_while_it_ran_ends_its_job_when_found_gone(host):
    job(host, created=T0, running=T0 + 1)
    eventside.event_sweep(running(host))
    eventside.event_sweep([{"name": "train-0-0", "state": "gone"}])
    last = recorded(host)[-1]
    assert (last["kind"], last["exit_code"]) == ("job.ended", None)
    assert eventside.event_sweep([]) == 0   # once


def test_a_failing_record_never_fails_an_applied_member_change_or_a_stop(host, monkeypatch):
    (host / "events").write_text("not a folder")
    monkeypatch.setitem(eventside._EVENTS_BEFORE, "members_change",
                        lambda payload: {"applied": True, "doc": {"fleet": "gpus"}})
    monkeypatch.setitem(eventside._EVENTS_BEFORE, "members_sync",
                        lambda payload: {"applied": True, "doc": {"fleet": "gpus"}})
    change = {"kind": "revoke", "user": "carl", "by": "ann", "stamp": [T0, "c"]}
    answer = eventside.op_members_change_events({"change": change})
    assert answer["applied"] is True and "events_error" in answer
    sent = {"id": "a/fleet", "kind": "fleet.applied", "fleet": "gpus", "at": T0}
    answer = eventside.op_members_sync_events({"doc": {}, "events": [sent]})
    assert answer["applied"] is True and "events_error" in answer

    folder = job(host, created=T0, running=T0 + 1)
    (folder / "stopped_by").mkdir()   # cannot be written
    stops = []
    monkeypatch.setitem(eventside._EVENTS_BEFORE, "stop",
                        lambda payload: stops.append(payload) or {"stopped": ["train-0-0"]})
    answer = eventside.op_stop_events({"reason": "terminated_by_user", "by": "bob",
                                       "jobs": [{"run": "train", "job_num": 0,
                                                 "container": "train-0-0"}]})
    assert stops and answer["stopped"] == ["train-0-0"] and "events_error" in answer


def test_a_new_run_of_a_name_over_an_ended_entry_is_submitted_not_waiting_again(host):
    enqueue = eventside._event_queue_op("enqueue")
    enqueue({"entry": dict(entry(), state="terminated", reason="dependency_failed")})
    enqueue({"entry": dict(entry(), run_id="id-new")})
    last = recorded(host)[-1]
    assert (last["state"], last["old_state"], last["run_id"]) == ("pending", None, "id-new")


def test_the_latest_events_are_read_from_the_end_of_the_record(host, monkeypatch):
    eventside.event_append([{"id": "e%d" % n, "at": T0 + n, "kind": "fleet.applied"}
                            for n in range(50)])
    monkeypatch.setattr(eventside, "EVENTS_TAIL_BYTES", 1000)
    latest = eventside.event_read()
    assert 0 < len(latest) < 50 and latest[-1]["id"] == "e49"
    assert [e["id"] for e in latest] == ["e%d" % n for n in range(50 - len(latest), 50)]
    assert len(eventside.event_read(since=T0)) == 50   # a window reads it all


# ---------------------------------------------------------------------------------------------
# A multi-node run's end: job 0's wrapper writes state/run_end once every job told it how it
# ended (tasks.hostside.wrapper_peers); its host records one run.status from it.


def test_job_0_records_a_multi_node_runs_end_once_every_job_told_it(host):
    folder = job(host, created=T0, running=T0 + 1, code=0, ended=T0 + 30)
    assert eventside.event_sweep() == 3   # its own end; the run's is not known yet
    assert eventside.event_sweep() == 0
    touch(folder / "state" / "run_end", "0 0 1 -\n1 3 1 -\n", T0 + 45)

    assert eventside.event_sweep() == 1
    last = recorded(host)[-1]
    assert (last["kind"], last["status"], last["reason"], last["at"]) == (
        "run.status", "failed", "job_failed", T0 + 45)
    # The id the reader derives for the same end (tasks.eventlog): the two are one event.
    assert last["id"] == "train/id-train/0/run.status/failed"
    assert last["detail"] == "job 1 ended: container_exited_with_error, exit code 3"
    assert last["nodes"] == 2 and "job" not in last and last["fleet"] == "gpus"
    assert eventside.event_sweep() == 0


def test_a_runs_end_written_with_its_jobs_is_recorded_after_it(host):
    folder = job(host, created=T0, running=T0 + 1, code=0, ended=T0 + 30)
    touch(folder / "state" / "run_end", "0 0 1 -\n1 0 1 -\n", T0 + 31)
    eventside.event_sweep()
    assert [(e["kind"], e.get("status")) for e in recorded(host)][-2:] == [
        ("job.ended", None), ("run.status", "done")]
    # Only job 0's folder says it, and only for a run of several nodes.
    other = job(host, run="other", num=1, created=T0, running=T0 + 1, code=0, ended=T0 + 30)
    touch(other / "state" / "run_end", "0 0 1 -\n1 0 1 -\n", T0 + 31)
    eventside.event_sweep()
    assert [e["kind"] for e in recorded(host) if e["run"] == "other"] == [
        "job.created", "job.started", "job.ended"]


@pytest.mark.parametrize("text, criteria, said", [
    # A line its container spoiled is a job not known: no verdict from what is left...
    ("0 0 1 -\n1 x 1 ; rm -rf /\n", "all-done", None),
    # ...unless what is known decides: master-done, a user's stop, a failure.
    ("0 0 1 -\nnonsense\n", "master-done", ("done", "all_jobs_done")),
    ("0 143 1 terminated_by_user\n1 - - unknown\n", "all-done",
     ("terminated", "terminated_by_user")),
    ("0 0 1 -\n1 - - lost\n", "all-done", ("failed", "job_failed")),
    ("0 143 1 terminated_by_server\n1 137 1 max_duration_exceeded\n", "all-done",
     ("terminated", "max_duration_exceeded")),
])
def test_a_runs_end_is_read_with_care(host, text, criteria, said):
    folder = job(host, created=T0, running=T0 + 1, code=0, ended=T0 + 30)
    record = json.loads((folder / "record.json").read_text())
    record["labels"]["gpufleet.run-spec"] = json.dumps({"type": "task",
                                                        "stop_criteria": criteria})
    touch(folder / "record.json", json.dumps(record), T0)
    touch(folder / "state" / "run_end", text, T0 + 31)
    eventside.event_sweep()
    ends = [(e["status"], e["reason"]) for e in recorded(host) if e["kind"] == "run.status"]
    assert ends == ([said] if said else [])
    # Read once either way: a later sweep finds nothing new in the folder.
    assert json.loads((folder / "events.json").read_text())["kinds"][-1] == "run.status"
    assert eventside.event_sweep() == 0


ENDS = [(0, None, True), (3, None, True), (1, None, False), (143, "terminated_by_user", True),
        (143, "terminated_by_server", True), (0, "done_by_runner", True),
        (137, "max_duration_exceeded", True), (143, "terminated_due_to_utilization_policy", True),
        (0, "inactivity_duration_exceeded", True), (None, None, True), "lost"]


@pytest.mark.parametrize("nodes", [1, 2, 3])
@pytest.mark.parametrize("criteria", ["all-done", "master-done"])
def test_the_hosts_verdict_on_a_run_is_the_one_ps_reaches(nodes, criteria):
    """runendside.runend_verdict (on the hosts, standard library only) against tasks.lifecycle.decide
    fed by tasks.eventlog.ended_status, for every combination of these ends."""
    for combo in itertools.product(ENDS, repeat=nodes):
        ends, statuses = {}, {}
        for num, end in enumerate(combo):
            if end == "lost":
                ends[num] = {"lost": True}
                statuses[num] = ("failed", lifecycle.INSTANCE_UNREACHABLE, None)
                continue
            code, reason, started = end
            ends[num] = {"exit_code": code, "reason": reason, "started": started}
            statuses[num] = eventlog.ended_status(dict(ends[num], gone=code is None and
                                                       not reason))
        decision = lifecycle.decide({"stop_criteria": criteria}, statuses)
        assert decision.final, combo
        verdict = runendside.runend_verdict(ends, criteria)
        assert verdict and verdict[:2] == (decision.status, decision.reason), (combo, decision)


def test_a_long_run_end_is_read_whole_and_a_line_cut_short_is_not_believed(host):
    folder = job(host, created=T0, running=T0 + 1, code=0, ended=T0 + 30)
    record = json.loads((folder / "record.json").read_text())
    record["labels"]["gpufleet.nodes"] = "300"
    touch(folder / "record.json", json.dumps(record), T0)
    lines = ["%d 0 1 terminated_by_server" % n for n in range(1, 300)]
    touch(folder / "state" / "run_end", "0 1 1 -\n" + "\n".join(lines) + "\n", T0 + 31)
    eventside.event_sweep()
    (end,) = [e for e in recorded(host) if e["kind"] == "run.status"]
    assert (end["status"], end["detail"]) == ("failed", "job 0 ended: "
                                              "container_exited_with_error, exit code 1")
    # Past what 2 nodes may write, the rest is not read: job 1 is not known, no verdict.
    assert runendside.runend_read(str(folder / "state" / "run_end"), 2) == {
        0: {"exit_code": 1, "started": True, "reason": None},
        1: {"exit_code": 0, "started": True, "reason": "terminated_by_server"}}
    touch(folder / "state" / "run_end", "0 0 1 -\n1 0 1 " + "x" * 400 + "\n", T0 + 31)
    assert runendside.runend_read(str(folder / "state" / "run_end"), 2)[1] == {
        "unknown": True}
    touch(folder / "state" / "run_end", "0 0 1 -\n\u00b2 0 1 -\n1 3 1 -\n", T0 + 31)
    assert runendside.runend_read(str(folder / "state" / "run_end"), 2)[1]["exit_code"] == 3
