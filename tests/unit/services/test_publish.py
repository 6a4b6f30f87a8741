# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""services.publish: the proxy host, the route of a service's replicas, and the host
operations that publish it and take it off."""

from __future__ import annotations

import pytest
from ansible_collections.gpufleet.cluster.plugins.module_utils.services import publish, replicas
from ansible_collections.gpufleet.cluster.plugins.module_utils.tasks.ssh import NodeError

from ..tasks.fakes import fleet_of_instances
from .fakes import FakeNode, replica_entry

CONFIG = {"type": "service", "name": "svc", "port": 8000, "auth": True, "strip_prefix": True,
          "rate_limits": [{"prefix": "/", "key": {"type": "ip_address"}, "rps": 2.0,
                           "burst": 1}],
          "probes": [], "model": None, "fleets": None}


def test_the_proxy_host_is_the_fleets_queue_host():
    fleets = [fleet_of_instances("a", 2, status="provisioning"), fleet_of_instances("b", 3)]
    found = publish.proxy_instance(CONFIG, fleets)
    assert (found["name"], found["fleet"], found["hostname"]) == ("b-0", "b", "192.0.2.1")
    assert publish.proxy_instance(CONFIG, fleets, errors={"b-0": "down"})["name"] == "b-1"
    assert publish.proxy_instance(dict(CONFIG, fleets=["main/b"]), fleets)["name"] == "b-0"
    with pytest.raises(publish.PublishError, match="no host of fleet a is ready"):
        publish.proxy_instance(dict(CONFIG, fleets=["a"]), fleets)


def test_the_replicas_are_those_the_hosts_run_now_with_their_published_ports():
    containers = {
        "h-0": [replica_entry(0, 49153), replica_entry(1, None)],   # port not known yet
        "h-1": [replica_entry(1, 49200, submission=1), replica_entry(1, 40000, state="exited"),
                replica_entry(2, None, address="localhost")],      # on the host's network
        "h-2": [replica_entry(3, 40001)],                          # no address known
    }
    found = publish.replicas_of(CONFIG, containers, {"h-0": "10.1.0.2", "h-1": "10.1.0.3"})
    assert found == [
        {"replica_num": 0, "job_num": 0, "host": "h-0", "address": "10.1.0.2", "port": 49153},
        {"replica_num": 1, "job_num": 1, "host": "h-1", "address": "10.1.0.3", "port": 49200},
        {"replica_num": 2, "job_num": 2, "host": "h-1", "address": "10.1.0.3", "port": 8000},
    ]


def test_the_route_carries_the_proxy_part_of_the_config():
    route = publish.route_of(CONFIG, "svc", "alice", "b", [], clock=lambda: 12.5)
    assert route == {"run": "svc", "user": "alice", "fleet": "b", "project": "main",
                     "port": 8000, "auth": True, "strip_prefix": True,
                     "rate_limits": CONFIG["rate_limits"], "probes": [], "model": None,
                     "replicas": [], "submitted_at": 12.5, "rate_window": 60,
                     "https": False}
    # An autoscaled service is counted over its own window.
    scaled = dict(CONFIG, replicas={"min": 1, "max": 3},
                  scaling={"metric": "rps", "target": 2.0, "window": 30})
    assert publish.route_of(scaled, "svc", "alice", "b", [])["rate_window"] == 30


def test_publish_and_unpublish_call_the_proxy_host_and_say_what_failed():
    node = FakeNode("b-0", proxy_publish={"changed": True, "routes": ["svc"]},
                    proxy_unpublish={"changed": True, "routes": []})
    route = publish.route_of(CONFIG, "svc", "alice", "b", [])
    listen = {"address": "10.1.0.2", "port": 3000}
    assert publish.publish(node, route, listen) == {"changed": True, "routes": ["svc"]}
    assert node.calls[0] == ("proxy_publish", {"route": route, "listen": listen})
    # without an address the host listens where the gateway role recorded only
    publish.publish(node, route)
    assert node.calls[1] == ("proxy_publish", {"route": route})
    assert publish.unpublish(node, "svc")["routes"] == []
    broken = FakeNode("b-0", proxy_publish=NodeError("b-0", "haproxy -c: bad config"))
    with pytest.raises(publish.PublishError, match="could not publish service svc on b-0: .*"
                       "bad config"):
        publish.publish(broken, route)


def test_a_publish_waits_for_certbot_on_a_lets_encrypt_gateway_as_long_as_it_may_take():
    seen = []

    class Node(FakeNode):
        def call(self, op, payload=None, timeout=120):
            seen.append(timeout)
            return super().call(op, payload, timeout)

    gateway = {"address": "0.0.0.0", "port": 80, "gateway": "gw", "domain": "example.com",
               "https_port": 443, "certificate": "lets-encrypt",
               "acme": {"server": "https://acme.test/dir", "timeout": 180}}
    route = publish.route_of(CONFIG, "svc", "alice", "b", [], listen=gateway)
    model = publish.route_of(dict(CONFIG, model={"type": "chat", "name": "tiny",
                                                 "format": "openai"}),
                             "svc", "alice", "b", [], listen=gateway)
    # The in-fleet proxy, a self-signed gateway: the host helper's usual limit.
    assert publish.publish_timeout(route) == 120
    assert publish.publish_timeout(route, {"address": "10.1.0.2", "port": 3000}) == 120
    assert publish.publish_timeout(route, dict(gateway, certificate="self-signed")) == 120
    # certbot's limit and its kill after 5 s, for each name: the service's, the models'.
    assert publish.publish_timeout(route, gateway) == 120 + 185
    assert publish.publish_timeout(model, gateway) == 120 + 2 * 185
    assert publish.publish_timeout(route, dict(gateway, acme={})) == 120 + 45
    assert publish.publish_timeout(route, dict(gateway, acme={"timeout": "x"})) == 120 + 45
    publish.publish(Node("gw-0"), route, gateway)
    publish.publish(Node("b-0"), route, {"address": "10.1.0.2", "port": 3000})
    assert seen == [305, 120]


def test_the_proxy_listens_where_the_role_recorded_and_the_url_follows():
    instance = {"name": "b-0", "hostname": "203.0.113.5", "internal_ip": "10.1.0.2"}
    role = {"address": "10.1.0.9", "port": 8080}
    assert publish.listen_of({"installed": True, "listen": role}, instance) == role
    assert publish.url_address(role, instance) == "10.1.0.9"
    # a wildcard (gateway_public): the address this controller reaches the host on
    everywhere = {"address": "0.0.0.0", "port": 3000}
    assert publish.url_address(everywhere, instance) == "203.0.113.5"
    assert publish.url_address({"address": "::", "port": 3000}, instance) == "203.0.113.5"
    # a host set up without the role's record: its internal address and port 3000
    fallback = publish.listen_of({"installed": True, "listen": None}, instance)
    assert fallback == {"address": "10.1.0.2", "port": 3000}
    assert publish.listen_of({}, dict(instance, internal_ip=None)) == {
        "address": "203.0.113.5", "port": 3000}


def test_a_stopped_service_goes_off_its_proxy_and_a_task_asks_nothing():
    node = FakeNode("b-0", proxy_unpublish={"changed": True, "routes": []})
    record = {"name": "svc", "service": {"proxy_host": "b-0"}}
    assert publish.unpublish_stopped(record, {"b-0": node}) == {"changed": True, "routes": []}
    assert node.calls == [("proxy_unpublish", {"run": "svc"})]
    assert publish.unpublish_stopped({"name": "train", "service": None}, {"b-0": node}) is None
    assert publish.unpublish_stopped(record, {})["missing"] == "b-0"


def test_two_services_may_not_publish_one_model_name_on_one_proxy():
    config = dict(CONFIG, model={"type": "chat", "name": "tiny", "format": "openai"})
    other = {"name": "old", "service": {"proxy_host": "b-0", "model": "tiny"}}
    with pytest.raises(replicas.ServiceError, match="model: tiny is already published by "
                       "service old on b-0"):
        replicas.check_clash(config, "svc", "b-0", [other])
    replicas.check_clash(config, "old", "b-0", [other])          # its own name: a re-apply
    replicas.check_clash(config, "svc", "c-0", [other])          # another proxy
    replicas.check_clash(CONFIG, "svc", "b-0", [other])          # no model


def test_a_gateway_publishes_what_it_can_reach():
    local_gw = {"name": "gw-0", "backend": "local", "region": "local"}
    aws_gw = {"name": "gw-0", "backend": "aws", "region": "us-east-1"}
    local = [{"name": "b-0", "backend": "local", "region": "local"}]
    east = [{"name": "c-0", "backend": "aws", "region": "us-east-1"}]
    west = [{"name": "d-0", "backend": "aws", "region": "us-west-2"}]
    ssh = [{"name": "s-0", "backend": "ssh", "region": None}]
    for proxy, instances in ((local_gw, local), (aws_gw, east), (local_gw, ssh), (aws_gw, ssh)):
        assert publish.reach_problem("gw", proxy, instances) is None
    assert publish.reach_problem("gw", aws_gw, west) == (
        "gateway gw (aws, us-east-1) cannot reach d-0 (aws, us-west-2): a local gateway "
        "publishes the services of local fleets, a cloud gateway those of its cloud and region; "
        "name another gateway, or set `gateway: false`")
    assert "cannot reach b-0 (local, local)" in publish.reach_problem("gw", aws_gw, local)
    assert "cannot reach c-0" in publish.reach_problem("gw", local_gw, east)


def test_a_local_proxy_joins_the_networks_of_the_other_nodes_it_sends_requests_to(monkeypatch):
    from ansible_collections.gpufleet.cluster.plugins.module_utils.backends import local_reach

    joined = []
    monkeypatch.setattr(local_reach, "join", lambda docker, container, networks: joined.append(
        (container, list(networks))) or list(networks))
    nodes = [{"name": "b-%d" % n, "fleet": "b", "num": n, "backend": "local",
              "placement": "any", "container": "gpufleet-b-%d" % n} for n in range(3)]
    # the in-fleet proxy on b-0: the networks of b-1 and b-2, not its own
    publish.reach(nodes[0], nodes)
    (container, networks), = joined
    assert container == "gpufleet-b-0" and len(networks) == 2
    assert networks == local_reach.networks_of(nodes[1:])
    # a cluster fleet's nodes share one network, which the proxy's node is on already
    cluster = [dict(n, placement="cluster") for n in nodes]
    assert local_reach.networks_of(cluster[1:]) == local_reach.networks_of(cluster[:1])
    # a gateway on its own: every node's network; a cloud proxy or no container: nothing
    joined.clear()
    publish.reach({"name": "gw-0", "backend": "local", "container": "gpufleet-gw-0"}, nodes)
    assert joined == [("gpufleet-gw-0", local_reach.networks_of(nodes))]
    joined.clear()
    assert publish.reach(dict(nodes[0], backend="aws"), nodes) == []
    assert publish.reach(dict(nodes[0], container=None), nodes) == []
    assert publish.reach(nodes[0], nodes[:1]) == [] and joined == []
