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

from .aws import Aws
from .errors import BackendError, UnsupportedBackend
from .gcp import Gcp
from .interface import Backend, CloudBackend
from .local import Local

# The contract (interface.py) is part of this module's face: base.Backend, base.CloudBackend.
__all__ = ("BACKENDS", "CLOUD_BACKENDS", "POLICY_SETTINGS", "Backend", "CloudBackend", "client",
           "select", "settings_section")

BACKENDS = {"local": Local, "aws": Aws, "gcp": Gcp}
CLOUD_BACKENDS = tuple(name for name, cls in BACKENDS.items() if issubclass(cls, CloudBackend))
# Read by the fleet's retry policy (fleets/cloud.py), not by the client.
POLICY_SETTINGS = ("retry_delays",)


def select(config, name):
    """The backend that provisions the backend fleet ``name``: ``local`` when ``backends`` is
    unset or lists it (local nodes cost nothing, so a list with ``local`` gets it, as the
    cheapest offer), else the first backend listed that gpufleet provisions. UnsupportedBackend
    when it lists none."""
    wanted = config.get("backends")
    if not wanted or "local" in wanted:
        return "local"
    for backend in wanted:
        if backend in BACKENDS:
            return backend
    raise UnsupportedBackend(
        "fleet %s: backends %s cannot provision nodes in this version of gpufleet (available: "
        "%s): add local to backends, or describe existing hosts with ssh_config"
        % (name, ", ".join(wanted), ", ".join(BACKENDS))
    )


def settings_section(settings, backend):
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
