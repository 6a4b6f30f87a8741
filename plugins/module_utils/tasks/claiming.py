# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Claiming the hosts of a placement before anything is started on them (the controller's side
of tasks.hostside.booking).

Placement reads what is busy from a survey, which another controller may be acting on at the
same moment. So a placement is only a proposal until every host of it has granted a claim: each
host checks, under its own lock, that the share is still free and records it. The first host of
the plan (in name order) is claimed alone and the others all at once; a refusal anywhere releases
what was granted, and the caller surveys and places again. Two submitters that want the same
hosts cannot both win, and since no host ever waits for another, nothing can deadlock.
"""

from __future__ import annotations

from ..core.errors import GpufleetError
from . import lifecycle
from .lifecycle import JobStatus
from .hostside import booking
from .ssh import parallel

CLAIM_LEASE = 900


class ClaimRefused(GpufleetError):
    """A host refused a claim: another run took it since the survey. ``reason`` says which."""

    def __init__(self, host, reason):
        super(ClaimRefused, self).__init__("%s: %s" % (host, reason))
        self.host = host
        self.reason = reason


def busy_map(containers, claims=None):
    """Blocks and GPUs taken on each host: live claims (``{host: [claims]}``), plus alive task
    containers that no claim covers."""
    busy = {}
    covered = {}   # by host, as the host counts (tasks.hostside.booking.claim_covers)
    for host, entries in (claims or {}).items():
        for claim in entries:
            covered.setdefault(host, set()).update(booking.claim_covers(claim))
            item = busy.setdefault(host, {"blocks": 0, "gpu_ids": []})
            item["blocks"] += int(claim.get("blocks") or 0)
            item["gpu_ids"] += [i for i in claim.get("gpu_ids") or [] if i not in item["gpu_ids"]]
    for host, entries in containers.items():
        for entry in entries:
            labels = entry["labels"]
            if booking.covered_by(labels, covered.get(host, ())) or (
                    lifecycle.job_status(entry)[0] not in JobStatus.up_statuses()):
                continue
            item = busy.setdefault(host, {"blocks": 0, "gpu_ids": []})
            try:
                item["blocks"] += int(labels.get("gpufleet.blocks") or 0)
            except ValueError:
                pass
            ids = labels.get("gpufleet.gpus") or ""
            item["gpu_ids"] += [i for i in ids.split(",") if i and i not in item["gpu_ids"]]
    return busy


def claim_of(job, run, submission, by=None, lease=CLAIM_LEASE):
    """The claim a placed job makes on its host (the ``claim`` request of
    tasks.hostside.booking): its ``shares`` (one per job number) are what the host adds up
    with the shares of the submission's other jobs there."""
    share = {
        "blocks": job.get("blocks") or 0,
        "gpu_ids": [str(g.get("id") if g.get("id") is not None else g.get("index"))
                    for g in job.get("gpus") or []],
        "whole": bool(job.get("whole_host")),
    }
    return dict(share, run=run["name"], run_id=run["id"], submission=submission,
                jobs=[job["job_num"]], total_blocks=job.get("total_blocks") or 1, by=by,
                lease=lease, shares={str(job["job_num"]): share})


def host_claims(jobs, run, submission, by=None):
    """``{host: claim}`` for placed ``jobs``: the claims of the jobs that share a host put
    together (a service's replicas may share one)."""
    claims = {}
    for job in jobs:
        claim = claim_of(job, run, submission, by)
        held = claims.get(job["host"])
        if held is not None:   # added up as the host adds them
            claim = booking.with_shares(held, dict(held["shares"], **claim["shares"]))
        claims[job["host"]] = claim
    return claims


def claim_hosts(nodes, placed, run, submission, by=None, extras=None, answers=None):
    """Claim every host of ``placed`` for ``run``; ClaimRefused (after releasing what was
    granted) when one is taken. Returns ``{host: claim}``.

    ``extras`` (``{host: {...}}``) go with a host's request: tasks.hostside.booking's ``replace``
    and ``image``; each granted host's answer is put in ``answers`` (a dict), when given."""
    claims = host_claims(placed["jobs"], run, submission, by)
    hosts = sorted(claims)
    asked = []

    def claim(host):
        answer = nodes[host].call("claim", dict(claims[host], **(extras or {}).get(host, {})))
        if not answer.get("claimed"):
            raise ClaimRefused(host, answer.get("reason") or "refused")
        if answers is not None:
            answers[host] = answer
        return host

    def attempt(group):
        asked.extend(group)
        refused = None
        results = parallel(group, lambda h: _guard(claim, h))
        for host in group:
            value, error = results[host]
            if error is not None:
                raise error
            if isinstance(value, ClaimRefused):
                refused = refused or value
        if refused is not None:
            raise refused

    try:
        attempt(hosts[:1])
        attempt(hosts[1:])
    except Exception:
        # Every host asked, not only those whose grant arrived: an answer lost on the way
        # would otherwise leave its claim until the lease ends.
        release_hosts(nodes, asked, run)
        raise
    return claims


def _guard(function, host):
    try:
        return function(host)
    except ClaimRefused as exc:
        return exc


def release_hosts(nodes, hosts, run):
    """Drop ``run``'s claims on ``hosts`` (best effort: an unreachable host's claim lapses with
    its lease)."""
    request = {"run": run["name"], "run_id": run["id"]}
    parallel(sorted(hosts), lambda h: nodes[h].call("release", request))
