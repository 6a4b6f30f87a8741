# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Which fleets this controller may reach, told without SSH.

Many controllers (many state dirs, many people) see the same fleets: every local fleet on a
shared Docker engine, every tagged instance in a shared cloud account. Each fleet record gets
``access``, one of

- ``key``: the state dir holds the fleet's key (the controller made it, or took its key);
- ``member``: the fleet publishes this controller's key fingerprint among its members (a
  backend fleet: ``publish`` below, after a grant), or it is an SSH fleet whose file's identity
  file is here (an SSH fleet's file is always this controller's: one whose identity file is
  missing is ``key missing``, named by every command rather than hidden). A member backend fleet's instances are reached with this controller's own
  identity (teams.identity: ``$GPUFLEET_IDENTITY``) as the fleet's login user;
- ``key missing``: the fleet was made by this controller (its state dir) or, where the
  instances do not say the state dir, by this user, but its key is gone: issue 32's "cannot be
  checked" error, so ``ps`` names it and ``delete`` refuses;
- ``no access``: none of these. Such a fleet is never tried over SSH by any command;
  ``gpufleet fleet`` lists it once, marked ``no access``, and nothing else depends on it.

A controller whose identity has no public key beside it (``<identity>.pub``) reaches only the
fleets it holds keys for. Members are published where the backend keeps metadata that can
change: EC2 tags and Compute Engine labels on every instance of the fleet (copied to instances
made later), a labelled Docker volume per member for a local fleet
(backends/local_members.py).

    records = annotate(records, root, docker)      # each record's "access" set
    reachable(record)                              # False for "no access"
    publish(record, "bob", "SHA256:...", docker, root, settings)   # after a grant
    publish(record, "bob", None, docker, root, settings)           # after a revoke
"""

from __future__ import annotations

import os
from typing import Any, Callable

from ..backends import base
from ..backends.docker_cli import Docker, DockerError
from ..backends.errors import BackendError
from ..core.errors import GpufleetError
from ..core.text import shorten
from ..offers import catalog
from ..teams import identity as identities
from . import cloud, state

KEY = "key"
MEMBER = "member"
KEY_MISSING = "key missing"
NO_ACCESS = "no access"
ACCESS = (KEY, MEMBER, KEY_MISSING, NO_ACCESS)


class AccessError(GpufleetError):
    """A member could not be published to the fleet's backend; the message says why."""


def me() -> identities.Identity | None:
    """This controller's identity, or None when it has none that can be used."""
    try:
        return identities.current()
    except identities.IdentityError:
        return None


def _backend_of(record):
    for instance in record.get("instances") or []:
        if instance.get("backend"):
            return "ssh" if instance["backend"] == "remote" else instance["backend"]
    if record.get("fleet_type") == "ssh":
        return "ssh"
    backends = record.get("backends") or []
    return backends[0] if len(backends) == 1 else None


def _made_here(record, root, user):
    """Whether this controller (its state dir; else, where the instances do not say it, its
    user; else, for instances that say neither, as before) made the fleet."""
    instances = record.get("instances") or []
    places = set(i["made_from"] for i in instances if i.get("made_from"))
    if places:
        return os.path.abspath(root) in set(os.path.abspath(p) for p in places)
    creators = set(i["creator"] for i in instances if i.get("creator"))
    if creators:
        return user is not None and user in creators
    return True


def _members(record, local_members):
    """``{user: mark}`` the fleet publishes: its instances' tags or labels, or (local) the
    engine's member volumes (``local_members()``, asked once per listing)."""
    if _backend_of(record) == "local":
        return local_members().get(record.get("name"), {})
    found = {}
    for instance in record.get("instances") or []:
        found.update(instance.get("members") or {})
    return found


def _mark(backend, fingerprint):
    """What the backend keeps for ``fingerprint`` (interface.Backend.member_mark)."""
    if backend not in base.BACKENDS:
        return fingerprint
    return base.BACKENDS[backend].member_mark(fingerprint)


def classify(record: dict[str, Any], root: str, who: identities.Identity | None,
             local_members: Callable[[], dict[str, dict[str, str]]]) -> str:
    """The ``access`` of one fleet record (see the module's docstring)."""
    backend = _backend_of(record)
    if backend == "ssh":
        keys = [i.get("identity_file") for i in record.get("instances") or []
                if i.get("identity_file")]
        # The file is this controller's (given, or remembered when it was applied here): a
        # key it names that is not here is named by every command (issue 32), not hidden.
        return MEMBER if all(os.path.isfile(k) for k in keys) else KEY_MISSING
    if os.path.isfile(state.key_path(root, record["name"])):
        return KEY
    if who is not None and who.public_key is not None and backend is not None:
        marks = set(_members(record, local_members).values())
        if _mark(backend, who.public_key.fingerprint) in marks:
            return MEMBER
    return KEY_MISSING if _made_here(record, root, who.user if who else None) else NO_ACCESS


def annotate(records: list[dict[str, Any]], root: str | None = None,
             docker: Docker | None = None, who: identities.Identity | None = None
             ) -> list[dict[str, Any]]:
    """The fleet records, each with ``access`` set (in place, and returned). A member fleet's
    instances get ``identity_file`` = this controller's identity. The engine is asked for the
    local fleets' members once, and only when a local fleet's key is not here."""
    root = state.state_dir(root)
    who = me() if who is None else who
    cache: dict[str, Any] = {}

    def local_members():
        if "members" not in cache:
            cache["members"] = {}
            if docker is not None:
                try:
                    cache["members"] = base.client("local", docker=docker).all_members()
                except DockerError:
                    pass
        return cache["members"]

    for record in records:
        access = classify(record, root, who, local_members)
        record["access"] = access
        if access == MEMBER and who is not None and _backend_of(record) != "ssh":
            for instance in record.get("instances") or []:
                instance["identity_file"] = who.identity_file
    return records


def reachable(record: dict[str, Any]) -> bool:
    """Whether a command may try the fleet's hosts over SSH (anything but ``no access``)."""
    return record.get("access") != NO_ACCESS


def listed(records: list[dict[str, Any]],
           refresh: Callable[[list[dict[str, Any]]], list[dict[str, Any]]] | None = None
           ) -> list[dict[str, Any]]:
    """The records as ``gpufleet fleet`` lists them: ``refresh`` (the hosts asked) applied to
    the reachable ones only, a ``no access`` fleet kept once with that status, in order."""
    ours = [r for r in records if reachable(r)]
    fresh = iter(refresh(ours) if refresh is not None and ours else ours)
    result = []
    for record in records:
        if reachable(record):
            result.append(next(fresh))
        else:
            result.append(dict(record, status=NO_ACCESS))
    return result


def publish(record: dict[str, Any], user: str, fingerprint: str | None,
            docker: Docker | None = None, root: str | None = None,
            settings: dict[str, Any] | None = None) -> bool:
    """Publish ``user``'s key ``fingerprint`` (``SHA256:...``) as a member of the fleet of
    ``record`` (a fleet record, or a config as fleets.lookup.find gives it), or withdraw it
    (``fingerprint`` None), where the backend keeps it: EC2 tags and Compute Engine labels on
    every instance, a member volume on the Docker engine for a local fleet. An SSH fleet has
    nothing to publish (its file is the way in). Returns whether anything changed;
    AccessError says what failed."""
    identities.check_user(user)
    name = record.get("name")
    if not name:
        raise AccessError("cannot publish member %s: the fleet has no name" % shorten(user))
    backend = _backend_of(record)
    if backend in (None, "ssh"):
        return False
    root = state.state_dir(root)
    try:
        if backend == "local":
            client = base.client("local", docker=docker or Docker())
            return client.set_member(name, [], user, fingerprint)
        settings = state.backend_settings(root) if settings is None else settings
        client = base.client(backend, settings)
        placed = client.fleet_instances(name, cloud.regions({}, settings, backend,
                                                            catalog.directory(root)))
        mark = client.member_mark(fingerprint) if fingerprint else None
        return client.set_member(name, placed, user, mark)
    except (BackendError, DockerError, state.StateError) as exc:
        raise AccessError("cannot publish member %s of fleet %s to the %s backend: %s"
                          % (shorten(user), name, backend, exc)) from exc
