# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""One event (events.records): its kinds, as the hosts spell them too, what it is about, its
message in dstack's words, and the events of a fleet apply."""

from __future__ import annotations

from ansible_collections.gpufleet.cluster.plugins.module_utils.events import records
from ansible_collections.gpufleet.cluster.plugins.module_utils.events.records import (
    EventKind,
    message_of,
    targets_of,
)
from ansible_collections.gpufleet.cluster.plugins.module_utils.tasks.hostside import eventside


def test_the_hosts_spell_the_kinds_they_write_and_take_as_the_model_does():
    assert set(eventside.EVENT_HOST_KINDS) == set(k.value for k in EventKind.host_kinds())
    assert set(eventside.EVENT_SENT_KINDS) == set(k.value for k in EventKind.sent_kinds())
    derived = set(k for k in EventKind if k.is_derived())
    assert derived | EventKind.host_kinds() | EventKind.sent_kinds() == set(EventKind)


def test_a_jobs_events_are_about_the_job_and_its_creation_about_its_instance_too():
    created = {"kind": "job.created", "run": "train", "job": 1, "instance": "gpus-1"}
    assert targets_of(created) == [{"type": "job", "name": "train-1-0"},
                                   {"type": "instance", "name": "gpus-1"}]
    assert targets_of({"kind": "job.ended", "run": "web", "job": 0, "job_name": "web-0-2"}) == [
        {"type": "job", "name": "web-0-2"}]
    assert targets_of({"kind": "run.status", "run": "train"}) == [
        {"type": "run", "name": "train"}]
    assert targets_of({"kind": "member.revoked", "user": "bob", "fleet": "gpus"}) == [
        {"type": "user", "name": "bob"}, {"type": "fleet", "name": "gpus"}]


def test_messages_are_dstacks_where_dstack_has_the_event():
    assert message_of({"kind": "job.created", "submission": 0}) == (
        "Job created on run submission. Status: SUBMITTED")
    assert message_of({"kind": "job.created", "submission": 2}) == (
        "Job created on retry. Status: SUBMITTED")
    assert message_of({"kind": "job.started"}) == "Job status changed PROVISIONING -> RUNNING"
    assert message_of({"kind": "job.stopping", "reason": "terminated_by_user"}) == (
        "Job status changed RUNNING -> TERMINATING. Termination reason: TERMINATED_BY_USER")
    assert message_of({"kind": "job.ended", "status": "failed",
                       "reason": "container_exited_with_error", "exit_code": 1}) == (
        "Job status changed RUNNING -> FAILED. Termination reason: "
        "CONTAINER_EXITED_WITH_ERROR. Exit code: 1")
    assert message_of({"kind": "run.submitted"}) == "Run submitted. Status: SUBMITTED"
    assert message_of({"kind": "run.status", "old_status": "running", "status": "done"}) == (
        "Run status changed RUNNING -> DONE")


def test_a_queued_runs_messages_say_its_state_and_why():
    assert message_of({"kind": "run.queued", "state": "pending", "reason": "dependency",
                       "detail": "waiting for train (ok)"}) == (
        "Run submitted. Status: PENDING. Reason: DEPENDENCY (waiting for train (ok))")
    assert message_of({"kind": "run.queued", "state": "terminated", "old_state": "pending",
                       "reason": "dependency_failed"}) == (
        "Run status changed PENDING -> TERMINATED. Termination reason: DEPENDENCY_FAILED")
    assert message_of({"kind": "run.queued", "state": "active"}) == (
        "Run kept in its fleet's queue, to be resubmitted from there")
    assert message_of({"kind": "run.queued", "state": "pending", "old_state": "active",
                       "reason": "no capacity"}) == (
        "Run waits in the queue again. Status: PENDING. Reason: NO CAPACITY")
    assert message_of({"kind": "run.queued", "state": "terminated",
                       "reason": "dependency_failed"}) == (
        "Run status changed SUBMITTED -> TERMINATED. Termination reason: DEPENDENCY_FAILED")
    assert message_of({"kind": "run.queued", "state": "removed", "old_state": "active"}) == (
        "Run left the queue (was ACTIVE)")
    assert message_of({"kind": "run.queued", "state": "scheduled"}) == (
        "Run's schedule kept in its fleet's queue, to arm it again if one of its hosts is lost")
    assert message_of({"kind": "run.queued", "state": "removed", "old_state": "scheduled"}) == (
        "Run's schedule left its fleet's queue")


def test_a_fleet_apply_makes_one_event_and_one_per_instance_with_shared_ids():
    record = {"name": "gpus", "plan": {"create": ["gpus-2"], "start": ["gpus-1"],
                                       "keep": ["gpus-0"], "remove": ["gpus-3"],
                                       "release": []}}
    made = records.fleet_events(record, "ann", 5.0, "x1")
    assert [(e["kind"], e.get("instance"), e["id"]) for e in made] == [
        ("fleet.applied", None, "x1/fleet"),
        ("instance.created", "gpus-1", "x1/instance.created/gpus-1"),
        ("instance.created", "gpus-2", "x1/instance.created/gpus-2"),
        ("instance.removed", "gpus-3", "x1/instance.removed/gpus-3")]
    assert message_of(made[0]) == (
        "Fleet applied. Instances added: gpus-1, gpus-2. Instances removed: gpus-3")
    assert all(e["actor"] == "ann" and e["fleet"] == "gpus" and e["at"] == 5.0 for e in made)
    unchanged = {"name": "gpus", "plan": {"create": [], "keep": ["gpus-0"], "remove": []}}
    assert records.fleet_events(unchanged, "ann", 5.0, "x2") == []
    assert records.fleet_events({"name": "gpus", "plan": None}, "ann", 5.0, "x3") == []


def test_a_pending_entry_that_leaves_the_queue_was_submitted():
    assert message_of({"kind": "run.queued", "state": "removed", "old_state": "pending"}) == (
        "Run left the queue: it was submitted")
