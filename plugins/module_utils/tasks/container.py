# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The container of a job: its name, its labels and its ``docker run`` options.

Part of the rank plan (tasks.rankplan). Pure functions, no I/O
(docs/reference/dstack-runtime.md#container-start). The labels are
the only record a run has: ``ps``, ``logs`` and ``stop`` read them back (tasks.listing). They
carry data, never text made for people: the job's resources and the GPU the task asked for are
stored as JSON, and render/run_table.py makes the table's text of them.
"""

from __future__ import annotations

import datetime
import json
from typing import Any, Mapping

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
ARRAY_LABEL = "gpufleet.array"             # the job array a run belongs to (tasks.array)
ARRAY_INDEX_LABEL = "gpufleet.array-index"
# How many runs the array has (a run after the array waits for all: automation.dependencies).
ARRAY_COUNT_LABEL = "gpufleet.array-count"
USER_LABEL = "gpufleet.user"               # who submitted the run (teams.identity)
# A service's replica: where the service is published (services.replicas), as JSON.
SERVICE_LABEL = "gpufleet.service"
SERVICE = "service"

# What the container runtime hands to the job on NVIDIA hosts. dstack also asks for "display"
# and "compat32"; "display" needs /dev/nvidia-modeset on the host (dstack retries without it when
# the device is missing, which a single `docker run` cannot do), and neither matters to compute
# jobs, so both are left out.
NVIDIA_CAPABILITIES = "compute,utility,graphics,video"
# What a replica's gpufleet.service label holds (services.replicas fills the proxy's part).
SERVICE_KEYS = ("port", "proxy_host", "proxy_address", "proxy_port", "url", "model_url",
                "model", "respawn")
# A service on a gateway also carries the gateway's name and whether it is served over HTTPS;
# one with replica groups their names and counts, in order (services.replicas.replica_groups).
GATEWAY_KEYS = ("gateway", "https")
# A replica of a service with replica groups: its group's name.
REPLICA_GROUP_LABEL = "gpufleet.replica-group"


def container_name(run_name_, job_num, replica=0):
    """``<run>-<job_num>-<replica>``, the job name dstack gives the container."""
    return "%s-%d-%d" % (run_name_, job_num, replica)


def job_container(config: Mapping[str, Any], run_name_: str, job_num: int) -> str:
    """The container of the run's job ``job_num``: a task's ``<run>-<job_num>-0``; a service's
    replica ``<run>-0-<replica>``, as dstack names a replica's job (each replica is job 0 of
    its own replica), the replica's number being the runner's job number."""
    if is_service(config):
        return container_name(run_name_, 0, job_num)
    return container_name(run_name_, job_num)


def is_service(config: Mapping[str, Any]) -> bool:
    """Whether ``config`` is a service's replicas as the runner takes them (the ``service``
    key services.replicas.runnable adds)."""
    return isinstance(config.get(SERVICE), dict)


def published_port(config: Mapping[str, Any], job: Mapping[str, Any]) -> list[str]:
    """``-p ADDR::PORT`` of a service's replica: the service's port published on its host's
    internal address, on a host port Docker picks (nodeside's status reports it); [] for a
    task, or a replica on the host's network (its port is the host's own)."""
    if not is_service(config) or job.get("whole_host"):
        return []
    address = job.get("internal_ip") or ""
    if ":" in address:
        address = "[%s]" % address
    return ["-p", "%s::%d" % (address, int(config[SERVICE]["port"]))]


# ---------------------------------------------------------------------------------------------
# The docker run options


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
    """The ``docker run`` options of one job (docs/reference/dstack-runtime.md#container-start),
    without ``-d``, image and command.

    Host-dependent flags (/dev/infiniband, hugepages) are left to the node side: see the job
    spec's ``conditional``. So are the job folder and volume mounts (see ``mounts``).
    """
    args = ["--name", job_container(config, run["name"], job["job_num"])]
    for key in sorted(labels):
        args += ["--label", "%s=%s" % (key, labels[key])]
    args += ["--network", "host" if job.get("whole_host") else "bridge"]
    args += published_port(config, job)
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
# Labels


def _iso(value):
    if value is None:
        return ""
    if isinstance(value, (int, float)):
        moment = datetime.datetime.fromtimestamp(value, datetime.timezone.utc)
        return moment.strftime("%Y-%m-%dT%H:%M:%SZ")
    return str(value)


def _json(value):
    return json.dumps(value, sort_keys=True, separators=(",", ":"))


def resources_of(job):
    """What a placed job was given, as data: cpus, memory and disk (MiB), and its GPUs' count,
    name, vendor and memory (MiB). The ``gpufleet.resources`` label holds it as JSON."""
    return {
        "cpus": job.get("cpus"),
        "memory_mib": job.get("memory_mib"),
        "disk_mib": job.get("disk_mib"),
        "gpu_count": len(job.get("gpus") or []),
        "gpu_name": job.get("gpu_name"),
        "gpu_vendor": job.get("gpu_vendor"),
        "gpu_memory_mib": job.get("gpu_memory_mib"),
    }


def _run_spec(config, jobs, job):
    """The ``gpufleet.run-spec`` label: what the run asked for and where it runs. ``gpu`` is the
    GPU requirement of the task's resources (docs/config-json.md), or None."""
    resources = job.get("resources") or config.get("resources")
    return _json(
        {
            "nodes": len(jobs),
            "gpu": (resources or {}).get("gpu"),
            "backend": job.get("backend"),
            "region": job.get("region"),
            "price": job.get("price"),
            "spot": job.get("spot"),
            "startup_order": config.get("startup_order"),
            "stop_criteria": config.get("stop_criteria"),
            "max_duration": config.get("max_duration"),
            "stop_duration": config.get("stop_duration"),
            "retry": config.get("retry"),
            # A scheduled task's cron times (its hosts start it: tasks.hostside.scheduleside).
            "schedule": (config.get("schedule") or {}).get("cron"),
            # Where every job of the run is: a job whose host is gone is known from the others.
            "hosts": [j.get("host") for j in sorted(jobs, key=lambda j: j["job_num"])],
            # What gpufleet attach forwards, and who it logs in as (tasks/attach).
            "ports": config.get("ports") or [],
            "user": config.get("user"),
            # task, dev-environment (tasks.devenv) or service (services.replicas), for ps;
            # a dev environment's IDE.
            "type": config.get("run_type") or "task",
            "ide": config.get("ide"),
        }
    )


def labels_of(config, run, jobs, job, replica=0):
    """The container's labels (all strings): the run record ``ps`` reads back."""
    labels = {
        RUN_LABEL: str(run["name"]),
        RUN_ID_LABEL: str(run.get("id") or ""),
        JOB_LABEL: str(job["job_num"]),
        # A service's replica number is its job number (job_container).
        REPLICA_LABEL: str(job["job_num"] if is_service(config) else replica),
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
        RESOURCES_LABEL: _json(resources_of(job)),
    }
    if run.get("user"):
        labels[USER_LABEL] = str(run["user"])
    if is_service(config):
        service = config[SERVICE]
        labels[SERVICE_LABEL] = _json(dict(
            [(key, service.get(key)) for key in SERVICE_KEYS]
            + [(key, service[key]) for key in GATEWAY_KEYS if service.get("gateway")]
            + ([("groups", service["groups"])] if service.get("groups") else [])))
        if service.get("groups") and job.get("group") is not None:
            labels[REPLICA_GROUP_LABEL] = str(job["group"])
    if run.get("array"):
        labels[ARRAY_LABEL] = str(run["array"]["name"])
        labels[ARRAY_INDEX_LABEL] = str(run["array"]["index"])
        if run["array"].get("count"):
            labels[ARRAY_COUNT_LABEL] = str(run["array"]["count"])
    return labels
