# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Autoscaling: a service with ``replicas: MIN..MAX`` and ``scaling`` follows its request rate,
with no server.

The measure is the proxy's: HAProxy counts each service's requests (those that passed auth and
rate limits) over its window in a stick table (tasks.hostside.proxyconf), and ``proxy_status``
reads it back with how long the proxy has been counting (a reload starts the count again).
``desired`` is dstack's target tracking on that measure (its RPSAutoscaler): the count is the
rate divided by ``target``, rounded up and kept within the range; a scale-up waits
``scale_up_delay`` and a scale-down ``scale_down_delay`` after the last change of the count
(the proxy host keeps when that was: ``proxy_roll``). One difference: a count that does not
cover a whole window yet (the proxy reloaded less than a window ago) only ever scales up, since
it can only be short of the rate.

``follow`` carries a decision out. It runs in a pass over the queue (tasks.queue.QueuePass,
``{"kind": "scale"}``), so whatever schedules passes schedules autoscaling: an AWX schedule or
a systemd timer of playbooks/reconcile.yml. An autoscaled service keeps its queue entry
(tasks.queue_records.keeps_entry), which holds what a new replica needs (its configuration,
code, secrets); the change itself is services.rolling's scale (more replicas placed beside the
others, fewer drained first), under the same lease as an apply's update.
"""

from __future__ import annotations

import math
from typing import Any, Mapping, NamedTuple, Optional

from ..core.errors import GpufleetError
from ..tasks.records import ScaleEvent
from ..tasks.ssh import NodeError
from . import publish, rolling


class Decision(NamedTuple):
    """How many replicas a service should run, and why (said to the user)."""
    replicas: int
    why: str


def _rate_text(rate: float) -> str:
    return ("%.2f" % rate).rstrip("0").rstrip(".")


def desired(current: int, scaling: Mapping[str, Any], requests: Optional[int],
            counted_for: float, scaled_at: Optional[float], now: float) -> Decision:
    """The replica count a service of ``current`` replicas should have (``scaling``:
    replicas.scaling_of's record), given ``requests`` counted over its window (None: the
    proxy counts none for it), for ``counted_for`` seconds at most, the count's last change
    at ``scaled_at`` (None: never) and ``now`` on the same clock."""
    least, most = int(scaling["min"]), int(scaling["max"])
    window = int(scaling["window"])
    within = min(max(current, least), most)
    if requests is None:
        return Decision(within, "the proxy counts no request of it")
    whole = counted_for >= window
    rate = float(requests) / window
    wanted = min(max(int(math.ceil(rate / float(scaling["target"]) - 1e-9)), least), most)
    why = "%s requests/s over %d s, target %s per replica" % (
        _rate_text(rate), window, _rate_text(float(scaling["target"])))
    since = None if scaled_at is None else now - float(scaled_at)
    if wanted > current:
        if current and since is not None and since < float(scaling["scale_up_delay"]):
            return Decision(within, why + "; scale_up_delay holds for %d s more"
                            % int(math.ceil(float(scaling["scale_up_delay"]) - since)))
        return Decision(wanted, why)
    if wanted < current:
        if not whole:
            return Decision(within, why + "; the proxy has counted for %d s only, less than "
                            "the window" % int(counted_for))
        if since is not None and since < float(scaling["scale_down_delay"]):
            return Decision(within, why + "; scale_down_delay holds for %d s more"
                            % int(math.ceil(float(scaling["scale_down_delay"]) - since)))
        return Decision(wanted, why)
    return Decision(wanted, why)


def measure(proxy_node: Any, run: str, run_id: Optional[str]) -> dict[str, Any]:
    """What ``desired`` takes of the proxy host's ``proxy_status``: ``{"requests",
    "counted_for", "scaled_at", "now"}``; GpufleetError when the proxy does not answer."""
    try:
        answer = proxy_node.call("proxy_status", {"run": run}) or {}
    except NodeError as exc:
        raise GpufleetError("service %s is not autoscaled now: its proxy on %s did not answer: "
                            "%s" % (run, proxy_node.name, exc)) from exc
    counted = (answer.get("requests") or {}).get(run)
    mine = answer.get("scaled_run_id") == run_id
    return {"requests": None if counted is None else int(counted.get("count") or 0),
            "counted_for": float(answer.get("uptime") or 0),
            "scaled_at": answer.get("scaled_at") if mine else None,
            "now": float(answer.get("now") or 0)}


def follow(scale: ScaleEvent, fleets: list, nodes: Mapping[str, Any]) -> dict[str, Any]:
    """Measure the service of ``scale`` (a pass's event, tasks.records.ScaleEvent) and take it
    to the count ``desired`` says: ``{"changed", "count", "why"}``; GpufleetError (said by the
    pass) when it cannot. The decision is made again under the update's lease, from the
    service and its entry read again: an apply or another pass that changed it meanwhile wins."""
    record, config = scale["record"], dict(scale["entry"].get("config") or {})
    emit = scale["emit"]
    service = dict(config.get("service") or {})
    scaling = service.get("scaling")
    name = str(record["name"])
    current = len(record.get("jobs") or [])
    if not scaling:
        return {"changed": False, "count": current, "why": "it does not autoscale"}
    proxy_host = str(service.get("proxy_host") or "")
    if proxy_host not in nodes:
        raise GpufleetError("service %s is not autoscaled now: its proxy host %s cannot be "
                            "reached from this controller" % (name, proxy_host))
    proxy_node = nodes[proxy_host]

    def decide(now: Mapping[str, Any]) -> Decision:
        found = measure(proxy_node, name, now.get("run_id"))
        return desired(len(now.get("jobs") or []), scaling, found["requests"],
                       found["counted_for"], found["scaled_at"], found["now"])

    decision = decide(record)
    if decision.replicas == current:
        return {"changed": False, "count": current, "why": decision.why}
    fleet = str((config.get("fleets") or [record.get("fleet") or ""])[0])
    addresses = publish.addresses_of(fleets, fleet)
    fleet_nodes = dict((h, n) for h, n in nodes.items() if h in addresses)
    wanted = decision.replicas
    runner = scale["runner"](dict(config, nodes=wanted, service=dict(service, replicas=wanted)))
    last = [decision]

    def recheck(now: Mapping[str, Any]) -> int:
        entry = scale["refresh"]()
        if entry is None or entry.get("config") != scale["entry"].get("config"):
            raise rolling.RollError("service %s changed while its scale was decided (an apply, "
                                    "a stop or another pass); the next pass decides again"
                                    % name)
        last[0] = decide(now)
        return last[0].replicas

    roll = rolling.Roll(runner, record, fleet_nodes, proxy_node, addresses, config,
                        str(scale["entry"].get("user") or ""), fleet, None, emit,
                        fresh=lambda _record: rolling.read_again(fleet_nodes, name),
                        scale_only=True, recheck=recheck,
                        reach=lambda: publish.reach(
                            next(iter(publish.instances_of(fleets, name=proxy_host)), None),
                            publish.instances_of(fleets, fleet)))
    try:
        done = roll.run()
    finally:
        runner.close_code()
        try:   # the entry notes where the run is now, also after a scale that stopped half-way
            jobs = rolling.read_again(fleet_nodes, name).get("jobs") or []
        except GpufleetError:
            jobs = []
        if jobs:
            scale["hosts"](sorted(set(j["host"] for j in jobs)))
    count = current + len(done.get("added") or ()) - len(done.get("retired") or ())
    changed = bool(done.get("added") or done.get("retired"))
    if changed:
        emit({"kind": "info", "run": name, "message": "service %s went from %s to %d (%s)" % (
            name, rolling.replicas_text(current), count, last[0].why)})
    return {"changed": changed, "count": count, "why": last[0].why}
