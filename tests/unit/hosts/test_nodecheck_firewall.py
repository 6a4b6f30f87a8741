# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The firewall component of node_check on fake hosts: detection (always, unless disabled) and
verification of nftables and ufw rules against what the role was asked for."""

from __future__ import annotations

import json

import pytest
from ansible_collections.gpufleet.cluster.plugins.module_utils.hosts.checks import CheckError
from ansible_collections.gpufleet.cluster.plugins.module_utils.hosts.checks import firewall as check

from .nodecheck_fakes import FakeNode
from .test_firewall_rules import NFT_GPUFLEET, UFW_STATUS

NFT = ("/usr/bin/nft", "-j", "list", "table", "inet", "gpufleet")
UFW = ("/usr/bin/ufw", "status", "verbose")
DEBIAN_CONF = ("#!/usr/sbin/nft -f\n\nflush ruleset\n\ntable inet filter {\n}\n"
               'include "/etc/nftables.d/gpufleet.nft"\n')
EXPECT = {
    "peers": ["10.79.7.11", "10.79.7.12"],
    "sources": ["192.0.2.0/24", "2001:db8:7::/48"],
    "control": ["10.79.7.1"],
    "ssh_port": 22,
    "tcp_ports": ["8443"],
    "udp_ports": ["60000-60010"],
    "trusted_interfaces": ["docker0"],
}


def units(**states):
    """systemctl answers: unit=(active, enabled)."""
    commands = {}
    for unit, (active, enabled) in states.items():
        commands[("systemctl", "is-active", unit)] = (0 if active == "active" else 3,
                                                      active + "\n", "")
        commands[("systemctl", "is-enabled", unit)] = (0 if enabled == "enabled" else 1,
                                                       enabled + "\n", "")
    return commands


def nft_host(table=NFT_GPUFLEET, conf=DEBIAN_CONF, enabled="enabled", extra=None):
    commands = units(**{"nftables.service": ("inactive", enabled)})
    if table is None:
        commands[NFT] = (1, "", "Error: No such file or directory\nlist table inet gpufleet\n"
                                "                ^^^^^^^^\n")
    else:
        commands[NFT] = (0, table, "")
    commands.update(extra or {})
    files = {"/etc/nftables.d/gpufleet.nft": "table inet gpufleet\n"}
    if conf is not None:
        files["/etc/nftables.conf"] = conf
    return FakeNode(files=files, commands=commands, bins=["nft", "systemctl"])


def ufw_host(status=UFW_STATUS, enabled="enabled", conf="ENABLED=yes\nLOGLEVEL=low\n"):
    commands = units(**{"ufw.service": ("active", enabled)})
    commands[UFW] = (0, status, "")
    return FakeNode(files={"/etc/ufw/ufw.conf": conf}, commands=commands,
                    bins=["ufw", "systemctl"])


def verify(host, backend="nftables", expect=None, **settings):
    settings["backend"] = backend
    return check.verify(host, {"settings": settings,
                               "expect": EXPECT if expect is None else expect})


# --- detect ------------------------------------------------------------------------------------

def test_detect_disabled():
    found = check.detect(FakeNode(bins=["nft"]), {"settings": {"enabled": False}})
    assert not found.applies
    assert "disabled" in found.reason


def test_detect_always_applies_and_names_the_backends():
    host = FakeNode(bins=["nft", "ufw", "systemctl"], commands={
        ("/usr/bin/ufw", "status"): (0, "Status: inactive\n", ""),
        **units(**{"firewalld.service": ("inactive", "not-found")})})
    found = check.detect(host, {"settings": {"backend": "nftables"}})
    assert found.applies
    assert found.details["available"] == ["nftables", "ufw"]
    assert found.details["ufw_active"] is False
    assert found.details["firewalld_active"] is False
    assert "backends installed: nftables, ufw" in found.reason
    assert "nftables, is installed" in found.reason


def test_detect_on_a_bare_host_reports_what_is_to_be_installed():
    found = check.detect(FakeNode(), {"settings": {"backend": "ufw"}})
    assert found.applies
    assert found.details["available"] == []
    assert "neither nft nor ufw is installed yet" in found.reason
    assert "ufw, will be installed" in found.reason


def test_detect_mentions_other_active_firewalls():
    host = FakeNode(bins=["nft", "ufw", "systemctl"], commands={
        ("/usr/bin/ufw", "status"): (0, "Status: active\n", ""),
        **units(**{"firewalld.service": ("active", "enabled")})})
    found = check.detect(host, {"settings": {"backend": "nftables"}})
    assert found.details["ufw_active"] and found.details["firewalld_active"]
    assert "ufw is active" in found.reason and "firewalld is active" in found.reason


def test_detect_when_ufw_cannot_be_asked():
    host = FakeNode(bins=["ufw"], commands={
        ("/usr/bin/ufw", "status"): (1, "", "ERROR: You need to be root to run this script")})
    assert check.detect(host, {"settings": {}}).details["ufw_active"] is None


# --- verify: nftables --------------------------------------------------------------------------

def test_verify_nftables_ok():
    facts = verify(nft_host())
    assert facts["problems"] == [] and facts["ok"]
    assert facts["backend"] == "nftables"
    assert facts["active"] and facts["table"] == "inet gpufleet"
    assert facts["policy"] == "drop"
    assert facts["peers"] == ["10.79.7.11-10.79.7.12"]
    assert facts["control"] == ["10.79.7.1"]
    assert facts["tcp_ports"] == [22, 8443]
    assert facts["udp_ports"] == ["60000-60010"]
    assert facts["trusted_interfaces"] == ["docker0"]
    assert facts["accepts"] == {"established": True, "loopback": True, "icmp": True,
                                "icmpv6": True}
    assert facts["service"] == {"name": "nftables.service", "enabled": True,
                                "state": "inactive"}
    assert facts["rules_file"] == {"path": "/etc/nftables.d/gpufleet.nft", "exists": True,
                                   "conf_file": "/etc/nftables.conf", "included": True}
    assert facts["forward_chains"] == []


def test_verify_nftables_without_expectations_checks_the_basics_only():
    facts = verify(nft_host(), expect={})
    assert facts["ok"]


def test_verify_nftables_table_missing():
    facts = verify(nft_host(table=None))
    assert not facts["ok"]
    assert facts["table"] is None and not facts["active"]
    assert facts["problems"] == ["the nftables table inet gpufleet is not loaded"]


def test_verify_nftables_not_installed():
    facts = verify(FakeNode())
    assert facts["problems"] == ["nft is not installed (package nftables)"]


def test_verify_nftables_unreadable():
    host = nft_host(extra={NFT: (1, "", "Error: Operation not permitted")})
    with pytest.raises(CheckError) as info:
        verify(host)
    assert "Operation not permitted" in str(info.value)
    with pytest.raises(CheckError):
        verify(nft_host(table="not json"))


def test_verify_nftables_boot_configuration():
    facts = verify(nft_host(conf="#!/usr/sbin/nft -f\nflush ruleset\n", enabled="disabled"))
    assert facts["problems"] == [
        "nftables.service is disabled, so the rules are not loaded at boot",
        "/etc/nftables.conf does not include /etc/nftables.d/gpufleet.nft, so the rules are "
        "not loaded at boot",
    ]
    # A commented include does not count, a glob of the directory does.
    assert not verify(nft_host(conf='# include "/etc/nftables.d/gpufleet.nft"\n'))["ok"]
    assert verify(nft_host(conf='include "/etc/nftables.d/*.nft"\n'))["ok"]


def test_verify_nftables_el_configuration():
    host = nft_host(conf=None)
    host.files["/etc/sysconfig/nftables.conf"] = 'include "/etc/nftables.d/gpufleet.nft"\n'
    facts = verify(host)
    assert facts["ok"], facts["problems"]
    assert facts["rules_file"]["conf_file"] == "/etc/sysconfig/nftables.conf"


def test_verify_nftables_unexpected_and_missing_addresses_and_ports():
    expect = dict(EXPECT, peers=["10.79.7.11", "10.79.7.13"], tcp_ports=["8443", "9000"],
                  udp_ports=[], trusted_interfaces=["docker0", "cni0"])
    facts = verify(nft_host(), expect=expect)
    assert facts["problems"] == [
        "peer 10.79.7.13 is not allowed in",
        "10.79.7.11-10.79.7.12 is allowed in but is neither a peer, a source nor the controller",
        "port 9000/tcp is not open",
        "port 60000-60010/udp is open but not expected",
        "traffic from interface cni0 is not accepted",
    ]


def test_verify_nftables_weak_rules():
    document = json.loads(NFT_GPUFLEET)
    kept = []
    for item in document["nftables"]:
        if "chain" in item:
            item["chain"]["policy"] = "accept"
        rule = item.get("rule")
        if rule and rule["expr"][0]["match"]["right"] in (["established", "related"], "lo", 22):
            continue
        kept.append(item)
    kept.append({"chain": {"family": "inet", "table": "gpufleet", "name": "forward",
                           "handle": 30, "type": "filter", "hook": "forward", "prio": 0,
                           "policy": "drop"}})
    document["nftables"] = kept
    facts = verify(nft_host(table=json.dumps(document)), expect={})
    assert facts["problems"] == [
        "the table inet gpufleet filters forwarded traffic (chain forward), which Docker's "
        "containers need",
        "incoming traffic is let in by default (policy accept)",
        "established and related connections are not accepted",
        "loopback traffic is not accepted",
        "the SSH port 22/tcp is not open",
    ]


def test_verify_nftables_custom_ssh_port_and_table():
    table = NFT_GPUFLEET.replace('"right": 22}', '"right": 2222}').replace(
        '"gpufleet"', '"fleet"')
    host = nft_host(table=table)
    host.commands[("/usr/bin/nft", "-j", "list", "table", "inet", "fleet")] = (0, table, "")
    facts = verify(host, expect=dict(EXPECT, ssh_port=2222), table="fleet")
    assert facts["ok"], facts["problems"]
    assert facts["table"] == "inet fleet"
    facts = verify(host, expect=EXPECT, table="fleet")
    assert "the SSH port 22/tcp is not open" in facts["problems"]


def test_verify_unknown_backend():
    with pytest.raises(CheckError):
        verify(FakeNode(), backend="iptables")


# --- verify: ufw -------------------------------------------------------------------------------

def test_verify_ufw_ok():
    facts = verify(ufw_host(), backend="ufw")
    assert facts["problems"] == [] and facts["ok"]
    assert facts["backend"] == "ufw" and facts["active"]
    assert facts["policy"] == "drop"
    assert facts["peers"] == ["10.79.7.11", "10.79.7.12"]
    assert facts["control"] == ["10.79.7.1"]
    assert facts["sources"] == ["192.0.2.0/24", "2001:db8:7::/48"]
    assert facts["service"] == {"name": "ufw.service", "enabled": True, "state": "active"}


def test_verify_ufw_inactive():
    facts = verify(ufw_host(status="Status: inactive\n", conf="ENABLED=no\n"), backend="ufw")
    assert facts["problems"] == [
        "ufw is not active",
        "/etc/ufw/ufw.conf does not say ENABLED=yes, so ufw stays off at boot",
    ]


def test_verify_ufw_open_by_default_and_missing_peer():
    status = UFW_STATUS.replace("deny (incoming)", "allow (incoming)").replace(
        "10.79.7.12                 # gpufleet:peer", "10.79.7.99                 # gpufleet:peer")
    facts = verify(ufw_host(status=status), backend="ufw")
    assert facts["problems"] == [
        "incoming traffic is let in by default (policy accept)",
        "peer 10.79.7.12 is not allowed in",
        "10.79.7.99 is allowed in but is neither a peer, a source nor the controller",
    ]


def test_verify_ufw_errors():
    host = ufw_host()
    host.commands[UFW] = (1, "", "ERROR: You need to be root to run this script\n")
    with pytest.raises(CheckError) as info:
        verify(host, backend="ufw")
    assert "need to be root" in str(info.value)
    assert verify(FakeNode(), backend="ufw")["problems"] == ["ufw is not installed"]
