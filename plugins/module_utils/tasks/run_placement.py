# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Placing one submission of a run and claiming its hosts: the first of the Runner's three parts
(tasks.runs; then tasks.run_preparation and tasks.run_supervision).

The hosts are asked what they hold (tasks.surveys: the hosts the run index names when it can be
trusted, tasks.runindex, else every host), the jobs are placed (tasks.placement, or
tasks.growth where a backend fleet may grow), and the placed hosts are claimed under their locks
(tasks.claiming); a placement that lost a host to another submitter is made again. What the
preparation needs of the result is one record, ``Claimed``.
"""

from __future__ import annotations

import time

from ..backends.errors import BackendError
from ..fleets import cloud as fleet_cloud
from ..fleets import state
from ..offers import catalog
from ..volumes import attach as volumes
from . import admission, claiming, growth, health, lifecycle, placement, runindex, surveys
from .errors import NeedsInstances, PlanError, RunError
from .ssh import Background, NodeError, parallel
from .supervisor import RUN_LABEL

# A placement whose hosts were claimed by another submitter meanwhile is made again, at most
# this many times, after a short random pause.
CLAIM_ATTEMPTS = 6
# How long a whole survey's rewrite of a run index may hold the placement up.
REINDEX_TIMEOUT = 10


class Claimed(object):
    """A placement whose hosts are claimed, as the preparation takes it: ``placed`` (the
    placement, tasks.placement), ``answers`` (each claimed host's answer, by host: whether it
    has the image...), ``assumed`` (hosts the survey took as free without asking them: their
    starts clear what an earlier run of the name left) and ``leftovers`` (hosts where an
    earlier run of the name left containers)."""

    def __init__(self, placed, answers, assumed, leftovers):
        self.placed = placed
        self.answers = answers
        self.assumed = set(assumed)
        self.leftovers = list(leftovers)


class RunPlacement(object):
    """Where a run's submission goes. ``run`` is the Runner it works for: its config, name, run
    id, fleets, nodes and options are read from there, as they are when it places (the fleets
    are described again between submissions)."""

    def __init__(self, run, may_grow=False):
        self.run = run
        self.may_grow = may_grow
        self.claimed = {}   # the answers of the last granted claims, by host
        # Hosts the last survey took as free without asking them (tasks.runindex.partial):
        # the index names them for this run's name alone. Once placed, only those the run is
        # placed on stay (place asks the others); their starts clear the name's earlier run.
        self.assumed = set()
        self.late_queues = {}
        self.surveyed = None
        self.surveyed_whole = True   # whether the last survey asked every host
        self.leftovers = []
        self.fresh_survey = None
        self.reindexing = None
        self.last_survey = None
        # The owner's admission under per-user limits (tasks.admission), once granted.
        self.admission = admission.Admission(run)

    def reuse_survey(self, answer):
        """Let the next placement use ``answer`` (a survey nothing acted on since) instead of
        asking every host again."""
        self.fresh_survey = answer

    def place(self, whole=False):
        self.last_survey = None
        containers, claims, _queues, errors = self._look(whole)
        self._own_leftovers(containers)
        placed = self._placement(containers, claims, errors)
        # Hosts taken as free without asking them: those placed on check in their claims that
        # no run of this name is alive there, and clear what it left when they start; the
        # others are asked now, before any claim clears anything.
        unplaced = sorted(self.assumed - set(job["host"] for job in placed["jobs"]))
        self.late_queues = {}
        if unplaced:
            more = surveys.survey_with_queues(dict((h, self.run.nodes[h]) for h in unplaced))
            self.assumed -= set(unplaced)
            self.late_queues = more[2]
            containers, claims = runindex.merge((containers, claims, {}, {}), more)[:2]
            self.surveyed = (containers, claims)
            self._own_leftovers(containers)
        return placed

    def place_beside(self, kept, probe=False):
        """Where the run's jobs after ``kept`` (the placed jobs of its running ones, numbered
        from 0) go: placed on what every host has free beside what runs there now, the run's
        own jobs counted as busy, and numbered after ``kept``; the run (``kept`` and them) is
        admitted under its owner's caps (UserLimit; ``probe``: only asked, for a plan). Claims
        nothing (services.rolling adds replicas to a running service with it; the fleet does
        not grow for that)."""
        count = int(self.run.config.get("nodes") or 1) - len(kept)
        if count < 1:
            return []
        containers, claims, _queues, errors = self._look(True)
        placed = self._placement(containers, claims, errors, grow=False,
                                 config=dict(self.steered(), nodes=count))
        more = [dict(job, job_num=len(kept) + i) for i, job in enumerate(placed["jobs"])]
        self._admit(dict(placed, jobs=list(kept) + more), whole=True, probe=probe)
        return more

    def readmit(self, placed):
        """The run's admission written again for ``placed`` (what it holds now: a service
        that scaled down), so that its owner's use counts that and no more. Only for a capped
        owner; a placement that no longer fits new caps keeps the admission it had."""
        self._look(True)
        try:
            self._admit(placed, whole=True)
        except admission.UserLimit:
            pass

    def _look(self, whole):
        """A look at the hosts (``whole``: every one), kept as the last survey (what
        ``_admit`` reads) and as what was surveyed."""
        answer = self.survey(whole)
        self.last_survey = answer
        self.surveyed = (answer[0], answer[1])
        return answer

    def _own_leftovers(self, containers):
        """Note the hosts where this run's name left containers, or refuse the run when one of
        them is alive (dstack refuses a run name that is running)."""
        name = self.run.name
        self.leftovers = sorted(h for h, entries in containers.items()
                                if any(c["labels"].get(RUN_LABEL) == name for c in entries))
        for host, entries in containers.items():
            mine = [c for c in entries if c["labels"].get(RUN_LABEL) == self.run.name]
            if any(lifecycle.holds_host(c) for c in mine):
                raise RunError(
                    "run %s is already running (on %s): stop it first (gpufleet stop %s), or "
                    "give this task another name" % (self.run.name, host, self.run.name))

    def _placement(self, containers, claims, errors, grow=True, config=None):
        fleets = []
        for fleet in self.run.fleets:
            fleet = dict(fleet)
            instances = []
            for inst in fleet.get("instances") or []:
                if inst["name"] in errors:
                    inst = dict(inst, status="unreachable")
                instances.append(inst)
            fleet["instances"] = instances
            fleets.append(fleet)
        facts = {}
        for fleet in fleets:
            facts.update(fleet.get("facts") or {})
        busy = claiming.busy_map(containers, claims)
        if not (self.may_grow and grow):
            return placement.place(config or self.steered(), fleets, facts, busy)
        placed = growth.place(self.steered(), fleets, facts, busy, offer_for=self.offer_for,
                              run=self.run.name)
        if placed.get("create"):
            raise NeedsInstances(placed["create"], placed)
        return placed

    def survey(self, whole=False):
        """The hosts' containers, claims and queues: of the hosts the run index says this
        placement needs when it can be trusted (tasks.runindex), else of every host (``whole``
        asks for that). In a whole survey, hosts whose cached GPU health is older than
        tasks.health.MAX_AGE read it again in the same request, and placement uses what they
        say (the facts cache keeps it); the run index is rewritten from it meanwhile."""
        fresh, self.fresh_survey = self.fresh_survey, None
        if fresh is not None:
            return fresh
        root = state.state_dir(self.run.root)
        stale = health.due(self.run.fleets, root)
        self.surveyed_whole = True
        self.assumed = set()
        if not whole and not stale and not self.run.read_only:
            assumed = set()
            answer = runindex.partial(self.run.nodes, self.run.fleets, self.run.name,
                                      surveys.survey_with_queues, assumed=assumed)
            if answer is not None:
                self.surveyed_whole = False
                self.assumed = assumed
                return answer
        raw = {}
        begun = time.monotonic()
        nodes = self.run.nodes
        answer = surveys.survey_with_queues(nodes, probe=[h for h in stale if h in nodes],
                                            health=raw)
        if raw:
            changes = health.judge_answers(raw)
            health.store(root, dict((h, i["fleet"]) for h, i in stale.items()), changes)
            for fleet in self.run.fleets:
                facts = fleet.get("facts") or {}
                for host, keys in changes.items():
                    if host in facts:
                        facts[host] = dict(facts[host], **keys)
        if not self.run.read_only:
            self._reindex(answer, time.monotonic() - begun)
        return answer

    def _reindex(self, answer, age):
        """Rewrite the run index of every fleet from a whole survey that began ``age`` seconds
        ago, while the placement goes on (``_settle`` waits for it, REINDEX_TIMEOUT at most);
        a record host that does not answer keeps its index, which then ages until it is not
        trusted."""
        requests = runindex.reindex_requests(self.run.fleets, self.run.nodes, answer, age)
        self.settle()
        if requests:
            self.reindexing = Background(parallel, sorted(requests), lambda h: self.run.nodes[
                h].call("reindex", requests[h], timeout=REINDEX_TIMEOUT))

    def settle(self):
        pending, self.reindexing = self.reindexing, None
        if pending is not None:
            pending.result()   # parallel keeps each host's failure in its answer

    def offer_for(self, fleet):
        """The cheapest catalog offer for a new instance of a cloud ``fleet``, or None: in the
        regions the fleet launches in (fleets.cloud.offer_regions, the backend settings')."""
        from ..offers import select

        backend = growth._backend(fleet)
        try:
            root = state.state_dir(self.run.root)
            config = {"type": "fleet", "backends": [backend],
                      "resources": fleet.get("resources"),
                      "spot_policy": fleet.get("spot_policy"),
                      "max_price": fleet.get("max_price")}
            regions, _why = fleet_cloud.offer_regions(config, state.backend_settings(root),
                                                      [backend], catalog.directory(root))
            data, _source = catalog.load(backend, catalog.directory(root))
            offers = select.select(config, {backend: data}, None, regions)["offers"]
        except Exception:  # a missing or unreadable catalog: the plan says no offer
            return None
        return offers[0] if offers else None

    def place_and_claim(self, number):
        """Place submission ``number`` and claim its hosts (tasks.claiming); a placement that
        lost a host to another submitter meanwhile is made again."""
        run = {"name": self.run.name, "id": self.run.run_id}
        refused = None
        for attempt in range(CLAIM_ATTEMPTS):
            if attempt:
                self.run.sleep(self.run.rng.uniform(0.05, 0.4) * attempt)
            # The first try trusts the run index; after a refused claim, every host is asked.
            try:
                placed = self.place(whole=attempt > 0)
            except placement.NoHostFits:
                # Held back by its owner's caps anyway? Then it waits for that (UserLimit).
                if self.last_survey is not None:
                    self.admission.check(self.last_survey, self.surveyed_whole and not
                                         self.last_survey[3])
                raise
            waiting = self._queues_wait(self.late_queues)
            if waiting is not None:
                refused = waiting
                continue
            try:
                placed = self._admit(placed, whole=attempt > 0)
            except admission.UserLimit:
                self.admission.release()
                raise
            noting = runindex.note_request(self.run.fleets, placed, self.run.name, self.surveyed,
                                           user=self.run.user)
            if noting is not None:
                # Noted before any container exists, while the hosts are claimed.
                noting = Background(self.run.nodes[noting[0]].call, "note", noting[1])
            # A granted claim also clears an earlier run of this name off its host and says
            # whether the host has the image (tasks.hostside.booking): no requests of their own.
            try:
                image = self.run.image_and_python(placed)[0]
            except PlanError as exc:
                raise RunError(str(exc)) from exc
            # Every claimed host clears an earlier run of this name, not only those the
            # survey saw it on: a look at part of the hosts may have missed one. When hosts
            # were taken as free without asking them, that waits for the starts: only once
            # every claim is granted is it known that no run of this name is alive on them.
            # Such a host also says whether its queue holds runs that wait (queue_first).
            assumed = sorted(self.assumed)   # hosts of this placement (see _place)
            extras = dict((job["host"], {"image": image, "replace": not assumed})
                          for job in placed["jobs"])
            if self.run.queue_first is not None:
                for host in assumed:
                    extras[host]["queue"] = True
            self.claimed = {}
            try:
                claiming.claim_hosts(self.run.nodes, placed, run, number, by=self.run.by,
                                     extras=extras, answers=self.claimed)
            except claiming.ClaimRefused as exc:
                refused = exc
                continue
            except NodeError as exc:
                # A host that stopped answering meanwhile: the next survey leaves it out.
                refused = claiming.ClaimRefused(exc.host, exc.detail)
                continue
            finally:
                self.settle()
            waiting = self._queues_wait(dict((h, self.claimed[h].get("queue") or [])
                                             for h in assumed if h in self.claimed),
                                        placed, noting)
            if waiting is not None:
                refused = waiting
                continue
            if noting is not None:
                try:
                    noting.result()
                except NodeError as exc:
                    if not self.surveyed_whole:
                        # Placed on a partial look, and not noted: let the hosts go and try
                        # again on a look at every host.
                        claiming.release_hosts(self.run.nodes, [j["host"] for j in placed["jobs"]],
                                               run)
                        refused = claiming.ClaimRefused(exc.host, exc.detail)
                        continue
                    # Placed on a look at every host: the run goes on, and the index misses it
                    # until a whole survey rewrites it (docs/concepts.md, the run index).
            return Claimed(placed, self.claimed, self.assumed, self.leftovers)
        self.admission.release()
        raise placement.NoHostFits(
            "no capacity for task %s: its hosts were taken by other runs while it was placed "
            "(last: %s); submit it again, or add retry: {on_events: [no-capacity]}"
            % (self.run.name, refused), [str(refused)])

    def _admit(self, placed, whole, probe=False):
        """Admit the placed run under its owner's per-user caps (tasks.admission), or raise
        UserLimit. A capped user's admission reads which runs are alive from a look at every
        host: a partial one is made whole first."""
        if admission.caps(surveys.limits_of(self.last_survey), self._fleet_hosts(placed),
                          admission.user_of(self.run)) is None:
            return placed
        if not self.surveyed_whole and not whole:
            placed = self.place(whole=True)
        containers, claims = self.surveyed
        every = self.surveyed_whole and not self.last_survey[3]
        self.admission.admit(placed, self.last_survey, containers, claims, every, probe=probe)
        return placed

    def _fleet_hosts(self, placed):
        fleet = next((f for f in self.run.fleets if f.get("name") == placed.get("fleet")), {})
        return [i["name"] for i in fleet.get("instances") or [] if i.get("name")]

    def _queues_wait(self, queues, claimed=None, noting=None):
        """When ``queues`` (of hosts the first look took as free without asking them) hold
        runs that wait and the caller lets them go first (``queue_first``), let them, as they
        would have gone had the first look seen them: the hosts of ``claimed`` (a placement
        whose claims were granted) are let go first. Then the ClaimRefused that makes the
        next try look at every host; else None."""
        if self.run.queue_first is None or not runindex.waiting(queues):
            return None
        if claimed is not None:
            claiming.release_hosts(self.run.nodes, [j["host"] for j in claimed["jobs"]],
                                   {"name": self.run.name, "id": self.run.run_id})
        if noting is not None:
            try:
                noting.result()
            except NodeError:
                pass   # a note only adds hosts where the run may be: harmless
        self.run.queue_first()
        return claiming.ClaimRefused(min(h for h in queues if queues[h]),
                                     "runs wait in its queue")

    def steered(self):
        """The config, narrowed to where its first job's network volumes are."""
        run = {"name": self.run.name}
        if not volumes.network_names(self.run.config, {"job_num": 0}, run):
            return self.run.config
        try:
            clients = self.run.volume_clients()
            if not clients:
                return self.run.config   # no cloud host: attaching says why
            where = volumes.locate(self.run.config, run, clients, self.run.volume_regions)
        except (volumes.VolumeError, BackendError, fleet_cloud.CloudError, state.StateError,
                PlanError) as exc:
            raise RunError(str(exc)) from exc
        return volumes.steer(self.run.config, where)
