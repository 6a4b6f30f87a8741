# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Carrying a run to its end: the third of the Runner's three parts (tasks.runs; after
tasks.run_placement and tasks.run_preparation).

A submission is watched (tasks.supervisor.Watch) until the run ends; under ``retry`` it is
submitted again after an error or an interruption, and a run without capacity now waits in the
queue (an entry on its fleet's queue host, tasks.runbook): detached, that is the result;
attached, this process makes passes over the queue (tasks.queue) until the run's turn comes. A
host that stops answering is looked up in its backend (tasks.interruption).
"""

from __future__ import annotations

from . import (admission, growth, interruption, lifecycle, placement, queue, queue_mirror,
               runbook, surveys)
from .lifecycle import JobStatus, RunStatus
from .errors import RunError
from .queue_records import (ACTIVE, FAILED, PENDING, SCHEDULED, TERMINATED, USER_LIMIT,
                            autoscaled, entries_of, fleet_usage, keeps_entry, positions)
from .ssh import NodeError, parallel
from .supervisor import Watch

NO_CAPACITY_BACKOFF = (5, 10, 20, 40, 60)
# A host that stops answering is looked up in its backend at most this often (seconds).
JUDGE_EVERY = 5


class RunSupervision(object):
    """The loop of a run's submissions. ``run`` is the Runner it works for (its ``submit``
    makes each submission); ``runner_of`` makes the Runner of a queue entry for a pass over the
    queue (tasks.runs.runner_of, passed in: the runner is above the queue)."""

    def __init__(self, run, runner_of):
        self.run = run
        self.runner_of = runner_of
        self.judged_at = None
        self.instances = {}
        self.described = set()
        # Hosts whose backend said their instance is gone (tasks.interruption.gone): the watch
        # and the resubmission no longer ask them.
        self.gone_hosts = set()

    def judge(self, host, silent_for):
        """What the backend says of a job's host that does not answer (tasks.interruption):
        the fleets are described again at most every JUDGE_EVERY seconds."""
        now = self.run.clock()
        if self.judged_at is None or now - self.judged_at >= JUDGE_EVERY:
            self.judged_at = now
            try:
                fresh = surveys.collect_fleets(
                    [f["file"] for f in self.run.fleets if f.get("file")], self.run.docker,
                    self.run.root)
                self.instances = interruption.instance_map(fresh)
                self.described = set(f["name"] for f in fresh)
            except RunError:
                self.instances = self.instances or interruption.instance_map(self.run.fleets)
        record = self.instances.get(host)
        fleet = next((f["name"] for f in self.run.fleets
                      if any(i["name"] == host for i in f.get("instances") or [])), None)
        if record is None and fleet not in self.described:
            # Its fleet could not be described now: no verdict of "gone" from that.
            record = {"backend": "ssh"}
        if interruption.gone(record):
            self.gone_hosts.add(host)
        return interruption.judge(host, record, silent_for)

    def _wait_ended(self, host):
        """The result that ends an attached run's wait in the queue, or None to wait on."""
        from .container import RUN_ID_LABEL

        containers, _claims, queues, errors = surveys.survey_with_queues(self.run.nodes)
        found = [e for _h, e in entries_of(queues) if e.get("run_id") == self.run.run_id]
        if not found and host in errors:
            return None   # the queue host missed this look; its entry is still there
        entry = found[0] if found else {}
        if entry.get("state") == PENDING:
            return None
        if entry.get("state") in (FAILED, TERMINATED):
            return dict(self.run.result(), status=RunStatus.FAILED.value if entry.get(
                "state") == FAILED else RunStatus.TERMINATED.value,
                reason=entry.get("reason") or lifecycle.TERMINATED_BY_USER,
                message=entry.get("message"))
        started = any(c["labels"].get(RUN_ID_LABEL) == self.run.run_id
                      for found_on in containers.values() for c in found_on)
        if started:
            return dict(self.run.result(), status=RunStatus.SUBMITTED.value, message=(
                "another controller's pass over the queue started it; gpufleet ps and "
                "gpufleet logs -f %s follow it" % self.run.name))
        return dict(self.run.result(), status=RunStatus.TERMINATED.value,
                    reason=lifecycle.TERMINATED_BY_USER,
                    message="its queue entry was removed before it started")

    def keeps_entry(self):
        return keeps_entry(self.run.config)

    def _keep_entry(self, submission, attached=False):
        """``attached``: this process watches the run and resubmits it itself; the entry only
        lets passes autoscale it."""
        _containers, _claims, _queues, errors = surveys.survey_with_queues(self.run.nodes)
        try:
            runbook.enqueue(self.run, errors, reason=None, number=submission.number,
                            state=ACTIVE, resubmits=not attached,
                            hosts=sorted(set(j["host"] for j in submission.jobs)))
        except RunError as exc:
            self.run.emit({"kind": "info", "message": "retry after this command leaves is off: %s"
                           % exc})

    def drop_entry(self):
        """Take the run's active entry out of its queue host, where it has one (a service
        that autoscaled and no longer does); one that cannot be reached is said."""
        _containers, _claims, queues, errors = surveys.survey_with_queues(self.run.nodes)
        for host, entry in entries_of(queues):
            if entry.get("run_id") != self.run.run_id or entry.get("state") != ACTIVE:
                continue
            try:
                self.run.nodes[host].call("dequeue", {"run": entry["run"],
                                                      "run_id": entry["run_id"]})
            except NodeError as exc:
                self.run.emit({"kind": "info", "message": "its queue entry on %s stays: %s"
                               % (host, exc)})
                continue
            queue_mirror.follow(self.run.nodes, self.run.fleets, host, entry["run"])

    def launch(self, submission, watch=None):
        """Detached: stay until every job of ``submission`` is started (startup_order needs
        someone to start the later ones), then leave the run to its containers."""
        if watch is None:
            watch = Watch(submission.jobs, submission.nodes, self.run.policy(), self.run.emit,
                          clock=self.run.clock, sleep=self.run.sleep, poll=self.run.poll)
        while True:
            decision = watch.run_once()
            waiting = [s for s in watch.statuses.values() if s[0] == JobStatus.SUBMITTED]
            if decision.final or decision.resubmit or not waiting:
                return self.run.result(decision, watch.statuses)
            self.run.sleep(self.run.poll)

    def _queued(self, exc, wait, stop_event):
        """No capacity now, and retry lets the run wait: it becomes an entry of the queue
        (tasks.queue). Detached, that is the result; attached, this process drives the queue
        until the run's turn comes (returns its submission) or its wait ends (a result)."""
        looked = surveys.survey_with_queues(self.run.nodes)
        _containers, _claims, queues, errors = looked
        limited = isinstance(exc, admission.UserLimit)
        host = runbook.enqueue(self.run, errors, reason=USER_LIMIT if limited else str(exc),
                               message=str(exc) if limited else None)
        mine = {"run": self.run.name, "state": PENDING, "submitted_epoch": self.run.submitted_epoch,
                "priority": int(self.run.config.get("priority") or 0),
                "user": admission.user_of(self.run)}
        others = [item for item in entries_of(queues) if item[1].get("run") != self.run.name]
        place = positions(others + [(host, mine)],
                          fleet_usage(surveys.usage_of(looked))).get(self.run.name)
        waits_for = USER_LIMIT if limited else "capacity"
        self.run.emit({"kind": "run", "status": RunStatus.PENDING.value,
                       "reason": USER_LIMIT if limited else None,
                       "message": "waiting for %s in the queue (kept on %s): %s"
                       % (waits_for, host, exc)})
        if not wait:
            return dict(self.run.result(), status=RunStatus.PENDING.value,
                        reason=USER_LIMIT if limited else None,
                        message="waiting for %s (queue position %s, kept on %s)%s"
                        % (waits_for, place or "last", host,
                           (": %s" % exc) if limited else ""), queued_on=host), None
        return self._wait_in_queue(host, stop_event)

    def _wait_in_queue(self, host, stop_event):
        """Attached, with the run's pending entry on ``host``: make passes over the queue
        (NO_CAPACITY_BACKOFF apart) until the run's turn comes (returns ``(None, its
        submission)``) or its wait ends (``(result, None)``). Before each pass the backends
        and the hosts are asked again (a stopped instance may run again), so the attached view
        and gpufleet ps read the same entry and the same fleets. A Ctrl-C (KeyboardInterrupt)
        leaves the entry: the run stays pending, and any later pass starts it."""
        attempt = 0
        while True:
            if stop_event is not None and stop_event.is_set():
                host = self._entry_host(host)
                stopped = {"state": "terminated", "reason": lifecycle.TERMINATED_BY_USER}
                if host is not None:
                    self.run.nodes[host].call("update", {"run": self.run.name,
                                                         "run_id": self.run.run_id,
                                                         "changes": stopped})
                    queue_mirror.follow(self.run.nodes, self.run.fleets, host, self.run.name)
                return dict(self.run.result(), status=RunStatus.TERMINATED.value,
                            reason=lifecycle.TERMINATED_BY_USER), None
            self.run.sleep(NO_CAPACITY_BACKOFF[min(attempt, len(NO_CAPACITY_BACKOFF) - 1)])
            attempt += 1
            self.run.refresh_quietly()
            # The pass hands a lost queue host's entries over first (tasks.queue_mirror).
            report = queue.QueuePass(self.run.fleets, own=self.run, runner_of=self.runner_of,
                                     services=getattr(self.run, "services", None),
                                     gate=getattr(self.run, "gate", None),
                                     root=self.run.root, docker=self.run.docker,
                                     poll=self.run.poll, sleep=self.run.sleep,
                                     clock=self.run.clock, by=self.run.by).run()
            if report["own"] is not None:
                return None, report["own"]
            keeper = self._entry_host(host)
            if keeper is None:
                # The queue host's instance is gone, and its entry with it: what ps says.
                return dict(self.run.result(), status=RunStatus.FAILED.value,
                            reason=lifecycle.NO_CAPACITY,
                            message="the host that kept its queue entry (%s) is gone" % host), None
            host = keeper
            ended = self._wait_ended(host)
            if ended is not None:
                return ended, None

    def _entry_host(self, host):
        """The host that keeps the run's entry now: ``host`` while it is a host of the
        fleets, else the one its entry was handed over to (tasks.queue_mirror), or None."""
        if host in self.run.nodes:
            return host
        queues = surveys.survey_with_queues(self.run.nodes)[2]
        return next((h for h, e in entries_of(queues) if e.get("run_id") == self.run.run_id
                     and e.get("state") in (PENDING, ACTIVE)), None)

    def _resubmit(self, number, since, stop_event):
        """Submit the run again (retry after an error or interruption), as ``(result,
        submission)``. Without capacity now, and with retry on no-capacity, the run waits as
        dstack's does: pending, in the queue (an entry on its fleet's queue host, which ps
        reads), with the fleets and hosts asked again before each try."""
        try:
            return None, self.run.submit(number, waited_since=since, wait_for_capacity=False)
        except placement.NoHostFits as exc:
            limited = isinstance(exc, admission.UserLimit)
            if not limited and not lifecycle.may_retry(
                    self.run.config.get("retry"), lifecycle.EVENT_NO_CAPACITY, self.run.clock(),
                    since):
                raise
            try:
                errors = surveys.survey_with_queues(self.run.nodes)[3]
                host = runbook.enqueue(self.run, errors,
                                       reason=USER_LIMIT if limited else str(exc),
                                       number=number, retry_since=since,
                                       message=str(exc) if limited else None)
            except RunError as err:
                # No host to keep the entry on: wait here, asking again on every try.
                self.run.emit({"kind": "info", "message": "%s; waiting in this command" % err})
                return None, self.run.submit(number, waited_since=since)
            self.run.emit({"kind": "run", "status": RunStatus.PENDING.value,
                           "message": "waiting for capacity in the queue (kept on %s): %s"
                           % (host, exc)})
            return self._wait_in_queue(host, stop_event)

    def _after(self, wait, stop_event):
        """A run that runs after others (``Runner.after``): its gate (automation.dependencies,
        passed in) judges them from a look at every host; ``(result, submission)``: (None, None)
        to submit it now; a terminated result when they can no longer end as asked (its entry
        ends so, for ps and the runs after it); else it waits as a pending entry of its queue
        (detached: that is the result; attached: this process drives the queue until its
        turn). RunError for what the gate refuses (a run nowhere, a cycle)."""
        answer, errors = self.judge_after()
        if answer["verdict"] == "go":
            self.run.after = []   # met: a resubmission under retry waits for them no more
            return None, None
        state = TERMINATED if answer["verdict"] == "fail" else PENDING
        host = runbook.enqueue(self.run, errors, reason=answer.get("reason"), state=state,
                               message=answer.get("message"))
        if state == TERMINATED:
            self.run.emit({"kind": "run", "status": RunStatus.TERMINATED.value,
                           "reason": answer.get("reason"), "message": answer.get("message")})
            return dict(self.run.result(), status=RunStatus.TERMINATED.value,
                        reason=answer.get("reason"), message=answer.get("message"),
                        queued_on=host), None
        self.run.emit({"kind": "run", "status": RunStatus.PENDING.value,
                       "reason": answer.get("reason"),
                       "message": "%s in the queue (kept on %s)" % (answer.get("message"), host)})
        if not wait:
            return dict(self.run.result(), status=RunStatus.PENDING.value,
                        reason=answer.get("reason"), message=answer.get("message"),
                        queued_on=host), None
        return self._wait_in_queue(host, stop_event)

    def judge_after(self):
        """The gate's answer for this run's ``after`` at submission (a look at every host),
        and the hosts that did not answer; RunError for what it refuses."""
        from ..core.errors import GpufleetError
        from . import listing

        if self.run.gate is None:
            raise RunError("run %s runs after %s, and this command cannot judge that; submit "
                           "it with gpufleet apply or playbooks/task.yml"
                           % (self.run.name, ", ".join(str(d) for d in self.run.after)))
        records, errors = listing.list_runs(self.run.nodes)
        try:
            return self.run.gate({"run": self.run.name, "after": self.run.after,
                                  "records": records, "complete": not errors,
                                  "submitting": True,
                                  "array": (self.run.array or {}).get("name")}), errors
        except GpufleetError as exc:
            raise RunError(str(exc)) from exc

    def arm(self):
        """A task with ``schedule``: placed and prepared now, then kept ready on its hosts,
        whose tick starts it at each cron time (tasks.hostside.scheduleside); the result is
        the run pending with its next firing (``next_run``, epoch seconds). Nothing is left
        behind when a host refuses."""
        import time

        if self.run.after:
            raise RunError("run %s has a schedule: it cannot also wait for other runs (--after);"
                           " drop one of them" % self.run.name)
        try:
            submission = self.run.submit(0, wait_for_capacity=False)
        except (admission.UserLimit, placement.NoHostFits) as exc:
            return dict(self.run.result(), status=RunStatus.FAILED.value,
                        reason=lifecycle.NO_CAPACITY, message="no host can keep the scheduled "
                        "run ready now: %s" % exc)
        crons = list(self.run.config["schedule"]["cron"])
        answers = parallel([j["job_num"] for j in submission.jobs], lambda num: next(
            submission.nodes[j["host"]].call("arm", {"job": j, "cron": crons})
            for j in submission.jobs if j["job_num"] == num))
        # Between firings the run holds nothing a per-user cap counts (its hosts fire it).
        self.run.placing.admission.release()
        failed = sorted((num, error) for num, (_a, error) in answers.items() if error)
        if failed:
            hosts = sorted(set(j["host"] for j in submission.jobs))
            parallel(hosts, lambda h: submission.nodes[h].call("remove", {"run": self.run.name}))
            num, error = failed[0]
            raise RunError("could not keep job %d of run %s ready on its host: %s"
                           % (num, self.run.name, error))
        for num, (answer, _e) in sorted(answers.items()):
            if answer.get("tick_error"):   # kept, but nothing fires it until the tick runs
                self.run.emit({"kind": "info", "message": "job %d: its host's tick does not "
                               "run (%s); the next gpufleet command that looks at the fleet "
                               "starts it again" % (num, answer["tick_error"])})
        # The entry that arms it again when one of its hosts is lost (tasks.rearm, which
        # writes it itself when it is what arms the run again).
        self.run.schedule_hosts = sorted(set(j["host"] for j in submission.jobs))
        try:
            if not getattr(self.run, "rearming", False):
                runbook.enqueue(self.run, {}, reason=None, state=SCHEDULED,
                                hosts=self.run.schedule_hosts, resubmits=False)
        except RunError as exc:
            self.run.emit({"kind": "info", "message": "its schedule is kept on its hosts "
                           "only (a lost host loses its job's schedule): %s" % exc})
        upcoming = min(answer["next"] for answer, _e in answers.values())
        when = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(upcoming))
        message = "waiting for schedule, next run %s" % when
        self.run.emit({"kind": "run", "status": RunStatus.PENDING.value, "message": message})
        return dict(self.run.result(), status=RunStatus.PENDING.value,
                    reason=lifecycle.WAITING_FOR_SCHEDULE, message=message, next_run=upcoming)

    def run_all(self, wait, stop_event):
        if self.run.config.get("schedule"):
            return self.arm()
        submission = None
        if self.run.after:
            result, submission = self._after(wait, stop_event)
            if result is not None:
                return result
        try:
            if submission is None:
                submission = self.run.submit(0, wait_for_capacity=False)
        except admission.UserLimit as exc:
            # Not a failure, whatever retry says: the run waits for its owner's use to drop.
            result, submission = self._queued(exc, wait, stop_event)
            if result is not None:
                return result
        except placement.NoHostFits as exc:
            never = growth.never_fits(self.run.config, self.run.fleets)
            if never or not lifecycle.may_retry(self.run.config.get("retry"),
                                                lifecycle.EVENT_NO_CAPACITY, self.run.clock(),
                                                self.run.clock()):
                return dict(self.run.result(), status=RunStatus.FAILED.value,
                            reason=lifecycle.NO_CAPACITY, message="%s%s" % (
                                exc, (" (%s)" % never) if never else ""))
            result, submission = self._queued(exc, wait, stop_event)
            if result is not None:
                return result
        if not wait and self.keeps_entry():
            # Detached with retry on error or interruption: an entry lets a later pass submit
            # it again (tasks.queue); a run placed from the queue already has one.
            self._keep_entry(submission)
        elif wait and autoscaled(self.run.config):
            # Attached, an autoscaled service still needs one for passes to scale it; this
            # process resubmits it, so the entry carries no retry.
            self._keep_entry(submission, attached=True)
        while True:
            watch = Watch(submission.jobs, submission.nodes, self.run.policy(), self.run.emit,
                          clock=self.run.clock, sleep=self.run.sleep, poll=self.run.poll,
                          follow_logs=self.run.follow_logs, stop_event=stop_event,
                          judge=self.judge, gone=self.gone_hosts)
            if not wait:
                return self.launch(submission, watch)
            decision = watch.watch()
            if not decision.resubmit:
                return self.run.result(decision, watch.statuses, failure_message(
                    decision, submission))
            if stop_event is not None and stop_event.is_set():
                # The user's stop came as the run failed by itself (nothing was left for the
                # stop to end): the run ends stopped, as asked, and is not submitted again.
                return dict(self.run.result(decision, watch.statuses, failure_message(
                    decision, submission)), status=RunStatus.TERMINATED.value,
                    reason=lifecycle.TERMINATED_BY_USER)
            self.run.emit({"kind": "run", "status": RunStatus.PENDING.value,
                           "message": "resubmitting all jobs (retry on %s)"
                           % lifecycle.retry_event(decision.failed_job[1])})
            # A host whose instance is gone has nothing to remove, and would only make the
            # request wait out SSH's connect timeout.
            parallel(sorted(set(submission.nodes) - self.gone_hosts),
                     lambda h: submission.nodes[h].call("remove", {"run": self.run.name}))
            # The fleets are described again below: a name that comes back (a fleet that grew
            # anew) is a new instance, asked like any other.
            self.gone_hosts.clear()
            self.run.refresh_quietly()   # an instance may have gone (interruption)
            try:
                ended, submission = self._resubmit(submission.number + 1, self.run.clock(),
                                                   stop_event)
            except placement.NoHostFits as exc:
                return dict(self.run.result(decision, watch.statuses),
                            status=RunStatus.FAILED.value,
                            reason=lifecycle.NO_CAPACITY, message=str(exc))
            if ended is not None:
                return ended


def failure_message(decision, submission):
    """One line naming the job that ended a failed or expired run, or None."""
    if decision.failed_job is None:
        return None
    num, reason, code = decision.failed_job
    job = next(j for j in submission.jobs if j["job_num"] == num)
    if reason == lifecycle.MAX_DURATION_EXCEEDED:
        return "job %d on %s ran longer than max_duration" % (num, job["host"])
    if reason == lifecycle.UTILIZATION_POLICY:
        return ("job %d on %s: the job GPU utilization was below utilization_policy's "
                "min_gpu_utilization for its time_window" % (num, job["host"]))
    if reason == lifecycle.EXECUTOR_ERROR:
        return ("job %d on %s failed before its command started (exit code %s)"
                % (num, job["host"], code))
    if reason == lifecycle.INSTANCE_UNREACHABLE:
        return "job %d: host %s became unreachable" % (num, job["host"])
    if reason == lifecycle.INTERRUPTED_BY_NO_CAPACITY:
        return "job %d: host %s was interrupted (the instance went away)" % (num, job["host"])
    return "job %d on %s exited with code %s" % (num, job["host"], code)
