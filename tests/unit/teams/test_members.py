# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""teams.members: reading a fleet's members document, and the grant, revoke and limit changes
the controller makes, each bad input refused in one line naming what to do."""

from __future__ import annotations

import pytest
from ansible_collections.gpufleet.cluster.plugins.module_utils.teams import identity
from ansible_collections.gpufleet.cluster.plugins.module_utils.teams import members

KEY = ("ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIGa0bQ0HwQ1m3y6fP3m3Ebx0r2b2p0m8wQeS7pQ6Qd6F bob")
WHEN = [100.0, "c1"]

DOC = {"fleet": "f",
       "members": {"ann": {"role": "admin"}, "bob": {"role": "member"}, "cy": {}},
       "revoked": {"dee": {"by": "ann"}},
       "limits": {"*": {"runs": 2, "gpus": 8, "nodes": None},
                  "bob": {"runs": 1, "gpus": None}}}


def test_roles():
    assert members.role_of(DOC, "ann") == "admin" and members.is_admin(DOC, "ann")
    assert members.role_of(DOC, "bob") == "member" and not members.is_admin(DOC, "bob")
    assert members.role_of(DOC, "cy") == "member"
    assert members.role_of(DOC, "dee") is None
    assert members.role_of(None, "ann") is None


def test_own_limits_replace_the_default_field_by_field():
    assert members.limits_for(DOC, "bob") == {"runs": 1, "gpus": 8, "nodes": None}
    assert members.limits_for(DOC, "ann") == {"runs": 2, "gpus": 8, "nodes": None}
    assert members.limits_for({}, "ann") == {"runs": None, "gpus": None, "nodes": None}


def doc():
    return {"fleet": "f",
            "members": {"alice": {"role": "admin", "key": KEY, "fingerprint": "SHA256:a",
                                  "by": "alice", "stamp": [1.0, "c"]},
                        "bob": {"role": "member", "key": KEY, "fingerprint": "SHA256:b",
                                "by": "alice", "stamp": [2.0, "c"]}},
            "revoked": {"carol": {"by": "alice", "stamp": [1764400000.0, "c"]}},
            "limits": {"*": {"runs": 2, "gpus": None, "nodes": None}}}


def key():
    return identity.parse_public_key(KEY)


def test_roles_and_limits_read_from_the_document():
    assert members.role_of(doc(), "alice") == "admin" and members.role_of(doc(), "carol") is None
    assert members.limits_for(doc(), "bob") == {"runs": 2, "gpus": None, "nodes": None}


def test_a_grant_by_an_admin_carries_the_key_its_fingerprint_and_the_stamp():
    change = members.grant(doc(), "f", "alice", "dave", key(), True, WHEN)
    assert change == {"kind": "grant", "user": "dave", "role": "admin", "key": key().line(),
                      "fingerprint": key().fingerprint, "by": "alice", "stamp": WHEN}


def test_a_grant_by_a_non_admin_is_refused_naming_the_admins():
    with pytest.raises(members.MembersError) as info:
        members.grant(doc(), "f", "bob", "dave", key(), False, WHEN)
    assert str(info.value) == ("bob is not an admin of fleet f: only its admins (alice) grant, "
                               "revoke and set limits; ask one of them")


def test_a_key_file_that_is_not_a_public_key_is_refused(tmp_path):
    private = tmp_path / "id"
    private.write_text("-----BEGIN OPENSSH PRIVATE KEY-----\nabc\n")
    with pytest.raises(members.MembersError, match="is a private key: give the public key"):
        members.read_key(str(private))
    (tmp_path / "junk").write_text("hello world\n")
    with pytest.raises(members.MembersError, match="is not an OpenSSH public key"):
        members.read_key(str(tmp_path / "junk"))
    with pytest.raises(members.MembersError, match="cannot read the key file"):
        members.read_key(str(tmp_path / "missing.pub"))


def test_an_unknown_member_is_refused():
    with pytest.raises(members.MembersError) as info:
        members.revoke(doc(), "f", "alice", "zed", WHEN)
    assert str(info.value) == "zed is not a member of fleet f (gpufleet fleet members f lists them)"
    with pytest.raises(members.MembersError, match="zed is not a member"):
        members.limit(doc(), "f", "alice", "zed", {"runs": 1}, WHEN)


def test_a_revoked_member_is_refused_naming_who_revoked_them_and_when():
    with pytest.raises(members.MembersError) as info:
        members.revoke(doc(), "f", "alice", "carol", WHEN)
    assert str(info.value) == (
        "carol is no longer a member of fleet f: alice revoked them on 2025-11-29 07:06:40 UTC "
        "(grant them again with gpufleet fleet grant f --user carol --key KEY_FILE)")
    with pytest.raises(members.MembersError, match="alice revoked them"):
        members.limit(doc(), "f", "alice", "carol", {"runs": 1}, WHEN)


def test_a_limit_below_zero_is_refused():
    with pytest.raises(members.MembersError) as info:
        members.limit(doc(), "f", "alice", "bob", {"runs": -1}, WHEN)
    assert str(info.value) == "--runs -1 is not a limit: give a count of 0 or more"
    with pytest.raises(members.MembersError, match="give at least one limit"):
        members.limit(doc(), "f", "alice", "bob", {}, WHEN)


def test_a_limit_keeps_the_fields_not_given_and_the_default_is_star():
    held = dict(doc(), limits={"bob": {"runs": 1, "gpus": 8, "nodes": None}})
    change = members.limit(held, "f", "alice", "bob", {"gpus": 4}, WHEN)
    assert (change["runs"], change["gpus"], change["nodes"]) == (1, 4, None)
    change = members.limit(doc(), "f", "alice", members.DEFAULT, {"nodes": 0}, WHEN)
    assert change["user"] == "*" and change["nodes"] == 0


def test_the_last_admin_is_not_revoked_and_a_bad_user_name_is_refused():
    with pytest.raises(members.MembersError, match="alice is the only admin of fleet f"):
        members.revoke(doc(), "f", "alice", "alice", WHEN)
    with pytest.raises(identity.IdentityError, match="user name 'Bad Name' is not valid"):
        members.grant(doc(), "f", "alice", "Bad Name", key(), False, WHEN)


def test_table_rows_put_admins_first_with_their_limits():
    rows = members.table_rows(doc())
    assert [(r["user"], r["role"], r["by"]) for r in rows] == [
        ("alice", "admin", "alice"), ("bob", "member", "alice")]
    assert rows[1]["limits"]["runs"] == 2
    assert members.table_rows(None) == []


def test_a_stamp_is_the_time_and_the_controller():
    assert members.stamp("c9", 5) == [5.0, "c9"]
