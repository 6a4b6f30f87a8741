# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Copies of a queue host's entries on another host (tasks.hostside.mirrorside): written whole
with the run's repo archive, listed by a survey with the entry's digest, and made that host's
own entry when the queue host is lost. Each host is a folder standing in for its BOOK_ROOT.
"""

from __future__ import annotations

import os

import pytest
from ansible_collections.gpufleet.cluster.plugins.module_utils.tasks.hostside import (
    booking,
    mirrorside,
    nodeside,
)


@pytest.fixture
def hosts(tmp_path, monkeypatch):
    monkeypatch.setattr(nodeside, "RUN_ROOT", str(tmp_path / "runs"))

    def on(name):
        root = str(tmp_path / name / "book")
        monkeypatch.setattr(booking, "BOOK_ROOT", root)
        monkeypatch.setattr(mirrorside, "BOOK_ROOT", root)
        return root

    return on


def entry(run="train", state="pending", **extra):
    return dict({"run": run, "run_id": run + "-id", "state": state, "queued_on": "fl-0",
                 "submitted_epoch": 100.0, "config": {"type": "task", "name": run},
                 "secrets": {"TOKEN": "s3cret"}, "priority": 0}, **extra)


def test_a_copy_is_the_entry_whole_and_a_survey_lists_it_the_same(hosts, tmp_path, monkeypatch):
    archive = tmp_path / "repo.tar.gz"
    archive.write_bytes(b"archive")
    hosts("fl-0")
    assert booking.op_enqueue({"entry": entry(), "archive": str(archive)})["queued"]
    booking.op_take({"run": "train", "run_id": "train-id", "by": "ctl"})   # a lease: not copied
    whole = mirrorside.op_queue_read({"run": "train"})["entry"]
    assert whole["secrets"] == {"TOKEN": "s3cret"} and whole["taken_by"] == "ctl"
    (primary,) = booking.queue_summaries()

    root = hosts("fl-1")
    shipped = tmp_path / "fl-1-repo.tar.gz"
    shipped.write_bytes(b"archive")
    assert mirrorside.op_mirror_put({"entry": whole, "archive": str(shipped)}) == {"kept": True}
    monkeypatch.setattr(mirrorside, "_MIRROR_STATUS_BEFORE", lambda payload: {"containers": []})
    listed = mirrorside.op_status_mirror({})["queue_mirror"]
    assert "queue_mirror" not in mirrorside.op_status_mirror({"run": "train"})
    assert [c["digest"] for c in listed] == [primary["digest"]]
    assert listed[0]["queued_on"] == "fl-0" and listed[0]["taken_by"] is None
    assert os.path.samefile(os.path.join(root, "queue-mirror", "train.tar.gz"), str(shipped))
    assert oct(os.stat(os.path.join(root, "queue-mirror", "train.json")).st_mode & 0o777) == \
        "0o600"
    assert booking.queue_summaries() == []   # a copy is not this host's entry


def test_only_waiting_entries_are_copied(hosts):
    hosts("fl-1")
    with pytest.raises(nodeside.Failure, match="only waiting entries are copied"):
        mirrorside.op_mirror_put({"entry": entry(state="terminated")})


def test_adopting_a_copy_makes_it_this_hosts_entry_with_its_archive(hosts, tmp_path,
                                                                    monkeypatch):
    root = hosts("fl-1")
    shipped = tmp_path / "repo.tar.gz"
    shipped.write_bytes(b"archive")
    mirrorside.op_mirror_put({"entry": entry(), "archive": str(shipped)})
    answer = mirrorside.op_mirror_adopt({"run": "train", "run_id": "train-id", "host": "fl-1",
                                         "from": "fl-0", "changes": {"state": "active"}})
    assert answer["adopted"] and answer["entry"]["queued_on"] == "fl-1"
    assert answer["entry"]["handed_from"] == "fl-0" and answer["entry"]["state"] == "active"
    (own,) = booking.queue_summaries()
    assert own["run"] == "train" and own["handed_from"] == "fl-0"
    kept = booking._read_entry("train")
    assert kept["secrets"] == {"TOKEN": "s3cret"}
    assert os.path.samefile(kept["held_archive"], str(shipped))
    # The copy became the entry; the host notes that it adopted it (listed as "handed").
    assert os.listdir(os.path.join(root, "queue-mirror")) == ["handed"]
    monkeypatch.setattr(mirrorside, "_MIRROR_STATUS_BEFORE", lambda payload: {"containers": []})
    (note,) = mirrorside.op_status_mirror({})["queue_mirror"]
    assert (note["state"], note["handed_from"], note["run_id"]) == ("handed", "fl-0", "train-id")
    # A second adoption finds no copy; a drop of nothing says so.
    assert not mirrorside.op_mirror_adopt({"run": "train", "run_id": "train-id", "host": "fl-1",
                                           "from": "fl-0"})["adopted"]
    assert mirrorside.op_mirror_drop({"run": "train"}) == {"dropped": False}


def test_a_copy_is_not_adopted_over_an_entry_that_waits_here(hosts):
    hosts("fl-1")
    booking.op_enqueue({"entry": entry(queued_on="fl-1", run_id="other-id")})
    mirrorside.op_mirror_put({"entry": entry()})
    answer = mirrorside.op_mirror_adopt({"run": "train", "run_id": "train-id", "host": "fl-1",
                                         "from": "fl-0"})
    assert answer == {"adopted": False, "reason": "run train is pending here already"}
    assert booking._read_entry("train")["run_id"] == "other-id"
    # A drop of another run id leaves the copy; of its own, takes it.
    assert mirrorside.op_mirror_drop({"run": "train", "run_id": "x"}) == {"dropped": False}
    assert mirrorside.op_mirror_drop({"run": "train", "run_id": "train-id"}) == {"dropped": True}


def test_the_digest_changes_with_what_the_entry_says_not_with_its_lease():
    base = entry()
    assert booking.entry_digest(base) == booking.entry_digest(
        dict(base, taken_by="ctl", taken_until=1.0, held_archive="/x"))
    assert booking.entry_digest(base) != booking.entry_digest(dict(base, state="active"))


def test_a_host_that_adopted_a_run_refuses_its_copy_and_drops_a_late_one(hosts, monkeypatch):
    hosts("fl-1")
    mirrorside.op_mirror_put({"entry": entry()})
    assert mirrorside.op_mirror_adopt({"run": "train", "run_id": "train-id", "host": "fl-1",
                                       "from": "fl-0"})["adopted"]
    assert mirrorside.op_mirror_put({"entry": entry()}) == {
        "kept": False, "reason": "run train was handed over here"}
    booking.op_dequeue({"run": "train"})   # started: the entry went; the note stays
    assert mirrorside.op_mirror_put({"entry": entry()})["kept"] is False
    # A copy written before the note (as by a crash in between) is dropped, not adopted.
    with booking._Lock():
        booking._write_json(mirrorside._mirror_path("train"), entry())
    answer = mirrorside.op_mirror_adopt({"run": "train", "run_id": "train-id", "host": "fl-1",
                                         "from": "fl-0"})
    assert answer["adopted"] is False and answer["dropped"] is True
    assert mirrorside._mirror_read("train") is None and booking._read_entry("train") is None
    # Another run of the name is copied as any.
    assert mirrorside.op_mirror_put({"entry": entry(run_id="new-id")}) == {"kept": True}
