# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The rank plan: everything each container of a run needs, computed from the task and placement.

Pure functions, no I/O. ``build_jobs`` turns a normalized task config (docs/config-json.md) and
the placement of its jobs (tasks.placement.place) into one job spec per rank: the container's
name, labels and ``docker run`` options, its mounts, and the files of its job folder (the
environment, the command, the MPI hostfile, the inter-node SSH key). The wrapper script
(tasks.wrapper) reads those files inside the container. Names and formats follow dstack:
dstack.md §4.2 (environment), §4.3 (hostfile), §4.9 (container), §4.10 (SSH), §6.2 (mounts).

Secrets end up in ``env.sh`` only, never in labels or options, which ``docker inspect`` shows.
"""

from __future__ import annotations

import datetime
import json
import os
import posixpath
import random
import re
import shlex
import uuid

from ..render import fleets as fleettable
from ..render.runs import job_resources
from ..spec import interpolation
from ..volumes.mounts import NETWORK_VOLUMES_ROOT, mounts  # noqa: F401 (mounts: part of the plan)

RUN_LABEL = "gpufleet.run"
RUN_ID_LABEL = "gpufleet.run-id"
JOB_LABEL = "gpufleet.job"
REPLICA_LABEL = "gpufleet.replica"
SUBMISSION_LABEL = "gpufleet.submission"
JOB_ID_LABEL = "gpufleet.job-id"
FLEET_LABEL = "gpufleet.fleet"
INSTANCE_LABEL = "gpufleet.instance"
NODES_LABEL = "gpufleet.nodes"
BLOCKS_LABEL = "gpufleet.blocks"
TOTAL_BLOCKS_LABEL = "gpufleet.total-blocks"
GPUS_LABEL = "gpufleet.gpus"
SUBMITTED_LABEL = "gpufleet.submitted"
RUN_SPEC_LABEL = "gpufleet.run-spec"
RESOURCES_LABEL = "gpufleet.resources"

BASE_IMAGE_VERSION = "0.15"
DEFAULT_IMAGE = "dstackai/base:%s-base-ubuntu24.04" % BASE_IMAGE_VERSION
DEVEL_IMAGE = "dstackai/base:%s-devel-ubuntu24.04" % BASE_IMAGE_VERSION
DIND_IMAGE = "dstackai/dind"
RUN_ROOT = "/var/lib/gpufleet/runs"

MPI_HOSTFILE = "/dstack/mpi/hostfile"
RUNNER_SSH_PORT = 10022
NETWORK_VOLUMES_DIR = NETWORK_VOLUMES_ROOT
# What the container runtime hands to the job on NVIDIA hosts. dstack also asks for "display"
# and "compat32"; "display" needs /dev/nvidia-modeset on the host (dstack retries without it when
# the device is missing, which a single `docker run` cannot do), and neither matters to compute
# jobs, so both are left out.
NVIDIA_CAPABILITIES = "compute,utility,graphics,video"
FILES_MANIFEST = "files.list"
STATE_MOUNTPOINT = "state/.mountpoint"

_RUN_NAME = re.compile(r"^[a-z][a-z0-9-]{1,40}$")
_SHELL_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_SECRETS_HINT = (
    "pass them as Ansible variables in gpufleet_secrets (or -e), e.g. from Vault"
)

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


class PlanError(Exception):
    """The run cannot be planned; the message names the field, the value and what to do."""


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
    """The image a task without ``image`` runs in (dstack.md §4.9)."""
    if config.get("image"):
        return config["image"]
    if config.get("docker"):
        return DIND_IMAGE
    if config.get("nvcc"):
        return DEVEL_IMAGE
    return DEFAULT_IMAGE


def container_name(run_name_, job_num, replica=0):
    """``<run>-<job_num>-<replica>``, the job name dstack gives the container."""
    return "%s-%d-%d" % (run_name_, job_num, replica)


def job_dir(run_name_, job_num):
    """The job's folder on its host (the node side mounts it at /gpufleet)."""
    return posixpath.join(RUN_ROOT, run_name_, str(job_num))


# ---------------------------------------------------------------------------------------------
# Environment and credentials


def _missing_error(fields, names):
    return PlanError(
        "%s: Failed to interpolate due to missing vars: [%s]; %s"
        % (", ".join(fields), ", ".join(names), _SECRETS_HINT)
    )


def _fill(text, values, field, missing_fields, missing_names):
    """Interpolate ``text``; record missing references instead of raising at once."""
    try:
        refs = list(interpolation.references(text))
    except interpolation.InterpolationError as exc:
        raise PlanError("%s: %s" % (field, exc))
    absent = []
    for ref in refs:
        namespace, _dot, key = ref.partition(".")
        scope = values.get(namespace)
        if scope is None or key not in scope or scope[key] is None:
            absent.append(key if namespace == "secrets" else ref)
    if absent:
        missing_fields.append(field)
        for name in absent:
            if name not in missing_names:
                missing_names.append(name)
        return None
    try:
        return interpolation.interpolate(text, values)
    except interpolation.InterpolationError as exc:
        raise PlanError("%s: %s" % (field, exc))


def resolve_env(config, secrets, environ):
    """The task's ``env`` with every value filled.

    A name without a value takes its value from ``environ`` (the submitter's environment, as
    ``dstack apply`` does); ``${{ secrets.NAME }}`` references are filled from ``secrets``.
    """
    env = config.get("env") or {}
    if not isinstance(env, dict):
        raise PlanError("env: expected a mapping of names to values, got %r" % type(env).__name__)
    secrets = secrets or {}
    environ = {} if environ is None else environ
    out = {}
    missing_fields = []
    missing_names = []
    for name, value in env.items():
        field = "env.%s" % name
        if not isinstance(name, str) or not _SHELL_NAME.match(name):
            raise PlanError(
                "%s: %r is not a valid environment variable name; use letters, digits and _ "
                "and do not start with a digit" % (field, name)
            )
        if value is None:
            if name not in environ:
                raise PlanError(
                    "%s: Environment variable %s is not set; export it before running, or give "
                    "it a value in env" % (field, name)
                )
            out[name] = str(environ[name])
            continue
        if not isinstance(value, str):
            value = str(value)
        filled = _fill(value, {"secrets": secrets}, field, missing_fields, missing_names)
        if filled is not None:
            out[name] = filled
    if missing_names:
        raise _missing_error(missing_fields, missing_names)
    for name, value in out.items():
        if "\x00" in value:
            raise PlanError("env.%s: the value contains a NUL character, which no environment "
                            "variable can hold" % name)
    return out


def registry_credentials(config, env, secrets):
    """``registry_auth`` with ``${{ secrets.X }}`` and ``${{ env.X }}`` filled, or None."""
    auth = config.get("registry_auth")
    if not auth:
        return None
    if not isinstance(auth, dict):
        raise PlanError("registry_auth: expected {username, password}")
    values = {"secrets": secrets or {}, "env": env or {}}
    out = {}
    missing_fields = []
    missing_names = []
    for key in ("username", "password"):
        text = auth.get(key)
        if not isinstance(text, str):
            raise PlanError("registry_auth.%s: must be set (text)" % key)
        filled = _fill(text, values, "registry_auth.%s" % key, missing_fields, missing_names)
        if filled is not None:
            out[key] = filled
    if missing_names:
        raise _missing_error(missing_fields, missing_names)
    return out


def _ip(job):
    return job.get("internal_ip") or ""


def _ordered(jobs):
    return sorted(jobs, key=lambda j: j["job_num"])


def system_env(run, jobs, job):
    """The 13 ``DSTACK_*`` variables of one job (dstack.md §4.2).

    ``DSTACK_REPO_DIR`` and ``DSTACK_WORKING_DIR`` are left empty here: the wrapper sets them to
    the working folder it resolves in the container.
    """
    jobs = _ordered(jobs)
    ips = [_ip(j) for j in jobs]
    return {
        "DSTACK_RUN_ID": str(run.get("id") or ""),
        "DSTACK_JOB_ID": str(job.get("job_id") or ""),
        "DSTACK_RUN_NAME": str(run.get("name") or ""),
        "DSTACK_REPO_ID": "",
        "DSTACK_REPO_DIR": "",
        "DSTACK_WORKING_DIR": "",
        "DSTACK_NODES_IPS": "\n".join(ips),
        "DSTACK_MASTER_NODE_IP": ips[0] if ips else "",
        "DSTACK_NODE_RANK": str(job["job_num"]),
        "DSTACK_NODES_NUM": str(len(jobs)),
        "DSTACK_GPUS_PER_NODE": str(len(job.get("gpus") or [])),
        "DSTACK_GPUS_NUM": str(sum(len(j.get("gpus") or []) for j in jobs)),
        "DSTACK_MPI_HOSTFILE": MPI_HOSTFILE,
    }


def hostfile(jobs):
    """The MPI hostfile (dstack.md §4.3): empty when any job has no internal IP."""
    jobs = _ordered(jobs)
    if any(not _ip(j) for j in jobs):
        return ""
    lines = []
    for job in jobs:
        gpus = len(job.get("gpus") or [])
        lines.append("%s slots=%d\n" % (_ip(job), gpus) if gpus else "%s\n" % _ip(job))
    return "".join(lines)


def ssh_client_config(jobs):
    """``~/.ssh/config`` entries for every node (dstack.md §4.10); empty below two IPs."""
    ips = [_ip(j) for j in _ordered(jobs) if _ip(j)]
    if len(ips) < 2:
        return ""
    blocks = []
    for ip in ips:
        blocks.append(
            "Host %s\n"
            "    Port %d\n"
            "    StrictHostKeyChecking no\n"
            "    UserKnownHostsFile /dev/null\n"
            "    IdentityFile ~/.ssh/dstack_job\n" % (ip, RUNNER_SSH_PORT)
        )
    return "".join(blocks)


def quote_sh(value):
    """POSIX single quotes: ``it's`` -> ``'it'\\''s'``; newlines stay as they are."""
    return "'" + str(value).replace("'", "'\\''") + "'"


def env_script(variables):
    """``export K='v'`` lines, in order."""
    lines = []
    for name, value in variables.items():
        if not _SHELL_NAME.match(name):
            raise PlanError("env.%s: not a valid environment variable name" % name)
        lines.append("export %s=%s\n" % (name, quote_sh(value)))
    return "".join(lines)


# ---------------------------------------------------------------------------------------------
# The command


def _find_group(config, group):
    """``(index, group)`` of a group given by name (or index, or as the group itself)."""
    groups = config.get("groups") or []
    for index, item in enumerate(groups):
        if item is group or item.get("name") == group:
            return index, item
    for index, item in enumerate(groups):
        if str(index) == str(group):
            return index, item
    raise PlanError(
        "groups: the task has no group %r; the placement and the task do not match (place the "
        "task again)" % (group,)
    )


def _join_commands(commands):
    """dstack's ``base.py::_commands``: ``c1 && c2``, with a trailing ``&`` as ``{ c & }``."""
    parts = []
    for command in commands:
        text = command.strip()
        if text.endswith("&"):
            text = "{ %s }" % text
        parts.append(text)
    return " && ".join(parts)


def _group_ip_refs(commands, field, group_ips):
    """Fill ``${{ groups[i].nodes[j].IP_ADDRESS }}`` (after the run args, as dstack does)."""

    def fill(match):
        i, j = int(match.group(1)), int(match.group(2))
        if group_ips is None or i >= len(group_ips) or j >= len(group_ips[i]):
            raise PlanError(
                "%s: ${{ groups[%d].nodes[%d].IP_ADDRESS }} names a node the run does not have; "
                "check the group index and its nodes" % (field, i, j)
            )
        ip = group_ips[i][j]
        if not ip:
            raise PlanError(
                "%s: ${{ groups[%d].nodes[%d].IP_ADDRESS }} has no value: that node's host has "
                "no internal IP; set internal_ip (or network) in the fleet's ssh_config"
                % (field, i, j)
            )
        return ip

    pattern = re.compile(
        r"\$\{\{\s*groups\[(0|[1-9][0-9]*)\]\.nodes\[(0|[1-9][0-9]*)\]\.IP_ADDRESS\s*\}\}"
    )
    return [pattern.sub(fill, c) for c in commands]


def _interpolate_commands(commands, field, run_args, group_ips):
    args = shlex.join(list(run_args or ())) if run_args else ""
    out = []
    for index, command in enumerate(commands):
        where = "%s[%d]" % (field, index)
        try:
            text = interpolation.interpolate(
                command, {"run": {"args": args}}, keep=("secrets", "groups")
            )
        except interpolation.InterpolationError as exc:
            raise PlanError("%s: %s" % (where, exc))
        out.append(_group_ip_refs([text], where, group_ips)[0])
    return out


def _shell_check(shell):
    return (
        "if [ ! -x %s ]; then echo %s >&2; exit 127; fi\n"
        % (
            quote_sh(shell),
            quote_sh(
                "gpufleet: the shell %s is not in the image; set shell: sh (or an absolute path "
                "that exists in the image)" % shell
            ),
        )
    )


def command_script(config, group=None, image_cmd=None, run_args=(), group_ips=None):
    """The ``command.sh`` of a job: POSIX sh that execs the job's process (dstack.md §4.9).

    ``commands`` run as ``<shell> -c 'c1 && c2'``; with ``entrypoint``, the entrypoint's words
    followed by the commands; with neither, ``image_cmd`` (the image's ENTRYPOINT + CMD).
    ``run_args`` fill ``${{ run.args }}``; ``group_ips[i][j]`` fills
    ``${{ groups[i].nodes[j].IP_ADDRESS }}``.
    """
    field = "commands"
    commands = config.get("commands") or []
    if group is not None and config.get("groups"):
        index, found = _find_group(config, group)
        commands = found.get("commands") or []
        field = "groups[%d].commands" % index
    commands = _interpolate_commands(commands, field, run_args, group_ips)
    entrypoint = config.get("entrypoint")
    header = "#!/bin/sh\n# Written by gpufleet: the job's process.\n"
    if entrypoint:
        try:
            words = shlex.split(entrypoint)
        except ValueError as exc:
            raise PlanError("entrypoint: cannot split %r into words: %s" % (entrypoint, exc))
        argv = words + commands
        return header + "exec " + " ".join(quote_sh(w) for w in argv) + "\n"
    if commands:
        shell = config.get("shell") or "/bin/sh"
        return (
            header
            + _shell_check(shell)
            + "exec %s -c %s\n" % (quote_sh(shell), quote_sh(_join_commands(commands)))
        )
    if image_cmd:
        return header + "exec " + " ".join(quote_sh(w) for w in image_cmd) + "\n"
    raise PlanError(
        "Could not determine what command to run: set commands or entrypoint, or use an image "
        "with an ENTRYPOINT/CMD"
    )


def _needs_image_cmd(config, group):
    if config.get("entrypoint"):
        return False
    if group is not None and config.get("groups"):
        return not _find_group(config, group)[1].get("commands")
    return not config.get("commands")


# ---------------------------------------------------------------------------------------------
# The container


def _gb_to_bytes(size):
    return int(float(size) * 1024 ** 3)


def _device_path(gpu, prefix, index_base=0):
    ident = str(gpu.get("id") or "")
    if ident.startswith("/dev/"):
        return ident
    return "%s%d" % (prefix, int(gpu.get("index") or 0) + index_base)


def _gpu_args(job):
    vendor = job.get("gpu_vendor") or "none"
    gpus = job.get("gpus") or []
    if not gpus:
        return []
    if vendor == "nvidia":
        ids = []
        for gpu in gpus:
            ident = str(gpu.get("id") or "")
            # Devices counted from /dev/nvidiaN (no nvidia-smi) have no UUID: select by index.
            ids.append(ident if ident and not ident.startswith("/dev/") else str(gpu.get("index")))
        return ["--gpus", '"device=%s"' % ",".join(ids),
                "-e", "NVIDIA_DRIVER_CAPABILITIES=%s" % NVIDIA_CAPABILITIES]
    if vendor == "amd":
        args = ["--device", "/dev/kfd"]
        for gpu in gpus:
            args += ["--device", _device_path(gpu, "/dev/dri/renderD", 128)]
        return args + ["--ipc=host", "--cap-add", "SYS_PTRACE",
                       "--security-opt", "seccomp=unconfined"]
    if vendor == "intel":
        ids = []
        for gpu in gpus:
            ident = str(gpu.get("id") or "")
            ids.append(ident if ident.isdigit() else str(gpu.get("index")))
        return ["--runtime", "habana", "--ipc=host", "--cap-add", "SYS_NICE",
                "-e", "HABANA_VISIBLE_DEVICES=%s" % ",".join(ids)]
    if vendor == "tenstorrent":
        args = []
        for gpu in gpus:
            args += ["--device", _device_path(gpu, "/dev/tenstorrent/")]
        return args
    if vendor == "google":
        # TPUs: dstack runs the container privileged and tells JAX/PyTorch-XLA where to look.
        return ["--privileged", "-e", "PJRT_DEVICE=TPU"]
    return []


def docker_args(config, job, run, labels):
    """The ``docker run`` options of one job (dstack.md §4.9), without ``-d``, image and command.

    Host-dependent flags (/dev/infiniband, hugepages) are left to the node side: see the job
    spec's ``conditional``. So are the job folder and volume mounts (see ``mounts``).
    """
    args = ["--name", container_name(run["name"], job["job_num"])]
    for key in sorted(labels):
        args += ["--label", "%s=%s" % (key, labels[key])]
    args += ["--network", "host" if job.get("whole_host") else "bridge"]
    # The wrapper starts as root and switches to the task's user itself, as dstack's runner does.
    args += ["--user", "0:0"]
    if config.get("privileged") or config.get("docker"):
        args.append("--privileged")
    shm = (job.get("resources") or config.get("resources") or {}).get("shm_size")
    if shm:
        size = _gb_to_bytes(shm)
        args += ["--shm-size", str(size), "--tmpfs", "/dev/shm:rw,exec,size=%d" % size]
    if not job.get("whole_host"):
        cpus = job.get("cpus")
        memory = job.get("memory_mib")
        if cpus:
            args += ["--cpus", str(cpus)]
        if memory:
            args += ["--memory", "%dm" % int(memory)]
    gpu_args = _gpu_args(job)
    if "--privileged" in gpu_args and "--privileged" in args:
        gpu_args.remove("--privileged")
    args += gpu_args
    stop = config.get("stop_duration")
    if isinstance(stop, int) and not isinstance(stop, bool):
        args += ["--stop-timeout", str(stop)]
    args += ["--entrypoint", "/bin/sh"]
    return args


# ---------------------------------------------------------------------------------------------
# Job specs


def _duration(value):
    if value in (None, "off") or isinstance(value, bool):
        return None
    return int(value)


def _iso(value):
    if value is None:
        return ""
    if isinstance(value, (int, float)):
        moment = datetime.datetime.fromtimestamp(value, datetime.timezone.utc)
        return moment.strftime("%Y-%m-%dT%H:%M:%SZ")
    return str(value)


def _run_spec(config, jobs, job):
    resources = job.get("resources") or config.get("resources")
    return json.dumps(
        {
            "nodes": len(jobs),
            "gpu": fleettable.fleet_gpu(resources),
            "backend": job.get("backend"),
            "region": job.get("region"),
            "price": job.get("price"),
            "spot": job.get("spot"),
            "startup_order": config.get("startup_order"),
            "stop_criteria": config.get("stop_criteria"),
            "max_duration": config.get("max_duration"),
            "stop_duration": config.get("stop_duration"),
            "retry": config.get("retry"),
        },
        sort_keys=True,
        separators=(",", ":"),
    )


def labels_of(config, run, jobs, job, replica=0):
    """The container's labels (all strings): the run record ``ps`` reads back."""
    return {
        RUN_LABEL: str(run["name"]),
        RUN_ID_LABEL: str(run.get("id") or ""),
        JOB_LABEL: str(job["job_num"]),
        REPLICA_LABEL: str(replica),
        SUBMISSION_LABEL: str(run.get("submission") or 0),
        JOB_ID_LABEL: str(job.get("job_id") or ""),
        FLEET_LABEL: str(job.get("fleet") or ""),
        INSTANCE_LABEL: str(job.get("host") or ""),
        NODES_LABEL: str(len(jobs)),
        BLOCKS_LABEL: str(job.get("blocks") or ""),
        TOTAL_BLOCKS_LABEL: str(job.get("total_blocks") or ""),
        GPUS_LABEL: ",".join(str(g.get("id") or g.get("index")) for g in job.get("gpus") or []),
        SUBMITTED_LABEL: _iso(run.get("submitted_at")),
        RUN_SPEC_LABEL: _run_spec(config, jobs, job),
        RESOURCES_LABEL: job_resources(job),
    }


def _group_ips(config, jobs):
    groups = config.get("groups")
    if not groups:
        return None
    out = []
    rank = 0
    for group in groups:
        count = int(group.get("nodes") or 0)
        out.append([_ip(jobs[r]) if r < len(jobs) else "" for r in range(rank, rank + count)])
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
        if "\n" in target or "\x00" in target:
            raise PlanError("files[%d].path: %r has a newline or NUL; use a plain path"
                            % (index, target))
        path = os.path.expanduser(local)
        if not os.path.isabs(path):
            path = os.path.join(base, path)
        files["files/%d" % index] = {"local_path": os.path.normpath(path), "target": target}
        manifest.append("%d %s\n" % (index, target))
    if manifest:
        files[FILES_MANIFEST] = {"text": "".join(manifest), "mode": 0o644}
    return files


def _check_run(run):
    if not isinstance(run, dict):
        raise PlanError("run: expected {name, id, submission, submitted_at}")
    for key in ("name", "id"):
        if not run.get(key):
            raise PlanError("run.%s: missing; the caller must name the run and give it an id"
                            % key)


def build_jobs(config, placement, run, secrets=None, environ=None, ssh_key=None,
               run_args=(), image=None, image_cmd=None, config_dir=None):
    """One job spec per rank, in rank order (see the module docstring).

    ``run``: ``{"name", "id", "submission", "submitted_at"}``; ``ssh_key``: ``{"private",
    "public"}`` (one pair per run, required with two jobs or more); ``image_cmd``: the image's
    ENTRYPOINT + CMD, used when the task has neither commands nor entrypoint (without it,
    ``command.sh`` is left out and ``image_cmd_needed`` says so); ``config_dir``: where relative
    ``files`` paths start (the configuration file's folder; default: the current folder).
    """
    from . import wrapper

    if not isinstance(config, dict) or config.get("type") != "task":
        raise PlanError("type: build_jobs needs a task configuration (type: task)")
    _check_run(run)
    if not isinstance(placement, dict) or not placement.get("jobs"):
        raise PlanError("placement: no jobs were placed; place the task first")
    placed = _ordered(placement["jobs"])
    nums = [j.get("job_num") for j in placed]
    if nums != list(range(len(placed))):
        raise PlanError("placement.jobs: job numbers must be 0..%d, got %s"
                        % (len(placed) - 1, nums))
    nodes = config.get("nodes")
    if isinstance(nodes, int) and nodes != len(placed):
        raise PlanError("nodes: the task asks for %d nodes but the placement has %d jobs; place "
                        "the task again" % (nodes, len(placed)))
    multinode = len(placed) >= 2
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
    host_file = hostfile(jobs)
    ssh_config_text = ssh_client_config(jobs) if multinode else ""
    max_duration = _duration(config.get("max_duration"))
    stop_duration = _duration(config.get("stop_duration"))
    if stop_duration is None:
        stop_duration = 0
    specs = []
    for job in jobs:
        group = job.get("group") if config.get("groups") else None
        labels = labels_of(config, run, jobs, job)
        variables = system_env(run, jobs, job)
        variables.update(env)
        variables.update({
            "GPUFLEET_SHELL": config.get("shell") or "/bin/sh",
            "GPUFLEET_WORKING_DIR": config.get("working_dir") or "",
            "GPUFLEET_USER": config.get("user") or "",
            "GPUFLEET_MAX_DURATION": "" if max_duration is None else str(max_duration),
            "GPUFLEET_STOP_DURATION": str(stop_duration),
            "GPUFLEET_MULTINODE": "1" if multinode else "0",
        })
        files = {
            "env.sh": {"text": env_script(variables), "mode": 0o600},
            "hostfile": {"text": host_file, "mode": 0o644},
            "job.sh": {"text": wrapper.wrapper_script(), "mode": 0o755},
            # /gpufleet is mounted read-only and the state folder on top of it at
            # /gpufleet/state: the runtime cannot create that mount point inside a read-only
            # mount, so the job folder carries it.
            STATE_MOUNTPOINT: {"text": "", "mode": 0o644},
        }
        needs_cmd = _needs_image_cmd(config, group)
        if not needs_cmd or image_cmd:
            files["command.sh"] = {
                "text": command_script(config, group, image_cmd, run_args, group_ips),
                "mode": 0o755,
            }
        if multinode:
            files["ssh/dstack_job"] = {"text": ssh_key["private"], "mode": 0o600}
            files["ssh/dstack_job.pub"] = {"text": ssh_key["public"], "mode": 0o644}
            files["ssh/config"] = {"text": ssh_config_text, "mode": 0o644}
        for key, value in shared_files.items():
            files[key] = dict(value)
        conditional = ["infiniband"]
        if job.get("gpu_vendor") == "tenstorrent":
            conditional.append("hugepages-1g")
        specs.append({
            "run": run["name"],
            "run_id": run["id"],
            "job_num": job["job_num"],
            "replica": 0,
            "submission": run.get("submission") or 0,
            "job_id": job["job_id"],
            "container": container_name(run["name"], job["job_num"]),
            "host": job.get("host"),
            "image": image,
            "labels": labels,
            "docker_args": docker_args(config, job, run, labels),
            "mounts": mounts(config, job, run),
            "conditional": conditional,
            "image_cmd_needed": needs_cmd,
            "files": files,
            "max_duration": max_duration,
            "stop_duration": stop_duration,
        })
    return specs
