# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""tasks.membership's side of a member's service token: its digest published on every host
of a fleet, refused for a user who is not a member, and a rotated one published again on the
fleets that held the old one, each host being tasks.hostside.memberside in a folder of its own
(the HostNode of test_membership)."""

from __future__ import annotations

import pytest
from ansible_collections.gpufleet.cluster.plugins.module_utils.tasks import membership

from .test_membership import HostNode, bob_key, change, docs, fleet  # noqa: F401 (fixture)

D1, D2, D3 = "1" * 64, "2" * 64, "3" * 64


def digests(fleet, user):  # noqa: F811 (the fixture's name)
    return [((d or {}).get("members") or {}).get(user, {}).get("token_sha256")
            for d in docs(fleet)]


def test_a_member_publishes_their_digest_on_every_host(fleet):  # noqa: F811
    membership.ensure(fleet["record"], fleet["root"], "alice")
    done = membership.publish_token(fleet["hosts"], "f", "alice", D1, fleet["root"])
    assert done == {"fleet": "f", "hosts": ["f-0", "f-1"], "changed": True, "unreached": {}}
    assert digests(fleet, "alice") == [D1, D1]
    # A later digest replaces it; the same one again changes nothing.
    assert membership.publish_token(fleet["hosts"], "f", "alice", D2, fleet["root"],
                                    now=2e9)["changed"] is True
    assert membership.publish_token(fleet["hosts"], "f", "alice", D1, fleet["root"],
                                    now=1.0)["changed"] is False
    assert digests(fleet, "alice") == [D2, D2]


def test_a_user_who_is_not_a_member_is_refused_on_every_host(fleet):  # noqa: F811
    membership.ensure(fleet["record"], fleet["root"], "alice")
    with pytest.raises(membership.MembershipError) as caught:
        membership.publish_token(fleet["hosts"], "f", "bob", D1, fleet["root"])
    message = str(caught.value)
    assert message.startswith("cannot publish the service token of bob on fleet f: ")
    assert "bob is not a member of fleet f" in message and "\n" not in message
    assert digests(fleet, "bob") == [None, None]


def test_a_host_that_does_not_answer_is_reported_and_the_others_take_it(fleet):  # noqa: F811
    membership.ensure(fleet["record"], fleet["root"], "alice")
    fleet["hosts"]["f-1"].down = True
    done = membership.publish_token(fleet["hosts"], "f", "alice", D1, fleet["root"])
    assert done["hosts"] == ["f-0"] and list(done["unreached"]) == ["f-1"]
    fleet["hosts"]["f-0"].down = True
    with pytest.raises(membership.MembershipError, match="unreachable over SSH"):
        membership.publish_token(fleet["hosts"], "f", "alice", D2, fleet["root"])


@pytest.mark.parametrize("digest", ["", "A" * 64, "1" * 63, None, "gft_" + "a" * 43])
def test_a_digest_that_is_not_one_is_refused_before_any_host(fleet, digest):  # noqa: F811
    membership.ensure(fleet["record"], fleet["root"], "alice")
    fleet["hosts"]["f-0"].down = fleet["hosts"]["f-1"].down = True
    with pytest.raises(membership.MembershipError, match="lower-case hex SHA-256"):
        membership.publish_token(fleet["hosts"], "f", "alice", digest, fleet["root"])


def test_a_grant_publishes_no_token(fleet):  # noqa: F811
    membership.ensure(fleet["record"], fleet["root"], "alice")
    change(fleet, "grant", key_file=bob_key(fleet["tmp"]))
    assert digests(fleet, "bob") == [None, None]
    membership.publish_token(fleet["hosts"], "f", "bob", D1, fleet["root"])
    assert digests(fleet, "bob") == [D1, D1]
    change(fleet, "revoke")
    assert all("token_sha256" not in d["revoked"]["bob"] for d in docs(fleet))


def test_a_rotated_token_goes_to_the_fleets_that_held_the_old_one(fleet, tmp_path,  # noqa: F811
                                                                   monkeypatch):
    membership.ensure(fleet["record"], fleet["root"], "alice")
    other = {"g-0": HostNode("g-0", tmp_path)}
    key = membership.identity.read_public_key(bob_key(tmp_path, "alice"))
    other["g-0"].call("members_sync", {"doc": membership.first_doc("g", "alice", key, "c")})
    nodes = {"f": fleet["hosts"], "g": other}
    monkeypatch.setattr(membership, "nodes_of", lambda record, root: dict(nodes[record["name"]]))
    records = [fleet["record"], {"name": "g", "instances": [{"name": "g-0"}]}]
    membership.publish_token(fleet["hosts"], "f", "alice", D1, fleet["root"])
    done = membership.republish_token(records, "alice", D1, D2, fleet["root"])
    assert done == {"published": ["f"], "unread": {}}
    assert digests(fleet, "alice") == [D2, D2]
    # Fleet g never held alice's token: it does not get one.
    assert "token_sha256" not in other["g-0"].call("members")["doc"]["members"]["alice"]
    # A fleet none of whose hosts answers is reported, and the others are still done.
    fleet["hosts"]["f-0"].down = fleet["hosts"]["f-1"].down = True
    done = membership.republish_token(records, "alice", D2, D3, fleet["root"])
    assert done["published"] == [] and list(done["unread"]) == ["f"]


def test_the_module_parameters_of_operation_token(fleet, monkeypatch):  # noqa: F811
    monkeypatch.setenv("GPUFLEET_USER", "alice")
    params = dict((k, v.get("default")) for k, v in membership.FLEET_MEMBERS_ARGS.items())
    assert membership.FLEET_MEMBERS_ARGS["token_sha256"]["no_log"] is True
    params.update(operation="ensure", record=fleet["record"], state_dir=fleet["root"])
    membership.run(params, docker=object())
    params.update(operation="token", fleet="f", token_sha256=D1, record=None)
    done = membership.run(params, docker=object())
    assert done == {"user": "alice", "published": ["f"], "unread": {}, "changed": True}
    assert digests(fleet, "alice") == [D1, D1]
    # In check mode nothing is written.
    params.update(token_sha256=D3)
    assert membership.run(params, check_mode=True, docker=object())["changed"] is False
    assert digests(fleet, "alice") == [D1, D1]
    # A rotate: the fleets come from collect, and only those holding the old digest change.
    params.update(fleet=None, token_sha256=D2, replaces_sha256=D1)
    seen = []
    done = membership.run(params, docker=object(),
                          collect=lambda root, docker: seen.append(root) or [fleet["record"]])
    assert done["published"] == ["f"] and seen == [fleet["root"]]
    assert digests(fleet, "alice") == [D2, D2]


@pytest.mark.parametrize("given, message", [
    ({"fleet": "f", "token_sha256": D1, "user": "bob"}, "only their own service token"),
    ({"fleet": "f"}, "operation=token needs token_sha256"),
    ({"token_sha256": D1}, "needs fleet, or replaces_sha256"),
    ({"fleet": "f", "token_sha256": "nope"}, "lower-case hex SHA-256"),
])
def test_operation_token_refuses_bad_parameters(fleet, monkeypatch, given, message):  # noqa: F811
    monkeypatch.setenv("GPUFLEET_USER", "alice")
    params = dict((k, v.get("default")) for k, v in membership.FLEET_MEMBERS_ARGS.items())
    params.update(operation="token", state_dir=fleet["root"], **given)
    with pytest.raises(membership.MembershipError, match=message):
        membership.run(params, docker=object())
