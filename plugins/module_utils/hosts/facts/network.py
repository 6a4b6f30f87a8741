# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""A host's addresses and the one its peers should use
(docs/reference/dstack-runtime.md#internal-ip).

Addresses are CIDR strings ("10.0.0.5/24", "fe80::1/64"), in interface order and, within an
interface, in the order the kernel lists them; loopback addresses are left out. That is the list
dstack's shim writes to host_info.json.

PRIVATE to gpufleet.cluster: the public surface is the ``hostfacts`` package.
"""

from __future__ import annotations

import ipaddress
import json
from typing import Any, Iterable

from ._errors import HostFactsError, ToolOutputError, excerpt

# Where the internal IP came from.
FROM_INTERNAL_IP = "internal_ip"
FROM_NETWORK = "network"
FROM_AUTO = "auto"


def _is_loopback(address):
    return ipaddress.ip_interface(address).ip.is_loopback


def cidr(ip: str | ipaddress.IPv4Address | ipaddress.IPv6Address, prefixlen: int | str) -> str:
    """``ip/prefixlen`` in the canonical spelling ("fe80::1/64"); ValueError if not an address."""
    return str(ipaddress.ip_interface("%s/%s" % (ip, prefixlen)))


def addresses_from_pairs(pairs: Iterable[tuple[str, int | str]]) -> list[str]:
    """CIDR strings from (ip, prefix length) pairs in order, leaving out loopback addresses."""
    addresses = []
    for ip, prefixlen in pairs:
        address = cidr(ip, prefixlen)
        if not _is_loopback(address):
            addresses.append(address)
    return addresses


def addresses_from_ip_json(text: str) -> list[str]:
    """Addresses from the output of ``ip -j addr`` (iproute2), interfaces in the order listed."""
    try:
        links = json.loads(text)
    except ValueError as exc:
        raise ToolOutputError("ip -j addr", "not valid JSON (%s)" % exc) from exc
    if not isinstance(links, list):
        raise ToolOutputError("ip -j addr", "expected a JSON array of interfaces")
    pairs = []
    for link in links:
        if not isinstance(link, dict):
            raise ToolOutputError("ip -j addr", "an interface is not a JSON object")
        for info in link.get("addr_info") or []:
            if not isinstance(info, dict) or info.get("family") not in ("inet", "inet6"):
                continue
            if "local" not in info or "prefixlen" not in info:
                continue
            try:
                pairs.append((info["local"], int(info["prefixlen"])))
            except (TypeError, ValueError) as exc:
                raise ToolOutputError(
                    "ip -j addr",
                    "interface %s: bad address %s" % (link.get("ifname"), excerpt(info)),
                ) from exc
    try:
        return addresses_from_pairs(pairs)
    except ValueError as exc:
        raise ToolOutputError("ip -j addr", str(exc)) from exc


def parse_if_inet6(text: str) -> list[tuple[int, str, str]]:
    """(interface index, interface name, CIDR) for each line of /proc/net/if_inet6.

    A line holds the address as 32 hex digits, the interface index, the prefix length, scope and
    flags (all hex), then the interface name.
    """
    entries = []
    for number, line in enumerate(text.splitlines(), 1):
        fields = line.split()
        if not fields:
            continue
        if len(fields) != 6 or len(fields[0]) != 32:
            raise ToolOutputError(
                "/proc/net/if_inet6", "unexpected line %s" % excerpt(line), number
            )
        try:
            ip = ipaddress.IPv6Address(int(fields[0], 16))
            index, prefixlen = int(fields[1], 16), int(fields[2], 16)
        except ValueError as exc:
            raise ToolOutputError(
                "/proc/net/if_inet6", "unexpected line %s" % excerpt(line), number
            ) from exc
        entries.append((index, fields[5], cidr(ip, prefixlen)))
    return entries


def _ipv4_addresses(addresses):
    """The IPv4 addresses among CIDR strings, in order, as strings; others are skipped."""
    found = []
    for address in addresses:
        try:
            found.append(str(ipaddress.IPv4Interface(address).ip))
        except ValueError:
            continue
    return found


def select_internal_ip(addresses: list[str], internal_ip: str | None = None,
                       network: str | None = None) -> tuple[str | None, str]:
    """The address the other hosts of a fleet reach this host on, and how it was chosen.

    Returns (ip or None, ``internal_ip`` | ``network`` | ``auto``):

    - ``internal_ip`` given (the host's ``internal_ip`` in the fleet): it must be one of the
      host's IPv4 addresses;
    - else ``network`` given (``ssh_config.network``, a private network such as 10.0.0.0/24):
      the first IPv4 address inside it;
    - else the first IPv4 address of the host (None if it has none). IPv6 addresses are never
      chosen.
    """
    ips = _ipv4_addresses(addresses)
    if internal_ip is not None:
        if internal_ip not in ips:
            raise HostFactsError(
                "Specified internal IP not found among instance interfaces: %s is not one of %s"
                % (internal_ip, ", ".join(ips) or "(no IPv4 address)")
            )
        return internal_ip, FROM_INTERNAL_IP
    if network is not None:
        chosen = _first_in_network(ips, network)
        if chosen is None:
            raise HostFactsError(
                "Failed to locate internal IP address on the given network %s: the host has %s"
                % (network, ", ".join(ips) or "no IPv4 address")
            )
        return chosen, FROM_NETWORK
    return (ips[0] if ips else None), FROM_AUTO


def _first_in_network(ips, network):
    """The first of ``ips`` inside ``network``; None when there is none, or when ``network`` is
    not a valid network (host bits set included) or not a private one, as dstack does."""
    try:
        net = ipaddress.ip_network(network)
    except ValueError:
        return None
    if not net.is_private:
        return None
    for ip in ips:
        if ipaddress.ip_address(ip) in net:
            return ip
    return None


def addresses_from_interfaces(interfaces: Iterable[tuple[int, str]], ipv4: Any,
                              inet6: Iterable[tuple[int, str, str]]) -> list[str]:
    """Addresses gathered without iproute2, in the order ``ip addr`` would list them.

    ``interfaces`` is [(index, name)] (``socket.if_nameindex()``), ``ipv4`` maps an interface
    name to its (ip, prefix length) (one per interface: the kernel's ioctl reports only the
    primary address), ``inet6`` is what ``parse_if_inet6`` returns. Interfaces go by index, and
    an interface's IPv4 address comes before its IPv6 ones.
    """
    pairs = []
    for index, name in sorted(interfaces):
        if name in ipv4:
            pairs.append(ipv4[name])
        for entry_index, _name, address in inet6:
            if entry_index == index:
                pairs.append(tuple(address.split("/", 1)))
    return addresses_from_pairs(pairs)
