# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Which gateway publishes a service (dstack's rules: a name, true, unset, false; the default
gateway), and its URLs and HTTPS there."""

from __future__ import annotations

import pytest
from ansible_collections.gpufleet.cluster.plugins.module_utils.services import gateways
from ansible_collections.gpufleet.cluster.plugins.module_utils.tasks.queue_records import (
    candidate_fleets,
)
from ansible_collections.gpufleet.cluster.plugins.module_utils.tasks.ssh import NodeError

from ..tasks.fakes import fleet_of_instances
from .fakes import FakeNode


def gateway_fleet(name, created, default=None, certificate="self-signed", domain="gw.test"):
    record = fleet_of_instances(name, 1, internal_ip="172.20.0.2")
    record["gateway"] = {"domain": domain, "default": default}
    record["instances"][0]["created"] = created
    listen = {"address": "0.0.0.0", "port": 80, "gateway": name, "domain": domain,
              "certificate": certificate, "https_port": 443 if certificate else None,
              "default": default}
    node = FakeNode(name + "-0", proxy_check={"installed": True, "running": True,
                                              "listen": listen})
    return record, node


def world(*specs):
    fleets, nodes = [fleet_of_instances("work", 2)], {}
    for spec in specs:
        record, node = gateway_fleet(*spec)
        fleets.append(record)
        nodes[node.name] = node
    return fleets, nodes


def chosen(config, fleets, nodes):
    found = gateways.resolve(config, fleets, nodes)
    return found and found["name"]


def test_no_gateway_means_the_in_fleet_proxy_and_asks_nothing():
    fleets, nodes = world()
    assert chosen({"gateway": None}, fleets, nodes) is None
    with pytest.raises(gateways.GatewayError, match="^The service requires a gateway, but there "
                                                    "is no default gateway in the project$"):
        gateways.resolve({"gateway": True}, fleets, nodes)
    with pytest.raises(gateways.GatewayError, match="^Gateway gw does not exist in project main"):
        gateways.resolve({"gateway": "gw"}, fleets, nodes)


def test_the_default_is_the_newest_that_says_so_else_the_oldest_that_leaves_it_unset():
    fleets, nodes = world(("old", "2026-01-01"), ("new", "2026-02-01"),
                          ("no", "2025-01-01", False))
    assert chosen({"gateway": None}, fleets, nodes) == "old"
    assert chosen({"gateway": True}, fleets, nodes) == "old"
    assert chosen({"gateway": "main/new"}, fleets, nodes) == "new"
    assert chosen({"gateway": False}, fleets, nodes) is None
    fleets, nodes = world(("old", "2026-01-01", True), ("new", "2026-02-01", True),
                          ("unset", "2025-01-01"))
    assert chosen({}, fleets, nodes) == "new"
    fleets, nodes = world(("no", "2025-01-01", False))
    assert chosen({}, fleets, nodes) is None
    found = gateways.records(*world(("b", "2026-01-01"), ("a", "2026-02-01")))
    assert [(r["name"], r["default"]) for r in found] == [("b", True), ("a", False)]


def test_a_gateway_that_does_not_answer_is_named():
    fleets, nodes = world(("gw", "2026-01-01"))
    nodes["gw-0"].answers["proxy_check"] = NodeError("gw-0", "connection refused")
    with pytest.raises(gateways.GatewayError, match="^gateway gw does not answer: gw-0: "
                                                    "connection refused$"):
        gateways.resolve({"gateway": "gw"}, fleets, nodes)
    # The default gateway down: said, never a silent move to the in-fleet proxy.
    with pytest.raises(gateways.GatewayError, match=r"does not answer.*\(the default gateway; "
                                                    "set `gateway: false`"):
        gateways.resolve({}, fleets, nodes)
    nodes["gw-0"].answers["proxy_check"] = {"installed": True, "running": False, "listen": {}}
    with pytest.raises(gateways.GatewayError, match="gateway gw is not set up"):
        gateways.resolve({"gateway": "gw"}, fleets, nodes)
    del nodes["gw-0"]
    with pytest.raises(gateways.GatewayError, match="cannot reach its host"):
        gateways.resolve({"gateway": "gw"}, fleets, nodes)


def test_a_service_on_a_gateway_is_its_run_name_under_the_domain():
    fleets, nodes = world(("gw", "2026-01-01"))
    gateway = gateways.resolve({}, fleets, nodes)
    proxy = gateways.proxy_of("web", gateway, {"model": {"name": "llama"}})
    assert proxy == {"proxy_host": "gw-0", "proxy_address": gateway["instance"]["hostname"],
                     "proxy_port": 443, "gateway": "gw", "https": True,
                     "url": "https://web.gw.test/", "model_url": "https://gateway.gw.test/",
                     "model": "llama"}
    plain = gateways.proxy_of("web", gateway, {"https": False})
    assert (plain["url"], plain["https"], plain["model_url"]) == ("http://web.gw.test/", False,
                                                                  None)


def test_https_follows_the_service_and_the_gateways_certificate():
    fleets, nodes = world(("gw", "2026-01-01", None, None))
    gateway = gateways.resolve({}, fleets, nodes)
    for asked in (None, True):
        with pytest.raises(gateways.GatewayError, match="^Cannot run HTTPS service on gateway "
                                                        "with no SSL certificates configured"):
            gateways.proxy_of("web", gateway, {"https": asked})
    assert gateways.proxy_of("web", gateway, {"https": "auto"})["url"] == "http://web.gw.test/"
    gateway["listen"]["domain"] = None
    with pytest.raises(gateways.GatewayError, match="^Domain is required for gateway gw"):
        gateways.proxy_of("web", gateway, {"https": False})


def test_the_default_is_decided_by_the_files_even_when_a_host_is_down():
    fleets, nodes = world(("old", "2026-01-01"), ("new", "2026-02-01", True))
    nodes["new-0"].answers["proxy_check"] = NodeError("new-0", "no route to host")
    with pytest.raises(gateways.GatewayError, match="gateway new does not answer"):
        gateways.resolve({}, fleets, nodes)
    assert chosen({"gateway": "old"}, fleets, nodes) == "old"
    found = gateways.records(fleets, nodes)
    assert [(r["name"], r["default"], r["status"]) for r in found] == [
        ("new", True, "unreachable"), ("old", False, "running")]


def test_a_service_named_gateway_cannot_be_on_a_gateway():
    fleets, nodes = world(("gw", "2026-01-01"))
    with pytest.raises(gateways.GatewayError, match="cannot be named gateway"):
        gateways.proxy_of("gateway", gateways.resolve({}, fleets, nodes), {})


def test_a_clash_on_the_gateway_is_found_before_anything_is_placed():
    fleets, nodes = world(("gw", "2026-01-01"))
    gateway = gateways.resolve({}, fleets, nodes)
    nodes["gw-0"].answers["proxy_routes"] = {"routes": {
        "web": {"fleet": "other", "user": "bob", "model": None},
        "chat": {"fleet": "work", "user": "bob", "model": "llama"}}}
    with pytest.raises(gateways.GatewayError, match="a service named web of fleet other is "
                                                    "published on gateway gw already"):
        gateways.check_clash(gateway, nodes["gw-0"], "web", "work", {})
    with pytest.raises(gateways.GatewayError, match="model: llama is already published by "
                                                    "service chat on gateway gw"):
        gateways.check_clash(gateway, nodes["gw-0"], "api", "work", {"model": {"name": "llama"}})
    # Its own route again (an apply of a running service), another model: fine.
    gateways.check_clash(gateway, nodes["gw-0"], "chat", "work", {"model": {"name": "llama"}})
    gateways.check_clash(gateway, nodes["gw-0"], "api", "work", {"model": {"name": "other"}})


def test_no_run_is_placed_on_a_gateways_host():
    fleets, _nodes = world(("gw", "2026-01-01"))
    assert candidate_fleets({}, fleets) == ["work"]
    assert candidate_fleets({"fleets": ["gw", "work"]}, fleets) == ["work"]
    assert [f["name"] for f in gateways.run_fleets(fleets)] == ["work"]
