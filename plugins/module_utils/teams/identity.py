# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Who this controller is: a user name and an SSH key.

``GPUFLEET_USER`` names the user (default: the login name) and ``GPUFLEET_IDENTITY`` the private
key (default ``~/.ssh/id_ed25519``, else ``~/.ssh/id_rsa``). The public key beside it
(``<identity>.pub``) is what a fleet admin grants, and its fingerprint (OpenSSH's
``SHA256:...``) is what the backends' labels and tags carry for each member.

With no key file at all and an SSH agent running (``$SSH_AUTH_SOCK``: an AWX job's Machine
credential is loaded into one), the identity is the agent's first key: ``identity_file`` is then
None, and SSH is left to the agent (no ``-i``, no ``IdentitiesOnly``). ``GPUFLEET_IDENTITY=agent``
asks for the agent even where key files exist.

    me = current()                 # Identity(user, identity_file, public_key, fingerprint)
    key = parse_public_key(text)   # PublicKey, or IdentityError naming what is wrong
"""

from __future__ import annotations

import base64
import binascii
import getpass
import hashlib
import os
import re
import struct
import subprocess
from typing import Mapping, NamedTuple, Optional

from ..core.errors import GpufleetError
from ..core.text import shorten

USER_ENV = "GPUFLEET_USER"
IDENTITY_ENV = "GPUFLEET_IDENTITY"
DEFAULT_IDENTITIES = ("~/.ssh/id_ed25519", "~/.ssh/id_rsa")

# A user name as POSIX login names go (and short enough for a GCP label key with a prefix).
AGENT = "agent"
USER_NAME = re.compile(r"[a-z_][a-z0-9_-]{0,31}\Z")
KEY_TYPES = ("ssh-ed25519", "ssh-rsa", "ecdsa-sha2-nistp256", "ecdsa-sha2-nistp384",
             "ecdsa-sha2-nistp521", "sk-ssh-ed25519@openssh.com",
             "sk-ecdsa-sha2-nistp256@openssh.com")


class IdentityError(GpufleetError):
    """A user name or key that cannot be used; the message says what to do."""


class PublicKey(NamedTuple):
    """An OpenSSH public key: its type, its base64 blob and its SHA256 fingerprint."""

    kind: str
    blob: str
    fingerprint: str

    def line(self, comment: str = "") -> str:
        """The key as an authorized_keys line (``type blob [comment]``)."""
        return ("%s %s %s" % (self.kind, self.blob, comment)).strip()


class Identity(NamedTuple):
    """This controller's user name, private key path (None: the SSH agent's key) and public key
    (None when unreadable)."""

    user: str
    identity_file: Optional[str]
    public_key: Optional[PublicKey]

    def describe(self) -> str:
        """Where the key is, for people: its file, or the SSH agent."""
        return self.identity_file or "the SSH agent ($SSH_AUTH_SOCK)"


def check_user(name: str, what: str = "user name") -> str:
    """``name`` if it is a valid user name, else IdentityError."""
    if not isinstance(name, str) or not USER_NAME.match(name):
        raise IdentityError(
            "%s %s is not valid: use 1 to 32 lowercase letters, digits, '_' or '-', starting "
            "with a letter or '_' (as a login name)" % (what, shorten(repr(name))))
    return name


def user_name(environ: Optional[Mapping[str, str]] = None) -> str:
    """``$GPUFLEET_USER``, else the login name; IdentityError when it is not a valid name."""
    environ = os.environ if environ is None else environ
    name = environ.get(USER_ENV)
    if name:
        return check_user(name, "$%s" % USER_ENV)
    try:
        login = getpass.getuser()
    except (KeyError, OSError) as exc:
        raise IdentityError("cannot tell who you are: set $%s to your user name" % USER_ENV) from exc
    login = login.lower()
    if not USER_NAME.match(login):
        raise IdentityError("the login name %s is not a valid gpufleet user name: set $%s to one "
                            "(1 to 32 lowercase letters, digits, '_' or '-')"
                            % (shorten(repr(login)), USER_ENV))
    return login


def identity_file(environ: Optional[Mapping[str, str]] = None) -> str:
    """``$GPUFLEET_IDENTITY``, else the first of ``~/.ssh/id_ed25519`` and ``~/.ssh/id_rsa``
    that exists, else ``~/.ssh/id_ed25519`` (which does not exist yet)."""
    environ = os.environ if environ is None else environ
    home = environ.get("HOME")
    given = environ.get(IDENTITY_ENV)
    if given:
        if home and (given == "~" or given.startswith("~/")):
            return os.path.abspath(home + given[1:])
        return os.path.abspath(os.path.expanduser(given))
    candidates = [os.path.join(home, p[2:]) if home else os.path.expanduser(p)
                  for p in DEFAULT_IDENTITIES]
    for path in candidates:
        if os.path.isfile(path):
            return path
    return candidates[0]


def fingerprint(blob: bytes) -> str:
    """OpenSSH's SHA256 fingerprint of a key blob (``ssh-keygen -lf`` prints the same)."""
    digest = hashlib.sha256(blob).digest()
    return "SHA256:" + base64.b64encode(digest).decode("ascii").rstrip("=")


def parse_public_key(text: str, source: str = "the key") -> PublicKey:
    """The first key of ``text`` (an OpenSSH public key line, as in a ``.pub`` file). Options
    before the type (authorized_keys style) are not accepted: a member's key is a plain key.
    IdentityError names ``source`` and what is wrong."""
    lines = [ln.strip() for ln in (text or "").splitlines()
             if ln.strip() and not ln.strip().startswith("#")]
    if not lines:
        raise IdentityError("%s is empty: give an OpenSSH public key file (such as "
                            "~/.ssh/id_ed25519.pub)" % source)
    if "PRIVATE KEY" in lines[0]:
        raise IdentityError("%s is a private key: give the public key (the .pub file beside it)"
                            % source)
    fields = lines[0].split()
    if len(fields) < 2 or fields[0] not in KEY_TYPES:
        raise IdentityError("%s is not an OpenSSH public key (it should start with one of %s): "
                            "give a .pub file such as ~/.ssh/id_ed25519.pub"
                            % (source, ", ".join(KEY_TYPES[:3])))
    try:
        blob = base64.b64decode(fields[1].encode("ascii"), validate=True)
        (size,) = struct.unpack(">I", blob[:4])
        inner = blob[4:4 + size].decode("ascii")
    except (binascii.Error, struct.error, UnicodeError, ValueError) as exc:
        raise IdentityError("%s is not an OpenSSH public key: its key data does not decode"
                            % source) from exc
    if inner != fields[0]:
        raise IdentityError("%s is not an OpenSSH public key: it says %s but its data is %s"
                            % (source, fields[0], shorten(inner)))
    return PublicKey(fields[0], fields[1], fingerprint(blob))


def read_public_key(path: str) -> PublicKey:
    """The public key in the file ``path``; IdentityError when it is missing or not a key."""
    try:
        with open(os.path.expanduser(path), "r", encoding="utf-8", errors="replace") as handle:
            text = handle.read(65536)
    except OSError as exc:
        raise IdentityError("cannot read the key file %s: %s" % (path, exc.strerror or exc)) from exc
    return parse_public_key(text, "the key file %s" % path)


def agent_public_key(environ: Optional[Mapping[str, str]] = None) -> Optional[PublicKey]:
    """The first key the SSH agent of ``$SSH_AUTH_SOCK`` holds (``ssh-add -L``), or None."""
    environ = os.environ if environ is None else environ
    if not environ.get("SSH_AUTH_SOCK"):
        return None
    try:
        done = subprocess.run(["ssh-add", "-L"], capture_output=True, text=True, timeout=10,
                              check=False, env=dict(os.environ, SSH_AUTH_SOCK=environ["SSH_AUTH_SOCK"]))
    except (OSError, subprocess.TimeoutExpired):
        return None
    if done.returncode != 0:
        return None
    for line in done.stdout.splitlines():
        try:
            return parse_public_key(line, "the SSH agent's key")
        except IdentityError:
            continue
    return None


def current(environ: Optional[Mapping[str, str]] = None) -> Identity:
    """This controller's identity; its public key is read from ``<identity>.pub`` (None when
    that file is missing or not a key: the controller then reaches only the fleets whose keys
    its state dir holds). With no key file and an SSH agent, the agent's first key."""
    environ = os.environ if environ is None else environ
    user = user_name(environ)
    wanted = environ.get(IDENTITY_ENV)
    path = identity_file(environ)
    if wanted == AGENT or (not wanted and not os.path.isfile(path)
                           and environ.get("SSH_AUTH_SOCK")):
        return Identity(user, None, agent_public_key(environ))
    try:
        key = read_public_key(path + ".pub")
    except IdentityError:
        key = None
    return Identity(user, path, key)
