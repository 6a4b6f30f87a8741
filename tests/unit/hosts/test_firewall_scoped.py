# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Ports the firewall opens to some sources only (the monitoring scrape, firewall_monitoring_*):
read back from nft's JSON listing and ufw's status as ``scoped`` rules, without changing what
counts as open to everyone or as an allowed source."""

from __future__ import annotations

import json

import pytest
from ansible_collections.gpufleet.cluster.plugins.module_utils.hosts import firewall_rules as fw

from .test_firewall_rules import NFT_GPUFLEET, UFW_STATUS


def _with_scrape_rules(controller_range=False):
    """The role's sample table plus what it writes for firewall_monitoring_sources [10.79.7.1]
    and 2001:db8:9::5, ports 9100 and 9400: two sets and a rule per family, each rule a source
    match and a port match."""
    document = json.loads(NFT_GPUFLEET)
    items = document["nftables"]
    v4 = [{"range": ["10.79.7.1", "10.79.7.2"]}] if controller_range else ["10.79.7.1"]
    items.insert(-1, {"set": {"family": "inet", "name": "monitoring_v4", "table": "gpufleet",
                              "type": "ipv4_addr", "handle": 30, "flags": ["interval"],
                              "elem": v4}})
    items.insert(-1, {"set": {"family": "inet", "name": "monitoring_v6", "table": "gpufleet",
                              "type": "ipv6_addr", "handle": 31, "flags": ["interval"],
                              "elem": ["2001:db8:9::5"]}})
    items.insert(-1, {"set": {"family": "inet", "name": "monitoring_ports", "table": "gpufleet",
                              "type": "inet_service", "handle": 32, "flags": ["interval"],
                              "elem": [9100, 9400]}})
    for handle, (family, name) in enumerate((("ip", "monitoring_v4"), ("ip6", "monitoring_v6"))):
        items.append({"rule": {"family": "inet", "table": "gpufleet", "chain": "input",
                               "handle": 40 + handle, "expr": [
                                   {"match": {"op": "==", "left": {"payload": {
                                       "protocol": family, "field": "saddr"}},
                                       "right": "@" + name}},
                                   {"match": {"op": "==", "left": {"payload": {
                                       "protocol": "tcp", "field": "dport"}},
                                       "right": "@monitoring_ports"}},
                                   {"accept": None}]}})
    return json.dumps(document)


# The role's DHCPv6 rule (ip6 saddr fe80::/10 udp dport 546 accept) is one too.
DHCPV6 = {"source": "fe80::/10", "proto": "udp", "port": 546}


def test_nft_scrape_rules_are_scoped_and_open_nothing_to_everyone():
    summary = fw.nft_summary(fw.parse_nft_table(_with_scrape_rules()))
    assert summary["scoped"] == [
        DHCPV6,
        {"source": "10.79.7.1", "proto": "tcp", "port": 9100},
        {"source": "10.79.7.1", "proto": "tcp", "port": 9400},
        {"source": "2001:db8:9::5", "proto": "tcp", "port": 9100},
        {"source": "2001:db8:9::5", "proto": "tcp", "port": 9400},
    ]
    # What the role's verification compares is as before: no port opened to everyone, no
    # source allowed everything.
    before = fw.nft_summary(fw.parse_nft_table(NFT_GPUFLEET))
    assert before["scoped"] == [DHCPV6]
    for key in ("tcp_ports", "udp_ports", "addresses", "policy"):
        assert summary[key] == before[key], key


def test_scoped_open_answers_per_source_and_port():
    summary = fw.nft_summary(fw.parse_nft_table(_with_scrape_rules(controller_range=True)))
    scoped = summary["scoped"]
    assert scoped[1] == {"source": "10.79.7.1-10.79.7.2", "proto": "tcp", "port": 9100}
    assert fw.scoped_open(scoped, "10.79.7.1", 9100)
    assert fw.scoped_open(scoped, "10.79.7.2", "9400")
    assert fw.scoped_open(scoped, "10.79.7.0/31", 9100) is False   # 10.79.7.0 is not allowed
    assert fw.scoped_open(scoped, "10.79.7.3", 9100) is False
    assert fw.scoped_open(scoped, "10.79.7.1", 9101) is False
    assert fw.scoped_open(scoped, "10.79.7.1", "9100-9101") is False
    assert fw.scoped_open(scoped, "10.79.7.1", 9100, proto="udp") is False
    assert fw.scoped_open(scoped, "2001:db8:9::5", 9400)


def test_nft_rules_with_two_matches_of_another_kind_are_not_scoped():
    document = json.loads(_with_scrape_rules())
    for item in document["nftables"]:
        rule = item.get("rule")
        if rule and rule.get("handle") == 40:
            # ip saddr ... iifname "eth0" accept: no port, so nothing scoped
            rule["expr"][1] = {"match": {"op": "==", "left": {"meta": {"key": "iifname"}},
                                         "right": "eth0"}}
        elif rule and rule.get("handle") == 41:
            rule["expr"][2] = {"drop": None}
    summary = fw.nft_summary(fw.parse_nft_table(json.dumps(document)))
    assert summary["scoped"] == [DHCPV6]


def test_ufw_scrape_rules_are_scoped():
    text = UFW_STATUS.rstrip("\n") + "\n" + (
        "9100/tcp                   ALLOW IN    10.79.7.1                  # gpufleet:monitoring\n"
        "9400/tcp                   ALLOW IN    10.79.7.1                  # gpufleet:monitoring\n"
        "9100/tcp (v6)              ALLOW IN    2001:db8:9::5              # gpufleet:monitoring\n"
        "9000:9001/udp              ALLOW IN    192.0.2.9\n")
    summary = fw.ufw_summary(fw.parse_ufw_status(text))
    assert summary["scoped"] == [
        {"source": "10.79.7.1", "proto": "tcp", "port": 9100},
        {"source": "10.79.7.1", "proto": "tcp", "port": 9400},
        {"source": "2001:db8:9::5", "proto": "tcp", "port": 9100},
        {"source": "192.0.2.9", "proto": "udp", "port": "9000-9001"},
    ]
    before = fw.ufw_summary(fw.parse_ufw_status(UFW_STATUS))
    for key in ("tcp_ports", "udp_ports", "addresses"):
        assert summary[key] == before[key], key
    assert fw.scoped_open(summary["scoped"], "10.79.7.1", 9400)
    assert not fw.scoped_open(summary["scoped"], "2001:db8:9::5", 9400)


@pytest.mark.parametrize("port", ["http", "0", "9100-9000"])
def test_scoped_rule_refuses_what_is_not_a_port(port):
    with pytest.raises(ValueError):
        fw.scoped_rule("10.0.0.1", "tcp", port)


def _scrape_host(table):
    from .test_nodecheck_firewall import nft_host

    return nft_host(table=table)


def test_the_roles_check_confirms_the_scrape_rules_it_was_asked_for():
    from ansible_collections.gpufleet.cluster.plugins.module_utils.hosts.checks import (
        firewall as check,
    )

    expect = {"monitoring_sources": ["10.79.7.1", "2001:db8:9::5"],
              "monitoring_ports": ["9100", "9400"]}
    done = check.verify(_scrape_host(_with_scrape_rules()),
                        {"settings": {"backend": "nftables"}, "expect": expect})
    assert done["ok"], done["problems"]
    # A source the rules do not let in, and a port they open that was not asked for.
    wanted = dict(expect, monitoring_sources=["10.79.7.9"], monitoring_ports=["9100"])
    done = check.verify(_scrape_host(_with_scrape_rules()),
                        {"settings": {"backend": "nftables"}, "expect": wanted})
    assert not done["ok"]
    assert "port 9100/tcp is not open to 10.79.7.9 (the monitoring scrape)" in done["problems"]
    assert "port 9400/tcp is open to 10.79.7.1 but not expected" in done["problems"]
    # Without the rules, the scrape is reported closed.
    done = check.verify(_scrape_host(NFT_GPUFLEET),
                        {"settings": {"backend": "nftables"}, "expect": expect})
    assert "port 9400/tcp is not open to 2001:db8:9::5 (the monitoring scrape)" \
        in done["problems"]
