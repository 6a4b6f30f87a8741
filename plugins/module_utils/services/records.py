# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The records a service crosses packages with, and where its routes are.

A service is published by a proxy (HAProxy) on one host of its fleet, its *proxy host*: the
fleet's queue host. Paths are dstack's with no gateway: ``/proxy/services/<project>/<run>/``
for the service and ``/proxy/models/<project>/`` for the OpenAI-compatible models. gpufleet has
no projects, so the project is always ``main`` (dstack's default project's name).
"""

from __future__ import annotations

from typing import Optional, TypedDict

PROJECT = "main"
# The in-fleet proxy's port on the proxy host (dstack's server listens on 3000 too, so an
# in-fleet URL reads as dstack's server proxy URL does).
PROXY_PORT = 3000


class Replica(TypedDict):
    """One replica as the proxy reaches it."""
    replica_num: int
    job_num: int           # the runner's job index of this replica in the run
    host: str              # the instance name (inventory name) it runs on
    address: str           # the host's internal address, reachable from the proxy host
    port: int              # the host port its container publishes the service's port on


class Route(TypedDict):
    """What the proxy host keeps for one service: /var/lib/gpufleet/proxy/routes/<run>.json."""
    run: str
    user: str              # who submitted it (teams.identity)
    fleet: str
    project: str
    port: int              # the service's port in its containers
    auth: bool
    strip_prefix: bool
    rate_limits: list      # the normalized config's rate_limits
    probes: list           # the normalized probes; [] means a TCP check of the port
    model: Optional[dict]  # the normalized model, or None
    replicas: list         # [Replica]
    submitted_at: float    # seconds since the epoch (stamps which writer is newer)
    rate_window: int       # seconds the proxy counts the service's requests over
    https: bool            # on a gateway with a certificate: served over HTTPS only


def service_prefix(run: str, project: str = PROJECT) -> str:
    """The path the proxy publishes ``run`` under, with its trailing slash."""
    return "/proxy/services/%s/%s/" % (project, run)


def model_prefix(project: str = PROJECT) -> str:
    """The path of the OpenAI-compatible endpoint of every model on the proxy."""
    return "/proxy/models/%s/" % project


def url(address: str, path: str, port: int = PROXY_PORT, scheme: str = "http") -> str:
    """``scheme://address:port`` + ``path`` (the port left out where it is the scheme's own);
    an IPv6 address in brackets."""
    host = "[%s]" % address if ":" in address and not address.startswith("[") else address
    default = {"http": 80, "https": 443}.get(scheme)
    netloc = host if port == default else "%s:%d" % (host, port)
    return "%s://%s%s" % (scheme, netloc, path)
