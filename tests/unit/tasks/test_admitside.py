# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The admission ledger on a fleet's queue host (tasks.hostside.admitside): a capped user's run
is admitted only while the user's use plus the run stays within the caps, under booking's lock,
and a ledger entry lives while its run does.

BOOK_ROOT and TEAM_ROOT point into a temporary folder; the members document is written there.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest
from ansible_collections.gpufleet.cluster.plugins.module_utils.tasks.hostside import (
    admitside,
    booking,
    nodeside,
)


@pytest.fixture
def host(tmp_path, monkeypatch):
    monkeypatch.setattr(booking, "BOOK_ROOT", str(tmp_path / "book"))
    monkeypatch.setattr(admitside, "TEAM_ROOT", str(tmp_path / "team"))
    monkeypatch.setattr(nodeside, "RUN_ROOT", str(tmp_path / "runs"))
    return tmp_path


def members_doc(host, limits):
    (host / "team").mkdir(exist_ok=True)
    (host / "team" / "members.json").write_text(json.dumps({"fleet": "f", "members": {},
                                                            "limits": limits}))


def admit(run, user="carol", gpus=1, nodes=1, **extra):
    return admitside.op_admit(dict({"run": run, "run_id": run + "-id", "user": user,
                                    "gpus": gpus, "nodes": nodes}, **extra))


def ledger(host):
    folder = host / "book" / "admitted"
    return sorted(os.listdir(str(folder))) if folder.exists() else []


def test_a_user_without_caps_is_admitted_and_nothing_is_written(host):
    assert admit("a")["admitted"]
    members_doc(host, {"dave": {"runs": 1}})
    assert admit("b")["admitted"] and admit("c")["admitted"]
    assert ledger(host) == []


def test_a_cap_of_one_run_admits_one_and_says_user_limit_to_the_next(host):
    members_doc(host, {"carol": {"runs": 1}})
    assert admit("a")["admitted"]
    refused = admit("b")
    assert refused["admitted"] is False
    assert refused["reason"] == "user limit"
    assert refused["detail"] == "user carol: 1 of 1 runs in use, this run wants 1"
    # Another user is not held by carol's cap; the admitted run asking again is renewed.
    assert admit("c", user="erin")["admitted"]
    assert admit("a")["admitted"]
    assert ledger(host) == ["a.json"]
    entry = json.loads((host / "book" / "admitted" / "a.json").read_text())
    assert (entry["user"], entry["gpus"], entry["nodes"]) == ("carol", 1, 1)
    assert os.stat(str(host / "book" / "admitted" / "a.json")).st_mode & 0o777 == 0o600


def test_the_default_caps_hold_and_a_users_own_replace_them_field_by_field(host):
    members_doc(host, {"*": {"runs": 5, "gpus": 2}, "carol": {"gpus": 4}})
    assert admit("a", gpus=3)["admitted"]          # carol's own 4 GPUs, not the default's 2
    assert admit("b", gpus=2)["detail"] == "user carol: 3 of 4 gpus in use, this run wants 2"
    assert admit("c", user="erin", gpus=3)["detail"] == (
        "user erin: 0 of 2 gpus in use, this run wants 3")
    members_doc(host, {"*": {"nodes": 2}})
    assert admit("d", user="erin", nodes=2)["admitted"]
    assert admit("e", user="erin", nodes=1)["detail"] == (
        "user erin: 2 of 2 nodes in use, this run wants 1")


def test_runs_the_survey_saw_alive_count_and_ended_runs_leave_the_ledger(host):
    members_doc(host, {"carol": {"runs": 1}})
    # A run of carol's alive that the ledger does not hold (started before the cap was set).
    alive = [{"run": "old", "user": "carol", "gpus": 0, "nodes": 1}]
    assert admit("a", alive=alive)["detail"].startswith("user carol: 1 of 1 runs")
    assert admit("a")["admitted"]
    assert admit("b")["admitted"] is False
    # The caller saw run a ended: its entry goes, and b is admitted.
    assert admit("b", ended=["a"])["admitted"]
    assert ledger(host) == ["b.json"]


def test_an_entry_past_its_lease_goes_unless_the_survey_shows_its_run_alive(host, monkeypatch):
    members_doc(host, {"carol": {"runs": 1}})
    now = [1000.0]
    monkeypatch.setattr(admitside.time, "time", lambda: now[0])
    assert admit("a", lease=60)["admitted"]
    now[0] += 61
    alive = [{"run": "a", "user": "carol", "gpus": 1, "nodes": 1}]
    assert admit("b", alive=alive)["admitted"] is False   # alive: it holds on
    assert admit("b")["admitted"]                         # not shown alive, lease over
    assert ledger(host) == ["b.json"]


def test_a_whole_survey_that_does_not_show_an_older_entrys_run_ends_it(host, monkeypatch):
    members_doc(host, {"carol": {"runs": 1}})
    now = [1000.0]
    monkeypatch.setattr(admitside.time, "time", lambda: now[0])
    assert admit("a")["admitted"]
    # Just admitted: its claims may not exist yet, even a whole survey does not end it.
    assert admit("b", whole=True)["admitted"] is False
    now[0] += admitside.ADMIT_GRACE + 1
    assert admit("b")["admitted"] is False                # a partial look: kept
    assert admit("b", whole=True)["admitted"]
    assert ledger(host) == ["b.json"]


def test_release_forgets_a_run_that_did_not_start(host):
    members_doc(host, {"carol": {"runs": 1}})
    assert admit("a")["admitted"]
    assert admitside.op_admit_release({"run": "a", "run_id": "other"}) == {"released": False}
    assert admitside.op_admit_release({"run": "a", "run_id": "a-id"}) == {"released": True}
    assert admit("b")["admitted"]


def test_a_survey_answers_the_documents_caps(host, docker):
    docker.on(["ps"], stdout="")
    docker.on(["inspect"], stdout="[]")
    assert booking.BOOK_OPS["status"]({})["limits"] is None
    members_doc(host, {"*": {"runs": 2}})
    assert booking.BOOK_OPS["status"]({})["limits"] == {"*": {"runs": 2}}
    assert "limits" not in booking.BOOK_OPS["status"]({"run": "a"})


def test_a_bad_run_name_is_refused_with_a_message(host):
    members_doc(host, {"carol": {"runs": 1}})
    with pytest.raises(nodeside.Failure, match="not a run name"):
        admit("../x")


DRIVER = r"""
import json, sys, time
g = {"__name__": "gpufleet_node"}
source = open(sys.argv[1], "rb").read()
exec(compile(source, "gpufleet_node", "exec"), g)
g["BOOK_ROOT"] = sys.argv[2]
g["TEAM_ROOT"] = sys.argv[3]
while time.time() < float(sys.argv[4]):
    time.sleep(0.001)
answer = g["op_admit"]({"run": sys.argv[5], "run_id": sys.argv[5], "user": "carol",
                        "gpus": 0, "nodes": 1})
print(json.dumps(answer))
"""


def test_ten_processes_admitting_at_once_get_one_admission(host):
    """The host source as the hosts run it, ten processes released at the same instant: the
    cap of one run holds."""
    from ansible_collections.gpufleet.cluster.plugins.module_utils.tasks import ssh

    members_doc(host, {"carol": {"runs": 1}})
    source = host / "host.py"
    source.write_bytes(ssh.host_source())
    driver = host / "driver.py"
    driver.write_text(DRIVER)
    go = "%f" % (time.time() + 1.0)
    procs = [subprocess.Popen([sys.executable, str(driver), str(source), str(host / "book"),
                               str(host / "team"), go, "run%d" % i],
                              stdout=subprocess.PIPE, env=dict(os.environ))
             for i in range(10)]
    answers = [json.loads(p.communicate(timeout=60)[0]) for p in procs]
    assert len([a for a in answers if a["admitted"]]) == 1
    assert all(a["reason"] == "user limit" for a in answers if not a["admitted"])
    assert len(ledger(host)) == 1
