# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""services.autoscale: dstack's target tracking on the proxy's count (``desired``), and a pass's
scale event carried out (``follow``: measured on the proxy host, then services.rolling's scale
with only the count changed)."""

from __future__ import annotations

import pytest
from ansible_collections.gpufleet.cluster.plugins.module_utils.core.errors import GpufleetError
from ansible_collections.gpufleet.cluster.plugins.module_utils.services import (
    autoscale,
    replicas,
    rolling,
)
from ansible_collections.gpufleet.cluster.plugins.module_utils.services import submit as services
from ansible_collections.gpufleet.cluster.plugins.module_utils.tasks.ssh import NodeError

from .fakes import SERVICE, FakeNode, fleets

RULES = {"metric": "rps", "target": 10.0, "window": 60, "scale_up_delay": 300,
         "scale_down_delay": 600, "min": 1, "max": 4}


def want(current, requests, counted_for=3600, scaled_at=None, now=10000.0, **rules):
    return autoscale.desired(current, dict(RULES, **rules), requests, counted_for, scaled_at,
                             now)


def test_the_count_is_the_rate_over_the_target_rounded_up_within_the_range():
    # 1500 requests in 60 s: 25 requests/s, 10 per replica: 3 replicas.
    decision = want(1, 1500)
    assert decision.replicas == 3
    assert decision.why == "25 requests/s over 60 s, target 10 per replica"
    assert want(3, 600).replicas == 1             # exactly 10/s: one replica
    assert want(3, 601).replicas == 2
    assert want(2, 100000).replicas == 4          # never above the range
    assert want(2, 0).replicas == 1               # nor below it
    assert want(2, 0, min=2).replicas == 2
    assert want(9, 1500).replicas == 3            # a count outside the range comes back in it
    assert want(2, None).replicas == 2            # no count of it: as it is
    assert want(7, None).replicas == 4


def test_the_delays_count_from_the_last_change_of_the_count():
    # Up: scale_up_delay (300 s) after the last change.
    held = want(1, 1500, scaled_at=10000.0 - 100)
    assert held.replicas == 1 and held.why.endswith("scale_up_delay holds for 200 s more")
    assert want(1, 1500, scaled_at=10000.0 - 300).replicas == 3
    # Down: scale_down_delay (600 s).
    held = want(3, 0, scaled_at=10000.0 - 599.5)
    assert held.replicas == 3 and held.why.endswith("scale_down_delay holds for 1 s more")
    assert want(3, 0, scaled_at=10000.0 - 600).replicas == 1
    # Never scaled: no delay.
    assert want(3, 0).replicas == 1


def test_a_count_shorter_than_the_window_only_scales_up():
    # The proxy reloaded 20 s ago: its 400 requests are at least 6.7/s; more may have come.
    held = want(3, 400, counted_for=20)
    assert held.replicas == 3 and "counted for 20 s only" in held.why
    assert want(1, 1500, counted_for=20).replicas == 3   # already short of the rate: up
    assert want(3, 400, counted_for=60).replicas == 1


def test_the_measure_is_the_proxy_hosts_and_its_stamp_only_for_this_run():
    node = FakeNode("b-0", proxy_status={"requests": {"svc": {"count": 42, "window": 60}},
                                         "uptime": 75, "scaled_at": 900.0,
                                         "scaled_run_id": "r1", "now": 1000.0})
    assert autoscale.measure(node, "svc", "r1") == {"requests": 42, "counted_for": 75.0,
                                                    "scaled_at": 900.0, "now": 1000.0}
    assert node.calls == [("proxy_status", {"run": "svc"})]
    # A stamp of an earlier run of that name is not this one's.
    assert autoscale.measure(node, "svc", "r2")["scaled_at"] is None
    # A route the proxy does not count: nothing to follow.
    assert autoscale.measure(node, "other", "r1")["requests"] is None
    silent = FakeNode("b-0", proxy_status=NodeError("b-0", "unreachable"))
    with pytest.raises(GpufleetError, match="its proxy on b-0 did not answer"):
        autoscale.measure(silent, "svc", "r1")


# ---------------------------------------------------------------------------------------------
# follow: a pass's scale event


def scaled_entry(**rules):
    config = dict(SERVICE, replicas={"min": 1, "max": 3},
                  scaling=dict({"metric": "rps", "target": 10.0, "window": 60,
                                "scale_up_delay": 0, "scale_down_delay": 0}, **rules))
    proxy = replicas.proxy_of("svc", "b-0", "192.0.2.1", SERVICE["model"])
    return {"run": "svc", "run_id": "r1", "user": "alice",
            "config": replicas.runnable(config, proxy, count=1)}


def event(entry, jobs=1, requests=1500):
    record = {"name": "svc", "run_id": "r1", "status": "running", "fleet": "b",
              "jobs": [{"job_num": n, "host": "b-%d" % n} for n in range(jobs)]}
    said, made, noted = [], [], []

    class Runner(object):
        def __init__(self, config):
            self.config = config
            self.closed = False
            made.append(self)

        def close_code(self):
            self.closed = True

    nodes = {"b-0": FakeNode("b-0", proxy_status={
        "requests": {"svc": {"count": requests, "window": 60}}, "uptime": 3600,
        "scaled_at": None, "scaled_run_id": None, "now": 5000.0}),
        "b-1": FakeNode("b-1"), "c-0": FakeNode("c-0")}
    scale = {"kind": "scale", "run": "svc", "record": record, "entry": entry,
             "runner": Runner, "hosts": noted.append, "emit": said.append,
             "refresh": lambda: dict(entry)}
    return scale, nodes, said, made, noted


def test_a_pass_scales_a_service_to_what_its_rate_asks(monkeypatch):
    rolls = []

    class Roll(object):
        def __init__(self, runner, record, nodes, proxy_node, addresses, config, user, fleet,
                     listen, emit, fresh=None, scale_only=False, recheck=None, reach=None):
            self.record, self.recheck = record, recheck
            assert reach() == []   # not a local gateway: nothing to join
            rolls.append(dict(runner=runner, nodes=sorted(nodes), proxy=proxy_node.name,
                              addresses=addresses, user=user, fleet=fleet, listen=listen,
                              scale_only=scale_only, config=config))

        def run(self):
            # Decided again under the lease: the same measure, the same count.
            assert self.recheck(self.record) == 3
            return {"added": [1, 2], "retired": [], "rolled": [], "unchanged": False}

    monkeypatch.setattr(rolling, "Roll", Roll)
    after = {"name": "svc", "status": "running", "service": {"port": 8000},
             "jobs": [{"host": "b-0"}, {"host": "b-1"}, {"host": "b-1"}]}
    monkeypatch.setattr(rolling, "live_services", lambda nodes: [after])
    scale, nodes, said, made, noted = event(scaled_entry())
    answer = services.queue_hook(scale, fleets(), nodes)
    assert answer == {"changed": True, "count": 3,
                      "why": "25 requests/s over 60 s, target 10 per replica"}
    (roll,) = rolls
    # Only the count changes, on the service's own fleet, through its proxy host.
    assert roll["scale_only"] and roll["nodes"] == ["b-0", "b-1"] and roll["proxy"] == "b-0"
    assert (roll["user"], roll["fleet"], roll["listen"]) == ("alice", "b", None)
    (runner,) = made
    assert runner.config["nodes"] == 3 and runner.config["service"]["replicas"] == 3
    assert runner.closed
    assert noted == [["b-0", "b-1"]]   # the entry learns where the run is now
    assert said[-1]["message"] == ("service svc went from 1 replica to 3 (25 requests/s over "
                                   "60 s, target 10 per replica)")
    # Measured twice: to decide, and again under the lease.
    assert [op for op, _p in nodes["b-0"].calls] == ["proxy_status", "proxy_status"]


def test_a_service_changed_meanwhile_is_left_to_the_next_pass(monkeypatch):
    # Under the lease the entry reads otherwise (an apply rewrote it): nothing changes.
    class Roll(object):
        def __init__(self, *args, **kwargs):
            self.record, self.recheck = args[1], kwargs["recheck"]

        def run(self):
            return {"count": self.recheck(self.record)}

    monkeypatch.setattr(rolling, "Roll", Roll)
    monkeypatch.setattr(rolling, "live_services", lambda nodes: [])
    scale, nodes, said, _made, noted = event(scaled_entry())
    scale["refresh"] = lambda: dict(scaled_entry(target=50.0))
    with pytest.raises(rolling.RollError, match="changed while its scale was decided"):
        autoscale.follow(scale, fleets(), nodes)
    scale["refresh"] = lambda: None   # another controller's pass holds it now
    with pytest.raises(rolling.RollError, match="the next pass decides again"):
        autoscale.follow(scale, fleets(), nodes)
    # Nothing said to have changed, and the entry's hosts are not emptied.
    assert said == [] and noted == []


def test_a_roll_that_found_nothing_to_do_is_no_change(monkeypatch):
    class Roll(object):
        def __init__(self, *args, **kwargs):
            pass

        def run(self):
            return {"added": [], "retired": [], "rolled": [], "unchanged": True}

    monkeypatch.setattr(rolling, "Roll", Roll)
    monkeypatch.setattr(rolling, "live_services", lambda nodes: [])
    scale, nodes, said, _made, _noted = event(scaled_entry())
    assert autoscale.follow(scale, fleets(), nodes)["changed"] is False
    assert said == []


def test_a_service_at_its_count_or_without_rules_is_left_alone(monkeypatch):
    monkeypatch.setattr(rolling, "Roll", None)   # never made
    scale, nodes, said, made, noted = event(scaled_entry(), jobs=2, requests=1000)
    answer = autoscale.follow(scale, fleets(), nodes)
    assert answer["changed"] is False and answer["count"] == 2
    assert (said, made, noted) == ([], [], [])
    fixed = dict(scaled_entry(), config=replicas.runnable(SERVICE, None))
    scale, nodes, _said, _made, _noted = event(fixed)
    assert autoscale.follow(scale, fleets(), nodes) == {
        "changed": False, "count": 1, "why": "it does not autoscale"}
    assert nodes["b-0"].calls == []


def test_a_proxy_host_out_of_reach_is_said(monkeypatch):
    scale, nodes, _said, _made, _noted = event(scaled_entry())
    del nodes["b-0"]
    with pytest.raises(GpufleetError, match="its proxy host b-0 cannot be reached"):
        autoscale.follow(scale, fleets(), nodes)
