"""The status enums (fleets.status.InstanceStatus, tasks.lifecycle.JobStatus and RunStatus):
each predicate accepts exactly its set of statuses, members are their strings, and what the
runner writes into records stays a plain string."""

from __future__ import annotations

import json
from enum import Enum

import pytest
import yaml
from ansible_collections.gpufleet.cluster.plugins.module_utils.fleets.status import InstanceStatus
from ansible_collections.gpufleet.cluster.plugins.module_utils.tasks import lifecycle
from ansible_collections.gpufleet.cluster.plugins.module_utils.tasks.lifecycle import (
    JobStatus,
    RunStatus,
)

INSTANCE_WORDS = {"pending", "provisioning", "idle", "busy", "stopped", "unreachable", "failed",
                  "terminating", "terminated"}

INSTANCE_PREDICATES = {
    "available": {"idle", "busy"},
    "unavailable": {"pending", "provisioning", "stopped", "unreachable", "failed", "terminating",
                    "terminated"},
    "starting": {"pending", "provisioning"},
    "finished": {"terminating", "terminated"},
    "lost": {"terminating", "terminated", "failed"},
    "gone": {"stopped", "terminating", "terminated", "failed"},
    "absent": {"pending", "provisioning", "stopped", "terminating", "terminated", "failed"},
    "hostless": {"provisioning", "stopped", "terminating", "terminated"},
    "broken": {"unreachable", "failed"},
    "active": {"idle", "busy", "pending", "provisioning"},
}

JOB_PREDICATES = {
    "finished": {"terminated", "aborted", "failed", "done"},
    "up": {"provisioning", "running", "terminating"},
    "started": {"running", "done"},
    "under_way": {"running", "done", "provisioning", "pulling"},
}

RUN_PREDICATES = {
    "finished": {"terminated", "failed", "done"},
}


def _check(enum, name, accepted):
    assert {s.value for s in getattr(enum, "%s_statuses" % name)()} == accepted
    for member in enum:
        assert getattr(member, "is_%s" % name)() is (member.value in accepted), member
    # A record's plain string (and a missing or unknown one) is tested against the set.
    for word in [m.value for m in enum] + [None, "whatever"]:
        assert (word in getattr(enum, "%s_statuses" % name)()) is (word in accepted), word


def test_instance_statuses_are_the_words_of_the_instance_record():
    assert {s.value for s in InstanceStatus} == INSTANCE_WORDS


@pytest.mark.parametrize("name", sorted(INSTANCE_PREDICATES))
def test_instance_status_predicate(name):
    _check(InstanceStatus, name, INSTANCE_PREDICATES[name])


@pytest.mark.parametrize("name", sorted(JOB_PREDICATES))
def test_job_status_predicate(name):
    _check(JobStatus, name, JOB_PREDICATES[name])


@pytest.mark.parametrize("name", sorted(RUN_PREDICATES))
def test_run_status_predicate(name):
    _check(RunStatus, name, RUN_PREDICATES[name])


def test_job_and_run_statuses_are_dstacks():
    assert [s.value for s in JobStatus] == [
        "submitted", "provisioning", "pulling", "running", "terminating", "terminated",
        "aborted", "failed", "done"]
    assert [s.value for s in RunStatus] == [
        "pending", "submitted", "provisioning", "running", "terminating", "terminated",
        "failed", "done"]


@pytest.mark.parametrize("member", [InstanceStatus.IDLE, JobStatus.RUNNING, RunStatus.DONE])
def test_a_member_is_its_string(member):
    assert member == member.value and hash(member) == hash(member.value)
    assert str(member) == "%s" % member == "{}".format(member) == member.value
    assert json.dumps({"status": member}) == json.dumps({"status": member.value})


def test_what_the_runner_writes_is_a_plain_string():
    """Records, labels and answers keep plain strings, which YAML and Ansible store as they
    did: job_status and decide never hand out a member."""
    entries = [None, {"state": "created"}, {"state": "running", "files": {"running": "1"}},
               {"state": "running", "files": {"reason": lifecycle.TERMINATED_BY_USER}},
               {"state": "exited", "files": {"running": "1", "exit_code": "0"}},
               {"state": "exited", "files": {"running": "1", "exit_code": "3"}},
               {"state": "gone", "files": {}}]
    for entry in entries:
        status = lifecycle.job_status(entry)[0]
        assert isinstance(status, str) and not isinstance(status, Enum), entry
        yaml.safe_dump({"status": status})
    for statuses in ({0: ("submitted", None, None)}, {0: ("running", None, None)},
                     {0: ("done", None, 0)}, {0: ("failed", "executor_error", 1)},
                     {0: ("provisioning", None, None), 1: ("done", None, 0)}):
        decision = lifecycle.decide({}, statuses)
        assert isinstance(decision.status, str) and not isinstance(decision.status, Enum), statuses
