# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""A pass that made a service's replicas again: the queue hook gives the proxy their new ports
(services.submit.queue_hook's ``respawned``)."""

from __future__ import annotations

from ansible_collections.gpufleet.cluster.plugins.module_utils.services import submit


class Node(object):
    def __init__(self, name, containers=(), routes=None):
        self.name = name
        self.containers = list(containers)
        self.routes = routes
        self.calls = []

    def call(self, op, payload=None, timeout=120):
        self.calls.append((op, payload))
        if op == "status":
            return {"containers": self.containers}
        if op == "proxy_replicas":
            if payload["run"] not in self.routes:
                return {"changed": False, "missing": True}
            self.routes[payload["run"]] = payload["replicas"]
            return {"changed": True}
        raise AssertionError(op)


def replica(num, port, state="running"):
    return {"name": "svc-0-%d" % num, "state": state, "address": "172.17.0.2",
            "labels": {"gpufleet.run": "svc", "gpufleet.job": str(num),
                       "gpufleet.submission": "0"},
            "published": {"8000/tcp": port}}


FLEETS = [{"name": "f", "instances": [{"name": "f-0", "internal_ip": "10.0.0.1"},
                                      {"name": "f-1", "internal_ip": "10.0.0.2"}]}]
RECORD = {"name": "svc", "fleet": "f", "service": {"proxy_host": "f-0", "port": 8000}}


def test_the_route_takes_the_new_port_of_a_replica_made_again():
    proxy = Node("f-0", [replica(0, 40001)], routes={"svc": []})
    other = Node("f-1", [replica(1, 40555)])
    answer = submit.queue_hook({"kind": "respawned", "run": "svc", "record": RECORD}, FLEETS,
                               {"f-0": proxy, "f-1": other})
    assert answer == {"changed": True}
    assert proxy.routes["svc"] == [
        {"replica_num": 0, "job_num": 0, "host": "f-0", "address": "10.0.0.1", "port": 40001},
        {"replica_num": 1, "job_num": 1, "host": "f-1", "address": "10.0.0.2", "port": 40555}]


def test_a_route_the_proxy_does_not_have_is_not_made():
    proxy = Node("f-0", [replica(0, 40001)], routes={})
    answer = submit.queue_hook({"kind": "respawned", "run": "svc", "record": RECORD}, FLEETS,
                               {"f-0": proxy})
    assert answer == {"changed": False} and proxy.routes == {}
