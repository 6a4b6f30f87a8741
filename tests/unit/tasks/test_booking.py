# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Claims on a host (tasks.hostside.booking): granted once, refused to a second run while they hold,
freed when their container ends or their lease lapses; and atomic across processes.

Docker is the fake of fakes.py (a script on PATH answering from a rule table);
BOOK_ROOT and RUN_ROOT point into a temporary folder.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest
from ansible_collections.gpufleet.cluster.plugins.module_utils.tasks.hostside import (
    booking,
    nodeside,
    replicaside,
)

from .fakes import inspect_entry, job_spec, replica_spec, write_state


@pytest.fixture
def book(tmp_path, monkeypatch):
    root = tmp_path / "book"
    monkeypatch.setattr(booking, "BOOK_ROOT", str(root))
    monkeypatch.setattr(nodeside, "RUN_ROOT", str(tmp_path / "runs"))
    return root


def claim(run, run_id=None, blocks=1, total=1, whole=True, gpus=(), lease=900, submission=0):
    return {"run": run, "run_id": run_id or run + "-id", "submission": submission,
            "jobs": [0], "blocks": blocks, "total_blocks": total, "gpu_ids": list(gpus),
            "whole": whole, "lease": lease}


def containers(docker, *entries):
    """The host's task containers, as ``docker ps`` and ``docker inspect`` answer them."""
    docker.rules[:] = []
    docker.on(["ps"], stdout="".join("c%d\n" % i for i in range(len(entries))))
    docker.on(["inspect"], stdout=json.dumps(list(entries)))


def test_a_whole_host_goes_to_one_run_and_the_second_is_told_who_holds_it(docker, book):
    containers(docker)
    assert booking.op_claim(claim("a"))["claimed"]
    refused = booking.op_claim(claim("b"))
    assert refused == {"claimed": False, "reason": "busy (1 of 1 blocks held by a)"}
    # Claiming again under the same run id renews the lease.
    assert booking.op_claim(claim("a"))["claimed"]
    assert stat_mode(book / "claims" / "a.json") == 0o600


def stat_mode(path):
    return os.stat(str(path)).st_mode & 0o777


def test_blocks_and_gpus_are_shared_until_they_run_out(docker, book):
    containers(docker)
    assert booking.op_claim(claim("a", blocks=2, total=4, whole=False, gpus=["0", "1"]))["claimed"]
    assert booking.op_claim(claim("b", blocks=1, total=4, whole=False, gpus=["2"]))["claimed"]
    assert booking.op_claim(claim("c", blocks=2, total=4, whole=False))["reason"] == (
        "busy (3 of 4 blocks held by a, b, 2 more wanted)")
    assert booking.op_claim(claim("d", blocks=1, total=4, whole=False, gpus=["1"]))["reason"] == (
        "GPU 1 held by a, b")
    assert booking.op_claim(claim("e", blocks=4, total=4))["reason"].startswith("busy (3 of 4")


def test_a_claim_holds_while_its_container_lives_and_ends_with_it(docker, book):
    containers(docker)
    assert booking.op_claim(claim("a"))["claimed"]
    alive = inspect_entry("a-0-0", run="a", job=0, status="running")
    containers(docker, alive)
    assert not booking.op_claim(claim("b"))["claimed"]
    assert [c["run"] for c in booking.op_status_booked({})["claims"]] == ["a"]
    containers(docker, inspect_entry("a-0-0", run="a", job=0, status="exited", exit_code=0))
    assert booking.op_status_booked({})["claims"] == []
    assert booking.op_claim(claim("b"))["claimed"]
    assert sorted(os.listdir(str(book / "claims"))) == ["b.json"]  # a's was forgotten


def test_a_lapsed_lease_frees_the_host_of_a_controller_that_never_started(docker, book):
    containers(docker)
    assert booking.op_claim(claim("a", lease=0.01))["claimed"]
    time.sleep(0.05)
    assert booking.op_claim(claim("b"))["claimed"]


def test_the_same_run_name_from_another_submitter_is_refused(docker, book):
    containers(docker)
    assert booking.op_claim(claim("train", run_id="one", blocks=1, total=4, whole=False))["claimed"]
    answer = booking.op_claim(claim("train", run_id="two", blocks=1, total=4, whole=False))
    assert answer["reason"] == ("run train is already running here (submitted by another "
                                "controller)")


def test_a_container_without_a_claim_still_counts_as_busy(docker, book):
    # Started by a gpufleet that did not claim yet.
    old = inspect_entry("old-0-0", run="old", job=0, status="running")
    old["Config"]["Labels"]["gpufleet.blocks"] = "1"
    containers(docker, old)
    assert booking.op_claim(claim("new"))["reason"] == "busy (1 of 1 blocks held by old)"


def test_start_claims_first_and_refuses_when_the_host_was_taken(docker, book):
    containers(docker)
    assert booking.op_claim(claim("a"))["claimed"]
    job = {"run": "b", "job_num": 0, "container": "b-0-0", "files": {}, "docker_args": [],
           "image": "img", "claim": claim("b")}
    with pytest.raises(nodeside.Failure, match=r"cannot start b-0-0: this host was taken "
                                               r"meanwhile: busy \(1 of 1 blocks held by a\)"):
        booking.op_start_booked({"job": job})
    assert not any(c[:1] == ["run"] for c in docker.calls())


def test_a_replica_is_respawned_only_where_its_claim_holds_again(docker, book, tmp_path):
    containers(docker)
    job = {"run": "svc", "job_num": 0, "container": "svc-0-0", "files": {},
           "docker_args": ["--label", "gpufleet.service={}"], "image": "img",
           "claim": claim("svc")}
    docker.on(["container", "inspect"], stderr="No such container", rc=1)
    docker.on(["run"], stdout="abc\n")
    booking.op_start_booked({"job": job})
    # Gone, and its lease lapsed: another run took the host meanwhile.
    (book / "claims" / "svc.json").unlink()
    assert booking.op_claim(claim("other"))["claimed"]
    answer = replicaside.op_respawn({"run": "svc", "job_num": 0})
    assert answer == {"respawned": False, "why": "this host was taken meanwhile: busy "
                                                 "(1 of 1 blocks held by other)"}
    assert len([c for c in docker.calls() if c[0] == "run"]) == 1
    # Free again: the replica comes back, its claim renewed.
    booking.op_release({"run": "other"})
    assert replicaside.op_respawn({"run": "svc", "job_num": 0})["respawned"]
    assert (book / "claims" / "svc.json").exists()


@pytest.mark.parametrize("owner", ["old", "new"])
def test_a_start_that_replaces_clears_an_earlier_run_of_the_name_but_never_its_own(
        docker, book, tmp_path, monkeypatch, owner):
    """A host the controller took as free without asking it clears the old run of the name
    in the start, after the claim: an old run's container and folders go; a container of this
    very submission (the start asked again) stays."""
    box = inspect_entry("a-0-0", run="a", job=0, status="exited")
    box["Config"]["Labels"]["gpufleet.run-id"] = owner
    containers(docker, box)
    old_folder = tmp_path / "runs" / "a" / "3" / "state"
    old_folder.mkdir(parents=True)
    started = []
    monkeypatch.setattr(booking, "op_start", lambda payload: started.append(
        (payload["job"]["container"], [c[:1] for c in docker.calls()])) or {"started": True})
    job = {"run": "a", "job_num": 0, "container": "a-0-0", "files": {}, "docker_args": [],
           "image": "img", "claim": dict(claim("a", run_id="new"), replace=True)}
    assert booking.op_start_booked({"job": job}) == {"started": True}
    removed = ["rm", "-f", "a-0-0"] in docker.calls()
    assert removed is (owner == "old")
    assert old_folder.exists() is (owner == "new")
    assert [name for name, _calls in started] == ["a-0-0"]
    if removed:
        assert ["rm"] in started[0][1]   # cleared before the start
    assert json.loads((book / "claims" / "a.json").read_text())["run_id"] == "new"


def test_remove_drops_the_runs_claim_but_keeps_a_new_submitters(docker, book):
    containers(docker)
    assert booking.op_claim(claim("a", run_id="new"))["claimed"]
    booking.op_remove_booked({"run": "a", "keep": "new"})
    assert (book / "claims" / "a.json").exists()
    booking.op_remove_booked({"run": "a"})
    assert not (book / "claims" / "a.json").exists()


DRIVER = r"""
import json, sys, time
g = {"__name__": "gpufleet_node"}
source = open(sys.argv[1], "rb").read()
exec(compile(source, "gpufleet_node", "exec"), g)
g["BOOK_ROOT"] = sys.argv[2]
g["RUN_ROOT"] = sys.argv[3]
while time.time() < float(sys.argv[4]):
    time.sleep(0.001)
answer = g["op_claim"]({"run": sys.argv[5], "run_id": sys.argv[5], "blocks": 1,
                        "total_blocks": 1, "whole": True})
print(json.dumps(answer))
"""


def test_ten_processes_claiming_one_host_at_once_get_one_grant(docker, book, tmp_path):
    """The host source as the hosts run it (nodeside then booking, one namespace), ten
    processes released at the same instant: the lock lets exactly one through."""
    from ansible_collections.gpufleet.cluster.plugins.module_utils.tasks import ssh

    containers(docker)
    source = tmp_path / "host.py"
    source.write_bytes(ssh.host_source())
    driver = tmp_path / "driver.py"
    driver.write_text(DRIVER)
    go = "%f" % (time.time() + 1.0)
    procs = [subprocess.Popen([sys.executable, str(driver), str(source), str(book),
                               str(tmp_path / "runs"), go, "run%d" % i],
                              stdout=subprocess.PIPE, env=dict(os.environ))
             for i in range(10)]
    answers = [json.loads(p.communicate(timeout=60)[0]) for p in procs]
    granted = [a for a in answers if a["claimed"]]
    assert len(granted) == 1
    winner = granted[0]["claim"]["run"]
    assert all(a["reason"] == "busy (1 of 1 blocks held by %s)" % winner
               for a in answers if not a["claimed"])
    assert os.listdir(str(book / "claims")) == [winner + ".json"]


def test_the_same_run_from_a_second_controller_is_refused(docker, book):
    """A queue entry whose take lapsed and was taken again: one submission only."""
    containers(docker)
    first = dict(claim("train", blocks=1, total=4, whole=False), by="ctl-a:1")
    assert booking.op_claim(first)["claimed"]
    assert booking.op_claim(dict(first, by="ctl-a:1"))["claimed"]   # a renewal
    answer = booking.op_claim(dict(first, by="ctl-b:2"))
    assert answer["reason"] == "run train is being started here by ctl-a:1"


def test_a_pass_cannot_undo_a_stop_of_a_taken_entry(docker, book):
    entry = {"run": "r", "run_id": "id", "state": "pending", "submitted_epoch": 1.0}
    assert booking.op_enqueue({"entry": entry})["queued"]
    assert booking.op_take({"run": "r", "run_id": "id", "by": "pass"})["taken"]
    # The user's stop, while the pass pulls the image.
    assert booking.op_update({"run": "r", "run_id": "id",
                              "changes": {"state": "terminated"}})["updated"]
    mine = {"state": "pending", "taken_by": "pass"}
    assert not booking.op_update({"run": "r", "run_id": "id", "changes": {"state": "active"},
                                  "expect": mine})["updated"]
    assert not booking.op_dequeue({"run": "r", "run_id": "id", "expect": mine})["removed"]
    assert not booking.op_take({"run": "r", "run_id": "id", "by": "pass"})["taken"]
    (left,) = booking.queue_summaries()
    assert left["state"] == "terminated"
    assert stat_mode(book / "queue" / "r.json") == 0o600
    assert stat_mode(book / "queue") == 0o700


def test_a_run_with_a_repo_is_queued_on_a_host_that_never_queued_one(docker, book, tmp_path):
    """A task with ``repos`` retried on no-capacity: its entry goes to a fresh host, where
    neither the booking folder nor its queue folder exists yet; the repo archive is linked
    beside the entry all the same."""
    archive = tmp_path / "repos" / ("ab" * 32 + ".tar.gz")
    archive.parent.mkdir()
    archive.write_bytes(b"archive")
    assert not book.exists()
    entry = {"run": "r", "run_id": "id", "state": "pending", "submitted_epoch": 1.0}
    assert booking.op_enqueue({"entry": entry, "archive": str(archive)})["queued"]
    held = book / "queue" / "r.tar.gz"
    assert held.read_bytes() == b"archive"
    assert os.stat(str(held)).st_ino == os.stat(str(archive)).st_ino   # a link, not a copy
    assert json.loads((book / "queue" / "r.json").read_text())["held_archive"] == str(held)
    assert stat_mode(book / "queue") == 0o700


# ---------------------------------------------------------------------------------------------
# respawn: a service's replica made again from its start.json (tasks/test_nodeside.py has the
# start that keeps it)


def test_respawn_makes_a_gone_replica_again_with_a_new_state(absent, run_root, book):
    absent.on(["run"], stdout="abc\n")
    nodeside.op_start({"job": replica_spec()})
    write_state(run_root, "svc", 1, running="1714557600\n", exit_code="137\n")
    absent.on(["ps"], stdout="")   # its container was removed under it
    absent.on(["rm"], stdout="")

    answer = replicaside.op_respawn({"run": "svc", "job_num": 1})

    assert answer == {"respawned": True, "id": "abc", "respawns": 1}
    runs = [c for c in absent.calls() if c[0] == "run"]
    assert len(runs) == 2 and runs[0] == runs[1]   # the same container, port and mounts
    assert ["rm", "-f", "svc-0-1"] in absent.calls()
    assert list((run_root / "svc" / "1" / "state").iterdir()) == []   # a new state
    assert (run_root / "svc" / "1" / "job" / "job.sh").exists()       # the same files
    assert replicaside.op_respawn({"run": "svc", "job_num": 1})["respawns"] == 2


def test_respawn_leaves_a_replica_that_runs(docker, run_root, book):
    docker.on(["container", "inspect"], stderr="No such container", rc=1)
    docker.on(["run"], stdout="abc\n")
    nodeside.op_start({"job": replica_spec()})
    docker.on(["ps"], stdout="aaa\n")
    docker.on(["inspect"], stdout=json.dumps([inspect_entry("svc-0-1", run="svc", job=1)]))

    answer = replicaside.op_respawn({"run": "svc", "job_num": 1})

    assert answer == {"respawned": False, "why": "its container svc-0-1 is running"}
    assert len([c for c in docker.calls() if c[0] == "run"]) == 1


def test_respawn_refuses_a_job_that_is_no_replica_and_bad_names(absent, run_root, book):
    absent.on(["run"], stdout="abc\n")
    nodeside.op_start({"job": job_spec()})
    answer = replicaside.op_respawn({"run": "train", "job_num": 1})
    assert answer["respawned"] is False and "not started here as a service" in answer["why"]
    for bad in ({"run": "../x", "job_num": 1}, {"run": "svc", "job_num": "1"}):
        with pytest.raises(nodeside.Failure):
            replicaside.op_respawn(bad)


def test_a_respawn_that_finds_the_name_taken_made_nothing(docker, run_root, book):
    docker.on(["container", "inspect"], stderr="No such container", rc=1)
    docker.on(["ps"], stdout="")
    docker.on(["rm"], stdout="")
    docker.on(["run"], rc=125, stderr='Conflict. The container name "/svc-0-1" is already '
              'in use by container "0123".')
    kept = run_root / "svc" / "1"
    kept.mkdir(parents=True)
    (kept / "start.json").write_text(json.dumps(dict(
        (key, replica_spec().get(key)) for key in nodeside.RESPAWN_KEYS)))
    answer = replicaside.op_respawn({"run": "svc", "job_num": 1})
    assert answer == {"respawned": False, "why": "its container svc-0-1 is there"}
    assert not (kept / "respawns").exists()


# ---------------------------------------------------------------------------------------------
# replace: a service's replica taken to a new version (services.rolling)


def test_replace_starts_the_new_version_in_the_replicas_place(absent, run_root, book):
    absent.on(["run"], stdout="abc\n")
    nodeside.op_start({"job": replica_spec()})
    absent.on(["rm"], stdout="")
    new = replica_spec()
    new["files"]["job.sh"] = {"text": "#!/bin/sh\necho new\n", "mode": 0o755}
    assert replicaside.op_replace({"job": new}) == {"started": True, "id": "abc"}
    assert ["rm", "-f", "svc-0-1"] in absent.calls()
    folder = run_root / "svc" / "1"
    assert (folder / "job" / "job.sh").read_text() == "#!/bin/sh\necho new\n"
    assert not (run_root / "svc" / "1.previous").exists()
    assert (book / "claims" / "svc.json").exists()   # its claim, renewed


def test_a_replace_that_cannot_start_makes_the_old_version_again(docker, run_root, book):
    docker.on(["container", "inspect"], stderr="No such container", rc=1)
    docker.on(["ps"], stdout="")
    docker.on(["rm"], stdout="")
    old = replica_spec()
    runs = run_root / "svc" / "1"
    # The old replica's start, as op_start left it (its run answered "old").
    docker.on(["run", "-d", "--name", "svc-0-1", "--label", "gpufleet.run=svc", "--label",
               'gpufleet.service={"port": 8000}', "-p", "10.0.0.5::8000"], stdout="old\n")
    nodeside.op_start({"job": old})
    new = dict(replica_spec(), image="missing:latest")
    new["docker_args"] = new["docker_args"] + ["--label", "version=2"]
    docker.rules.insert(0, {"prefix": ["run", "-d"] + new["docker_args"], "stdout": "",
                            "stderr": "Unable to find image 'missing:latest'", "rc": 125})
    docker._save()
    with pytest.raises(nodeside.Failure, match=r"could not start container svc-0-1: .*missing"
                                               r".*; the previous version runs again"):
        replicaside.op_replace({"job": new})
    # The old folder is back (its files, its start.json) and its container made again.
    assert (runs / "job" / "job.sh").read_text() == "#!/bin/sh\necho job\n"
    assert json.loads((runs / "start.json").read_text())["image"] == "ubuntu:22.04"
    assert [c for c in docker.calls() if c[0] == "run"][-1][-2] == "ubuntu:22.04"
    assert not (run_root / "svc" / "1.previous").exists()


# ---------------------------------------------------------------------------------------------
# shares: one claim per run on a host, one share per job in it (a service's replicas may share
# a host, and one may be added beside the others or taken away)


def share_claim(run, num, blocks, by="first:1", submission=0, add=False, gpus=()):
    return {"run": run, "run_id": run + "-id", "submission": submission, "jobs": [num],
            "blocks": blocks, "total_blocks": 4, "gpu_ids": list(gpus), "whole": False,
            "by": by, "add": add,
            "shares": {str(num): {"blocks": blocks, "gpu_ids": list(gpus), "whole": False}}}


def held(book, run):
    return json.loads((book / "claims" / (run + ".json")).read_text())


def test_the_jobs_of_one_submission_on_a_host_add_up_and_each_start_renews_its_own(docker,
                                                                                   book):
    containers(docker)
    assert booking.op_claim(share_claim("svc", 0, 1, gpus=["0"]))["claimed"]
    assert booking.op_claim(share_claim("svc", 1, 2, gpus=["1"]))["claimed"]
    both = held(book, "svc")
    assert (both["jobs"], both["blocks"], both["gpu_ids"]) == ([0, 1], 3, ["0", "1"])
    assert "add" not in both
    # Renewing job 0's share (its start) keeps job 1's: the host stays 3 of 4 blocks busy.
    assert booking.op_claim(share_claim("svc", 0, 1, gpus=["0"]))["claimed"]
    assert booking.op_claim(claim("other", blocks=2, total=4, whole=False))["reason"] == (
        "busy (3 of 4 blocks held by svc, 2 more wanted)")
    # A new submission of the run starts afresh.
    assert booking.op_claim(share_claim("svc", 0, 1, submission=1))["claimed"]
    assert held(book, "svc")["jobs"] == [0] and held(book, "svc")["blocks"] == 1


def test_a_share_added_by_another_controller_joins_the_runs_claim_within_the_hosts_room(
        docker, book):
    containers(docker)
    assert booking.op_claim(share_claim("svc", 0, 2))["claimed"]
    # The same submission from another controller is refused, unless it adds a share.
    assert "is being started here by first:1" in booking.op_claim(
        share_claim("svc", 1, 1, by="second:2"))["reason"]
    assert booking.op_claim(share_claim("svc", 1, 1, by="second:2", add=True))["claimed"]
    assert held(book, "svc")["by"] == "first:1" and held(book, "svc")["blocks"] == 3
    assert booking.op_claim(share_claim("svc", 2, 2, by="second:2", add=True))["reason"] == (
        "busy (0 of 4 blocks held by another run, 5 more wanted)")
    # Giving back one share leaves the others; the last one takes the claim with it.
    assert booking.op_release({"run": "svc", "run_id": "svc-id", "jobs": [1]})["released"]
    assert held(book, "svc")["jobs"] == [0] and held(book, "svc")["blocks"] == 2
    assert booking.op_release({"run": "svc", "run_id": "svc-id", "jobs": [0]})["released"]
    assert not (book / "claims" / "svc.json").exists()


def test_a_claim_written_before_shares_counts_as_one_share(docker, book):
    containers(docker)
    (book / "claims").mkdir(parents=True)
    old = dict(claim("svc", run_id="svc-id", blocks=2, total=4, whole=False), by="first:1",
               expires=time.time() + 60)
    (book / "claims" / "svc.json").write_text(json.dumps(old))
    assert booking.op_claim(share_claim("svc", 1, 1, add=True))["claimed"]
    assert held(book, "svc")["jobs"] == [0, 1] and held(book, "svc")["blocks"] == 3


def test_a_retired_replica_is_gone_for_good_and_reads_as_scaled_down(absent, run_root, book):
    absent.on(["run"], stdout="abc\n")
    job = replica_spec()
    job["claim"] = share_claim("svc", 1, 1)
    job["claim"]["run_id"] = "r1"
    booking.op_start_booked({"job": job})
    assert held(book, "svc")["jobs"] == [1]
    absent.on(["rm"], stdout="")
    absent.on(["ps"], stdout="")

    assert replicaside.op_retire({"run": "svc", "job_num": 1, "run_id": "r1"}) == {
        "retired": True, "removed": ["svc-0-1"]}
    assert ["rm", "-f", "svc-0-1"] in absent.calls()
    assert not (book / "claims" / "svc.json").exists()
    assert not (run_root / "svc" / "1" / "start.json").exists()
    # Its folder stays as what status says of it: terminated, scaled down.
    (entry,) = nodeside.op_status({"run": "svc"})["containers"]
    assert entry["state"] == "gone" and entry["files"]["reason"] == "scaled_down"
    from ansible_collections.gpufleet.cluster.plugins.module_utils.tasks import lifecycle
    assert lifecycle.job_status(entry) == ("terminated", "scaled_down", None)
    # Nothing makes it again.
    assert replicaside.op_respawn({"run": "svc", "job_num": 1})["respawned"] is False


def test_a_start_that_fails_gives_back_its_own_share_only(docker, run_root, book):
    containers(docker)
    assert booking.op_claim(share_claim("svc", 0, 1))["claimed"]
    docker.on(["container", "inspect"], stderr="No such container", rc=1)
    docker.on(["run"], rc=125, stderr="Unable to find image")
    docker.on(["rm"], stdout="")
    job = replica_spec()
    job["claim"] = share_claim("svc", 1, 1, by="second:2", add=True)
    job["claim"]["run_id"] = "svc-id"
    with pytest.raises(nodeside.Failure):
        booking.op_start_booked({"job": job})
    assert held(book, "svc")["jobs"] == [0]


def test_repoint_notes_where_a_replicas_service_is_published_now_for_status(
        absent, run_root, book):
    absent.on(["run"], stdout="abc\n")
    job = replica_spec()
    job["claim"] = dict(share_claim("svc", 1, 1), run_id="r1")
    booking.op_start_booked({"job": job})
    assert "proxy" not in nodeside._read_state("svc", 1)
    proxy = {"proxy_host": "demo-1", "proxy_address": "10.0.0.3", "url": "http://u/",
             "model_url": None, "moved_from": "demo-0", "moved_at": 5.0, "token": "no"}
    assert replicaside.op_repoint({"run": "svc", "job_num": 1, "run_id": "r1",
                                   "proxy": proxy}) == {"repointed": True}
    noted = nodeside._read_state("svc", 1)["proxy"]
    assert noted == dict((k, v) for k, v in proxy.items() if k != "token")
    with pytest.raises(nodeside.Failure, match="is not here"):
        replicaside.op_repoint({"run": "svc", "job_num": 1, "run_id": "other", "proxy": proxy})
    with pytest.raises(nodeside.Failure, match="no proxy host given"):
        replicaside.op_repoint({"run": "svc", "job_num": 1, "run_id": "r1", "proxy": {}})


def test_recount_notes_a_replicas_new_count_beside_it_for_status(absent, run_root, book):
    absent.on(["run"], stdout="abc\n")
    job = replica_spec()
    job["claim"] = dict(share_claim("svc", 1, 1), run_id="r1")
    booking.op_start_booked({"job": job})
    assert replicaside.op_recount({"run": "svc", "job_num": 1, "run_id": "r1", "replicas": 2}) == {
        "recounted": True}
    assert nodeside._read_state("svc", 1)["replicas"] == "2"
    with pytest.raises(nodeside.Failure, match="is not here"):
        replicaside.op_recount({"run": "svc", "job_num": 1, "run_id": "other", "replicas": 2})
    with pytest.raises(nodeside.Failure, match="bad replica count"):
        replicaside.op_recount({"run": "svc", "job_num": 1, "run_id": "r1", "replicas": 0})
    # A retire of another run's replica of that name leaves this one alone.
    assert replicaside.op_retire({"run": "svc", "job_num": 1, "run_id": "other"}) == {
        "retired": False, "removed": []}


def test_a_retire_whose_container_cannot_be_removed_keeps_the_replica(docker, run_root, book):
    docker.on(["container", "inspect"], stderr="No such container", rc=1)
    docker.on(["run"], stdout="abc\n")
    job = replica_spec()
    job["claim"] = dict(share_claim("svc", 1, 1), run_id="r1")
    booking.op_start_booked({"job": job})
    docker.on(["rm"], rc=1, stderr="Error response from daemon: device or resource busy")
    with pytest.raises(nodeside.Failure, match="could not remove svc-0-1: .*busy"):
        replicaside.op_retire({"run": "svc", "job_num": 1, "run_id": "r1"})
    assert (run_root / "svc" / "1" / "start.json").exists()
    assert held(book, "svc")["jobs"] == [1]


def test_each_share_holds_by_its_own_job_so_one_that_never_started_lapses(docker, book):
    containers(docker)
    assert booking.op_claim(share_claim("svc", 0, 2))["claimed"]
    added = dict(share_claim("svc", 1, 2, by="second:2", add=True), lease=0.01)
    assert booking.op_claim(added)["claimed"]
    # Replica 0 runs; replica 1's start never came (its controller died): its share lapses.
    containers(docker, inspect_entry("svc-0-0", run="svc", job=0, status="running"))
    time.sleep(0.05)
    assert booking.op_claim(claim("other", blocks=2, total=4, whole=False))["claimed"]
    (live,) = [c for c in booking.op_status_booked({})["claims"] if c["run"] == "svc"]
    assert (live["jobs"], live["blocks"]) == ([0], 2)
    # A job whose container ended frees its share too, while the run's other job runs.
    both = dict(share_claim("svc", 0, 2), expires=time.time() + 900,
                shares={"0": {"blocks": 2, "gpu_ids": [], "whole": False},
                        "1": {"blocks": 1, "gpu_ids": [], "whole": False}})
    boxes = [{"labels": {"gpufleet.run": "svc", "gpufleet.submission": "0",
                         "gpufleet.job": str(num)}, "state": state}
             for num, state in ((0, "running"), (1, "exited"))]
    assert booking.usage([both], boxes, time.time())[0] == 2
    assert booking.usage([both], boxes[:1], time.time())[0] == 3   # 1 not started yet


def test_a_share_that_holds_keeps_its_claim_from_another_runs_clean_up(docker, book):
    # Job 0 ended; job 1 is claimed and not started yet: its share holds, so the claim stays.
    containers(docker, inspect_entry("svc-0-0", run="svc", job=0, status="exited",
                                     exit_code=0))
    assert booking.op_claim(share_claim("svc", 0, 2))["claimed"]
    assert booking.op_claim(share_claim("svc", 1, 2))["claimed"]
    assert booking.op_claim(claim("other", blocks=2, total=4, whole=False))["claimed"]
    assert held(book, "svc")["jobs"] == [1]   # job 0's share went with its container
    assert booking.op_claim(claim("third", blocks=1, total=4, whole=False))["reason"] == (
        "busy (4 of 4 blocks held by other, svc, 1 more wanted)")
