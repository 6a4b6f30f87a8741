# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Read firewall state: ``nft -j list table`` and ``ufw status verbose``, summed up as what the
gpufleet firewall role cares about (who is allowed in, which ports are open, the default).

Pure Python, no Ansible imports; the firewall component of node_check uses it.

PRIVATE to gpufleet.cluster.
"""

from __future__ import annotations

import ipaddress
import json
import re
from typing import Any, Iterable

from ..core.errors import GpufleetError


class FirewallParseError(GpufleetError, ValueError):
    """A tool's output was not in the format expected."""


# --- addresses and ports -----------------------------------------------------------------------

def address_range(text: str) -> tuple[int, int, int]:
    """``(version, low, high)`` integers for an address, a CIDR or ``LOW-HIGH`` (as nft lists
    auto-merged elements); ValueError for anything else."""
    text = str(text).strip()
    if "-" in text:
        low, high = (ipaddress.ip_address(part.strip()) for part in text.split("-", 1))
        if low.version != high.version or int(low) > int(high):
            raise ValueError("not an address range: %r" % text)
        return low.version, int(low), int(high)
    network = ipaddress.ip_network(text, strict=False)
    return network.version, int(network.network_address), int(network.broadcast_address)


def _merged(ranges):
    """Ranges of one version, sorted, with overlapping and adjacent ones joined."""
    merged = []
    for low, high in sorted(ranges):
        if merged and low <= merged[-1][1] + 1:
            merged[-1][1] = max(merged[-1][1], high)
        else:
            merged.append([low, high])
    return merged


def covered(address: str, allowed: Iterable[str]) -> bool:
    """Whether every address of ``address`` (address, CIDR or range) is allowed by ``allowed``
    (a list of the same forms, taken together). Unreadable elements allow nothing."""
    try:
        version, low, high = address_range(address)
    except ValueError:
        return False
    ranges = []
    for element in allowed:
        try:
            e_version, e_low, e_high = address_range(element)
        except ValueError:
            continue
        if e_version == version:
            ranges.append((e_low, e_high))
    return any(m_low <= low and high <= m_high for m_low, m_high in _merged(ranges))


def port_range(value: int | str) -> tuple[int, int]:
    """``(low, high)`` for a port number or a ``LOW-HIGH`` / ``LOW:HIGH`` range."""
    text = str(value).strip().replace(":", "-")
    match = re.match(r"^(\d+)(?:-(\d+))?$", text)
    if not match:
        raise ValueError("not a port or port range: %r" % (value,))
    low = int(match.group(1))
    high = int(match.group(2) or low)
    if not 0 < low <= high <= 65535:
        raise ValueError("not a port or port range: %r" % (value,))
    return low, high


def port_text(low: int, high: int) -> int | str:
    """A port as the facts show it: the number, or "LOW-HIGH" for a range."""
    return low if low == high else "%d-%d" % (low, high)


def port_open(port: int | str, open_ports: Iterable[int | str]) -> bool:
    """Whether every port of ``port`` is inside ``open_ports`` (numbers or ranges) taken
    together."""
    low, high = port_range(port)
    ranges = []
    for element in open_ports:
        try:
            ranges.append(port_range(element))
        except ValueError:
            continue
    return any(m_low <= low and high <= m_high for m_low, m_high in _merged(ranges))


# --- nftables ----------------------------------------------------------------------------------

def _nft_value(value):
    """An nft JSON value as a string or int: ``@set`` references stay as they are, prefixes
    become CIDRs, ranges ``LOW-HIGH``; a list for anonymous sets."""
    if isinstance(value, dict):
        if "set" in value:
            items = value["set"]
            return [_nft_value(item) for item in (items if isinstance(items, list) else [items])]
        if "prefix" in value:
            return "%s/%s" % (value["prefix"]["addr"], value["prefix"]["len"])
        if "range" in value:
            low, high = value["range"]
            return "%s-%s" % (_nft_value(low), _nft_value(high))
        if "elem" in value:
            return _nft_value(value["elem"].get("val"))
        return json.dumps(value, sort_keys=True)
    if isinstance(value, list):
        return [_nft_value(item) for item in value]
    return value


def _nft_left(left):
    """The key a match looks at: "ip saddr", "tcp dport", "ct state", "meta iifname", ..."""
    if isinstance(left, dict):
        if "payload" in left:
            return "%s %s" % (left["payload"].get("protocol"), left["payload"].get("field"))
        if "meta" in left:
            return "meta %s" % left["meta"].get("key")
        if "ct" in left:
            return "ct %s" % left["ct"].get("key")
    return json.dumps(left, sort_keys=True)


VERDICTS = ("accept", "drop", "reject", "jump", "goto", "return", "queue", "continue")


def _nft_rule(expressions):
    """A rule as ``{"matches": [(key, op, value), ...], "verdict": str or None, "other": [...]}``
    (``other``: statements that are neither a match nor a verdict, like counters)."""
    rule = {"matches": [], "verdict": None, "other": []}
    for expression in expressions or []:
        if not isinstance(expression, dict) or len(expression) != 1:
            rule["other"].append(expression)
            continue
        (name, body), = expression.items()
        if name == "match":
            rule["matches"].append(
                (_nft_left(body.get("left")), body.get("op", "=="), _nft_value(body.get("right"))))
        elif name in VERDICTS:
            rule["verdict"] = name
        else:
            rule["other"].append(name)
    return rule


def parse_nft_table(text: str, family: str = "inet",
                    name: str = "gpufleet") -> dict[str, Any] | None:
    """The table ``family name`` from ``nft -j list table`` (or ``list ruleset``) output.

    Returns ``{"family", "name", "chains": {name: {type, hook, prio, policy, rules}},
    "sets": {name: {"type", "flags", "elements"}}}``; rules as ``_nft_rule`` makes them."""
    try:
        document = json.loads(text)
    except ValueError as exc:
        raise FirewallParseError("nft -j printed no JSON (%s): %.200s" % (exc, text)) from exc
    if not isinstance(document, dict) or not isinstance(document.get("nftables"), list):
        raise FirewallParseError("nft -j printed JSON without an \"nftables\" list: %.200s"
                                 % text)
    table = None
    chains: dict[Any, dict[str, Any]] = {}
    sets: dict[Any, dict[str, Any]] = {}
    for item in document["nftables"]:
        if not isinstance(item, dict) or len(item) != 1:
            continue
        (kind, body), = item.items()
        if not isinstance(body, dict) or body.get("family") != family:
            continue
        if kind == "table" and body.get("name") == name:
            table = body
        elif body.get("table") != name:
            continue
        elif kind == "chain":
            chains[body.get("name")] = {
                "type": body.get("type"), "hook": body.get("hook"), "prio": body.get("prio"),
                "policy": body.get("policy"), "rules": []}
        elif kind == "set":
            elements = body.get("elem", [])
            sets[body.get("name")] = {
                "type": body.get("type"), "flags": list(body.get("flags", [])),
                "elements": [_nft_value(element) for element in elements]}
        elif kind == "rule":
            chain = chains.setdefault(body.get("chain"), {
                "type": None, "hook": None, "prio": None, "policy": None, "rules": []})
            chain["rules"].append(_nft_rule(body.get("expr")))
    if table is None:
        raise FirewallParseError("the nft output has no table %s %s" % (family, name))
    return {"family": family, "name": name, "chains": chains, "sets": sets}


ADDRESS_KEYS = ("ip saddr", "ip6 saddr")
PORT_KEYS = {"tcp dport": "tcp", "udp dport": "udp", "th dport": "any"}
INTERFACE_KEYS = ("meta iif", "meta iifname")
ICMP_VALUES = {"icmp": "icmp", "ipv6-icmp": "icmpv6", "icmpv6": "icmpv6"}


def _values(value, sets):
    """The elements ``value`` stands for: a named set's elements, an anonymous set's, or
    itself."""
    if isinstance(value, list):
        return value
    if isinstance(value, str) and value.startswith("@"):
        return list(sets.get(value[1:], {}).get("elements", []))
    return [value]


def _set_kind(value):
    """For ``@peers_v4`` style references, the set's name without the family suffix."""
    if isinstance(value, str) and value.startswith("@"):
        return re.sub(r"_v[46]$", "", value[1:])
    return None


def nft_summary(table: dict[str, Any]) -> dict[str, Any]:
    """What the table's input chain(s) let in: ``{"policy", "hook_chains", "addresses":
    {kind: [...]}, "tcp_ports", "udp_ports", "interfaces", "established", "loopback", "icmp",
    "icmpv6", "forward_chains", "scoped"}``. Only rules with one match and an accept verdict
    count (the form the role writes); an address in a set named ``peers_v4`` counts as a peer.
    ``scoped`` lists the ports open to some sources only (rules matching a source address and a
    destination port, the form the role writes for the monitoring scrape), as ``scoped_rules``
    makes them."""
    summary: dict[str, Any] = {
        "policy": None, "input_chains": [], "forward_chains": [], "addresses": {},
        "tcp_ports": [], "udp_ports": [], "interfaces": [], "established": False,
        "loopback": False, "icmp": False, "icmpv6": False, "scoped": [],
    }
    for chain_name, chain in sorted(table["chains"].items()):
        if chain.get("hook") == "forward":
            summary["forward_chains"].append(chain_name)
        if chain.get("hook") != "input":
            continue
        summary["input_chains"].append(chain_name)
        summary["policy"] = chain.get("policy") or "accept"
        for rule in chain["rules"]:
            if rule["verdict"] == "accept" and len(rule["matches"]) == 2:
                summary["scoped"].extend(_nft_scoped(rule["matches"], table["sets"]))
            if rule["verdict"] != "accept" or len(rule["matches"]) != 1:
                continue
            key, op, value = rule["matches"][0]
            if op not in ("==", "in"):
                continue
            values = _values(value, table["sets"])
            if key in ADDRESS_KEYS:
                kind = _set_kind(value) or "sources"
                summary["addresses"].setdefault(kind, []).extend(str(v) for v in values)
            elif key in PORT_KEYS:
                protos = ["tcp", "udp"] if PORT_KEYS[key] == "any" else [PORT_KEYS[key]]
                for proto in protos:
                    summary[proto + "_ports"].extend(values)
            elif key == "ct state":
                summary["established"] = summary["established"] or "established" in values
            elif key in INTERFACE_KEYS:
                for interface in values:
                    if interface == "lo":
                        summary["loopback"] = True
                    else:
                        summary["interfaces"].append(interface)
            elif key in ("meta l4proto", "ip protocol", "ip6 nexthdr"):
                for proto in values:
                    if proto in ICMP_VALUES:
                        summary[ICMP_VALUES[proto]] = True
    for key in ("tcp_ports", "udp_ports", "interfaces"):
        summary[key] = _unique(summary[key])
    for kind, addresses in summary["addresses"].items():
        summary["addresses"][kind] = _unique(addresses)
    summary["scoped"] = _unique(summary["scoped"])
    return summary


def scoped_rule(source: str, proto: str, port: int | str) -> dict[str, Any]:
    """One port open to one source: ``{"source", "proto", "port"}`` (the port as ``port_text``
    gives it)."""
    low, high = port_range(port)
    return {"source": str(source), "proto": proto, "port": port_text(low, high)}


def _nft_scoped(matches, sets):
    """The scoped rules of an accept rule with two matches, a source address and a destination
    port (in either order, sets expanded); [] for any other pair."""
    by_key = dict((key, (op, value)) for key, op, value in matches)
    address_keys = [key for key in by_key if key in ADDRESS_KEYS]
    port_keys = [key for key in by_key if key in PORT_KEYS]
    if len(address_keys) != 1 or len(port_keys) != 1:
        return []
    (a_op, sources), (p_op, ports) = by_key[address_keys[0]], by_key[port_keys[0]]
    if a_op not in ("==", "in") or p_op not in ("==", "in"):
        return []
    protos = ["tcp", "udp"] if PORT_KEYS[port_keys[0]] == "any" else [PORT_KEYS[port_keys[0]]]
    rules = []
    for source in _values(sources, sets):
        for port in _values(ports, sets):
            for proto in protos:
                try:
                    rules.append(scoped_rule(source, proto, port))
                except ValueError:
                    continue
    return rules


def scoped_open(scoped: Iterable[dict[str, Any]], source: str, port: int | str,
                proto: str = "tcp") -> bool:
    """Whether ``scoped`` (a summary's ``scoped`` rules) lets every address of ``source`` reach
    every port of ``port`` over ``proto``."""
    low, high = port_range(port)
    for number in range(low, high + 1):
        allowed = [rule["source"] for rule in scoped
                   if rule["proto"] == proto and port_open(number, [rule["port"]])]
        if not covered(source, allowed):
            return False
    return True


# --- ufw ---------------------------------------------------------------------------------------

_UFW_RULE = re.compile(
    r"^(?P<to>.+?)\s+(?P<action>ALLOW|DENY|REJECT|LIMIT)(?:\s+(?P<direction>IN|OUT|FWD))?"
    r"\s+(?P<from>.+?)(?:\s+#\s?(?P<comment>.*))?$")
_UFW_DEFAULT = re.compile(r"(\w+) \((incoming|outgoing|routed)\)")
_UFW_PORTS = re.compile(r"^(?P<ports>[\d,:]+)(?:/(?P<proto>tcp|udp))?$")


def parse_ufw_status(text: str) -> dict[str, Any]:
    """``ufw status verbose`` as ``{"active", "defaults": {"incoming": "deny", ...}, "rules":
    [{"to", "action", "direction", "from", "comment", "v6"}]}``."""
    status = None
    defaults = {}
    rules = []
    in_rules = False
    for raw in text.splitlines():
        line = raw.rstrip()
        if line.startswith("Status:"):
            status = line.split(":", 1)[1].strip()
        elif line.startswith("Default:"):
            defaults = dict((where, what) for what, where in _UFW_DEFAULT.findall(line))
        elif re.match(r"^--+\s+--+", line):
            in_rules = True
        elif in_rules and line.strip():
            match = _UFW_RULE.match(line.strip())
            if not match:
                raise FirewallParseError("unreadable ufw rule line: %r" % line)
            to, source = match.group("to"), match.group("from")
            v6 = "(v6)" in to or "(v6)" in source
            rules.append({
                "to": to.replace(" (v6)", "").strip(),
                "action": match.group("action").lower(),
                "direction": (match.group("direction") or "IN").lower(),
                "from": source.replace(" (v6)", "").strip(),
                "comment": (match.group("comment") or "").strip() or None,
                "v6": v6,
            })
    if status is None:
        raise FirewallParseError("ufw status printed no \"Status:\" line: %.200s" % text)
    return {"active": status == "active", "defaults": defaults, "rules": rules}


def ufw_summary(status: dict[str, Any], comment_prefix: str = "gpufleet") -> dict[str, Any]:
    """What ufw lets in, in the shape of ``nft_summary``. Rules commented
    ``<comment_prefix>:peer`` (``:control``) count as peers (the controller); other sources
    allowed everything count as sources; a port allowed from one source only is ``scoped``.
    ufw's own before-rules accept loopback, established
    connections and ICMP."""
    incoming = status["defaults"].get("incoming")
    summary = {
        "policy": {"deny": "drop", "reject": "reject", "allow": "accept"}.get(incoming, incoming),
        "input_chains": [], "forward_chains": [], "addresses": {}, "tcp_ports": [],
        "udp_ports": [], "interfaces": [], "established": True, "loopback": True,
        "icmp": True, "icmpv6": True, "scoped": [],
    }
    for rule in status["rules"]:
        if rule["action"] != "allow" or rule["direction"] != "in":
            continue
        to, source = rule["to"], rule["from"]
        interface = None
        if " on " in to:
            to, interface = to.split(" on ", 1)
        if to == "Anywhere" and source == "Anywhere" and interface:
            summary["interfaces"].append(interface.strip())
        elif to == "Anywhere" and source != "Anywhere" and not interface:
            kind = "sources"
            comment = rule["comment"] or ""
            if comment.startswith(comment_prefix + ":"):
                kind = {"peer": "peers", "control": "control"}.get(
                    comment.split(":", 1)[1], "sources")
            summary["addresses"].setdefault(kind, []).append(source)
        elif not interface:
            match = _UFW_PORTS.match(to)
            if not match:
                continue
            protos = [match.group("proto")] if match.group("proto") else ["tcp", "udp"]
            for part in match.group("ports").split(","):
                low, high = port_range(part)
                for proto in protos:
                    if source == "Anywhere":
                        summary[proto + "_ports"].append(port_text(low, high))
                    else:
                        summary["scoped"].append(scoped_rule(source, proto, part))
    for key in ("tcp_ports", "udp_ports", "interfaces"):
        summary[key] = _unique(summary[key])
    for kind, addresses in summary["addresses"].items():
        summary["addresses"][kind] = _unique(addresses)
    summary["scoped"] = _unique(summary["scoped"])
    return summary


def _unique(items):
    seen = []
    for item in items:
        if item not in seen:
            seen.append(item)
    return seen
