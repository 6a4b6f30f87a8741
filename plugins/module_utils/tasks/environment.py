# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The environment of a run's jobs: the task's ``env`` and registry credentials with their
variables and secrets filled, the ``DSTACK_*`` variables, the MPI hostfile and the SSH client
config the jobs reach each other with, and the ``env.sh`` that exports them.

Part of the rank plan (tasks.rankplan). Pure functions, no I/O; names and formats follow
docs/reference/dstack-runtime.md#environment-variables,
docs/reference/dstack-runtime.md#mpi-hostfile and
docs/reference/dstack-runtime.md#ssh-between-nodes. Secrets end up in ``env.sh`` only, never in
labels or ``docker run`` options, which ``docker inspect`` shows.
"""

from __future__ import annotations

import re

from ..core.text import shorten
from ..spec import interpolation, support
from .errors import PlanError

MPI_HOSTFILE = "/dstack/mpi/hostfile"
RUNNER_SSH_PORT = 10022

_SHELL_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_SECRETS_HINT = "set it with gpufleet secret set NAME, or pass gpufleet_secrets"


def _missing_error(fields, names):
    return PlanError(
        "%s: Failed to interpolate due to missing vars: [%s]; %s"
        % (", ".join(shorten(f) for f in fields), ", ".join(shorten(n) for n in names),
           _SECRETS_HINT)
    )


def _fill(text, values, field, missing_fields, missing_names):
    """Interpolate ``text``; record missing references instead of raising at once."""
    try:
        refs = list(interpolation.references(text))
    except interpolation.InterpolationError as exc:
        raise PlanError("%s: %s" % (field, exc)) from exc
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
        raise PlanError("%s: %s" % (field, exc)) from exc


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
        field = "env.%s" % shorten(str(name))
        why = support.env_name_refusal(name)   # what gpufleet validate reports too
        if why:
            raise PlanError("%s: %s" % (field, why))
        if value is None:
            if name not in environ:
                raise PlanError(
                    "%s: Environment variable %s is not set; export it before running, or give "
                    "it a value in env" % (field, shorten(name))
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
        why = support.env_value_refusal(value)   # a secret's, or what validate reports
        if why:
            raise PlanError("env.%s: %s" % (shorten(name), why))
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


def job_ip(job):
    """The job's internal IP, or "" when its host has none."""
    return job.get("internal_ip") or ""


def by_rank(jobs):
    """The jobs in rank (job number) order."""
    return sorted(jobs, key=lambda j: j["job_num"])


def system_env(run, jobs, job, repo_id=None):
    """The 13 ``DSTACK_*`` variables of one job
    (docs/reference/dstack-runtime.md#environment-variables).

    ``DSTACK_REPO_DIR`` and ``DSTACK_WORKING_DIR`` are left empty here: the wrapper sets them to
    the folders it resolves in the container. ``DSTACK_REPO_ID`` is the run's repo id, ``none``
    without a repo, as in dstack.
    """
    jobs = by_rank(jobs)
    ips = [job_ip(j) for j in jobs]
    return {
        "DSTACK_RUN_ID": str(run.get("id") or ""),
        "DSTACK_JOB_ID": str(job.get("job_id") or ""),
        "DSTACK_RUN_NAME": str(run.get("name") or ""),
        "DSTACK_REPO_ID": repo_id or "none",
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
    """The MPI hostfile (docs/reference/dstack-runtime.md#mpi-hostfile): empty when any job has no
    internal IP."""
    jobs = by_rank(jobs)
    if any(not job_ip(j) for j in jobs):
        return ""
    lines = []
    for job in jobs:
        gpus = len(job.get("gpus") or [])
        lines.append("%s slots=%d\n" % (job_ip(job), gpus) if gpus else "%s\n" % job_ip(job))
    return "".join(lines)


def ssh_client_config(jobs):
    """``~/.ssh/config`` entries for every node
    (docs/reference/dstack-runtime.md#ssh-between-nodes); empty below two IPs."""
    ips = [job_ip(j) for j in by_rank(jobs) if job_ip(j)]
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
            raise PlanError("env.%s: not a valid environment variable name" % shorten(name))
        lines.append("export %s=%s\n" % (name, quote_sh(value)))
    return "".join(lines)


def _secret_texts(config):
    """The texts of the task whose ``${{ secrets.NAME }}`` are filled when it is submitted:
    env values and registry_auth's username and password."""
    env = config.get("env")
    if isinstance(env, dict):
        for value in env.values():
            if isinstance(value, str):
                yield value
    auth = config.get("registry_auth")
    if isinstance(auth, dict):
        for key in ("username", "password"):
            if isinstance(auth.get(key), str):
                yield auth[key]


def needed_secret_names(config, given):
    """The secret names the task references that ``given`` (the ``secrets`` option) does not
    provide, in order of first use: what the controller's secrets store must supply.
    Malformed references are left to the runner to report."""
    given = given or {}
    names = []
    for text in _secret_texts(config):
        try:
            refs = list(interpolation.references(text))
        except interpolation.InterpolationError:
            continue
        for ref in refs:
            namespace, _dot, key = ref.partition(".")
            if namespace == "secrets" and key and given.get(key) is None and key not in names:
                names.append(key)
    return names
