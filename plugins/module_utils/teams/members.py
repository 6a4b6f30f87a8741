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

``"*"`` holds the default limits; a user's own entry replaces the default field by field
(a field that is null or absent there falls back to the default's). A limit of null is no limit.
"""

from __future__ import annotations

from typing import Any, Dict, Mapping, Optional

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
