# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""A local node that must reach nodes on other networks: a gateway's host (spec/gateway.py) in
front of services on other local fleets, or the in-fleet proxy's node in front of replicas on
the other nodes of its fleet (without ``placement: cluster``, each node has its own network).

Each local fleet has its own networks (local.network_name), and Docker keeps its networks
apart, so the proxy's container joins the networks of the nodes it sends requests to, as one
more network beside its own; it then reaches each node at the node's own address there (the
address fleet records give). Joining is idempotent and leaves the container running.
"""

from __future__ import annotations

import json
from typing import Any, Iterable, Mapping

from .docker_cli import Docker
from .local import network_name


def networks_of(instances: Iterable[Mapping[str, Any]]) -> list[str]:
    """The networks of the local nodes among ``instances`` (instance records)."""
    return sorted(set(network_name(str(i["fleet"]), int(i["num"]), str(i.get("placement") or "any"))
                      for i in instances if i.get("backend") == "local"))


def join(docker: Docker, container: str, networks: Iterable[str]) -> list[str]:
    """Connect ``container`` to each of ``networks`` it is not on yet: the networks joined
    (DockerError when the engine refuses, naming the network)."""
    held = json.loads(docker.run("container", "inspect", "--format",
                                 "{{json .NetworkSettings.Networks}}", container) or "{}") or {}
    joined = []
    for network in networks:
        if network in held:
            continue
        docker.run("network", "connect", network, container)
        joined.append(network)
    return joined
