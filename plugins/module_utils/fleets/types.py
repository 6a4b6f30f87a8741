# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The shapes of the fleet records, for type checking: they describe the dicts that
``fleets.records``, ``fleets.apply`` and the backends build, and change nothing in them (the
records go as they are to JSON, the state dir and Ansible's host variables).

This module imports nothing of gpufleet, so any module of ``fleets`` (and anything above it)
may name these types without an import cycle. The backends sit below ``fleets`` and build
instance records as plain dicts; ``fleets`` takes them as these types.
"""

from __future__ import annotations

from typing import Any, TypedDict


class Plan(TypedDict, total=False):
    """What an apply does to a fleet's instances, by instance name."""

    create: list[str]
    start: list[str]
    keep: list[str]
    remove: list[str]
    release: list[str]
    unread: list[str]


class _Instance(TypedDict):

    name: str
    num: int
    fleet: str
    backend: str                    # "ssh", "local", "aws", "gcp"
    region: str
    instance_type: str | None
    price: float | None
    spot: bool
    hostname: str | None            # the address to reach it at (None: none yet)
    port: int
    user: str | None
    identity_file: str | None
    proxy_jump: dict[str, Any] | None
    internal_ip: str | None
    network: str | None
    blocks: int | str               # a number, or "auto"
    placement: str                  # "any" or "cluster"


class InstanceRecord(_Instance, total=False):
    """One host of a fleet, as every part of gpufleet describes it (fleets.records)."""

    # Every listed instance has these three; a host that left an SSH fleet's file is described
    # without them (fleets.records.release_hostvars).
    status: str
    error: str | None
    created: str | None
    # Cloud instances.
    zone: str | None
    instance_id: str | None
    # Instances made for one run (backends.made_for).
    made_for_run: str | None
    idle_duration: int | str | None
    # Local nodes: the container, and the state dir of the controller that made it.
    container: str
    made_from: str
    # Who created it (its creator label or tag) and, on a cloud instance, the members its tags
    # or labels publish, {user: mark} (fleets.access).
    creator: str
    members: dict[str, str]
    # What an apply measured on the host (fleets.report): its facts and checks.
    resources: dict[str, Any] | None
    checks: dict[str, Any]


class _Fleet(TypedDict):

    name: str
    file: str | None                # the fleet file's absolute path (None: given inline)
    fleet_type: str                 # "ssh" or "cloud"
    placement: str
    nodes: dict[str, int | None] | None
    hosts: int | None               # an SSH fleet's number of hosts
    backends: list[str] | None
    spot_policy: str | None
    max_price: float | None
    resources: dict[str, Any] | None
    blocks: int | str | None
    idle_duration: int | str | None
    env: dict[str, str]
    gateway: dict[str, Any] | None  # a gateway's host: its domain, default, certificate
    status: str
    created: str | None
    plan: Plan | None
    instances: list[InstanceRecord]


class FleetRecord(_Fleet, total=False):
    """One fleet: its settings as the file gives them, its status and instances
    (fleets.records.fleet_record, completed by fleets.apply and fleets.report)."""

    # A cloud fleet's plan: the cheapest offers, how many matched, the highest price.
    offers: list[dict[str, Any]]
    offers_total: int
    offers_max_price: float | None
    # A deleted fleet: what was removed.
    removed: dict[str, Any]
    # What this controller may do with it: key, member, key missing, no access (fleets.access).
    access: str
