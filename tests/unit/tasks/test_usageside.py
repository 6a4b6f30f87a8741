# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Usage records on a host (tasks.hostside.usageside): written when a job's container starts,
completed from its own finish time when it ends, kept after it is removed, summed for
``usage_24h``, pruned after 400 days. USAGE_ROOT and RUN_ROOT point into a temporary folder.
"""

from __future__ import annotations

import json
import os
import stat

import pytest
from ansible_collections.gpufleet.cluster.plugins.module_utils.tasks.hostside import (
    nodeside,
    usageside,
)

T0 = 1780000000.0   # 2026-05-28T20:26:40Z


def iso(epoch):
    import time

    whole = int(epoch)
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(whole)) + (
        ".%06dZ" % round((epoch - whole) * 1e6))


def entry(run="train", job=0, submission=0, state="running", start=T0, end=None, user="ann",
          gpus="0,1", price="2.0", blocks="", total="", code=0, fleet="world"):
    labels = {"gpufleet.run": run, "gpufleet.run-id": "id-" + run, "gpufleet.job": str(job),
              "gpufleet.submission": str(submission), "gpufleet.fleet": fleet,
              "gpufleet.instance": "%s-%d" % (fleet, job), "gpufleet.nodes": "2",
              "gpufleet.gpus": gpus, "gpufleet.blocks": blocks,
              "gpufleet.total-blocks": total,
              "gpufleet.run-spec": json.dumps({"price": None if price is None else float(price)})}
    if user is not None:
        labels["gpufleet.user"] = user
    return {"name": "%s-%d-0" % (run, job), "labels": labels, "state": state,
            "exit_code": code, "started_at": iso(start),
            "finished_at": "0001-01-01T00:00:00Z" if end is None else iso(end)}


@pytest.fixture
def root(monkeypatch, tmp_path):
    folder = tmp_path / "usage"
    monkeypatch.setattr(usageside, "USAGE_ROOT", str(folder))
    monkeypatch.setattr(usageside, "RUN_ROOT", str(tmp_path / "runs"))
    monkeypatch.setattr(nodeside, "RUN_ROOT", str(tmp_path / "runs"))
    return folder


def read(root, run="train", name="0-0"):
    return json.loads((root / run / (name + ".json")).read_text())


def test_docker_times_read_as_epoch_seconds():
    assert usageside.usage_epoch("2026-05-28T20:26:40.5Z") == T0 + 0.5
    assert usageside.usage_epoch("2026-05-28T20:26:40.123456789Z") == T0 + 0.123
    assert usageside.usage_epoch("2026-05-28T22:26:40+02:00") == T0
    assert usageside.usage_epoch("0001-01-01T00:00:00Z") is None
    assert usageside.usage_epoch("") is None
    assert usageside.usage_epoch("yesterday") is None


def test_the_price_is_the_share_of_the_instance_price():
    assert usageside.usage_price(entry()["labels"]) == 2.0
    assert usageside.usage_price(entry(blocks="1", total="4")["labels"]) == 0.5
    assert usageside.usage_price(entry(blocks="4", total="4")["labels"]) == 2.0
    assert usageside.usage_price(entry(price="0.0")["labels"]) == 0.0
    assert usageside.usage_price(entry(price=None)["labels"]) is None
    assert usageside.usage_price({"gpufleet.run-spec": "not json"}) is None


def test_a_started_container_gets_a_record_owned_by_root_only(root):
    usageside.usage_seen([entry()], T0 + 5)

    record = read(root)
    assert record == {"fleet": "world", "run": "train", "run_id": "id-train", "job": 0,
                      "submission": 0, "user": "ann", "host": "world-0", "nodes": 2, "gpus": 2,
                      "start": T0, "end": None, "exit_code": None, "price": 2.0}
    assert stat.S_IMODE(os.stat(root / "train" / "0-0.json").st_mode) == 0o600
    assert stat.S_IMODE(os.stat(root / "train").st_mode) == 0o700


def test_a_run_made_before_users_has_no_user(root):
    usageside.usage_seen([entry(user=None)], T0 + 5)

    assert read(root)["user"] is None
    assert usageside.usage_sums(usageside.usage_recent(), T0 + 5) == {"-": 10.0}


def test_a_container_that_never_started_gets_no_record(root):
    usageside.usage_seen([dict(entry(), started_at="0001-01-01T00:00:00Z", state="created"),
                          dict(entry(job=1), state="never-created")], T0)

    assert not root.exists() or not list((root / "train").glob("*.json"))


def test_the_end_is_the_containers_own_finish_time_and_is_written_once(root):
    usageside.usage_seen([entry()], T0 + 1)
    usageside.usage_seen([entry(state="exited", end=T0 + 30, code=3)], T0 + 90)

    record = read(root)
    assert (record["end"], record["exit_code"]) == (T0 + 30, 3)
    # A later look (another controller, a later time) changes nothing.
    usageside.usage_seen([entry(state="exited", end=T0 + 60, code=0)], T0 + 200)
    assert read(root)["end"] == T0 + 30


def test_a_container_first_seen_ended_is_written_complete(root):
    usageside.usage_seen([entry(state="exited", end=T0 + 3)], T0 + 10)

    assert (read(root)["start"], read(root)["end"]) == (T0, T0 + 3)


def test_a_removal_of_a_running_container_ends_its_record_then(root):
    usageside.usage_seen([entry()], T0 + 1)
    usageside.usage_seen([entry()], T0 + 40, gone=True)

    assert read(root)["end"] == T0 + 40


def test_each_submission_has_its_own_record(root):
    usageside.usage_seen([entry(state="exited", end=T0 + 3)], T0 + 10)
    usageside.usage_seen([entry(submission=1, start=T0 + 20)], T0 + 30)

    assert sorted(p.name for p in (root / "train").glob("*.json")) == ["0-0.json", "0-1.json"]


def test_a_record_whose_container_vanished_ends_at_its_exit_code_file(root, tmp_path):
    usageside.usage_seen([entry(), entry(run="other")], T0 + 1)
    state = tmp_path / "runs" / "train" / "0" / "state"
    state.mkdir(parents=True)
    (state / "exit_code").write_text("0\n")
    os.utime(state / "exit_code", (T0 + 12, T0 + 12))

    usageside.usage_orphans([entry(run="other")], T0 + 100)

    assert read(root)["end"] == T0 + 12
    assert read(root, run="other")["end"] is None


def test_the_sums_count_the_last_day_and_a_running_job_until_now(root):
    now = T0 + 2 * 86400
    usageside.usage_seen([
        entry(run="old", start=T0, end=T0 + 3600, state="exited"),             # 2 days ago
        entry(run="edge", start=now - 86400 - 100, end=now - 86400 + 100, state="exited"),
        entry(run="cpu", gpus="", start=now - 50, end=now - 10, state="exited"),
        entry(run="live", start=now - 30, user="bob", gpus="0"),
    ], now)

    sums = usageside.usage_sums(usageside.usage_recent(), now)

    assert sums == {"ann": 200.0, "bob": 30.0}


def test_recent_keeps_only_what_can_count_and_is_rebuilt_when_lost(root):
    usageside.usage_seen([entry(run="old", start=T0, end=T0 + 10, state="exited")], T0 + 20)
    usageside.usage_seen([entry(run="new", start=T0 + 90000)], T0 + 90001)

    assert sorted(usageside.usage_recent()) == ["new/0-0"]
    (root / "recent.json").unlink()
    assert usageside.usage_recent() is None
    usageside.usage_seen([entry(run="new", start=T0 + 90000, end=T0 + 90030, state="exited")],
                         T0 + 90040)
    assert sorted(usageside.usage_recent()) == ["new/0-0"]
    assert usageside.usage_recent()["new/0-0"]["end"] == T0 + 90030


def test_status_answers_usage_24h_from_the_records(root, monkeypatch):
    import time

    now = time.time()
    done = entry(run="done", start=now - 100, end=now - 90, state="exited", user="bob", gpus="0")
    containers = [entry(start=now - 20), done]
    monkeypatch.setattr(usageside, "_STATUS_BEFORE_USAGE",
                        lambda payload: {"containers": list(containers)})

    answer = usageside.op_status_usage({})

    assert set(answer) == {"containers", "usage_24h"}
    assert answer["usage_24h"]["bob"] == pytest.approx(10.0, abs=0.01)
    assert answer["usage_24h"]["ann"] == pytest.approx(40.0, abs=1.0)
    # The records stay when the containers are gone: usage still answers them.
    containers[:] = []
    records = usageside.op_usage({"since": now - 3600})["records"]
    assert sorted(r["run"] for r in records) == ["done", "train"]


def test_usage_answers_the_records_that_overlap_since(root):
    usageside.usage_seen([entry(run="a", start=T0, end=T0 + 10, state="exited"),
                          entry(run="b", start=T0 + 100, end=T0 + 200, state="exited",
                                user="bob"),
                          entry(run="c", start=T0 + 300)], T0 + 400)

    def runs(**payload):
        return sorted(r["run"] for r in usageside.op_usage(payload)["records"])

    assert runs(since=T0 + 150) == ["b", "c"]
    assert runs(since=None) == ["a", "b", "c"]
    assert runs(user="bob") == ["b"]
    assert runs(run="c") == ["c"]
    assert runs(run="nothing") == []
    with pytest.raises(nodeside.Failure, match="since must be epoch seconds"):
        usageside.op_usage({"since": "7d"})
    with pytest.raises(nodeside.Failure, match="bad run name"):
        usageside.op_usage({"run": "../etc"})


def test_records_are_kept_400_days_then_pruned_once_a_day(root):
    usageside.usage_seen([entry(run="ancient", start=T0, end=T0 + 10, state="exited"),
                          entry(run="kept", start=T0 + 200 * 86400, end=T0 + 200 * 86400 + 5,
                                state="exited")], T0 + 200 * 86400 + 10)
    now = T0 + 401 * 86400

    removed = usageside.usage_prune(now)

    assert [os.path.basename(os.path.dirname(p)) for p in removed] == ["ancient"]
    assert not (root / "ancient").exists()
    assert (root / "kept" / "0-0.json").exists()
    usageside.usage_seen([entry(run="gone", start=T0, end=T0 + 10, state="exited")], now)
    assert usageside.usage_prune(now + 3600) == []   # pruned less than a day ago


def test_a_container_removed_while_it_runs_and_never_seen_before_ends_then(root):
    usageside.usage_seen([entry()], T0 + 40, gone=True)

    assert (read(root)["start"], read(root)["end"]) == (T0, T0 + 40)


def test_a_lost_recent_file_is_written_again_by_the_next_status(root, monkeypatch):
    import time

    now = time.time()
    usageside.usage_seen([entry(start=now - 10)], now)
    (root / "recent.json").unlink()
    monkeypatch.setattr(usageside, "_STATUS_BEFORE_USAGE", lambda payload: {"containers": []})

    answer = usageside.op_status_usage({"run": "other"})

    assert list(usageside.usage_recent()) == ["train/0-0"]
    assert answer["usage_24h"]["ann"] == pytest.approx(20.0, abs=2.0)


def test_a_host_without_records_answers_no_usage(root, monkeypatch):
    monkeypatch.setattr(usageside, "_STATUS_BEFORE_USAGE", lambda payload: {"containers": []})

    assert usageside.op_status_usage({})["usage_24h"] == {}
    assert not root.exists()


def test_the_labels_read_are_the_ones_containers_get():
    from ansible_collections.gpufleet.cluster.plugins.module_utils.tasks import container

    labels = entry()["labels"]
    for name in ("RUN_LABEL", "RUN_ID_LABEL", "JOB_LABEL", "SUBMISSION_LABEL", "FLEET_LABEL",
                 "INSTANCE_LABEL", "NODES_LABEL", "BLOCKS_LABEL", "TOTAL_BLOCKS_LABEL",
                 "GPUS_LABEL", "RUN_SPEC_LABEL"):
        assert getattr(container, name) in labels, name
    assert usageside.USAGE_USER_LABEL == "gpufleet.user"


def test_stop_and_remove_settle_the_records_of_their_containers(root, monkeypatch):
    import time

    now = time.time()
    states = {"train-0-0": entry(start=now - 30), "train-1-0": entry(job=1, start=now - 30)}
    monkeypatch.setattr(usageside, "op_status", lambda payload: {
        "containers": [c for c in states.values() if c["labels"]["gpufleet.run"] ==
                       payload["run"]]})
    usageside.usage_seen(list(states.values()), now - 20)

    def stop(payload):
        states["train-0-0"] = entry(start=now - 30, end=now - 5, state="exited", code=143)
        return {"stopped": ["train-0-0"], "ended": []}

    removed = []
    monkeypatch.setattr(usageside, "_STOP_BEFORE_USAGE", stop)
    monkeypatch.setattr(usageside, "_REMOVE_BEFORE_USAGE", lambda payload: removed.append(
        payload) or {"removed": ["train-1-0"]})

    usageside.op_stop_usage({"jobs": [{"run": "train", "job_num": 0,
                                       "container": "train-0-0"}], "reason": "stopped"})
    assert (read(root)["end"], read(root)["exit_code"]) == (
        pytest.approx(now - 5, abs=0.01), 143)
    assert read(root, name="1-0")["end"] is None

    usageside.op_remove_usage({"run": "train", "jobs": [1]})
    assert removed == [{"run": "train", "jobs": [1]}]
    assert read(root, name="1-0")["end"] == pytest.approx(time.time(), abs=2)
