# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The queue without a server: runs waiting for capacity, runs that retry may submit again, and
the pass that acts on them.

A run that cannot be placed now and may wait (``retry`` on ``no-capacity`` within its
``duration``) is written down as an entry (tasks.runbook) on a host of its fleet, the *queue
host* (the reachable instance with the lowest number). A detached run that ``retry`` may submit
again after an ``error`` or ``interruption`` keeps an ``active`` entry there while it runs.

Nothing waits on those entries. A *pass* (``QueuePass.run``) acts on them, and every command
that touches a fleet makes one: ``gpufleet apply`` of a task (before placing its own run), ``ps``
when something is due, ``stop`` (once capacity is freed), the end of an attached run,
``playbooks/reconcile.yml`` on a schedule, and a waiting attached run itself. A pass reads
every host (one survey), settles the runs of active entries (stops what the run could not stop
by itself, resubmits under retry, forgets ended ones), lets pending entries whose retry
duration ran out fail, then tries the pending entries in priority order (higher first, then the
user with less usage in the last 24 h, then first submitted), each placed and claimed as any run
is. A run whose owner is at a per-user cap (tasks.admission) stays pending with the reason
``user limit`` whatever its retry says, and the pass tries no other entry of that owner. A lower priority is not held back by a
higher one that does not fit (dstack's rule). Two passes at once are safe: an entry is *taken*
under its host's lock before it is submitted, and hosts are claimed under theirs.
"""

from __future__ import annotations

import os
import socket
import time

from ..core.errors import GpufleetError
from ..core.times import parse_time
from . import (interruption, lifecycle, listing, placement, queue_mirror, rearm, silence,
               surveys)
from .lifecycle import JobStatus, RunStatus
from .admission import UserLimit
from .queue_records import (ACTIVE, FAILED, PENDING, TERMINATED, USER_LIMIT, entries_of,
                            fleet_usage, keeps_entry, priority_order)
from .errors import NeedsInstances, PlanError, RunError
from .ssh import NodeError, parallel


def controller_id():
    return "%s:%d" % (socket.gethostname(), os.getpid())


def _epoch(value, default):
    moment = parse_time(value)
    return moment.timestamp() if moment is not None else default


class QueuePass(object):
    """One pass over the queue entries of ``fleets`` (see the module's text).

    ``own``: an attached Runner waiting for capacity; when its own entry's turn comes and it
    fits, the submission is returned to it (``report["own"]``) instead of started here.
    ``runner_of(entry, fleets, queue_node=..., **options)`` makes the Runner of an entry
    (tasks.runs.runner_of, passed in: the runner is above the queue). ``options`` go to each
    Runner made from an entry (root, docker, emit, poll, clock, sleep).

    ``services(event, fleets, nodes)`` keeps services' routes on their proxy (services.submit's
    ``queue_hook``, passed in: services are above the queue), or None: called with ``{"kind":
    "started", "run", "entry"}`` once the pass started a service's replicas from its entry (a
    queued service, or one resubmitted under retry: the route follows the new replicas), and
    with ``{"kind": "ended", "record"}`` for a service run it sees finished and did not start
    again (its route goes; taking off a route that is gone changes nothing), and with
    ``{"kind": "respawned", "run", "record"}`` once it made failed replicas of a service
    again (the route takes their new ports), and, with ``autoscale``, with a ScaleEvent
    (tasks.records, ``{"kind": "scale"}``) for each running service whose entry says it
    autoscales. It answers
    ``{"changed": bool}`` or raises GpufleetError, which is said (an ``info`` event) and leaves
    the pass going.

    ``gate(event)`` judges a pending entry that runs after other runs (its ``after``;
    automation.dependencies.gate, passed in: automation is above the queue): ``event`` is
    ``{"run", "after", "records", "complete"}`` (the run records with the queue's, and whether
    every host answered); it answers ``{"verdict": "go" | "wait" | "fail", "reason",
    "message"}``. Such an entry is tried only once its gate says go, and ends terminated when it
    says fail; without a gate it waits.
    """

    def __init__(self, fleets, own=None, emit=None, clock=time.time, by=None, runner_of=None,
                 services=None, autoscale=False, gate=None, **options):

        self.fleets = fleets
        self.own = own
        self.runner_of = runner_of
        self.services = services
        self.gate = gate
        # The run records with the queue's, as the gate reads them (set by each pass).
        self.gated_records = []
        self.complete = True
        # Whether running services with scaling are scaled (a scheduled pass: run_queue); a
        # pass inside another command (an apply, a stop, ps) leaves them, as a scale-up waits
        # for its new replicas.
        self.autoscale = autoscale
        self.emit = emit or (lambda event: None)
        self.clock = clock
        self.by = by or controller_id()
        self.options = dict(options, clock=clock)
        self.options.setdefault("emit", self.emit)
        self.nodes = surveys.nodes_of(fleets, options.get("root"))
        self.report = {"started": [], "resubmitted": [], "expired": [], "stopped": [],
                       "forgotten": [], "failed": [], "published": [], "unpublished": [],
                       "respawned": [], "scaled": [], "terminated": [], "rearmed": [],
                       "own": None}
        self.silent = set()
        # Services whose failed replicas this pass started again (their route stays).
        self.respawned_runs = set()
        # Owners refused for a per-user cap in this pass (tasks.admission).
        self.capped = set()
        # The entries this pass changed, ``{(host, run)}``: their copies follow at its end,
        # unless ``copies`` (``{(host, run): digest}`` of the copies its survey saw on each
        # entry's mirror host) says one is current still.
        self.touched = set()
        self.copies = {}

    def run(self, survey=None):
        """Act on every run and entry; returns the report (runs started, resubmitted...)."""
        ended = []
        try:
            report = self._pass(survey, ended)
        finally:
            parallel(sorted(self.touched), lambda item: queue_mirror.follow(
                self.nodes, self.fleets, item[0], item[1], known=self.copies.get(item)))
        # A service that ended by itself leaves the proxy, unless this pass started it again
        # (its route was published anew then).
        for record in ended:
            if record["name"] not in report["started"] and \
                    record["name"] not in self.respawned_runs:
                self._service({"kind": "ended", "record": record}, "unpublished",
                              record["name"])
        return report

    def _pass(self, survey, ended):
        survey, silent = silence.look(self.nodes, self.options.get("root"), self.fleets,
                                      survey, self.clock)
        containers, claims, queues, errors = survey
        self.silent = set(errors)
        # A lost queue host's entries are handed over first: the pass then acts on them.
        queue_mirror.sync(self.fleets, self.nodes, survey, self.emit)
        self.copies = queue_mirror.copies_of(self.fleets, survey)
        entries = entries_of(queues)
        records = listing.run_records(containers, errors,
                                      interruption.instance_map(self.fleets), silent)
        active = dict((e["run"], (host, e)) for host, e in entries if e.get("state") == ACTIVE)
        scaled = []
        for record in records:
            host, entry = active.pop(record["name"], (None, None))
            if entry is not None and record.get("run_id") not in (None, entry["run_id"]):
                host, entry = None, None
            stopped_final = self._settle(record, host, entry)
            if _service_ended(record, stopped_final):
                ended.append(record)
            elif entry is not None and entry.get("state") == ACTIVE and (
                    (entry.get("policy") or {}).get("scaling")) and (
                    record.get("status") == RunStatus.RUNNING.value):
                scaled.append((record, host, entry))
        for record, host, entry in scaled:
            self._scale(record, host, entry)
        for run, (host, entry) in active.items():
            # Nothing of the run is seen: it was removed (stop --abort, a delete), or it is not
            # started yet, or its hosts are silent or not surveyed here. Only when every one of
            # its hosts answered and none holds a claim for it does the entry go.
            hosts = entry.get("hosts") or []
            held = any(c.get("run") == run for h in hosts for c in claims.get(h) or [])
            if hosts and all(h in containers for h in hosts) and not held:
                self._call(host, "dequeue", {"run": run, "run_id": entry["run_id"],
                                             "expect": {"state": ACTIVE}})
                self.report["forgotten"].append(run)
        # Scheduled runs whose host was lost are armed again elsewhere (tasks.rearm).
        rearm.keep_schedules(self, entries, containers, errors)
        if not entries:
            return self.report
        self.gated_records = listing.with_queue([dict(r) for r in records], queues)
        self.complete = not errors
        self._settle_dependencies(entries)
        now = self.clock()
        # Fair share: among equal priorities, the user who used less in the last 24 h first.
        usage = fleet_usage(surveys.usage_of(survey))
        for host, entry in priority_order(entries, usage):
            if float(entry.get("taken_until") or 0) > now and entry.get("taken_by") != self.by:
                continue   # another controller is submitting it right now
            if entry.get("user") and entry.get("user") in self.capped:
                continue   # its owner is at a cap: no use of theirs drops within this pass
            if self._try(host, entry):
                break   # the waiting attached run got its submission
        return self.report

    # -- pending entries ----------------------------------------------------------------------

    def _no_capacity(self, host, entry, exc):
        """Still no room: the entry waits on, unless retry's duration for no-capacity is over
        (or a resubmission's retry does not wait for capacity at all)."""
        now = self.clock()
        since = float(entry.get("retry_since") or entry.get("submitted_epoch") or now)
        if lifecycle.may_retry(entry.get("retry"), lifecycle.EVENT_NO_CAPACITY, now, since):
            self._update(host, entry, {"reason": _short(str(exc))},
                         expect={"state": PENDING, "taken_by": self.by})
            return
        self._expire(host, entry, str(exc))

    def _expire(self, host, entry, why):
        self._update(host, entry, {"state": FAILED, "reason": lifecycle.NO_CAPACITY,
                                   "message": "no capacity within retry's duration: %s"
                                   % _short(why)}, expect={"state": PENDING})
        self.report["expired"].append(entry["run"])

    def _settle_dependencies(self, entries):
        """Judge every pending entry that runs after others, again while one of them ended
        (a chain ends in one pass, whatever order its entries come in)."""
        now = self.clock()
        # (an entry another controller is submitting right now is its own to judge)
        waiting = [(h, e) for h, e in entries if e.get("state") == PENDING and e.get("after")
                   and not (float(e.get("taken_until") or 0) > now
                            and e.get("taken_by") != self.by)]
        ended = -1
        while self.gate is not None and ended != len(self.report["terminated"]):
            ended = len(self.report["terminated"])
            for host, entry in waiting:
                if entry["run"] not in self.report["terminated"]:
                    self._gated(host, entry)

    def _gated(self, host, summary):
        """Whether a pending entry that runs after other runs may be tried now: its gate says
        go (its dependencies are met for good: the entry drops them, and its wait for
        capacity starts then: retry's duration counts from now); a fail ends it terminated
        (and the runs after it see that in this pass already)."""
        if self.gate is None:
            return False
        try:
            answer = self.gate({"run": summary["run"], "after": summary["after"],
                                "records": self.gated_records, "complete": self.complete})
        except GpufleetError as exc:
            answer = {"verdict": "fail", "reason": None, "message": str(exc)}
        if answer["verdict"] == "go":
            changes = {"after": [], "retry_since": self.clock()}
            if summary.get("reason") == answer.get("waited"):
                changes.update(reason=None, message=None)
            self._pending_changes(host, summary, changes)
            return True
        said = {"reason": answer.get("reason"), "message": answer.get("message")}
        if answer["verdict"] == "fail":
            self._pending_changes(host, summary, dict(said, state=TERMINATED))
            self.report["terminated"].append(summary["run"])
            for record in self.gated_records:
                if record.get("name") == summary["run"]:
                    record["status"] = RunStatus.TERMINATED.value
        elif (summary.get("reason"), summary.get("message")) != (
                said["reason"], said["message"]):
            self._pending_changes(host, summary, said)
        return False

    def _pending_changes(self, host, summary, changes):
        """Write ``changes`` to a pending entry on its queue host, and to ``summary`` (what
        the rest of this pass reads of it)."""
        self._update(host, summary, changes, expect={"state": PENDING})
        summary.update(changes)

    def _try(self, host, summary):
        """Submit one pending entry if it fits now; True when it was the own run's."""
        from .claiming import release_hosts

        if summary["run"] in self.report["terminated"] or summary.get("state") != PENDING or (
                summary.get("after") and not self._gated(host, summary)):
            return False
        node = self.nodes[host]
        retry = summary.get("retry") or {}
        # A run held back by its owner's cap waits for that, not for capacity: retry's
        # duration does not end its wait.
        if summary.get("reason") != USER_LIMIT and \
                lifecycle.EVENT_NO_CAPACITY in (retry.get("on_events") or ()) and not (
                lifecycle.may_retry(retry, lifecycle.EVENT_NO_CAPACITY, self.clock(), float(
                    summary.get("retry_since") or summary.get("submitted_epoch") or 0))):
            self._expire(host, summary, summary.get("reason") or "")
            return False
        try:
            answer = node.call("take", {"run": summary["run"], "run_id": summary["run_id"],
                                        "by": self.by})
        except NodeError:
            return False
        if not answer.get("taken"):
            return False
        entry = answer["entry"]
        own = self.own is not None and self.own.run_id == entry["run_id"]
        number = int(entry.get("submissions") or 0)
        mine = {"state": PENDING, "taken_by": self.by}
        runner = None
        keeper = _TakeKeeper(node, entry, self.by)
        try:
            runner = self.own if own else self.runner_of(entry, self.fleets,
                                                         queue_node=node, **self.options)
            runner.after = []   # judged: any resubmission of it waits for them no more
            submission = runner.submit(number, wait_for_capacity=False)
        except UserLimit as exc:
            keeper.stop()
            self.capped.add(entry.get("user"))
            self._update(host, entry, {"reason": USER_LIMIT, "message": _short(str(exc))},
                         expect=mine)
            if runner is not None and not own:
                runner.close_code()
            return False
        except (placement.NoHostFits, NeedsInstances) as exc:
            keeper.stop()
            self._no_capacity(host, entry, exc)
            if runner is not None and not own:
                runner.close_code()
            return False
        except (RunError, PlanError, NodeError, placement.PlacementError) as exc:
            keeper.stop()
            self._update(host, entry, {"state": FAILED, "reason": "executor_error",
                                       "message": str(exc)}, expect=mine)
            self.report["failed"].append(entry["run"])
            if runner is not None and not own:
                runner.close_code()
            return False
        keeper.stop()
        hosts = sorted(set(j["host"] for j in submission.jobs))
        # Still ours? A user's stop (or a lapsed take) in the meantime wins: nothing starts.
        again = self._call(host, "take", {"run": entry["run"], "run_id": entry["run_id"],
                                          "by": self.by})
        if not (again or {}).get("taken"):
            release_hosts(runner.nodes, hosts, {"name": runner.name, "id": runner.run_id})
            if not own:
                runner.close_code()
            return False
        # An attached run watches and resubmits itself: its entry goes, or passes would too.
        keep = keeps_entry(entry["config"]) and not own  # the whole entry, as take answers it
        if own:
            self._call(host, "dequeue", {"run": entry["run"], "run_id": entry["run_id"]})
            self.report["own"] = submission
            return True
        try:
            result = runner.launch(submission)
        finally:
            runner.close_code()
        if keep:
            self._update(host, entry, {"state": ACTIVE, "hosts": hosts, "submissions": number,
                                       "reason": None}, expect=mine)
        else:
            self._call(host, "dequeue", {"run": entry["run"], "run_id": entry["run_id"],
                                         "expect": mine})
        self.report["started"].append(entry["run"])
        if result.get("status") == RunStatus.FAILED and not keep:
            self.report["failed"].append(entry["run"])
        elif isinstance((entry.get("config") or {}).get("service"), dict):
            # A service's replicas are placed and their ports known: its route (again).
            self._service({"kind": "started", "run": entry["run"], "entry": entry},
                          "published", entry["run"])
        return False

    def _service(self, event, key, run):
        """Hand ``event`` to the services' hook; a change goes in ``report[key]``."""
        if self.services is None:
            return
        try:
            answer = self.services(event, self.fleets, self.nodes) or {}
        except GpufleetError as exc:
            self.emit({"kind": "info", "run": run, "message": str(exc)})
            return
        if answer.get("changed"):
            self.report[key].append(run)

    def _scale(self, record, host, summary):
        """Hand a running service that autoscales to the services' hook (``{"kind":
        "scale"}``, tasks.records.ScaleEvent), its entry taken meanwhile: a second controller's
        pass leaves it alone, and a change of its hosts is noted in it."""
        if not self.autoscale or self.services is None or record["name"] in self.respawned_runs:
            return
        node = self.nodes[host]

        def take():
            """The whole entry, taken (again) by this pass; None when another holds it or it
            is gone."""
            taken = self._call(host, "take", {"run": summary["run"], "run_id": summary["run_id"],
                                              "by": self.by, "state": ACTIVE}) or {}
            return taken.get("entry") if taken.get("taken") else None

        entry = take()
        if entry is None:
            return
        keeper = _TakeKeeper(node, entry, self.by)
        changes = {}

        def runner(config):
            return self.runner_of(dict(entry, config=config), self.fleets, queue_node=node,
                                  **self.options)

        try:
            self._service({"kind": "scale", "run": record["name"], "record": record,
                           "entry": entry, "runner": runner, "refresh": take,
                           "hosts": lambda hosts: changes.update(hosts=list(hosts)),
                           "emit": self.emit},
                          "scaled", record["name"])
        finally:
            keeper.stop()
            self._update(host, entry, changes, expect={"state": ACTIVE, "taken_by": self.by})

    # -- runs that exist ----------------------------------------------------------------------

    def _settle(self, record, host, entry):
        """Carry out for a run what its attached submitter would have done: stop the jobs of a
        run that ended (a job failed, its host was interrupted, master-done) and, for a run
        that keeps an entry, resubmit it under retry or forget it once it ended. True when this
        pass stopped what was left of a run that has ended (and is not resubmitted)."""
        statuses = _statuses(record)
        if not statuses:
            return False
        now = self.clock()
        ended = [_epoch(j.get("finished_at"), now) for j in record["jobs"]
                 if j["status"] in JobStatus.finished_statuses()]
        since = max(ended) if ended else now
        policy = dict((entry or {}).get("policy") or _policy(record))
        stopped_final = False
        if entry is None:
            policy["retry"] = None   # only an entry resubmits; a replica's label respawns
        decision = lifecycle.decide(policy, statuses, now=now, retry_since=since)
        if decision.stop:
            # What the run could not stop by itself (a node without an SSH client, a node
            # that is gone). The stop returns once the containers are down, so the run is
            # decided again at once.
            if self._stop(record, decision.stop):
                # A job's command ended by itself just before the stop came: its status is
                # its own (done or failed), not the stop's. The next pass reads it.
                return False
            for num, reason in decision.stop.items():
                statuses[num] = (lifecycle.STOP_REASONS.get(reason, JobStatus.TERMINATED.value),
                                 reason, None)
            decision = lifecycle.decide(policy, statuses, now=now, retry_since=since)
            stopped_final = decision.final and not decision.resubmit
        if decision.respawn and not (decision.stop or decision.final or decision.resubmit):
            self._respawn(record, decision.respawn)
        if entry is None:
            return stopped_final
        if decision.resubmit:
            # Taken first: two passes never resubmit the same failure twice.
            taken = self._call(host, "take", {"run": entry["run"], "run_id": entry["run_id"],
                                              "by": self.by, "state": ACTIVE})
            if not (taken or {}).get("taken"):
                return False
            event = lifecycle.retry_event(decision.failed_job[1])
            hosts = sorted(h for h in set(j["host"] for j in record["jobs"])
                           if h in self.nodes and h not in self.silent)
            parallel(hosts, lambda h: self.nodes[h].call("remove", {"run": entry["run"]}))
            changes = {"state": PENDING, "submissions": int(record.get("submission") or 0) + 1,
                       "hosts": [], "retry_since": since,
                       "reason": "resubmitting (retry on %s)" % event,
                       "message": record.get("message")}
            self._update(host, entry, changes)
            entry.update(changes)   # tried in this same pass
            self.report["resubmitted"].append(entry["run"])
        elif decision.final:
            if decision.status == RunStatus.FAILED and record.get("message"):
                # Keep why it failed (a host that went away) where ps finds it.
                self._update(host, entry, {"state": FAILED, "reason": decision.failed_job[1],
                                           "message": record["message"]})
            else:
                self._call(host, "dequeue", {"run": entry["run"], "run_id": entry["run_id"]})
            self.report["forgotten"].append(entry["run"])
        return stopped_final

    def _respawn(self, record, nums):
        """Make the service replicas ``nums`` of ``record`` again on their hosts (retry covers
        how they failed), then publish the route with the new ones' ports. A host that does
        not answer, or was taken meanwhile, is left to the next pass."""
        jobs = [j for j in record["jobs"] if j["job_num"] in nums
                and j["host"] in self.nodes and j["host"] not in self.silent]
        answers = parallel(list(range(len(jobs))), lambda i: self._call(
            jobs[i]["host"], "respawn", {"run": record["name"], "job_num": jobs[i]["job_num"]}))
        made = []
        for i, job in enumerate(jobs):
            answer = answers[i][0] or {}
            if answer.get("respawned"):
                made.append(job["container"])
                message = "replica %d of %s is started again on %s (retry on %s)" % (
                    job["job_num"], record["name"], job["host"],
                    lifecycle.retry_event(job["reason"]))
            else:
                message = "replica %d of %s is not started again on %s: %s" % (
                    job["job_num"], record["name"], job["host"],
                    answer.get("why") or "the host did not answer")
            self.emit({"kind": "info", "run": record["name"], "message": message})
        if made:
            self.report["respawned"] += made
            self.respawned_runs.add(record["name"])
            self._service({"kind": "respawned", "run": record["name"], "record": record},
                          "published", record["name"])

    def _stop(self, record, stops):
        """Stop the jobs ``{job_num: reason}`` of ``record``; return the numbers of those whose
        command had ended by itself when the stop came (their hosts said so)."""
        by_host = {}
        for job in record["jobs"]:
            num = job["job_num"]
            if num in stops and job["host"] in self.nodes and job["host"] not in self.silent \
                    and job["status"] in JobStatus.up_statuses():
                by_host.setdefault((job["host"], stops[num]), []).append(
                    {"run": record["name"], "job_num": num, "container": job["container"]})
        # Every host at once: a run of 32 nodes is not stopped one host after another.
        answers = parallel(sorted(by_host), lambda key: self._call(key[0], "stop", {
            "reason": key[1], "timeout": 10, "jobs": by_host[key]}))
        ended = []
        for key, jobs in sorted(by_host.items()):
            self.report["stopped"] += [j["container"] for j in jobs]
            ended += (answers[key][0] or {}).get("ended") or []
        return sorted(ended)

    # -- small helpers ------------------------------------------------------------------------

    def _update(self, host, entry, changes, expect=None):
        return self._call(host, "update", {"run": entry["run"], "run_id": entry["run_id"],
                                           "changes": changes, "expect": expect})

    def _call(self, host, op, payload):
        if op in ("update", "dequeue"):
            self.touched.add((host, payload["run"]))
        try:
            return self.nodes[host].call(op, payload)
        except NodeError:
            return None   # the next pass tries again


class _TakeKeeper(object):
    """Renews a take while its entry is being submitted (an image pull may outlast the take's
    lease), so no other pass takes the entry meanwhile."""

    EVERY = 120

    def __init__(self, node, entry, by):
        import threading

        self.node = node
        self.request = {"run": entry["run"], "run_id": entry["run_id"], "by": by,
                        "state": entry.get("state") or PENDING}
        self.done = threading.Event()
        self.thread = threading.Thread(target=self._run, name="take-" + entry["run"])
        self.thread.daemon = True
        self.thread.start()

    def _run(self):
        while not self.done.wait(self.EVERY):
            try:
                self.node.call("take", self.request)
            except NodeError:
                pass

    def stop(self):
        """No more renewals: one under way ends first, so none lands after the caller lets
        the entry go."""
        self.done.set()
        self.thread.join(60)


def _statuses(record):
    """``{job_num: (status, reason, exit_code)}`` of a run record (tasks.listing)."""
    return dict((j["job_num"], (j["status"], j["reason"], j["exit_code"]))
                for j in record["jobs"])


def _service_ended(record, stopped_final=False):
    """Whether ``record`` (tasks.listing) is a service run, published on a proxy, that has
    finished (or whose last replicas the pass just stopped: ``stopped_final``)."""
    service = record.get("service")
    return isinstance(service, dict) and bool(service.get("proxy_host")) and (
        stopped_final or record.get("status") in RunStatus.finished_statuses())


def _policy(record):
    """What a run record says of how its run ends (retry is an entry's, not a record's)."""
    return {"stop_criteria": record.get("stop_criteria"),
            "startup_order": record.get("startup_order"),
            "service": record.get("type") == "service",
            "respawn": bool((record.get("service") or {}).get("respawn"))}


def _short(text, limit=300):
    return text if len(text) <= limit else text[:limit - 3] + "..."


def is_due(survey, instances=None, silent=None):
    """Whether a pass has work: a pending entry (it may fit now, or its time ran out), an active
    one whose run has a job that ended, or a run with jobs to stop (one of its jobs failed or
    its host was interrupted, and the run could not stop the others itself)."""
    containers, _claims, queues, errors = survey
    for _host, entry in entries_of(queues):
        if entry.get("state") == PENDING:
            return True
    if queue_mirror.handover_due(survey, instances or {}):
        return True   # a lost queue host's entries wait for a pass to hand them over
    if rearm.due(entries_of(queues), containers, errors, instances or {}):
        return True   # a scheduled run lost a host, or an old host still keeps its job
    active = set(e["run"] for _h, e in entries_of(queues) if e.get("state") == ACTIVE)
    for record in listing.run_records(containers, errors, instances, silent):
        statuses = _statuses(record)
        if record["name"] in active and any(
                s[0] in JobStatus.finished_statuses() for s in statuses.values()):
            return True
        decision = lifecycle.decide(_policy(record), statuses)
        if any(job["host"] not in errors for job in record["jobs"]
               if job["job_num"] in decision.stop):
            return True
    return False
