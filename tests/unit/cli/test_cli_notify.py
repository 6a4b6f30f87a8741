# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""``gpufleet notify`` and ``gpufleet.api.notify_*``: the URL kept in the secrets store and
never printed; the hosts' part answered by the fake gpufleet.direct or notify.yml."""

from __future__ import annotations

import io
import json

import pytest

from gpufleet import api
from tests.doubles.playbooks import FakeDirect, run_cli

pytestmark = pytest.mark.usefixtures("playbooks")

URL = "https://hooks.slack.com/services/T000/B000/XXXXsecretXXXX"


@pytest.fixture
def direct(monkeypatch):
    return FakeDirect().install(monkeypatch)


@pytest.fixture
def vault(tmp_path, monkeypatch):
    password = tmp_path / "vault-password"
    password.write_text("a vault password\n")
    monkeypatch.setenv("ANSIBLE_VAULT_PASSWORD_FILE", str(password))
    monkeypatch.setenv("GPUFLEET_STATE_DIR", str(tmp_path / "state"))
    return password


def added(hook_id="ops"):
    return {"hook": {"id": hook_id, "url": "https://hooks.slack.com/...", "on": ["run.status"],
                     "fleet": None, "format": "slack", "by": "ann"},
            "set_on": ["gpus-0", "gpus-1"], "changed": True, "unreachable": {}}


def test_add_keeps_the_url_in_the_store_and_prints_only_its_host(
        playbooks, direct, vault, monkeypatch):
    direct.answer(added())
    monkeypatch.setattr("sys.stdin", io.StringIO(URL + "\n"))

    code, out, err = run_cli(playbooks, "notify", "add", "--on", "run.status", "--format",
                             "slack", "--name", "ops")

    assert (code, err) == (0, "")
    assert out == ("Hook ops posts run.status to https://hooks.slack.com/... (slack) from 2 "
                   "host(s): gpus-0, gpus-1\n")
    assert "secret" not in out
    ((name, _args, kwargs),) = direct.calls
    assert name == "notify" and kwargs["url"] == URL and kwargs["operation"] == "add"
    assert api.secret_store().get("GPUFLEET_NOTIFY_OPS") == URL


def test_a_bad_url_or_kind_is_refused_before_any_host_is_asked(playbooks, direct, vault):
    code, _out, err = run_cli(playbooks, "notify", "add", "ftp://x/y", "--name", "ops")
    assert code == 2 and "give an http:// or https:// URL" in err
    code, _out, err = run_cli(playbooks, "notify", "add", URL, "--on", "run.done")
    assert code == 2 and "--on run.done" in err and "secret" not in err
    assert direct.calls == []


def test_list_shows_each_hooks_deliveries_summed_over_its_hosts(playbooks, direct):
    hosts = {"gpus-0": {"delivered": 3, "failed": 1, "waiting": 0, "tick": "loop",
                        "last_error": "HTTP 502"},
             "gpus-1": {"delivered": 2, "failed": 0, "waiting": 1, "tick": "loop"}}
    direct.answer({"hooks": [dict(added()["hook"], hosts=hosts)], "unreachable": {}})
    direct.answer({"hooks": [], "unreachable": {}})

    code, out, _err = run_cli(playbooks, "notify", "list")
    assert code == 0
    header, row = out.splitlines()
    assert header.split()[:4] == ["NAME", "URL", "ON", "FORMAT"]
    assert row.split() == ["ops", "https://hooks.slack.com/...", "run.status", "slack", "2",
                           "5", "1", "1", "HTTP", "502"]
    code, out, _err = run_cli(playbooks, "notify", "list", "--json")
    assert json.loads(out) == {"hooks": [], "unreachable": {}}


def test_remove_takes_it_off_the_hosts_and_out_of_the_store(playbooks, direct, vault):
    api.secret_store().set("GPUFLEET_NOTIFY_OPS", URL)
    direct.answer({"removed_from": ["gpus-0"], "changed": True, "unreachable": {}})

    code, out, _err = run_cli(playbooks, "notify", "remove", "ops")

    assert (code, out) == (0, "Hook ops removed from gpus-0\n")
    assert "GPUFLEET_NOTIFY_OPS" not in api.secret_store().names()


def test_the_url_never_goes_through_ansible_runner(playbooks, direct, vault):
    # add runs in process whatever is asked; list and remove may run notify.yml.
    direct.answer(added())
    assert api.notify_add(URL, on=["run.status"], format="slack", name="ops") == added()
    assert playbooks.calls == [] and direct.calls[0][2]["url"] == URL
    playbooks.answer(stats={"gpufleet_notify": {"hooks": [], "unreachable": {},
                                                "changed": False, "invocation": {"x": 1}}})
    assert api.notify_list() == {"hooks": [], "unreachable": {}, "changed": False}
    (call,) = playbooks.calls
    assert call["playbook"] == "notify.yml"
    assert call["extravars"] == {"gpufleet_notify_operation": "list"}


def test_a_failed_add_keeps_nothing_and_a_remove_with_silent_hosts_keeps_the_url(
        playbooks, direct, vault):
    from gpufleet.api import GpufleetError

    direct.answer(raises=GpufleetError("no host took the hook: gpus-0: down"))
    with pytest.raises(GpufleetError):
        api.notify_add(URL, name="ops")
    assert "GPUFLEET_NOTIFY_OPS" not in api.secret_store().names()
    api.secret_store().set("GPUFLEET_NOTIFY_OPS", URL)
    direct.answer({"removed_from": ["gpus-0"], "changed": True,
                   "unreachable": {"gpus-1": "down"}})
    api.notify_remove("ops", in_process=True)
    assert "GPUFLEET_NOTIFY_OPS" in api.secret_store().names()   # gpus-1 may keep it
