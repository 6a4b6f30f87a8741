# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""``gpufleet usage`` on the controller (tasks.usage): --since, the fleets asked, the records of
one run on several hosts as one line, the sums per user."""

from __future__ import annotations

import pytest
from ansible_collections.gpufleet.cluster.plugins.module_utils.tasks import usage

from .fakes import RecordsNode

NOW = 1780000000.0   # 2026-05-28T20:26:40Z


def rec(run="train", job=0, host="gpus-0", start=NOW - 3600, end=NOW - 1800, gpus=8,
        price=2.0, user="ann", submission=0, code=0, run_id=None, fleet="gpus"):
    return {"fleet": fleet, "run": run, "run_id": run_id or "id-" + run, "job": job,
            "submission": submission, "user": user, "host": host, "nodes": 1, "gpus": gpus,
            "start": start, "end": end, "exit_code": None if end is None else code,
            "price": price}


def FakeNode(items=(), error=None):
    return RecordsNode("records", items, error, NOW)


@pytest.mark.parametrize("text,back", [("30m", 1800), ("24h", 86400), ("7d", 7 * 86400),
                                       ("2w", 14 * 86400), ("90", 90), (None, 7 * 86400)])
def test_since_takes_durations_as_ps_and_logs_do(text, back):
    assert usage.parse_since(text, NOW) == NOW - back


def test_since_takes_dates_and_times_with_their_offset():
    assert usage.parse_since("2026-05-28", NOW) == NOW - (20 * 3600 + 26 * 60 + 40)
    assert usage.parse_since("2026-05-28T20:26:40Z", NOW) == NOW
    assert usage.parse_since("2026-05-28T22:26:40+02:00", NOW) == NOW


@pytest.mark.parametrize("text,said", [
    ("yesterday", "write a duration such as 30m, 24h or 7d, a date"),
    ("7 days", "write a duration"),
    ("2026-13-45", "write a duration"),
    ("2026-05-28T20:26:40", "the time has no offset"),
])
def test_a_since_that_cannot_be_read_says_what_to_write(text, said):
    with pytest.raises(usage.UsageError, match=said):
        usage.parse_since(text, NOW)


def test_fleets_without_access_are_never_asked_and_an_unknown_fleet_is_named():
    fleets = [{"name": "mine", "access": "key"}, {"name": "theirs", "access": "no access"},
              {"name": "old"}]
    assert [f["name"] for f in usage.reachable_fleets(fleets)] == ["mine", "old"]
    assert [f["name"] for f in usage.reachable_fleets(fleets, "mine")] == ["mine"]
    with pytest.raises(usage.UsageError, match="no fleet named theirs .*reachable: mine, old"):
        usage.reachable_fleets(fleets, "theirs")


def test_the_records_of_one_run_on_several_hosts_make_one_line():
    records = [rec(job=0, host="gpus-0", start=NOW - 3600, end=NOW - 1800),
               rec(job=1, host="gpus-1", start=NOW - 3598, end=NOW - 1790, code=1)]

    (line,) = usage.runs_of(records, NOW)

    assert line["run"] == "train" and line["user"] == "ann" and line["fleet"] == "gpus"
    assert (line["nodes"], line["gpus"], line["submissions"]) == (2, 16, 1)
    assert (line["start"], line["end"]) == (NOW - 3600, NOW - 1790)
    assert line["wall_seconds"] == 1810
    assert line["gpu_hours"] == pytest.approx(8 * (1800 + 1808) / 3600.0)
    assert line["cost"] == pytest.approx(2.0 * (1800 + 1808) / 3600.0)
    assert line["status"] == "failed"


def test_a_running_run_counts_until_now_and_a_retry_adds_up():
    running = usage.runs_of([rec(start=NOW - 600, end=None)], NOW)[0]
    assert (running["end"], running["status"], running["wall_seconds"]) == (
        None, "running", 600)
    assert running["gpu_hours"] == pytest.approx(8 * 600 / 3600.0)

    retried = usage.runs_of([rec(submission=0, start=NOW - 100, end=NOW - 90, code=1),
                             rec(submission=1, start=NOW - 80, end=NOW - 20)], NOW)[0]
    assert (retried["submissions"], retried["status"], retried["nodes"]) == (2, "done", 1)
    assert retried["gpu_hours"] == pytest.approx(8 * 70 / 3600.0, abs=1e-6)


def test_a_host_without_a_price_costs_nothing_and_a_run_without_user_is_kept():
    line = usage.runs_of([rec(price=None, user=None)], NOW)[0]
    assert (line["cost"], line["user"]) == (0, None)


def test_users_add_up_their_runs_most_gpu_hours_first():
    runs = usage.runs_of([rec(run="a"), rec(run="b", gpus=1), rec(run="c", user="bob", gpus=16),
                          rec(run="d", user=None, gpus=0)], NOW)

    users = usage.users_of(runs)

    assert [(u["user"], u["runs"]) for u in users] == [("bob", 1), ("ann", 2), (None, 1)]
    assert users[1]["gpu_hours"] == pytest.approx(9 * 1800 / 3600.0)
    assert users[1]["cost"] == pytest.approx(2 * 2.0 * 1800 / 3600.0)


def test_report_asks_every_host_once_and_names_the_silent_ones():
    nodes = {"gpus-0": FakeNode([rec(job=0)]), "gpus-1": FakeNode([rec(job=1, host="gpus-1")]),
             "gpus-2": FakeNode(error="ssh: connect timed out")}

    found = usage.report([{"name": "gpus"}], since="24h", user="ann", now=NOW, nodes=nodes)

    assert nodes["gpus-0"].asked == [("usage", {"since": NOW - 86400, "user": "ann",
                                                "run": None})]
    assert found["since"] == NOW - 86400 and found["now"] == NOW
    assert [(r["run"], r["nodes"]) for r in found["runs"]] == [("train", 2)]
    assert found["users"][0]["user"] == "ann"
    assert found["unreachable"] == {"gpus-2": "ssh: connect timed out"}
