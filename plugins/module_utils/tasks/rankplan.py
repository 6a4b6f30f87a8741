# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The rank plan: everything each container of a run needs, computed from the task and placement.

Pure functions, no I/O. ``build_jobs`` turns a normalized task config (docs/config-json.md) and
the placement of its jobs (tasks.placement.place) into one job per rank: the container's
name, labels and ``docker run`` options (tasks.container), its mounts (volumes.mounts), and the
files of its job folder: the environment, the MPI hostfile and the inter-node SSH key
(tasks.environment) and the command (tasks.command). The wrapper script (tasks.hostside.wrapper)
reads those files inside the container. This module also names the run and picks its image. Names
and formats follow dstack: docs/reference/dstack-runtime.md#environment-variables,
docs/reference/dstack-runtime.md#mpi-hostfile, docs/reference/dstack-runtime.md#container-start,
docs/reference/dstack-runtime.md#ssh-between-nodes and docs/reference/dstack-files.md#volume-mounts.

Secrets end up in ``env.sh`` only, never in labels or options, which ``docker inspect`` shows.
"""

from __future__ import annotations

import os
import posixpath
import random
import re
import uuid

from ..repos import files as shipped_files
from ..spec import support
from ..volumes.mounts import mounts
from .command import command_script, needs_image_cmd
from .container import docker_args, is_service, job_container, labels_of
from .environment import by_rank, env_script, hostfile, job_ip, resolve_env, ssh_client_config, system_env
from .errors import PlanError
from .python_env import cache_mount, for_host

BASE_IMAGE_VERSION = "0.15"
DEFAULT_IMAGE = "dstackai/base:%s-base-ubuntu24.04" % BASE_IMAGE_VERSION
DEVEL_IMAGE = "dstackai/base:%s-devel-ubuntu24.04" % BASE_IMAGE_VERSION
DIND_IMAGE = "dstackai/dind"
RUN_ROOT = "/var/lib/gpufleet/runs"
NO_REPO_DIR = "/workflow"   # dstack's DSTACK_REPO_DIR for a run without repos

FILES_MANIFEST = "files.list"
STATE_MOUNTPOINT = "state/.mountpoint"

_RUN_NAME = re.compile(r"^[a-z][a-z0-9-]{1,40}$")

_ADJECTIVES = (
    "able", "bold", "brave", "bright", "calm", "clever", "cool", "crisp", "eager", "fair",
    "fancy", "fast", "fresh", "gentle", "glad", "grand", "happy", "keen", "kind", "light",
    "lively", "lucky", "mellow", "merry", "mighty", "neat", "nice", "noble", "polite", "proud",
    "quick", "quiet", "rapid", "ready", "sharp", "shiny", "silent", "smart", "smooth", "snappy",
    "solid", "steady", "sunny", "swift", "tidy", "vivid", "warm", "wise", "witty", "zesty",
)
_ANIMALS = (
    "badger", "bat", "bear", "beaver", "bison", "boar", "bobcat", "camel", "cat", "cobra",
    "crane", "crow", "deer", "dingo", "dog", "dolphin", "eagle", "eel", "elk", "falcon",
    "ferret", "fox", "frog", "gecko", "goat", "goose", "hawk", "heron", "horse", "ibis",
    "jackal", "koala", "lemur", "lion", "lynx", "marten", "mink", "mole", "moose", "newt",
    "otter", "owl", "panda", "puma", "rabbit", "raven", "seal", "shark", "swan", "tiger",
    "toad", "trout", "turtle", "viper", "walrus", "wolf", "wombat", "yak", "zebra",
)


# ---------------------------------------------------------------------------------------------
# Names and images


def random_run_name(rng=random):
    """A dstack-like run name: ``<adjective>-<animal>-<n>``."""
    return "%s-%s-%d" % (rng.choice(_ADJECTIVES), rng.choice(_ANIMALS), rng.randint(1, 99))


def run_name(config, rng=random):
    """The task's ``name``, or a random one when it has none."""
    name = config.get("name")
    if not name:
        return random_run_name(rng)
    if not isinstance(name, str) or not _RUN_NAME.match(name):
        raise PlanError(
            "name: %r is not a valid run name; use lower-case letters, digits and '-', starting "
            "with a letter (2 to 41 characters)" % (name,)
        )
    return name


def default_image(config):
    """The image a task without ``image`` runs in
    (docs/reference/dstack-runtime.md#container-start)."""
    if config.get("image"):
        return config["image"]
    if config.get("docker"):
        return DIND_IMAGE
    if config.get("nvcc"):
        return DEVEL_IMAGE
    return DEFAULT_IMAGE


def job_dir(run_name_, job_num):
    """The job's folder on its host (the node side mounts it at /gpufleet)."""
    return posixpath.join(RUN_ROOT, run_name_, str(job_num))


# ---------------------------------------------------------------------------------------------
# Jobs


def _duration(value):
    if value in (None, "off") or isinstance(value, bool):
        return None
    return int(value)


def _group_ips(config, jobs):
    groups = config.get("groups")
    if not groups:
        return None
    out = []
    rank = 0
    for group in groups:
        count = int(group.get("nodes") or 0)
        out.append([job_ip(jobs[r]) if r < len(jobs) else "" for r in range(rank, rank + count)])
        rank += count
    return out


def _files_of(config, config_dir):
    """``files/N`` entries and the manifest the wrapper reads (``N <target>`` lines)."""
    files = {}
    manifest = []
    base = config_dir or os.getcwd()
    for index, item in enumerate(config.get("files") or []):
        local = item.get("local_path")
        target = item.get("path") or local
        if not local or not target:
            raise PlanError("files[%d]: needs local_path and path" % index)
        why = support.file_target_refusal(target)   # what gpufleet validate reports too
        if why:
            raise PlanError("files[%d].path: %s" % (index, why))
        files["files/%d" % index] = {"local_path": shipped_files.resolve(local, base),
                                     "target": target}
        manifest.append("%d %s\n" % (index, target))
    if manifest:
        files[FILES_MANIFEST] = {"text": "".join(manifest), "mode": 0o644}
    return files


def array_variables(array):
    """``GPUFLEET_ARRAY_*`` of a run in a job array (Slurm's ``SLURM_ARRAY_*``), before the
    task's ``env``, which may override them."""
    if not array:
        return {}
    return {"GPUFLEET_ARRAY_NAME": str(array["name"]),
            "GPUFLEET_ARRAY_INDEX": str(array["index"]),
            "GPUFLEET_ARRAY_COUNT": str(array["count"]),
            "GPUFLEET_ARRAY_MIN": str(array["min"]),
            "GPUFLEET_ARRAY_MAX": str(array["max"])}


def _repo_variables(config, repo):
    """Where the wrapper puts the run's code: ``repos[0].path`` (relative to the working folder,
    ``~`` the job user's home) and what it does when that folder is not empty (``if_exists``).
    Without a repo it is dstack's legacy ``/workflow``, which nothing creates."""
    repos = config.get("repos") or []
    if not repos:
        return {"GPUFLEET_REPO_DIR": NO_REPO_DIR, "GPUFLEET_REPO_IF_EXISTS": ""}
    if repo is None or not (repo.get("archive") or repo.get("url")):
        raise PlanError("repos: the run has a repo but no archive or URL of it was given; ship "
                        "the repo first (tasks.runs does)")
    first = repos[0]
    out = {"GPUFLEET_REPO_DIR": first.get("path") or ".",
           "GPUFLEET_REPO_IF_EXISTS": first.get("if_exists") or "error"}
    if repo.get("url"):
        out.update({"GPUFLEET_REPO_URL": repo["url"],
                    "GPUFLEET_REPO_BRANCH": repo.get("branch") or "",
                    "GPUFLEET_REPO_HASH": repo.get("hash") or "",
                    "GPUFLEET_REPO_SINGLE_BRANCH": "0" if config.get("single_branch") is False
                    else "1"})
    return out


# Answers git's username and password prompts for an HTTPS clone with a token (dstack sends
# the token as the password of any user); the token stays in its 0600 file.
ASKPASS = """#!/bin/sh
case $1 in
    Username*) echo anything ;;
    *) cat "${GPUFLEET_DIR:-/gpufleet}/repo/token" ;;
esac
"""


def _repo_files(repo):
    """The remote repo's credential in the job folder: ``repo/token`` with its askpass script,
    or ``repo/ssh_key``; both 0600 (never in env.sh, labels or options)."""
    if not repo or not repo.get("url"):
        return {}
    if repo.get("token"):
        return {"repo/token": {"text": repo["token"], "mode": 0o600},
                "repo/askpass": {"text": ASKPASS, "mode": 0o700}}
    if repo.get("ssh_key"):
        return {"repo/ssh_key": {"text": repo["ssh_key"], "mode": 0o600}}
    return {}


def _check_run(run):
    if not isinstance(run, dict):
        raise PlanError("run: expected {name, id, submission, submitted_at}")
    for key in ("name", "id"):
        if not run.get(key):
            raise PlanError("run.%s: missing; the caller must name the run and give it an id"
                            % key)


def build_jobs(config, placement, run, secrets=None, environ=None, ssh_key=None,
               run_args=(), image=None, image_cmd=None, config_dir=None, repo=None,
               python_setup=None, fleet_env=None):
    """One job per rank, in rank order (see the module docstring).

    ``run``: ``{"name", "id", "submission", "submitted_at"}``, with ``array`` and ``user`` (the
    submitter, its containers' ``gpufleet.user`` label) when it has them; ``ssh_key``: ``{"private",
    "public"}`` (one pair per run, required with two jobs or more; a single job gets it too
    when given, for ``gpufleet attach``); ``image_cmd``: the image's
    ENTRYPOINT + CMD, used when the task has neither commands nor entrypoint (without it,
    ``command.sh`` is left out and ``image_cmd_needed`` says so); ``config_dir``: where relative
    ``files`` paths start (the configuration file's folder; default: the current folder);
    ``repo``: the run's code, ``{"archive", "repo_id"}`` (the archive's path on the hosts, see
    repos.ship), which the wrapper unpacks at the task's ``repos[0].path``; ``python_setup``:
    dstack's venv for the default image (tasks.python_env.choose), or None; ``fleet_env``: the
    SSH fleet's ``env`` (values filled), under the task's own ``env`` as in dstack.
    """
    from .hostside import wrapper

    if not isinstance(config, dict) or config.get("type") != "task":
        raise PlanError("type: build_jobs needs a task configuration (type: task)")
    _check_run(run)
    if not isinstance(placement, dict) or not placement.get("jobs"):
        raise PlanError("placement: no jobs were placed; place the task first")
    placed = by_rank(placement["jobs"])
    nums = [j.get("job_num") for j in placed]
    if nums != list(range(len(placed))):
        raise PlanError("placement.jobs: job numbers must be 0..%d, got %s"
                        % (len(placed) - 1, nums))
    nodes = config.get("nodes")
    if isinstance(nodes, int) and nodes != len(placed):
        raise PlanError("nodes: the task asks for %d nodes but the placement has %d jobs; place "
                        "the task again" % (nodes, len(placed)))
    # A service's replicas are independent one-node runs (services.replicas): no SSH between
    # them, no hostfile, each its own master.
    service = is_service(config)
    multinode = len(placed) >= 2 and not service
    if multinode and (
        not isinstance(ssh_key, dict) or not ssh_key.get("private") or not ssh_key.get("public")
    ):
        raise PlanError("ssh_key: a run with %d nodes needs an SSH key pair {private, public} "
                        "for the nodes to reach each other (make one RSA pair per run)"
                        % len(placed))
    env = resolve_env(config, secrets, os.environ if environ is None else environ)
    image = image or default_image(config)
    jobs = []
    for job in placed:
        entry = dict(job)
        entry["job_id"] = str(uuid.uuid4())
        jobs.append(entry)
    group_ips = _group_ips(config, jobs)
    shared_files = _files_of(config, config_dir)
    host_file = "" if service else hostfile(jobs)
    ssh_config_text = ssh_client_config(jobs) if multinode else ""
    max_duration = _duration(config.get("max_duration"))
    policy = config.get("utilization_policy") or {}
    stop_duration = _duration(config.get("stop_duration"))
    if stop_duration is None:
        stop_duration = 0
    specs = []
    for job in jobs:
        group = job.get("group") if config.get("groups") else None
        labels = labels_of(config, run, jobs, job)
        variables = system_env(run, [dict(job, job_num=0)] if service else jobs,
                               dict(job, job_num=0) if service else job,
                               repo_id=(repo or {}).get("repo_id"))
        variables.update(array_variables(run.get("array")))
        variables.update(fleet_env or {})
        variables.update(env)
        variables.update({
            "GPUFLEET_SHELL": config.get("shell") or "/bin/sh",
            "GPUFLEET_WORKING_DIR": config.get("working_dir") or "",
            "GPUFLEET_USER": config.get("user") or "",
            "GPUFLEET_MAX_DURATION": "" if max_duration is None else str(max_duration),
            # utilization_policy, enforced by the job's own metrics sampler (tasks.hostside.
            # wrapper): the least GPU utilization, in percent, and its window in seconds.
            "GPUFLEET_UTIL_MIN": str(policy.get("min_gpu_utilization", "")),
            "GPUFLEET_UTIL_WINDOW": str(policy.get("time_window", "")),
            "GPUFLEET_STOP_DURATION": str(stop_duration),
            "GPUFLEET_MULTINODE": "1" if multinode else "0",
            # A dev environment: sshd always (installed when the image lacks it), and the
            # container stops itself after inactivity_duration without SSH connections.
            "GPUFLEET_SSHD": "install" if multinode or config.get("run_type") == "dev-environment"
            else "image",
            "GPUFLEET_INACTIVITY": "" if config.get("inactivity_duration") is None else str(
                config["inactivity_duration"]),
            "GPUFLEET_STOP_CRITERIA": config.get("stop_criteria") or "all-done",
        })
        variables.update(_repo_variables(config, repo))
        files = {
            "env.sh": {"text": env_script(variables), "mode": 0o600},
            "hostfile": {"text": host_file, "mode": 0o644},
            "job.sh": {"text": wrapper.wrapper_script(), "mode": 0o755},
            # /gpufleet is mounted read-only and the state folder on top of it at
            # /gpufleet/state: the runtime cannot create that mount point inside a read-only
            # mount, so the job folder carries it.
            STATE_MOUNTPOINT: {"text": "", "mode": 0o644},
        }
        needs_cmd = needs_image_cmd(config, group)
        job_python = for_host(python_setup, job.get("host"))
        job_mounts = mounts(config, job, run)
        if cache_mount(job_python):   # the node's downloaded Pythons (tasks.python_env)
            job_mounts.append(cache_mount(job_python))
        if not needs_cmd or image_cmd:
            files["command.sh"] = {
                "text": command_script(config, group, image_cmd, run_args, group_ips,
                                       job_python),
                "mode": 0o755,
            }
        if ssh_key:
            files["ssh/dstack_job"] = {"text": ssh_key["private"], "mode": 0o600}
            files["ssh/dstack_job.pub"] = {"text": ssh_key["public"], "mode": 0o644}
        if multinode:
            files["ssh/config"] = {"text": ssh_config_text, "mode": 0o644}
        for key, value in shared_files.items():
            files[key] = dict(value)
        files.update(_repo_files(repo))
        conditional = ["infiniband"]
        if job.get("gpu_vendor") == "tenstorrent":
            conditional.append("hugepages-1g")
        specs.append({
            "run": run["name"],
            "run_id": run["id"],
            "job_num": job["job_num"],
            "replica": job["job_num"] if service else 0,
            "submission": run.get("submission") or 0,
            "job_id": job["job_id"],
            "container": job_container(config, run["name"], job["job_num"]),
            "host": job.get("host"),
            "image": image,
            "labels": labels,
            "docker_args": docker_args(config, job, run, labels),
            "mounts": job_mounts,
            "conditional": conditional,
            "image_cmd_needed": needs_cmd,
            "repo_archive": (repo or {}).get("archive"),
            "files": files,
            "max_duration": max_duration,
            "stop_duration": stop_duration,
        })
    return specs
