# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Job arrays (``gpufleet apply --array 1-100%10``): one run per index, which dstack lacks and
Slurm users expect.

Run ``<name>-<index>`` gets ``GPUFLEET_ARRAY_INDEX`` (and ``_NAME``, ``_COUNT``, ``_MIN``,
``_MAX``) and the labels ``gpufleet.array`` / ``gpufleet.array-index``, so ``ps`` and ``logs``
show each run and ``stop <name>`` stops them all. With ``%N``, the submitter keeps at most N runs
of the array alive: it starts the next index when one ends, counting the array's live runs from
the hosts' containers (so runs another controller started count too). There is no server to do
this later: a detached array returns once its last index is submitted.
"""

from __future__ import annotations

import time

from ..core.text import shorten
from . import lifecycle, listing, placement, rankplan, surveys
from .container import ARRAY_LABEL
from .errors import PlanError, RunError
from .lifecycle import RunStatus

_RUN_NAME_MAX = 41


def member_names(base, indices):
    """``{index: run name}``; PlanError when ``<base>-<largest index>`` is not a valid run name."""
    longest = "%s-%d" % (base, max(indices))
    if len(longest) > _RUN_NAME_MAX:
        raise PlanError("--array: the runs are named <name>-<index>, and %s is longer than %d "
                        "characters; give the array a shorter --name" % (longest, _RUN_NAME_MAX))
    return dict((i, "%s-%d" % (base, i)) for i in indices)


def array_statuses(nodes, base):
    """``{run name: status}`` of the array's runs on the hosts (the latest submission of each)."""
    containers, _errors = surveys.survey(nodes)
    mine = dict((h, [c for c in entries if c["labels"].get(ARRAY_LABEL) == base])
                for h, entries in containers.items())
    return dict((r["name"], r["status"]) for r in listing.run_records(mine))


class ArrayRunner(object):
    """Submit every index of ``array`` (spec.overrides.parse_array) as its own run.

    ``make_runner(config, array_info, code)`` builds the runs.Runner of one index;
    ``statuses()`` answers array_statuses for this array.
    """

    def __init__(self, config, array, make_runner, statuses, emit=None, clock=time.time,
                 sleep=time.sleep, poll=2.0, rng=None):
        self.base = config.get("name") or rankplan.random_run_name(
            *([rng] if rng is not None else []))
        self.indices = array["indices"]
        self.limit = array.get("limit")
        self.names = member_names(self.base, self.indices)
        self.config = config
        self.make_runner = make_runner
        self.statuses = statuses
        self.emit = emit or (lambda event: None)
        self.clock = clock
        self.sleep = sleep
        self.poll = poll

    def info(self, index):
        return {"name": self.base, "index": index, "count": len(self.indices),
                "min": min(self.indices), "max": max(self.indices)}

    def _say(self, message):
        self.emit({"kind": "info", "run": self.base, "message": message})

    def run(self, wait=True, code=None):
        """Submit all indices (at most ``limit`` alive), then with ``wait`` follow them to their
        end. Returns the array's record: ``run`` (the array's name), ``status`` (done when every
        run ended done), ``runs`` (one record per index) and ``jobs`` (empty)."""
        submitted = {}
        ended = {}
        self._say("array of %d runs (%s%s)" % (
            len(self.indices), ", ".join(self.names[i] for i in self.indices[:3]) +
            (", ..." if len(self.indices) > 3 else ""),
            "; at most %d at a time" % self.limit if self.limit else ""))
        for index in self.indices:
            name = self.names[index]
            while self.limit:
                live = self._live(submitted, ended)
                if len(live) < self.limit:
                    break
                self.sleep(self.poll)
            config = dict(self.config, name=name)
            runner = self.make_runner(config, self.info(index), code)
            try:
                record = runner.run(wait=False)
            except placement.NoHostFits as exc:
                record = dict(runner.result(), status=RunStatus.FAILED.value,
                              reason=lifecycle.NO_CAPACITY, message=str(exc))
            record["index"] = index
            submitted[name] = record
            if record.get("status") in RunStatus.finished_statuses():
                ended[name] = record["status"]
            self._say("%s submitted (%d of %d): %s"
                      % (name, len(submitted), len(self.indices), record.get("status")))
        if wait:
            while len(ended) < len(submitted):
                self._live(submitted, ended)
                if len(ended) < len(submitted):
                    self.sleep(self.poll)
        return self._record(submitted, ended, wait)

    def _live(self, submitted, ended):
        """Names of the array's runs still alive; records the ones seen ending."""
        statuses = self.statuses()
        live = []
        for name, status in sorted(statuses.items()):
            if status in RunStatus.finished_statuses():
                if name in submitted and name not in ended:
                    ended[name] = status
                    self._say("%s %s" % (name, status))
            else:
                live.append(name)
        return live

    def _record(self, submitted, ended, waited):
        out = []
        for index in self.indices:
            name = self.names[index]
            record = dict(submitted[name])
            if name in ended:
                record["status"] = ended[name]
            out.append({"run": name, "index": index, "status": record.get("status"),
                        "reason": record.get("reason"), "message": record.get("message"),
                        "run_id": record.get("run_id"), "fleet": record.get("fleet")})
        statuses = [r["status"] for r in out]
        if waited:
            status = RunStatus.DONE.value if all(s == RunStatus.DONE for s in statuses) else (
                RunStatus.FAILED.value)
        else:
            status = RunStatus.FAILED.value if RunStatus.FAILED in statuses else (
                RunStatus.SUBMITTED.value)
        failed = [r["run"] for r in out if r["status"] not in (RunStatus.DONE, None)
                  and (waited or r["status"] == RunStatus.FAILED)]
        return {"run": self.base, "array": self.base, "status": status,
                "reason": None, "jobs": [], "runs": out,
                "message": ("not done: %s" % ", ".join(failed)) if failed else None}


def stop_array(nodes, base, abort=False, by=None):
    """Stop every live run of the array ``base``; RunError when the hosts have none of it.
    ``by``: who stops them (the hosts' event record)."""
    statuses = array_statuses(nodes, base)
    if not statuses:
        raise RunError("no run or job array named %s on the fleets' hosts (gpufleet ps lists "
                       "runs)" % shorten(base))
    stopped = []
    for name, status in sorted(statuses.items()):
        if status not in RunStatus.finished_statuses():
            stopped += listing.stop_run(nodes, name, abort=abort, by=by).get("stopped") or []
    return {"name": base, "array": base, "runs": sorted(statuses), "stopped": sorted(stopped)}
