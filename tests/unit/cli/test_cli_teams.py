# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""``gpufleet whoami`` and ``gpufleet fleet grant|revoke|members|limit`` without Ansible: what
reaches playbooks/members.yml and what is printed. ``gpufleet.runner.run_playbook`` is
tests/doubles/playbooks.py's fake."""

from __future__ import annotations

import json
import subprocess

import pytest

from tests.doubles.playbooks import run_cli

pytestmark = pytest.mark.usefixtures("playbooks", "stdin")
run = run_cli


@pytest.fixture
def me(tmp_path, monkeypatch):
    key = tmp_path / "id_ed25519"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(key)], check=True)
    monkeypatch.setenv("GPUFLEET_USER", "alice")
    monkeypatch.setenv("GPUFLEET_IDENTITY", str(key))
    return key


def answered(**found):
    return {"gpufleet_members": dict({"fleet": "web", "changed": True, "members": []}, **found)}


def refused(msg):
    return {"rc": 2, "failures": [{"host": "localhost", "task": "Read or change the fleet's "
                                   "members on its hosts", "msg": msg}]}


def test_whoami_prints_the_user_the_identity_and_the_fingerprint(playbooks, me):
    code, out, err = run(playbooks, "whoami")
    assert code == 0, err
    printed = subprocess.run(["ssh-keygen", "-lf", str(me) + ".pub"], capture_output=True,
                             text=True, check=True).stdout.split()[1]
    assert out == "user: alice\nidentity: %s\nfingerprint: %s\n" % (me, printed)
    code, out, _err = run(playbooks, "whoami", "--json")
    assert json.loads(out)["fingerprint"] == printed


def test_whoami_without_a_public_key_says_how_to_make_one(playbooks, tmp_path, monkeypatch):
    monkeypatch.setenv("GPUFLEET_USER", "alice")
    monkeypatch.setenv("GPUFLEET_IDENTITY", str(tmp_path / "none"))
    code, out, _err = run(playbooks, "whoami")
    assert code == 0 and "fingerprint: - (no public key at %s.pub" % (tmp_path / "none") in out


def test_whoami_refuses_a_bad_user_name(playbooks, monkeypatch):
    monkeypatch.setenv("GPUFLEET_USER", "Not Valid")
    code, _out, err = run(playbooks, "whoami")
    assert code == 2 and err.startswith("gpufleet: $GPUFLEET_USER 'Not Valid' is not valid")


def test_grant_passes_the_member_the_key_and_who_grants(playbooks, me, tmp_path):
    playbooks.answer(stats=answered())
    code, out, err = run(playbooks, "fleet", "grant", "web", "--user", "bob", "--key",
                         str(me) + ".pub", "--admin")
    assert code == 0, err
    assert out == "bob is an admin of fleet web\n"
    (call,) = playbooks.calls
    assert call["playbook"] == "members.yml"
    assert call["extravars"] == {"fleet_name": "web", "gpufleet_members_operation": "grant",
                                 "gpufleet_member": "bob",
                                 "gpufleet_member_key": str(me) + ".pub",
                                 "gpufleet_member_admin": True, "gpufleet_user": "alice"}


def test_a_refusal_is_one_line(playbooks, me):
    playbooks.answer(**refused("bob is not an admin of fleet web: only its admins (alice) "
                               "grant, revoke and set limits; ask one of them"))
    code, out, err = run(playbooks, "fleet", "revoke", "web", "--user", "carol")
    assert code == 1 and out == ""
    assert err == ("gpufleet: bob is not an admin of fleet web: only its admins (alice) grant, "
                   "revoke and set limits; ask one of them\n")
    assert playbooks.calls[0]["extravars"]["gpufleet_members_operation"] == "revoke"


def test_limit_takes_a_user_or_the_default_and_passes_the_caps(playbooks, me):
    playbooks.answer(stats=answered(changed=False))
    code, out, err = run(playbooks, "fleet", "limit", "web", "--default", "--runs", "2",
                         "--gpus", "0")
    assert code == 0, err
    assert out == "limits of the default on fleet web set (no change)\n"
    variables = playbooks.calls[0]["extravars"]
    assert (variables["gpufleet_member_default"], variables["gpufleet_member_runs"],
            variables["gpufleet_member_gpus"]) == (True, 2, 0)
    assert "gpufleet_member" not in variables and "gpufleet_member_nodes" not in variables
    with pytest.raises(SystemExit):
        run(playbooks, "fleet", "limit", "web", "--runs", "2")
    with pytest.raises(SystemExit):
        run(playbooks, "fleet", "limit", "web", "--user", "bob", "--runs", "two")


def test_members_prints_the_table_and_the_default_limits(playbooks, me):
    rows = [{"user": "alice", "role": "admin", "fingerprint": "SHA256:aaa",
             "limits": {"runs": None, "gpus": None, "nodes": None}, "by": "alice"},
            {"user": "bob", "role": "member", "fingerprint": "SHA256:bbb",
             "limits": {"runs": 1, "gpus": 8, "nodes": None}, "by": "alice"}]
    playbooks.answer(stats=answered(members=rows, changed=False, unread={},
                                    default_limits={"runs": 1, "gpus": None, "nodes": None}))
    code, out, err = run(playbooks, "fleet", "members", "web")
    assert code == 0, err
    assert out.splitlines() == [
        "USER   ROLE    FINGERPRINT  LIMITS         GRANTED BY",
        "alice  admin   SHA256:aaa   -              alice",
        "bob    member  SHA256:bbb   runs=1 gpus=8  alice",
        "default limits: runs=1"]
    assert playbooks.calls[0]["extravars"]["gpufleet_members_operation"] == "list"
    playbooks.answer(stats=answered(members=rows, changed=False))
    code, out, _err = run(playbooks, "fleet", "members", "web", "--json")
    assert json.loads(out)["members"] == rows
