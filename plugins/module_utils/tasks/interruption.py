# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""When a job's host stops answering: was the instance taken away, or is it only unreachable?

A host that does not answer SSH is asked about through its backend, which is the truth about
instances: the fleet records (fleets.records) say whether the instance still exists and runs.
dstack's rules (docs/reference/dstack-runtime.md#failure-and-retry), made without a server:

- the instance is gone (terminated, stopped, preempted or its spot capacity reclaimed, a local
  node container killed or removed): the job failed with ``interrupted_by_no_capacity``, whose
  retry event is ``interruption``, at once;
- the instance still runs but does not answer: the job waits for it to answer again, for
  lifecycle.JOB_DISCONNECTED_GRACE seconds (dstack's JOB_DISCONNECTED_RETRY_TIMEOUT); then a
  spot instance's job fails with ``interrupted_by_no_capacity`` and an on-demand one's with
  ``instance_unreachable`` (an ``error``);
- an SSH fleet's host has no backend to ask: it is only ever unreachable.

Pure Python: the records are read by the caller.
"""

from __future__ import annotations

from ..fleets.status import InstanceStatus
from . import lifecycle


def instance_map(fleets):
    """``{instance name: record}`` of the fleets' instances as their backends last told."""
    return dict((inst["name"], inst) for fleet in fleets for inst in fleet.get("instances") or [])


def gone(record):
    """Whether the backend says the instance of a host that does not answer is gone for good
    (``record``: its fresh instance record, None when the backend has no such instance). Such a
    host is not asked again: a request to it only waits out SSH's connect timeout."""
    if (record or {}).get("backend") == "ssh":
        return False
    return record is None or record.get("status") in InstanceStatus.gone_statuses()


def judge(host, record, unreachable_for):
    """``(reason, message)`` of a job whose host ``host`` does not answer, or None while it may
    still come back. ``record`` is the host's fresh instance record (None: the backend has no
    such instance any more); ``unreachable_for`` how long it has not answered, in seconds."""
    if gone(record):
        if record is None:
            return (lifecycle.INTERRUPTED_BY_NO_CAPACITY,
                    "host %s: the instance is gone (its backend no longer has it)" % host)
        why = record.get("error") or "the instance is %s" % record.get("status")
        return (lifecycle.INTERRUPTED_BY_NO_CAPACITY, "host %s: %s%s" % (
            host, why, " (spot)" if record.get("spot") else ""))
    if record.get("backend") == "ssh":
        return _unreachable(host, unreachable_for, "the host does not answer over SSH")
    if record.get("spot"):
        return _unreachable(host, unreachable_for, "the spot instance runs but does not answer",
                            lifecycle.INTERRUPTED_BY_NO_CAPACITY)
    return _unreachable(host, unreachable_for, "the instance runs but does not answer")


def _unreachable(host, unreachable_for, what, reason=lifecycle.INSTANCE_UNREACHABLE):
    if unreachable_for < lifecycle.JOB_DISCONNECTED_GRACE:
        return None
    return reason, "host %s: %s for %d s" % (host, what, int(unreachable_for))
