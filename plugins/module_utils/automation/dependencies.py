# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Dependencies between runs: ``gpufleet apply --after RUN[:ok|notok|any]`` (Slurm's
``--dependency=afterok|afternotok|afterany``).

A run with dependencies waits in its fleet's queue as ``pending`` with the reason
``dependency`` until every run it depends on has ended as asked, then is placed as any queued
run is; when one of them can no longer end as asked, it ends ``terminated`` with the reason
``dependency_failed``. A name is a run's, or a job array's (every run of the array: all must
end as asked). Nothing watches: the passes over the queue (tasks.queue) judge each waiting
entry from the run records and entries they read, through ``gate``, which this module gives
and the callers above the queue hand down (the queue may not import this package).

Pure Python.
"""

from __future__ import annotations

from typing import Any, Iterable, Mapping, Optional, Sequence

from ..core.enums import StrEnum
from ..core.errors import GpufleetError
from ..core.text import quote
from ..spec.common import NAME_RE

# Why a queued run waits, and why it ended (its entry's reason, and ps's).
WAITING = "dependency"
FAILED = "dependency_failed"
OPTION = "--after"
# A run's statuses once it has ended (tasks.lifecycle.RunStatus.finished_statuses).
ENDED = ("done", "failed", "terminated")


class DependencyError(GpufleetError):
    """An ``--after`` that cannot be taken: a bad word, an unknown run, a cycle."""


class After(StrEnum):
    """How a run it depends on must end (Slurm's afterok, afternotok, afterany)."""

    OK = "ok"
    NOTOK = "notok"
    ANY = "any"

    def met(self, statuses: list[str]) -> Optional[bool]:
        """Whether runs that ended with ``statuses`` (one each) meet it: True, False (it can
        no longer be met), or None while one of them has not ended. ``ok``: every one done;
        ``notok``: every one ended and one of them not done; ``any``: every one ended."""
        if self is After.OK and any(s in ENDED and s != "done" for s in statuses):
            return False
        if any(s not in ENDED for s in statuses):
            return None
        if self is After.NOTOK:
            return any(s != "done" for s in statuses)
        return True


def parse(values: Optional[Iterable[Any]]) -> list[dict[str, str]]:
    """``RUN`` or ``RUN:ok|notok|any`` items (repeatable): ``[{"run", "after"}]`` in the given
    order, each run once; DependencyError naming the option and the bad value."""
    out: list[dict[str, str]] = []
    for value in values or ():
        if isinstance(value, Mapping):
            run, when = str(value.get("run") or ""), str(value.get("after") or After.OK.value)
            text = "%s:%s" % (run, when)
        else:
            text = str(value).strip()
            run, _sep, when = text.partition(":")
            when = when or After.OK.value
        if not NAME_RE.fullmatch(run):
            raise DependencyError("%s: %s is not a run name (2 to 41 lower-case letters, digits "
                                  "or -, starting with a letter)" % (OPTION, quote(text)))
        if when not in [a.value for a in After]:
            raise DependencyError("%s: %s: the condition is ok, notok or any, not %s"
                                  % (OPTION, quote(text), quote(when)))
        if any(d["run"] == run and d["after"] != when for d in out):
            raise DependencyError("%s: %s is named twice with different conditions"
                                  % (OPTION, run))
        if not any(d["run"] == run for d in out):
            out.append({"run": run, "after": when})
    return out


def text(after: Iterable[Mapping[str, str]]) -> str:
    """``A (ok), B (any)``: what a run waits for, as ps and messages say it."""
    return ", ".join("%s (%s)" % (d["run"], d["after"]) for d in after)


def _members(name: str, records: Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """The runs ``name`` names: the run of that name, else every run of the job array; an
    array whose runs are not all submitted yet (a throttled array, ``%N``) counts those as
    waiting to be submitted."""
    own = [r for r in records if r.get("name") == name]
    if own:
        return own
    members = [r for r in records if r.get("array") == name]
    count = max([int(r.get("array_count") or 0) for r in members] or [0])
    return members + [{"name": "%s (not submitted yet)" % name, "status": "submitted"}] * max(
        0, count - len(members))


def verdict(run: str, after: Sequence[Mapping[str, str]],
            records: Sequence[Mapping[str, Any]], complete: bool = True) -> dict[str, Any]:
    """Whether ``run`` (with dependencies ``after``) may start, from ``records`` (run records,
    tasks.listing, with the queue's: tasks.listing.with_queue): ``{"verdict": "go" | "wait" |
    "fail", "reason", "message"}`` (``reason``: WAITING or FAILED; a go names in ``waited``
    the reason its wait had). A run that is nowhere fails when every host answered (``complete``),
    and waits otherwise (its hosts may only be silent)."""
    waiting = []
    for dependency in after:
        members = _members(dependency["run"], records)
        if not members:
            if complete:
                return {"verdict": "fail", "reason": FAILED, "message": "run %s, which it "
                        "runs after, is on no fleet any more" % dependency["run"]}
            waiting.append("%s (not seen: its hosts do not answer)" % dependency["run"])
            continue
        statuses = [str(m.get("status") or "") for m in members]
        met = After(dependency["after"]).met(statuses)
        if met is False:
            return {"verdict": "fail", "reason": FAILED,
                    "message": "run %s ended %s, and it runs after %s:%s"
                    % (dependency["run"], _ended(members), dependency["run"],
                       dependency["after"])}
        if met is None:
            waiting.append("%s (%s)" % (dependency["run"], dependency["after"]))
    if waiting:
        return {"verdict": "wait", "reason": WAITING,
                "message": "waiting for %s" % ", ".join(waiting)}
    return {"verdict": "go", "reason": None, "message": None, "waited": WAITING}


def _ended(members: list[Mapping[str, Any]]) -> str:
    if len(members) == 1:
        return str(members[0].get("status"))
    counts: dict[str, int] = {}
    for member in members:
        counts[str(member.get("status"))] = counts.get(str(member.get("status")), 0) + 1
    return ", ".join("%d %s" % (n, status) for status, n in sorted(counts.items()))


def check(run: str, after: Sequence[Mapping[str, str]],
          records: Sequence[Mapping[str, Any]], complete: bool = True,
          array: Optional[str] = None) -> None:
    """What ``--after`` may not name, refused at submission (DependencyError): a run that is
    nowhere (when every host answered), the run itself or its own job array (``array``), or
    one that waits, directly or through others, for this run (a cycle)."""
    for dependency in after:
        if dependency["run"] in (run, array):
            raise DependencyError("%s: run %s cannot run after itself%s" % (
                OPTION, run, " (it is a run of the job array %s)" % array
                if dependency["run"] == array else ""))
        if complete and not _members(dependency["run"], records):
            raise DependencyError("%s: no run or job array named %s on any fleet (gpufleet ps "
                                  "lists them)" % (OPTION, dependency["run"]))
    path = _cycle(run, [d["run"] for d in after], records)
    if path:
        raise DependencyError(_cycle_text(run, path))


def _cycle_text(run: str, path: list[str]) -> str:
    return "%s: %s would wait for itself: %s" % (OPTION, run, " waits for ".join([run] + path))


def _cycle(run: str, names: list[str], records: Sequence[Mapping[str, Any]]) -> list[str]:
    """The runs from ``names`` back to ``run`` through the after lists of runs that still
    wait (a cycle), or []."""
    waits = dict((str(r.get("name")), [d["run"] for d in _read(r.get("after"))])
                 for r in records if r.get("status") not in ENDED and r.get("after"))
    stack = [(name, [name]) for name in names]
    seen = set()
    while stack:
        name, path = stack.pop()
        if name == run:
            return path
        if name in seen:
            continue
        seen.add(name)
        nexts = list(waits.get(name) or [])
        for member in _members(name, records):   # an array waits as its runs do
            if member.get("status") not in ENDED:
                nexts += [d["run"] for d in _read(member.get("after"))]
        stack += [(following, path + [following]) for following in nexts]
    return []


def _read(after: Any) -> list[dict[str, str]]:
    """The after list another run's entry carries, as parse gives it ([] when unreadable)."""
    try:
        return parse(after)
    except DependencyError:
        return []


def gate(event: Mapping[str, Any]) -> dict[str, Any]:
    """The queue's gate (tasks.queue, tasks.run_supervision): ``event`` is ``{"run",
    "after", "records", "complete", "submitting", "array"}``; a submission (``submitting``) is
    checked first (``check``: DependencyError). A pass fails a run whose after list it cannot
    read, or that waits in a cycle (two submissions at once can make one). Answers
    ``verdict``'s."""
    run = str(event["run"])
    records = list(event.get("records") or [])
    complete = bool(event.get("complete", True))
    if event.get("submitting"):
        after = parse(event.get("after"))
        check(run, after, records, complete, event.get("array"))
        return verdict(run, after, records, complete)
    try:
        after = parse(event.get("after"))
    except DependencyError as exc:
        return {"verdict": "fail", "reason": FAILED, "message": str(exc)}
    path = _cycle(run, [d["run"] for d in after], records)
    if path:
        return {"verdict": "fail", "reason": FAILED, "message": _cycle_text(run, path)}
    return verdict(run, after, records, complete)
