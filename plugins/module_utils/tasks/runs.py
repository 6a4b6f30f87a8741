# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Runs of dstack tasks on fleets: submit a run and carry it to its end.

A run has no record but its containers: each carries labels naming its run, job, submission and
what ``ps`` shows (tasks.container), and each job's state folder on its host says how the
command went. Every operation starts from the fleets (their records and cached host facts,
tasks.surveys) and asks their hosts. The Runner coordinates three parts, each a module:
tasks.run_placement places a submission and claims its hosts (its record: Claimed),
tasks.run_preparation brings the image, code and volumes and builds the jobs (its record:
Submission), and tasks.run_supervision watches the run, resubmits it under retry and waits in
the queue. The image a run needs is brought to its hosts by tasks.images; listing runs, their
logs and stopping them, from the labels alone, is tasks.listing.
"""

from __future__ import annotations

import os
import random
import socket
import time
import uuid

from ..backends import base, local_volumes
from ..backends.docker_cli import Docker
from ..fleets import apply as fleet_apply
from ..fleets import cloud as fleet_cloud
from ..fleets import state
from ..offers import catalog
from ..volumes import attach as volumes
from ..spec import support
from ..teams import identity
from . import claiming, code, devenv, lifecycle, placement, rankplan, runbook, surveys
from .lifecycle import JobStatus, RunStatus
from .environment import resolve_env
from .errors import NeedsInstances, RunError
from .run_placement import RunPlacement
from .run_preparation import RunPreparation
from .run_supervision import NO_CAPACITY_BACKOFF, RunSupervision


class Runner(object):
    """Submit a task and carry it to its end (or only start it, ``wait=False``)."""

    def __init__(self, config, fleets, root=None, secrets=None, environ=None, docker=None,
                 emit=None, image_source="auto", follow_logs=False, poll=1.0, clock=time.time,
                 sleep=time.sleep, run_args=(), rng=random, local_image=None,
                 config_dir=None, array=None, code_=None, files_data=None, create=False,
                 grower=None, grow_first=False, user=None, runnable=None, services=None,
                 after=None, gate=None):
        # What the plan shows (a dev environment as one), before devenv.runnable.
        self.shown_config = config
        # A dev environment runs as a one-node task with dstack's commands (tasks.devenv); a
        # service as its replicas (``runnable``, passed in from services.replicas, which this
        # package may not import).
        config = devenv.runnable(config) if runnable is None else runnable(config)
        self.config = config
        self.fleets = fleets
        self.root = root
        self.secrets = secrets or {}
        self.environ = os.environ if environ is None else environ
        self.docker = docker
        sink = emit or (lambda event: None)
        self.emit = lambda event: sink(dict(event, run=self.name))
        self.image_source = image_source
        self.follow_logs = follow_logs
        self.poll = poll
        self.clock = clock
        self.sleep = sleep
        self.run_args = run_args
        self.local_image = local_image
        self.config_dir = config_dir
        self.array = array
        # Who submitted the run (its containers' gpufleet.user label, its queue entry): this
        # controller's user unless given; "" for a queued run an earlier version wrote down,
        # which names nobody (None).
        self.user = identity.user_name() if user is None else (
            identity.check_user(user, "user") if user else None)
        self.name = rankplan.run_name(config, rng)
        self.rng = rng
        self.by = "%s:%d" % (socket.gethostname(), os.getpid())
        self.run_id = uuid.uuid4().hex
        self.submitted_at = fleet_apply.utcnow()
        self.submitted_epoch = clock()
        self.files_data = files_data or {}
        # Whether a backend fleet may grow for this run's first placement (tasks.growth): the
        # task playbook grows it when the placement says so (NeedsInstances).
        self.create = create
        # grower(create) grows a fleet from here (tasks.grower): for resubmissions, and for the
        # first submission too with grow_first (a pass over the queue).
        self.grower = grower
        self.grow_first = grow_first
        # The runs this one runs after (``[{"run", "after"}]``), and the gate that judges them
        # (automation.dependencies.gate, passed in: the runner may not import it).
        self.after = list(after or [])
        self.gate = gate
        refused = support.refusals(config)   # the verdict gpufleet validate reports too
        if refused:
            raise RunError("; ".join(str(p) for p in refused))
        self.nodes = surveys.nodes_of(fleets, root)
        self._clients = None
        self.volume_regions = {}
        self.submissions = []
        # How the caller lets runs that wait go first (tasks.actions), or None: then a claim on
        # such a host also reads its queue, and when it holds runs that wait, this is called
        # before the run is placed again.
        self.queue_first = None
        # Check mode: every host is asked (a plan must not take a host it did not ask as free)
        # and nothing is written to the hosts.
        self.read_only = False
        self.env = resolve_env(config, self.secrets, self.environ)
        # A job array's runs share one Code (one pack of the tree); a lone run owns its own.
        self._owns_code = code_ is None
        self.code = code_ if code_ is not None else (None if not config.get("repos") else (
            code.Code(config["repos"][0], config_dir, self.environ)))
        # Say the first placement as a "plan" event (what gpufleet apply -y prints instead
        # of asking a planning play first): actions.submit sets it for show_plan.
        self.announce_plan = False
        # The three parts (see the module's text); each reads what it needs from here.
        self.placing = RunPlacement(self, may_grow=create)
        self.preparing = RunPreparation(self)
        # The hook of the passes over the queue this run makes while it waits (services'
        # routes: tasks.queue.QueuePass), passed in from above.
        self.services = services
        self.supervising = RunSupervision(self, runner_of)

    def survey(self, whole=False):
        """What the next placement will use (tasks.run_placement); ``reuse_survey`` hands it
        back. ``surveyed_whole`` then says whether every host was asked."""
        return self.placing.survey(whole)

    def reuse_survey(self, answer):
        """Let the first placement use ``answer`` (a survey nothing acted on since) instead of
        asking every host again."""
        self.placing.reuse_survey(answer)

    def place(self, whole=False):
        """A placement of the run on what the hosts hold now, claiming nothing (a plan, check
        mode): tasks.run_placement."""
        return self.placing.place(whole)

    def place_beside(self, kept, probe=False):
        """Where the run's jobs after ``kept`` go, beside its own running ones, admitted under
        its owner's caps, claiming nothing (tasks.run_placement)."""
        return self.placing.place_beside(kept, probe)

    def readmit(self, placed):
        """Admit the run again for ``placed``, what it holds now (tasks.run_placement)."""
        self.placing.readmit(placed)

    @property
    def surveyed_whole(self):
        """Whether the last survey asked every host."""
        return self.placing.surveyed_whole

    def make_key_early(self):
        """Start making the run's SSH key now (tasks.run_preparation), so that it is ready by
        the time the run is placed: actions.submit calls it before the first look at the
        hosts."""
        self.preparing.make_key_early()

    def fleet_env(self, name):
        """The placed fleet's ``env`` (tasks.run_preparation)."""
        return self.preparing.fleet_env(name)

    def image_and_python(self, placed):
        """The image the placed run uses and dstack's venv setup in it (tasks.run_preparation)."""
        return self.preparing.image_and_python(placed)

    def judge(self, host, silent_for):
        """What the backend says of a job's host that does not answer (tasks.run_supervision)."""
        return self.supervising.judge(host, silent_for)

    def keep_entry(self, submission):
        """Write the run down as an active entry of its queue host, for ``submission`` (retry
        resubmits it from there); said, not raised, when it cannot be."""
        self.supervising._keep_entry(submission)

    def drop_entry(self):
        """Take the run's active queue entry away, where it has one (tasks.run_supervision)."""
        self.supervising.drop_entry()

    def keeps_entry(self):
        """Whether a started run keeps a queue entry so that retry can submit it again."""
        return self.supervising.keeps_entry()

    def launch(self, submission, watch=None):
        """Detached: stay until every job of ``submission`` is started (tasks.run_supervision)."""
        return self.supervising.launch(submission, watch)

    def refresh_quietly(self):
        """``_refresh_fleets``, keeping the fleets as they were when they cannot be described
        now: an instance that was stopped may run again, one that ran may be gone."""
        try:
            self._refresh_fleets()
        except RunError:
            pass

    def _refresh_fleets(self):
        """The fleets as their backends tell them now (after one grew, or lost an instance);
        a fleet that cannot be described again stays as it was."""
        fresh = dict((f["name"], f) for f in surveys.collect_fleets(
            [f["file"] for f in self.fleets if f.get("file")], self.docker, self.root))
        self.fleets = [fresh.get(f["name"], f) for f in self.fleets]
        self.nodes = surveys.nodes_of(self.fleets, self.root)

    def _announce(self, placed):
        if self.announce_plan:
            self.emit({"kind": "plan", "plan": placed, "config": self.shown_config})

    def volume_clients(self):
        """Volume clients of the backends the fleets' hosts are on, made once."""
        if self._clients is None:
            settings = state.backend_settings(state.state_dir(self.root))
            backends = set(inst.get("backend") for fleet in self.fleets
                           for inst in fleet.get("instances") or [])
            self._clients = dict((b, base.client(b, settings))
                                 for b in sorted(backends) if b in volumes.CLOUD)
            root = state.state_dir(self.root)
            self.volume_regions = dict((b, fleet_cloud.regions({}, settings, b,
                                                               catalog.directory(root)))
                                       for b in self._clients)
            if "local" in backends:   # the local volume pool (backends/local_volumes.py)
                self._clients["local"] = local_volumes.Pool(self.docker or Docker())
                self.volume_regions["local"] = [local_volumes.REGION]
        return self._clients

    def policy(self):
        return {"startup_order": self.config.get("startup_order"),
                "stop_criteria": self.config.get("stop_criteria"),
                "retry": self.config.get("retry"),
                "service": isinstance(self.config.get("service"), dict),
                "respawn": bool((self.config.get("service") or {}).get("respawn"))}

    def submit(self, number=0, waited_since=None, wait_for_capacity=True):
        """Place and prepare submission ``number``; wait for capacity when retry allows it
        (and ``wait_for_capacity``: otherwise NoHostFits at once)."""
        started = self.clock() if waited_since is None else waited_since
        attempt = 0
        here = self.grower is not None and (number > 0 or self.grow_first)
        self.placing.may_grow = self.create or here
        grown = False
        while True:
            try:
                claimed = self.placing.place_and_claim(number)
                break
            except NeedsInstances as exc:
                if not here or grown:
                    if number == 0 and not here:
                        self._announce(exc.plan)   # the playbook grows the fleet next
                    raise
                try:
                    self.grower(exc.create)   # the fleet playbook, then a new look at fleets
                except RunError as err:       # as good as no capacity: retry decides
                    raise placement.NoHostFits(str(err), [str(err)]) from err
                grown = True
                self._refresh_fleets()
                continue
            except placement.NoHostFits as exc:
                if not wait_for_capacity or not lifecycle.may_retry(
                        self.config.get("retry"), lifecycle.EVENT_NO_CAPACITY, self.clock(),
                        started):
                    raise
                delay = NO_CAPACITY_BACKOFF[min(attempt, len(NO_CAPACITY_BACKOFF) - 1)]
                self.emit({"kind": "run", "status": RunStatus.PENDING.value,
                           "message": "no capacity, retrying in %d s: %s" % (delay, exc)})
                attempt += 1
                self.sleep(delay)
                self.refresh_quietly()   # each try asks the backends again
        if number == 0:
            self._announce(claimed.placed)
        try:
            submission = self.preparing.prepare(number, claimed)
        except BaseException:
            claiming.release_hosts(self.nodes, [j["host"] for j in claimed.placed["jobs"]],
                                   {"name": self.name, "id": self.run_id})
            self.placing.admission.release()
            raise
        self.submissions.append(submission)
        return submission

    def result(self, decision=None, statuses=None, message=None):
        last = self.submissions[-1] if self.submissions else None
        jobs = []
        if last is not None:
            for job, placed in zip(last.jobs, last.placement["jobs"]):
                status = (statuses or {}).get(job["job_num"],
                                              (JobStatus.SUBMITTED.value, None, None))
                jobs.append({"job_num": job["job_num"], "host": job["host"],
                             "container": job["container"], "internal_ip": placed["internal_ip"],
                             "status": status[0], "reason": status[1], "exit_code": status[2]})
        return {
            "run": self.name,
            "run_id": self.run_id,
            "user": self.user,
            "fleet": last.placement["fleet"] if last else None,
            "status": decision.status if decision else RunStatus.SUBMITTED.value,
            "reason": decision.reason if decision else None,
            "message": message,
            "submissions": len(self.submissions),
            "jobs": jobs,
        }

    def run(self, wait=True, stop_event=None):
        """Submit, then (``wait``) watch until the run ends, resubmitting under ``retry``."""
        try:
            return self.supervising.run_all(wait, stop_event)
        finally:
            self.close_code()

    def close_code(self):
        if self.code is not None and self._owns_code:
            self.code.close()


def runner_of(entry, fleets, queue_node=None, **options):
    """A Runner for ``entry`` on this controller (``options``: root, docker, emit,
    poll, clock, sleep...)."""
    if entry.get("version") not in runbook.READ_VERSIONS:
        raise RunError("run %s was queued by a gpufleet of another version (entry version %s); "
                       "stop it and submit it again" % (entry.get("run"), entry.get("version")))
    code_ = None
    repo = entry.get("repo")
    if repo and repo.get("kind") == "local":
        code_ = runbook.HeldCode(entry, queue_node)
    runner = Runner(entry["config"], fleets, secrets=entry.get("secrets") or {},
                    environ=entry.get("environ") or {}, image_source=entry.get("image_source")
                    or "auto", run_args=entry.get("run_args") or (),
                    local_image=entry.get("local_image"), config_dir=entry.get("config_dir"),
                    array=entry.get("array"), code_=code_,
                    files_data=entry.get("files_data") or {}, user=entry.get("user") or "",
                    after=entry.get("after"), **options)
    runner.run_id = entry["run_id"]
    runner.submitted_at = entry["submitted_at"]
    runner.submitted_epoch = entry.get("submitted_epoch") or time.time()
    runner._owns_code = code_ is not None
    return runner


def log_tail(node, job, lines=20):
    """The last ``lines`` lines of a job's output, as its host keeps it (tasks.joblogs)."""
    from . import joblogs

    record = {"name": job["run"], "jobs": [dict(job, host=node.name)]}
    try:
        found = [line for _num, line in joblogs.lines({node.name: node}, record, tail=lines)]
    except joblogs.LogsError:
        return []
    return found[-lines:]
