# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The backends gpufleet provisions, the one rule that picks a fleet's backend, and the one way
to make a backend's client.

    backend = select(config, name)            # "local", "aws" or "gcp"
    if backend in CLOUD_BACKENDS:
        aws = client(backend, settings)       # its section of the backend settings
    else:
        nodes = client(backend, docker=docker)

Everything that asks which backend holds a fleet (fleets/apply.py, fleets/cloud.py, the
inventory plugin, the fleet and fleet_reconcile modules) asks ``select``, so a fleet is looked
for where it was built. The contract the clients keep is interface.py's (re-exported here).
"""

from __future__ import annotations

from typing import Any

from ..core.errors import GpufleetError
from ..spec import support
from .errors import BackendError, UnsupportedBackend
from .interface import Backend, CloudBackend
from .local import Local

# The contract (interface.py) is part of this module's face: base.Backend, base.CloudBackend.
__all__ = ("BACKENDS", "CLOUD_BACKENDS", "POLICY_SETTINGS", "Backend", "CloudBackend", "client",
           "configured", "default_backends", "select", "settings_section")


def _cloud_class(name):
    # Imported when first asked for: boto3 and google-auth take a fifth of a second to import,
    # which every task submission and command on a local or SSH fleet would pay for nothing.
    if name == "aws":
        from .aws import Aws
        return Aws
    from .gcp import Gcp
    return Gcp


class _Registry(object):
    """The backends by name (``local``, ``aws``, ``gcp``), each its client class: a read-only
    mapping whose cloud entries are imported when first read."""

    _names = support.FLEET_BACKENDS

    def __init__(self):
        self._loaded = {"local": Local}

    def __getitem__(self, name):
        if name not in self._names:
            raise KeyError(name)
        if name not in self._loaded:
            self._loaded[name] = _cloud_class(name)
        return self._loaded[name]

    def __contains__(self, name):
        return name in self._names

    def __iter__(self):
        return iter(self._names)

    def __len__(self):
        return len(self._names)

    def keys(self):
        return list(self._names)

    def items(self):
        return [(name, self[name]) for name in self._names]


BACKENDS = _Registry()
# Those whose class is a CloudBackend (tests/unit/backends/test_base.py checks it).
CLOUD_BACKENDS = ("aws", "gcp")
# Read by the fleet's retry policy (fleets/cloud.py), not by the client.
POLICY_SETTINGS = ("retry_delays",)


def configured(settings: dict[str, Any] | None) -> list[str]:
    """The cloud backends the backend settings configure (a section each), in registry order:
    what a fleet without ``backends`` may use, as dstack uses every backend of its project."""
    return [b for b in CLOUD_BACKENDS if (settings or {}).get(b) is not None]


def default_backends(config: dict[str, Any], settings: dict[str, Any] | None = None,
                     catalog_dir: str | None = None) -> list[str]:
    """The backends a fleet may use: its ``backends``; without them, as dstack uses every
    backend of its project, every configured cloud backend (the one with the cheapest offer
    for the fleet first), ``local`` when none is configured."""
    if config.get("backends"):
        return list(config["backends"])
    clouds = configured(settings)
    if len(clouds) > 1:
        clouds = _by_price(config, clouds, catalog_dir)
    return clouds or ["local"]


def _by_price(config, clouds, catalog_dir):
    """``clouds`` ordered by their cheapest offer for the config (a backend without one last)."""
    from ..offers import catalog
    from ..offers.select import OfferError, select as select_offers

    try:
        catalogs = dict((b, catalog.load(b, catalog_dir)[0]) for b in clouds)
        offers = select_offers(dict(config, backends=list(clouds)), catalogs)["offers"]
    except (OfferError, GpufleetError):
        return list(clouds)
    order = []
    for offer in offers:
        if offer["backend"] not in order:
            order.append(offer["backend"])
    return order + [b for b in clouds if b not in order]


def select(config: dict[str, Any], name: str, settings: dict[str, Any] | None = None,
           catalog_dir: str | None = None) -> str:
    """The backend that provisions the backend fleet ``name``: ``local`` when its backends
    (default_backends: the file's, else the configured ones) list it (local nodes cost
    nothing, so a list with ``local`` gets it, as the cheapest offer), else the first one
    listed that gpufleet provisions. UnsupportedBackend when it lists none."""
    wanted = default_backends(config, settings, catalog_dir)
    why = support.fleet_backends_refusal(wanted)   # what gpufleet validate reports too
    if why:
        raise UnsupportedBackend("fleet %s: backends %s" % (name, why))
    if "local" in wanted:
        return "local"
    return next(backend for backend in wanted if backend in BACKENDS)


def settings_section(settings: dict[str, Any] | None, backend: str) -> dict[str, Any]:
    """The backend's section of the backend settings (``{"aws": {...}}``), {} when absent."""
    section = (settings or {}).get(backend) or {}
    if not isinstance(section, dict):
        raise BackendError("backend settings: %s must be a mapping, got %s"
                           % (backend, type(section).__name__))
    return section


def client(backend, settings=None, docker=None):
    """The client of ``backend``: a cloud one made with its section of the backend settings
    (BackendError when it cannot be made: no credentials, bad settings), the local one with
    the Docker engine ``docker``."""
    if backend not in BACKENDS:
        raise UnsupportedBackend("no backend named %s (known: %s)"
                                 % (backend, ", ".join(BACKENDS)))
    if backend not in CLOUD_BACKENDS:
        return BACKENDS[backend](docker)
    section = dict(settings_section(settings, backend))
    for key in POLICY_SETTINGS:
        section.pop(key, None)
    return BACKENDS[backend](section)
