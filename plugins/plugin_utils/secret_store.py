# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The controller's secrets: ``<state dir>/secrets.yml``, a mapping of names to values kept
encrypted with Ansible Vault (what ``dstack secret`` keeps on its server).

The ``gpufleet secret`` commands read and write it with the vault password Ansible finds
(``--vault-password-file``, else ANSIBLE_VAULT_PASSWORD_FILE or ansible.cfg's
``vault_password_file``); the task action plugin reads it with the play's vault secrets (its
loader), so AWX Vault credentials work too. Encryption is Ansible's own (VaultLib).

It also keeps each controller user's service token (services.tokens, ``gpufleet token``), under
a name of its own (``gpufleet_token_<user>``) that is never given to a task.

A change is read-modify-write under an fcntl lock on ``secrets.yml.lock`` beside the file, and the
new file replaces the old one atomically (mode 0600). No function here puts a value into an
error message.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import re
import threading

import yaml
from ansible import constants as C
from ansible.errors import AnsibleError
from ansible.module_utils.common.text.converters import to_bytes, to_text
from ansible.parsing.dataloader import DataLoader
from ansible.parsing.vault import VaultLib, get_file_vault_secret, is_encrypted

from ansible_collections.gpufleet.cluster.plugins.module_utils.core.errors import GpufleetError
from ansible_collections.gpufleet.cluster.plugins.module_utils.core.text import quote, shorten
from ansible_collections.gpufleet.cluster.plugins.module_utils.core.files import (
    write_atomically,
)
from ansible_collections.gpufleet.cluster.plugins.module_utils.fleets import state
from ansible_collections.gpufleet.cluster.plugins.module_utils.services import tokens

FILE_NAME = "secrets.yml"
MODE = 0o600
PASSWORD_ENV = "ANSIBLE_VAULT_PASSWORD_FILE"
# dstack's env-name rule, which ${{ secrets.NAME }} can reference: letters, digits and _, not
# starting with a digit; dstack's 200-character limit on secret names.
NAME_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,199}\Z")
HOW_TO_GIVE = ("--vault-password-file FILE, or the ANSIBLE_VAULT_PASSWORD_FILE environment "
               "variable, or vault_password_file in ansible.cfg")

# fcntl locks exclude other processes; this excludes other threads of this one.
_THREAD_LOCK = threading.Lock()


class SecretStoreError(GpufleetError):
    """The store cannot be read or written; the message says why (never a value)."""


class NoVaultPassword(SecretStoreError):
    """No vault password was given."""


class WrongVaultPassword(SecretStoreError):
    """The vault password does not decrypt the store."""


def store_path(root=None):
    """``<state dir>/secrets.yml`` (the state dir: ``root``, else $GPUFLEET_STATE_DIR, else
    the default)."""
    return os.path.join(state.state_dir(root), FILE_NAME)


def lock_path(path):
    return path + ".lock"


def check_name(name):
    if not isinstance(name, str) or not NAME_RE.match(name):
        raise SecretStoreError(
            "invalid secret name %s: use letters, digits and _, do not start with a digit "
            "(at most 200 characters)" % quote(str(name)))
    return name


# ---------------------------------------------------------------------------------------------
# The vault password, outside a play


def password_file(explicit=None, environ=None):
    """The vault password file: ``explicit``, else $ANSIBLE_VAULT_PASSWORD_FILE, else
    ansible.cfg's ``vault_password_file``; None when there is none."""
    environ = os.environ if environ is None else environ
    found = explicit or environ.get(PASSWORD_ENV) or C.DEFAULT_VAULT_PASSWORD_FILE
    if not found:
        return None
    return os.path.abspath(os.path.expanduser(str(found)))


def vault_secrets(explicit=None, environ=None):
    """``[(vault_id, VaultSecret)]`` from the password file (a script is run, as Ansible does)."""
    path = password_file(explicit, environ)
    if path is None:
        raise NoVaultPassword("no vault password for the secrets store: give one with "
                              + HOW_TO_GIVE)
    try:
        secret = get_file_vault_secret(filename=path, vault_id=C.DEFAULT_VAULT_IDENTITY,
                                       loader=DataLoader())
        secret.load()
    except AnsibleError as exc:
        raise NoVaultPassword("cannot read the vault password: %s; give one with %s"
                              % (_ansible_message(exc), HOW_TO_GIVE)) from exc
    return [(C.DEFAULT_VAULT_IDENTITY, secret)]


def _ansible_message(exc):
    text = getattr(exc, "message", None) or str(exc)
    return to_text(text).strip().splitlines()[0].rstrip(".") if text else type(exc).__name__


# ---------------------------------------------------------------------------------------------
# Reading and parsing


def _read_bytes(path):
    """The file's bytes, or None when there is no file."""
    try:
        with open(path, "rb") as handle:
            return handle.read()
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise SecretStoreError("cannot read %s: %s" % (path, exc.strerror)) from exc


def _check_encrypted(data, path):
    if not is_encrypted(data):
        raise SecretStoreError(
            "%s is not encrypted with Ansible Vault: encrypt it (ansible-vault encrypt %s) or "
            "remove it" % (path, path))


def _vault_error(exc, path, where=HOW_TO_GIVE):
    """A SecretStoreError for a failed decryption: no password, or the wrong one."""
    text = _ansible_message(exc).lower()
    if "must be specified" in text or "no vault secrets found" in text:
        return NoVaultPassword("no vault password to decrypt %s: give one with %s"
                               % (path, where))
    return WrongVaultPassword(
        "cannot decrypt %s: wrong vault password (not the one it was encrypted with); give "
        "the right one with %s" % (path, where))


def parse(text, path):
    """The ``{name: value}`` mapping of the decrypted text (values as text)."""
    if not text.strip():
        return {}
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        # The YAML error (and so a cause) would quote the decrypted text: say where only.
        mark = getattr(exc, "problem_mark", None)
        where = " (line %d)" % (mark.line + 1) if mark is not None else ""
        raise SecretStoreError("%s is not valid YAML%s" % (path, where)) from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise SecretStoreError("%s: expected a mapping of secret names to values" % path)
    out = {}
    for name, value in data.items():
        if not isinstance(name, str) or not NAME_RE.match(name):
            raise SecretStoreError("%s: %s is not a valid secret name" % (path, quote(str(name))))
        if value is None or isinstance(value, (dict, list)):
            raise SecretStoreError("%s: the secret %s must be text" % (path, name))
        out[name] = value if isinstance(value, str) else str(value)
    return out


def read_with_loader(path, loader):
    """The store's mapping decrypted with an Ansible loader's vault secrets (in a play: those
    ansible-playbook set up from --vault-password-file, ANSIBLE_VAULT_PASSWORD_FILE,
    ansible.cfg or an AWX Vault credential). ``{}`` when there is no store."""
    data = _read_bytes(path)
    if data is None:
        return {}
    _check_encrypted(data, path)
    try:
        reader = getattr(loader, "get_text_file_contents", None)
        if reader is not None:
            text = reader(path)
        else:  # ansible-core before 2.19
            text = to_text(loader._get_file_contents(path)[0])
    except AnsibleError as exc:
        raise _vault_error(exc, path, HOW_TO_GIVE + " (in AWX: a Vault credential on the job "
                           "template), or pass the secrets in gpufleet_secrets") from exc
    # yaml makes plain str values: nothing of Ansible's data tagging travels with them.
    return parse(str(text), path)


class SecretStore(object):
    """The store at ``path``, encrypted and decrypted with ``secrets`` (``vault_secrets()``)."""

    def __init__(self, path, secrets):
        if not secrets:
            raise NoVaultPassword("no vault password for the secrets store: give one with "
                                  + HOW_TO_GIVE)
        self.path = path
        self._secret_id, self._secret = secrets[0]
        self._vault = VaultLib(list(secrets))

    @classmethod
    def open(cls, root=None, password_file_=None, environ=None):
        """The store in the state dir, with the vault password Ansible would use."""
        return cls(store_path(root), vault_secrets(password_file_, environ))

    @classmethod
    def with_loader(cls, path, loader):
        """The store at ``path`` with an Ansible loader's vault secrets (in a play: those
        ansible-playbook or AWX set up), to write as well as read it (a user's service token
        made on first use, services.tokens). NoVaultPassword when the play has none."""
        secrets = getattr(getattr(loader, "_vault", None), "secrets", None)
        return cls(path, list(secrets or []))

    def read(self):
        """``{name: value}``; ``{}`` when there is no store yet."""
        data = _read_bytes(self.path)
        if data is None:
            return {}
        _check_encrypted(data, self.path)
        try:
            plain = self._vault.decrypt(data)
        except AnsibleError as exc:
            raise _vault_error(exc, self.path) from exc
        return parse(to_text(plain, errors="surrogate_or_strict"), self.path)

    def names(self):
        return sorted(self.read())

    def get(self, name):
        values = self.read()
        if name not in values:
            raise SecretStoreError("no secret named %s" % shorten(name))
        return values[name]

    def set(self, name, value):
        """Add or replace one secret."""
        check_name(name)
        if not isinstance(value, str):
            raise SecretStoreError("the value of %s must be text" % shorten(str(name)))
        with self.locked():
            values = self.read()
            values[name] = value
            self.write(values)

    def delete(self, name):
        """Remove one secret; SecretStoreError when there is none of that name."""
        with self.locked():
            values = self.read()
            if name not in values:
                raise SecretStoreError("no secret named %s" % shorten(name))
            del values[name]
            self.write(values)

    def write(self, values):
        """Replace the whole store (call it inside ``locked()``)."""
        text = yaml.safe_dump(dict(sorted(values.items())), default_flow_style=False,
                              allow_unicode=True, sort_keys=True)
        blob = self._vault.encrypt(to_bytes(text), secret=self._secret, vault_id=self._secret_id)
        self._ensure_dir()
        try:
            write_atomically(self.path, to_text(blob), MODE)
        except OSError as exc:
            raise SecretStoreError("cannot write %s: %s" % (self.path, exc.strerror)) from exc

    def _ensure_dir(self):
        directory = os.path.dirname(os.path.abspath(self.path))
        try:
            os.makedirs(directory, mode=0o700, exist_ok=True)
        except OSError as exc:
            raise SecretStoreError("cannot create %s (%s): set %s to a writable directory"
                                   % (directory, exc.strerror, state.ENV)) from exc

    @contextlib.contextmanager
    def locked(self):
        """Hold the store's lock file (one writer at a time, across processes)."""
        self._ensure_dir()
        with _THREAD_LOCK:
            try:
                handle = os.open(lock_path(self.path), os.O_RDWR | os.O_CREAT, MODE)
            except OSError as exc:
                raise SecretStoreError("cannot open %s: %s"
                                       % (lock_path(self.path), exc.strerror)) from exc
            try:
                fcntl.lockf(handle, fcntl.LOCK_EX)
                yield
            finally:
                os.close(handle)


# ---------------------------------------------------------------------------------------------
# What a task needs from the store


def merge(given, stored, names):
    """``given`` with the ``names`` it lacks taken from ``stored``: the ``secrets`` option (the
    Ansible variable ``gpufleet_secrets``) wins, and nothing else of the store is taken. The
    users' service tokens the store keeps (services.tokens) are never given to a task."""
    merged = dict(given or {})
    for name in names:
        if tokens.is_store_name(name):
            continue
        if merged.get(name) is None and name in stored:
            merged[name] = stored[name]
    return merged
