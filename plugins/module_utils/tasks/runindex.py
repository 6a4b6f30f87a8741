# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Placing a run without asking every host: the run index kept on each fleet's record host.

A placement needs three things from the hosts: which are busy, whether a run of the same name is
alive (dstack refuses it), and where such a run left containers (the new run clears them). The
first is guarded anyway: every host a placement picks is claimed under that host's lock
(tasks.hostside.booking), and a host that is taken refuses the claim. The other two need a record of
where each run name is, because those hosts may be any of the fleet's. That record is the run
index (tasks.hostside.indexside), kept on the fleet's record host (``record_host``), the host that
also keeps the fleet's queue while it answers.

So a submission asks (``partial``):

1. the record host of every fleet, for its own containers, claims and queue, for the hosts
   where the run's name has containers, and for the hosts where any run may be alive;
2. the hosts where another run may be alive, when there are any (those named for the run's
   own name alone are taken as free: tasks.runs asks the ones it does not place on, and the
   claims of the others check them);

and then claims the hosts placement picks, trusting that the others are free (a refused claim
makes the next try ask every host). While it claims, it notes its hosts in the index
(``note_request``), before any container starts. A fleet whose hosts are mostly busy is asked
almost whole, in two round trips instead of one: the index pays where a fleet is large and its
runs are few or small.

Every host is still asked (the whole survey, as before) when the index cannot be trusted:

- a fleet's record host did not answer, or its index was not rewritten from a whole survey in
  the last ``MAX_AGE`` seconds (a new fleet, a host that was down, a controller of an older
  gpufleet);
- the queue holds runs that wait or may be resubmitted (tasks.queue must see every host);
- some host's GPU health is due to be read again (tasks.health, the same age), or a claim was
  refused.

A whole survey rewrites the index of every fleet whose record host answered, and marks it whole
when all of the fleet's hosts did (``reindex_requests``), so the index is trusted at most one
health period after a look at every host. Check mode always asks every host and writes nothing.
Pure Python: the caller sends the requests (tasks.runs).
"""

from __future__ import annotations

from ..fleets.status import InstanceStatus
from .hostside.booking import HOLDING_STATES, is_run_name
from .health import MAX_AGE as HEALTH_MAX_AGE
from .queue_records import WAITING
from .supervisor import RUN_LABEL

# How long a rewritten index is trusted: the health period, so that one whole survey serves
# both.
MAX_AGE = HEALTH_MAX_AGE


def fleet_hosts(fleet, nodes):
    """The fleet's instances that a survey would ask (those with an address)."""
    return [i["name"] for i in fleet.get("instances") or [] if i.get("name") in nodes]


def record_host(fleet):
    """The instance that keeps the fleet's run index: its instance with an address and the
    lowest number that its backend does not call gone, or None. Every controller picks the
    same one (it is tasks.queue.queue_host's choice when every host is ready and answers)."""
    # The backend's word is the same for every controller. An SSH fleet's instances are "idle"
    # only on a controller that measured them, so their status does not choose the record
    # host: every controller must pick the same one.
    for inst in sorted(fleet.get("instances") or [], key=lambda i: i.get("num") or 0):
        if inst.get("hostname") and (inst.get("backend") == "ssh" or inst.get("status") not in
                                     InstanceStatus.absent_statuses()):
            return inst["name"]
    return None


def index_requests(fleets, nodes, run):
    """``{record host: {"fleet", "run"}}`` for every fleet with hosts, or None when a fleet with
    hosts has no record host (nothing can be trusted about it)."""
    asked = {}
    for fleet in fleets:
        if not fleet_hosts(fleet, nodes):
            continue
        host = record_host(fleet)
        if host is None or host not in nodes or host in asked:
            return None
        asked[host] = {"fleet": fleet["name"], "run": run}
    return asked


def trusted(view, max_age=MAX_AGE):
    """Whether an index's answer (tasks.hostside.indexside.index_view) may stand for its fleet."""
    age = (view or {}).get("age")
    return age is not None and age <= max_age


def waiting(queues):
    """Whether a queue the survey read holds an entry that a pass acts on."""
    return any(entry.get("state") in WAITING for found in queues.values() for entry in found)


def merge(first, second):
    """Two surveys of different hosts as one ``(containers, claims, queues, errors)`` (a
    tasks.surveys.Survey, with both surveys' limits and usage)."""
    from .surveys import Survey, limits_of, usage_of

    return Survey((dict(a, **b) for a, b in zip(first, second)),
                  dict(limits_of(first), **limits_of(second)),
                  dict(usage_of(first), **usage_of(second)))


def partial(nodes, fleets, run, ask, assumed=None):
    """The survey a placement of ``run`` needs when every fleet's index can be trusted, else
    None (ask every host). ``ask(nodes, index=None, indexes=None)`` is
    tasks.surveys.survey_with_queues. Hosts it leaves out are in none of the four dicts.

    With ``assumed`` (a set), the hosts that the index names for ``run`` alone (where only an
    earlier run of this name may be alive) are not asked but added to ``assumed``: the caller
    takes them as free, and must ask those it does not place on, and have the claims of those
    it places on check that no run of this name is alive there (tasks.runs). That is the
    common re-apply of a task whose run ended, whose hosts would otherwise each be asked
    only to find them idle."""
    requests = index_requests(fleets, nodes, run)
    if requests is None:
        return None
    views = {}
    answer = ask(dict((h, nodes[h]) for h in requests), index=requests, indexes=views)
    if answer[3] or waiting(answer[2]) or not all(trusted(views.get(h)) for h in requests):
        return None
    own = set(h for view in views.values() for h in view.get("hosts") or () if h in nodes)
    others = set(h for view in views.values() for h in view.get("others") or () if h in nodes)
    if assumed is None:
        named = own | others
    else:
        named = others
        assumed.update(own - others - set(requests))
    named = sorted(named - set(requests))
    if named:
        answer = merge(answer, ask(dict((h, nodes[h]) for h in named)))
        if waiting(answer[2]):
            return None
    return answer


def reindex_requests(fleets, nodes, survey, age=0.0):
    """``{record host: reindex request}`` from a whole survey, for every fleet whose record
    host answered; ``complete`` when all of the fleet's hosts did. ``age``: seconds since the
    survey began (the host keeps what was noted since, and dates ``complete`` from then)."""
    containers, claims, _queues, _errors = survey
    requests = {}
    for fleet in fleets:
        hosts = fleet_hosts(fleet, nodes)
        host = record_host(fleet)
        if not hosts or host not in containers:
            continue
        runs = {}
        alive = {}
        for name in hosts:
            for entry in containers.get(name) or []:
                label = (entry.get("labels") or {}).get(RUN_LABEL)
                if is_run_name(label):   # a label gpufleet did not write is not a run
                    runs.setdefault(label, set()).add(name)
                    if entry.get("state") in HOLDING_STATES:
                        alive.setdefault(label, set()).add(name)
            for claim in claims.get(name) or []:   # the survey's claims are the live ones
                if is_run_name(claim.get("run")):
                    runs.setdefault(claim["run"], set()).add(name)
                    alive.setdefault(claim["run"], set()).add(name)
        answered = [h for h in hosts if h in containers]
        requests[host] = {"fleet": fleet["name"],
                          "runs": dict((r, sorted(h)) for r, h in sorted(runs.items())),
                          "alive": dict((r, sorted(h)) for r, h in sorted(alive.items())),
                          "answered": answered, "members": hosts, "age": age,
                          "complete": len(answered) == len(hosts)}
    return requests


def idle_hosts(hosts, survey):
    """Of ``hosts``, those the survey found with no alive task container and no live claim."""
    containers, claims = survey[0], survey[1]
    return [h for h in hosts if h in containers and not claims.get(h) and not any(
        c.get("state") in HOLDING_STATES for c in containers[h])]


def note_request(fleets, placed, run, survey, user=None):
    """``(record host, note request)`` for the hosts of a placement, or None when its fleet's
    record host did not answer the survey the placement used. That index then misses the run
    until the next whole survey rewrites it, at most MAX_AGE later (docs/concepts.md names the
    gap). The request also names the fleet's hosts the survey found idle, so that the index
    stops sending submitters to hosts whose runs ended: those of the placement too (the note
    makes them alive for ``run`` alone; an earlier run noted there is no longer). ``user``, the
    run's submitter, is kept with its entry."""
    fleet = next((f for f in fleets if f.get("name") == placed.get("fleet")), None)
    host = record_host(fleet) if fleet is not None else None
    if host is None or host not in survey[0]:
        return None
    hosts = sorted(set(job["host"] for job in placed["jobs"]))
    idle = idle_hosts(sorted(fleet_hosts(fleet, survey[0])), survey)
    request = {"fleet": fleet["name"], "run": run, "hosts": hosts, "idle": idle}
    if user:
        request["user"] = user
    return host, request
