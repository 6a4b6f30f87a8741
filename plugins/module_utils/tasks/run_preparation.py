# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Preparing a placed submission of a run on its claimed hosts: the second of the Runner's three
parts (tasks.runs; after tasks.run_placement, before tasks.run_supervision).

The run's SSH key is made, the image is brought to the hosts (tasks.images) while the run's
code travels (tasks.code), network volumes are attached and mounted (volumes.attach), and each
job's start request is built from the rank plan (tasks.rankplan). It takes the placement's
record (tasks.run_placement.Claimed) and gives a ``Submission``.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile

from ..backends import task_image
from ..backends.errors import BackendError
from ..fleets import cloud as fleet_cloud
from ..fleets import state
from ..repos import files as shipped_files
from ..volumes import attach as volumes
from . import claiming, python_env, rankplan
from .lifecycle import JobStatus, RunStatus
from .environment import registry_credentials
from .errors import PlanError, RunError
from .images import ensure_image
from .ssh import Background, NodeError, parallel


def run_key():
    """One RSA key pair per run for SSH between its containers
    (docs/reference/dstack-runtime.md#ssh-between-nodes), 2048 bits as dstack's server makes it
    (its utils.crypto).

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


# Where a service is published: not part of a version of its replicas, so that a service
# whose proxy host was lost is published elsewhere without replacing them (services.submit).
WHERE_KEYS = ("proxy_host", "proxy_address", "proxy_port", "url", "model_url")


def config_digest(config, image, repo=None):
    """The SHA-256 of what makes one version of a run: its normalized configuration, the image
    it resolved to and its code's archive (a new commit or diff is a new version). A
    service's replica count is not part of it: scaling a service is no new version of its
    replicas (services.rolling); nor is where it is published (WHERE_KEYS)."""
    import hashlib
    import json

    if isinstance(config.get("service"), dict):
        service = dict((k, v) for k, v in config["service"].items()
                       if k != "scaling" and k not in WHERE_KEYS)
        config = dict(config, nodes=None, replicas=None, scaling=None,
                      service=dict(service, replicas=None))
    text = json.dumps({"config": config, "image": image,
                       "repo": (repo or {}).get("archive")}, sort_keys=True, default=str)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def _versions(config, image, repo):
    """``version(group)``: ``(digest, resources)`` of a job of ``group`` (None without
    groups). A service's replica of a replica group is a version of its own group only: a
    change to another group does not replace it (services.rolling)."""
    cache = {}

    def version(group):
        if group not in cache:
            own = config
            resources = config.get("resources")
            if group is not None and config.get("groups") and isinstance(
                    config.get("service"), dict):
                mine = [g for g in config["groups"] if str(g.get("name")) == str(group)]
                own = dict(config, groups=mine)
                resources = mine[0].get("resources") if mine else resources
            cache[group] = (config_digest(own, image, repo), resources)
        return cache[group]
    return version


class Submission(object):
    """Everything about one submission of a run that the loop needs afterwards."""

    def __init__(self, number, jobs, nodes, placed):
        self.number = number
        self.jobs = jobs
        self.nodes = nodes
        self.placement = placed


class RunPreparation(object):
    """What a placed submission needs on its hosts before its jobs start. ``run`` is the Runner
    it works for (config, name, run id, secrets, environment, options)."""

    def __init__(self, run):
        self.run = run
        self.key = None

    def make_key_early(self):
        """Start making the run's SSH key now (ssh-keygen takes a moment), so that it is ready
        by the time the run is placed: actions.submit calls it before the first look at the
        hosts. Without it, the key is made while the image is brought."""
        if self.key is None:
            self.key = Background(run_key)

    def _take_key(self):
        """The run's key (a new one for each submission: a resubmission gets a fresh key)."""
        maker, self.key = self.key or Background(run_key), None
        return maker

    def fleet_env(self, name):
        """The placed fleet's ``env`` (SSH fleets), a bare name filled from the controller's
        environment as dstack's CLI does; PlanError for a bare name that is not set."""
        fleet = next((f for f in self.run.fleets if f.get("name") == name), None) or {}
        out = {}
        for key, value in sorted((fleet.get("env") or {}).items()):
            if value is None:
                if key not in self.run.environ:
                    raise RunError("fleet %s: env.%s has no value and is not set in the "
                                   "controller's environment; set it there or give it a value "
                                   "in the fleet file" % (name, key))
                value = self.run.environ[key]
            out[key] = value
        return out

    def image_and_python(self, placed):
        """The image the placed run uses and dstack's venv setup in it (tasks.python_env); on
        the local task image, a Python it lacks is fetched by the job (PlanError only where no
        default can be had)."""
        fleet_backend = placed["jobs"][0].get("backend")
        image = self.run.config.get("image")
        local_image = self.run.local_image
        if not image:
            image = local_image if (fleet_backend == "local" and local_image) else (
                rankplan.default_image(self.run.config))
        available = task_image.PYTHON_VERSIONS if (
            self.run.local_image and image == self.run.local_image) else None
        return image, python_env.choose(self.run.config, available)

    def prepare(self, number, claimed):
        placed = claimed.placed
        try:
            image, python_setup = self.image_and_python(placed)
        except PlanError as exc:
            raise RunError(str(exc)) from exc
        hosts = [job["host"] for job in placed["jobs"]]
        nodes = dict((h, self.run.nodes[h]) for h in hosts)
        # A finished run of the same name is replaced, as dstack does on apply.
        # The run key is made meanwhile (ssh-keygen takes a moment): the nodes log in to each
        # other with it, and gpufleet attach to any of them.
        key_maker = self._take_key()
        # What an earlier run of this name left on hosts this one does not use goes too (those
        # it uses were cleared by their claims, or are by their starts), while the image is
        # brought.
        elsewhere = [h for h in claimed.leftovers if h not in hosts]
        clearing = None
        if elsewhere:
            clearing = Background(parallel, elsewhere, lambda h: self.run.nodes[h].call(
                "remove", {"run": self.run.name, "keep": self.run.run_id}))
        auth = registry_credentials(self.run.config, self.run.env, self.run.secrets)
        for job in placed["jobs"]:
            self.run.emit({"kind": "job", "job_num": job["job_num"], "host": job["host"],
                           "status": JobStatus.PULLING.value, "reason": None, "exit_code": None})
        source = self.run.image_source
        if image == self.run.local_image and source == "auto":
            source = "push"  # built on this controller: no registry has it
        shipping = repo = None
        if self.run.code is not None:
            # The code travels while the image is brought: both go over the same connections.
            shipping = Background(self.run.code.ship, nodes, sorted(set(hosts)), self.run.emit,
                                  self.run.secrets)
        known = dict((h, a.get("image")) for h, a in claimed.answers.items())
        try:
            info = ensure_image(image, nodes, sorted(set(hosts)), docker=self.run.docker,
                                source=source, auth=auth, emit=self.run.emit, known=known)
        except RunError as exc:
            self._record_setup_failure(number, claimed, str(exc))
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
        run = {"name": self.run.name, "id": self.run.run_id, "submission": number,
               "submitted_at": self.run.submitted_at, "array": self.run.array,
               "user": self.run.user}
        self._attach_volumes(placed, run, nodes)
        try:
            jobs = rankplan.build_jobs(self.run.config, placed, run, secrets=self.run.secrets,
                                       environ=self.run.environ, ssh_key=key,
                                       run_args=self.run.run_args, image=image,
                                       image_cmd=image_cmd, config_dir=self.run.config_dir,
                                       repo=repo,
                                       python_setup=python_setup,
                                       fleet_env=self.fleet_env(placed["fleet"]))
        except (PlanError, volumes.VolumeError) as exc:
            raise RunError(str(exc)) from exc
        run = {"name": self.run.name, "id": self.run.run_id}
        versions = _versions(self.run.config, image, repo)
        for job, where in zip(jobs, placed["jobs"]):
            # The start renews the claim under the host's lock (tasks.hostside.booking), so a claim
            # that lapsed during a long pull is only used if nobody took the host meanwhile.
            job["claim"] = claiming.claim_of(where, run, number, by=self.run.by)
            if claimed.assumed:   # the claims cleared nothing: each start clears its host
                job["claim"]["replace"] = True
            # What a service's replica keeps on its host (start.json): where it was placed, and
            # which version of the service it runs (services.rolling compares it).
            job["placed"] = dict(where)
            job["config_digest"], job["resources"] = versions(where.get("group"))
        return Submission(number, _inline_files(jobs, self.run.files_data), nodes, placed)

    def _record_setup_failure(self, number, claimed, message):
        """Leave a run whose image could not be brought on its hosts as a failed run, as
        dstack's ps shows one (its jobs' folders, with the error: tasks.hostside.nodeside's
        ``record_failure``), so that ps, logs and the next apply of the name see it."""
        from .container import job_container, labels_of

        run = {"name": self.run.name, "id": self.run.run_id, "submission": number,
               "submitted_at": self.run.submitted_at, "array": self.run.array,
               "user": self.run.user}

        placed = claimed.placed
        jobs = dict((j["job_num"], j) for j in placed["jobs"])

        def record(num):
            job = jobs[num]
            if claimed.assumed:
                # The earlier run of the name was to go with the start, which will not come:
                # it goes now, so that this failure is what ps shows of the name.
                self.run.nodes[job["host"]].call("remove", {"run": self.run.name,
                                                            "keep": self.run.run_id})
            return self.run.nodes[job["host"]].call("record_failure", {
                "run": self.run.name, "job_num": job["job_num"],
                "container": job_container(self.run.config, self.run.name, job["job_num"]),
                "error": message,
                "labels": labels_of(self.run.config, run, placed["jobs"], job)})

        parallel(sorted(jobs), record)   # at best: the run failed whatever this gives

    def _attach_volumes(self, placed, run, nodes):
        """Attach and mount the jobs' network volumes on their hosts (volumes/attach.py)."""
        try:
            if not any(volumes.network_names(self.run.config, job, run) for job in placed["jobs"]):
                return
            done = volumes.attach_and_mount(self.run.config, placed, run, nodes,
                                            self.run.volume_clients())
        except (volumes.VolumeError, BackendError, fleet_cloud.CloudError, state.StateError,
                NodeError, PlanError) as exc:
            raise RunError(str(exc)) from exc
        for host, answers in done.items():
            for answer in answers:
                self.run.emit({"kind": "run", "status": RunStatus.PENDING.value,
                               "message": "volume %s mounted on %s%s" % (
                                   answer["name"], host, " (formatted: it was blank)"
                                   if answer.get("formatted") else "")})
