"""teams.identity: the controller's user name, its key file and public keys."""

from __future__ import annotations

import subprocess

import pytest

from ansible_collections.gpufleet.cluster.plugins.module_utils.teams import identity
from ansible_collections.gpufleet.cluster.plugins.module_utils.teams.identity import (
    IdentityError)


@pytest.fixture(scope="module")
def keypair(tmp_path_factory):
    path = tmp_path_factory.mktemp("key") / "id_ed25519"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "me", "-f", str(path)],
                   check=True)
    printed = subprocess.run(["ssh-keygen", "-lf", str(path) + ".pub"], check=True,
                             capture_output=True, text=True).stdout.split()[1]
    return path, printed


def test_user_name_from_the_variable_else_the_login_name(monkeypatch):
    assert identity.user_name({"GPUFLEET_USER": "ann"}) == "ann"
    monkeypatch.setattr(identity.getpass, "getuser", lambda: "Bob")
    assert identity.user_name({}) == "bob"


@pytest.mark.parametrize("name", ["Ann", "1ann", "a b", "", "x" * 33, "ann;rm"])
def test_a_bad_user_name_is_one_line_naming_it(name):
    with pytest.raises(IdentityError) as err:
        identity.user_name({"GPUFLEET_USER": name} if name else {"GPUFLEET_USER": "A"})
    assert "$GPUFLEET_USER" in str(err.value) and "\n" not in str(err.value)


def test_identity_file_prefers_the_variable_then_ed25519_then_rsa(tmp_path):
    ssh = tmp_path / ".ssh"
    ssh.mkdir()
    env = {"HOME": str(tmp_path)}
    assert identity.identity_file(env) == str(ssh / "id_ed25519")
    (ssh / "id_rsa").write_text("x")
    assert identity.identity_file(env) == str(ssh / "id_rsa")
    (ssh / "id_ed25519").write_text("x")
    assert identity.identity_file(env) == str(ssh / "id_ed25519")
    assert identity.identity_file(dict(env, GPUFLEET_IDENTITY="~/k")) == str(tmp_path / "k")


def test_fingerprint_is_openssh_s(keypair):
    path, printed = keypair
    key = identity.read_public_key(str(path) + ".pub")
    assert key.kind == "ssh-ed25519"
    assert key.fingerprint == printed
    assert key.line("c").startswith("ssh-ed25519 ") and key.line("c").endswith(" c")


@pytest.mark.parametrize("text, says", [
    ("", "is empty"),
    ("-----BEGIN OPENSSH PRIVATE KEY-----\nabc\n", "private key"),
    ("hello world\n", "not an OpenSSH public key"),
    ("ssh-ed25519 !!!notbase64\n", "does not decode"),
    ("ssh-rsa AAAAC3NzaC1lZDI1NTE5AAAAIOMqqnkVzrm0SdG6UOoqKLsabgH5C9okWi0dh2l9GKJl\n",
     "its data is ssh-ed25519"),
])
def test_a_file_that_is_not_a_public_key_is_refused_naming_it(tmp_path, text, says):
    path = tmp_path / "k.pub"
    path.write_text(text)
    with pytest.raises(IdentityError) as err:
        identity.read_public_key(str(path))
    assert says in str(err.value) and str(path) in str(err.value)


def test_a_missing_key_file_is_named(tmp_path):
    with pytest.raises(IdentityError, match="cannot read the key file .*nope"):
        identity.read_public_key(str(tmp_path / "nope"))


def test_current_reads_the_public_key_beside_the_identity(keypair, tmp_path):
    path, printed = keypair
    me = identity.current({"GPUFLEET_USER": "ann", "GPUFLEET_IDENTITY": str(path)})
    assert me.user == "ann" and me.identity_file == str(path)
    assert me.public_key.fingerprint == printed
    alone = identity.current({"GPUFLEET_USER": "ann", "GPUFLEET_IDENTITY": str(tmp_path / "x")})
    assert alone.public_key is None


@pytest.fixture
def agent(tmp_path, keypair):
    """A real ssh-agent holding the test key: {SSH_AUTH_SOCK}."""
    sock = str(tmp_path / "agent.sock")
    started = subprocess.run(["ssh-agent", "-a", sock], check=True, capture_output=True, text=True)
    pid = [w.split("=")[1].rstrip(";") for w in started.stdout.split() if w.startswith("SSH_AGENT_PID=")][0]
    try:
        subprocess.run(["ssh-add", "-q", str(keypair[0])], check=True, capture_output=True,
                       env={"SSH_AUTH_SOCK": sock, "PATH": "/usr/bin:/bin"})
        yield {"SSH_AUTH_SOCK": sock}
    finally:
        subprocess.run(["kill", pid], check=False)


def test_with_no_key_file_the_agents_key_is_the_identity(agent, keypair, tmp_path):
    env = dict(agent, HOME=str(tmp_path), GPUFLEET_USER="ann")
    me = identity.current(env)
    assert me.identity_file is None and me.public_key.fingerprint == keypair[1]
    assert "SSH agent" in me.describe()
    forced = identity.current(dict(env, GPUFLEET_IDENTITY="agent"))
    assert forced.identity_file is None and forced.public_key.fingerprint == keypair[1]
    assert identity.current(dict(env, SSH_AUTH_SOCK="")).public_key is None
