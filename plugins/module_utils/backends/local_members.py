# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""A local fleet's published members: who may reach it with their own key.

A cloud backend keeps them where the instances' other metadata is (EC2 tags, Compute Engine
labels), which can change after the instance is made. A local node's container labels cannot:
Docker fixes them when the container is created. So each member of a local fleet is one small
Docker volume on the engine that holds nothing; its labels say the fleet
(``gpufleet.fleet``, so that deleting the fleet removes it with the nodes' volumes), the member
(``gpufleet.member``) and the fingerprint of the member's public key (``gpufleet.fingerprint``).
One ``docker volume ls`` lists the members of every local fleet. The volume is a public note,
not a permission: the hosts' own authorized_keys decide who logs in; the note only spares a
controller from trying a fleet over SSH that it cannot enter.
"""

from __future__ import annotations

from .docker_cli import Docker

FLEET_LABEL = "gpufleet.fleet"
MEMBER_LABEL = "gpufleet.member"
FINGERPRINT_LABEL = "gpufleet.fingerprint"


def member_volume(fleet: str, user: str) -> str:
    """The Docker volume that publishes ``user`` as a member of the local fleet ``fleet``."""
    return "gpufleet-%s-member-%s" % (fleet, user)


def list_members(docker: Docker) -> dict[str, dict[str, str]]:
    """``{fleet: {user: fingerprint}}`` of every local fleet's published members, in one
    ``docker volume ls``."""
    form = "\t".join('{{.Label "%s"}}' % label
                     for label in (FLEET_LABEL, MEMBER_LABEL, FINGERPRINT_LABEL))
    found: dict[str, dict[str, str]] = {}
    text = docker.run("volume", "ls", "--filter", "label=" + MEMBER_LABEL, "--format", form)
    for line in (text or "").splitlines():
        fields = [f.strip() for f in line.split("\t")]
        if len(fields) == 3 and all(fields):
            found.setdefault(fields[0], {})[fields[1]] = fields[2]
    return found


def set_member(docker: Docker, fleet: str, user: str, fingerprint: str | None) -> bool:
    """Publish (``fingerprint`` given) or withdraw (None) ``user`` as a member of ``fleet``.
    Returns whether anything changed."""
    name = member_volume(fleet, user)
    current = list_members(docker).get(fleet, {}).get(user)
    if current == fingerprint:
        return False
    if current is not None:
        docker.run("volume", "rm", "-f", name, check=False)
    if fingerprint:
        docker.run("volume", "create", "--label", "%s=%s" % (FLEET_LABEL, fleet),
                   "--label", "%s=%s" % (MEMBER_LABEL, user),
                   "--label", "%s=%s" % (FINGERPRINT_LABEL, fingerprint), name)
    return True
