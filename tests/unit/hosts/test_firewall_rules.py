# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Reading firewall state: nft's JSON listing and ufw's status, summed up as who is allowed in
and which ports are open; address and port coverage."""

from __future__ import annotations

import json

import pytest
from ansible_collections.gpufleet.cluster.plugins.module_utils.hosts import firewall_rules as fw

# `nft -j list table inet gpufleet` (nftables 1.0.6, Debian 12) for the rules the role writes
# with peers 10.79.7.11 and 10.79.7.12 (auto-merged into a range), sources 192.0.2.0/24 and
# 2001:db8:7::/48, the controller 10.79.7.1, TCP port 8443 and UDP ports 60000-60010.
NFT_GPUFLEET = (
    '{"nftables": [{"metainfo": {"version": "1.0.6", "release_name": "Lester Gooch #5", '
    '"json_schema_version": 1}}, '
    '{"table": {"family": "inet", "name": "gpufleet", "handle": 7}}, '
    '{"set": {"family": "inet", "name": "control_v4", "table": "gpufleet", '
    '"type": "ipv4_addr", "handle": 2, "flags": ["interval"], "elem": ["10.79.7.1"]}}, '
    '{"set": {"family": "inet", "name": "control_v6", "table": "gpufleet", '
    '"type": "ipv6_addr", "handle": 3, "flags": ["interval"]}}, '
    '{"set": {"family": "inet", "name": "peers_v4", "table": "gpufleet", "type": "ipv4_addr", '
    '"handle": 4, "flags": ["interval"], "elem": [{"range": ["10.79.7.11", "10.79.7.12"]}]}}, '
    '{"set": {"family": "inet", "name": "peers_v6", "table": "gpufleet", "type": "ipv6_addr", '
    '"handle": 5, "flags": ["interval"]}}, '
    '{"set": {"family": "inet", "name": "sources_v4", "table": "gpufleet", '
    '"type": "ipv4_addr", "handle": 6, "flags": ["interval"], '
    '"elem": [{"prefix": {"addr": "192.0.2.0", "len": 24}}]}}, '
    '{"set": {"family": "inet", "name": "sources_v6", "table": "gpufleet", '
    '"type": "ipv6_addr", "handle": 7, "flags": ["interval"], '
    '"elem": [{"prefix": {"addr": "2001:db8:7::", "len": 48}}]}}, '
    '{"set": {"family": "inet", "name": "tcp_ports", "table": "gpufleet", '
    '"type": "inet_service", "handle": 8, "flags": ["interval"], "elem": [8443]}}, '
    '{"set": {"family": "inet", "name": "udp_ports", "table": "gpufleet", '
    '"type": "inet_service", "handle": 9, "flags": ["interval"], "elem": [{"range": [60000, '
    '60010]}]}}, '
    '{"chain": {"family": "inet", "table": "gpufleet", "name": "input", "handle": 1, '
    '"type": "filter", "hook": "input", "prio": 0, "policy": "drop"}}, '
    '{"rule": {"family": "inet", "table": "gpufleet", "chain": "input", "handle": 10, '
    '"expr": [{"match": {"op": "in", "left": {"ct": {"key": "state"}}, '
    '"right": ["established", "related"]}}, '
    '{"accept": null}]}}, '
    '{"rule": {"family": "inet", "table": "gpufleet", "chain": "input", "handle": 11, '
    '"expr": [{"match": {"op": "in", "left": {"ct": {"key": "state"}}, "right": "invalid"}}, '
    '{"drop": null}]}}, '
    '{"rule": {"family": "inet", "table": "gpufleet", "chain": "input", "handle": 12, '
    '"expr": [{"match": {"op": "==", "left": {"meta": {"key": "iif"}}, "right": "lo"}}, '
    '{"accept": null}]}}, '
    '{"rule": {"family": "inet", "table": "gpufleet", "chain": "input", "handle": 14, '
    '"expr": [{"match": {"op": "==", "left": {"meta": {"key": "l4proto"}}, '
    '"right": {"set": ["icmp", "ipv6-icmp"]}}}, '
    '{"accept": null}]}}, '
    '{"rule": {"family": "inet", "table": "gpufleet", "chain": "input", "handle": 15, '
    '"expr": [{"match": {"op": "==", "left": {"payload": {"protocol": "ip6", '
    '"field": "saddr"}}, "right": {"prefix": {"addr": "fe80::", "len": 10}}}}, '
    '{"match": {"op": "==", "left": {"payload": {"protocol": "udp", "field": "dport"}}, '
    '"right": 546}}, '
    '{"accept": null}]}}, '
    '{"rule": {"family": "inet", "table": "gpufleet", "chain": "input", "handle": 16, '
    '"expr": [{"match": {"op": "==", "left": {"meta": {"key": "iifname"}}, '
    '"right": "docker0"}}, '
    '{"accept": null}]}}, '
    '{"rule": {"family": "inet", "table": "gpufleet", "chain": "input", "handle": 17, '
    '"expr": [{"match": {"op": "==", "left": {"payload": {"protocol": "tcp", '
    '"field": "dport"}}, "right": 22}}, '
    '{"accept": null}]}}, '
    '{"rule": {"family": "inet", "table": "gpufleet", "chain": "input", "handle": 18, '
    '"expr": [{"match": {"op": "==", "left": {"payload": {"protocol": "ip", '
    '"field": "saddr"}}, "right": "@control_v4"}}, '
    '{"accept": null}]}}, '
    '{"rule": {"family": "inet", "table": "gpufleet", "chain": "input", "handle": 19, '
    '"expr": [{"match": {"op": "==", "left": {"payload": {"protocol": "ip6", '
    '"field": "saddr"}}, "right": "@control_v6"}}, '
    '{"accept": null}]}}, '
    '{"rule": {"family": "inet", "table": "gpufleet", "chain": "input", "handle": 20, '
    '"expr": [{"match": {"op": "==", "left": {"payload": {"protocol": "ip", '
    '"field": "saddr"}}, "right": "@peers_v4"}}, '
    '{"accept": null}]}}, '
    '{"rule": {"family": "inet", "table": "gpufleet", "chain": "input", "handle": 21, '
    '"expr": [{"match": {"op": "==", "left": {"payload": {"protocol": "ip6", '
    '"field": "saddr"}}, "right": "@peers_v6"}}, '
    '{"accept": null}]}}, '
    '{"rule": {"family": "inet", "table": "gpufleet", "chain": "input", "handle": 22, '
    '"expr": [{"match": {"op": "==", "left": {"payload": {"protocol": "ip", '
    '"field": "saddr"}}, "right": "@sources_v4"}}, '
    '{"accept": null}]}}, '
    '{"rule": {"family": "inet", "table": "gpufleet", "chain": "input", "handle": 23, '
    '"expr": [{"match": {"op": "==", "left": {"payload": {"protocol": "ip6", '
    '"field": "saddr"}}, "right": "@sources_v6"}}, '
    '{"accept": null}]}}, '
    '{"rule": {"family": "inet", "table": "gpufleet", "chain": "input", "handle": 24, '
    '"expr": [{"match": {"op": "==", "left": {"payload": {"protocol": "tcp", '
    '"field": "dport"}}, "right": "@tcp_ports"}}, '
    '{"accept": null}]}}, '
    '{"rule": {"family": "inet", "table": "gpufleet", "chain": "input", "handle": 25, '
    '"expr": [{"match": {"op": "==", "left": {"payload": {"protocol": "udp", '
    '"field": "dport"}}, "right": "@udp_ports"}}, '
    '{"accept": null}]}}]}'
)

# `ufw status verbose` (ufw 0.36.2, Debian 12) for the same rules.
UFW_STATUS = """\
Status: active
Logging: on (low)
Default: deny (incoming), allow (outgoing), deny (routed)
New profiles: skip

To                         Action      From
--                         ------      ----
Anywhere on docker0        ALLOW IN    Anywhere                   # gpufleet:interface
22/tcp                     ALLOW IN    Anywhere                   # gpufleet:ssh
Anywhere                   ALLOW IN    10.79.7.11                 # gpufleet:peer
60000:60010/udp            ALLOW IN    Anywhere                   # gpufleet:udp
8443/tcp                   ALLOW IN    Anywhere                   # gpufleet:tcp
Anywhere                   ALLOW IN    10.79.7.12                 # gpufleet:peer
Anywhere                   ALLOW IN    10.79.7.1                  # gpufleet:control
Anywhere                   ALLOW IN    192.0.2.0/24               # gpufleet:source
Anywhere (v6) on docker0   ALLOW IN    Anywhere (v6)              # gpufleet:interface
Anywhere (v6)              ALLOW IN    2001:db8:7::/48            # gpufleet:source
22/tcp (v6)                ALLOW IN    Anywhere (v6)              # gpufleet:ssh
60000:60010/udp (v6)       ALLOW IN    Anywhere (v6)              # gpufleet:udp
8443/tcp (v6)              ALLOW IN    Anywhere (v6)              # gpufleet:tcp

"""


# --- addresses and ports -----------------------------------------------------------------------

@pytest.mark.parametrize("address, allowed, expected", [
    ("10.79.7.11", ["10.79.7.11-10.79.7.12"], True),
    ("10.79.7.13", ["10.79.7.11-10.79.7.12"], False),
    ("10.0.0.0/24", ["10.0.0.0/16"], True),
    ("10.0.0.0/15", ["10.0.0.0/16"], False),
    ("10.0.1.5", ["10.0.0.0/24", "10.0.1.0/24"], True),
    # Two adjacent elements together cover a range neither covers alone.
    ("10.0.0.0/23", ["10.0.0.0/24", "10.0.1.0/24"], True),
    ("10.0.0.0/23", ["10.0.0.0/24", "10.0.2.0/24"], False),
    ("2001:db8:7::1", ["2001:db8:7::/48"], True),
    ("2001:db8:8::1", ["2001:db8:7::/48"], False),
    # IPv4 never matches IPv6 elements and the other way round.
    ("10.0.0.1", ["::/0"], False),
    ("::ffff:10.0.0.1", ["0.0.0.0/0"], False),
    ("not an address", ["0.0.0.0/0"], False),
    ("10.0.0.1", ["garbage", "10.0.0.1"], True),
])
def test_covered(address, allowed, expected):
    assert fw.covered(address, allowed) is expected


def test_address_range_rejects_reversed_and_mixed_ranges():
    with pytest.raises(ValueError):
        fw.address_range("10.0.0.5-10.0.0.1")
    with pytest.raises(ValueError):
        fw.address_range("10.0.0.1-::1")
    assert fw.address_range("10.0.0.5/24") == (4, 167772160, 167772415)


@pytest.mark.parametrize("port, open_ports, expected", [
    (22, [22, 8443], True),
    ("8443", [22, 8443], True),
    (8080, [22, 8443], False),
    ("60000-60010", ["60000-60010"], True),
    ("60005", ["60000-60010"], True),
    ("60000:60011", ["60000-60010"], False),
    ("100-200", ["100-150", "151-200"], True),
])
def test_port_open(port, open_ports, expected):
    assert fw.port_open(port, open_ports) is expected


@pytest.mark.parametrize("bad", ["0", "65536", "a", "10-5", "1-2-3", ""])
def test_port_range_rejects(bad):
    with pytest.raises(ValueError):
        fw.port_range(bad)


# --- nftables ----------------------------------------------------------------------------------

def test_parse_nft_table():
    table = fw.parse_nft_table(NFT_GPUFLEET)
    assert table["family"] == "inet" and table["name"] == "gpufleet"
    assert table["chains"]["input"]["hook"] == "input"
    assert table["chains"]["input"]["policy"] == "drop"
    assert len(table["chains"]["input"]["rules"]) == 15
    assert table["sets"]["peers_v4"]["elements"] == ["10.79.7.11-10.79.7.12"]
    assert table["sets"]["sources_v4"]["elements"] == ["192.0.2.0/24"]
    assert table["sets"]["udp_ports"]["elements"] == ["60000-60010"]
    assert table["sets"]["peers_v6"]["elements"] == []
    first = table["chains"]["input"]["rules"][0]
    assert first == {"matches": [("ct state", "in", ["established", "related"])],
                     "verdict": "accept", "other": []}


def test_nft_summary():
    summary = fw.nft_summary(fw.parse_nft_table(NFT_GPUFLEET))
    assert summary["policy"] == "drop"
    assert summary["input_chains"] == ["input"]
    assert summary["forward_chains"] == []
    assert summary["addresses"] == {
        "control": ["10.79.7.1"], "peers": ["10.79.7.11-10.79.7.12"],
        "sources": ["192.0.2.0/24", "2001:db8:7::/48"]}
    assert summary["tcp_ports"] == [22, 8443]
    assert summary["udp_ports"] == ["60000-60010"]
    assert summary["interfaces"] == ["docker0"]
    assert summary["established"] and summary["loopback"]
    assert summary["icmp"] and summary["icmpv6"]


def _rule(document, right):
    """The rule of the sample whose first match compares with ``right``."""
    for item in document["nftables"]:
        rule = item.get("rule")
        if rule and rule["expr"][0].get("match", {}).get("right") == right:
            return rule
    raise AssertionError("no rule matching %r" % right)


def test_nft_summary_ignores_rules_that_are_not_plain_accepts():
    document = json.loads(NFT_GPUFLEET)
    _rule(document, "@peers_v4")["expr"][1] = {"drop": None}
    # iif "lo" accept, with a second match before it
    _rule(document, "lo")["expr"].insert(0, {"match": {"op": "==", "left": {
        "payload": {"protocol": "tcp", "field": "dport"}}, "right": 1}})
    summary = fw.nft_summary(fw.parse_nft_table(json.dumps(document)))
    assert summary["addresses"]["peers"] == []   # only the empty peers_v6 set is accepted
    assert not summary["loopback"]


def test_nft_summary_reports_a_forward_chain_and_an_accept_policy():
    document = json.loads(NFT_GPUFLEET)
    for item in document["nftables"]:
        if "chain" in item:
            item["chain"]["policy"] = "accept"
    document["nftables"].append({"chain": {
        "family": "inet", "table": "gpufleet", "name": "fwd", "handle": 99, "type": "filter",
        "hook": "forward", "prio": 0, "policy": "drop"}})
    summary = fw.nft_summary(fw.parse_nft_table(json.dumps(document)))
    assert summary["policy"] == "accept"
    assert summary["forward_chains"] == ["fwd"]


def test_parse_nft_table_keeps_to_its_table():
    document = json.loads(NFT_GPUFLEET)
    # Docker's table in the same listing (nft -j list ruleset) is left out.
    document["nftables"].append({"chain": {"family": "ip", "table": "nat", "name": "OUTPUT",
                                           "handle": 1, "type": "nat", "hook": "output"}})
    document["nftables"].append({"rule": {"family": "inet", "table": "other", "chain": "input",
                                          "handle": 1, "expr": [{"accept": None}]}})
    table = fw.parse_nft_table(json.dumps(document))
    assert sorted(table["chains"]) == ["input"]


@pytest.mark.parametrize("text, message", [
    ("Error: No such file or directory", "no JSON"),
    ('{"something": []}', "without an \"nftables\" list"),
    ('{"nftables": [{"metainfo": {}}]}', "no table inet gpufleet"),
])
def test_parse_nft_table_errors(text, message):
    with pytest.raises(fw.FirewallParseError) as info:
        fw.parse_nft_table(text)
    assert message in str(info.value)


# --- ufw ---------------------------------------------------------------------------------------

def test_parse_ufw_status():
    status = fw.parse_ufw_status(UFW_STATUS)
    assert status["active"]
    assert status["defaults"] == {"incoming": "deny", "outgoing": "allow", "routed": "deny"}
    assert len(status["rules"]) == 13
    assert status["rules"][1] == {"to": "22/tcp", "action": "allow", "direction": "in",
                                  "from": "Anywhere", "comment": "gpufleet:ssh", "v6": False}
    assert status["rules"][8] == {"to": "Anywhere on docker0", "action": "allow",
                                  "direction": "in", "from": "Anywhere",
                                  "comment": "gpufleet:interface", "v6": True}


def test_parse_ufw_status_inactive():
    status = fw.parse_ufw_status("Status: inactive\n")
    assert status == {"active": False, "defaults": {}, "rules": []}


def test_parse_ufw_status_errors():
    with pytest.raises(fw.FirewallParseError):
        fw.parse_ufw_status("ERROR: You need to be root to run this script\n")
    with pytest.raises(fw.FirewallParseError):
        fw.parse_ufw_status("Status: active\n\nTo  Action  From\n--  ------  ----\n???\n")


def test_ufw_summary():
    summary = fw.ufw_summary(fw.parse_ufw_status(UFW_STATUS))
    assert summary["policy"] == "drop"
    assert summary["addresses"] == {
        "peers": ["10.79.7.11", "10.79.7.12"], "control": ["10.79.7.1"],
        "sources": ["192.0.2.0/24", "2001:db8:7::/48"]}
    assert summary["tcp_ports"] == [22, 8443]
    assert summary["udp_ports"] == ["60000-60010"]
    assert summary["interfaces"] == ["docker0"]


def test_ufw_summary_other_rules():
    text = UFW_STATUS.replace("deny (incoming)", "allow (incoming)") + (
        "80,443/tcp                 ALLOW IN    Anywhere\n"
        "53                         ALLOW IN    Anywhere\n"
        "OpenSSH                    ALLOW IN    Anywhere\n"
        "Anywhere                   DENY IN     203.0.113.7\n"
        "9000                       ALLOW IN    10.0.0.0/8\n"
        "Anywhere                   ALLOW IN    198.51.100.0/24\n")
    summary = fw.ufw_summary(fw.parse_ufw_status(text))
    assert summary["policy"] == "accept"
    # Uncommented sources count as sources; denies and port-limited sources are left out.
    assert summary["addresses"]["sources"] == [
        "192.0.2.0/24", "2001:db8:7::/48", "198.51.100.0/24"]
    assert summary["tcp_ports"] == [22, 8443, 80, 443, 53]
    assert summary["udp_ports"] == ["60000-60010", 53]
