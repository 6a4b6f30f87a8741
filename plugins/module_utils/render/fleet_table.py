# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Fleet records and offers as text: dstack's ``dstack fleet`` table, ``dstack apply`` plan header
and offers table.

Pure Python (no Ansible imports), used by the ``gpufleet.cluster.fleet_table`` and
``gpufleet.cluster.fleet_plan`` filters and by the ``gpufleet`` command. Input is the fleet record
the fleet playbooks publish (set_stats key ``gpufleet_fleets``); resources use the normalized
configuration of docs/config-json.md and instance resources the ``gpufleet_host`` fact of
docs/host-facts.md.

    fleet_table(fleets)        # list of lines, as `dstack fleet` prints them
    fleet_table(fleets, verbose=True)   # as `dstack fleet -v`
    plan_lines(fleet)          # the plan shown before a fleet is applied

Missing optional keys are shown blank; only records that are not mappings (or fleets without a
name) raise FleetTableError.
"""

from __future__ import annotations

import datetime
from typing import Any, Callable

from ..core.errors import GpufleetError
from ..core.times import parse_time
from ..fleets.idle import span
from ..fleets.status import InstanceStatus

COLUMNS = ("NAME", "NODES", "GPU", "SPOT", "BACKEND", "PRICE", "STATUS", "CREATED")
VERBOSE_COLUMNS = (
    "NAME", "NODES", "RESOURCES", "DRIVER", "SPOT", "BACKEND", "PRICE", "STATUS", "CREATED",
    "ERROR",
)
GAP = "  "
INSTANCE_INDENT = "   "
# Where the error of an instance goes in the short table: a line of its own under the instance.
ERROR_INDENT = "     "
PLAN_ACTIONS = ("create", "keep", "remove", "release")


class FleetTableError(GpufleetError, ValueError):
    """A fleet record that cannot be shown at all (not a mapping, no name)."""


# ---------------------------------------------------------------------------------------------
# Values
# ---------------------------------------------------------------------------------------------


def _number(value):
    """A number without a useless fraction: 8.0 -> '8', 0.5 -> '0.5', 1.25 -> '1.25'."""
    if isinstance(value, bool):
        return str(value)
    if isinstance(value, float):
        if value.is_integer():
            return str(int(value))
        return ("%.4f" % value).rstrip("0").rstrip(".")
    return str(value)


def _gb(value):
    return "%sGB" % _number(value)


def format_range(value: object, unit: Callable[[Any], str] | None = None) -> str:
    """A ``{"min", "max"}`` range as dstack writes it: ``a``, ``a..b``, ``a..``, ``..b``.

    ``unit`` formats each end (``_gb`` for sizes). A plain number is an exact value. An empty
    range (both ends open) is ``""``.
    """
    fmt = unit or _number
    if value is None:
        return ""
    if not isinstance(value, dict):
        return fmt(value)
    low, high = value.get("min"), value.get("max")
    if low is None and high is None:
        return ""
    if low == high:
        return fmt(low)
    return "%s..%s" % ("" if low is None else fmt(low), "" if high is None else fmt(high))


def format_price(price: float | str | None) -> str:
    """``$0.5``, ``$1.2345``, ``$0``; blank when unknown."""
    if price is None:
        return ""
    return "$" + ("%.4f" % float(price)).rstrip("0").rstrip(".")


def _now(now):
    if now is None:
        return datetime.datetime.now(datetime.timezone.utc)
    moment = parse_time(now)
    if moment is None:
        raise FleetTableError(
            "now must be an ISO 8601 date and time such as 2026-11-21T10:00:00Z, got %r" % (now,)
        )
    return moment


def _ago(count, unit):
    return "%d %s ago" % (count, unit if count == 1 else unit + "s")


def pretty_date(value: str | datetime.datetime | None, now: datetime.datetime | None = None) -> str:
    """How long ago ``value`` (ISO 8601 string or datetime) was, the way dstack's tables say it.

    ``now``, ``12 sec ago``, ``1 min ago``, ``3 mins ago``, ``1 hour ago``, ``5 hours ago``,
    ``yesterday``, ``3 days ago``, ``2 weeks ago``, ``4 months ago``, ``2 years ago``. Dates
    without a timezone are UTC. An unknown date is ``""``, a date that cannot be read is shown
    as given, and a date up to a minute in the future (clock skew) is ``now``.
    """
    moment = parse_time(value)
    if moment is None:
        return "" if value in (None, "") else str(value)
    diff = _now(now) - moment
    seconds = diff.total_seconds()
    if seconds < 0:
        return "now" if seconds > -60 else ""
    days, secs = diff.days, diff.seconds
    if days == 0:
        if secs < 10:
            return "now"
        if secs < 60:
            return "%d sec ago" % secs
        if secs < 120:
            return "1 min ago"
        if secs < 3600:
            return "%d mins ago" % round(secs / 60)
        if secs < 7200:
            return "1 hour ago"
        return "%d hours ago" % round(secs / 3600)
    if days == 1:
        return "yesterday"
    if days < 7:
        return "%d days ago" % days
    if days < 31:
        return _ago(round(days / 7), "week")
    if days < 365:
        return _ago(round(days / 30), "month")
    return _ago(round(days / 365), "year")


# ---------------------------------------------------------------------------------------------
# Resources
# ---------------------------------------------------------------------------------------------


def _gpu_spec_parts(gpu, with_vendor):
    """name(s) or vendor, memory, count, total memory, compute capability of a GPU spec."""
    parts = []
    if gpu.get("name"):
        parts.append(",".join(str(name) for name in gpu["name"]))
    elif with_vendor and gpu.get("vendor"):
        parts.append(str(gpu["vendor"]))
    for key, unit in (("memory", _gb), ("count", None), ("total_memory", _gb)):
        text = format_range(gpu.get(key), unit)
        if text:
            parts.append(text)
    if gpu.get("compute_capability"):
        parts.append(str(gpu["compute_capability"]))
    return parts


def pretty_resources(resources: dict[str, Any] | None) -> str:
    """A resources spec (normalized config) as dstack's plans show it.

    ``cpu=2.. mem=8GB.. disk=100GB.. gpu=H100:80GB:8``; parts that are not set are left out, the
    GPU is named by its names, else its vendor (``gpu=nvidia:1..``), else only its count
    (``gpu=0..``). None or an empty spec gives ``""``.
    """
    if not resources:
        return ""
    parts = []
    cpu = resources.get("cpu")
    if isinstance(cpu, dict):
        count = format_range(cpu.get("count"))
        if count:
            arch = cpu.get("arch")
            parts.append("cpu=%s%s" % (arch + ":" if arch else "", count))
    memory = format_range(resources.get("memory"), _gb)
    if memory:
        parts.append("mem=" + memory)
    disk = resources.get("disk")
    if isinstance(disk, dict):
        size = format_range(disk.get("size"), _gb)
        if size:
            parts.append("disk=" + size)
    gpu = resources.get("gpu")
    if isinstance(gpu, dict):
        gpu_parts = _gpu_spec_parts(gpu, with_vendor=True)
        if gpu_parts:
            parts.append("gpu=" + ":".join(gpu_parts))
    return " ".join(parts)


def fleet_gpu(resources: dict[str, Any] | None) -> str:
    """The GPU a fleet asks for, in the table's GPU column: ``H100:80GB..:8``, ``gpu:1..2``.

    Blank when the fleet asks for no GPU (no spec, or a count of ``0`` or ``0..``).
    """
    gpu = (resources or {}).get("gpu")
    if not isinstance(gpu, dict):
        return ""
    count = gpu.get("count")
    if not isinstance(count, dict):
        return ""
    if count.get("min") in (0, None) and count.get("max") in (0, None):
        return ""
    parts = [",".join(str(name) for name in gpu["name"]) if gpu.get("name") else "gpu"]
    for key, unit in (("memory", _gb), ("count", None)):
        text = format_range(gpu.get(key), unit)
        if text:
            parts.append(text)
    return ":".join(parts)


def _mib_as_gb(mib):
    return _gb(round(float(mib) / 1024, 1))


def _host_gpu(resources):
    """``gpu=H100:80GB:8`` for a measured host (gpufleet_host fact); None when it has none."""
    gpu = resources.get("gpu") or {}
    count = gpu.get("count") or 0
    if not count:
        return None
    parts = [str(gpu.get("name") or gpu.get("vendor") or "gpu")]
    if gpu.get("memory_mib"):
        parts.append(_mib_as_gb(gpu["memory_mib"]))
    parts.append(str(count))
    return "gpu=" + ":".join(parts)


def host_resources(resources: dict[str, Any] | None) -> str:
    """A measured host (gpufleet_host fact) as dstack shows an instance's resources.

    ``cpu=16 mem=251.5GB disk=1741.8GB gpu=H100:80GB:8``: memory and disk from MiB, rounded to a
    tenth of a GB; the disk is the space available to containers, as dstack reports it.
    """
    if not resources:
        return ""
    parts = []
    if resources.get("cpus") is not None:
        parts.append("cpu=%s" % resources["cpus"])
    memory = (resources.get("memory") or {}).get("mib")
    if memory is not None:
        parts.append("mem=" + _mib_as_gb(memory))
    disk = (resources.get("disk") or {}).get("available_mib")
    if disk is not None:
        parts.append("disk=" + _mib_as_gb(disk))
    gpu = _host_gpu(resources)
    if gpu:
        parts.append(gpu)
    return " ".join(parts)


# ---------------------------------------------------------------------------------------------
# The fleet table
# ---------------------------------------------------------------------------------------------


def _require_mapping(value, what):
    if not isinstance(value, dict):
        raise FleetTableError("%s must be a mapping (a fleet record), got %s: %r" % (
            what, type(value).__name__, value))
    return value


def _one_line(text):
    return " ".join(str(text).split())


def _is_ssh_fleet(fleet):
    return fleet.get("fleet_type") == "ssh"


def _fleet_nodes(fleet, verbose):
    if _is_ssh_fleet(fleet):
        hosts = fleet.get("hosts")
        if hosts is None:
            hosts = len(fleet.get("instances") or [])
        nodes = str(hosts)
    else:
        nodes = format_range(fleet.get("nodes"))
    if verbose and fleet.get("placement") == "cluster":
        nodes = (nodes + " (cluster)").strip()
    return nodes


def _fleet_backends(fleet):
    if _is_ssh_fleet(fleet):
        return "ssh"
    backends = fleet.get("backends")
    if not backends:
        return "*"
    return ", ".join("ssh" if b == "remote" else str(b) for b in backends)


def _fleet_row(fleet, now, verbose):
    ssh = _is_ssh_fleet(fleet)
    max_price = fleet.get("max_price")
    return {
        "NAME": str(fleet["name"]),
        "NODES": _fleet_nodes(fleet, verbose),
        "GPU": "" if ssh else fleet_gpu(fleet.get("resources")),
        "RESOURCES": "" if ssh else pretty_resources(fleet.get("resources")),
        "DRIVER": "",
        "SPOT": "" if ssh else str(fleet.get("spot_policy") or ""),
        "BACKEND": _fleet_backends(fleet),
        "PRICE": "" if ssh or max_price is None else "$0.." + format_price(max_price)[1:],
        "STATUS": str(fleet.get("status") or ""),
        "CREATED": pretty_date(fleet.get("created"), now),
        "ERROR": _one_line(fleet.get("error") or ""),
    }


def _is_ssh_instance(instance):
    return instance.get("backend") in ("ssh", "remote")


def _instance_blocks(instance):
    """Total blocks of an instance: measured (resources.blocks.total), else a number given."""
    measured = ((instance.get("resources") or {}).get("blocks") or {}).get("total")
    if isinstance(measured, int) and not isinstance(measured, bool):
        return measured
    blocks = instance.get("blocks")
    if isinstance(blocks, int) and not isinstance(blocks, bool):
        return blocks
    return None


def instance_health(instance: dict[str, Any]) -> str | None:
    """``healthy``, ``warning`` or ``failure``: the instance's GPU health (its ``health``
    record, else the ``health`` of its measured resources); None when unknown."""
    health = instance.get("health")
    if isinstance(health, dict):
        return health.get("status")
    if isinstance(health, str):
        return health
    resources = instance.get("resources")
    if isinstance(resources, dict) and isinstance(resources.get("health"), str):
        return resources["health"]
    return None


def health_reason(instance: dict[str, Any]) -> str:
    """Why an instance is not healthy (the worst incident's message, or why its health could
    not be read), for the verbose table; "" when there is nothing to say."""
    health: Any = instance.get("health") if isinstance(instance.get("health"), dict) else {}
    status = instance_health(instance)
    said = []
    if status in ("warning", "failure"):
        said.append("health %s%s" % (status, ": " + health["message"]
                                     if health.get("message") else ""))
    if health.get("error"):
        said.append("health not read: %s" % health["error"])
    return "; ".join(said)


def instance_status(instance: dict[str, Any], verbose: bool = False) -> str:
    """``idle``, ``busy``, ``2/8 busy`` (blocks), with ``(unreachable)`` when flagged, else
    ``(warning)`` or ``(failure)`` for its GPU health, as dstack shows them, and
    ``(for run X)`` on an instance made because run X needed it (with its idle limit when
    ``verbose``)."""
    status = str(instance.get("status") or "")
    if status in InstanceStatus.available_statuses():
        total = _instance_blocks(instance)
        if total is not None and total > 1:
            status = "%s/%s busy" % (instance.get("busy_blocks") or 0, total)
        health = instance_health(instance)
        if instance.get("unreachable"):
            status += " (unreachable)"
        elif health in ("warning", "failure"):
            status += " (%s)" % health
    run = instance.get("made_for_run")
    if run and status not in InstanceStatus.finished_statuses():
        limit = instance.get("idle_duration")
        if verbose and limit is not None:
            status += " (for run %s, idle_duration %s)" % (run, span(limit))
        else:
            status += " (for run %s)" % run
    return status


def _instance_backend(instance):
    backend = instance.get("backend")
    if not backend:
        return ""
    backend = "ssh" if backend == "remote" else str(backend)
    region = instance.get("region")
    return "%s (%s)" % (backend, region) if region else backend


def _instance_gpu(instance):
    resources = instance.get("resources")
    if not resources:
        # Not measured yet: dstack leaves the column blank while an instance comes up.
        return "" if instance.get("status") in InstanceStatus.starting_statuses() else "-"
    return _host_gpu(resources) or "-"


def _instance_row(instance, now, verbose=False):
    ssh = _is_ssh_instance(instance)
    resources = instance.get("resources") or {}
    spot = ""
    if not ssh and instance.get("spot") is not None:
        spot = "spot" if instance["spot"] else "on-demand"
    return {
        "NAME": "%sinstance=%s" % (INSTANCE_INDENT, instance.get("num", "?")),
        "NODES": "",
        "GPU": _instance_gpu(instance),
        "RESOURCES": host_resources(resources),
        "DRIVER": str((resources.get("gpu") or {}).get("driver_version") or ""),
        "SPOT": spot,
        "BACKEND": _instance_backend(instance),
        "PRICE": "" if ssh else format_price(instance.get("price")),
        "STATUS": instance_status(instance, verbose),
        "CREATED": pretty_date(instance.get("created"), now),
        "ERROR": _one_line("; ".join(e for e in (instance.get("error"), health_reason(instance))
                                     if e)),
    }


def _sort_key_created(fleet):
    moment = parse_time(fleet.get("created"))
    # Newest first, fleets without a date last.
    return (moment is None, -moment.timestamp() if moment else 0.0)


def _render(columns, rows):
    """The header and rows as lines of columns padded to their widest value, two spaces apart.

    A row is a dict of column values, or a str: a line of its own that does not count towards
    the widths.
    """
    cells = [list(columns)]
    for row in rows:
        cells.append(row if isinstance(row, str) else [row.get(column, "") for column in columns])
    tabular = [line for line in cells if not isinstance(line, str)]
    widths = [max(len(line[i]) for line in tabular) for i in range(len(columns))]
    lines = []
    for line in cells:
        if isinstance(line, str):
            lines.append(line.rstrip())
        else:
            lines.append(GAP.join(v.ljust(w) for v, w in zip(line, widths)).rstrip())
    return lines


def fleet_table(fleets: list[dict[str, Any]], now: datetime.datetime | None = None,
                verbose: bool = False) -> list[str]:
    """The fleets as the lines of dstack's ``dstack fleet`` table (``verbose``: ``-v``).

    A row per fleet, newest first (fleets without a date last, then by name), each followed by
    a row per instance (``   instance=0``), except a fleet with ``no access``, listed alone. In the short table, an instance that has an
    ``error`` gets it on a line of its own right under its row (``     error: <message>``), so
    whoever reads a playbook's output sees why a host failed (a fleet with an ``error``, under
    the fleet's row: ``   error: <message>``); the verbose table has an ERROR column instead.
    ``now`` (a datetime or ISO 8601 string, default: the current time) is what CREATED is
    relative to.
    """
    if isinstance(fleets, dict):
        fleets = [fleets]
    if not isinstance(fleets, (list, tuple)):
        raise FleetTableError(
            "expected a list of fleet records, got %s: %r" % (type(fleets).__name__, fleets))
    now = _now(now)
    records = []
    for index, fleet in enumerate(fleets):
        _require_mapping(fleet, "fleet %d" % index)
        if not fleet.get("name"):
            raise FleetTableError("fleet %d has no name: %r" % (index, fleet))
        records.append(fleet)
    records.sort(key=lambda fleet: str(fleet["name"]))
    records.sort(key=_sort_key_created)
    rows = []
    for fleet in records:
        rows.append(_fleet_row(fleet, now, verbose))
        if not verbose and fleet.get("error"):
            rows.append("%serror: %s" % (INSTANCE_INDENT, _one_line(fleet["error"])))
        # A fleet this controller cannot reach (fleets.access) is one row: nothing was asked
        # of its hosts, so they have nothing to show.
        instances = [] if fleet.get("access") == "no access" else fleet.get("instances") or []
        for index, instance in enumerate(instances):
            _require_mapping(instance, "fleet %s, instance %d" % (fleet["name"], index))
            rows.append(_instance_row(instance, now, verbose))
            if not verbose and instance.get("error"):
                rows.append("%serror: %s" % (ERROR_INDENT, _one_line(instance["error"])))
    return _render(VERBOSE_COLUMNS if verbose else COLUMNS, rows)


# ---------------------------------------------------------------------------------------------
# The plan
# ---------------------------------------------------------------------------------------------


def _plan_nodes(fleet):
    if _is_ssh_fleet(fleet):
        return _fleet_nodes(fleet, verbose=False)
    nodes = fleet.get("nodes")
    text = format_range(nodes)
    if isinstance(nodes, dict) and nodes.get("min") != nodes.get("max"):
        target = nodes.get("target")
        if target is not None and target != nodes.get("min"):
            text += " (target %s)" % target
    return text


def plan_lines(fleet: dict[str, Any]) -> list[str]:
    """What applying a fleet record does, as lines: dstack's plan header, then the changes.

    The header is ``Configuration``, ``Type``, ``Fleet type`` (``cloud`` for backend fleets,
    ``ssh``), ``Nodes``, ``Placement``, then, for backend fleets, ``Backends``, ``Resources``,
    ``Spot policy`` and ``Max price`` where set. After a blank line come the changes from the
    record's ``plan``: ``create a, b``, ``keep c``, ``remove d``, ``release e``, leaving out
    empty ones; when nothing is created, removed or released the first is ``no changes``. An
    SSH fleet's hosts the plan could not reach or check (``unread``) each get a line,
    ``cannot read NAME: why``. A
    cloud fleet that creates instances has its ``offers`` (the first three, cheapest first)
    shown after a blank line as dstack's offers table, counting ``offers_total`` of them.
    """
    _require_mapping(fleet, "the fleet")
    ssh = _is_ssh_fleet(fleet)
    header = [
        ("Configuration", fleet.get("file") or "-"),
        ("Type", "fleet"),
        ("Fleet type", "ssh" if ssh else "cloud"),
        ("Nodes", _plan_nodes(fleet)),
        ("Placement", fleet.get("placement") or "any"),
    ]
    if not ssh:
        if fleet.get("backends"):
            header.append(("Backends", _fleet_backends(fleet)))
        if fleet.get("resources"):
            header.append(("Resources", pretty_resources(fleet["resources"])))
        if fleet.get("spot_policy"):
            header.append(("Spot policy", fleet["spot_policy"]))
        if fleet.get("max_price") is not None:
            header.append(("Max price", format_price(fleet["max_price"])))
    width = max(len(key) for key, _value in header)
    lines = [("%s%s%s" % (key.ljust(width), GAP, value)).rstrip() for key, value in header]
    lines.append("")
    plan = fleet.get("plan") or {}
    if not isinstance(plan, dict):
        raise FleetTableError("the plan of fleet %s must be a mapping, got %r" % (
            fleet.get("name"), plan))
    names = {action: [str(name) for name in plan.get(action) or []] for action in PLAN_ACTIONS}
    unread = [str(name) for name in plan.get("unread") or []]
    if not unread and not any(names[action] for action in PLAN_ACTIONS if action != "keep"):
        lines.append("no changes")
    for action in PLAN_ACTIONS:
        if names[action]:
            lines.append("%s %s" % (action, ", ".join(names[action])))
    if unread:
        # Hosts the plan could not reach or check: it cannot say what applying does to them.
        errors = dict((i.get("name"), i.get("error")) for i in fleet.get("instances") or []
                      if isinstance(i, dict))
        for name in unread:
            why = ": %s" % errors[name] if errors.get(name) else ""
            lines.append("cannot read %s%s" % (name, why))
    offers = fleet.get("offers") or []
    if offers and names["create"]:
        table = offer_table(offers, limit=3)
        total = fleet.get("offers_total") or len(offers)
        if total > len(offers):
            highest = fleet.get("offers_max_price")
            table[-1] = "Shown %d of %d offers, %s max" % (
                min(3, len(offers)), total, format_price(highest))
            if len(offers) <= 3:
                table.insert(-2, "   ...")
        lines.append("")
        lines.extend(table)
    return lines


# ---------------------------------------------------------------------------------------------
# Offers
# ---------------------------------------------------------------------------------------------

OFFER_COLUMNS = ("#", "BACKEND", "REGION", "INSTANCE", "RESOURCES", "SPOT", "PRICE")


def offer_table(offers: list[dict[str, Any]], limit: int | None = 3) -> list[str]:
    """Offers (offers/select.py records, cheapest first) as dstack's offers table.

    The first ``limit`` offers (all when None) get a numbered row; when some are left out a
    ``...`` row follows. The last line says ``Shown N of M offers, $X max``, the most
    expensive of all M. No offers give no lines.
    """
    if not isinstance(offers, (list, tuple)):
        raise FleetTableError("expected a list of offers, got %s" % type(offers).__name__)
    if not offers:
        return []
    shown = list(offers if limit is None else offers[:limit])
    rows = []
    for number, offer in enumerate(shown, 1):
        _require_mapping(offer, "offer %d" % number)
        rows.append({
            "#": str(number),
            "BACKEND": str(offer.get("backend") or ""),
            "REGION": str(offer.get("region") or ""),
            "INSTANCE": str(offer.get("instance_type") or ""),
            "RESOURCES": host_resources(offer.get("resources") or {}),
            "SPOT": "yes" if offer.get("spot") else "no",
            "PRICE": format_price(offer.get("price")),
        })
    if len(shown) < len(offers):
        rows.append({"#": "", "BACKEND": "..."})
    lines = _render(OFFER_COLUMNS, rows)
    highest = max(float(o.get("price") or 0) for o in offers)
    lines.append("")
    lines.append("Shown %d of %d offers, %s max"
                 % (len(shown), len(offers), format_price(highest)))
    return lines
