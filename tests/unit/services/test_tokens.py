# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Users' service tokens (services.tokens): their shape, their digest, their name in the
secrets store, and the store's entry made once, under its lock, and replaced by a rotate."""

from __future__ import annotations

import contextlib
import hashlib

import pytest
from ansible_collections.gpufleet.cluster.plugins.module_utils.core.errors import GpufleetError
from ansible_collections.gpufleet.cluster.plugins.module_utils.services import tokens
from ansible_collections.gpufleet.cluster.plugins.module_utils.teams.identity import IdentityError
from ansible_collections.gpufleet.cluster.plugins.plugin_utils import secret_store


class FakeStore:
    """read/write/locked as secret_store.SecretStore has them; records when each ran."""

    def __init__(self, values=None):
        self.values = dict(values or {})
        self.calls = []
        self.held = False

    @contextlib.contextmanager
    def locked(self):
        self.calls.append("lock")
        self.held = True
        yield
        self.held = False
        self.calls.append("unlock")

    def read(self):
        self.calls.append("read" if self.held else "read unlocked")
        return dict(self.values)

    def write(self, values):
        self.calls.append("write" if self.held else "write unlocked")
        self.values = dict(values)


def test_a_new_token_is_random_and_has_the_token_shape():
    made = {tokens.new_token() for _index in range(50)}
    assert len(made) == 50
    for token in made:
        assert tokens.is_token(token) and tokens.check_token(token) == token
        assert token.startswith("gft_") and len(token) == 47


def test_the_digest_is_the_hex_sha256_of_the_token():
    token = tokens.new_token()
    assert tokens.digest(token) == hashlib.sha256(token.encode()).hexdigest()
    assert tokens.is_digest(tokens.digest(token))
    assert not tokens.is_digest(tokens.digest(token).upper())
    assert not tokens.is_digest(token)


@pytest.mark.parametrize("text", ["", "gft_short", "x" * 47, "gft_" + "!" * 43, None, 12,
                                  "gft_" + "a" * 43 + "\n"])
def test_a_text_that_is_not_a_token_is_refused_without_being_quoted(text):
    assert not tokens.is_token(text)
    with pytest.raises(tokens.TokenError) as caught:
        tokens.check_token(text)
    assert isinstance(caught.value, GpufleetError)
    if text:
        assert str(text) not in str(caught.value)


@pytest.mark.parametrize("user, name", [("alice", "gpufleet_token_alice"),
                                        ("ml-team", "gpufleet_token_ml_Hteam"),
                                        ("ml_team", "gpufleet_token_ml_team"),
                                        ("a_-b", "gpufleet_token_a__Hb")])
def test_a_users_store_name_is_a_valid_secret_name(user, name):
    assert tokens.store_name(user) == name
    assert secret_store.check_name(name) == name
    assert tokens.is_store_name(name) and not tokens.is_store_name("HF_TOKEN")


def test_no_two_users_share_a_store_name():
    users = ["a-b", "a_b", "a_hb", "a-hb", "a__b", "a-_b", "a_-b", "a--b", "ah-b", "a_h_b"]
    assert len({tokens.store_name(u) for u in users}) == len(users)


@pytest.mark.parametrize("user", ["Alice", "", "a b", "x" * 33, None])
def test_an_invalid_user_has_no_store_name(user):
    with pytest.raises(IdentityError):
        tokens.store_name(user)


def test_obtain_makes_the_token_once_under_the_lock():
    store = FakeStore({"HF_TOKEN": "hf"})
    token, replaced = tokens.obtain(store, "alice")
    assert tokens.is_token(token) and replaced is None
    assert store.values == {"HF_TOKEN": "hf", "gpufleet_token_alice": token}
    assert store.calls == ["lock", "read", "write", "unlock"]
    store.calls = []
    assert tokens.obtain(store, "alice") == (token, None)
    assert store.calls == ["lock", "read", "unlock"]


def test_rotate_replaces_the_token_and_says_which_it_replaced():
    store = FakeStore()
    old = tokens.obtain(store, "bob")[0]
    new, replaced = tokens.obtain(store, "bob", rotate=True)
    assert replaced == old and new != old and tokens.is_token(new)
    assert store.values == {"gpufleet_token_bob": new}
    # A rotate with no token yet makes the first one.
    assert tokens.obtain(FakeStore(), "carol", rotate=True)[1] is None


def test_a_store_entry_that_is_not_a_token_is_refused_unless_rotated():
    store = FakeStore({"gpufleet_token_alice": "hand-edited secret"})
    with pytest.raises(tokens.TokenError, match="gpufleet token --rotate") as caught:
        tokens.obtain(store, "alice")
    assert "hand-edited" not in str(caught.value)
    new, replaced = tokens.obtain(store, "alice", rotate=True)
    assert tokens.is_token(new) and replaced is None


def test_user_digest_is_the_digest_of_the_stored_token_made_on_first_use():
    store = FakeStore()
    first = tokens.user_digest(store, "alice")
    assert first == tokens.digest(store.values["gpufleet_token_alice"])
    assert tokens.user_digest(store, "alice") == first


def test_a_plays_loader_opens_the_store_to_make_a_token(tmp_path, monkeypatch):
    """In a play (the task action), the store is opened with the loader's vault secrets and the
    token made there is the one gpufleet token finds with the password file."""
    from ansible.parsing.dataloader import DataLoader

    monkeypatch.delenv("ANSIBLE_VAULT_PASSWORD_FILE", raising=False)
    monkeypatch.setattr(secret_store.C, "DEFAULT_VAULT_PASSWORD_FILE", None)
    password = tmp_path / "vault-pass"
    password.write_text("correct horse battery staple\n")
    path = str(tmp_path / "state" / "secrets.yml")
    loader = DataLoader()
    with pytest.raises(secret_store.NoVaultPassword):
        secret_store.SecretStore.with_loader(path, loader)
    loader.set_vault_secrets(secret_store.vault_secrets(str(password)))
    made = tokens.user_digest(secret_store.SecretStore.with_loader(path, loader), "bob")
    again = secret_store.SecretStore(path, secret_store.vault_secrets(str(password)))
    assert tokens.digest(again.get("gpufleet_token_bob")) == made
    assert secret_store.read_with_loader(path, loader) == again.read()


def test_a_task_is_never_given_a_token_from_the_store():
    stored = {"gpufleet_token_alice": tokens.new_token(), "HF_TOKEN": "hf"}
    merged = secret_store.merge({}, stored, ["gpufleet_token_alice", "HF_TOKEN"])
    assert merged == {"HF_TOKEN": "hf"}
