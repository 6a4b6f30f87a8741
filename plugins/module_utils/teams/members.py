# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""A fleet's membership as the controller reads it: the members document its hosts keep.

The document (``/var/lib/gpufleet/team/members.json`` on every host of the fleet, written by
tasks/hostside/memberside.py under the host's lock)::

    {"fleet": "my-fleet",
     "members": {"alice": {"role": "admin", "key": "ssh-ed25519 AAAA...",
                           "fingerprint": "SHA256:...", "by": "alice", "stamp": [t, "id"]}},
     "revoked": {"bob": {"by": "alice", "stamp": [t, "id"]}},
     "limits": {"*": {"runs": 2, "gpus": null, "nodes": null, "by": ..., "stamp": [...]},
                "carol": {"runs": 1, ...}}}

A member's entry may also hold ``"token_sha256"`` (the lower-case hex SHA-256 of their service
token, services.tokens, the Bearer the fleet's proxy accepts from them) and its own
``"token_stamp"``: only the member publishes it (tasks.membership.publish_token).

``"*"`` holds the default limits; a user's own entry replaces the default field by field
(a field that is null or absent there falls back to the default's). A limit of null is no limit.
"""

from __future__ import annotations

import datetime
import time
from typing import Any, Dict, List, Mapping, Optional

from ..core.errors import GpufleetError
from ..core.text import shorten
from .identity import IdentityError, PublicKey, check_user, read_public_key

ADMIN = "admin"
MEMBER = "member"
ROLES = (ADMIN, MEMBER)
DEFAULT = "*"
LIMIT_FIELDS = ("runs", "gpus", "nodes")

MembersDoc = Dict[str, Any]


def role_of(doc: Optional[Mapping[str, Any]], user: str) -> Optional[str]:
    """``"admin"``, ``"member"`` or None (not a member, or revoked)."""
    entry = ((doc or {}).get("members") or {}).get(user)
    if entry is None:
        return None
    role = entry.get("role")
    return role if role in ROLES else MEMBER


def is_admin(doc: Optional[Mapping[str, Any]], user: str) -> bool:
    return role_of(doc, user) == ADMIN


def limits_for(doc: Optional[Mapping[str, Any]], user: str) -> Dict[str, Optional[int]]:
    """``{"runs", "gpus", "nodes"}`` that hold for ``user``: their own, else the default's,
    else None (no limit)."""
    limits = (doc or {}).get("limits") or {}
    default = limits.get(DEFAULT) or {}
    own = limits.get(user) or {}
    result: Dict[str, Optional[int]] = {}
    for name in LIMIT_FIELDS:
        value = own.get(name)
        if value is None:
            value = default.get(name)
        result[name] = value
    return result


# ---- changes, checked on the controller before any host is written ------------------------
# The hosts (tasks/hostside/memberside.py) refuse a change whose author is not an admin of the
# document they hold, and keep the newest change of each entry: that is the real guard. The
# checks here read the document first and say what is wrong in one line, before anything is
# written anywhere.

Stamp = List[Any]


class MembersError(GpufleetError):
    """A grant, revoke or limit that cannot be made; the message says what to do."""


def stamp(controller: str, now: Optional[float] = None) -> Stamp:
    """A change's stamp: ``[epoch seconds, controller id]`` (the id breaks ties)."""
    return [time.time() if now is None else float(now), controller]


def _fleet(doc: Optional[Mapping[str, Any]], fleet: str) -> str:
    return (doc or {}).get("fleet") or fleet


def _when(entry: Mapping[str, Any]) -> str:
    value = (entry.get("stamp") or [None])[0]
    if not isinstance(value, (int, float)):
        return "at an unknown time"
    moment = datetime.datetime.fromtimestamp(value, datetime.timezone.utc)
    return "on %s" % moment.strftime("%Y-%m-%d %H:%M:%S UTC")


def check_admin(doc: Optional[Mapping[str, Any]], fleet: str, by: str) -> None:
    """MembersError unless ``by`` is an admin of the fleet."""
    if not is_admin(doc, by):
        admins = sorted(u for u, e in ((doc or {}).get("members") or {}).items()
                        if e.get("role") == ADMIN)
        raise MembersError(
            "%s is not an admin of fleet %s: only its admins (%s) grant, revoke and set limits; "
            "ask one of them" % (by, _fleet(doc, fleet), ", ".join(admins) or "none"))


def check_member(doc: Optional[Mapping[str, Any]], fleet: str, user: str) -> None:
    """MembersError unless ``user`` is a member of the fleet: a revoked member's says who
    revoked them and when."""
    if role_of(doc, user) is not None:
        return
    revoked = ((doc or {}).get("revoked") or {}).get(user)
    if revoked:
        raise MembersError(
            "%s is no longer a member of fleet %s: %s revoked them %s (grant them again with "
            "gpufleet fleet grant %s --user %s --key KEY_FILE)"
            % (user, _fleet(doc, fleet), revoked.get("by") or "an admin", _when(revoked),
               _fleet(doc, fleet), user))
    raise MembersError("%s is not a member of fleet %s (gpufleet fleet members %s lists them)"
                       % (shorten(user), _fleet(doc, fleet), _fleet(doc, fleet)))


def grant(doc: Optional[Mapping[str, Any]], fleet: str, by: str, user: str, key: PublicKey,
          admin: bool, when: Stamp) -> Dict[str, Any]:
    """The change that grants ``user`` (with ``key``) the fleet, as member or admin."""
    check_user(user)
    check_admin(doc, fleet, by)
    return {"kind": "grant", "user": user, "role": ADMIN if admin else MEMBER,
            "key": key.line(), "fingerprint": key.fingerprint, "by": by, "stamp": when}


def read_key(path: str) -> PublicKey:
    """The key a grant gives, from its file; MembersError naming what is wrong."""
    try:
        return read_public_key(path)
    except IdentityError as exc:
        raise MembersError(str(exc)) from exc


def revoke(doc: Optional[Mapping[str, Any]], fleet: str, by: str, user: str,
           when: Stamp) -> Dict[str, Any]:
    """The change that takes ``user`` out of the fleet. The last admin is not taken out (no
    one could grant or revoke after)."""
    check_user(user)
    check_admin(doc, fleet, by)
    check_member(doc, fleet, user)
    admins = [u for u, e in ((doc or {}).get("members") or {}).items() if e.get("role") == ADMIN]
    if admins == [user]:
        raise MembersError("%s is the only admin of fleet %s: grant another admin first "
                           "(gpufleet fleet grant %s --user NAME --key KEY_FILE --admin)"
                           % (user, _fleet(doc, fleet), _fleet(doc, fleet)))
    return {"kind": "revoke", "user": user, "by": by, "stamp": when}


def limit(doc: Optional[Mapping[str, Any]], fleet: str, by: str, user: str,
          values: Mapping[str, Optional[int]], when: Stamp) -> Dict[str, Any]:
    """The change that sets ``user``'s limits (``DEFAULT`` for everyone's default): the
    fields given in ``values`` replace those held, the others stay."""
    check_admin(doc, fleet, by)
    if user != DEFAULT:
        check_user(user)
        check_member(doc, fleet, user)
    given = {k: v for k, v in values.items() if k in LIMIT_FIELDS and v is not None}
    if not given:
        raise MembersError("give at least one limit: --runs N, --gpus N or --nodes N")
    for name, value in sorted(given.items()):
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise MembersError("--%s %s is not a limit: give a count of 0 or more"
                               % (name, shorten(str(value))))
    held = ((doc or {}).get("limits") or {}).get(user) or {}
    change: Dict[str, Any] = {"kind": "limit", "user": user, "by": by, "stamp": when}
    for name in LIMIT_FIELDS:
        change[name] = given.get(name, held.get(name))
    return change


def table_rows(doc: Optional[Mapping[str, Any]]) -> List[Dict[str, Any]]:
    """One row per member, admins first: ``{user, role, fingerprint, limits, by}``, and the
    default limits as the row of ``"*"`` when set."""
    rows = []
    members = (doc or {}).get("members") or {}
    for user in sorted(members, key=lambda u: (role_of(doc, u) != ADMIN, u)):
        entry = members[user]
        rows.append({"user": user, "role": role_of(doc, user),
                     "fingerprint": entry.get("fingerprint"), "limits": limits_for(doc, user),
                     "by": entry.get("by")})
    return rows
