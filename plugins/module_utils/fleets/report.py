# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The end of an apply: what each host's checks said, folded into the fleet record."""

from __future__ import annotations

from typing import Any, Iterable, Mapping

from . import hostkeys
from .status import InstanceStatus


def _jump(instance):
    jump = instance.get("proxy_jump")
    if not jump:
        return ""
    return " through the jump host %s@%s:%s" % (jump.get("user"), jump.get("hostname"),
                                                jump.get("port") or 22)


def unreachable_message(instance: dict[str, Any], detail: str | None) -> str:
    """A connection failure, said with everything the user needs to find the cause. A host
    refused for a changed key is said as such (hostkeys.changed_message), not as a host that
    cannot be reached; a detail that is such a message already, from this command's plan, is
    kept as it is."""
    detail = " ".join(str(detail or "no answer").split())
    if hostkeys.is_message(detail) or detail.startswith(
            "cannot reach %s@%s:" % (instance.get("user"), instance.get("hostname"))):
        return detail
    return (
        "cannot reach %s@%s:%s%s: %s. Check the address, port, user and key of this host in "
        "ssh_config (and of proxy_jump), and that sshd runs there"
        % (instance.get("user"), instance.get("hostname"), instance.get("port"), _jump(instance),
           detail)
    )


def fold(record: dict[str, Any], node_reports: dict[str, Any] | None,
         released: Iterable[str] | None = None) -> dict[str, Any]:
    """A copy of the fleet ``record`` with each instance's status, error and resources.

    ``node_reports`` maps instance names to what the play found:
    ``{"status": "idle" | "unreachable" | "failed", "error": str or None, "facts": {...},
    "claimed": bool, "checks": {role: {...}}}`` (``claimed``: an SSH host this apply took into
    the fleet; ``checks``: what each host role's verification found). A DCGM health status in
    the checks becomes the resources' ``health``, which task placement honours.
    Instances the play did not reach keep the status the backend gave them.
    An SSH fleet's plan is made here: claimed hosts are created, those that could not be
    reached or checked are ``unread`` (the plan cannot say what applying does to them), the
    others kept, and ``released`` (hostnames that left the file) are released.

    A fleet none of whose instances is ready (idle or busy) and some of which could not be
    reached is ``unreachable``, one whose instances all failed ``failed``: not ``active``.
    """
    node_reports = node_reports or {}
    result: dict[str, Any] = dict(record)
    plan = record.get("plan")
    if plan is None:
        names = [i["name"] for i in record.get("instances") or []]
        created = [n for n in names if (node_reports.get(n) or {}).get("claimed")]
        unread = [n for n in names if n not in created and (node_reports.get(n) or {}).get(
            "status") in InstanceStatus.broken_statuses()]
        plan = {"create": created, "start": [], "unread": unread,
                "keep": [n for n in names if n not in created and n not in unread],
                "remove": []}
    result["plan"] = dict(plan, release=sorted(released or []))
    instances = []
    for instance in record.get("instances") or []:
        instance = dict(instance)
        report = (node_reports or {}).get(instance["name"])
        if report:
            status = report.get("status") or instance.get("status")
            error = report.get("error")
            if status == "unreachable":
                error = unreachable_message(instance, error)
            instance["status"] = status
            instance["error"] = " ".join(str(error).split()) if error else None
            facts = report.get("facts")
            if isinstance(facts, dict) and facts:
                instance["resources"] = facts
                if facts.get("internal_ip"):
                    instance["internal_ip"] = facts["internal_ip"]
            # A role that did not get to record its check leaves "" (or nothing).
            checks = dict((k, v) for k, v in (report.get("checks") or {}).items()
                          if isinstance(v, dict) and v)
            if checks:
                instance["checks"] = checks
                health = (checks.get("dcgm") or {}).get("health")
                if health and isinstance(instance.get("resources"), dict):
                    instance["resources"] = dict(instance["resources"], health=health)
        instance.setdefault("resources", None)
        instances.append(instance)
    result["instances"] = instances
    result["status"] = fleet_status(result)
    return result


def fleet_status(record: Mapping[str, Any]) -> str:
    """The fleet's status from its instances: ``active`` while any is ready (or coming up) or
    it has none; else ``unreachable`` when some could not be reached, ``failed`` when all
    failed their checks. A fleet whose only host cannot be reached is not active."""
    current = record.get("status") or "active"
    statuses = [i.get("status") for i in record.get("instances") or []
                if i.get("status") not in InstanceStatus.finished_statuses()]
    if current != "active" or not statuses or any(
            s in InstanceStatus.active_statuses() for s in statuses):
        return current
    if InstanceStatus.UNREACHABLE in statuses:
        return "unreachable"
    if all(s == InstanceStatus.FAILED for s in statuses):
        return "failed"
    return current


def failures(record: Mapping[str, Any]) -> list[str]:
    """``["<instance>: <error>", ...]`` for the instances that failed a check."""
    return [
        "%s (%s): %s" % (i["name"], i.get("hostname"), i["error"])
        for i in record.get("instances") or []
        if i.get("status") in InstanceStatus.broken_statuses()
    ]


# What a role's summary line shows, in this order, when its verification has the fact.
SUMMARY_KEYS = (
    ("mode", "%s"), ("health", "health %s"), ("gpu_count", "%s GPUs"),
    ("driver_version", "driver %s"), ("rocm_version", "ROCm %s"),
    ("efa_devices", "%s EFA devices"), ("installer_version", "installer %s"),
    ("active_ports", "%s active ports"), ("backend", "%s"),
    ("package_version", "%s"), ("reboot_required", "reboot required"),
)


def check_summary(check: dict[str, Any]) -> str:
    """One line for one role's verification: skipped (why), ok (key facts) or its problems."""
    if not check.get("applies", True):
        return "skipped: %s" % (check.get("reason") or "does not apply")
    if check.get("problems"):
        return "PROBLEM: %s" % "; ".join(str(p) for p in check["problems"])
    shown = []
    for key, form in SUMMARY_KEYS:
        value = check.get(key)
        if value in (None, "", [], {}, False):
            continue
        if isinstance(value, list):
            value = len(value)
        if not isinstance(value, (dict, list)):
            shown.append(form % value if "%s" in form else form)
    return "ok" + (" (%s)" % ", ".join(shown) if shown else "")


def check_lines(record: Mapping[str, Any]) -> list[str]:
    """``<instance>: <role>: <summary>`` for every role check of every instance."""
    lines = []
    for instance in record.get("instances") or []:
        for role, check in sorted((instance.get("checks") or {}).items()):
            lines.append("%s: %s: %s" % (instance["name"], role, check_summary(check)))
    return lines
