# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Watching one submission of a run: start jobs when their turn comes, stop them when the run
ends, report each change. The decisions are tasks.lifecycle's; this module only observes the
nodes (one status request per host per poll, all hosts at once) and carries decisions out.
"""

from __future__ import annotations

import threading
import time

from . import joblogs, lifecycle
from .lifecycle import JobStatus, RunStatus
from .ssh import NodeError, parallel

SUBMISSION_LABEL = "gpufleet.submission"
JOB_LABEL = "gpufleet.job"
RUN_LABEL = "gpufleet.run"


# How long a status look waits for a host. A healthy host answers in well under a second. One
# that went away silently (a terminated cloud instance, whose packets are simply dropped) would
# otherwise hold the request on its shared SSH connection until OpenSSH's keepalives give up
# (ServerAliveInterval x ServerAliveCountMax, a minute); past this, the host counts as silent
# and its backend is asked what happened (tasks.interruption). A live host that is only slow
# (its engine busy with a pull) costs a look at the backend now and then, no verdict: a host
# that still runs is failed only once it has been silent for JOB_DISCONNECTED_GRACE.
STATUS_TIMEOUT = 15
# The least time between two respawns of one service replica by a watching controller.
RESPAWN_EVERY = 10


def observe(nodes, run, submission=None):
    """The containers of ``run`` on each host: ``({job_num: entry}, {host: NodeError})``. A
    host that does not answer within STATUS_TIMEOUT is one of the errors.

    Only containers of ``submission`` count when it is given (an older submission's leftovers
    are not this one's jobs).
    """
    answers = parallel(sorted(nodes), lambda host: nodes[host].call(
        "status", {"run": run}, timeout=STATUS_TIMEOUT))
    found = {}
    errors = {}
    for host, (answer, error) in answers.items():
        if error is not None:
            errors[host] = error
            continue
        for entry in answer["containers"]:
            labels = entry["labels"]
            if labels.get(RUN_LABEL) != run:
                continue
            if submission is not None and labels.get(SUBMISSION_LABEL) != str(submission):
                continue
            try:
                num = int(labels.get(JOB_LABEL))
            except (TypeError, ValueError):
                continue
            entry["host"] = host
            found[num] = entry
    return found, errors


class LogFollower(object):
    """One job's output, passed on a chunk at a time as ``{"kind": "log", "rank", "lines"}``
    (whole lines only, so a job printing fast costs one event per chunk, not per line):
    ``docker logs -f`` while its container is there, else what its host kept (tasks.joblogs).

    ``options``: ``since`` (epoch seconds) and ``raw`` (the lines go out unprefixed, for one
    job's output alone).
    """

    CHUNK = 65536

    def __init__(self, node, container, rank, emit, options=None, kept=None):
        self.node = node
        self.container = container
        self.rank = rank
        self.emit = emit
        self.options = options or {}
        self.kept = kept
        self.thread = threading.Thread(target=self._run, name="logs-%s" % container)
        self.thread.daemon = True
        self.proc = None
        self.received = 0
        self._stopped = threading.Event()

    def start(self):
        self.thread.start()
        return self

    def _pass_on(self, lines):
        if self._stopped.is_set():
            return   # the job's end was said without them (its host is gone)
        self.received += 1
        if lines:
            self.emit({"kind": "log", "rank": self.rank, "lines": lines,
                       "raw": bool(self.options.get("raw"))})

    def _run(self):
        import subprocess

        lines = joblogs.Lines()
        if self.kept is not None:
            try:
                for data in self.kept():
                    if self._stopped.is_set():
                        return
                    self._pass_on(lines.feed(data))
            except joblogs.LogsError as exc:
                self._pass_on(["gpufleet: %s" % exc])
            self._pass_on(lines.close())
            return
        since = self.options.get("since")
        command = "%sdocker logs -f %s%s 2>&1" % (
            self.node.sudo, "--since %d " % int(since) if since is not None else "",
            self.container)
        try:
            self.proc = self.node.popen(command, stdout=subprocess.PIPE,
                                        stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL)
        except OSError:
            return
        if self._stopped.is_set():
            self.proc.terminate()
        while True:
            data = self.proc.stdout.read1(self.CHUNK)
            if not data:
                break
            self._pass_on(lines.feed(data))
        self._pass_on(lines.close())
        self.proc.wait()

    def join(self, timeout=None, clock=time.monotonic, stop=True):
        """Wait for the job's last lines: as long as they keep coming, and ``timeout``
        seconds more (5 for ``docker logs -f``, which is then stopped if ``stop``; a page of
        kept output may take a request's time)."""
        if timeout is None:
            timeout = 5.0 if self.kept is None else 120.0
        seen, since = self.received, clock()
        while self.thread.is_alive():
            self.thread.join(0.25)
            if self.received != seen:
                seen, since = self.received, clock()
            elif clock() - since >= timeout:
                break
        if stop and self.thread.is_alive() and self.proc is not None:
            self.proc.terminate()

    def stop(self):
        """Stop following now, whatever may still come: the job's host is gone, and a request
        to it only waits on a connection that no longer leads anywhere."""
        self._stopped.set()
        if self.proc is not None:
            self.proc.terminate()

    def wait_briefly(self, seconds=5.0):
        """Give the job's last lines a moment (they come before its end is said, as a rule),
        without holding up the run's supervision behind a long backlog."""
        self.thread.join(seconds)


class Watch(object):
    """Carry one submission of a run to its end.

    ``jobs``: the job specs of the submission (tasks.rankplan.build_jobs), by job number;
    ``nodes``: ``{host: tasks.ssh.Node}``; ``policy``: startup_order, stop_criteria, retry;
    ``emit(event)``: called with each change (see ``run``); ``follow_logs``: pass the jobs'
    output on too (True, or ``{"job": N or None, "since": epoch or None, "raw": bool}``).
    """

    def __init__(self, jobs, nodes, policy, emit, clock=time.time, sleep=time.sleep,
                 poll=1.0, follow_logs=False, retry_since=None, stop_event=None,
                 unreachable_grace=lifecycle.JOB_DISCONNECTED_GRACE, judge=None, gone=None):
        self.jobs = dict((j["job_num"], j) for j in jobs)
        self.nodes = nodes
        self.policy = policy
        self.emit = emit
        self.clock = clock
        self.sleep = sleep
        self.poll = poll
        self.follow_logs = follow_logs
        self.retry_since = retry_since
        self.stop_event = stop_event
        self.unreachable_grace = unreachable_grace
        # judge(host, seconds silent) -> (reason, message) or None (tasks.interruption): what
        # the host's backend says of a host that does not answer.
        self.judge = judge
        # Hosts whose instance the backend said is gone (filled by the judge): once each of
        # their jobs has ended, they are not asked again.
        self.gone = gone if gone is not None else set()
        self.messages = {}
        first = jobs[0]
        self.run = first["run"]
        self.submission = first["submission"]
        self.started = set()
        self.stopping = {}
        self.followers = {}
        self.deferred = {}   # job ends said once their lines have all come
        # The runner has said each job is pulling; a job not created yet says nothing new.
        self.statuses = dict((n, (JobStatus.SUBMITTED.value, None, None)) for n in self.jobs)
        self.run_status = RunStatus.SUBMITTED.value
        self.unreachable_since = {}
        # Jobs failed by a verdict on their silent host (tasks.interruption): the verdict
        # stands when the host answers again.
        self.judged = set()
        self._threads = []
        # When each failed replica of a service was last started again (_respawn).
        self.respawned = {}

    # -- actions ---------------------------------------------------------------------------

    def _start(self, nums):
        def start(num):
            job = self.jobs[num]
            return self.nodes[job["host"]].call("start", {"job": job})

        for num, (_answer, error) in parallel(nums, start).items():
            self.started.add(num)
            if error is None and self.statuses.get(num, (None,))[0] == JobStatus.SUBMITTED:
                self.statuses[num] = (JobStatus.PROVISIONING.value, None, None)
                self.emit({"kind": "job", "job_num": num, "host": self.jobs[num]["host"],
                           "status": JobStatus.PROVISIONING.value, "reason": None,
                           "exit_code": None})
            if error is not None:
                self.statuses[num] = (JobStatus.FAILED.value, lifecycle.EXECUTOR_ERROR, None)
                self.emit({"kind": "job", "job_num": num, "host": self.jobs[num]["host"],
                           "status": JobStatus.FAILED.value, "reason": lifecycle.EXECUTOR_ERROR,
                           "exit_code": None, "message": error.detail})

    def _stop(self, stops):
        """Ask for stops in the background: ``docker stop`` waits up to stop_duration."""
        by_host = {}
        for num, reason in stops.items():
            if num in self.stopping:
                continue
            self.stopping[num] = reason
            job = self.jobs[num]
            by_host.setdefault((job["host"], reason), []).append(job)
        for (host, reason), jobs in by_host.items():
            timeout = max(int(j.get("stop_duration") or 0) for j in jobs)
            payload = {"reason": reason, "timeout": timeout,
                       "jobs": [{"run": j["run"], "job_num": j["job_num"],
                                 "container": j["container"]} for j in jobs]}
            thread = threading.Thread(
                target=self._call_quietly, args=(self.nodes[host], "stop", payload, timeout + 60)
            )
            thread.daemon = True
            thread.start()
            self._threads.append(thread)

    @staticmethod
    def _call_quietly(node, op, payload, timeout):
        try:
            node.call(op, payload, timeout=timeout)
        except NodeError:
            pass

    def stop_all(self, reason):
        """Stop every job of the submission (a user's stop, or the controller going away)."""
        self._stop(dict((n, reason) for n in self.jobs))

    # -- observing ------------------------------------------------------------------------

    def _look(self):
        if not self.started:
            # Nothing of this submission was started yet (the runner cleared any leftovers of
            # the run): every job is waiting, no host needs asking.
            return dict(self.statuses)
        asked = dict((host, node) for host, node in self.nodes.items()
                     if not self._done_with(host))
        found, errors = observe(asked, self.run, self.submission)
        now = self.clock()
        statuses = {}
        for num, job in sorted(self.jobs.items()):
            host = job["host"]
            if host not in asked:
                statuses[num] = self.statuses[num]
                continue
            if host in errors:
                since = self.unreachable_since.setdefault(host, now)
                previous = self.statuses.get(num, (JobStatus.SUBMITTED.value, None, None))
                statuses[num] = previous
                if previous[0] in JobStatus.finished_statuses():
                    continue
                if self.judge is not None:
                    verdict = self.judge(host, now - since)
                    if verdict is not None:
                        statuses[num] = (JobStatus.FAILED.value, verdict[0], None)
                        self.messages[num] = verdict[1]
                        self.judged.add(num)
                elif now - since > self.unreachable_grace:
                    statuses[num] = (JobStatus.FAILED.value, lifecycle.INSTANCE_UNREACHABLE, None)
                    self.judged.add(num)
                continue
            self.unreachable_since.pop(host, None)
            entry = found.get(num)
            if num in self.judged:
                # Its host answers again after the verdict (a partition that healed): the job
                # stays failed, as dstack keeps it, and its container, if it still runs, stops.
                statuses[num] = self.statuses[num]
                if entry is not None and lifecycle.job_status(entry)[0] in JobStatus.up_statuses():
                    self._stop({num: lifecycle.TERMINATED_BY_SERVER})
                continue
            if entry is None and num in self.started and num in self.statuses:
                # Started but gone: removed by someone else (gpufleet stop --abort, docker rm).
                previous = self.statuses[num]
                statuses[num] = previous if previous[0] in JobStatus.finished_statuses() else (
                    JobStatus.TERMINATED.value, lifecycle.TERMINATED_BY_USER, None)
                continue
            if entry is None and self.statuses.get(num, (None,))[0] == JobStatus.FAILED:
                statuses[num] = self.statuses[num]  # the start itself failed
                continue
            statuses[num] = lifecycle.job_status(entry)
            if entry is not None:
                self.started.add(num)
                if self._follows(num) and num not in self.followers:
                    self.followers[num] = self._follower(num, entry)
        return statuses

    def _done_with(self, host):
        """Whether ``host`` is gone and every job of this submission on it has ended."""
        return host in self.gone and all(
            self.statuses.get(num, (None,))[0] in JobStatus.finished_statuses()
            for num, job in self.jobs.items() if job["host"] == host)

    def _follows(self, num):
        if not self.follow_logs:
            return False
        only = self.follow_logs.get("job") if isinstance(self.follow_logs, dict) else None
        return only is None or only == num

    def _follower(self, num, entry):
        """A job's log follower: its container's output while it runs, else what its host
        kept."""
        job = self.jobs[num]
        options = self.follow_logs if isinstance(self.follow_logs, dict) else {}
        kept = None
        # A job that ended is read from what its host kept: all of it, at the speed of a file
        # rather than of docker logs, and also when its container is gone.
        if (entry.get("state") in lifecycle.CONTAINER_ABSENT
                or lifecycle.job_status(entry)[0] in JobStatus.finished_statuses()):
            record = {"name": self.run, "jobs": [job]}

            def read_kept():
                for _num, data in joblogs.pages({job["host"]: self.nodes[job["host"]]}, record,
                                                since=options.get("since")):
                    yield data

            kept = read_kept
        return LogFollower(self.nodes[job["host"]], job["container"], num, self.emit,
                           options, kept).start()

    def _report(self, statuses):
        for num, status in sorted(statuses.items()):
            if self.statuses.get(num) != status:
                job = self.jobs[num]
                event = {"kind": "job", "job_num": num, "host": job["host"],
                         "status": status[0], "reason": status[1], "exit_code": status[2]}
                if num in self.messages:
                    event["message"] = self.messages[num]
                follower = self.followers.get(num)
                if status[0] in JobStatus.finished_statuses() and follower is not None:
                    if job["host"] in self.gone:
                        follower.stop()   # no line can come from a host that is gone
                    else:
                        # A job's end is said after its last lines. A long backlog of them
                        # does not hold up the run's supervision: the end waits for them.
                        follower.wait_briefly()
                        if follower.thread.is_alive():
                            self.deferred[num] = event
                            continue
                self.deferred.pop(num, None)
                self.emit(event)
        self.statuses = statuses

    def _end_followers(self):
        """Wait for every job's last lines, except from hosts that are gone."""
        for num, follower in self.followers.items():
            if self.jobs[num]["host"] in self.gone:
                follower.stop()
            else:
                follower.join()

    def _say_deferred(self, every=False):
        """The ends of jobs whose lines have all come now (``every``: all of them, after the
        followers were joined)."""
        for num in sorted(self.deferred):
            follower = self.followers.get(num)
            if every or follower is None or not follower.thread.is_alive():
                self.emit(self.deferred.pop(num))

    def run_once(self):
        statuses = self._look()
        self._report(statuses)
        self._say_deferred()
        decision = lifecycle.decide(self.policy, statuses, now=self.clock(),
                                    retry_since=self.retry_since)
        if decision.final or decision.resubmit:
            # Every line a job printed is shown before the run's end is.
            self._end_followers()
            self._say_deferred(every=True)
            self.followers = {}
        if decision.status != self.run_status and not decision.resubmit:
            self.run_status = decision.status
            self.emit({"kind": "run", "status": decision.status})
        if decision.stop:
            self._stop(decision.stop)
        if decision.start:
            self._start([n for n in decision.start if n not in self.started])
        if decision.respawn:
            self._respawn(decision.respawn)
        return decision

    def _respawn(self, nums):
        """Start a service's failed replicas again on their hosts (their retry covers it), at
        most once per RESPAWN_EVERY seconds each: a command that fails at once is not made
        again on every look."""
        now = self.clock()
        due = [n for n in nums if now - self.respawned.get(n, float("-inf")) >= RESPAWN_EVERY]
        for num in due:
            self.respawned[num] = now

        def respawn(num):
            job = self.jobs[num]
            return self.nodes[job["host"]].call("respawn", {"run": job["run"], "job_num": num})

        for num, (answer, error) in sorted(parallel(due, respawn).items()):
            if error is None and (answer or {}).get("respawned"):
                self.emit({"kind": "replica", "job_num": num, "host": self.jobs[num]["host"],
                           "status": "respawned", "respawns": answer.get("respawns")})

    def watch(self):
        """Poll until the submission ends; return the last Decision (final, or resubmit)."""
        while True:
            if self.stop_event is not None and self.stop_event.is_set():
                self.stop_all(lifecycle.TERMINATED_BY_USER)
            decision = self.run_once()
            if decision.final or decision.resubmit:
                break
            self.sleep(self.poll)
        self._end_followers()
        for thread in self._threads:
            thread.join(1.0)
        return decision
