# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Submitting a service: its replicas through the task runner, then its route on the proxy.

``submit`` is what the task action (and gpufleet.direct) call: a task or a dev environment goes
to tasks.actions.submit as it is. A service, before anything is placed:

1. its proxy host is picked (services.publish: the fleet's queue host) and its replicas are
   kept to that host's fleet, so that the proxy reaches them by their internal addresses;
2. the proxy host is asked whether HAProxy is there (``proxy_check``); when it is not, the
   answer carries ``proxy_setup`` and nothing runs: playbooks/task.yml plays the role
   gpufleet.cluster.gateway on that host, then submits again (as it grows a fleet first);
3. the submitting user's token digest is put on the fleet's hosts (the members document the
   proxy reads), when the caller read the token;

then the runner places ``replicas`` one-node jobs (services.replicas.runnable), and once they
all run (the run's ``running`` event, or when a detached submission returns) the Route goes to
the proxy host (``proxy_publish``). The answer carries ``service``: the URLs and the proxy.
"""

from __future__ import annotations

from typing import Any, Callable, Iterable, Mapping, Optional, cast

from ..tasks import actions, membership, rankplan, surveys
from ..core.errors import GpufleetError
from ..spec import support
from ..tasks.errors import PlanError
from ..tasks.records import ScaleEvent
from ..tasks.ssh import parallel
from ..fleets import records as fleet_records
from . import autoscale, gateways, publish, replicas, rolling, tokens
from .publish import addresses_of

SERVICE = "service"


class Publisher(object):
    """Publishes one service's route on its proxy host, each time its replicas all run."""

    def __init__(self, config: Mapping[str, Any], run: str, user: str, fleet: str,
                 proxy_node: Any, nodes: Mapping[str, Any], addresses: Mapping[str, str],
                 emit: Callable[[dict], None], proxy: Mapping[str, Any],
                 listen: Optional[Mapping[str, Any]] = None,
                 proxy_instance: Optional[Mapping[str, Any]] = None,
                 fleet_instances: Iterable[Mapping[str, Any]] = ()) -> None:
        self.proxy = dict(proxy)
        self.listen = listen
        # A gateway's host, and the hosts of the service's fleet it must reach (publish.reach).
        self.proxy_instance = proxy_instance
        self.fleet_instances = list(fleet_instances)
        self.config = config
        self.run = run
        self.user = user
        self.fleet = fleet
        self.proxy_node = proxy_node
        self.nodes = nodes
        self.addresses = addresses
        self.emit = emit
        self.published = False
        self.error: Optional[str] = None

    def containers(self) -> dict[str, list]:
        answers = parallel(sorted(self.nodes), lambda h: self.nodes[h].call(
            "status", {"run": self.run}))
        return dict((host, (answer or {}).get("containers") or [])
                    for host, (answer, error) in answers.items() if error is None)

    def publish(self) -> bool:
        """Publish the route with the replicas the hosts report now; a failure is said (an
        ``info`` event) and kept in ``error``, the run goes on."""
        try:
            found = publish.replicas_of(self.config, self.containers(), self.addresses)
            route = publish.route_of(self.config, self.run, self.user, self.fleet, found,
                                     listen=self.listen)
            publish.reach(self.proxy_instance, self.fleet_instances)
            answer = publish.publish(self.proxy_node, route, self.listen)
        except publish.PublishError as exc:
            self.error = str(exc)
            self.emit({"kind": "info", "run": self.run, "message": str(exc)})
            return False
        if (answer or {}).get("certificate_error"):   # published, with the gateway's own certificate
            self.emit({"kind": "info", "run": self.run, "message": "service %s: %s"
                       % (self.run, answer["certificate_error"])})
        first = not self.published
        self.published, self.error = True, None
        if first:   # what gpufleet apply prints as dstack apply does (render.run_table)
            model = self.config.get("model") or {}
            self.emit(dict(self.proxy, kind="service", run=self.run,
                           model=model.get("name") if isinstance(model, dict) else None))
        return True

    def sink(self, emit: Callable[[dict], None]) -> Callable[[dict], None]:
        """``emit`` that also publishes when the run's replicas all run (again after a
        resubmission)."""
        def wrapped(event: dict) -> None:
            emit(event)
            if event.get("kind") == "run" and event.get("status") == "running" or \
                    event.get("kind") == "replica" and event.get("status") == "respawned":
                self.publish()   # a replica started again has a new port
        return wrapped


def queue_hook(event: Mapping[str, Any], fleets: list, nodes: Mapping[str, Any]
               ) -> Optional[dict[str, Any]]:
    """What a pass over the queue (tasks.queue.QueuePass's ``services``) does for a service:
    ``{"kind": "started", "entry"}``: the service the pass started from its queue entry (first
    started, or resubmitted under retry on other hosts and ports) is published with the
    replicas its hosts report now (the route replaces the one the proxy held);
    ``{"kind": "ended", "record"}``: the route of a service run that finished is taken off its
    proxy host (nothing changes where it is gone already); a ScaleEvent (``{"kind":
    "scale"}``): the service follows its request rate (services.autoscale). ``nodes``:
    ``{host: Node}`` of the pass. Answers ``{"changed": bool}``
    (None for a run that is no service), or GpufleetError (PublishError, RollError...)."""
    if event.get("kind") == "scale":
        return autoscale.follow(cast(ScaleEvent, event), fleets, nodes)
    if event.get("kind") == "ended":
        return publish.unpublish_stopped(event["record"], nodes)
    if event.get("kind") == "respawned":
        return _replicas_again(event["record"], fleets, nodes)
    entry = event.get("entry") or {}
    config = entry.get("config") or {}
    proxy = config.get("service")
    if event.get("kind") != "started" or not isinstance(proxy, dict) or \
            not proxy.get("proxy_host"):
        return None
    run = str(entry.get("run") or config.get("name") or "")
    fleet = str((config.get("fleets") or [""])[0])
    addresses = addresses_of(fleets, fleet)
    if proxy["proxy_host"] not in nodes:
        raise publish.PublishError("could not publish service %s: its proxy host %s cannot be "
                                   "reached from this controller" % (run, proxy["proxy_host"]))
    publisher = Publisher(config, run, entry.get("user") or "", fleet,
                          nodes[proxy["proxy_host"]],
                          dict((h, n) for h, n in nodes.items() if h in addresses), addresses,
                          lambda _event: None, proxy,
                          proxy_instance=_one(publish.instances_of(
                              fleets, name=proxy["proxy_host"])),
                          fleet_instances=publish.instances_of(fleets, fleet))
    if not publisher.publish():
        raise publish.PublishError(publisher.error or "could not publish service %s" % run)
    return {"changed": True}


def _move_refusal(record: Mapping[str, Any], name: str, gateway: Optional[Mapping[str, Any]],
                  proxy_instance: Mapping[str, Any]) -> str:
    """Why a running service is not moved to another proxy by an apply: its old route would
    stay behind, pointing at ports other containers may take."""
    service = record.get("service") or {}
    was = ("gateway %s" % service["gateway"]) if service.get("gateway") else (
        "the proxy of its fleet on %s" % service.get("proxy_host"))
    now = ("gateway %s" % gateway["name"]) if gateway else (
        "the proxy of its fleet on %s" % proxy_instance["name"])
    return ("service %s runs published by %s, and this apply would publish it by %s: stop it "
            "(gpufleet stop %s) and apply it again to move it" % (name, was, now, name))


def _republish(record: Mapping[str, Any], publisher: Publisher, proxy: Mapping[str, Any],
               lost: Optional[str], emit: Callable[[dict], None]) -> None:
    """Publish the running service ``record`` where ``proxy`` says, with the replicas running
    now (``apply`` prints its URL again), and have its replicas note it (publish.repoint);
    ActionError when the proxy refuses, before anything else changes."""
    if not publisher.publish():
        raise actions.ActionError(publisher.error or "could not publish service %s on %s"
                                  % (record["name"], proxy["proxy_host"]))
    for problem in publish.repoint(publisher.nodes, record, proxy, lost):
        emit({"kind": "info", "run": record["name"], "message": "service %s is published on "
              "%s, and its %s still names %s" % (record["name"], proxy["proxy_host"], problem,
                                                 lost or "where it was")})


def _lost_replicas(record: Mapping[str, Any], lost: str, nodes: Mapping[str, Any]
                   ) -> Optional[str]:
    """Why a service whose proxy host ``lost`` is gone is not published elsewhere by this
    apply: replicas of it were on hosts that are gone too (they are not made again by an
    apply); None when every replica's host is there."""
    jobs = record.get("jobs") or []
    seen = set(j.get("job_num") for j in jobs)
    # A replica of a host no fleet lists any more is not among the record's jobs at all.
    gone = [str(n) for n in sorted(set(
        [int(j["job_num"]) for j in jobs if j.get("host") not in nodes] +
        [n for n in range(int(record.get("nodes") or 0)) if n not in seen]))]
    if not gone:
        return None
    return ("service %s lost its proxy host %s, and its replica%s %s with %s: stop it (gpufleet "
            "stop %s) and apply it again" % (record["name"], lost, "s" if len(gone) > 1 else "",
                                             ", ".join(gone), "them" if len(gone) > 1 else "it",
                                             record["name"]))


def _one(items: list) -> Optional[dict[str, Any]]:
    return items[0] if items else None


def _replicas_again(record: Mapping[str, Any], fleets: list, nodes: Mapping[str, Any]
                    ) -> Optional[dict[str, Any]]:
    """The route of ``record`` (a service some of whose replicas were made again) takes the
    replicas its hosts report now: a replica made again has a new host port."""
    service = record.get("service") or {}
    host = service.get("proxy_host")
    if not host or not service.get("port"):
        return None
    if host not in nodes:
        raise publish.PublishError("could not give service %s its new replicas: its proxy "
                                   "host %s cannot be reached from this controller"
                                   % (record["name"], host))
    addresses = addresses_of(fleets, str(record.get("fleet") or ""))
    answers = parallel(sorted(h for h in addresses if h in nodes), lambda h: nodes[h].call(
        "status", {"run": record["name"]}))
    held = set(j.get("host") for j in record.get("jobs") or [])
    silent = sorted(h for h, (_a, e) in answers.items() if e is not None and h in held)
    if silent:   # a route without its replicas there would send nothing to them
        raise publish.PublishError("could not give service %s its new replicas: %s did not "
                                   "answer" % (record["name"], ", ".join(silent)))
    found = dict((h, (a or {}).get("containers") or []) for h, (a, e) in answers.items()
                 if e is None)
    replicas_now = publish.replicas_of({"port": service["port"]}, found, addresses)
    answer = publish.set_replicas(nodes[host], record["name"], replicas_now)
    return {"changed": bool(answer.get("changed"))}


def token_digest(params: Mapping[str, Any], open_store: Callable[[], Any]) -> Optional[str]:
    """The hex SHA-256 of the submitting user's token when ``params`` submit a service, the
    token made in the controller's store on first use (services.tokens); None for anything
    else, whose submission never opens the store. ``open_store()``: the store, opened to write
    (plugin_utils.secret_store)."""
    try:
        config = actions.load_task(params)
        user = actions.submitter(params)
    except actions.ActionError:
        return None
    if config.get("type") != SERVICE:
        return None
    return tokens.user_digest(open_store(), user)


def _setup_answer(name, instance, answer, root):
    return {"run": name, "status": "pending", "changed": False,
            "proxy_setup": {"host": instance["name"], "fleet": instance.get("fleet"),
                            "hostname": instance.get("hostname"),
                            # what task.yml's add_host takes (fleets.records)
                            "host_entry": fleet_records.host_entry(instance, root)},
            "message": "HAProxy is %s on %s, the proxy host of fleet %s: it is set up first "
                       "(gpufleet.cluster.gateway)"
                       % ("not installed" if not answer.get("installed") else "not running",
                          instance["name"], instance.get("fleet"))}


def _roll(params: dict[str, Any], config: dict[str, Any], record: dict[str, Any],
          runnable: Callable[..., dict], publisher: Publisher,
          emit: Callable[[dict], None], check_mode: bool, proxy: Mapping[str, Any],
          lost: Optional[str] = None) -> tuple[dict[str, Any], bool]:
    """A second apply of a running service: services.rolling, reported as a submission. An
    autoscaled service keeps the count it runs, within its (new) range. ``lost``: the proxy
    host it lost (publish.running_proxy). A service published elsewhere now (publish.
    where_changed: ``publisher``'s host, or another address or URL) is published there before
    the roll, and its replicas note where it is (_republish)."""
    moved = bool(lost) or publish.where_changed(record, proxy)
    count = replicas.clipped(config, len(record.get("jobs") or []))   # a fixed one: its count
    _root, _fleets, make_runner = actions.runner_factory(
        params, config, emit, check_mode, lambda run_config: runnable(run_config, count),
        queue_hook)
    runner = make_runner(config)
    roll = rolling.Roll(runner, record, publisher.nodes, publisher.proxy_node,
                        publisher.addresses, config, publisher.user, publisher.fleet,
                        publisher.listen, emit, fresh=lambda _record: rolling.read_again(
                            publisher.nodes, record["name"], "; apply it again"),
                        reach=lambda: publish.reach(publisher.proxy_instance,
                                                    publisher.fleet_instances),
                        moved=moved)
    service = dict(proxy, port=int(config["port"]), replicas=count, published=True, error=None,
                   moved_from=lost)
    try:
        if check_mode:
            return {"run": record["name"], "status": "planned", "plan": roll.plan(),
                    "config": config, "changed": True, "rolls": True,
                    "replicas_now": len(record.get("jobs") or []), "service": service}, False
        if moved:   # published where it is now first, then rolled
            _republish(record, publisher, proxy, lost, emit)
        done = roll.run()
    except rolling.RollError as exc:
        raise actions.ActionError(str(exc)) from exc
    except GpufleetError as exc:
        raise actions.ActionError("service %s: %s" % (record["name"], exc)) from exc
    if done["unchanged"]:
        message = "service %s is up to date: nothing changed" % record["name"]
    else:
        parts = ["%s %s" % (rolling.replicas_text(len(done[key])), text)
                 for key, text in (("added", "added"), ("retired", "taken away"),
                                   ("rolled", "rolled to the new version")) if done[key]]
        message = "service %s: %s" % (record["name"], ", ".join(parts) or "updated")
    emit({"kind": "info", "run": record["name"], "message": message})
    return {"run": record["name"], "run_id": record["run_id"], "status": record["status"],
            "changed": not done["unchanged"], "rolled": done["rolled"],
            "added": done["added"], "retired": done["retired"], "message": message,
            "jobs": record.get("jobs") or [], "service": service}, False


def submit(params: dict[str, Any], emit: Optional[Callable[[dict], None]] = None,
           check_mode: bool = False, stop_event: Any = None,
           token_digest: Optional[str] = None,
           token_error: Optional[str] = None,
           gate: Optional[Callable[[dict], dict]] = None) -> tuple[dict[str, Any], bool]:
    """tasks.actions.submit for a task or a dev environment; for a service, see the module's
    text. ``token_digest``: the submitting user's token's SHA-256 (the caller has it from the
    controller's store: ``token_digest``), or None; ``token_error``: why the caller has none
    (said, and the service runs); ``gate``: what judges the runs ``params["after"]`` names
    (tasks.actions.submit). Returns ``(result, failed)``."""
    emit = emit or (lambda event: None)
    config = actions.load_task(params)
    if config.get("type") != SERVICE:
        more = {} if stop_event is None else {"stop_event": stop_event}
        return actions.submit(params, emit=emit, check_mode=check_mode, services=queue_hook,
                              gate=gate, **more)
    if params.get("array"):
        raise actions.ActionError("array: a service is not run as a job array; give it "
                                  "replicas instead")
    refused = support.refusals(config)   # what gpufleet validate says of it too
    if refused:
        raise actions.ActionError("; ".join(str(p) for p in refused))
    try:
        name = rankplan.run_name(config)
    except PlanError as exc:
        raise actions.ActionError(str(exc)) from exc
    config = dict(config, name=name)
    root, fleets = actions.fleets_of(params)
    try:
        instance = publish.proxy_instance(config, fleets)
    except publish.PublishError as exc:
        raise actions.ActionError(str(exc)) from exc
    fleet = instance["fleet"]
    every_node = surveys.nodes_of(fleets, root)
    nodes = dict((host, node) for host, node in every_node.items()
                 if host in addresses_of(fleets, fleet))
    if instance["name"] not in nodes:
        raise actions.ActionError("the proxy host %s of fleet %s cannot be reached from this "
                                  "controller" % (instance["name"], fleet))
    try:
        gateway = gateways.resolve(config, fleets, every_node)
    except gateways.GatewayError as exc:
        raise actions.ActionError(str(exc)) from exc
    live = rolling.live_services(nodes)
    record = rolling.live_record(live, name)
    lost = None
    if record is not None and not gateway:   # the host that publishes it keeps it
        try:
            instance, lost = publish.running_proxy(record, instance, fleets, every_node)
        except publish.PublishError as exc:
            raise actions.ActionError(str(exc)) from exc
        if lost:
            problem = _lost_replicas(record, lost, every_node)
            if problem:
                raise actions.ActionError(problem)
    proxy_instance = gateway["instance"] if gateway else instance
    proxy_node = every_node[proxy_instance["name"]]
    try:
        replicas.check_clash(config, name, proxy_instance["name"], live)
    except replicas.ServiceError as exc:
        raise actions.ActionError(str(exc)) from exc
    if gateway:   # set up when it was applied (gateways.resolve asked it)
        answer, listen = {"installed": True, "running": True}, gateway["listen"]
        try:
            proxy = gateways.proxy_of(name, gateway, config)
        except gateways.GatewayError as exc:
            raise actions.ActionError(str(exc)) from exc
        problem = publish.reach_problem(gateway["name"], proxy_instance,
                                        publish.instances_of(fleets, fleet))
        if problem:
            raise actions.ActionError(problem)
        try:
            gateways.check_clash(gateway, proxy_node, name, fleet, config)
        except gateways.GatewayError as exc:
            raise actions.ActionError(str(exc)) from exc
    else:
        try:
            answer = publish.check(proxy_node)
        except publish.PublishError as exc:
            raise actions.ActionError(str(exc)) from exc
        listen = publish.listen_of(answer, instance)   # where the gateway role has it listen
        proxy = replicas.proxy_of(name, instance["name"], publish.url_address(listen, instance),
                                  config.get("model"), listen["port"])
    if not check_mode and not (answer.get("installed") and answer.get("running")):
        return dict(_setup_answer(name, instance, answer, root), moved_from=lost), False
    if lost:   # said once, by the pass that moves it (a plan says it in its own words)
        emit({"kind": "info", "run": name, "message": "service %s: its proxy host %s is no "
              "longer a host of fleet %s; the proxy on %s publishes it from now on"
              % (name, lost, fleet, instance["name"])})
    user = actions.submitter(params)
    # A gateway checks tokens against its own members (tasks/hostside/proxyconf.py).
    where = ("gateway", gateway["name"], {proxy_instance["name"]: proxy_node}) if gateway \
        else ("fleet", fleet, nodes)
    if token_error and not check_mode:
        emit({"kind": "info", "run": name, "message": "your token was not put on %s %s's "
              "hosts: %s" % (where[0], where[1], token_error)})
    if token_digest and not check_mode:
        try:
            membership.publish_token(where[2], where[1], user, token_digest)
        except GpufleetError as exc:   # the service runs; its requests need a token there
            emit({"kind": "info", "run": name, "message": "your token is not on %s %s's "
                  "hosts: %s" % (where[0], where[1], exc)})

    def runnable(run_config: dict[str, Any], count: Optional[int] = None) -> dict[str, Any]:
        return replicas.runnable(dict(run_config, fleets=[fleet]), proxy, count)

    publisher = Publisher(config, name, user, fleet, proxy_node, nodes,
                          addresses_of(fleets, fleet), emit, proxy, listen,
                          proxy_instance=proxy_instance,
                          fleet_instances=publish.instances_of(fleets, fleet))
    if not lost and record is not None and (record.get("service") or {}).get(
            "proxy_host") not in (None, proxy_instance["name"]):
        raise actions.ActionError(_move_refusal(record, name, gateway, proxy_instance))
    if record is not None:   # running: its replicas are rolled to this version
        return _roll(params, config, record, runnable, publisher, emit, check_mode, proxy,
                     lost)
    result, failed = actions.submit(dict(params, name=name), emit=publisher.sink(emit),
                                    check_mode=check_mode, stop_event=stop_event,
                                    runnable=runnable, config=config,
                                    services=queue_hook, gate=gate)
    if not check_mode and not publisher.published and not failed and (
            result.get("status") in ("submitted", "provisioning", "running")):
        publisher.publish()   # detached: its containers are made, their ports known
    if not check_mode and params.get("wait") and publisher.published and (
            result.get("status") in ("failed", "terminated", "done")):
        try:   # an attached run that ended: its route goes with it
            publish.unpublish(proxy_node, name)
            publisher.published = False
        except publish.PublishError as exc:
            emit({"kind": "info", "run": name, "message": str(exc)})
    result["service"] = dict(proxy, port=int(config["port"]),
                             replicas=replicas.replica_count(config),
                             published=publisher.published, error=publisher.error)
    return result, failed
