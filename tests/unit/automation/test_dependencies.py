"""automation.dependencies: --after parsed, judged from run records and queue entries, and
refused at submission when it names nothing, the run itself, or a cycle."""

from __future__ import annotations

import pytest
from ansible_collections.gpufleet.cluster.plugins.module_utils.automation import (
    dependencies as deps,
)


def run(name, status, array=None, after=None):
    return {"name": name, "status": status, "array": array, "after": after}


def test_after_takes_slurms_conditions_with_ok_by_default():
    assert deps.parse(["prep", "train:any", "eval:notok", "prep:ok"]) == [
        {"run": "prep", "after": "ok"}, {"run": "train", "after": "any"},
        {"run": "eval", "after": "notok"}]
    assert deps.parse([{"run": "prep", "after": "any"}]) == [{"run": "prep", "after": "any"}]
    assert deps.parse(None) == []


@pytest.mark.parametrize("value, message", [
    ("prep:maybe", "--after: 'prep:maybe': the condition is ok, notok or any, not 'maybe'"),
    ("Prep", "--after: 'Prep' is not a run name"),
    (":ok", "--after: ':ok' is not a run name"),
])
def test_a_bad_after_names_the_option_and_the_value(value, message):
    with pytest.raises(deps.DependencyError) as caught:
        deps.parse([value])
    assert str(caught.value).startswith(message)
    with pytest.raises(deps.DependencyError, match="prep is named twice"):
        deps.parse(["prep:ok", "prep:any"])


@pytest.mark.parametrize("after, statuses, met", [
    ("ok", ["done"], True), ("ok", ["failed"], False), ("ok", ["terminated"], False),
    ("ok", ["running"], None), ("ok", ["done", "running"], None),
    ("ok", ["failed", "running"], False),            # it can no longer be met
    ("notok", ["failed"], True), ("notok", ["terminated"], True), ("notok", ["done"], False),
    ("notok", ["done", "failed"], True), ("notok", ["pending"], None),
    ("any", ["done"], True), ("any", ["failed"], True), ("any", ["submitted"], None),
])
def test_each_condition_is_met_failed_or_still_open(after, statuses, met):
    assert deps.After(after).met(statuses) is met


def test_the_verdict_waits_goes_or_fails_naming_the_run():
    after = deps.parse(["prep", "train:any"])
    assert deps.verdict("eval", after, [run("prep", "running"), run("train", "pending")]) == {
        "verdict": "wait", "reason": "dependency", "message": "waiting for prep (ok), train (any)"}
    ended = [run("prep", "done"), run("train", "failed")]
    assert deps.verdict("eval", after, ended)["verdict"] == "go"
    failed = deps.verdict("eval", after, [run("prep", "failed"), run("train", "running")])
    assert failed == {"verdict": "fail", "reason": "dependency_failed",
                      "message": "run prep ended failed, and it runs after prep:ok"}
    # a run that is gone fails once every host answered, and waits while some are silent
    assert deps.verdict("eval", after, [run("train", "done")])["message"] == (
        "run prep, which it runs after, is on no fleet any more")
    assert deps.verdict("eval", after, [run("train", "done")], complete=False) == {
        "verdict": "wait", "reason": "dependency",
        "message": "waiting for prep (not seen: its hosts do not answer)"}


def test_a_job_array_is_one_dependency_of_all_its_runs():
    after = deps.parse(["sweep"])
    runs = [run("sweep-0", "done", "sweep"), run("sweep-1", "running", "sweep")]
    assert deps.verdict("eval", after, runs)["verdict"] == "wait"
    runs[1]["status"] = "done"
    assert deps.verdict("eval", after, runs)["verdict"] == "go"
    runs[1]["status"] = "failed"
    assert deps.verdict("eval", after, runs)["message"] == (
        "run sweep ended 1 done, 1 failed, and it runs after sweep:ok")


def test_a_submission_naming_nothing_itself_or_a_cycle_is_refused():
    records = [run("prep", "pending", after=[{"run": "train", "after": "ok"}]),
               run("train", "pending", after=["eval:any"]), run("report", "done")]
    with pytest.raises(deps.DependencyError, match="--after: no run or job array named ghost on "
                                                   "any fleet"):
        deps.gate({"run": "eval", "after": ["ghost"], "records": records, "submitting": True})
    with pytest.raises(deps.DependencyError, match="run eval cannot run after itself"):
        deps.gate({"run": "eval", "after": ["eval"], "records": records, "submitting": True})
    # eval after prep, while prep waits for train and train for eval
    with pytest.raises(deps.DependencyError, match="--after: eval would wait for itself: eval "
                                                   "waits for prep waits for train waits for eval"):
        deps.gate({"run": "eval", "after": ["prep"], "records": records, "submitting": True})
    # a run that ended waits for nothing: no cycle through it; and an unknown name may be
    # only unseen when a host was silent
    records[1]["status"] = "failed"
    assert deps.gate({"run": "eval", "after": ["prep", "report"], "records": records,
                      "submitting": True})["verdict"] == "wait"
    assert deps.gate({"run": "eval", "after": ["ghost"], "records": records, "complete": False,
                      "submitting": True})["verdict"] == "wait"
    # a pass judges without the submission's checks
    assert deps.gate({"run": "eval", "after": ["ghost"], "records": records})["verdict"] == "fail"
