# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""A member's service token on a host (tasks.hostside.memberside's ``member_token``): only the
user's own member entry, only a member, the newest digest wins in any order, and grants,
revokes and merges keep or drop it as the module's docstring says.

TEAM_ROOT points into a temporary folder.
"""

from __future__ import annotations

import itertools

import pytest
from ansible_collections.gpufleet.cluster.plugins.module_utils.tasks import ssh
from ansible_collections.gpufleet.cluster.plugins.module_utils.tasks.hostside import (
    memberside,
    nodeside,
)

KEY_B = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIB" + "b" * 43
FLEET_KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIF" + "f" * 43
D1, D2, D3 = "1" * 64, "2" * 64, "a" * 64


@pytest.fixture
def team(tmp_path, monkeypatch):
    monkeypatch.setattr(memberside, "TEAM_ROOT", str(tmp_path / "team"))
    home = tmp_path / "home"
    (home / ".ssh").mkdir(parents=True)
    monkeypatch.setattr(memberside, "_members_home", lambda user: str(home))
    return tmp_path


def first(fleet="f"):
    return {"fleet": fleet, "revoked": {}, "limits": {},
            "members": {"alice": {"role": "admin", "key": FLEET_KEY, "by": "alice",
                                  "stamp": [0.0, "c1"]}}}


def grant(user, at, role="member", who="c1"):
    return {"kind": "grant", "user": user, "key": KEY_B, "role": role, "fingerprint": "SHA256:x",
            "by": "alice", "stamp": [at, who]}


def revoke(user, at, who="c1"):
    return {"kind": "revoke", "user": user, "by": "alice", "stamp": [at, who]}


def token(user, digest, at, who="c1", fleet="f"):
    return {"fleet": fleet, "user": user, "token_sha256": digest, "stamp": [at, who]}


def test_a_member_sets_the_digest_of_their_own_entry_only(team):
    memberside.op_members_sync({"doc": first()})
    memberside.op_members_change({"change": grant("bob", 1.0)})
    assert memberside.op_member_token(token("bob", D1, 2.0)) == {"applied": True}
    doc = memberside.op_members({})["doc"]
    assert doc["members"]["bob"]["token_sha256"] == D1
    assert doc["members"]["bob"]["token_stamp"] == [2.0, "c1"]
    assert "token_sha256" not in doc["members"]["alice"]
    # The grant itself (role, key, stamp) is as it was.
    assert doc["members"]["bob"]["stamp"] == [1.0, "c1"]
    assert doc["members"]["bob"]["role"] == "member"


def test_only_members_publish_a_token(team):
    with pytest.raises(nodeside.Failure, match="no members document"):
        memberside.op_member_token(token("bob", D1, 2.0))
    memberside.op_members_sync({"doc": first()})
    with pytest.raises(nodeside.Failure, match="bob is not a member of fleet f"):
        memberside.op_member_token(token("bob", D1, 2.0))
    memberside.op_members_change({"change": grant("bob", 1.0)})
    memberside.op_members_change({"change": revoke("bob", 2.0)})
    with pytest.raises(nodeside.Failure, match="bob is not a member of fleet f"):
        memberside.op_member_token(token("bob", D1, 3.0))
    assert "bob" not in memberside.op_members({})["doc"]["members"]


@pytest.mark.parametrize("payload, message", [
    ({"user": "alice", "token_sha256": "A" * 64, "stamp": [1.0, "c"]}, "lower-case hex"),
    ({"user": "alice", "token_sha256": "1" * 63, "stamp": [1.0, "c"]}, "lower-case hex"),
    ({"user": "alice", "token_sha256": None, "stamp": [1.0, "c"]}, "lower-case hex"),
    ({"user": "alice", "token_sha256": D1}, "a user and a stamp"),
    ({"token_sha256": D1, "stamp": [1.0, "c"]}, "a user and a stamp"),
    (token("alice", D1, 1.0, fleet="other"), "belongs to fleet f, not other"),
])
def test_a_malformed_token_change_is_refused(team, payload, message):
    memberside.op_members_sync({"doc": first()})
    with pytest.raises(nodeside.Failure, match=message):
        memberside.op_member_token(payload)
    assert "token_sha256" not in memberside.op_members({})["doc"]["members"]["alice"]


def test_the_newest_digest_wins_in_any_order(team):
    memberside.op_members_sync({"doc": first()})
    assert memberside.op_member_token(token("alice", D2, 5.0))["applied"] is True
    assert memberside.op_member_token(token("alice", D1, 4.0))["applied"] is False
    assert memberside.op_member_token(token("alice", D2, 5.0))["applied"] is False
    # A tie goes to the greater controller id, as for the other changes.
    assert memberside.op_member_token(token("alice", D3, 5.0, who="c2"))["applied"] is True
    assert memberside.op_members({})["doc"]["members"]["alice"]["token_sha256"] == D3


def test_a_grant_again_keeps_the_token_and_a_revoke_drops_it():
    doc = memberside.members_apply(first(), grant("bob", 1.0))[0]
    doc = memberside.members_set_token(doc, token("bob", D1, 2.0))[0]
    doc = memberside.members_apply(doc, grant("bob", 3.0, role="admin"))[0]
    assert doc["members"]["bob"]["role"] == "admin"
    assert doc["members"]["bob"]["token_sha256"] == D1
    doc = memberside.members_apply(doc, revoke("bob", 4.0))[0]
    assert "token_sha256" not in doc["revoked"]["bob"]
    # Granted again after the revoke: the old digest does not come back, from any copy.
    again = memberside.members_apply(doc, grant("bob", 5.0))[0]
    stale = memberside.members_set_token(memberside.members_apply(first(), grant("bob", 1.0))[0],
                                         token("bob", D1, 2.0))[0]
    for a, b in ((again, stale), (stale, again)):
        merged = memberside.members_merge(a, b)
        assert merged["members"]["bob"]["stamp"] == [5.0, "c1"]
        assert "token_sha256" not in merged["members"]["bob"]


def test_a_token_and_a_grant_made_at_once_keep_each_other():
    """One host took the new grant (another role), another the new token: merged, the grant's
    role and the token's digest are both there, in both orders."""
    base = memberside.members_apply(first(), grant("bob", 1.0))[0]
    base = memberside.members_set_token(base, token("bob", D1, 2.0))[0]
    regranted = memberside.members_apply(base, grant("bob", 3.0, role="admin"))[0]
    republished = memberside.members_set_token(base, token("bob", D2, 4.0))[0]
    for a, b in itertools.permutations([regranted, republished, base], 2):
        merged = memberside.members_merge(a, b)
        assert merged == memberside.members_merge(b, a)
        assert memberside.members_merge(merged, b) == merged
    merged = memberside.members_merge(regranted, republished)
    assert merged["members"]["bob"]["role"] == "admin"
    assert merged["members"]["bob"]["token_sha256"] == D2
    # A token published for the first grant only, older than the second grant, still holds
    # when the host that took the second grant had it (the grant carried it over).
    assert memberside.members_merge(regranted, base)["members"]["bob"]["token_sha256"] == D1


def test_sync_carries_the_digest_to_a_host_made_later(team):
    doc = memberside.members_set_token(first(), token("alice", D1, 1.0))[0]
    answer = memberside.op_members_sync({"doc": doc})
    assert answer["doc"]["members"]["alice"]["token_sha256"] == D1


def test_the_op_is_sent_to_the_hosts():
    source = ssh.host_source().decode("utf-8")
    assert "def op_member_token(" in source and '"member_token": op_member_token' in source
