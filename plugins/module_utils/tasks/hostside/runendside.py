# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""A run's end, judged on a fleet host from its jobs' ends, as tasks.lifecycle.decide judges it.

This file travels to the hosts after tasks.hostside.memberside and before eventside
(tasks.ssh.host_source) and runs in their namespace: standard library only, Python 3.6+,
every top-level name its own (``runend``/``_runend`` prefixes).

- ``runend_verdict``: the status and reason of a run all of whose jobs have ended, from their
  ends, in decide's order (tests/unit/tasks/test_eventside.py holds the two together). The
  host of a run's only job says it from that job's end (notifyside's webhooks).
- ``runend_read``: the ends job 0 of a multi-node run lists in ``state/run_end`` once every
  job told it how it ended (tasks.hostside.wrapper_peers); eventside records the run's end
  from them. The run's containers write that file: it is read with care.
"""

import os
import re

try:  # imported as part of the collection (tests, the controller)
    from .nodeside import _small_file
except ImportError:  # on a host: the files sent before this one run in the same namespace
    pass

# How a job's stop reason leaves it (tasks.lifecycle.STOP_REASONS).
RUNEND_STOPPED = {"scaled_down": "terminated", "max_duration_exceeded": "terminated",
                  "inactivity_duration_exceeded": "terminated",
                  "terminated_due_to_utilization_policy": "terminated",
                  "terminated_by_user": "terminated", "terminated_by_server": "terminated",
                  "done_by_runner": "done"}


def runend_job(end):
    """``(status, reason)`` of one job from its end (``exit_code``, ``reason``, ``started``,
    ``lost``), by the rules of tasks.lifecycle.job_status; None when it is not known."""
    if end.get("unknown"):
        return None
    if end.get("lost"):
        return "failed", "instance_unreachable"
    code, reason = end.get("exit_code"), end.get("reason")
    if code is None and not reason and end.get("started", True):
        return "terminated", "terminated_by_user"   # its container was removed under it
    if reason in RUNEND_STOPPED:
        return RUNEND_STOPPED[reason], reason
    if code == 0:
        return "done", None
    if not end.get("started", True):
        return "failed", "executor_error"
    return "failed", "container_exited_with_error"


def runend_verdict(ends, stop_criteria=None):
    """``(status, reason, deciding job)`` of a run all of whose jobs have ended, from their
    ends (``{job number: end}``, see runend_job), ranked as tasks.lifecycle.decide ranks
    them: a user's stop, then a failure, then a duration or utilization_policy, then the
    server's stop, then master-done, then all done. None when the ends known do not decide."""
    jobs = dict((num, runend_job(end)) for num, end in ends.items())

    def first(test):
        found = [n for n, job in sorted(jobs.items()) if job and test(job)]
        return found[0] if found else None

    for test, status, reason in (
            (lambda j: j[1] == "terminated_by_user", "terminated", "terminated_by_user"),
            (lambda j: j[0] == "failed" or j[1] == "inactivity_duration_exceeded", "failed",
             "job_failed"),
            (lambda j: j[1] == "max_duration_exceeded", "terminated", None),
            (lambda j: j[1] == "terminated_due_to_utilization_policy", "terminated", None),
            (lambda j: j[1] == "terminated_by_server", "terminated", "terminated_by_server")):
        num = first(test)
        if num is not None:
            return status, reason or jobs[num][1], num
    if stop_criteria == "master-done" and (jobs.get(0) or ("",))[0] == "done":
        return "done", "all_jobs_done", 0
    if jobs and all(job and job[0] == "done" for job in jobs.values()):
        return "done", "all_jobs_done", None
    return None


def runend_id(run, run_id, submission, status):
    """The id of a run's end, the one the reader derives for it (tasks.eventlog), so that
    what a host said and what the reader derives are one event."""
    return "%s/%s/%s/run.status/%s" % (run, run_id, submission, status)


_RUNEND_LINE = re.compile(r"([0-9]{1,6}) (-|[0-9]{1,3}) (-|[01]) (-|[a-z_]{1,64})\Z")


def runend_read(path, nodes):
    """The ends ``state/run_end`` lists (job 0 of a multi-node run writes it once it has every
    job's word, tasks.hostside.wrapper_peers): ``{job number: end}``, or None when it is not
    there. The run's containers write its lines: one that cannot be read is a job not known."""
    limit = 100 * (nodes + 1)
    text = _small_file(path, limit)
    if text is None:
        return None
    lines = text.splitlines()
    try:
        if os.lstat(path).st_size > limit:
            lines = lines[:-1]   # the last one read is cut short
    except OSError:
        return None
    ends = dict((num, {"unknown": True}) for num in range(nodes))
    for line in lines:
        found = _RUNEND_LINE.match(line.strip())
        if not found or int(found.group(1)) >= nodes:
            continue
        num, code, started, reason = found.groups()
        if reason in ("lost", "unknown"):
            ends[int(num)] = {reason: True}
            continue
        ends[int(num)] = {"exit_code": None if code == "-" else int(code),
                          "started": started == "1", "reason": None if reason == "-" else reason}
    return ends
