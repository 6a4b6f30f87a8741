# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Usage accounting, ``gpufleet usage``: who ran what, on how many GPUs, for how long, at what
cost, read from the records the hosts keep (tasks.hostside.usageside).

Every host keeps one record per job and submission that ran on it, which outlives the job's
container and any controller. ``gather`` asks every host of the reachable fleets for the
records that overlap the window (one ``usage`` request per host, all at once); ``report`` adds
them up: one line per run (the records of its jobs on several hosts make one line: nodes are
the hosts, GPU-hours and cost are summed, start is the earliest, end the latest, a run still
going counts until now) and one line per user. A run that overlaps the window counts whole, as
``sacct`` lists the jobs that ran in a window.

Pure Python besides the requests: ``parse_since``, ``runs_of`` and ``users_of`` are unit-tested
on plain records.
"""

from __future__ import annotations

import re
import time

from ..core.errors import GpufleetError
from ..core.text import shorten
from ..core.times import parse_time
from ..spec.grammar import Invalid, parse_duration
from .ssh import parallel
from .surveys import nodes_of

DEFAULT_SINCE = "7d"
# The access mark of a fleet this controller cannot reach (tasks.surveys.collect_fleets):
# never asked over SSH.
NO_ACCESS = "no access"
_DATE = re.compile(r"\d{4}-\d\d-\d\d\Z")


class UsageError(GpufleetError):
    """Bad input to ``gpufleet usage``: the message says what to write instead."""


def parse_since(value, now):
    """Epoch seconds for ``--since``: a duration before ``now`` (``30m``, ``24h``, ``7d``,
    ``2w``), a date (``2026-11-01``, midnight UTC) or an RFC 3339 time with its offset."""
    text = str(value if value is not None else DEFAULT_SINCE).strip()
    try:
        return float(now - parse_duration(text))
    except Invalid:
        pass
    if _DATE.match(text):
        moment = parse_time(text + "T00:00:00Z")
        if moment is not None:
            return moment.timestamp()
    moment = parse_time(text) if "T" in text.upper() else None
    if moment is None:
        raise UsageError("--since %s: write a duration such as 30m, 24h or 7d, a date such as "
                         "2026-11-01, or an RFC 3339 time such as 2026-11-01T09:00:00Z"
                         % shorten(text))
    if not (text.upper().endswith("Z") or text[-6:-5] in ("+", "-")):
        raise UsageError("--since %s: the time has no offset; add one, e.g. Z for UTC"
                         % shorten(text))
    return moment.timestamp()


def reachable_fleets(fleets, fleet=None):
    """The fleet records to ask: not those marked ``no access``, only ``fleet`` when given
    (UsageError when no reachable fleet has that name)."""
    found = [f for f in fleets if f.get("access") != NO_ACCESS]
    if fleet is None:
        return found
    chosen = [f for f in found if f.get("name") == fleet]
    if not chosen:
        names = ", ".join(sorted(f["name"] for f in found)) or "none"
        raise UsageError("no fleet named %s that this controller can reach (reachable: %s)"
                         % (shorten(fleet), names))
    return chosen


def gather(fleets, root=None, since=None, user=None, run=None, nodes=None):
    """``(records, unreachable)``: the usage records of every host of ``fleets`` that overlap
    ``since``..now (of ``user`` and ``run`` when given), and ``{host: error}`` of the hosts that
    did not answer. ``nodes``: ``{host: Node}`` to ask instead of the fleets' own."""
    nodes = nodes_of(fleets, root) if nodes is None else nodes
    payload = {"since": since, "user": user, "run": run}
    answers = parallel(sorted(nodes), lambda host: nodes[host].call("usage", payload))
    records = []
    unreachable = {}
    for host, (answer, error) in sorted(answers.items()):
        if error is not None:
            unreachable[host] = getattr(error, "detail", None) or str(error)
            continue
        records += [r for r in (answer or {}).get("records") or []
                    if isinstance(r, dict) and r.get("start") is not None]
    return records, unreachable


def _seconds(record, now):
    end = record.get("end")
    end = now if end is None else end
    return max(0.0, float(end) - float(record.get("start") or end))


def runs_of(records, now):
    """One line per run (its records on every host added up), newest first: run, run_id, user,
    fleet, nodes, gpus, start, end (None while running), status, wall_seconds, gpu_hours and
    cost."""
    groups = {}
    for record in records:
        key = record.get("run_id") or "%s/%s" % (record.get("fleet"), record.get("run"))
        groups.setdefault(key, []).append(record)
    lines = []
    for key, group in groups.items():
        running = any(r.get("end") is None for r in group)
        start = min(float(r["start"]) for r in group)
        end = None if running else max(float(r["end"]) for r in group)
        latest = max(int(r.get("submission") or 0) for r in group)
        last = [r for r in group if int(r.get("submission") or 0) == latest]
        codes = [r.get("exit_code") for r in last]
        gpu_seconds = sum(_seconds(r, now) * int(r.get("gpus") or 0) for r in group)
        cost = sum(_seconds(r, now) / 3600.0 * float(r.get("price") or 0) for r in group)
        first = sorted(group, key=lambda r: (r.get("submission") or 0, r.get("job") or 0))[-1]
        lines.append({
            "run": first.get("run"), "run_id": first.get("run_id"),
            "user": first.get("user"), "fleet": first.get("fleet"),
            "nodes": len(set(r.get("host") for r in last)),
            "gpus": sum(int(r.get("gpus") or 0) for r in last),
            "submissions": len(set(int(r.get("submission") or 0) for r in group)),
            "start": start, "end": end,
            "status": "running" if running else (
                "done" if all(c == 0 for c in codes) else "failed"),
            "wall_seconds": round((now if end is None else end) - start, 3),
            "gpu_hours": round(gpu_seconds / 3600.0, 6),
            "cost": round(cost, 6),
        })
    lines.sort(key=lambda line: (-line["start"], line["run"] or ""))
    return lines


def users_of(runs):
    """One line per user over the run lines: user (None: runs made before users were kept),
    runs, gpu_hours and cost; the most GPU-hours first."""
    users = {}
    for line in runs:
        entry = users.setdefault(line.get("user"), {"user": line.get("user"), "runs": 0,
                                                    "gpu_hours": 0.0, "cost": 0.0})
        entry["runs"] += 1
        entry["gpu_hours"] += line["gpu_hours"]
        entry["cost"] += line["cost"]
    found = []
    for entry in users.values():
        entry["gpu_hours"] = round(entry["gpu_hours"], 6)
        entry["cost"] = round(entry["cost"], 6)
        found.append(entry)
    found.sort(key=lambda e: (-e["gpu_hours"], e["user"] or ""))
    return found


def report(fleets, root=None, since=None, user=None, fleet=None, now=None, nodes=None):
    """What ``gpufleet usage`` shows: ``{"since", "now", "runs", "users", "unreachable"}``
    over the reachable fleets (``fleet``: only that one), ``since`` as ``parse_since`` reads
    it (default 7d), ``user``: only that user's runs."""
    now = time.time() if now is None else now
    start = parse_since(since, now)
    chosen = reachable_fleets(fleets, fleet)
    records, unreachable = gather(chosen, root, since=start, user=user, nodes=nodes)
    runs = runs_of(records, now)
    return {"since": start, "now": now, "runs": runs, "users": users_of(runs),
            "unreachable": unreachable}
