# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The firewall component: SSH from anywhere, everything from the fleet's nodes, nothing else
from outside, with nftables (the table ``inet gpufleet``) or ufw.

``detect`` always applies (the firewall needs no hardware) unless ``settings.enabled`` is false,
and says which backends the host has. ``verify`` reads the live rules (``nft -j list table`` or
``ufw status verbose``), the boot configuration and the service, and compares them with
``expect``.

settings: ``enabled`` (bool), ``backend`` (nftables | ufw), ``table`` (gpufleet), ``rules_file``
(/etc/nftables.d/gpufleet.nft), ``conf_file`` (the nftables configuration loaded at boot; the
first of /etc/nftables.conf and /etc/sysconfig/nftables.conf that exists), ``ufw_comment``
(gpufleet).

expect: ``peers``, ``sources``, ``control`` (addresses or CIDRs that must be allowed in; when
any of them is given, nothing else may be), ``ssh_port`` (22), ``tcp_ports``, ``udp_ports``
(numbers or ranges that must be open; when given, no other port may be), ``trusted_interfaces``,
``monitoring_sources`` and ``monitoring_ports`` (each port open over TCP to each of those
addresses only, the scrape of the monitoring role's exporters; when given, no other port is
open to some sources only).

PRIVATE to gpufleet.cluster.
"""

from __future__ import annotations

import re
from typing import Any

from ..facts.probe import System
from . import CheckError, Detection, result
from ._packages import unit_state
from ..firewall_rules import (
    FirewallParseError,
    covered,
    nft_summary,
    parse_nft_table,
    parse_ufw_status,
    port_open,
    scoped_open,
    ufw_summary,
)

BACKENDS = ("nftables", "ufw")
DEFAULT_TABLE = "gpufleet"
DEFAULT_RULES_FILE = "/etc/nftables.d/gpufleet.nft"
CONF_FILES = ("/etc/nftables.conf", "/etc/sysconfig/nftables.conf")
UFW_CONF = "/etc/ufw/ufw.conf"
ADDRESS_KINDS = ("peers", "sources", "control")
NAMES = {"peers": "peer", "sources": "source", "control": "Ansible controller"}


def _settings(params):
    return params.get("settings") or {}


def _ufw_active(system, ufw):
    """True or False from ``ufw status``, None when it cannot be asked (not root)."""
    status, out, _err = system.run([ufw, "status"])
    if status != 0:
        return None
    return re.search(r"(?m)^Status:\s*active", out) is not None


def _firewalld_active(system):
    if not system.which("systemctl"):
        return False
    active, _enabled = unit_state(system, "firewalld.service")
    return active == "active"


def detect(system: System, params: dict[str, Any]) -> Detection:
    settings = _settings(params)
    if not settings.get("enabled", True):
        return Detection(False, "the firewall is disabled on this host (firewall_enabled: false)",
                         {"enabled": False})
    nft = system.which("nft")
    ufw = system.which("ufw")
    available = [name for name, path in (("nftables", nft), ("ufw", ufw)) if path]
    details = {
        "enabled": True,
        "available": available,
        "nft": nft,
        "ufw": ufw,
        "ufw_active": _ufw_active(system, ufw) if ufw else False,
        "firewalld_active": _firewalld_active(system),
    }
    if available:
        reason = "the firewall applies to every host; backends installed: %s" % ", ".join(
            available)
    else:
        reason = ("the firewall applies to every host; neither nft nor ufw is installed yet "
                  "(the role installs its backend)")
    backend = settings.get("backend")
    if backend:
        details["backend"] = backend
        reason += "; the backend chosen, %s, %s" % (
            backend, "is installed" if backend in available else "will be installed")
    if details["ufw_active"] and backend not in (None, "ufw"):
        reason += "; ufw is active"
    if details["firewalld_active"]:
        reason += "; firewalld is active"
    return Detection(True, reason, details)


def _base_facts(backend, summary=None):
    summary = summary or {}
    addresses = summary.get("addresses", {})
    return {
        "backend": backend,
        "active": False,
        "policy": summary.get("policy"),
        "peers": addresses.get("peers", []),
        "sources": addresses.get("sources", []),
        "control": addresses.get("control", []),
        "tcp_ports": summary.get("tcp_ports", []),
        "udp_ports": summary.get("udp_ports", []),
        "trusted_interfaces": summary.get("interfaces", []),
        "scoped": summary.get("scoped", []),
        "accepts": {
            "established": summary.get("established", False),
            "loopback": summary.get("loopback", False),
            "icmp": summary.get("icmp", False),
            "icmpv6": summary.get("icmpv6", False),
        },
    }


def _included(conf_text, rules_file):
    """Whether the nftables configuration includes ``rules_file`` (an uncommented include of
    the file or of a glob of its directory)."""
    directory = rules_file.rsplit("/", 1)[0]
    for line in conf_text.splitlines():
        match = re.match(r'^\s*include\s+"([^"]+)"', line)
        if not match:
            continue
        target = match.group(1)
        if target == rules_file or (target.startswith(directory + "/") and "*" in target):
            return True
    return False


def _nftables(system, settings):
    problems = []
    table = settings.get("table") or DEFAULT_TABLE
    rules_file = settings.get("rules_file") or DEFAULT_RULES_FILE
    nft = system.which("nft")
    if not nft:
        facts = _base_facts("nftables")
        facts.update({"table": None, "forward_chains": []})
        return facts, ["nft is not installed (package nftables)"]
    status, out, err = system.run([nft, "-j", "list", "table", "inet", table])
    summary = {}
    if status != 0:
        if "No such file or directory" not in err:
            raise CheckError("nft -j list table inet %s failed (exit %s): %s"
                             % (table, status, (err or out).strip()[:300]))
        problems.append("the nftables table inet %s is not loaded" % table)
    else:
        try:
            summary = nft_summary(parse_nft_table(out, "inet", table))
        except FirewallParseError as exc:
            raise CheckError(str(exc)) from exc
    facts = _base_facts("nftables", summary)
    facts["table"] = "inet %s" % table if status == 0 else None
    facts["active"] = status == 0 and bool(summary.get("input_chains"))
    facts["forward_chains"] = summary.get("forward_chains", [])
    if status == 0:
        if not summary["input_chains"]:
            problems.append("the table inet %s has no chain on the input hook" % table)
        if summary["forward_chains"]:
            problems.append(
                "the table inet %s filters forwarded traffic (chain %s), which Docker's "
                "containers need" % (table, ", ".join(summary["forward_chains"])))

    active, enabled = unit_state(system, "nftables.service")
    facts["service"] = {"name": "nftables.service", "enabled": enabled == "enabled",
                        "state": active}
    if enabled != "enabled":
        problems.append("nftables.service is %s, so the rules are not loaded at boot" % enabled)

    conf_file = settings.get("conf_file") or next(
        (path for path in CONF_FILES if system.exists(path)), CONF_FILES[0])
    try:
        included = _included(system.read_text(conf_file), rules_file)
    except (OSError, IOError):
        included = False
    facts["rules_file"] = {"path": rules_file, "exists": system.exists(rules_file),
                           "conf_file": conf_file, "included": included}
    if not facts["rules_file"]["exists"]:
        problems.append("the rules file %s is missing" % rules_file)
    if not included:
        problems.append("%s does not include %s, so the rules are not loaded at boot"
                        % (conf_file, rules_file))
    return facts, problems


def _ufw(system, settings):
    problems = []
    ufw = system.which("ufw")
    if not ufw:
        return _base_facts("ufw"), ["ufw is not installed"]
    status, out, err = system.run([ufw, "status", "verbose"])
    if status != 0:
        raise CheckError("ufw status verbose failed (exit %s): %s"
                         % (status, (err or out).strip()[:300]))
    try:
        parsed = parse_ufw_status(out)
    except FirewallParseError as exc:
        raise CheckError(str(exc)) from exc
    facts = _base_facts("ufw", ufw_summary(parsed, settings.get("ufw_comment") or "gpufleet"))
    facts["active"] = parsed["active"]
    if not parsed["active"]:
        problems.append("ufw is not active")

    active, enabled = unit_state(system, "ufw.service")
    try:
        at_boot = re.search(r"(?m)^\s*ENABLED\s*=\s*yes\s*$",
                            system.read_text(UFW_CONF)) is not None
    except (OSError, IOError):
        at_boot = False
    facts["service"] = {"name": "ufw.service", "enabled": enabled == "enabled" and at_boot,
                        "state": active}
    if enabled != "enabled":
        problems.append("ufw.service is %s, so the rules are not loaded at boot" % enabled)
    if not at_boot:
        problems.append("%s does not say ENABLED=yes, so ufw stays off at boot" % UFW_CONF)
    return facts, problems


def _compare(facts, expect):
    problems = []
    if not facts["active"]:
        return problems
    if facts["policy"] not in ("drop", "reject"):
        problems.append("incoming traffic is let in by default (policy %s)" % facts["policy"])
    for what, name in (("established", "established and related connections"),
                       ("loopback", "loopback traffic"), ("icmp", "ICMP")):
        if not facts["accepts"][what]:
            problems.append("%s are not accepted" % name if what == "established"
                            else "%s is not accepted" % name)

    ssh_port = expect.get("ssh_port") or 22
    if not port_open(ssh_port, facts["tcp_ports"]):
        problems.append("the SSH port %s/tcp is not open" % ssh_port)

    allowed = facts["peers"] + facts["sources"] + facts["control"]
    expected = []
    for kind in ADDRESS_KINDS:
        for address in expect.get(kind) or []:
            expected.append(str(address))
            if not covered(address, allowed):
                problems.append("%s %s is not allowed in" % (NAMES[kind], address))
    if any(kind in expect for kind in ADDRESS_KINDS):
        for address in allowed:
            if not covered(address, expected):
                problems.append("%s is allowed in but is neither a peer, a source nor the "
                                "controller" % address)

    for proto in ("tcp", "udp"):
        key = proto + "_ports"
        if key not in expect:
            continue
        wanted = [str(port) for port in expect.get(key) or []]
        for port in wanted:
            if not port_open(port, facts[key]):
                problems.append("port %s/%s is not open" % (port, proto))
        known = wanted + ([str(ssh_port)] if proto == "tcp" else [])
        for port in facts[key]:
            if not port_open(port, known):
                problems.append("port %s/%s is open but not expected" % (port, proto))

    for interface in expect.get("trusted_interfaces") or []:
        if interface not in facts["trusted_interfaces"]:
            problems.append("traffic from interface %s is not accepted" % interface)
    if "monitoring_sources" in expect or "monitoring_ports" in expect:
        problems.extend(_compare_scoped(facts.get("scoped") or [], expect))
    return problems


def _compare_scoped(scoped, expect):
    """The monitoring scrape: each port open over TCP to each source, and no other TCP port
    open to some sources only (UDP ones are the role's own: DHCPv6 replies)."""
    problems = []
    sources = [str(a) for a in expect.get("monitoring_sources") or []]
    ports = [str(p) for p in expect.get("monitoring_ports") or []]
    for port in ports:
        for source in sources:
            if not scoped_open(scoped, source, port):
                problems.append("port %s/tcp is not open to %s (the monitoring scrape)"
                                % (port, source))
    for rule in scoped:
        if rule["proto"] != "tcp":
            continue
        if not port_open(rule["port"], ports) or not covered(rule["source"], sources):
            problems.append("port %s/%s is open to %s but not expected"
                            % (rule["port"], rule["proto"], rule["source"]))
    return problems


def verify(system: System, params: dict[str, Any]) -> dict[str, Any]:
    settings = _settings(params)
    expect = params.get("expect") or {}
    backend = settings.get("backend") or "nftables"
    if backend not in BACKENDS:
        raise CheckError("unknown firewall backend %r; known: %s" % (backend, ", ".join(BACKENDS)))
    if backend == "nftables":
        facts, problems = _nftables(system, settings)
    else:
        facts, problems = _ufw(system, settings)
    problems.extend(_compare(facts, expect))
    return result(problems=problems, **facts)
