"""``gpufleet secret`` (set, list, get, delete) in-process, with real Ansible Vault encryption:
the store is ``$GPUFLEET_STATE_DIR/secrets.yml`` and the password a file under tmp_path."""

from __future__ import annotations

import io
import os
import stat
import sys

import pytest
from ansible.parsing.vault import VaultLib, VaultSecret
from ansible_collections.gpufleet.cluster.plugins.plugin_utils import secret_store

from gpufleet import cli
from gpufleet.cli import secrets as secrets_cli

VALUE = "s3cr3t-Zq8Xy2-value"
PASSWORD = "correct horse battery staple"


class Stdin(io.StringIO):
    """sys.stdin: piped text, or a terminal (which must not be read: getpass asks there)."""

    def __init__(self, text="", tty=False):
        super().__init__(text)
        self.tty = tty

    def isatty(self):
        return self.tty

    def read(self, *args):
        assert not self.tty, "read a value from a terminal without getpass"
        return super().read(*args)


@pytest.fixture(autouse=True)
def state(tmp_path, monkeypatch):
    """A state dir, the vault password in ANSIBLE_VAULT_PASSWORD_FILE, an empty piped stdin."""
    monkeypatch.setenv("GPUFLEET_STATE_DIR", str(tmp_path / "state"))
    password = tmp_path / "vault-pass"
    password.write_text(PASSWORD + "\n")
    monkeypatch.setenv("ANSIBLE_VAULT_PASSWORD_FILE", str(password))
    monkeypatch.setattr(secret_store.C, "DEFAULT_VAULT_PASSWORD_FILE", None)
    monkeypatch.setattr(sys, "stdin", Stdin())
    return tmp_path / "state"


OUTPUTS = []


def run(*argv, stdin=None):
    """main() in-process: exit code, stdout, stderr; never a traceback."""
    if stdin is not None:
        sys.stdin = stdin
    out, err = io.StringIO(), io.StringIO()
    code = cli.main(list(argv), out=out, err=err)
    assert "Traceback" not in out.getvalue() + err.getvalue()
    OUTPUTS.append((argv[:2], out.getvalue() + err.getvalue()))
    return code, out.getvalue(), err.getvalue()


def stored(state):
    data = (state / "secrets.yml").read_bytes()
    return VaultLib([("default", VaultSecret(PASSWORD.encode()))]).decrypt(data).decode()


def test_set_from_the_argument_then_list_get_and_delete(state):
    assert run("secret", "set", "HF_TOKEN", VALUE) == (0, "OK\n", "")
    assert run("secret", "set", "OTHER", "two") == (0, "OK\n", "")
    code, out, err = run("secret", "list")
    assert (code, err) == (0, "")
    assert out.splitlines() == ["NAME      VALUE", "HF_TOKEN  ******", "OTHER     ******"]
    assert run("secret") == (0, out, "")  # as dstack secret: no subcommand lists
    code, out, err = run("secret", "get", "HF_TOKEN")
    assert (code, err) == (0, "")
    assert out.splitlines() == ["NAME      VALUE", "HF_TOKEN  %s" % VALUE]
    assert run("secret", "delete", "OTHER", "-y") == (0, "OK\n", "")
    assert run("secret", "list")[1].splitlines() == ["NAME      VALUE", "HF_TOKEN  ******"]
    assert run("secret", "delete", "HF_TOKEN", "--yes") == (0, "OK\n", "")
    assert run("secret", "list") == (0, "No secrets.\n", "")


def test_the_file_is_0600_and_really_vault_encrypted(state):
    run("secret", "set", "HF_TOKEN", VALUE)
    path = state / "secrets.yml"
    data = path.read_bytes()
    assert data.startswith(b"$ANSIBLE_VAULT;")
    assert VALUE.encode() not in data
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    assert stored(state) == "HF_TOKEN: %s\n" % VALUE


def test_set_reads_piped_stdin_to_its_end_dropping_one_newline(state):
    assert run("secret", "set", "KEY", stdin=Stdin("line one\nline two\n\n")) == (0, "OK\n", "")
    assert run("secret", "set", "BARE", stdin=Stdin(VALUE)) == (0, "OK\n", "")
    assert run("secret", "set", "CRLF", stdin=Stdin(VALUE + "\r\n")) == (0, "OK\n", "")
    store = secret_store.SecretStore.open()
    assert store.get("KEY") == "line one\nline two\n"
    assert store.get("BARE") == VALUE and store.get("CRLF") == VALUE


def test_set_asks_without_echo_on_a_terminal(state, monkeypatch):
    prompts = []

    def getpass(prompt):
        prompts.append(prompt)
        return VALUE

    monkeypatch.setattr(secrets_cli.getpass, "getpass", getpass)
    assert run("secret", "set", "HF_TOKEN", stdin=Stdin(tty=True)) == (0, "OK\n", "")
    assert prompts == ["Value of HF_TOKEN: "]
    assert secret_store.SecretStore.open().get("HF_TOKEN") == VALUE

    def end_of_file(prompt):
        raise EOFError

    monkeypatch.setattr(secrets_cli.getpass, "getpass", end_of_file)
    assert run("secret", "set", "OTHER", stdin=Stdin(tty=True)) == (
        1, "", "gpufleet: no value given; nothing was set\n")
    assert secret_store.SecretStore.open().names() == ["HF_TOKEN"]


def test_the_password_file_option_wins_over_the_environment(state, tmp_path, monkeypatch):
    other = tmp_path / "other-pass"
    other.write_text("another password\n")
    assert run("secret", "set", "A", "1", "--vault-password-file", str(other))[0] == 0
    assert run("secret", "list", "--vault-password-file", str(other))[0] == 0
    # the environment's password is not the store's
    code, out, err = run("secret", "list")
    assert code == 1 and out == "" and "wrong vault password" in err


def test_a_missing_password_is_one_line_saying_how_to_give_one(state, monkeypatch):
    monkeypatch.delenv("ANSIBLE_VAULT_PASSWORD_FILE")
    for argv in (["secret", "set", "A", VALUE], ["secret", "list"], ["secret", "get", "A"],
                 ["secret", "delete", "A", "-y"]):
        code, out, err = run(*argv)
        assert code == 1 and out == ""
        assert err.count("\n") == 1 and err.startswith("gpufleet: no vault password")
        assert "--vault-password-file" in err and "ANSIBLE_VAULT_PASSWORD_FILE" in err
    assert not (state / "secrets.yml").exists()
    code, _out, err = run("secret", "list", "--vault-password-file", "/no/such/file")
    assert code == 1 and "/no/such/file was not found" in err and err.count("\n") == 1


def test_a_wrong_password_is_one_line_and_changes_nothing(state, tmp_path):
    run("secret", "set", "HF_TOKEN", VALUE)
    before = (state / "secrets.yml").read_bytes()
    wrong = tmp_path / "wrong"
    wrong.write_text("not it\n")
    for argv in (["secret", "set", "B", "2"], ["secret", "list"], ["secret", "get", "HF_TOKEN"],
                 ["secret", "delete", "HF_TOKEN", "-y"]):
        code, out, err = run(*(argv + ["--vault-password-file", str(wrong)]))
        assert code == 1 and out == ""
        assert err.count("\n") == 1 and "wrong vault password" in err
    assert (state / "secrets.yml").read_bytes() == before


def test_a_wrong_password_is_found_before_the_value_is_asked_for(state, tmp_path):
    run("secret", "set", "HF_TOKEN", VALUE)
    wrong = tmp_path / "wrong"
    wrong.write_text("not it\n")
    code, _out, err = run("secret", "set", "B", "--vault-password-file", str(wrong),
                          stdin=Stdin(tty=True))  # reading it would fail the test
    assert code == 1 and "wrong vault password" in err


def test_bad_names_and_unknown_secrets(state):
    code, out, err = run("secret", "set", "1ABC", "x")
    assert code == 2 and out == "" and "invalid secret name '1ABC'" in err
    code, out, err = run("secret", "set", "with-dash", "x")
    assert code == 2 and "letters, digits and _" in err
    assert not (state / "secrets.yml").exists()
    assert run("secret", "get", "NOPE") == (1, "", "gpufleet: no secret named NOPE\n")
    assert run("secret", "delete", "NOPE", "-y") == (1, "", "gpufleet: no secret named NOPE\n")


def test_delete_asks_first(state, monkeypatch):
    run("secret", "set", "HF_TOKEN", VALUE)
    # no terminal and no -y: nothing is deleted
    code, out, err = run("secret", "delete", "HF_TOKEN")
    assert code == 1 and out == "Nothing was deleted.\n" and "pass -y" in err

    class Terminal(Stdin):
        def readline(self):
            return "y\n"

    code, out, _err = run("secret", "delete", "HF_TOKEN", stdin=Terminal(tty=True))
    assert code == 0 and out == "Delete the secret HF_TOKEN? [y/n] OK\n"
    assert run("secret", "list")[1] == "No secrets.\n"


def test_the_value_is_in_no_output_but_secret_get(state, tmp_path, monkeypatch):
    OUTPUTS.clear()
    run("secret", "set", "HF_TOKEN", VALUE)
    run("secret", "set", "PIPED", stdin=Stdin(VALUE + "\n"))
    run("secret", "set", "HF_TOKEN", VALUE + "-again")
    run("secret", "list")
    run("secret")
    run("secret", "get", "PIPED")
    run("secret", "set", "1BAD", VALUE)
    wrong = tmp_path / "wrong"
    wrong.write_text("not it\n")
    run("secret", "set", "X", VALUE, "--vault-password-file", str(wrong))
    run("secret", "get", "HF_TOKEN", "--vault-password-file", str(wrong))
    run("secret", "delete", "PIPED", "-y")
    run("secret", "delete", "HF_TOKEN")
    monkeypatch.delenv("ANSIBLE_VAULT_PASSWORD_FILE")
    run("secret", "set", "Y", VALUE)
    shown = [argv for argv, text in OUTPUTS if VALUE in text]
    assert shown == [("secret", "get")]
    assert sum(1 for argv, _text in OUTPUTS if argv == ("secret", "get")) == 2
    # nor in any file of the state dir
    for root, _dirs, names in os.walk(state):
        for name in names:
            assert VALUE.encode() not in open(os.path.join(root, name), "rb").read()


def test_help_lists_the_secret_command(capsys):
    with pytest.raises(SystemExit):
        cli.main(["--help"])
    assert "secret" in capsys.readouterr().out
    with pytest.raises(SystemExit):
        cli.main(["secret", "--help"])
    text = capsys.readouterr().out
    assert all(action in text for action in ("list", "get", "set", "delete"))


LONG_NAME = "A" * 5000


@pytest.mark.parametrize("argv", [("secret", "set", LONG_NAME, "x"),
                                  ("secret", "get", LONG_NAME),
                                  ("secret", "delete", "-y", LONG_NAME)])
def test_a_long_bad_name_is_shortened_in_the_message(argv):
    """A 5000-character name is not echoed whole: its first characters and its length."""
    code, out, err = run(*argv)
    assert code != 0
    text = out + err
    assert "A" * 60 + "'... (5000 characters)" in text or "A" * 60 + "... (5000 characters)" \
        in text, text
    assert len(text) < 400, text
