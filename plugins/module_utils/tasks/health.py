# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Refreshing the GPU health of fleet hosts, as dstack's server checks its instances in the
background: ask the hosts (tasks.hostside.healthside), judge (hosts.health), keep it in the facts
cache.

The health lives in each host's cached facts (fleets/state.py's ``facts.json``), next to what
the last apply measured, so task placement, which reads that cache, uses the refreshed health:

    health              healthy, warning or failure (the key the dcgm role's check also sets)
    health_message      the worst incident's message (DCGM's, or the counter that tripped)
    health_source       dcgm or nvidia-smi (null: the host has neither)
    health_incidents    [{entity, health, message}, ...]
    health_checked_at   when it was read (ISO 8601, UTC)
    health_error        why the last probe could not say (the health stays what it was)

``reconcile`` asks in the survey it makes anyway (tasks.surveys.survey_with_queues with
``probe``); ``gpufleet fleet`` asks, in one request per host, only the hosts whose health is
older than ``max_age`` seconds (``MAX_AGE``; 0: every host).
"""

from __future__ import annotations

import datetime

from ..core.times import parse_time
from ..fleets import report, state
from ..fleets.status import InstanceStatus
from . import surveys
from .claiming import busy_map
from .ssh import Node, parallel

MAX_AGE = 300
PROBE_TIMEOUT = 90
KEYS = ("health", "health_message", "health_source", "health_incidents", "health_checked_at",
        "health_error")


def _now(now):
    return now or datetime.datetime.now(datetime.timezone.utc)


def stamp(now):
    return _now(now).strftime("%Y-%m-%dT%H:%M:%SZ")


def is_stale(fact, max_age, now=None):
    """Whether a cached fact's health is older than ``max_age`` seconds (or was never read)."""
    checked = parse_time((fact or {}).get("health_checked_at"))
    if checked is None:
        return True
    return (_now(now) - checked).total_seconds() >= max_age


def fact_changes(judged):
    """The facts-cache keys for a judged health (hosts.health.judge). A probe that could not
    say keeps the host's health and notes why."""
    changes = {"health_checked_at": judged.get("checked_at"), "health_error": judged.get("error")}
    if judged.get("status") is not None:
        changes.update(health=judged["status"], health_message=judged.get("message"),
                       health_source=judged.get("source"),
                       health_incidents=judged.get("incidents") or [])
    return changes


def of_fact(fact):
    """The health an instance record carries (``gpufleet fleet --json``), from its cached
    facts; None for a host with no cached facts."""
    if not isinstance(fact, dict):
        return None
    return {
        "status": fact.get("health") or "healthy",
        "message": fact.get("health_message"),
        "source": fact.get("health_source"),
        "incidents": fact.get("health_incidents") or [],
        "checked_at": fact.get("health_checked_at"),
        "error": fact.get("health_error"),
    }


def judge_answers(raw, now=None):
    """``{host: changes}`` for the facts cache from the hosts' raw probes ``{host: probe}``."""
    checked_at = stamp(now)
    from ..hosts import health as judging   # its parsers only load when there is a probe

    return dict((host, fact_changes(judging.judge(probe, checked_at)))
                for host, probe in raw.items())


def store(root, fleet_of, changes, check_mode=False):
    """Write ``{host: changes}`` into the facts cache of each host's fleet (``fleet_of``: host
    name to fleet name)."""
    by_fleet = {}
    for host, keys in changes.items():
        if fleet_of.get(host):
            by_fleet.setdefault(fleet_of[host], {})[host] = keys
    for fleet, hosts in sorted(by_fleet.items()):
        state.update_facts(root, fleet, hosts, check_mode=check_mode)


def due(records, root, max_age=MAX_AGE, now=None):
    """``{instance name: instance}``: the instances whose cached health is older than
    ``max_age`` and that have a host to ask (an address and cached facts: ready at their last
    apply)."""
    found = {}
    for record in records:
        facts = state.read_facts(root, record.get("name"))
        for instance in record.get("instances") or []:
            fact = facts.get(instance.get("name"))
            if (fact is None or not instance.get("hostname")
                    or instance.get("status") in InstanceStatus.hostless_statuses()):
                continue
            if is_stale(fact, max_age, now):
                found[instance["name"]] = dict(instance, fleet=instance.get("fleet")
                                               or record.get("name"))
    return found


def unmeasured(records, root):
    """``{instance name: instance}``: an SSH fleet's hosts with an address but no cached facts
    (no apply has found them ready). ``gpufleet fleet`` asks them too, so that one that does
    not answer is seen (``health_unreachable``) and its fleet not shown active."""
    found = {}
    for record in records:
        if record.get("fleet_type") != "ssh":
            continue
        facts = state.read_facts(root, record.get("name"))
        for instance in record.get("instances") or []:
            if instance.get("hostname") and instance.get("name") not in facts:
                found[instance["name"]] = dict(instance, fleet=instance.get("fleet")
                                               or record.get("name"))
    return found


def refresh(records, root, max_age=MAX_AGE, now=None, connect_timeout=10, node_factory=None,
            check_mode=False, occupancy=False):
    """Ask the hosts whose health is stale, keep what they say (not in ``check_mode``), and
    return copies of the fleet ``records`` whose instances carry ``health`` (of_fact) and,
    where a host could not be asked, ``health_unreachable`` (the reason).
    ``node_factory(instance)`` makes the tasks.ssh.Node to ask (tests give a stand-in).

    With ``occupancy`` (``gpufleet fleet``), every host that can be asked is, in one ``status``
    request that reads the health too where it is stale, and an instance that runs jobs is
    ``busy`` with its ``busy_blocks``, as dstack shows it (with_busy)."""
    root = state.state_dir(root)
    asked = due(records, root, max_age, now)
    targets = dict(due(records, root, 0, now), **unmeasured(records, root)) if occupancy \
        else asked
    make = node_factory or (lambda inst: Node(inst, root=root, connect_timeout=connect_timeout))
    nodes = dict((name, make(inst)) for name, inst in targets.items())

    raw = {}
    if occupancy:
        # The survey every command makes (tasks.runs), with the health where it is due.

        containers, claims, _queues, errors = surveys.survey_with_queues(
            nodes, probe=asked, health=raw, timeout=PROBE_TIMEOUT)
    else:
        answers = parallel(sorted(nodes), lambda host: nodes[host].call(
            "health", {}, timeout=PROBE_TIMEOUT))
        raw.update((h, a["health"]) for h, (a, e) in answers.items() if e is None)
        errors = dict((h, e) for h, (_a, e) in answers.items() if e is not None)
    unreachable = dict((h, str(e)) for h, e in errors.items())
    changes = judge_answers(raw, now)
    store(root, dict((h, i["fleet"]) for h, i in asked.items()), changes, check_mode)
    # In check mode nothing was written: the records show what was read all the same.
    result = annotate(records, root, unreachable, changes if check_mode else None)
    if occupancy:
        result = with_busy(result, busy_map(containers, claims), containers)
    return with_fleet_status(result)


def with_fleet_status(records):
    """Copies of the fleet records whose ``status`` says when no instance is ready: an
    instance whose host could not be asked (``health_unreachable``) counts as unreachable, so
    a fleet whose only host does not answer is not shown ``active`` (fleets.report)."""
    result = []
    for record in records:
        seen = [dict(i, status="unreachable") if i.get("health_unreachable") else i
                for i in record.get("instances") or []]
        result.append(dict(record, status=report.fleet_status(dict(record, instances=seen))))
    return result


def with_busy(records, busy, answered):
    """Copies of the fleet records where each instance whose host ``answered`` carries
    ``busy_blocks`` and, when it runs anything (blocks or GPUs taken: claiming.busy_map's
    ``busy``), the status ``busy`` instead of ``idle``."""
    result = []
    for record in records:
        instances = []
        for instance in record.get("instances") or []:
            if instance.get("name") in answered:
                taken = busy.get(instance["name"]) or {}
                instance = dict(instance, busy_blocks=int(taken.get("blocks") or 0))
                if instance.get("status") == "idle" and (taken.get("blocks")
                                                         or taken.get("gpu_ids")):
                    instance["status"] = "busy"
            instances.append(instance)
        result.append(dict(record, instances=instances))
    return result


def from_survey(raw, fleet, root, now=None, check_mode=False):
    """Keep what a survey's hosts said of their health (``raw``: survey_with_queues's
    ``health``) in the cache of ``fleet``; returns ``{host: changes}``."""
    changes = judge_answers(raw, now)
    store(state.state_dir(root), dict((h, fleet) for h in changes), changes, check_mode)
    return changes


def summary(changes):
    """``{host: "failure: <message>"}`` (or just the status) for a report."""
    said = {}
    for host, keys in sorted(changes.items()):
        if keys.get("health") is None:
            said[host] = "unknown: %s" % (keys.get("health_error") or "no answer")
        elif keys.get("health_message"):
            said[host] = "%s: %s" % (keys["health"], keys["health_message"])
        else:
            said[host] = keys["health"]
    return said


def annotate(records, root, unreachable=None, unwritten=None):
    """Copies of the fleet records with each instance's cached ``health`` (with the changes
    ``unwritten``, ``{host: changes}``, on top)."""
    unreachable = unreachable or {}
    unwritten = unwritten or {}
    result = []
    for record in records:
        facts = state.read_facts(root, record.get("name"))
        instances = []
        for instance in record.get("instances") or []:
            fact = facts.get(instance.get("name"))
            if fact is not None and instance.get("name") in unwritten:
                fact = dict(fact, **unwritten[instance["name"]])
            instance = dict(instance, health=of_fact(fact))
            if instance["name"] in unreachable:
                instance["health_unreachable"] = unreachable[instance["name"]]
            instances.append(instance)
        result.append(dict(record, instances=instances))
    return result
