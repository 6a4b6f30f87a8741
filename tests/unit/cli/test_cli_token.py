"""``gpufleet token`` and ``gpufleet.api.token`` in-process, with real Ansible Vault encryption
(the store is ``$GPUFLEET_STATE_DIR/secrets.yml``, the password a file under tmp_path) and
tests/doubles/playbooks.py's fake for members.yml: the token is made once and kept, printed
only here, never handed to a playbook (its digest is), and never shown by another command."""

from __future__ import annotations

import hashlib
import json

import pytest
from ansible_collections.gpufleet.cluster.plugins.plugin_utils import secret_store

from gpufleet import api
from tests.doubles.playbooks import run_cli

pytestmark = pytest.mark.usefixtures("playbooks", "stdin")
PASSWORD = "correct horse battery staple"


@pytest.fixture(autouse=True)
def state(tmp_path, monkeypatch):
    """A state dir, the vault password in ANSIBLE_VAULT_PASSWORD_FILE, user alice."""
    monkeypatch.setenv("GPUFLEET_STATE_DIR", str(tmp_path / "state"))
    password = tmp_path / "vault-pass"
    password.write_text(PASSWORD + "\n")
    monkeypatch.setenv("ANSIBLE_VAULT_PASSWORD_FILE", str(password))
    monkeypatch.setattr(secret_store.C, "DEFAULT_VAULT_PASSWORD_FILE", None)
    monkeypatch.setenv("GPUFLEET_USER", "alice")
    monkeypatch.setenv("GPUFLEET_IDENTITY", str(tmp_path / "no-key"))
    return tmp_path / "state"


def sha(text):
    return hashlib.sha256(text.encode()).hexdigest()


def stored():
    return secret_store.SecretStore.open().read()


def published(fleets, unread=None):
    return {"gpufleet_members": {"changed": True, "user": "alice", "published": fleets,
                                 "unread": unread or {}}}


def test_the_first_use_makes_the_token_and_later_ones_print_it_again(playbooks, state):
    code, out, err = run_cli(playbooks, "token")
    assert code == 0 and err == ""
    token = out.strip()
    assert out == token + "\n" and token.startswith("gft_") and len(token) == 47
    assert stored() == {"gpufleet_token_alice": token}
    # Encrypted at rest: the file holds no trace of it.
    assert token not in (state / "secrets.yml").read_text()
    assert run_cli(playbooks, "token") == (0, out, "")
    assert playbooks.calls == []
    code, out, _err = run_cli(playbooks, "token", "--json")
    assert json.loads(out) == {"user": "alice", "token": token, "published": [], "unread": {}}
    assert api.token() == {"user": "alice", "token": token, "published": [], "unread": {}}


def test_each_user_has_their_own(playbooks, monkeypatch):
    alice = run_cli(playbooks, "token")[1]
    monkeypatch.setenv("GPUFLEET_USER", "ml-team")
    team = run_cli(playbooks, "token")[1]
    assert alice != team
    assert sorted(stored()) == ["gpufleet_token_alice", "gpufleet_token_ml_Hteam"]


def test_publish_hands_the_playbook_the_digest_only(playbooks):
    token = api.token()["token"]
    playbooks.answer(stats=published(["web"]))
    code, out, err = run_cli(playbooks, "token", "--publish", "web")
    assert (code, out, err) == (0, token + "\n", "Published on fleet web.\n")
    (call,) = playbooks.calls
    assert call["playbook"] == "members.yml"
    assert call["extravars"] == {"fleet_name": "web", "gpufleet_members_operation": "token",
                                 "gpufleet_user": "alice",
                                 "gpufleet_member_token_sha256": sha(token)}
    assert token not in json.dumps(call)


def test_rotate_replaces_the_token_and_its_digest_where_the_old_one_was(playbooks):
    old = api.token()["token"]
    playbooks.answer(stats=published(["a", "b"], {"c": "f-0: unreachable over SSH"}))
    code, out, err = run_cli(playbooks, "token", "--rotate")
    new = out.strip()
    assert code == 0 and new != old and stored() == {"gpufleet_token_alice": new}
    assert err == ("Published on fleets a, b.\n"
                   "gpufleet: c: not published: f-0: unreachable over SSH\n")
    (call,) = playbooks.calls
    assert call["extravars"] == {"gpufleet_members_operation": "token", "gpufleet_user": "alice",
                                 "gpufleet_member_token_sha256": sha(new),
                                 "gpufleet_member_replaces_sha256": sha(old)}
    assert old not in json.dumps(call) and new not in json.dumps(call)


def test_rotate_with_no_token_yet_or_no_fleet_holding_it_says_how_it_gets_there(playbooks):
    code, out, err = run_cli(playbooks, "token", "--rotate")
    assert code == 0 and out.startswith("gft_") and playbooks.calls == []
    assert err.startswith("No fleet held the old token: the new one is published")
    playbooks.answer(stats=published([]))
    code, _out, err = run_cli(playbooks, "token", "--rotate")
    assert code == 0 and "gpufleet token --publish FLEET" in err


def test_a_fleet_that_refuses_is_one_line_and_a_rotated_token_is_kept(playbooks):
    old = api.token()["token"]
    failure = {"host": "localhost", "task": "Read or change the fleet's members on its hosts",
               "msg": "cannot publish the service token of alice on fleet web: web-0: alice is "
                      "not a member of fleet web"}
    playbooks.answer(rc=2, failures=[failure])
    code, out, err = run_cli(playbooks, "token", "--publish", "web")
    assert code == 1 and out == "" and err.count("\n") == 1
    assert "alice is not a member of fleet web" in err
    playbooks.answer(rc=2, failures=[failure])
    code, out, err = run_cli(playbooks, "token", "--rotate")
    assert code == 1 and out == ""
    assert err.splitlines()[1] == ("gpufleet: the new token is kept in the store: publish it "
                                   "on each fleet with gpufleet token --publish FLEET")
    new = stored()["gpufleet_token_alice"]
    assert new != old and new not in err


def test_no_vault_password_or_a_bad_user_is_one_line(playbooks, monkeypatch):
    monkeypatch.delenv("ANSIBLE_VAULT_PASSWORD_FILE")
    code, out, err = run_cli(playbooks, "token")
    assert code == 2 and out == "" and err.count("\n") == 1
    assert err.startswith("gpufleet: no vault password for the secrets store")
    monkeypatch.setenv("GPUFLEET_USER", "Not Valid")
    code, out, err = run_cli(playbooks, "token")
    assert code == 2 and out == "" and "$GPUFLEET_USER 'Not Valid' is not valid" in err


def test_a_hand_edited_entry_is_refused_without_being_shown(playbooks):
    secret_store.SecretStore.open().set("gpufleet_token_alice", "not-a-token-value")
    code, out, err = run_cli(playbooks, "token")
    assert code == 2 and out == "" and "not-a-token-value" not in err
    assert "gpufleet token --rotate" in err
    code, out, _err = run_cli(playbooks, "token", "--rotate")
    assert code == 0 and out.startswith("gft_")


def test_the_secret_commands_neither_show_nor_set_a_token(playbooks):
    token = api.token()["token"]
    outputs = []
    for code_, argv in ((1, ["secret", "get", "gpufleet_token_alice"]),
                        (2, ["secret", "set", "gpufleet_token_alice", "x"]),
                        (2, ["secret", "set", "gpufleet_token_bob"])):
        code, out, err = run_cli(playbooks, *argv)
        assert code == code_ and out == "" and "is a service token, not a secret" in err
        outputs.append(out + err)
    code, out, err = run_cli(playbooks, "secret", "list")
    assert code == 0 and "gpufleet_token_alice  ******" in out
    outputs.append(out + err)
    for argv in (["whoami"], ["whoami", "--json"]):
        outputs.append("".join(map(str, run_cli(playbooks, *argv))))
    playbooks.answer(stats={"gpufleet_members": {"fleet": "web", "members": [], "doc": None,
                                                 "default_limits": {}, "unread": {}}})
    outputs.append("".join(map(str, run_cli(playbooks, "fleet", "members", "web"))))
    assert stored()["gpufleet_token_alice"] == token
    assert all(token not in text for text in outputs)
    with pytest.raises(api.GpufleetError, match="service token"):
        api.secret_store().get("gpufleet_token_alice")
