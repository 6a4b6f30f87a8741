# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The fleets and their hosts as a run sees them: the fleet records (from the fleet files, the
backends and the SSH fleets this controller applied), a Node per host, and the survey that asks
every host at once for its task containers, claims and queue entries (one request per host).
Placing a run (tasks.runs), listing runs (tasks.listing), the queue's passes (tasks.queue) and
the health and silence checks all start from here.
"""

from __future__ import annotations

import os

from ..backends.docker_cli import DockerError
from ..fleets import access
from ..fleets import apply as fleet_apply
from ..fleets import state
from . import membership
from .errors import RunError
from .ssh import Node, parallel


def _describe_file(path, docker, root, local_nodes=None):
    from ..spec import SpecError, parse_file, parse_hosts_file

    try:
        config, _warnings = parse_hosts_file(path)
    except SpecError as exc:
        try:   # another kind of file: say which
            kind = parse_file(path)[0].get("type")
        except SpecError:
            raise RunError(str(exc)) from exc
        if kind in ("fleet", "gateway"):   # a gateway gpufleet does not make: its refusal
            raise RunError(str(exc)) from exc
        raise RunError("%s is a %s file; fleets must be fleet files (type: fleet)"
                       % (path, kind)) from None
    try:
        return fleet_apply.describe(config, path, docker, root,
                                    settings=state.backend_settings(root),
                                    local_nodes=local_nodes)
    except (fleet_apply.ApplyError, DockerError, state.StateError) as exc:
        raise RunError(str(exc)) from exc


def collect_fleets(paths=(), docker=None, root=None, discover=True, unreachable=False,
                   host_facts=False):
    """Fleet records: the fleets of the given fleet files, then every fleet the backends hold,
    then SSH fleets this controller applied (their files are remembered in the state dir).

    Each record gets ``access`` (fleets.access: ``key``, ``member``, ``key missing``); a
    fleet this controller has ``no access`` to is left out (``unreachable``: kept), so that
    no command tries it over SSH or waits for it.

    Each record gets ``facts`` (``{instance: gpufleet_host}``), the host facts cached when the
    fleet was applied. An SSH host with cached facts counts as ready (``idle``): it passed its
    checks when the fleet was last applied, and the runner asks it again before using it.
    With ``host_facts`` (placing a run), a fleet this controller reaches as a member, whose
    facts it never cached, gets them from its hosts (``member_facts``).
    """
    root = state.state_dir(root)
    found = []
    seen = set()
    given = [os.path.abspath(p) for p in paths or ()]
    remembered = []
    # The local engine is asked once for the nodes of every fleet: the files' local fleets
    # and the discovered ones are read from that one answer (two docker calls, not two per
    # fleet file and two more). Without an answer each file asks on its own, as it says why,
    # and no local fleet is discovered.
    local_nodes = None
    if discover:
        remembered = [p for p in state.remembered_files(root).values()
                      if os.path.abspath(p) not in given]
        if docker is not None:
            try:
                local_nodes = fleet_apply.local_fleet_nodes(docker)
            except DockerError:
                pass
    for path in given + remembered:
        try:
            record = _describe_file(path, docker, root, local_nodes)
        except RunError:
            if path in given:
                raise
            continue  # a remembered file that no longer reads is only a stale cache entry
        if record["name"] in seen:
            continue
        found.append(record)
        seen.add(record["name"])
    if discover:
        try:
            settings = state.backend_settings(root)
            held = fleet_apply.discover(None if local_nodes is None else docker, root,
                                        settings=settings, local_nodes=local_nodes)
        except (fleet_apply.ApplyError, state.StateError) as exc:
            raise RunError(str(exc)) from exc
        for record in held:
            if record["name"] not in seen:
                found.append(record)
                seen.add(record["name"])
    access.annotate(found, root, docker)
    if not unreachable:
        found = [record for record in found if access.reachable(record)]
    for record in found:
        record["facts"] = state.read_facts(root, record["name"])
        for instance in record["instances"]:
            if instance.get("backend") == "ssh" and instance["name"] in record["facts"]:
                instance["status"] = "idle"
    if host_facts:
        member_facts(found, root)
    return found


def member_facts(fleets, root):
    """Fill in the host facts of the fleets this controller reaches as a member (fleets.access)
    that its state dir has no facts of: a member did not apply the fleet, so it never cached
    them, and the hosts keep what the fleet's last apply measured on them (tasks.membership).
    What they say is cached here too (fleets.state), so this asks the hosts once."""
    for fleet in fleets:
        if fleet.get("access") != access.MEMBER:
            continue
        facts = fleet.get("facts") or {}
        live = [i for i in fleet.get("instances") or []
                if i.get("hostname") and i["name"] not in facts]
        if not live:
            continue
        nodes = dict((i["name"], Node(i, root=root)) for i in live)
        found = membership.host_facts(nodes)
        if found:
            fleet["facts"] = dict(facts, **found)
            try:
                state.write_facts(root, fleet["name"], fleet["facts"])
            except state.StateError:
                pass   # a cache: the next run asks the hosts again


def nodes_of(fleets, root=None, connect_timeout=20):
    """``{instance name: Node}`` for every instance with an address, but none of a fleet this
    controller has no access to (fleets.access)."""
    result = {}
    for fleet in fleets:
        if not access.reachable(fleet):
            continue
        for instance in fleet.get("instances") or []:
            if instance.get("hostname"):
                result[instance["name"]] = Node(instance, root=root,
                                                connect_timeout=connect_timeout)
    return result


def survey(nodes):
    """Ask every host for its task containers: ``({host: [containers]}, {host: error})``."""
    containers, _claims, _queues, errors = survey_with_queues(nodes)
    return containers, errors


class Survey(tuple):
    """A survey's ``(containers, claims, queues, errors)``, unpacked as that tuple, with what
    the hosts add for the per-user limits (tasks.admission): ``limits`` (``{host: the members
    document's caps, or None}``) and ``usage`` (``{host: {user: GPU-seconds in the last 24
    h}}``, the hosts' ``usage_24h``, for fair share); and ``mirrors`` (``{host: [summaries]}``,
    the copies of other hosts' queue entries each keeps: tasks.queue_mirror)."""

    def __new__(cls, parts, limits=None, usage=None, mirrors=None):
        made = super(Survey, cls).__new__(cls, tuple(parts))
        made.limits = dict(limits or {})
        made.usage = dict(usage or {})
        made.mirrors = dict(mirrors or {})
        return made


def limits_of(survey):
    """``{host: caps}`` a survey read (empty for a plain tuple)."""
    return getattr(survey, "limits", None) or {}


def usage_of(survey):
    """``{host: {user: GPU-seconds}}`` a survey read (empty for a plain tuple)."""
    return getattr(survey, "usage", None) or {}


def mirrors_of(survey):
    """``{host: [copies of queue entries]}`` a survey read (empty for a plain tuple)."""
    return getattr(survey, "mirrors", None) or {}


def survey_with_queues(nodes, probe=(), health=None, timeout=None, logs=None, pages=None,
                       index=None, indexes=None):
    """Every host's task containers, live claims and queue entries (tasks.hostside.booking), in one
    request per host: ``(containers, claims, queues, errors)``, each ``{host: ...}``. The hosts
    named in ``probe`` also read their GPUs' health in that request (tasks.hostside.healthside);
    what they said goes into the dict ``health`` (``{host: probe}``, for tasks.health). With
    ``logs`` (a request of tasks.hostside.logside's ``logs``), every host also answers the first
    pages of that run's jobs it keeps, into the dict ``pages`` (``{host: {job: page}}``, for
    tasks.joblogs). ``index`` (``{host: {"fleet", "run"}}``) asks those hosts for the run index
    (tasks.hostside.indexside); their answers go into the dict ``indexes``. ``timeout``: how long a
    host may take (the request's default when None; ps and the queue's passes look through
    tasks.silence.look, which gives tasks.supervisor.STATUS_TIMEOUT)."""
    probe = set(probe or ())
    limit = {} if timeout is None else {"timeout": timeout}

    def payload(host):
        asked = {"health": True} if host in probe else {}
        if logs:
            asked["logs"] = logs
        if index and host in index:
            asked["index"] = index[host]
        return asked

    answers = parallel(sorted(nodes), lambda h: nodes[h].call("status", payload(h), **limit))
    containers = {}
    claims = {}
    queues = {}
    errors = {}
    limits = {}
    usage = {}
    mirrors = {}
    for host, (answer, error) in answers.items():
        if error is not None:
            errors[host] = error
        else:
            containers[host] = answer["containers"]
            claims[host] = answer.get("claims") or []
            queues[host] = answer.get("queue") or []
            if health is not None and host in probe and "health" in answer:
                health[host] = answer["health"]
            if pages is not None and logs and "logs" in answer:
                pages[host] = answer["logs"]
            if indexes is not None and "index" in answer:
                indexes[host] = answer["index"]
            if isinstance(answer.get("limits"), dict):
                limits[host] = answer["limits"]
            if isinstance(answer.get("usage_24h"), dict):
                usage[host] = answer["usage_24h"]
            if answer.get("queue_mirror"):
                mirrors[host] = answer["queue_mirror"]
    return Survey((containers, claims, queues, errors), limits, usage, mirrors)
