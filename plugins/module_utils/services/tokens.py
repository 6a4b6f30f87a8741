# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Users' service tokens: the Bearer a request to a service with ``auth`` carries.

Each controller user has one token, made on first use and kept in the controller's secrets
store (plugins/plugin_utils/secret_store.py, Ansible Vault) under ``store_name(user)``. The
token itself never leaves the controller but through ``gpufleet token`` (and
``gpufleet.api.token``); the fleet's hosts keep only its SHA-256 digest, in the user's entry
of the members document (``token_sha256``, tasks/hostside/memberside.py), and the proxy
compares the digest of the Bearer a request brings with those.

The store's names are letters, digits and ``_`` only (what ``${{ secrets.NAME }}`` can name),
and user names may hold ``-``: the name is ``gpufleet_token_`` and the user name with each
``-`` written ``_H``. User names have no capital letters, so two users never share a name.

    token = new_token()            # "gft_" and 43 URL-safe base64 characters (256 random bits)
    digest(token)                  # the lower-case hex SHA-256 the hosts keep
    token, old = obtain(store, "alice")           # made and stored on first use
    token, old = obtain(store, "alice", rotate=True)   # a new one; old is the one it replaces
    user_digest(store, "alice")    # the digest to publish (a service apply), made on first use
"""

from __future__ import annotations

import hashlib
import re
import secrets
from typing import Any, Optional, Tuple

from ..core.errors import GpufleetError
from ..teams.identity import check_user

PREFIX = "gft_"
TOKEN_BYTES = 32
TOKEN_RE = re.compile(r"gft_[A-Za-z0-9_-]{43}\Z")
DIGEST_RE = re.compile(r"[0-9a-f]{64}\Z")
STORE_PREFIX = "gpufleet_token_"


class TokenError(GpufleetError):
    """A token that cannot be used, or a store entry that is not a token (never quoted)."""


def new_token() -> str:
    """A new random token: ``gft_`` and 32 random bytes in URL-safe base64 (no padding)."""
    return PREFIX + secrets.token_urlsafe(TOKEN_BYTES)


def digest(token: str) -> str:
    """The lower-case hex SHA-256 of ``token`` (what the fleet's hosts keep)."""
    return hashlib.sha256(token.encode("utf-8")).hexdigest()


def is_token(text: Any) -> bool:
    """Whether ``text`` has a token's shape."""
    return isinstance(text, str) and TOKEN_RE.match(text) is not None


def check_token(text: Any, where: str = "the token") -> str:
    """``text`` when it has a token's shape, else TokenError (which does not quote it)."""
    if not is_token(text):
        raise TokenError("%s is not a gpufleet token (gft_ and 43 letters, digits, _ or -): "
                         "make a new one with gpufleet token --rotate" % where)
    return text


def is_digest(text: Any) -> bool:
    """Whether ``text`` is a lower-case hex SHA-256."""
    return isinstance(text, str) and DIGEST_RE.match(text) is not None


def store_name(user: str) -> str:
    """The secrets store's name for ``user``'s token (IdentityError for an invalid user)."""
    check_user(user)
    return STORE_PREFIX + user.replace("-", "_H")


def is_store_name(name: Any) -> bool:
    """Whether ``name`` is one of the store's token names (those ``gpufleet secret`` leaves
    to ``gpufleet token``)."""
    return isinstance(name, str) and name.startswith(STORE_PREFIX)


def obtain(store: Any, user: str, rotate: bool = False) -> Tuple[str, Optional[str]]:
    """``(token, replaced)``: ``user``'s token from ``store``, made and written there when it
    has none (or with ``rotate``, always; ``replaced`` is then the old one, else None).

    ``store`` is a secret_store.SecretStore (or anything with its ``read()``, ``write(values)``
    and ``locked()``): the read, the change and the write happen under the store's lock, so two
    commands at once agree on one token."""
    name = store_name(user)
    with store.locked():
        values = store.read()
        held = values.get(name)
        if held is not None and not rotate:
            return check_token(held, "the store's entry %s" % name), None
        token = new_token()
        values[name] = token
        store.write(values)
    return token, held if is_token(held) else None


def user_digest(store: Any, user: str) -> str:
    """The digest of ``user``'s token in ``store``, the token made there on first use: what a
    service apply publishes on its fleet (tasks.membership.publish_token) without the token
    itself leaving this function."""
    return digest(obtain(store, user)[0])
