# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Per-user limits, the controller's side (tasks.hostside.admitside keeps the ledger on the
fleet's queue host).

A fleet's members document may cap what one user runs at a time (runs, GPUs, nodes; the
user's own caps or the default's, teams.members.limits_for). Every survey's answer carries the
caps (tasks.surveys.Survey.limits), so a placement knows without a request of its own whether
its run's owner is capped: a run of a user without caps is placed and claimed as before. A
capped user's run, once placed and before its hosts are claimed, is *admitted* by the placed
fleet's queue host, under booking's lock, from the host's ledger and the runs this
controller's survey saw alive. Refused, the placement raises UserLimit: the run waits in the
queue as ``pending`` with the reason ``user limit`` (whatever its retry policy says: a user
limit is not a failure), and a later pass over the queue admits it once the owner's use drops.
"""

from __future__ import annotations

from ..teams import identity, members
from . import lifecycle
from .container import RUN_ID_LABEL, USER_LABEL
from .placement import NoHostFits
from .queue_records import USER_LIMIT, queue_host
from .ssh import NodeError
from .supervisor import RUN_LABEL


class UserLimit(NoHostFits):
    """The run's owner is at a cap: the run waits (``reason`` is USER_LIMIT, the message says
    which cap)."""

    reason = USER_LIMIT


def user_of(run):
    """The run's owner: the Runner's ``user`` (the submitter, or its queue entry's), else this
    controller's user."""
    user = getattr(run, "user", None)
    if user:
        return user
    try:
        return identity.user_name()
    except identity.IdentityError:
        return None


def caps(survey_limits, fleet_hosts, user):
    """The caps ``{runs, gpus, nodes}`` that the placed fleet's hosts say hold for ``user``, or
    None when none does (the user is not capped)."""
    if not user:
        return None
    for host in sorted(fleet_hosts):
        found = survey_limits.get(host)
        if not found:
            continue
        held = members.limits_for({"limits": found}, user)
        if any(value is not None for value in held.values()):
            return held
    return None


def wants(placed):
    """``(gpus, nodes)`` a placement takes."""
    jobs = placed.get("jobs") or []
    return (sum(len(job.get("gpus") or []) for job in jobs),
            len(set(job["host"] for job in jobs)))


def alive_and_ended(containers, claims):
    """From a survey: the runs alive (``[{"run", "run_id", "user", "gpus", "nodes"}]``: a
    container that holds its host, or a live claim) and the runs seen only ended."""
    alive = {}
    seen = set()
    for host, entries in containers.items():
        for entry in entries:
            labels = entry.get("labels") or {}
            run = labels.get(RUN_LABEL)
            if not run:
                continue
            seen.add(run)
            if not lifecycle.holds_host(entry):
                continue
            item = alive.setdefault(run, {"run": run, "run_id": labels.get(RUN_ID_LABEL),
                                          "user": labels.get(USER_LABEL), "gpus": 0,
                                          "hosts": set()})
            item["gpus"] += len([i for i in (labels.get("gpufleet.gpus") or "").split(",") if i])
            item["hosts"].add(host)
    for host, entries in (claims or {}).items():
        for claim in entries:
            run = claim.get("run")
            if not run:
                continue
            item = alive.setdefault(run, {"run": run, "run_id": claim.get("run_id"),
                                          "user": None, "gpus": 0, "hosts": set()})
            if host not in item["hosts"]:
                item["gpus"] += len(claim.get("gpu_ids") or [])
                item["hosts"].add(host)
    out = []
    for run in sorted(alive):
        item = alive[run]
        out.append({"run": run, "run_id": item["run_id"], "user": item["user"],
                    "gpus": item["gpus"], "nodes": len(item["hosts"])})
    return out, sorted(seen - set(alive))


class Admission(object):
    """One run's admission: ``admit`` before its hosts are claimed, ``release`` when the
    submission does not start after all."""

    def __init__(self, run):
        self.run = run
        self.host = None

    def admit(self, placed, survey, containers, claims, whole, probe=False):
        """Admit ``placed`` (a placement of the run) or raise UserLimit; a no-op for a user
        without caps (False). ``survey``: the tasks.surveys.Survey the placement read.
        ``probe``: only ask (a plan), writing nothing on the queue host."""
        gpus, nodes = wants(placed)
        fleet = next((f for f in self.run.fleets if f.get("name") == placed.get("fleet")), None)
        return self._ask(fleet, survey, containers, claims, whole, gpus, nodes, probe=probe)

    def check(self, survey, whole):
        """For a run that found no capacity: raise UserLimit when its owner's caps would hold
        it back anyway (its nodes, no GPUs counted), so that it waits for that; else return."""
        containers, claims = survey[0], survey[1]
        nodes = sum(int(g.get("nodes") or 1) for g in self.run.config.get("groups") or []) or \
            int(self.run.config.get("nodes") or 1)
        for fleet in self.run.fleets:
            self._ask(fleet, survey, containers, claims, whole, 0, nodes, probe=True)

    def _ask(self, fleet, survey, containers, claims, whole, gpus, nodes, probe):
        from .surveys import limits_of

        if fleet is None:
            return False
        user = user_of(self.run)
        hosts = [i["name"] for i in fleet.get("instances") or [] if i.get("name")]
        held = caps(limits_of(survey), hosts, user)
        if held is None:
            return False
        errors = dict((h, True) for h in hosts if h not in containers)
        host = queue_host([fleet], [fleet["name"]], errors) or queue_host([fleet], [], {})
        if host is None or host not in self.run.nodes:
            return False
        alive, ended = alive_and_ended(containers, claims)
        request = {"run": self.run.name, "run_id": self.run.run_id, "user": user, "gpus": gpus,
                   "nodes": nodes, "alive": alive, "ended": ended, "whole": bool(whole)}
        if probe:
            request["probe"] = True
        try:
            answer = self.run.nodes[host].call("admit", request)
        except NodeError as exc:
            if probe:
                return False
            raise UserLimit("user %s is capped (%s) and the fleet's queue host %s cannot admit "
                            "the run now: %s" % (user, _caps_text(held), host, exc.detail),
                            [USER_LIMIT]) from exc
        if not answer.get("admitted"):
            raise UserLimit("%s: %s" % (USER_LIMIT, answer.get("detail") or _caps_text(held)),
                            [USER_LIMIT])
        if not probe:
            self.host = host
        return True

    def release(self):
        """Forget the run's admission (best effort: its lease ends it otherwise)."""
        host, self.host = self.host, None
        if host is None or host not in self.run.nodes:
            return
        try:
            self.run.nodes[host].call("admit_release", {"run": self.run.name,
                                                        "run_id": self.run.run_id})
        except NodeError:
            pass


def _caps_text(held):
    return ", ".join("%s %s" % (value, name) for name, value in sorted(held.items())
                     if value is not None)
