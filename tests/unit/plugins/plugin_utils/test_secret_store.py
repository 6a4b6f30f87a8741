# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The secrets store (plugins/plugin_utils/secret_store.py) with real Ansible Vault encryption,
and how the task action plugin completes the ``secrets`` option from it."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
from ansible.parsing.dataloader import DataLoader
from ansible.parsing.vault import VaultSecret
from ansible.plugins.action import ActionBase
from ansible_collections.gpufleet.cluster.plugins.action import task as task_action
from ansible_collections.gpufleet.cluster.plugins.module_utils.tasks import actions, environment
from ansible_collections.gpufleet.cluster.plugins.module_utils.tasks.errors import PlanError
from ansible_collections.gpufleet.cluster.plugins.plugin_utils import secret_store

from ...configs import task

VALUE = "hf_Zq8Xy2-very-secret"


@pytest.fixture
def vault(tmp_path, monkeypatch):
    """A state dir and a vault password file; no password from the environment or ansible.cfg
    unless a test gives one."""
    monkeypatch.setenv("GPUFLEET_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.delenv("ANSIBLE_VAULT_PASSWORD_FILE", raising=False)
    monkeypatch.setattr(secret_store.C, "DEFAULT_VAULT_PASSWORD_FILE", None)
    password = tmp_path / "vault-pass"
    password.write_text("correct horse battery staple\n")
    wrong = tmp_path / "wrong-pass"
    wrong.write_text("something else\n")
    return SimpleNamespace(state=tmp_path / "state", password=str(password), wrong=str(wrong),
                           path=str(tmp_path / "state" / "secrets.yml"))


def store(vault, password=None):
    return secret_store.SecretStore.open(password_file_=password or vault.password)


def play_loader(password):
    """A DataLoader with vault secrets, as ansible-playbook sets one up."""
    loader = DataLoader()
    if password is not None:
        loader.set_vault_secrets(secret_store.vault_secrets(password))
    return loader


# ---------------------------------------------------------------------------------------------
# The store


def test_set_get_list_delete_with_real_vault_encryption(vault):
    one = store(vault)
    assert one.read() == {}
    one.set("HF_TOKEN", VALUE)
    one.set("_other2", "multi\nline 'quoted' \"value\": yes")
    assert one.names() == ["HF_TOKEN", "_other2"]
    # another store object (another process) sees the same values
    assert store(vault).get("HF_TOKEN") == VALUE
    assert store(vault).get("_other2") == "multi\nline 'quoted' \"value\": yes"
    one.set("HF_TOKEN", "replaced")
    assert store(vault).get("HF_TOKEN") == "replaced"
    one.delete("_other2")
    assert store(vault).read() == {"HF_TOKEN": "replaced"}
    with pytest.raises(secret_store.SecretStoreError, match="no secret named _other2"):
        one.delete("_other2")
    with pytest.raises(secret_store.SecretStoreError, match="no secret named NOPE"):
        one.get("NOPE")


def test_the_file_is_vault_encrypted_0600_and_holds_no_value(vault):
    store(vault).set("HF_TOKEN", VALUE)
    data = open(vault.path, "rb").read()
    assert data.startswith(b"$ANSIBLE_VAULT;")
    assert VALUE.encode() not in data and b"HF_TOKEN" not in data
    assert stat.S_IMODE(os.stat(vault.path).st_mode) == 0o600
    # nothing else in the state dir but the lock file, and no temporary file is left behind
    assert sorted(os.listdir(vault.state)) == ["secrets.yml", "secrets.yml.lock"]
    assert stat.S_IMODE(os.stat(vault.path + ".lock").st_mode) == 0o600


def test_ansible_vault_itself_reads_the_store(vault):
    from ansible.parsing.vault import VaultLib

    store(vault).set("HF_TOKEN", VALUE)
    secret = VaultSecret(b"correct horse battery staple")
    plain = VaultLib([("default", secret)]).decrypt(open(vault.path, "rb").read())
    assert plain.decode() == "HF_TOKEN: %s\n" % VALUE


@pytest.mark.parametrize("name", ["1ABC", "with-dash", "dot.ted", "", "sp ace", "A" * 201])
def test_names_follow_dstacks_env_name_rule(vault, name):
    with pytest.raises(secret_store.SecretStoreError, match="invalid secret name"):
        store(vault).set(name, "x")
    assert not os.path.exists(vault.path)


@pytest.mark.parametrize("name", ["A", "_", "hf_token", "TOKEN_2", "A" * 200])
def test_valid_names(vault, name):
    store(vault).set(name, "x")
    assert store(vault).get(name) == "x"


def test_the_password_file_is_the_flag_then_the_environment_then_ansible_cfg(vault, monkeypatch):
    env = {"ANSIBLE_VAULT_PASSWORD_FILE": "/from/env"}
    assert secret_store.password_file("/flag", env) == "/flag"
    assert secret_store.password_file(None, env) == "/from/env"
    monkeypatch.setattr(secret_store.C, "DEFAULT_VAULT_PASSWORD_FILE", "/from/cfg")
    assert secret_store.password_file(None, {}) == "/from/cfg"
    monkeypatch.setattr(secret_store.C, "DEFAULT_VAULT_PASSWORD_FILE", None)
    assert secret_store.password_file(None, {}) is None
    monkeypatch.setenv("ANSIBLE_VAULT_PASSWORD_FILE", vault.password)
    secret_store.SecretStore.open().set("A", "1")
    assert store(vault).get("A") == "1"


def test_an_executable_password_file_is_run_as_ansible_does(vault, tmp_path):
    script = tmp_path / "pass.sh"
    script.write_text("#!/bin/sh\necho 'correct horse battery staple'\n")
    script.chmod(0o700)
    store(vault, str(script)).set("A", "1")
    assert store(vault).get("A") == "1"


def test_no_password_is_one_clear_error(vault):
    with pytest.raises(secret_store.NoVaultPassword) as caught:
        secret_store.SecretStore.open()
    message = str(caught.value)
    assert "--vault-password-file" in message and "ANSIBLE_VAULT_PASSWORD_FILE" in message
    assert "\n" not in message
    with pytest.raises(secret_store.NoVaultPassword, match="was not found"):
        store(vault, "/no/such/file")


def test_a_wrong_password_is_one_clear_error_and_changes_nothing(vault):
    store(vault).set("HF_TOKEN", VALUE)
    before = open(vault.path, "rb").read()
    wrong = store(vault, vault.wrong)
    for action in (wrong.read, lambda: wrong.set("B", "2"), lambda: wrong.delete("HF_TOKEN")):
        with pytest.raises(secret_store.WrongVaultPassword) as caught:
            action()
        assert "wrong vault password" in str(caught.value)
        assert VALUE not in str(caught.value)
    assert open(vault.path, "rb").read() == before


def test_a_plain_file_is_refused(vault):
    os.makedirs(vault.state)
    with open(vault.path, "w") as handle:
        handle.write("HF_TOKEN: plain\n")
    with pytest.raises(secret_store.SecretStoreError, match="not encrypted with Ansible Vault"):
        store(vault).read()


def test_bad_content_is_reported_without_the_text(vault):
    secrets = secret_store.vault_secrets(vault.password)
    bad = secret_store.SecretStore(vault.path, secrets)
    with bad.locked():
        pass
    from ansible.parsing.vault import VaultLib

    def put(text):
        blob = VaultLib(secrets).encrypt(text.encode(), secret=secrets[0][1])
        with open(vault.path, "wb") as handle:
            handle.write(blob)

    put("- %s\n" % VALUE)
    with pytest.raises(secret_store.SecretStoreError, match="expected a mapping") as caught:
        bad.read()
    assert VALUE not in str(caught.value)
    put("A: [%s\n" % VALUE)
    with pytest.raises(secret_store.SecretStoreError, match="not valid YAML") as caught:
        bad.read()
    assert VALUE not in str(caught.value) and caught.value.__cause__ is None
    put("A: 12\n")
    assert bad.read() == {"A": "12"}
    put("")
    assert bad.read() == {}


ROOT = Path(__file__).resolve().parents[2]
WRITER = """
import sys
from gpufleet._collection import ensure_importable
ensure_importable()
from ansible_collections.gpufleet.cluster.plugins.plugin_utils import secret_store
worker, password = sys.argv[1], sys.argv[2]
for i in range(5):
    secret_store.SecretStore.open(password_file_=password).set("W%s_%d" % (worker, i), "v")
"""


def test_writers_in_several_processes_lose_nothing(vault):
    # Separate interpreters (not fork: pytest's process may hold threads whose locks a fork
    # would copy held).
    env = dict(os.environ, GPUFLEET_STATE_DIR=str(vault.state))
    procs = [subprocess.Popen([sys.executable, "-c", WRITER, str(w), str(vault.password)],
                              env=env, cwd=str(ROOT), stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT) for w in range(4)]
    for proc in procs:
        out, _err = proc.communicate(timeout=120)
        assert proc.returncode == 0, out.decode()
    assert store(vault).names() == sorted("W%d_%d" % (w, i) for w in range(4) for i in range(5))


# ---------------------------------------------------------------------------------------------
# The play's side: the loader's vault secrets


def test_the_loader_decrypts_the_store_with_the_plays_vault_secrets(vault):
    store(vault).set("HF_TOKEN", VALUE)
    values = secret_store.read_with_loader(vault.path, play_loader(vault.password))
    assert values == {"HF_TOKEN": VALUE}
    assert values["HF_TOKEN"].__class__ is str  # a plain str, not Ansible's tagged text
    assert secret_store.read_with_loader(str(vault.state / "none.yml"), DataLoader()) == {}


def test_the_loader_without_or_with_a_wrong_password_gives_clear_errors(vault):
    store(vault).set("HF_TOKEN", VALUE)
    with pytest.raises(secret_store.NoVaultPassword) as caught:
        secret_store.read_with_loader(vault.path, DataLoader())
    assert "--vault-password-file" in str(caught.value) and "AWX" in str(caught.value)
    with pytest.raises(secret_store.WrongVaultPassword) as caught:
        secret_store.read_with_loader(vault.path, play_loader(vault.wrong))
    assert "gpufleet_secrets" in str(caught.value) and VALUE not in str(caught.value)


# ---------------------------------------------------------------------------------------------
# What a task needs, and the merge


def image_task(**fields):
    """A task on the ``ubuntu`` image that runs ``echo hi``, with ``fields``."""
    return task(**dict({"image": "ubuntu", "commands": ["echo hi"]}, **fields))


def test_needed_names_are_the_secrets_env_and_registry_auth_use_that_are_not_given():
    config = image_task(env=["A=${{ secrets.HF_TOKEN }}", "B=x-${{ secrets.OTHER }}-y", "C=plain",
                             "D", "E=$${{ secrets.ESCAPED }}"],
                        registry_auth={"username": "${{ secrets.REG_USER }}",
                                       "password": "${{ secrets.HF_TOKEN }}"})
    assert environment.needed_secret_names(config, {}) == ["HF_TOKEN", "OTHER", "REG_USER"]
    assert environment.needed_secret_names(config, {"HF_TOKEN": "given"}) == ["OTHER", "REG_USER"]
    # a null in gpufleet_secrets is no value (the runner calls it missing)
    assert environment.needed_secret_names(config, {"OTHER": None}) == [
        "HF_TOKEN", "OTHER", "REG_USER"]


def test_a_task_without_secrets_needs_none():
    assert environment.needed_secret_names(image_task(env={"A": "1"}), {}) == []
    assert environment.needed_secret_names(image_task(), {}) == []
    # commands keep their ${{ secrets.X }} as written: nothing is filled there
    assert environment.needed_secret_names(image_task(commands=["echo ${{ secrets.X }}"]), {}) == []


def test_merge_puts_the_store_under_the_option_and_takes_only_the_needed_names():
    stored = {"HF_TOKEN": "from-store", "OTHER": "from-store", "UNUSED": "from-store"}
    given = {"HF_TOKEN": "from-var", "EXTRA": "from-var", "NULL": None}
    merged = secret_store.merge(given, stored, ["OTHER", "NULL", "MISSING"])
    assert merged == {"HF_TOKEN": "from-var", "EXTRA": "from-var", "NULL": None,
                      "OTHER": "from-store"}
    stored["NULL"] = "from-store"
    assert secret_store.merge(given, stored, ["NULL"])["NULL"] == "from-store"
    assert given == {"HF_TOKEN": "from-var", "EXTRA": "from-var", "NULL": None}


def test_missing_secrets_say_how_to_set_them():
    config = image_task(env={"A": "${{ secrets.NOPE }}"})
    with pytest.raises(PlanError) as caught:
        environment.resolve_env(config, {}, {})
    assert str(caught.value).endswith(
        "Failed to interpolate due to missing vars: [NOPE]; set it with gpufleet secret set "
        "NAME, or pass gpufleet_secrets")


# ---------------------------------------------------------------------------------------------
# The action plugin


def params_for(tmp_path, text, secrets=None, state_dir=None):
    path = tmp_path / "task.dstack.yml"
    path.write_text(text)
    params = {"path": str(path), "config": None, "name": None, "env": None, "fleet_names": [],
              "secrets": secrets or {}, "wait": True, "logs": False, "image_source": "auto",
              "run_args": [], "poll_interval": 1.0, "fleets": [], "state_dir": state_dir}
    return actions.expand_paths(params)


TASK = "type: task\nimage: ubuntu\nenv:\n  - TOKEN=${{ secrets.HF_TOKEN }}\ncommands: [env]\n"


def test_with_stored_secrets_opens_the_store_only_when_a_name_is_missing(tmp_path):
    opened = []

    def read_store(path):
        opened.append(path)
        return {"HF_TOKEN": "stored", "UNUSED": "stored"}

    plain = params_for(tmp_path, "type: task\nimage: ubuntu\ncommands: [env]\n")
    assert task_action.with_stored_secrets(plain, read_store) is plain
    given = params_for(tmp_path, TASK, secrets={"HF_TOKEN": "given"})
    assert task_action.with_stored_secrets(given, read_store)["secrets"] == {"HF_TOKEN": "given"}
    assert opened == []
    needs = params_for(tmp_path, TASK, state_dir=str(tmp_path / "st"))
    assert task_action.with_stored_secrets(needs, read_store)["secrets"] == {"HF_TOKEN": "stored"}
    assert opened == [str(tmp_path / "st" / "secrets.yml")]
    assert needs["secrets"] == {}  # the caller's params are not changed
    broken = params_for(tmp_path, "type: task\nnot: valid\n")
    assert task_action.with_stored_secrets(broken, read_store) is broken


def test_a_remote_repo_takes_its_credential_from_the_store_when_there_and_needs_none(tmp_path):
    task = ("type: task\nimage: alpine/git\ncommands: [ls]\n"
            "repos:\n  - url: https://github.com/acme/private.git\n")
    params = params_for(tmp_path, task)
    stored = {"GIT_TOKEN": "tok", "OTHER": "x"}
    assert task_action.with_stored_secrets(params, lambda path: stored)["secrets"] == {
        "GIT_TOKEN": "tok"}

    def locked(path):
        raise secret_store.SecretStoreError("no vault password")
    # a public repo: no credential needed, so a store that cannot be opened is no error
    assert task_action.with_stored_secrets(params, locked) is params
    # a credential given as gpufleet_secrets wins and the store is not opened
    given = params_for(tmp_path, task, secrets={"GIT_TOKEN": "given", "GIT_SSH_KEY": "k"})
    assert task_action.with_stored_secrets(given, locked) is given


def run_action(monkeypatch, params, loader):
    """ActionModule.run with Ansible's side (argument validation) and the runner replaced:
    returns (the result, the params actions.submit was given)."""
    submitted = []

    def submit(params, emit=None, check_mode=False, services=None, gate=None):
        submitted.append(params)
        return {"run": "train", "status": "done", "jobs": []}, False

    monkeypatch.setattr(ActionBase, "run", lambda self, tmp=None, task_vars=None: {})
    monkeypatch.setattr(task_action.ActionModule, "validate_argument_spec",
                        lambda self, **kwargs: (None, dict(params)))
    monkeypatch.setattr(actions, "submit", submit)
    action = task_action.ActionModule.__new__(task_action.ActionModule)
    action._loader = loader
    action._task = SimpleNamespace(check_mode=False)
    return action.run(task_vars={}), submitted


def test_the_action_plugin_takes_the_store_with_the_plays_password_and_returns_none_of_it(
        vault, tmp_path, monkeypatch):
    store(vault).set("HF_TOKEN", VALUE)
    store(vault).set("UNUSED", "unused-" + VALUE)
    params = params_for(tmp_path, TASK)
    result, submitted = run_action(monkeypatch, params, play_loader(vault.password))
    assert submitted[0]["secrets"] == {"HF_TOKEN": VALUE}
    assert result == {"run": "train", "status": "done", "jobs": []}
    assert VALUE not in json.dumps(result)


def test_the_action_plugin_fails_clearly_without_the_password(vault, tmp_path, monkeypatch):
    store(vault).set("HF_TOKEN", VALUE)
    result, submitted = run_action(monkeypatch, params_for(tmp_path, TASK), DataLoader())
    assert submitted == [] and result["failed"]
    assert "no vault password" in result["msg"] and VALUE not in json.dumps(result)
    result, submitted = run_action(monkeypatch, params_for(tmp_path, TASK),
                                   play_loader(vault.wrong))
    assert submitted == [] and "wrong vault password" in result["msg"]
    # gpufleet_secrets alone needs no password
    result, submitted = run_action(
        monkeypatch, params_for(tmp_path, TASK, secrets={"HF_TOKEN": "given"}), DataLoader())
    assert submitted[0]["secrets"] == {"HF_TOKEN": "given"} and not result.get("failed")


def test_without_a_store_the_task_goes_on_to_the_missing_secret_error(vault, tmp_path,
                                                                      monkeypatch):
    result, submitted = run_action(monkeypatch, params_for(tmp_path, TASK), DataLoader())
    assert submitted[0]["secrets"] == {}
