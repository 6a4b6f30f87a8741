# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Run records as text: dstack's ``dstack ps`` table, and one line per job of a run.

Pure Python, used by the ``gpufleet.cluster.run_table`` and ``run_job_lines`` filters and the
``gpufleet`` command. Input is the run record of tasks.listing.run_records (``gpufleet_runs``).
Its ``gpu`` and each job's ``resources`` are data (the GPU requirement of the task, what the
job was given) that run_gpu and run_resources turn into text here; records of runs started by
an earlier version hold that text already, and it is shown as it is.
"""

from __future__ import annotations

from ..tasks.records import JobRecord, RunRecord
from .fleet_table import (
    FleetTableError,
    _mib_as_gb,
    _render,
    fleet_gpu,
    format_price,
    pretty_date,
    pretty_resources,
)
import datetime
import time
from typing import Any

COLUMNS = ("NAME", "USER", "BACKEND", "GPU", "PRICE", "STATUS", "SUBMITTED")
VERBOSE_COLUMNS = (
    "NAME", "USER", "BACKEND", "RESOURCES", "INSTANCE TYPE", "PRICE", "STATUS", "SUBMITTED",
    "ERROR",
)
JOB_INDENT = "   "


def _backend(run):
    backend = run.get("backend")
    if not backend:
        return ""
    return "%s (%s)" % (backend, run.get("region") or "-")


def _price(run):
    text = format_price(run.get("price"))
    if text and run.get("spot"):
        text += " (spot)"
    return text


def _job_status(job):
    status = job.get("status") or ""
    if status == "failed" and job.get("exit_code") not in (None, 0):
        return "%s (%s)" % (status, job["exit_code"])
    return status


def _error(item):
    schedule = item.get("schedule") if isinstance(item.get("schedule"), dict) else {}
    if item.get("status") == "pending" and schedule:
        # A scheduled task between its firings (dstack apply's "Next run").
        if schedule.get("waiting"):
            return "firing waits: %s" % schedule["waiting"]
        if schedule.get("error"):
            return "last firing failed: %s" % schedule["error"]
        if isinstance(schedule.get("next"), (int, float)):
            return "next run %s" % time.strftime("%Y-%m-%d %H:%M UTC",
                                                 time.gmtime(schedule["next"]))
    if item.get("status") == "pending" and item.get("reason") == "dependency":
        return "dependency"   # waiting for other runs to end (squeue's "(Dependency)")
    if item.get("status") == "pending" and item.get("queue_position"):
        # A run held back by its owner's per-user cap (tasks.admission) says so.
        why = "user limit" if item.get("reason") == "user limit" else "no capacity"
        return "%s, queue #%d" % (why, item["queue_position"])
    reason = item.get("reason")
    if not reason or reason in ("all_jobs_done", "done_by_runner"):
        return ""
    return reason.upper() if item.get("jobs") is not None else reason.replace("_", " ")


def _job_error(job):
    if job.get("status") == "done":
        return ""
    if job.get("unreachable") and not job.get("reason"):
        return "host not answering"   # its verdict waits (tasks.interruption)
    return (job.get("reason") or "").replace("_", " ")


def run_table(runs: list[RunRecord], now: datetime.datetime | None = None,
              verbose: bool = False) -> list[str]:
    """The lines of ``dstack ps`` (``verbose``: ``-v``): a row per run, newest first; a run of
    several jobs is followed by a row per job (``   job=N``; a service's ``   replica=N``), a
    single-job run is one row.
    USER is who submitted the run (``-`` for a run made before runs named their user)."""
    if not isinstance(runs, (list, tuple)):
        raise FleetTableError("expected a list of run records, got %s" % type(runs).__name__)
    columns = VERBOSE_COLUMNS if verbose else COLUMNS
    rows = []
    for run in runs:
        if not isinstance(run, dict) or not run.get("name"):
            raise FleetTableError("a run record needs a name: %r" % (run,))
        jobs = run.get("jobs") or []
        name = run["name"]
        if verbose and run.get("type") not in (None, "task"):
            name = "%s (%s)" % (name, run["type"])   # a dev environment says so
            proxy = (run.get("service") or {}).get("proxy_host")
            if proxy:   # a service, and where it is proxied
                name = "%s (service via %s)" % (run["name"], proxy)
        row = {"NAME": name, "USER": run.get("user") or "-", "STATUS": run.get("status") or "",
               "SUBMITTED": pretty_date(run.get("submitted"), now), "ERROR": _error(run)}
        if len(jobs) <= 1:
            row.update(BACKEND=_backend(run), GPU=run_gpu(run.get("gpu")) or "-",
                       PRICE=_price(run),
                       RESOURCES=run_resources(jobs[0].get("resources") if jobs else ""),
                       **{"INSTANCE TYPE": (jobs[0].get("host") if jobs else "") or ""})
            if jobs and run.get("status") == "failed":
                row["STATUS"] = _job_status(jobs[0]) or row["STATUS"]
            if jobs and jobs[0].get("unreachable") and not row["ERROR"]:
                row["ERROR"] = _job_error(jobs[0])
            rows.append(row)
            continue
        rows.append(row)
        names = _job_names(run, jobs)
        for job, job_name in zip(jobs, names):
            rows.append({
                "NAME": job_name,
                "BACKEND": _backend(run),
                "GPU": run_gpu(job.get("gpu")) or run_gpu(run.get("gpu")) or "-",
                "RESOURCES": run_resources(job.get("resources")), "PRICE": _price(run),
                "INSTANCE TYPE": job.get("host") or "",
                "STATUS": _job_status(job), "SUBMITTED": "",
                "ERROR": _job_error(job),
            })
    return _render(columns, rows)


def _job_names(run: RunRecord, jobs: list[JobRecord]) -> list[str]:
    """The NAME of each job row: ``job=N``; a service's replicas ``replica=N``, as dstack ps
    shows them, and with replica groups ``group=I replica=N`` at the first replica of each group
    (I: the group's place in the file), the next ones of the group aligned under ``replica=``."""
    if run.get("type") != "service":
        return ["%sjob=%s" % (JOB_INDENT, job.get("job_num")) for job in jobs]
    order = [g.get("name") for g in (run.get("service") or {}).get("groups") or []]
    names, last = [], None
    for job in jobs:
        replica = "replica=%s" % job.get("replica", job.get("job_num"))
        index = order.index(job["group"]) if job.get("group") in order else None
        if index is None:
            names.append(JOB_INDENT + replica)
        elif index != last:
            names.append("%sgroup=%d %s" % (JOB_INDENT, index, replica))
        else:
            names.append(" " * len("%sgroup=%d " % (JOB_INDENT, index)) + replica)
        last = index
    return names


def service_lines(service: dict[str, Any] | None, model: str | None = None) -> list[str]:
    """dstack apply's lines for a published service: ``Service is published at:`` and its URL
    on the next line, and with a model ``Model NAME is published at:`` and the model URL."""
    if not service or not service.get("url"):
        return []
    lines = ["Service is published at:", "  %s" % service["url"]]
    if service.get("model_url"):
        lines += ["Model %s is published at:" % (model or service.get("model") or ""),
                  "  %s" % service["model_url"]]
    return lines


def job_lines(jobs: list[dict[str, Any]] | None, run: str | None = None) -> list[str]:
    """``<run> job N on HOST (IP): STATUS [exit code, reason]`` for each job of a run."""
    lines = []
    for job in jobs or []:
        text = "%s job %s on %s" % (run or "run", job.get("job_num"), job.get("host"))
        if job.get("internal_ip"):
            text += " (%s)" % job["internal_ip"]
        text += ": %s" % (job.get("status") or "unknown")
        details = []
        if job.get("exit_code") is not None:
            details.append("exit code %s" % job["exit_code"])
        if job.get("reason"):
            details.append(job["reason"])
        if details:
            text += " (%s)" % ", ".join(details)
        lines.append(text)
    return lines


def _resources(item, gpu_count):
    parts = ["cpu=%s" % item.get("cpus"), "mem=" + _mib_as_gb(item.get("memory_mib") or 0),
             "disk=" + _mib_as_gb(item.get("disk_mib") or 0)]
    if gpu_count:
        gpu = [str(item.get("gpu_name") or item.get("gpu_vendor") or "gpu")]
        if item.get("gpu_memory_mib"):
            gpu.append(_mib_as_gb(item["gpu_memory_mib"]))
        gpu.append(str(gpu_count))
        parts.append("gpu=" + ":".join(gpu))
    return " ".join(parts)


def job_resources(job: dict[str, Any]) -> str:
    """A placed job's resources as dstack's run plan shows them:
    ``cpu=2 mem=24GB disk=70GB gpu=H100:80GB:8``."""
    return _resources(job, len(job.get("gpus") or []))


def run_resources(value: dict[str, Any] | str | None) -> str:
    """A run record's job ``resources`` as text, as job_resources shows the placed job: from the
    data the ``gpufleet.resources`` label holds (tasks.container.resources_of), or the text an
    earlier version's label held, as it is."""
    if isinstance(value, dict):
        return _resources(value, value.get("gpu_count") or 0)
    return value or ""


def run_gpu(value: Any) -> str:
    """A run record's ``gpu`` as the GPU column shows it (``H100:80GB:8``, blank without GPUs):
    from the task's GPU requirement (docs/config-json.md), or the text of an earlier version's
    label, as it is."""
    if isinstance(value, dict):
        return fleet_gpu({"gpu": value})
    return value or ""


def _duration(value):
    if value in (None, "off"):
        return "off"
    value = int(value)
    for unit, size in (("w", 604800), ("d", 86400), ("h", 3600), ("m", 60)):
        if value and value % size == 0:
            return "%d%s" % (value // size, unit)
    return "%ds" % value


def _retry(retry):
    if not retry:
        return "off"
    return "%s[%s]" % (_duration(retry.get("duration")), ", ".join(retry.get("on_events") or []))


def _creates(create):
    """The plan's line for instances a run makes its fleet grow by (tasks.growth), or ""."""
    if not create:
        return ""
    count = create["instances"]
    limit = (create.get("made_for") or {}).get("idle_duration")
    kept = ""
    if limit == "off":
        kept = "; kept when idle"
    elif limit is not None:
        kept = "; removed after %s idle" % _duration(limit)
    return "%d new instance%s in fleet %s (%s, %s/h each%s)" % (
        count, "" if count == 1 else "s", create["fleet"], create.get("backend") or "-",
        format_price(create.get("price")) or "$0", kept)


def run_plan_lines(config: dict[str, Any], plan: dict[str, Any],
                   path: str | None = None) -> list[str]:
    """What submitting a task does, as ``dstack apply`` shows it before asking
    (docs/reference/dstack-runtime.md#run-plan): the header, then the host each job is placed on."""
    header = [
        ("Configuration", path or ""),
        # As dstack: a task's node count; a dev environment and a service are named only.
        ("Type", config["type"] if config.get("type") in ("dev-environment", "service")
         else "task (nodes=%d)" % len(plan["jobs"])),
        ("Fleet", plan.get("fleet") or ""),
        ("Resources", pretty_resources(config.get("resources"))),
        ("Spot policy", config.get("spot_policy") or "on-demand"),
        ("Max price", format_price(config.get("max_price")) or "off"),
        ("Retry policy", _retry(config.get("retry"))),
        ("Max duration", _duration(config.get("max_duration"))),
        # dstack shows it for dev environments only.
        ("Inactivity duration", _duration(config.get("inactivity_duration"))
         if config.get("type") == "dev-environment" else ""),
        ("Creates", _creates(plan.get("create"))),
    ]
    width = max(len(k) for k, v in header if v != "")
    lines = [("%s  %s" % (k.ljust(width), v)).rstrip() for k, v in header if v != ""]
    lines.append("")
    rows = []
    for job in plan["jobs"]:
        instance = job.get("host") or ""
        if instance.startswith("new:"):
            instance = instance[len("new:"):] + " (new)"
        if job.get("total_blocks", 1) > 1:
            instance += " (%s/%s)" % (job.get("blocks"), job["total_blocks"])
        rows.append({"#": str(job["job_num"]),
                     "BACKEND": "%s (%s)" % (job.get("backend"), job.get("region") or "-"),
                     "RESOURCES": job_resources(job), "INSTANCE": instance,
                     "PRICE": format_price(job.get("price")) or "$0"})
    lines += _render(("#", "BACKEND", "RESOURCES", "INSTANCE", "PRICE"), rows)
    return lines
