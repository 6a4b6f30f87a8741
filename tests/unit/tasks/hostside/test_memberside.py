# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""A fleet's members on a host (tasks.hostside.memberside): the document under its lock, last
writer wins per entry whatever order the changes come in, only admins change it, and the
members' lines in the login user's authorized_keys (nothing else there is touched).

TEAM_ROOT and the login user's home point into a temporary folder.
"""

from __future__ import annotations

import itertools
import os
import stat

import pytest
from ansible_collections.gpufleet.cluster.plugins.module_utils.tasks import ssh
from ansible_collections.gpufleet.cluster.plugins.module_utils.tasks.hostside import (
    memberside,
    nodeside,
)

KEY_A = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIA" + "a" * 43
KEY_B = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIB" + "b" * 43
FLEET_KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIF" + "f" * 43


@pytest.fixture
def team(tmp_path, monkeypatch):
    monkeypatch.setattr(memberside, "TEAM_ROOT", str(tmp_path / "team"))
    home = tmp_path / "home"
    (home / ".ssh").mkdir(parents=True)
    keys = home / ".ssh" / "authorized_keys"
    keys.write_text(FLEET_KEY + " fleet-key\nssh-rsa AAAAB3Nza other\n")
    keys.chmod(0o640)
    monkeypatch.setattr(memberside, "_members_home", lambda user: str(home))
    return keys


def first(fleet="f"):
    return {"fleet": fleet, "revoked": {}, "limits": {},
            "members": {"alice": {"role": "admin", "key": FLEET_KEY, "by": "alice",
                                  "stamp": [0.0, "c1"]}}}


def grant(user, key, at, by="alice", role="member", who="c1"):
    return {"kind": "grant", "user": user, "key": key, "role": role, "fingerprint": "SHA256:x",
            "by": by, "stamp": [at, who]}


def revoke(user, at, by="alice", who="c1"):
    return {"kind": "revoke", "user": user, "by": by, "stamp": [at, who]}


def limit(user, at, runs=None, gpus=None, who="c1"):
    return {"kind": "limit", "user": user, "runs": runs, "gpus": gpus, "nodes": None,
            "by": "alice", "stamp": [at, who]}


def test_a_host_without_a_document_answers_null(team):
    assert memberside.op_members({}) == {"doc": None}


def test_sync_makes_the_first_document_and_change_refuses_without_one(team):
    with pytest.raises(nodeside.Failure, match="no members document"):
        memberside.op_members_change({"change": grant("bob", KEY_B, 1.0)})
    memberside.op_members_sync({"doc": first(), "login_user": "gpufleet"})
    assert memberside.op_members({})["doc"]["members"]["alice"]["role"] == "admin"
    folder = os.stat(memberside.team_path())
    assert stat.S_IMODE(folder.st_mode) == 0o700


def test_grant_adds_a_marked_line_and_revoke_takes_exactly_it_out(team):
    before = team.read_text()
    memberside.op_members_sync({"doc": first(), "login_user": "gpufleet"})
    # The creator's key is the fleet's own key, already there: no second line for it.
    assert team.read_text() == before
    memberside.op_members_change({"change": grant("bob", KEY_B, 1.0), "login_user": "gpufleet"})
    lines = team.read_text().splitlines()
    assert lines[:2] == before.splitlines()
    assert lines[2] == KEY_B + " gpufleet-member fleet=f user=bob"
    assert stat.S_IMODE(os.stat(team).st_mode) == 0o640
    memberside.op_members_change({"change": revoke("bob", 2.0), "login_user": "gpufleet"})
    assert team.read_text() == before
    doc = memberside.op_members({})["doc"]
    assert "bob" not in doc["members"] and doc["revoked"]["bob"]["by"] == "alice"


def test_another_fleets_member_lines_stay(team):
    team.write_text(team.read_text() + KEY_A + " gpufleet-member fleet=f2 user=bob\n")
    memberside.op_members_sync({"doc": first(), "login_user": "gpufleet"})
    memberside.op_members_change({"change": grant("bob", KEY_B, 1.0), "login_user": "gpufleet"})
    memberside.op_members_change({"change": revoke("bob", 2.0), "login_user": "gpufleet"})
    assert KEY_A + " gpufleet-member fleet=f2 user=bob" in team.read_text()


def test_only_an_admin_changes_members(team):
    memberside.op_members_sync({"doc": first(), "login_user": "gpufleet"})
    memberside.op_members_change({"change": grant("bob", KEY_B, 1.0), "login_user": "gpufleet"})
    with pytest.raises(nodeside.Failure, match="bob is not an admin of fleet f"):
        memberside.op_members_change({"change": grant("eve", KEY_A, 2.0, by="bob")})
    with pytest.raises(nodeside.Failure, match="mallory is not an admin"):
        memberside.op_members_change({"change": revoke("alice", 2.0, by="mallory")})
    assert "eve" not in memberside.op_members({})["doc"]["members"]


def test_an_older_change_does_not_undo_a_newer_one(team):
    memberside.op_members_sync({"doc": first(), "login_user": "gpufleet"})
    memberside.op_members_change({"change": revoke("bob", 5.0), "login_user": "gpufleet"})
    answer = memberside.op_members_change({"change": grant("bob", KEY_B, 4.0),
                                           "login_user": "gpufleet"})
    assert answer["applied"] is False
    assert "bob" in answer["doc"]["revoked"] and KEY_B not in team.read_text()


CHANGES = [grant("bob", KEY_B, 1.0), revoke("bob", 2.0, who="c2"), grant("bob", KEY_A, 2.0),
           limit("bob", 3.0, runs=1), limit("bob", 3.0, runs=2, who="c2"),
           limit("*", 1.0, gpus=4), grant("carol", KEY_A, 1.5, role="admin")]


@pytest.mark.parametrize("order", [(0, 1, 2, 3, 4, 5, 6), (6, 5, 4, 3, 2, 1, 0),
                                   (2, 4, 0, 6, 1, 3, 5)])
def test_every_order_of_changes_ends_in_one_state(team, order):
    """Two controllers' concurrent changes, in any order a host sees them, end the same."""
    doc = first()
    for index in order:
        doc, _applied = memberside.members_apply(doc, CHANGES[index])
    # [2.0, "c2"] > [2.0, "c1"]: the revoke wins the tie on the controller id.
    assert "bob" in doc["revoked"] and "bob" not in doc["members"]
    assert doc["limits"]["bob"]["runs"] == 2 and doc["limits"]["*"]["gpus"] == 4
    assert doc["members"]["carol"]["role"] == "admin"


def test_merge_in_both_orders_is_the_same():
    one, two = first(), first()
    one = memberside.members_apply(one, grant("bob", KEY_B, 1.0))[0]
    one = memberside.members_apply(one, limit("*", 4.0, runs=3))[0]
    two = memberside.members_apply(two, revoke("bob", 2.0, who="c2"))[0]
    two = memberside.members_apply(two, limit("*", 3.0, runs=9))[0]
    assert memberside.members_merge(one, two) == memberside.members_merge(two, one)
    merged = memberside.members_merge(one, two)
    assert "bob" in merged["revoked"] and merged["limits"]["*"]["runs"] == 3
    for a, b in itertools.permutations([one, two, first()], 2):
        assert memberside.members_merge(memberside.members_merge(a, b), b) == \
            memberside.members_merge(a, b)


def test_sync_merges_and_writes_keys(team):
    memberside.op_members_sync({"doc": first(), "login_user": "gpufleet"})
    other = memberside.members_apply(first(), grant("bob", KEY_B, 1.0))[0]
    answer = memberside.op_members_sync({"doc": other, "login_user": "gpufleet"})
    assert answer["applied"] and "bob" in answer["doc"]["members"]
    assert "fleet=f user=bob" in team.read_text()
    assert memberside.op_members_sync({"doc": other, "login_user": "gpufleet"})["applied"] is False


def test_the_ops_are_sent_to_the_hosts():
    source = ssh.host_source().decode("utf-8")
    assert "def op_members_change(" in source and '"members_sync": op_members_sync' in source


def test_sync_keeps_the_hosts_facts_for_members_to_read(team):
    assert memberside.op_members({"facts": True}) == {"doc": None, "facts": None}
    facts = {"gpus": [], "cpus": 4, "internal_ip": "10.0.0.2"}
    memberside.op_members_sync({"doc": first(), "login_user": "gpufleet", "facts": facts})
    assert memberside.op_members({"facts": True})["facts"] == facts
    assert "facts" not in memberside.op_members({})
    path = os.path.join(memberside.TEAM_ROOT, "host-facts.json")
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    # A sync without facts (a grant's copy to a host made later) keeps what is there.
    memberside.op_members_sync({"doc": first(), "login_user": "gpufleet"})
    assert memberside.op_members({"facts": True})["facts"] == facts
