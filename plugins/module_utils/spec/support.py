# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""What gpufleet does with a valid dstack configuration: the one verdict ``gpufleet validate``,
``config_info`` and ``apply`` share.

A file dstack accepts parses (spec.loader); some of what it asks for gpufleet cannot do. Those
are *refusals*: ``validate`` reports them as the file's problems and ``apply`` stops on the same
message before anything runs. Each refusal is decided here, once, and each place that acts on
the configuration asks here: tasks.runs (``refusals``), backends.base and backends.local (a
fleet's backends), volumes.provision (a volume's backend), tasks.rankplan (``files`` targets),
tasks.command (``entrypoint``), tasks.environment (``env``). What a run names on the controller
(its ``files`` and local repo) is judged by repos.sources, with the same Problems. Fields
gpufleet accepts without acting on them get a *note*, a warning naming the field and why.

Pure functions over a normalized configuration.
"""

from __future__ import annotations

import re
import shlex
from typing import Any, Iterable

from ..core.text import quote
from ._errors import Problem

# A task's schedule is fired by its hosts (tasks/hostside/scheduleside.py): each firing runs
# once, all its jobs at once, with nobody to resubmit it or order its nodes.
SCHEDULE = ("gpufleet starts tasks on a schedule, not %ss; remove `schedule` and run gpufleet "
            "apply (or playbooks/task.yml) from cron or an AWX schedule")
SCHEDULE_RETRY = ("a scheduled task runs once at each firing, and its hosts resubmit nothing: "
                  "remove `retry` (the next firing comes at the next cron time) or `schedule`")
SCHEDULE_ORDER = ("a scheduled task's hosts start all its jobs at the firing, in no order: "
                  "remove `startup_order` or `schedule`")
RUN_TYPES = ("task", "dev-environment", "service")

# What a service may ask for that this version of gpufleet does not run yet: the in-fleet proxy
# publishes one group of at least one replica over plain HTTP.
HTTPS = ("the in-fleet proxy serves plain HTTP, and `gateway: false` asks for it: name a gateway "
         "with a certificate in `gateway`, or omit `https` or set it to false or auto")
# Replica groups run with a fixed count each, their own commands and resources, and the
# service's image, Python, Docker and spot settings.
GROUP_RANGE = ("a replica group's `replicas` is one number such as 2 in this version of gpufleet "
               "(a group does not autoscale yet, nor scale to zero): give it a count, and drop "
               "its `scaling`")
GROUP_FIELD = ("`%s` per replica group is not supported yet: set it on the service, for all its "
               "groups")
GROUP_ROUTER = ("a router replica group (%s) is not supported yet: the proxy sends requests to "
                "every replica; remove `router`")
# What a replica group may set that this version takes from the service only (the flags
# count when true, the others when given).
GROUP_OWN = ("image", "python", "spot_policy", "reservation")
GROUP_FLAGS = ("nvcc", "docker", "privileged")
SCALE_TO_ZERO = ("scale to zero is not supported yet: the in-fleet proxy cannot hold a request "
                 "until a replica starts; start the range of `replicas` at 1 or more, such as 1..4")
NO_REPLICAS = ("a service needs at least one replica in this version of gpufleet: set "
               "`replicas` to 1 or more")

# The backends gpufleet provisions fleets in (backends.base's registry holds their clients).
FLEET_BACKENDS = ("local", "aws", "gcp")
# Where a run may be placed: those fleets' instances and SSH fleets' hosts (dstack's "remote").
RUN_BACKENDS = FLEET_BACKENDS + ("remote",)
# The backends gpufleet makes network volumes in.
VOLUME_BACKENDS = ("local", "aws", "gcp")


def fleet_backends_refusal(backends: Iterable[str] | None) -> str | None:
    """Why a backend fleet that may use ``backends`` gets no nodes from gpufleet, or None: the
    backends are named first (``azure, lambda cannot provision nodes ...``)."""
    if not backends or any(b in FLEET_BACKENDS for b in backends):
        return None
    return ("%s cannot provision nodes in this version of gpufleet (available: %s): add local "
            "to backends, or describe existing hosts with ssh_config"
            % (", ".join(backends), ", ".join(FLEET_BACKENDS)))


def run_backends_refusal(backends: Iterable[str] | None) -> str | None:
    """Why a run limited to ``backends`` can be placed on no instance gpufleet has, or None."""
    if backends is None or any(b in RUN_BACKENDS for b in backends):
        return None
    return ("gpufleet has no %s backend, so no instance can match: runs go to fleets of the "
            "local, aws and gcp backends and to SSH fleets (remote); list one of them, or "
            "remove backends" % " or ".join(backends))


def volume_backend_refusal(backend: str | None) -> str | None:
    """Why gpufleet makes no volume in ``backend``, or None."""
    if backend in VOLUME_BACKENDS:
        return None
    return ("backend %s volumes are not provisioned by gpufleet (%s)"
            % (backend, ", ".join(VOLUME_BACKENDS)))


def local_gpus_refusal(config: dict[str, Any]) -> str | None:
    """Why local nodes cannot be this fleet, or None: they are containers without GPUs."""
    gpu = (config.get("resources") or {}).get("gpu") or {}
    wanted = (gpu.get("count") or {}).get("min") or 0
    if wanted <= 0:
        return None
    return ("asks for at least %d GPU(s), but local nodes are containers without GPUs: use an "
            "SSH fleet (ssh_config) for GPU hosts, or set resources.gpu: 0 for a local fleet"
            % wanted)


def file_target_refusal(target: str) -> str | None:
    """Why ``target`` (a ``files`` entry's path in the container) cannot be written, or None:
    the list of files the wrapper reads has one entry a line."""
    if "\n" in target or "\x00" in target:
        return "%s has a newline or NUL; use a plain path" % quote(target)
    return None


_SHELL_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def env_name_refusal(name: str) -> str | None:
    """Why ``name`` (a key of ``env``) cannot be exported in a job, or None."""
    if isinstance(name, str) and _SHELL_NAME.fullmatch(name):
        return None
    return ("%s is not a valid environment variable name; use letters, digits and _ and do not "
            "start with a digit" % quote(str(name)))


def env_value_refusal(value: object) -> str | None:
    """Why ``value`` cannot be an environment variable's value, or None."""
    if isinstance(value, str) and "\x00" in value:
        return "the value contains a NUL character, which no environment variable can hold"
    return None


def entrypoint_refusal(entrypoint: str) -> str | None:
    """Why ``entrypoint`` cannot be split into words (as the job's command is made), or None."""
    try:
        shlex.split(entrypoint)
    except ValueError as exc:
        return "cannot split %s into words: %s" % (quote(entrypoint), exc)
    return None


def refusals(config: dict[str, Any]) -> list[Problem]:
    """Problems that stop ``apply`` of this configuration (an empty list when it can run)."""
    kind = config.get("type")
    if kind == "fleet":
        return _fleet_refusals(config)
    if kind == "gateway":
        return gateway_refusals(config)
    if kind == "volume":
        why = volume_backend_refusal(config.get("backend"))
        return [Problem(("backend",), why)] if why else []
    if kind not in RUN_TYPES:
        return []
    out = service_refusals(config) if kind == "service" else []
    if config.get("schedule"):
        out += schedule_refusals(config)
    why = run_backends_refusal(config.get("backends"))
    if why:
        out.append(Problem(("backends",), why))
    if config.get("entrypoint"):
        why = entrypoint_refusal(config["entrypoint"])
        if why:
            out.append(Problem(("entrypoint",), why))
    for index, item in enumerate(config.get("files") or []):
        why = file_target_refusal(item.get("path") or item.get("local_path") or "")
        if why:
            out.append(Problem(("files", index, "path"), why))
    env = config.get("env")
    for name, value in (env.items() if isinstance(env, dict) else ()):
        why = env_name_refusal(name) or env_value_refusal(value)
        if why:
            out.append(Problem(("env", str(name)), why))
    return out


MODEL_FORMAT = ("the model format %s is not supported: the in-fleet proxy passes OpenAI requests "
                "to the service as they are; serve an OpenAI-compatible API and use "
                "`format: openai` (or give the model's name only)")
MODEL_PREFIX = ("the model prefix %s is not supported: use a path of letters, digits and "
                "`._~/-` that starts with `/` (such as /v1)")
PROBE_URL = ("the probe URL %s has a space, backslash or brace, which the proxy cannot "
             "send; percent-encode them")


def schedule_refusals(config: dict[str, Any]) -> list[Problem]:
    """Why a run with ``schedule`` cannot be kept on its hosts for its firings."""
    if config.get("type") != "task":
        return [Problem(("schedule",), SCHEDULE % config.get("type"))]
    out = []
    if config.get("retry"):
        out.append(Problem(("retry",), SCHEDULE_RETRY))
    if config.get("startup_order") not in (None, "any"):
        out.append(Problem(("startup_order",), SCHEDULE_ORDER))
    return out


def service_refusals(config: dict[str, Any]) -> list[Problem]:
    """What of a service this version does not run: HTTPS without a gateway, what replica
    groups cannot have yet (_group_refusals), no replica at all, a range of replicas that
    starts at 0 (scale to zero). (Whether a gateway exists, and has a certificate, is known at
    apply: services.gateways.)"""
    out = []
    if config.get("https") is True and config.get("gateway") is False:
        out.append(Problem(("https",), HTTPS))
    for index, group in enumerate(config.get("groups") or []):
        out += _group_refusals(index, group)
    replicas = config.get("replicas") or {}
    if replicas.get("max") == 0:
        out.append(Problem(("replicas",), NO_REPLICAS))
    elif replicas.get("min") == 0:
        out.append(Problem(("replicas",), SCALE_TO_ZERO))
    out += _proxy_refusals(config)
    return out


def _group_refusals(index: int, group: dict[str, Any]) -> list[Problem]:
    """What of replica group ``index`` this version does not run."""
    out = []
    replicas = group.get("replicas") or {}
    if replicas.get("min") != replicas.get("max") or not replicas.get("min") or group.get(
            "scaling"):
        out.append(Problem(("groups", index, "replicas"), GROUP_RANGE))
    for field in GROUP_OWN:
        if group.get(field) is not None:
            out.append(Problem(("groups", index, field), GROUP_FIELD % field))
    for field in GROUP_FLAGS:
        if group.get(field) is True:
            out.append(Problem(("groups", index, field), GROUP_FIELD % field))
    if group.get("router"):
        out.append(Problem(("groups", index, "router"),
                           GROUP_ROUTER % group["router"].get("type")))
    return out


# What the in-fleet proxy writes into its configuration as bare words (tasks/hostside/proxyconf.py
# checks the same before it renders; here it is refused where validate sees it too).
_MODEL_PREFIX = re.compile(r"/[A-Za-z0-9._~/-]{0,200}\Z")
_PATH_UNSAFE = re.compile(r"[\s\\{}]")


def _proxy_refusals(config):
    out = []
    model = config.get("model") or {}
    if model and model.get("format") != "openai":
        out.append(Problem(("model", "format"), MODEL_FORMAT % quote(model.get("format"))))
    elif model and not _MODEL_PREFIX.match(str(model.get("prefix") or "")):
        out.append(Problem(("model", "prefix"), MODEL_PREFIX % quote(model.get("prefix"))))
    for index, probe in enumerate(config.get("probes") or []):
        url = str(probe.get("url") or "")
        if _PATH_UNSAFE.search(url):
            out.append(Problem(("probes", index, "url"), PROBE_URL % quote(url)))
    return out


GATEWAY_REPLICAS = ("a gateway has one host in this version of gpufleet: remove `replicas` or "
                    "set it to 1")
GATEWAY_ACM = ("an acm certificate ends TLS at an AWS load balancer, which gpufleet does not "
               "make: use `type: lets-encrypt` (the gateway obtains one certificate per "
               "service), or null for plain HTTP")


def gateway_refusals(config: dict[str, Any]) -> list[Problem]:
    """What of a gateway this version does not make: a backend with no fleets, more than one
    replica, an ACM certificate."""
    out = []
    why = fleet_backends_refusal([config["backend"]]) if config.get("backend") else None
    if why:
        out.append(Problem(("backend",), why.replace("add local to backends, or describe "
                                                     "existing hosts with ssh_config",
                                                     "use one of those")))
    if (config.get("replicas") or 1) > 1:
        out.append(Problem(("replicas",), GATEWAY_REPLICAS))
    if (config.get("certificate") or {}).get("type") == "acm":
        out.append(Problem(("certificate", "type"), GATEWAY_ACM))
    return out


def _fleet_refusals(config):
    if config.get("fleet_type") == "ssh":
        return []
    backends = config.get("backends")
    why = fleet_backends_refusal(backends)
    if why:
        return [Problem(("backends",), why)]
    why = local_gpus_refusal(config) if backends and "local" in backends else None
    if why:
        return [Problem(("resources", "gpu"), why + " (backends has local, which a fleet "
                                                    "takes first)")]
    return []


def notes(config: dict[str, Any]) -> list[Problem]:
    """Warnings for fields gpufleet accepts but does not act on."""
    out: list[Problem] = []
    if config.get("type") not in RUN_TYPES:
        return out
    if config.get("dstack"):
        out.append(Problem(("dstack",), "there is no dstack server socket to expose"))
    return out
