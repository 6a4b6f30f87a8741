# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Listing runs, their logs and metrics, and stopping them: from the containers' labels and
state files.

A run has no record but its containers (tasks.container writes their labels), so each
operation here asks the hosts for their task containers (tasks.surveys.survey) and rebuilds the
run records from what they carry. The records hold data: the job's resources and the GPU the
task asked for come as labels wrote them, and render/run_table.py makes the ``ps`` table's text.
Labels written by earlier versions, which held that text already, are read as they are.
"""

from __future__ import annotations

import json
import os
import time
from typing import Any

from ..core.text import shorten
from . import lifecycle, queue_records, surveys
from .lifecycle import JobStatus, RunStatus
from .container import (
    REPLICA_GROUP_LABEL,
    REPLICA_LABEL,
    RESOURCES_LABEL,
    RUN_SPEC_LABEL,
    SERVICE_LABEL,
    USER_LABEL,
)
from .errors import RunError
from .records import JobRecord, RunRecord
from .ssh import missing_key, parallel
from .supervisor import JOB_LABEL, RUN_LABEL, SUBMISSION_LABEL, Watch


def _asked(labels):
    """What the run asked for: its gpufleet.run-asked label (tasks.container), parsed."""
    try:
        value = json.loads(labels.get(RUN_SPEC_LABEL) or "{}")
    except ValueError:
        value = {}
    return value if isinstance(value, dict) else {}


def job_resources(labels):
    """The ``gpufleet.resources`` label: the job's resources as data (tasks.container
    .resources_of), or, from a container labelled by an earlier version, the text it held."""
    text = labels.get(RESOURCES_LABEL) or ""
    if text.startswith("{"):
        try:
            value = json.loads(text)
        except ValueError:
            return text
        if isinstance(value, dict):
            return value
    return text


def _submission_of(entry):
    return int(entry["labels"].get(SUBMISSION_LABEL) or 0)


def _job_num(entry):
    try:
        return int(entry["labels"].get(JOB_LABEL))
    except (TypeError, ValueError):
        return -1


def run_records(containers: dict[str, list[dict[str, Any]]], errors: dict[str, str] | None = None,
                instances: dict[str, Any] | None = None,
                silent: dict[str, float] | None = None) -> list[RunRecord]:
    """Run records from the task containers of every host (``{host: [containers]}``).

    A record: name, run_id, submission, submitted, status, reason, fleet, backend, region,
    price, spot, gpu, nodes, array (the job array's name, or None), user (who submitted it:
    its ``gpufleet.user`` label, None for a run made before runs named their user), and jobs (job_num, host, container, status, reason, exit_code,
    started_at, finished_at, gpus, resources), newest run first. The run's status is decided
    from its jobs by the same rules as while it runs (tasks.lifecycle). ``gpu`` is the GPU
    requirement of the task's resources and a job's ``resources`` what it was given (see
    job_resources), both data; from containers of an earlier version, both are the text the
    table shows. ``instances`` (``{host: instance record}``, tasks.interruption.instance_map)
    and ``silent`` (``{host: seconds it has not answered}``, tasks.silence) judge the jobs of
    hosts in ``errors``; without ``instances`` they are left out.
    """
    by_run: dict[str, list[dict[str, Any]]] = {}
    for host, entries in containers.items():
        for entry in entries:
            name = entry["labels"].get(RUN_LABEL)
            if name:
                by_run.setdefault(name, []).append(dict(entry, host=host))
    records: list[RunRecord] = []
    for name, entries in by_run.items():
        # A scheduled run's schedule is every job's, also one whose host missed the latest
        # firing (its entry is of an earlier submission).
        schedule = schedule_of(entries)
        latest = max(_submission_of(e) for e in entries)
        entries = sorted((e for e in entries if _submission_of(e) == latest), key=_job_num)
        # Replicas a scale-down took away are not the service's any more (tasks.lifecycle);
        # their number may be a live replica's again, elsewhere.
        entries = [e for e in entries if (e.get("files") or {}).get("reason") !=
                   lifecycle.SCALED_DOWN] or entries
        # The newest shape of the run: a service scaled up has replicas made for more jobs
        # than its first ones were (their labels say how many, and where each one is); one
        # scaled down has its count noted beside its replicas (booking's ``recount``).
        labels = max(entries, key=lambda e: (_nodes_of(e, len(entries)), -_job_num(e)))[
            "labels"]
        asked = _asked(labels)
        statuses = dict((_job_num(e), lifecycle.job_status(e)) for e in entries)
        nodes = max(_nodes_of(e, len(entries)) for e in entries)
        lost = _lost_jobs(name, asked, nodes, statuses, containers, instances, silent or {})
        for num in range(nodes):
            statuses.setdefault(num, (JobStatus.SUBMITTED.value, None, None))
        decision = lifecycle.decide({"stop_criteria": asked.get("stop_criteria"),
                                     "startup_order": asked.get("startup_order"),
                                     "service": asked.get("type") == "service",
                                     "respawn": bool((service_of(labels, 0) or {}).get(
                                         "respawn"))}, statuses)
        run_status, run_reason = decision.status, decision.reason
        if schedule and not any(JobStatus(s[0]).is_up() for s in statuses.values()):
            # Between firings a scheduled run waits; a user's stop ends it (dstack's).
            run_status, run_reason = (
                (RunStatus.TERMINATED.value, lifecycle.TERMINATED_BY_USER) if schedule["stopped"]
                else (RunStatus.PENDING.value, lifecycle.WAITING_FOR_SCHEDULE))
        jobs: list[JobRecord] = []
        for entry in entries:
            status = statuses[_job_num(entry)]
            jobs.append({
                "job_num": _job_num(entry), "host": entry["host"], "container": entry["name"],
                "status": status[0], "reason": status[1], "exit_code": status[2],
                "started_at": entry.get("started_at"), "finished_at": entry.get("finished_at"),
                "gpus": [g for g in (entry["labels"].get("gpufleet.gpus") or "").split(",") if g],
                "resources": job_resources(entry["labels"]),
                # A service's replica: its number, and the host port it answers on.
                "replica": _int_or(entry["labels"].get(REPLICA_LABEL), 0),
                # Its replica group's name (a service with replica groups), else None.
                "group": entry["labels"].get(REPLICA_GROUP_LABEL) or None,
                "published": entry.get("published") or None,
            })
        jobs += lost
        jobs.sort(key=lambda j: j["job_num"])
        records.append({
            # Why a job never ran (its container could not be made) or its host is lost.
            "message": next((m for m in [e.get("setup_error") for e in entries] +
                             [j.get("message") for j in lost] if m), None),
            "name": name,
            "type": asked.get("type") or "task",
            "run_id": labels.get("gpufleet.run-id"),
            "submission": latest,
            "submitted": labels.get("gpufleet.submitted"),
            "status": run_status,
            "reason": run_reason,
            "fleet": labels.get("gpufleet.fleet"),
            "backend": asked.get("backend"),
            "region": asked.get("region"),
            "price": asked.get("price"),
            "spot": asked.get("spot"),
            "gpu": asked.get("gpu"),
            "nodes": nodes,
            "array": labels.get("gpufleet.array"),
            "array_count": _int_or(labels.get("gpufleet.array-count"), None),
            "user": labels.get(USER_LABEL) or None,
            "stop_criteria": asked.get("stop_criteria"),
            "startup_order": asked.get("startup_order"),
            "service": service_of(labels, nodes, _moved(entries)),
            "schedule": schedule,
            "jobs": jobs,
        })
    records.sort(key=lambda r: (r["submitted"] or "", r["name"]), reverse=True)
    return records


def run_hosts(containers: dict[str, list[dict[str, Any]]], name: str) -> list[str]:
    """The hosts run ``name`` is on, from a survey (``{host: [containers]}``): those that
    have any of its jobs (of any submission), and those its jobs were placed on (their labels
    say, so that a host that did not answer is known too)."""
    hosts = set()
    for host, entries in containers.items():
        for entry in entries:
            if entry["labels"].get(RUN_LABEL) == name:
                hosts.add(host)
                hosts.update(h for h in _asked(entry["labels"]).get("hosts") or [] if h)
    return sorted(hosts)


def schedule_of(entries: list[dict[str, Any]]) -> dict[str, Any] | None:
    """A scheduled task's schedule as its jobs' hosts keep it (tasks.hostside.scheduleside:
    ``files["schedule"]``), one for the run: its next firing the soonest of its jobs', stopped
    when every job's is; None for a run without one."""
    kept = [k for k in ((e.get("files") or {}).get("schedule") for e in entries)
            if isinstance(k, dict)]
    if not kept:
        return None
    upcoming = [k["next"] for k in kept if isinstance(k.get("next"), (int, float))]
    last = [k["last"] for k in kept if isinstance(k.get("last"), (int, float))]
    hosts = sorted(set(str(e["host"]) for e in entries if e.get("host") and lifecycle.armed(e)))
    return {"cron": list(kept[0].get("cron") or []),
            "hosts": hosts,   # the hosts that keep it for firings to come
            "next": min(upcoming) if upcoming else None,
            "firings": max(_int_or(k.get("firings"), 0) for k in kept),
            "last": max(last) if last else None,
            "stopped": all(bool(k.get("stopped")) for k in kept),
            "waiting": next((str(k["waiting"]) for k in kept if k.get("waiting")), None),
            # Why the last firing of a job could not start its container, if it could not.
            "error": next((str(k["error"]) for k in kept if k.get("error")), None)}


def _written(entry):
    return (float(entry.get("submitted_epoch") or 0), float(entry.get("written_at") or 0))


def with_queue(records, queues, usage=None):
    """The run records with what the queue entries (tasks.queue) add: a pending run (waiting for
    capacity, or to be resubmitted) with its place in the queue, and one whose wait ended
    (failed for no capacity, or stopped) before it ever ran."""
    newest = {}
    for host, entry in queue_records.entries_of(queues):
        # The same name on two queue hosts (the queue host changed, or an old one came back
        # with an entry handed over since: tasks.queue_mirror): the newest entry counts.
        key = entry.get("run")
        if key not in newest or _written(entry) > _written(newest[key][1]):
            newest[key] = (host, entry)
    entries = list(newest.values())
    places = queue_records.positions(entries, usage)
    by_name = dict((r["name"], r) for r in records)
    out = list(records)
    for host, entry in entries:
        state = entry.get("state")
        if state == queue_records.SCHEDULED:
            continue   # the run's hosts say what it is; the entry re-arms it (tasks.queue)
        if state == queue_records.ACTIVE:
            if entry["run"] in by_name:
                by_name[entry["run"]]["retry_kept_on"] = host
            continue
        status = {queue_records.PENDING: RunStatus.PENDING.value,
                  queue_records.FAILED: RunStatus.FAILED.value,
                  queue_records.TERMINATED: RunStatus.TERMINATED.value}.get(state, state)
        # A pending run says why it waits when that is not capacity: its owner's cap, or the
        # runs it runs after (automation.dependencies), which it carries too.
        extra = {"status": status, "queued_on": host, "priority": entry.get("priority") or 0,
                 "queue_position": places.get(entry["run"]),
                 "reason": entry.get("reason") if state != queue_records.PENDING or entry.get(
                     "reason") == queue_records.USER_LIMIT or entry.get("after") else None,
                 "message": entry.get("message") or entry.get("reason"),
                 "after": entry.get("after") or None}
        record = by_name.get(entry["run"])
        if record is not None and record.get("run_id") == entry.get("run_id"):
            if state == queue_records.PENDING:   # its failed submission went; the next one waits
                record.update(extra, submission=entry.get("submissions"))
            continue
        if record is not None and record in out:
            out.remove(record)   # a run of that name that ended, replaced by this one
        out.append(dict(extra, name=entry["run"], run_id=entry.get("run_id"),
                        submission=entry.get("submissions") or 0,
                        submitted=entry.get("submitted_at"), fleet=None, backend=None,
                        region=None, price=None, spot=None, gpu=None,
                        nodes=entry.get("nodes"), array=(entry.get("array") or {}).get("name"),
                        array_count=(entry.get("array") or {}).get("count"),
                        user=entry.get("user") or None, jobs=[]))
    out.sort(key=lambda r: (r["submitted"] or "", r["name"]), reverse=True)
    return out


def of_user(records, user):
    """The records of the runs ``user`` submitted; all of them when ``user`` is None or empty
    (``gpufleet ps`` shows everyone's runs, as ``squeue`` does)."""
    if not user:
        return list(records)
    return [r for r in records if r.get("user") == user]


def _nodes_of(entry, default):
    """The job count of a job: its service's count since a scale-down when its host noted one
    (``files["replicas"]``), else its ``gpufleet.nodes`` label (``default`` without one)."""
    try:
        return int((entry.get("files") or {}).get("replicas") or
                   entry["labels"].get("gpufleet.nodes") or default)
    except ValueError:
        return default


def _int_or(text, default):
    try:
        return int(text)
    except (TypeError, ValueError):
        return default


def _moved(entries: list[dict[str, Any]]) -> dict[str, Any] | None:
    """Where a service is published since its proxy host was lost: the newest note beside its
    replicas (``files["proxy"]``, replicaside's ``repoint``), or None."""
    notes = [n for n in ((e.get("files") or {}).get("proxy") for e in entries)
             if isinstance(n, dict) and n.get("proxy_host")]
    return max(notes, key=lambda n: float(n.get("moved_at") or 0)) if notes else None


def service_of(labels: dict[str, str], replicas: int,
               moved: dict[str, Any] | None = None) -> dict[str, Any] | None:
    """A service's run record part, from its replicas' ``gpufleet.service`` label: ``{"url",
    "model_url", "proxy_host", "proxy_address", "port", "model", "replicas", "respawn",
    "gateway", "https", "moved_from"}`` (``gateway``: its name, None for the in-fleet proxy);
    None for a task. ``moved``: where it is published since its proxy host was lost (_moved),
    which takes the place of what the label says of its proxy."""
    try:
        service = json.loads(labels.get(SERVICE_LABEL) or "null")
    except ValueError:
        return None
    if not isinstance(service, dict):
        return None
    if moved:
        service = dict(service, **dict((k, moved.get(k)) for k in (
            "proxy_host", "proxy_address", "proxy_port", "url", "model_url", "moved_from")))
    return {"url": service.get("url"), "model_url": service.get("model_url"),
            "proxy_host": service.get("proxy_host"),
            "proxy_address": service.get("proxy_address"), "port": service.get("port"),
            "model": service.get("model"), "replicas": replicas,
            "respawn": bool(service.get("respawn")), "gateway": service.get("gateway"),
            "https": bool(service.get("https")), "moved_from": service.get("moved_from"),
            "groups": service.get("groups") or None}


def _lost_jobs(run, asked, nodes, statuses, answered, instances, silent):
    """Job entries of ``run`` on hosts that did not answer (their containers unseen: the host
    is silent, or its fleet no longer has it), judged by tasks.interruption from the host's
    record and how long it has been silent (``silent``); their statuses are added to
    ``statuses``."""
    from . import interruption
    from .container import container_name

    if instances is None:
        return []
    hosts = asked.get("hosts") or []
    lost = []
    for num in range(nodes):
        if num in statuses or num >= len(hosts) or hosts[num] in answered:
            continue
        host = hosts[num]
        quiet = silent.get(host) or 0
        verdict = interruption.judge(host, instances.get(host), quiet)
        if verdict is None:
            statuses[num] = (JobStatus.RUNNING.value, None, None)
            entry = {"status": JobStatus.RUNNING.value, "reason": None, "unreachable": True,
                     "message": "host %s does not answer%s" % (host, (
                         " (for %d s; its job fails after %d s)" % (
                             quiet, lifecycle.JOB_DISCONNECTED_GRACE)) if quiet >= 1 else "")}
        else:
            statuses[num] = (JobStatus.FAILED.value, verdict[0], None)
            entry = {"status": JobStatus.FAILED.value, "reason": verdict[0], "message": verdict[1]}
        name = container_name(run, 0, num) if asked.get("type") == "service" else (
            container_name(run, num))
        lost.append(dict(entry, job_num=num, host=host, container=name,
                         exit_code=None, started_at=None, finished_at=None, gpus=[],
                         resources=""))
    return lost


def list_runs(nodes, survey_result=None, instances=None, silent=None):
    """``(run records, {host: error})`` for every run on the hosts, queued ones included
    (``instances`` and ``silent``: see run_records)."""

    survey_result = survey_result or surveys.survey_with_queues(nodes)
    containers, _claims, queues, errors = survey_result
    # Queue positions in the order a pass tries them: fair share reads the hosts' usage.
    records = with_queue(run_records(containers, errors, instances, silent), queues,
                         queue_records.fleet_usage(surveys.usage_of(survey_result)))
    return records, dict((h, str(e)) for h, e in errors.items())


def unread_fleets(fleets, errors, root=None):
    """``{fleet name: {host: reason}}``: the fleets some of whose hosts could not be read
    (``errors``: ``{host: error}`` of a survey), so that a listing can say what it could not
    see instead of taking those hosts for idle (``gpufleet ps`` exits 1 then). Another
    controller's fleet (``not_ours``) is not this controller's to read, and is left out."""
    unread = {}
    for fleet in fleets:
        for instance in fleet.get("instances") or []:
            host = instance.get("name")
            if host in errors and not not_ours(instance, root):
                unread.setdefault(fleet.get("name") or "?", {})[host] = _reason(
                    host, errors[host])
    return unread


def not_ours(instance, root):
    """Whether ``instance`` is a local node another controller made, from another state dir,
    for which this one holds no key: a listing of this controller's runs does not try it or
    report it (its own fleet whose state dir was moved away keeps its label's path, and is
    reported as unread)."""
    made_from = instance.get("made_from")
    if not made_from or not root or os.path.abspath(made_from) == os.path.abspath(root):
        return False
    return bool(missing_key(instance, root))


def own_errors(fleets, errors, root=None):
    """``errors`` (``{host: error}``) without the hosts of other controllers' fleets."""
    foreign = set(i.get("name") for f in fleets for i in f.get("instances") or []
                  if not_ours(i, root))
    return dict((h, e) for h, e in errors.items() if h not in foreign)


def find_run(nodes, name, surveyed=None, queues=None):
    """``(record, {host: containers})`` of run ``name``, from the hosts (or from ``surveyed``,
    what tasks.surveys.survey answered); with ``queues`` (the survey's queue entries) a run that
    waits in the queue is found too, with no containers. RunError if no host has it."""
    containers, errors = surveyed or surveys.survey(nodes)
    mine = dict((h, [c for c in entries if c["labels"].get(RUN_LABEL) == name])
                for h, entries in containers.items())
    mine = dict((h, c) for h, c in mine.items() if c)
    records = run_records(mine) if mine else []
    if queues:
        records = [r for r in with_queue(records, queues) if r["name"] == name]
    if not records:
        where = "; unreachable: %s" % ", ".join(sorted(errors)) if errors else ""
        raise RunError("no run named %s on the fleets' hosts%s (gpufleet ps lists runs)"
                       % (shorten(name), where))
    return records[0], mine


def stop_run(nodes, name, abort=False, surveyed=None, by=None):
    """Stop every live job of run ``name`` (``terminated_by_user``); return the run record.
    ``by``: who stops it, for the hosts' event record (tasks.hostside.eventside).

    A graceful stop gives each job stop_duration seconds after TERM; ``abort`` kills at once.
    ``surveyed``: what tasks.surveys.survey answered a moment ago, instead of asking again.
    """
    record, mine = find_run(nodes, name, surveyed)

    def up(c):
        return lifecycle.job_status(c)[0] in JobStatus.up_statuses() and \
            _submission_of(c) == record["submission"]

    # While a job of the run is up, a job that ended with its container still there is
    # stopped too: job 0 of a multi-node run waits there for the others' ends
    # (tasks.hostside.wrapper_peers), and the stop ends its wait.
    live = any(up(c) for found in mine.values() for c in found)

    def stop(host):
        jobs = [c for c in mine[host]
                if up(c) or live and lifecycle.holds_host(c) and
                _submission_of(c) == record["submission"] or
                # a scheduled job, of any firing: its host ends its schedule (scheduleside)
                lifecycle.armed(c)]
        if not jobs:
            return []
        timeout = 0 if abort else max(int(_asked(c["labels"]).get("stop_duration") or 0)
                                      for c in jobs)
        answer = nodes[host].call("stop", {
            "reason": lifecycle.TERMINATED_BY_USER, "timeout": timeout, "by": by,
            "jobs": [{"run": name, "job_num": _job_num(c), "container": c["name"]}
                     for c in jobs]}, timeout=timeout + 60)
        return answer["stopped"]

    stopped = []
    for host, (value, error) in sorted(parallel(sorted(mine), stop).items()):
        if error is not None:
            raise RunError(str(error)) from error
        stopped += value
    # The record as it is now: only the run's own hosts are asked.
    after, _mine = find_run(dict((h, nodes[h]) for h in mine), name)
    after["stopped"] = sorted(stopped)
    return after


def delete_run(nodes, record, hosts, queues):
    """Remove a stopped run from ``hosts`` (``gpufleet delete -f`` of its file): its
    containers, folders and schedules, and its entries in the queues (the failed or active
    one ps would list it by); the hosts that removed it."""
    name = record["name"]
    answers = parallel(hosts, lambda h: nodes[h].call("remove", {"run": name}))
    kept = [h for h, entry in queue_records.entries_of(queues or {})
            if entry.get("run") == name and entry.get("run_id") == record.get("run_id")]
    answers.update(("%s (queue)" % h, answer) for h, answer in parallel(
        kept, lambda h: nodes[h].call("dequeue", {"run": name,
                                                  "run_id": record.get("run_id")})).items())
    failed = ["%s: %s" % (h, e) for h, (_a, e) in sorted(answers.items()) if e is not None]
    if failed:
        raise RunError("run %s was stopped, but not removed from %s; delete it again"
                       % (name, "; ".join(failed)))
    return sorted(set(hosts) | set(kept))


def delete_queued(nodes, answer, check_mode):
    """``delete`` of a run that is only a queue entry: the entry taken off its host."""
    record = answer["run"]
    if not check_mode:
        nodes[record["queued_on"]].call("dequeue", {"run": record["name"],
                                                    "run_id": record["run_id"]})
    return {"run": dict(record, deleted=[record["queued_on"]]), "changed": True}


def run_logs(nodes, name, tail=None, job=None, since=None):
    """The output of every job of run ``name``'s latest submission (or of ``job``) as its
    hosts keep it (tasks.joblogs): ``(record, [(rank, line), ...])`` in rank order, lines
    read lazily (the second item is an iterator)."""
    from . import joblogs

    # One request per host finds the run and brings its jobs' first pages (tasks.hostside.logside).
    firsts = {}
    containers, _claims, queues, errors = surveys.survey_with_queues(
        nodes, logs=joblogs.first_request(name, job=job, since=since, tail=tail),
        pages=firsts)
    # A run waiting in the queue has printed nothing yet: its logs are empty, as in dstack.
    record, _mine = find_run(nodes, name, (containers, errors), queues)
    try:
        found = joblogs.lines(nodes, record, job=job, since=since, tail=tail, firsts=firsts)
        first = next(found, None)   # a missing job or a silent host is an error now
    except joblogs.LogsError as exc:
        raise RunError(str(exc)) from exc

    def rest():
        if first is None:
            return
        yield first
        try:
            yield from found
        except joblogs.LogsError as exc:
            raise RunError(str(exc)) from exc

    return record, rest()


def run_metrics(nodes, name, job=None):
    """Run ``name``'s metrics (tasks.metrics.run_metrics): one ``metrics`` request per host,
    every host at once, each answering with its containers and their jobs' last hour."""
    from . import metrics

    # Each host cuts each job's file at an hour before that job's newest sample (a job that
    # ended keeps its last hour); tasks.metrics cuts again at the run's newest.
    answers = parallel(sorted(nodes), lambda h: nodes[h].call(
        "metrics", {"run": name, "window": metrics.WINDOW}))
    containers, errors, texts = {}, {}, {}
    for host, (answer, error) in answers.items():
        if error is not None:
            errors[host] = error
            continue
        containers[host] = answer.get("containers") or []
        for num, text in (answer.get("metrics") or {}).items():
            texts[(host, int(num))] = text
    record, _mine = find_run(nodes, name, (containers, errors))
    if job is not None and job not in [j["job_num"] for j in record["jobs"]]:
        raise RunError("run %s has no job %d (jobs: %s)" % (
            name, job, ", ".join(str(j["job_num"]) for j in record["jobs"])))
    mine = dict((j["job_num"], texts.get((j["host"], j["job_num"])) or "")
                for j in record["jobs"])
    result = metrics.run_metrics(record, mine, job)
    result["unreachable_hosts"] = dict((h, str(e)) for h, e in errors.items())
    return result


QUEUE_POLL = 5.0


def _started(nodes, name, emit, sleep):
    """``find_run`` of a run that may still wait in the queue: until its containers are made
    (or its wait ends), say where it waits once and look again every QUEUE_POLL seconds."""

    said = False
    while True:
        containers, _claims, queues, errors = surveys.survey_with_queues(nodes)
        record, mine = find_run(nodes, name, (containers, errors), queues)
        if mine or record.get("status") != RunStatus.PENDING:
            return record, mine
        if not said:
            emit({"kind": "info", "message": "pending (queue position %s on %s): waiting for "
                  "it to start" % (record.get("queue_position") or "?", record.get("queued_on"))})
            said = True
        sleep(QUEUE_POLL)


def follow_logs(nodes, name, emit, poll=1.0, sleep=time.sleep, clock=time.time, job=None,
                since=None):
    """Attach to run ``name``: stream its logs (``emit({"kind": "log", "rank", "lines"})``;
    only ``job``'s, unprefixed, when given; from ``since``, epoch seconds) and
    supervise it as the runner does (a failed job stops the others, master-done, a stop asked
    meanwhile) until it ends; return the final run record.

    A detached run also supervises itself (tasks.hostside.wrapper: a job that ends the run asks the
    others to stop over the run's SSH); retry cannot resubmit from here, so a failure ends the
    run failed.
    """
    record, mine = _started(nodes, name, emit, sleep)
    if not mine:
        return record   # its wait in the queue ended before it started
    latest = [c for entries in mine.values() for c in entries
              if _submission_of(c) == record["submission"]]
    asked = _asked(latest[0]["labels"])
    jobs = [{"job_num": j["job_num"], "host": j["host"], "container": j["container"],
             "run": name, "submission": record["submission"],
             "stop_duration": asked.get("stop_duration") or 0} for j in record["jobs"]]
    policy = {"startup_order": asked.get("startup_order"),
              "stop_criteria": asked.get("stop_criteria"), "retry": None,
              "service": asked.get("type") == "service"}
    if job is not None and job not in [j["job_num"] for j in jobs]:
        raise RunError("run %s has no job %d (jobs: %s)" % (
            name, job, ", ".join(str(j["job_num"]) for j in jobs)))
    watch = Watch(jobs, dict((j["host"], nodes[j["host"]]) for j in jobs), policy, emit,
                  clock=clock, sleep=sleep, poll=poll,
                  follow_logs={"job": job, "since": since, "raw": job is not None})
    watch.started.update(j["job_num"] for j in jobs)
    watch.watch()
    return find_run(nodes, name)[0]


def runs_alive(record, root):
    """``({instance name: {run names}}, {instance name: reason})``: the runs with a job still
    alive on each instance of the fleet record, asked of its hosts as ``gpufleet ps`` asks
    them, and the instances that could not be asked, with why. An instance is busy, idle or
    unknown: one that could not be asked is never taken for idle (a short wait: a host that
    does not answer should not hold up the command long)."""
    nodes = surveys.nodes_of([record], root, connect_timeout=5)
    if not nodes:
        return {}, {}
    found, unreachable = list_runs(nodes)
    using = {}
    for run in found:
        for job in run["jobs"]:
            if job["status"] in JobStatus.up_statuses() and job["host"] not in unreachable:
                using.setdefault(job["host"], set()).add(run["name"])
        # A host that keeps a scheduled run's job for its firings is using it too.
        for host in (run.get("schedule") or {}).get("hosts") or []:
            if host not in unreachable:
                using.setdefault(host, set()).add(run["name"])
    return using, dict((h, _reason(h, e)) for h, e in unreachable.items())


def _reason(host, error):
    """A NodeError's text without the host's name it starts with."""
    text = str(error)
    prefix = "%s: " % host
    return text[len(prefix):] if text.startswith(prefix) else text
