"""teams.members: reading a fleet's members document."""

from __future__ import annotations

from ansible_collections.gpufleet.cluster.plugins.module_utils.teams import members

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
