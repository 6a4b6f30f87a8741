# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""A task's schedule on its host (tasks.hostside.scheduleside): cron read as crontab(5) reads
it, in UTC; a job kept ready without its container and its share given back; the tick that
starts it at its times (claiming its share again, waiting while the host is busy, skipping a
firing while the previous one runs); the status that shows it; the stop that ends it.
RUN_ROOT and BOOK_ROOT point into a temporary folder; Docker is a fake that records what it
was asked.
"""

from __future__ import annotations

import calendar
import json
import os
import time

import pytest
from ansible_collections.gpufleet.cluster.plugins.module_utils.tasks.hostside import (
    booking,
    nodeside,
    scheduleside,
)


def epoch(text):
    return calendar.timegm(time.strptime(text, "%Y-%m-%d %H:%M"))


def after(text, *crons):
    found = scheduleside.cron_next(list(crons), epoch(text))
    return None if found is None else time.strftime("%Y-%m-%d %H:%M %a", time.gmtime(found))


# 2026-11-28 is a Saturday.
@pytest.mark.parametrize("crons, now, expected", [
    (["* * * * *"], "2026-11-28 10:00", "2026-11-28 10:01 Sat"),
    (["0 8 * * mon-fri"], "2026-11-28 10:00", "2026-11-30 08:00 Mon"),
    (["0 8 * * 1-5"], "2026-11-28 10:00", "2026-11-30 08:00 Mon"),   # 1 is Monday, as in cron
    (["30 6 * * 0"], "2026-11-28 10:00", "2026-11-29 06:30 Sun"),
    (["30 6 * * 7"], "2026-11-28 10:00", "2026-11-29 06:30 Sun"),    # so is 7
    (["*/15 9-17 * * *"], "2026-11-28 17:46", "2026-11-29 09:00 Sun"),
    (["*/15 9-17 * * *"], "2026-11-28 09:14", "2026-11-28 09:15 Sat"),
    (["0 0 29 2 *"], "2026-11-28 10:00", "2028-02-29 00:00 Tue"),
    (["0 12 1 jan,jul *"], "2026-11-28 10:00", "2027-01-01 12:00 Fri"),
    # Both day fields restricted: either one fires (the 1st, or any Monday).
    (["0 0 1 * mon"], "2026-11-28 10:00", "2026-11-30 00:00 Mon"),
    (["0 0 1 * mon"], "2026-11-30 00:00", "2026-12-01 00:00 Tue"),
    # One of them *: both must hold (a Monday of December only).
    (["0 0 * 12 mon"], "2026-11-28 10:00", "2026-12-07 00:00 Mon"),
    (["0 23 * * *", "0 7 * * *"], "2026-11-28 10:00", "2026-11-28 23:00 Sat"),
    (["5 4 * * sun"], "2026-11-29 04:05", "2026-12-06 04:05 Sun"),   # strictly after now
])
def test_cron_times_are_crontab_s_in_utc(crons, now, expected):
    assert after(now, *crons) == expected


def test_a_day_that_never_comes_and_a_bad_field():
    assert after("2026-11-28 10:00", "0 0 30 2 *") is None
    for bad, why in (("0 8 * *", "5 fields"), ("61 * * * *", "out of range"),
                     ("0 8 * * fri-mon", "backwards"), ("*/0 * * * *", "step"),
                     ("0 8 * * funday", "not a value")):
        with pytest.raises(ValueError, match=why):
            scheduleside.cron_next([bad], 0)


class Engine:
    """Docker on the fake host: containers by name, with a state each."""

    def __init__(self):
        self.containers = {}
        self.started = []
        self.jobs = []
        self.removed = []

    def status(self, payload):
        return {"containers": [{"name": name, "state": state, "labels": {}}
                               for name, state in self.containers.items()]}

    def run(self, job, folder):
        self.started.append(job["container"])
        self.jobs.append(job)
        self.containers[job["container"]] = "running"
        with open(os.path.join(folder, "created"), "w") as handle:
            handle.write("c0ffee%d\n" % len(self.started))
        return {"started": True, "id": "c0ffee%d" % len(self.started)}

    def docker(self, args, check=True):
        if args[:2] == ["rm", "-f"]:
            self.removed.append(args[2])
            self.containers.pop(args[2], None)
        return 0, "", ""


@pytest.fixture
def host(tmp_path, monkeypatch):
    engine = Engine()
    monkeypatch.setattr(nodeside, "RUN_ROOT", str(tmp_path / "runs"))
    monkeypatch.setattr(scheduleside, "RUN_ROOT", str(tmp_path / "runs"))
    monkeypatch.setattr(booking, "BOOK_ROOT", str(tmp_path / "book"))
    monkeypatch.setattr(scheduleside, "op_status", engine.status)
    monkeypatch.setattr(scheduleside, "_run_container", engine.run)
    monkeypatch.setattr(scheduleside, "_docker", engine.docker)
    monkeypatch.setattr(scheduleside, "tick_ensure", lambda: "loop")
    monkeypatch.setattr(nodeside, "_container_exists", lambda name: name in engine.containers)
    engine.claims = []
    engine.busy = None

    def claim(payload, now):
        engine.claims.append(payload)
        if engine.busy:
            return {"claimed": False, "reason": engine.busy}
        return {"claimed": True, "claim": payload}

    engine.swept = []
    monkeypatch.setattr(scheduleside, "_event_sweep_quietly",
                        lambda answer, containers, run: engine.swept.append(
                            (run, list(engine.started))))
    engine.seen = []
    monkeypatch.setattr(scheduleside, "usage_seen",
                        lambda entries, now: engine.seen.append([e["name"] for e in entries]))
    engine.dropped = []
    monkeypatch.setattr(scheduleside, "_claim_locked", claim)
    monkeypatch.setattr(scheduleside, "_drop_shares",
                        lambda run, run_id, jobs: engine.dropped.append((run, run_id, jobs)))
    # ``start`` as the helper's chain ends: nodeside's own, with no claim to take; the status
    # and stop this part wraps: the fake engine's.
    monkeypatch.setitem(booking.BOOK_OPS, "start", nodeside.op_start)
    monkeypatch.setattr(scheduleside, "_SCHEDULE_STATUS_BEFORE", engine.status)
    monkeypatch.setattr(scheduleside, "_SCHEDULE_STOP_BEFORE", lambda payload: {"stopped": [
        j["container"] for j in payload["jobs"]], "ended": []})
    engine.removes = []
    monkeypatch.setattr(scheduleside, "_SCHEDULE_REMOVE_BEFORE",
                        lambda payload: engine.removes.append(payload) or {"removed": []})
    engine.root = tmp_path
    return engine


def job(run="nightly", num=0):
    return {"run": run, "job_num": num, "container": "%s-%d-0" % (run, num),
            "image": "ubuntu", "docker_args": ["--label", "gpufleet.run=%s" % run,
                                               "--label", "gpufleet.submission=0",
                                               "--label", "gpufleet.job=%d" % num],
            "files": {"job.sh": {"text": "#!/bin/sh\ntrue\n", "mode": 0o755}},
            "claim": {"run": run, "run_id": "r1", "submission": 0,
                      "shares": {str(num): {"blocks": 1, "gpu_ids": [], "whole": False}}}}


def kept(host, run="nightly", num=0):
    with open(str(host.root / "runs" / run / str(num) / "schedule.json")) as handle:
        return json.load(handle)


def arm(host, crons=("* * * * *",), at=None):
    answer = scheduleside.op_arm({"job": job(), "cron": list(crons)})
    assert answer["armed"] is True and answer["tick"] == "loop"
    return answer


def test_arming_keeps_the_job_ready_without_its_container_and_frees_the_host(host):
    before = time.time()
    answer = arm(host)
    assert before < answer["next"] <= before + 60 and answer["next"] % 60 == 0
    folder = host.root / "runs" / "nightly" / "0"
    assert (folder / "job" / "job.sh").read_text() == "#!/bin/sh\ntrue\n"
    assert json.loads((folder / "start.json").read_text())["container"] == "nightly-0-0"
    assert oct((folder / "schedule.json").stat().st_mode & 0o777) == "0o600"
    assert host.started == [] and host.dropped == [("nightly", "r1", [0])]
    assert kept(host)["firings"] == 0 and scheduleside.schedule_wanted()
    # Status shows it: a job that has not fired yet, with its schedule.
    entries = scheduleside.op_status_schedule({"run": "nightly"})["containers"]
    (entry,) = [e for e in entries if e["name"] == "nightly-0-0"]
    assert entry["state"] == "scheduled"
    assert entry["files"]["schedule"]["next"] == answer["next"]
    assert entry["labels"] == {"gpufleet.run": "nightly", "gpufleet.submission": "0",
                               "gpufleet.job": "0"}


def test_a_bad_or_impossible_schedule_is_refused_before_anything_is_written(host):
    with pytest.raises(nodeside.Failure, match="bad cron expression"):
        scheduleside.op_arm({"job": job(), "cron": ["0 8 * *"]})
    with pytest.raises(nodeside.Failure, match="never comes"):
        scheduleside.op_arm({"job": job(), "cron": ["0 0 31 4 *"]})
    assert not (host.root / "runs" / "nightly").exists()


def test_the_tick_fires_at_the_time_and_again_at_the_next(host):
    first = arm(host)["next"]
    assert scheduleside.schedule_tick(first - 1) == {} and host.started == []
    assert scheduleside.schedule_tick(first + 3) == {"nightly/0": "fired"}
    assert host.started == ["nightly-0-0"]
    # The event record reads the folder before the firing empties it, and the new start after;
    # the usage records settle the container before (none at the first firing) and begin the
    # new one's.
    assert host.swept == [("nightly", []), ("nightly", ["nightly-0-0"])]
    assert host.seen == [[], ["nightly-0-0"]]
    # Each firing is a submission of its own, numbered by its cron minute (the same on every
    # host of the run): its container's label, its claim and its record say so.
    submission = first // 60
    args = host.jobs[0]["docker_args"]
    assert [a for a in args if a.startswith("gpufleet.submission=")] == [
        "gpufleet.submission=%d" % submission]
    assert args.count("--label") == 3
    assert (host.claims[-1]["run_id"], host.claims[-1]["submission"]) == ("r1", submission)
    assert host.claims[-1]["replace"] is False
    record = json.loads((host.root / "runs" / "nightly" / "0" / "record.json").read_text())
    assert record["labels"]["gpufleet.submission"] == str(submission)
    state = kept(host)
    assert (state["firings"], state["last"], state["next"]) == (1, first + 3, first + 60)
    # What the first firing left is cleared before the second: its state and its container.
    folder = host.root / "runs" / "nightly" / "0"
    (folder / "state" / "exit_code").write_text("0\n")
    host.containers["nightly-0-0"] = "exited"
    assert scheduleside.schedule_tick(first + 61) == {"nightly/0": "fired"}
    # The exited container of the first firing went before the second was made.
    assert host.removed == ["nightly-0-0"] * 2 and host.started == ["nightly-0-0"] * 2
    assert host.containers == {"nightly-0-0": "running"}
    assert not (folder / "state" / "exit_code").exists()
    assert kept(host)["firings"] == 2
    assert "gpufleet.submission=%d" % (submission + 1) in host.jobs[1]["docker_args"]


def test_a_firing_while_the_last_one_runs_is_skipped(host):
    first = arm(host)["next"]
    scheduleside.schedule_tick(first)
    assert scheduleside.schedule_tick(first + 60) == {"nightly/0": "skipped"}
    state = kept(host)
    assert (state["firings"], state["next"], host.started) == (1, first + 120, ["nightly-0-0"])


def test_a_busy_host_makes_the_firing_wait_for_a_later_tick(host):
    first = arm(host)["next"]
    host.busy = "busy (1 of 1 blocks held by other)"
    assert scheduleside.schedule_tick(first) == {"nightly/0": "waiting"}
    assert kept(host)["waiting"] == host.busy and kept(host)["next"] == first
    assert host.started == []
    host.busy = None
    assert scheduleside.schedule_tick(first + 15) == {"nightly/0": "fired"}
    assert kept(host)["waiting"] is None


def test_a_firing_held_back_until_the_next_time_is_missed(host):
    first = arm(host)["next"]
    host.busy = "busy (1 of 1 blocks held by other)"
    assert scheduleside.schedule_tick(first + 30) == {"nightly/0": "waiting"}
    assert scheduleside.schedule_tick(first + 65) == {"nightly/0": "missed"}
    state = kept(host)
    # The time that came meanwhile waits now, and starts once the host is free.
    assert state["next"] == first + 60 and state["waiting"] == host.busy
    assert state["error"].startswith("the firing of %s was missed: busy" % time.strftime(
        "%Y-%m-%d %H:%M UTC", time.gmtime(first)))
    assert host.started == [] and state["firings"] == 0
    # Held back past several times: only the latest due one is left.
    assert scheduleside.schedule_tick(first + 250) == {"nightly/0": "missed"}
    assert kept(host)["next"] == first + 240
    host.busy = None
    assert scheduleside.schedule_tick(first + 255) == {"nightly/0": "fired"}
    assert kept(host)["next"] == first + 300 and kept(host)["firings"] == 1


def test_a_stop_ends_the_schedule_for_good(host):
    first = arm(host)["next"]
    # The run's own stops (master-done, a failed job's others) end one firing only.
    scheduleside.op_stop_schedule({"reason": "done_by_runner", "jobs": [
        {"run": "nightly", "job_num": 0, "container": "nightly-0-0"}]})
    assert kept(host)["stopped"] is False
    answer = scheduleside.op_stop_schedule({"reason": "terminated_by_user", "jobs": [
        {"run": "nightly", "job_num": 0, "container": "nightly-0-0"}]})
    assert answer["stopped"] == ["nightly-0-0"]
    state = kept(host)
    assert state["stopped"] is True and state["next"] is None
    assert scheduleside.schedule_tick(first + 3600) == {} and host.started == []
    assert not scheduleside.schedule_wanted()
    (entry,) = scheduleside.op_status_schedule({})["containers"]
    assert entry["files"]["schedule"]["stopped"] is True


def test_the_schedule_is_a_part_of_the_host_s_tick():
    from ansible_collections.gpufleet.cluster.plugins.module_utils.tasks.hostside import (
        notifyside)

    assert notifyside.TICK_PARTS["schedule"] == (scheduleside.schedule_wanted,
                                                 scheduleside.schedule_tick)


def test_a_removal_takes_the_schedule_first(host):
    arm(host)
    scheduleside.op_remove_schedule({"run": "nightly"})
    assert host.removes == [{"run": "nightly"}]
    assert not (host.root / "runs" / "nightly" / "0" / "schedule.json").exists()
    assert not scheduleside.schedule_wanted()


def test_a_spoiled_start_is_a_failed_firing_and_the_others_still_fire(host):
    first = arm(host)["next"]
    scheduleside.op_arm({"job": job(run="other"), "cron": ["* * * * *"]})
    (host.root / "runs" / "nightly" / "0" / "start.json").write_text("{")
    assert scheduleside.schedule_tick(first) == {"nightly/0": "failed", "other/0": "fired"}
    assert "spoiled" in kept(host)["error"] and kept(host)["next"] == first + 60
