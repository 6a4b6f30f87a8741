# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Runs of dstack tasks on fleets: find the fleets and their hosts, submit a run and watch it.

A run has no record but its containers: each carries labels naming its run, job, submission and
what ``ps`` shows (tasks.container), and each job's state folder on its host says how the
command went. Every operation starts from the fleets (their records and cached host facts) and
asks their hosts. The image a run needs is brought to its hosts by tasks.images; listing runs,
their logs and stopping them, from the labels alone, is tasks.listing.
"""

from __future__ import annotations

import os
import random
import shutil
import socket
import subprocess
import tempfile
import time
import uuid
from concurrent.futures import ThreadPoolExecutor

from ..backends import base, local_volumes, task_image
from ..backends.docker_cli import Docker, DockerError
from ..backends.errors import BackendError
from ..fleets import apply as fleet_apply
from ..fleets import cloud as fleet_cloud
from ..fleets import state
from ..offers import catalog
from ..repos import files as shipped_files
from ..volumes import attach as volumes
from ..spec import support
from . import (claiming, code, devenv, growth, health, lifecycle, placement, python_env, rankplan,
               runindex)
from .environment import registry_credentials, resolve_env
from .errors import PlanError, RunError
from .images import ensure_image
from .lifecycle import JobStatus, RunStatus
from .ssh import Node, NodeError
from .supervisor import RUN_LABEL, Watch, parallel

NO_CAPACITY_BACKOFF = (5, 10, 20, 40, 60)
# A placement whose hosts were claimed by another submitter meanwhile is made again, at most
# this many times, after a short random pause.
CLAIM_ATTEMPTS = 6
# How long a whole survey's rewrite of a run index may hold the placement up.
REINDEX_TIMEOUT = 10
# A host that stops answering is looked up in its backend at most this often (seconds).
JUDGE_EVERY = 5


# ---------------------------------------------------------------------------------------------
# Fleets and hosts


def _describe_file(path, docker, root, local_nodes=None):
    from ..spec import SpecError, parse_file

    try:
        config, _warnings = parse_file(path)
    except SpecError as exc:
        raise RunError(str(exc)) from exc
    if config.get("type") != "fleet":
        raise RunError("%s is a %s file; fleets must be fleet files (type: fleet)"
                       % (path, config.get("type")))
    try:
        return fleet_apply.describe(config, path, docker, root,
                                    settings=state.backend_settings(root),
                                    local_nodes=local_nodes)
    except (fleet_apply.ApplyError, DockerError, state.StateError) as exc:
        raise RunError(str(exc)) from exc


def collect_fleets(paths=(), docker=None, root=None, discover=True):
    """Fleet records: the fleets of the given fleet files, then every fleet the backends hold,
    then SSH fleets this controller applied (their files are remembered in the state dir).

    Each record gets ``facts`` (``{instance: gpufleet_host}``), the host facts cached when the
    fleet was applied. An SSH host with cached facts counts as ready (``idle``): it passed its
    checks when the fleet was last applied, and the runner asks it again before using it.
    """
    root = state.state_dir(root)
    found = []
    seen = set()
    given = [os.path.abspath(p) for p in paths or ()]
    remembered = []
    # The local engine is asked once for the nodes of every fleet: the files' local fleets
    # and the discovered ones are read from that one answer (two docker calls, not two per
    # fleet file and two more). Without an answer each file asks on its own, as it says why,
    # and no local fleet is discovered.
    local_nodes = None
    if discover:
        remembered = [p for p in state.remembered_files(root).values()
                      if os.path.abspath(p) not in given]
        if docker is not None:
            try:
                local_nodes = fleet_apply.local_fleet_nodes(docker)
            except DockerError:
                pass
    for path in given + remembered:
        try:
            record = _describe_file(path, docker, root, local_nodes)
        except RunError:
            if path in given:
                raise
            continue  # a remembered file that no longer reads is only a stale cache entry
        if record["name"] in seen:
            continue
        found.append(record)
        seen.add(record["name"])
    if discover:
        try:
            settings = state.backend_settings(root)
            held = fleet_apply.discover(None if local_nodes is None else docker, root,
                                        settings=settings, local_nodes=local_nodes)
        except (fleet_apply.ApplyError, state.StateError) as exc:
            raise RunError(str(exc)) from exc
        for record in held:
            if record["name"] not in seen:
                found.append(record)
                seen.add(record["name"])
    for record in found:
        record["facts"] = state.read_facts(root, record["name"])
        for instance in record["instances"]:
            if instance.get("backend") == "ssh" and instance["name"] in record["facts"]:
                instance["status"] = "idle"
    return found


def nodes_of(fleets, root=None, connect_timeout=20):
    """``{instance name: Node}`` for every instance with an address."""
    result = {}
    for fleet in fleets:
        for instance in fleet.get("instances") or []:
            if instance.get("hostname"):
                result[instance["name"]] = Node(instance, root=root,
                                                connect_timeout=connect_timeout)
    return result


def survey(nodes):
    """Ask every host for its task containers: ``({host: [containers]}, {host: error})``."""
    containers, _claims, _queues, errors = survey_with_queues(nodes)
    return containers, errors


def survey_with_queues(nodes, probe=(), health=None, timeout=None, logs=None, pages=None,
                       index=None, indexes=None):
    """Every host's task containers, live claims and queue entries (tasks.booking), in one
    request per host: ``(containers, claims, queues, errors)``, each ``{host: ...}``. The hosts
    named in ``probe`` also read their GPUs' health in that request (tasks.healthside); what
    they said goes into the dict ``health`` (``{host: probe}``, for tasks.health). With
    ``logs`` (a request of tasks.logside's ``logs``), every host also answers the first pages
    of that run's jobs it keeps, into the dict ``pages`` (``{host: {job: page}}``, for
    tasks.joblogs). ``index`` (``{host: {"fleet", "run"}}``) asks those hosts for the run index
    (tasks.indexside); their answers go into the dict ``indexes``. ``timeout``: how long a host
    may take (the request's default when None; ps and the queue's passes look through
    tasks.silence.look, which gives tasks.supervisor.STATUS_TIMEOUT)."""
    probe = set(probe or ())
    limit = {} if timeout is None else {"timeout": timeout}

    def payload(host):
        asked = {"health": True} if host in probe else {}
        if logs:
            asked["logs"] = logs
        if index and host in index:
            asked["index"] = index[host]
        return asked

    answers = parallel(sorted(nodes), lambda h: nodes[h].call("status", payload(h), **limit))
    containers = {}
    claims = {}
    queues = {}
    errors = {}
    for host, (answer, error) in answers.items():
        if error is not None:
            errors[host] = error
        else:
            containers[host] = answer["containers"]
            claims[host] = answer.get("claims") or []
            queues[host] = answer.get("queue") or []
            if health is not None and host in probe and "health" in answer:
                health[host] = answer["health"]
            if pages is not None and logs and "logs" in answer:
                pages[host] = answer["logs"]
            if indexes is not None and "index" in answer:
                indexes[host] = answer["index"]
    return containers, claims, queues, errors


# ---------------------------------------------------------------------------------------------
# Submitting and watching


def run_key():
    """One RSA key pair per run for SSH between its containers
    (docs/reference/dstack-runtime.md#ssh-between-nodes), 2048 bits as dstack's server makes it (its
    utils.crypto).

    Made in this process with the ``cryptography`` package (which ansible-core itself needs)
    when it imports: ssh-keygen spends 0.06-0.4 s on the same key, in a process of its own,
    and the run's first start waits for it. Without the package, ssh-keygen makes it."""
    try:
        from cryptography.hazmat.primitives import serialization
        from cryptography.hazmat.primitives.asymmetric import rsa
    except ImportError:
        return _run_key_by_ssh_keygen()
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    private = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.OpenSSH,
                                serialization.NoEncryption()).decode("ascii")
    public = key.public_key().public_bytes(serialization.Encoding.OpenSSH,
                                           serialization.PublicFormat.OpenSSH).decode("ascii")
    return {"private": private, "public": public + " dstack_job\n"}


def _run_key_by_ssh_keygen():
    folder = tempfile.mkdtemp(prefix="gpufleet-runkey-")
    try:
        path = os.path.join(folder, "dstack_job")
        proc = subprocess.run(
            ["ssh-keygen", "-q", "-t", "rsa", "-b", "2048", "-N", "", "-C", "dstack_job",
             "-f", path], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, check=False)
        if proc.returncode != 0:
            raise RunError("ssh-keygen failed on the controller: %s"
                           % proc.stdout.decode("utf-8", "replace").strip())
        with open(path) as private, open(path + ".pub") as public:
            return {"private": private.read(), "public": public.read()}
    except OSError as exc:
        raise RunError("cannot make the run's SSH key: ssh-keygen is needed on the controller "
                       "(install openssh-client, or the cryptography package): %s" % exc) from exc
    finally:
        shutil.rmtree(folder, ignore_errors=True)


class _Background(object):
    """``function(*args)`` in a thread of its own, started at once; ``result()`` waits for it
    (and raises what it raised)."""

    def __init__(self, function, *args):
        pool = ThreadPoolExecutor(max_workers=1)
        self._future = pool.submit(function, *args)
        pool.shutdown(wait=False)

    def result(self):
        return self._future.result()


def _inline_files(jobs, files_data=None):
    """Controller files travel with the start requests, base64-encoded (a folder as its files,
    repos.files); every job gets the same files, so each is read once (``files_data``: contents
    read earlier, by path, for a run submitted from its queue entry)."""
    read = dict(files_data or {})

    def inline(rel, spec):
        if "local_path" not in spec:
            return {rel: spec}
        path = spec["local_path"]
        if path not in read:
            try:
                read[path] = shipped_files.read(path)
            except shipped_files.FilesError as exc:
                raise RunError("files: %s" % exc) from exc
        return shipped_files.job_files(rel, read[path])

    out = []
    for job in jobs:
        files = {}
        for rel, spec in job["files"].items():
            files.update(inline(rel, spec))
        out.append(dict(job, files=files))
    return out


class NeedsInstances(RunError):
    """The run fits only once a backend fleet grows (tasks.growth): ``create`` says which fleet,
    by how many instances, and ``plan`` is the placement on the grown fleet."""

    def __init__(self, create, plan):
        super(NeedsInstances, self).__init__(
            "fleet %s needs %d more instance%s for this run" % (
                create["fleet"], create["instances"], "" if create["instances"] == 1 else "s"))
        self.create = create
        self.plan = plan


class Submission(object):
    """Everything about one submission of a run that the loop needs afterwards."""

    def __init__(self, number, jobs, nodes, placed):
        self.number = number
        self.jobs = jobs
        self.nodes = nodes
        self.placement = placed


class Runner(object):
    """Submit a task and carry it to its end (or only start it, ``wait=False``)."""

    def __init__(self, config, fleets, root=None, secrets=None, environ=None, docker=None,
                 emit=None, image_source="auto", follow_logs=False, poll=1.0, clock=time.time,
                 sleep=time.sleep, run_args=(), rng=random, local_image=None,
                 config_dir=None, array=None, code_=None, files_data=None, create=False,
                 grower=None, grow_first=False):
        # What the plan shows (a dev environment as one), before devenv.runnable.
        self.shown_config = config
        # A dev environment runs as a one-node task with dstack's commands (tasks.devenv).
        config = devenv.runnable(config)
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
        self._may_grow = create
        self._judged_at = None
        self._instances = {}
        self._described = set()
        # Hosts whose backend said their instance is gone (tasks.interruption.gone): the watch
        # and the resubmission no longer ask them.
        self.gone_hosts = set()
        refused = support.refusals(config)   # the verdict gpufleet validate reports too
        if refused:
            raise RunError("; ".join(str(p) for p in refused))
        self.nodes = nodes_of(fleets, root)
        self._clients = None
        self._regions = {}
        self.submissions = []
        self.leftovers = []
        self._claimed = {}   # the answers of the last granted claims, by host
        # Hosts the last survey took as free without asking them (tasks.runindex.partial):
        # the index names them for this run's name alone. Once placed, only those the run is
        # placed on stay (_place asks the others); their starts clear the name's earlier run.
        self._assumed = set()
        # How the caller lets runs that wait go first (tasks.entry), or None: then a claim on
        # such a host also reads its queue, and when it holds runs that wait, this is called
        # before the run is placed again.
        self.queue_first = None
        self._late_queues = {}
        self.surveyed_whole = True   # whether the last survey asked every host
        # Check mode: every host is asked (a plan must not take a host it did not ask as free)
        # and nothing is written to the hosts.
        self.read_only = False
        self.env = resolve_env(config, self.secrets, self.environ)
        # A job array's runs share one Code (one pack of the tree); a lone run owns its own.
        self._owns_code = code_ is None
        self.code = code_ if code_ is not None else (None if not config.get("repos") else (
            code.Code(config["repos"][0], config_dir, self.environ)))
        self._key = None
        # Say the first placement as a "plan" event (what gpufleet apply -y prints instead
        # of asking a planning play first): entry.submit sets it for show_plan.
        self.announce_plan = False

    def make_key_early(self):
        """Start making the run's SSH key now (ssh-keygen takes a moment), so that it is ready
        by the time the run is placed: entry.submit calls it before the first look at the
        hosts. Without it, the key is made while the image is brought."""
        if self._key is None:
            self._key = _Background(run_key)

    def _take_key(self):
        """The run's key (a new one for each submission: a resubmission gets a fresh key)."""
        maker, self._key = self._key or _Background(run_key), None
        return maker

    def _place(self, whole=False):
        containers, claims, _queues, errors = self._survey(whole)
        self._surveyed = (containers, claims)
        self._own_leftovers(containers)
        placed = self._placement(containers, claims, errors)
        # Hosts taken as free without asking them: those placed on check in their claims that
        # no run of this name is alive there, and clear what it left when they start; the
        # others are asked now, before any claim clears anything.
        unplaced = sorted(self._assumed - set(job["host"] for job in placed["jobs"]))
        self._late_queues = {}
        if unplaced:
            more = survey_with_queues(dict((h, self.nodes[h]) for h in unplaced))
            self._assumed -= set(unplaced)
            self._late_queues = more[2]
            containers, claims = runindex.merge((containers, claims, {}, {}), more)[:2]
            self._surveyed = (containers, claims)
            self._own_leftovers(containers)
        return placed

    def _own_leftovers(self, containers):
        """Note the hosts where this run's name left containers, or refuse the run when one of
        them is alive (dstack refuses a run name that is running)."""
        self.leftovers = sorted(h for h, entries in containers.items()
                                if any(c["labels"].get(RUN_LABEL) == self.name for c in entries))
        for host, entries in containers.items():
            mine = [c for c in entries if c["labels"].get(RUN_LABEL) == self.name]
            if any(lifecycle.holds_host(c) for c in mine):
                raise RunError(
                    "run %s is already running (on %s): stop it first (gpufleet stop %s), or "
                    "give this task another name" % (self.name, host, self.name))

    def _placement(self, containers, claims, errors):
        fleets = []
        for fleet in self.fleets:
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
        if not self._may_grow:
            return placement.place(self._steered(), fleets, facts, busy)
        placed = growth.place(self._steered(), fleets, facts, busy, offer_for=self._offer_for,
                              run=self.name)
        if placed.get("create"):
            raise NeedsInstances(placed["create"], placed)
        return placed

    def survey(self, whole=False):
        """What the next placement will use (see _survey); ``reuse_survey`` hands it back.
        ``surveyed_whole`` then says whether every host was asked."""
        return self._survey(whole)

    def reuse_survey(self, answer):
        """Let the first placement use ``answer`` (a survey nothing acted on since) instead of
        asking every host again."""
        self._fresh_survey = answer

    def _survey(self, whole=False):
        """The hosts' containers, claims and queues: of the hosts the run index says this
        placement needs when it can be trusted (tasks.runindex), else of every host (``whole``
        asks for that). In a whole survey, hosts whose cached GPU health is older than
        tasks.health.MAX_AGE read it again in the same request, and placement uses what they
        say (the facts cache keeps it); the run index is rewritten from it meanwhile."""
        fresh, self._fresh_survey = getattr(self, "_fresh_survey", None), None
        if fresh is not None:
            return fresh
        root = state.state_dir(self.root)
        stale = health.due(self.fleets, root)
        self.surveyed_whole = True
        self._assumed = set()
        if not whole and not stale and not self.read_only:
            assumed = set()
            answer = runindex.partial(self.nodes, self.fleets, self.name, survey_with_queues,
                                      assumed=assumed)
            if answer is not None:
                self.surveyed_whole = False
                self._assumed = assumed
                return answer
        raw = {}
        begun = time.monotonic()
        answer = survey_with_queues(self.nodes, probe=[h for h in stale if h in self.nodes],
                                    health=raw)
        if raw:
            changes = health.judge_answers(raw)
            health.store(root, dict((h, i["fleet"]) for h, i in stale.items()), changes)
            for fleet in self.fleets:
                facts = fleet.get("facts") or {}
                for host, keys in changes.items():
                    if host in facts:
                        facts[host] = dict(facts[host], **keys)
        if not self.read_only:
            self._reindex(answer, time.monotonic() - begun)
        return answer

    def _reindex(self, answer, age):
        """Rewrite the run index of every fleet from a whole survey that began ``age`` seconds
        ago, while the placement goes on (``_settle`` waits for it, REINDEX_TIMEOUT at most);
        a record host that does not answer keeps its index, which then ages until it is not
        trusted."""
        requests = runindex.reindex_requests(self.fleets, self.nodes, answer, age)
        self._settle()
        if requests:
            self._reindexing = _Background(parallel, sorted(requests), lambda h: self.nodes[
                h].call("reindex", requests[h], timeout=REINDEX_TIMEOUT))

    def _settle(self):
        pending, self._reindexing = getattr(self, "_reindexing", None), None
        if pending is not None:
            pending.result()   # parallel keeps each host's failure in its answer

    def _refresh_quietly(self):
        """``_refresh_fleets``, keeping the fleets as they were when they cannot be described
        now: an instance that was stopped may run again, one that ran may be gone."""
        try:
            self._refresh_fleets()
        except RunError:
            pass

    def _refresh_fleets(self):
        """The fleets as their backends tell them now (after one grew, or lost an instance);
        a fleet that cannot be described again stays as it was."""
        fresh = dict((f["name"], f) for f in collect_fleets(
            [f["file"] for f in self.fleets if f.get("file")], self.docker, self.root))
        self.fleets = [fresh.get(f["name"], f) for f in self.fleets]
        self.nodes = nodes_of(self.fleets, self.root)

    def _offer_for(self, fleet):
        """The cheapest catalog offer for a new instance of a cloud ``fleet``, or None: in the
        regions the fleet launches in (fleets.cloud.offer_regions, the backend settings')."""
        from ..offers import select

        backend = growth._backend(fleet)
        try:
            root = state.state_dir(self.root)
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

    def _place_and_claim(self, number):
        """Place submission ``number`` and claim its hosts (tasks.claiming); a placement that
        lost a host to another submitter meanwhile is made again."""
        run = {"name": self.name, "id": self.run_id}
        refused = None
        for attempt in range(CLAIM_ATTEMPTS):
            if attempt:
                self.sleep(self.rng.uniform(0.05, 0.4) * attempt)
            # The first try trusts the run index; after a refused claim, every host is asked.
            placed = self._place(whole=attempt > 0)
            waiting = self._queues_wait(self._late_queues)
            if waiting is not None:
                refused = waiting
                continue
            noting = runindex.note_request(self.fleets, placed, self.name, self._surveyed)
            if noting is not None:
                # Noted before any container exists, while the hosts are claimed.
                noting = _Background(self.nodes[noting[0]].call, "note", noting[1])
            # A granted claim also clears an earlier run of this name off its host and says
            # whether the host has the image (tasks.booking): no requests of their own.
            try:
                image = self.image_and_python(placed)[0]
            except PlanError as exc:
                raise RunError(str(exc)) from exc
            # Every claimed host clears an earlier run of this name, not only those the
            # survey saw it on: a look at part of the hosts may have missed one. When hosts
            # were taken as free without asking them, that waits for the starts: only once
            # every claim is granted is it known that no run of this name is alive on them.
            # Such a host also says whether its queue holds runs that wait (queue_first).
            assumed = sorted(self._assumed)   # hosts of this placement (see _place)
            extras = dict((job["host"], {"image": image, "replace": not assumed})
                          for job in placed["jobs"])
            if self.queue_first is not None:
                for host in assumed:
                    extras[host]["queue"] = True
            self._claimed = {}
            try:
                claiming.claim_hosts(self.nodes, placed, run, number, by=self.by,
                                     extras=extras, answers=self._claimed)
            except claiming.ClaimRefused as exc:
                refused = exc
                continue
            except NodeError as exc:
                # A host that stopped answering meanwhile: the next survey leaves it out.
                refused = claiming.ClaimRefused(exc.host, exc.detail)
                continue
            finally:
                self._settle()
            waiting = self._queues_wait(dict((h, self._claimed[h].get("queue") or [])
                                             for h in assumed if h in self._claimed),
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
                        claiming.release_hosts(self.nodes, [j["host"] for j in placed["jobs"]],
                                               run)
                        refused = claiming.ClaimRefused(exc.host, exc.detail)
                        continue
                    # Placed on a look at every host: the run goes on, and the index misses it
                    # until a whole survey rewrites it (docs/concepts.md, the run index).
            return placed
        raise placement.NoHostFits(
            "no capacity for task %s: its hosts were taken by other runs while it was placed "
            "(last: %s); submit it again, or add retry: {on_events: [no-capacity]}"
            % (self.name, refused), [str(refused)])

    def _queues_wait(self, queues, claimed=None, noting=None):
        """When ``queues`` (of hosts the first look took as free without asking them) hold
        runs that wait and the caller lets them go first (``queue_first``), let them, as they
        would have gone had the first look seen them: the hosts of ``claimed`` (a placement
        whose claims were granted) are let go first. Then the ClaimRefused that makes the
        next try look at every host; else None."""
        if self.queue_first is None or not runindex.waiting(queues):
            return None
        if claimed is not None:
            claiming.release_hosts(self.nodes, [j["host"] for j in claimed["jobs"]],
                                   {"name": self.name, "id": self.run_id})
        if noting is not None:
            try:
                noting.result()
            except NodeError:
                pass   # a note only adds hosts where the run may be: harmless
        self.queue_first()
        return claiming.ClaimRefused(min(h for h in queues if queues[h]),
                                     "runs wait in its queue")

    def _announce(self, placed):
        if self.announce_plan:
            self.emit({"kind": "plan", "plan": placed, "config": self.shown_config})

    def _volume_clients(self):
        """Volume clients of the backends the fleets' hosts are on, made once."""
        if self._clients is None:
            settings = state.backend_settings(state.state_dir(self.root))
            backends = set(inst.get("backend") for fleet in self.fleets
                           for inst in fleet.get("instances") or [])
            self._clients = dict((b, base.client(b, settings))
                                 for b in sorted(backends) if b in volumes.CLOUD)
            root = state.state_dir(self.root)
            self._regions = dict((b, fleet_cloud.regions({}, settings, b,
                                                         catalog.directory(root)))
                                 for b in self._clients)
            if "local" in backends:   # the local volume pool (backends/local_volumes.py)
                self._clients["local"] = local_volumes.Pool(self.docker or Docker())
                self._regions["local"] = [local_volumes.REGION]
        return self._clients

    def _steered(self):
        """The config, narrowed to where its first job's network volumes are."""
        run = {"name": self.name}
        if not volumes.network_names(self.config, {"job_num": 0}, run):
            return self.config
        try:
            clients = self._volume_clients()
            if not clients:
                return self.config   # no cloud host: attaching says why
            where = volumes.locate(self.config, run, clients, self._regions)
        except (volumes.VolumeError, BackendError, fleet_cloud.CloudError, state.StateError,
                PlanError) as exc:
            raise RunError(str(exc)) from exc
        return volumes.steer(self.config, where)

    def fleet_env(self, name):
        """The placed fleet's ``env`` (SSH fleets), a bare name filled from the controller's
        environment as dstack's CLI does; PlanError for a bare name that is not set."""
        fleet = next((f for f in self.fleets if f.get("name") == name), None) or {}
        out = {}
        for key, value in sorted((fleet.get("env") or {}).items()):
            if value is None:
                if key not in self.environ:
                    raise RunError("fleet %s: env.%s has no value and is not set in the "
                                   "controller's environment; set it there or give it a value "
                                   "in the fleet file" % (name, key))
                value = self.environ[key]
            out[key] = value
        return out

    def image_and_python(self, placed):
        """The image the placed run uses and dstack's venv setup in it (tasks.python_env); on
        the local task image, a Python it lacks is fetched by the job (PlanError only where no
        default can be had)."""
        fleet_backend = placed["jobs"][0].get("backend")
        image = self.config.get("image")
        if not image:
            image = self.local_image if (fleet_backend == "local" and self.local_image) else (
                rankplan.default_image(self.config))
        available = task_image.PYTHON_VERSIONS if (
            self.local_image and image == self.local_image) else None
        return image, python_env.choose(self.config, available)

    def _prepare(self, number, placed):
        try:
            image, python_setup = self.image_and_python(placed)
        except PlanError as exc:
            raise RunError(str(exc)) from exc
        hosts = [job["host"] for job in placed["jobs"]]
        nodes = dict((h, self.nodes[h]) for h in hosts)
        # A finished run of the same name is replaced, as dstack does on apply.
        # The run key is made meanwhile (ssh-keygen takes a moment): the nodes log in to each
        # other with it, and gpufleet attach to any of them.
        key_maker = self._take_key()
        # What an earlier run of this name left on hosts this one does not use goes too (those
        # it uses were cleared by their claims, or are by their starts), while the image is
        # brought.
        elsewhere = [h for h in self.leftovers if h not in hosts]
        clearing = None
        if elsewhere:
            clearing = _Background(parallel, elsewhere, lambda h: self.nodes[h].call(
                "remove", {"run": self.name, "keep": self.run_id}))
        auth = registry_credentials(self.config, self.env, self.secrets)
        for job in placed["jobs"]:
            self.emit({"kind": "job", "job_num": job["job_num"], "host": job["host"],
                       "status": JobStatus.PULLING.value, "reason": None, "exit_code": None})
        source = self.image_source
        if image == self.local_image and source == "auto":
            source = "push"  # built on this controller: no registry has it
        shipping = repo = None
        if self.code is not None:
            # The code travels while the image is brought: both go over the same connections.
            shipping = _Background(self.code.ship, nodes, sorted(set(hosts)), self.emit,
                                   self.secrets)
        known = dict((h, a.get("image")) for h, a in self._claimed.items())
        try:
            info = ensure_image(image, nodes, sorted(set(hosts)), docker=self.docker,
                                source=source, auth=auth, emit=self.emit, known=known)
        except RunError as exc:
            self._record_setup_failure(number, placed, str(exc))
            raise
        finally:
            if shipping is not None:
                repo = shipping.result()
            if clearing is not None:
                clearing.result()   # at best, as before: a host that did not answer keeps them
        first = info[hosts[0]]
        image_cmd = None
        if first.get("entrypoint") or first.get("cmd"):
            image_cmd = list(first.get("entrypoint") or []) + list(first.get("cmd") or [])
        key = key_maker.result()
        run = {"name": self.name, "id": self.run_id, "submission": number,
               "submitted_at": self.submitted_at, "array": self.array}
        self._attach_volumes(placed, run, nodes)
        try:
            jobs = rankplan.build_jobs(self.config, placed, run, secrets=self.secrets,
                                       environ=self.environ, ssh_key=key,
                                       run_args=self.run_args, image=image,
                                       image_cmd=image_cmd, config_dir=self.config_dir,
                                       repo=repo,
                                       python_setup=python_setup,
                                       fleet_env=self.fleet_env(placed["fleet"]))
        except (PlanError, volumes.VolumeError) as exc:
            raise RunError(str(exc)) from exc
        run = {"name": self.name, "id": self.run_id}
        for job, where in zip(jobs, placed["jobs"]):
            # The start renews the claim under the host's lock (tasks.booking), so a claim
            # that lapsed during a long pull is only used if nobody took the host meanwhile.
            job["claim"] = claiming.claim_of(where, run, number, by=self.by)
            if self._assumed:   # the claims cleared nothing: each start clears its host
                job["claim"]["replace"] = True
        return Submission(number, _inline_files(jobs, self.files_data), nodes, placed)

    def _record_setup_failure(self, number, placed, message):
        """Leave a run whose image could not be brought on its hosts as a failed run, as
        dstack's ps shows one (its jobs' folders, with the error: tasks.nodeside's
        ``record_failure``), so that ps, logs and the next apply of the name see it."""
        from .container import container_name, labels_of

        run = {"name": self.name, "id": self.run_id, "submission": number,
               "submitted_at": self.submitted_at, "array": self.array}

        jobs = dict((j["job_num"], j) for j in placed["jobs"])

        def record(num):
            job = jobs[num]
            if self._assumed:
                # The earlier run of the name was to go with the start, which will not come:
                # it goes now, so that this failure is what ps shows of the name.
                self.nodes[job["host"]].call("remove", {"run": self.name, "keep": self.run_id})
            return self.nodes[job["host"]].call("record_failure", {
                "run": self.name, "job_num": job["job_num"],
                "container": container_name(self.name, job["job_num"]), "error": message,
                "labels": labels_of(self.config, run, placed["jobs"], job)})

        parallel(sorted(jobs), record)   # at best: the run failed whatever this gives

    def _attach_volumes(self, placed, run, nodes):
        """Attach and mount the jobs' network volumes on their hosts (volumes/attach.py)."""
        try:
            if not any(volumes.network_names(self.config, job, run) for job in placed["jobs"]):
                return
            done = volumes.attach_and_mount(self.config, placed, run, nodes,
                                            self._volume_clients())
        except (volumes.VolumeError, BackendError, fleet_cloud.CloudError, state.StateError,
                NodeError, PlanError) as exc:
            raise RunError(str(exc)) from exc
        for host, answers in done.items():
            for answer in answers:
                self.emit({"kind": "run", "status": RunStatus.PENDING.value,
                           "message": "volume %s mounted on %s%s" % (
                               answer["name"], host,
                               " (formatted: it was blank)" if answer.get("formatted") else "")})

    def policy(self):
        return {"startup_order": self.config.get("startup_order"),
                "stop_criteria": self.config.get("stop_criteria"),
                "retry": self.config.get("retry")}

    def submit(self, number=0, waited_since=None, wait_for_capacity=True):
        """Place and prepare submission ``number``; wait for capacity when retry allows it
        (and ``wait_for_capacity``: otherwise NoHostFits at once)."""
        started = self.clock() if waited_since is None else waited_since
        attempt = 0
        here = self.grower is not None and (number > 0 or self.grow_first)
        self._may_grow = self.create or here
        grown = False
        while True:
            try:
                placed = self._place_and_claim(number)
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
                self._refresh_quietly()   # each try asks the backends again
        if number == 0:
            self._announce(placed)
        try:
            submission = self._prepare(number, placed)
        except BaseException:
            claiming.release_hosts(self.nodes, [j["host"] for j in placed["jobs"]],
                                   {"name": self.name, "id": self.run_id})
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
            "fleet": last.placement["fleet"] if last else None,
            "status": decision.status if decision else RunStatus.SUBMITTED.value,
            "reason": decision.reason if decision else None,
            "message": message,
            "submissions": len(self.submissions),
            "jobs": jobs,
        }

    def judge(self, host, silent_for):
        """What the backend says of a job's host that does not answer (tasks.interruption):
        the fleets are described again at most every JUDGE_EVERY seconds."""
        from . import interruption

        now = self.clock()
        if self._judged_at is None or now - self._judged_at >= JUDGE_EVERY:
            self._judged_at = now
            try:
                fresh = collect_fleets([f["file"] for f in self.fleets if f.get("file")],
                                       self.docker, self.root)
                self._instances = interruption.instance_map(fresh)
                self._described = set(f["name"] for f in fresh)
            except RunError:
                self._instances = self._instances or interruption.instance_map(self.fleets)
        record = self._instances.get(host)
        fleet = next((f["name"] for f in self.fleets
                      if any(i["name"] == host for i in f.get("instances") or [])), None)
        if record is None and fleet not in self._described:
            # Its fleet could not be described now: no verdict of "gone" from that.
            record = {"backend": "ssh"}
        if interruption.gone(record):
            self.gone_hosts.add(host)
        return interruption.judge(host, record, silent_for)

    def _wait_ended(self, host):
        """The result that ends an attached run's wait in the queue, or None to wait on."""
        from . import queue
        from .container import RUN_ID_LABEL

        containers, _claims, queues, errors = survey_with_queues(self.nodes)
        found = [e for _h, e in queue.entries_of(queues) if e.get("run_id") == self.run_id]
        if not found and host in errors:
            return None   # the queue host missed this look; its entry is still there
        entry = found[0] if found else {}
        if entry.get("state") == queue.PENDING:
            return None
        if entry.get("state") in (queue.FAILED, queue.TERMINATED):
            return dict(self.result(), status=RunStatus.FAILED.value if entry.get(
                "state") == queue.FAILED else RunStatus.TERMINATED.value,
                reason=entry.get("reason") or lifecycle.TERMINATED_BY_USER,
                message=entry.get("message"))
        started = any(c["labels"].get(RUN_ID_LABEL) == self.run_id
                      for found_on in containers.values() for c in found_on)
        if started:
            return dict(self.result(), status=RunStatus.SUBMITTED.value, message=(
                "another controller's pass over the queue started it; gpufleet ps and "
                "gpufleet logs -f %s follow it" % self.name))
        return dict(self.result(), status=RunStatus.TERMINATED.value,
                    reason=lifecycle.TERMINATED_BY_USER,
                    message="its queue entry was removed before it started")

    def keeps_entry(self):
        from . import queue

        return queue.keeps_entry(self.config)

    def _keep_entry(self, submission):
        from . import queue

        _containers, _claims, _queues, errors = survey_with_queues(self.nodes)
        try:
            queue.enqueue(self, errors, reason=None, number=submission.number,
                          state=queue.ACTIVE,
                          hosts=sorted(set(j["host"] for j in submission.jobs)))
        except RunError as exc:
            self.emit({"kind": "info", "message": "retry after this command leaves is off: %s"
                       % exc})

    def launch(self, submission, watch=None):
        """Detached: stay until every job of ``submission`` is started (startup_order needs
        someone to start the later ones), then leave the run to its containers."""
        if watch is None:
            watch = Watch(submission.jobs, submission.nodes, self.policy(), self.emit,
                          clock=self.clock, sleep=self.sleep, poll=self.poll)
        while True:
            decision = watch.run_once()
            waiting = [s for s in watch.statuses.values() if s[0] == JobStatus.SUBMITTED]
            if decision.final or decision.resubmit or not waiting:
                return self.result(decision, watch.statuses)
            self.sleep(self.poll)

    def run(self, wait=True, stop_event=None):
        """Submit, then (``wait``) watch until the run ends, resubmitting under ``retry``."""
        try:
            return self._run(wait, stop_event)
        finally:
            self.close_code()

    def close_code(self):
        if self.code is not None and self._owns_code:
            self.code.close()

    def _queued(self, exc, wait, stop_event):
        """No capacity now, and retry lets the run wait: it becomes an entry of the queue
        (tasks.queue). Detached, that is the result; attached, this process drives the queue
        until the run's turn comes (returns its submission) or its wait ends (a result)."""
        from . import queue

        _containers, _claims, queues, errors = survey_with_queues(self.nodes)
        host = queue.enqueue(self, errors, reason=str(exc))
        mine = {"run": self.name, "state": queue.PENDING, "submitted_epoch": self.submitted_epoch,
                "priority": int(self.config.get("priority") or 0)}
        others = [item for item in queue.entries_of(queues) if item[1].get("run") != self.name]
        place = queue.positions(others + [(host, mine)]).get(self.name)
        self.emit({"kind": "run", "status": RunStatus.PENDING.value,
                   "message": "waiting for capacity in the queue (kept on %s): %s"
                   % (host, exc)})
        if not wait:
            return dict(self.result(), status=RunStatus.PENDING.value, reason=None,
                        message="waiting for capacity (queue position %s, kept on %s)"
                        % (place or "last", host), queued_on=host), None
        return self._wait_in_queue(host, stop_event)

    def _wait_in_queue(self, host, stop_event):
        """Attached, with the run's pending entry on ``host``: make passes over the queue
        (NO_CAPACITY_BACKOFF apart) until the run's turn comes (returns ``(None, its
        submission)``) or its wait ends (``(result, None)``). Before each pass the backends
        and the hosts are asked again (a stopped instance may run again), so the attached view
        and gpufleet ps read the same entry and the same fleets. A Ctrl-C (KeyboardInterrupt)
        leaves the entry: the run stays pending, and any later pass starts it."""
        from . import queue

        attempt = 0
        while True:
            if stop_event is not None and stop_event.is_set():
                stopped = {"state": "terminated", "reason": lifecycle.TERMINATED_BY_USER}
                self.nodes[host].call("update", {"run": self.name, "run_id": self.run_id,
                                                 "changes": stopped})
                return dict(self.result(), status=RunStatus.TERMINATED.value,
                            reason=lifecycle.TERMINATED_BY_USER), None
            self.sleep(NO_CAPACITY_BACKOFF[min(attempt, len(NO_CAPACITY_BACKOFF) - 1)])
            attempt += 1
            self._refresh_quietly()
            if host not in self.nodes:
                # The queue host's instance is gone, and its entry with it: what ps says.
                return dict(self.result(), status=RunStatus.FAILED.value,
                            reason=lifecycle.NO_CAPACITY,
                            message="the host that kept its queue entry (%s) is gone" % host), None
            report = queue.QueuePass(self.fleets, own=self, root=self.root, docker=self.docker,
                                     poll=self.poll, sleep=self.sleep, clock=self.clock,
                                     by=self.by).run()
            if report["own"] is not None:
                return None, report["own"]
            ended = self._wait_ended(host)
            if ended is not None:
                return ended, None

    def _resubmit(self, number, since, stop_event):
        """Submit the run again (retry after an error or interruption), as ``(result,
        submission)``. Without capacity now, and with retry on no-capacity, the run waits as
        dstack's does: pending, in the queue (an entry on its fleet's queue host, which ps
        reads), with the fleets and hosts asked again before each try."""
        from . import queue

        try:
            return None, self.submit(number, waited_since=since, wait_for_capacity=False)
        except placement.NoHostFits as exc:
            if not lifecycle.may_retry(self.config.get("retry"), lifecycle.EVENT_NO_CAPACITY,
                                       self.clock(), since):
                raise
            try:
                errors = survey_with_queues(self.nodes)[3]
                host = queue.enqueue(self, errors, reason=str(exc), number=number,
                                     retry_since=since)
            except RunError as err:
                # No host to keep the entry on: wait here, asking again on every try.
                self.emit({"kind": "info", "message": "%s; waiting in this command" % err})
                return None, self.submit(number, waited_since=since)
            self.emit({"kind": "run", "status": RunStatus.PENDING.value,
                       "message": "waiting for capacity in the queue (kept on %s): %s"
                       % (host, exc)})
            return self._wait_in_queue(host, stop_event)

    def _run(self, wait, stop_event):
        try:
            submission = self.submit(0, wait_for_capacity=False)
        except placement.NoHostFits as exc:
            never = growth.never_fits(self.config, self.fleets)
            if never or not lifecycle.may_retry(self.config.get("retry"),
                                                lifecycle.EVENT_NO_CAPACITY, self.clock(),
                                                self.clock()):
                return dict(self.result(), status=RunStatus.FAILED.value,
                            reason=lifecycle.NO_CAPACITY, message="%s%s" % (
                                exc, (" (%s)" % never) if never else ""))
            result, submission = self._queued(exc, wait, stop_event)
            if result is not None:
                return result
        if not wait and self.keeps_entry():
            # Detached with retry on error or interruption: an entry lets a later pass submit
            # it again (tasks.queue); a run placed from the queue already has one.
            self._keep_entry(submission)
        while True:
            watch = Watch(submission.jobs, submission.nodes, self.policy(), self.emit,
                          clock=self.clock, sleep=self.sleep, poll=self.poll,
                          follow_logs=self.follow_logs, stop_event=stop_event,
                          judge=self.judge, gone=self.gone_hosts)
            if not wait:
                return self.launch(submission, watch)
            decision = watch.watch()
            if not decision.resubmit:
                return self.result(decision, watch.statuses, failure_message(
                    decision, submission))
            if stop_event is not None and stop_event.is_set():
                # The user's stop came as the run failed by itself (nothing was left for the
                # stop to end): the run ends stopped, as asked, and is not submitted again.
                return dict(self.result(decision, watch.statuses, failure_message(
                    decision, submission)), status=RunStatus.TERMINATED.value,
                    reason=lifecycle.TERMINATED_BY_USER)
            self.emit({"kind": "run", "status": RunStatus.PENDING.value,
                       "message": "resubmitting all jobs (retry on %s)"
                       % lifecycle.retry_event(decision.failed_job[1])})
            # A host whose instance is gone has nothing to remove, and would only make the
            # request wait out SSH's connect timeout.
            parallel(sorted(set(submission.nodes) - self.gone_hosts),
                     lambda h: submission.nodes[h].call("remove", {"run": self.name}))
            # The fleets are described again below: a name that comes back (a fleet that grew
            # anew) is a new instance, asked like any other.
            self.gone_hosts.clear()
            self._refresh_quietly()   # an instance may have gone (interruption)
            try:
                ended, submission = self._resubmit(submission.number + 1, self.clock(),
                                                   stop_event)
            except placement.NoHostFits as exc:
                return dict(self.result(decision, watch.statuses), status=RunStatus.FAILED.value,
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
    if reason == lifecycle.EXECUTOR_ERROR:
        return ("job %d on %s failed before its command started (exit code %s)"
                % (num, job["host"], code))
    if reason == lifecycle.INSTANCE_UNREACHABLE:
        return "job %d: host %s became unreachable" % (num, job["host"])
    if reason == lifecycle.INTERRUPTED_BY_NO_CAPACITY:
        return "job %d: host %s was interrupted (the instance went away)" % (num, job["host"])
    return "job %d on %s exited with code %s" % (num, job["host"], code)


def log_tail(node, job, lines=20):
    """The last ``lines`` lines of a job's output, as its host keeps it (tasks.joblogs)."""
    from . import joblogs

    record = {"name": job["run"], "jobs": [dict(job, host=node.name)]}
    try:
        found = [line for _num, line in joblogs.lines({node.name: node}, record, tail=lines)]
    except joblogs.LogsError:
        return []
    return found[-lines:]
