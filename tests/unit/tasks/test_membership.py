# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""tasks.membership: a fleet's members read from and changed on every host, each host being
tasks.hostside.memberside in a folder of its own (no SSH). Bad input leaves every host as it
was; a host made later gets the document; two controllers' changes end in one state. A
member's service token digest is published on every host, for members only, and a rotated one
again on the fleets that held the old one."""

from __future__ import annotations

import threading

import pytest
from ansible_collections.gpufleet.cluster.plugins.module_utils.tasks import membership
from ansible_collections.gpufleet.cluster.plugins.module_utils.tasks.hostside import (
    memberside,
    nodeside,
    notifyside,
)
from ansible_collections.gpufleet.cluster.plugins.module_utils.tasks import notifications
from ansible_collections.gpufleet.cluster.plugins.module_utils.tasks.ssh import NodeError
from ansible_collections.gpufleet.cluster.plugins.module_utils.teams import members as team

FLEET_KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIAJnSj3r8XiEGyhwJEKqijnJSQwzMpTg90UgVPGn1ovW"
_ONE_AT_A_TIME = threading.Lock()


class HostNode:
    """A host: memberside's and notifyside's hooks operations over a team folder, a notify
    folder and a home of its own (no tick is started)."""

    def __init__(self, name, base, down=False):
        self.name = name
        self.team = base / name / "team"
        self.home = base / name / "home"
        (self.home / ".ssh").mkdir(parents=True)
        (self.home / ".ssh" / "authorized_keys").write_text(FLEET_KEY + " fleet\n")
        self.instance = {"name": name, "user": "gpufleet"}
        self.down = down

    def call(self, op, payload=None, timeout=None):
        if self.down:
            raise NodeError(self.name, "unreachable over SSH: no route", silent=True)
        with _ONE_AT_A_TIME, pytest.MonkeyPatch.context() as patch:
            patch.setattr(memberside, "TEAM_ROOT", str(self.team))
            patch.setattr(memberside, "_members_home", lambda user: str(self.home))
            patch.setattr(notifyside, "NOTIFY_ROOT", str(self.team.parent / "notify"))
            patch.setattr(notifyside, "tick_ensure", lambda: "loop")
            patch.setattr(notifyside, "event_end", lambda: [None, 0])
            try:
                if op.startswith("notify_"):
                    return notifyside.BOOK_OPS[op](payload or {})
                return nodeside.OPS[op](payload or {})
            except nodeside.Failure as exc:
                raise NodeError(self.name, str(exc)) from exc

    def keys(self):
        return (self.home / ".ssh" / "authorized_keys").read_text()


@pytest.fixture
def fleet(tmp_path, monkeypatch):
    root = tmp_path / "state"
    key = root / "fleets" / "f" / "id_ed25519"
    key.parent.mkdir(parents=True)
    key.write_text("private\n")
    (tmp_path / "state" / "fleets" / "f" / "id_ed25519.pub").write_text(FLEET_KEY + " f\n")
    hosts = {n: HostNode(n, tmp_path) for n in ("f-0", "f-1")}
    record = {"name": "f", "fleet_type": "backend",
              "instances": [{"name": n, "identity_file": str(key)} for n in hosts]}
    monkeypatch.setattr(membership, "find", lambda name, docker, root, settings=None: record)
    monkeypatch.setattr(membership, "nodes_of", lambda rec, root: dict(hosts))
    published = []
    monkeypatch.setattr(membership.access, "publish",
                        lambda *args: published.append(args[1:3]) or False)
    return {"root": str(root), "hosts": hosts, "record": record, "published": published,
            "tmp": tmp_path}


def bob_key(tmp_path, name="bob"):
    path = tmp_path / (name + ".pub")
    path.write_text("ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIGa0bQ0HwQ1m3y6fP3m3Ebx0r2b2p0m8wQeS"
                    "7pQ6Qd6F %s\n" % name)
    return str(path)


def change(fleet, operation, by="alice", **given):
    return membership.change("f", operation, by, given.pop("user", "bob"), root=fleet["root"],
                             docker=None, **given)


def docs(fleet):
    return [h.call("members")["doc"] for h in fleet["hosts"].values()]


def test_apply_makes_the_first_document_with_the_creator_as_admin(fleet):
    done = membership.ensure(fleet["record"], fleet["root"], "alice")
    assert done["made"] and done["synced"] == ["f-0", "f-1"]
    for doc in docs(fleet):
        assert doc["members"]["alice"]["role"] == "admin"
        assert doc["members"]["alice"]["key"].split()[:2] == FLEET_KEY.split()
    # The creator's key is the fleet's own: no second line for it.
    assert fleet["hosts"]["f-0"].keys() == FLEET_KEY + " fleet\n"
    assert membership.ensure(fleet["record"], fleet["root"], "zoe")["made"] is False


def test_grant_reaches_every_host_and_revoke_takes_it_out(fleet):
    membership.ensure(fleet["record"], fleet["root"], "alice")
    answer = change(fleet, "grant", key_file=bob_key(fleet["tmp"]))
    assert answer["changed"] and [r["user"] for r in answer["members"]] == ["alice", "bob"]
    for host in fleet["hosts"].values():
        assert "gpufleet-member fleet=f user=bob" in host.keys()
    assert fleet["published"][-1][0] == "bob" and fleet["published"][-1][1].startswith("SHA256:")
    assert change(fleet, "grant", key_file=bob_key(fleet["tmp"]))["changed"] is False
    change(fleet, "revoke")
    for host in fleet["hosts"].values():
        assert host.keys() == FLEET_KEY + " fleet\n"
    assert fleet["published"][-1] == ("bob", None)


@pytest.mark.parametrize("operation, given, message", [
    ("revoke", {"user": "zed"}, "zed is not a member of fleet f"),
    ("limit", {"user": "*", "limits": {"runs": -1}}, "--runs -1 is not a limit"),
    ("grant", {"user": "dave", "key_file": "/nonexistent.pub"}, "cannot read the key file"),
])
def test_bad_input_leaves_every_host_as_it_was(fleet, operation, given, message):
    membership.ensure(fleet["record"], fleet["root"], "alice")
    before = docs(fleet)
    with pytest.raises(team.MembersError, match=message):
        change(fleet, operation, **given)
    assert docs(fleet) == before


def test_a_revoked_member_and_a_non_admin_are_refused(fleet):
    membership.ensure(fleet["record"], fleet["root"], "alice")
    change(fleet, "grant", key_file=bob_key(fleet["tmp"]))
    with pytest.raises(team.MembersError, match="bob is not an admin of fleet f"):
        change(fleet, "grant", by="bob", user="eve", key_file=bob_key(fleet["tmp"], "eve"))
    change(fleet, "revoke")
    with pytest.raises(team.MembersError, match="alice revoked them on "):
        change(fleet, "revoke")


def test_a_host_without_the_document_gets_it_with_the_next_change(fleet):
    membership.ensure(fleet["record"], fleet["root"], "alice")
    fleet["hosts"]["f-2"] = HostNode("f-2", fleet["tmp"])
    change(fleet, "limit", user=team.DEFAULT, limits={"runs": 3})
    for doc in docs(fleet):
        assert doc["limits"]["*"]["runs"] == 3 and "alice" in doc["members"]


def test_ensure_copies_the_document_to_a_host_made_later(fleet):
    membership.ensure(fleet["record"], fleet["root"], "alice")
    change(fleet, "grant", key_file=bob_key(fleet["tmp"]))
    fleet["hosts"]["f-2"] = HostNode("f-2", fleet["tmp"])
    done = membership.ensure(fleet["record"], fleet["root"], "zoe", make=False)
    assert done == {"made": False, "synced": ["f-2"], "unread": {}}
    assert "user=bob" in fleet["hosts"]["f-2"].keys()


def test_a_host_that_cannot_be_read_stops_the_change_before_anything_is_written(fleet):
    membership.ensure(fleet["record"], fleet["root"], "alice")
    fleet["hosts"]["f-1"].down = True
    with pytest.raises(membership.MembershipError, match="some of its hosts cannot be read"):
        change(fleet, "grant", key_file=bob_key(fleet["tmp"]))
    fleet["hosts"]["f-1"].down = False
    assert "bob" not in docs(fleet)[0]["members"]


def test_two_controllers_at_once_end_in_one_state_on_every_host(fleet):
    membership.ensure(fleet["record"], fleet["root"], "alice")
    change(fleet, "grant", key_file=bob_key(fleet["tmp"]))
    change(fleet, "grant", user="carol", admin=True, key_file=bob_key(fleet["tmp"], "carol"))
    errors = []

    def one(by, operation, **given):
        try:
            change(fleet, operation, by=by, **given)
        except Exception as exc:  # pylint: disable=broad-exception-caught
            errors.append(exc)

    threads = [threading.Thread(target=one, args=("alice", "limit"),
                                kwargs={"user": "*", "limits": {"runs": 1}}),
               threading.Thread(target=one, args=("carol", "limit"),
                                kwargs={"user": "*", "limits": {"runs": 5}}),
               threading.Thread(target=one, args=("carol", "revoke"))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors
    first, second = docs(fleet)
    assert first == second and "bob" in first["revoked"]
    assert first["limits"]["*"]["runs"] in (1, 5)


def test_the_module_parameters(fleet, monkeypatch):
    monkeypatch.setenv("GPUFLEET_USER", "alice")
    params = dict((k, v.get("default")) for k, v in membership.FLEET_MEMBERS_ARGS.items())
    params.update(operation="ensure", record=fleet["record"], state_dir=fleet["root"])
    assert membership.run(params, docker=object())["made"] is True
    params.update(operation="limit", fleet="f", user="bob", default=True)
    with pytest.raises(membership.MembershipError, match="give user or default"):
        membership.run(params, docker=object())
    params.update(operation="list", user=None, default=False)
    listed = membership.run(params, docker=object())
    assert [r["user"] for r in listed["members"]] == ["alice"] and listed["changed"] is False


def test_apply_leaves_each_hosts_facts_there_and_a_member_reads_them(fleet, monkeypatch):
    """ensure gives every host the facts its apply measured; a member's controller, with no
    facts cache of the fleet, reads them from the hosts once and caches them."""
    from ansible_collections.gpufleet.cluster.plugins.module_utils.tasks import surveys

    measured = {"f-0": {"cpus": 4, "internal_ip": "10.0.0.1"},
                "f-1": {"cpus": 8, "internal_ip": "10.0.0.2"}}
    record = dict(fleet["record"], instances=[dict(i, resources=measured[i["name"]])
                                              for i in fleet["record"]["instances"]])
    membership.ensure(record, fleet["root"], "alice")
    assert membership.host_facts(fleet["hosts"]) == measured
    member_root = str(fleet["tmp"] / "bob-state")
    seen = dict(record, access="member", facts={}, instances=[
        dict(i, hostname="h" + i["name"]) for i in record["instances"]])
    monkeypatch.setattr(surveys, "Node", lambda instance, root=None: fleet["hosts"][instance["name"]])
    surveys.member_facts([seen], member_root)
    assert seen["facts"] == measured
    assert surveys.state.read_facts(member_root, "f") == measured
    # A key fleet (its facts are this controller's own cache) is never asked.
    mine = dict(seen, access="key", facts={})
    surveys.member_facts([mine], member_root)
    assert mine["facts"] == {}


# ---- a member's service token: its digest published on every host of the fleet ----------

D1, D2, D3 = "1" * 64, "2" * 64, "3" * 64


def digests(fleet, user):
    return [((d or {}).get("members") or {}).get(user, {}).get("token_sha256")
            for d in docs(fleet)]


def test_a_member_publishes_their_digest_on_every_host(fleet):
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


def test_a_user_who_is_not_a_member_is_refused_on_every_host(fleet):
    membership.ensure(fleet["record"], fleet["root"], "alice")
    with pytest.raises(membership.MembershipError) as caught:
        membership.publish_token(fleet["hosts"], "f", "bob", D1, fleet["root"])
    message = str(caught.value)
    assert message.startswith("cannot publish the service token of bob on fleet f: ")
    assert "bob is not a member of fleet f" in message and "\n" not in message
    assert digests(fleet, "bob") == [None, None]


def test_a_host_that_does_not_answer_is_reported_and_the_others_take_it(fleet):
    membership.ensure(fleet["record"], fleet["root"], "alice")
    fleet["hosts"]["f-1"].down = True
    done = membership.publish_token(fleet["hosts"], "f", "alice", D1, fleet["root"])
    assert done["hosts"] == ["f-0"] and list(done["unreached"]) == ["f-1"]
    fleet["hosts"]["f-0"].down = True
    with pytest.raises(membership.MembershipError, match="unreachable over SSH"):
        membership.publish_token(fleet["hosts"], "f", "alice", D2, fleet["root"])


@pytest.mark.parametrize("digest", ["", "A" * 64, "1" * 63, None, "gft_" + "a" * 43])
def test_a_digest_that_is_not_one_is_refused_before_any_host(fleet, digest):
    membership.ensure(fleet["record"], fleet["root"], "alice")
    fleet["hosts"]["f-0"].down = fleet["hosts"]["f-1"].down = True
    with pytest.raises(membership.MembershipError, match="lower-case hex SHA-256"):
        membership.publish_token(fleet["hosts"], "f", "alice", digest, fleet["root"])


def test_a_grant_publishes_no_token(fleet):
    membership.ensure(fleet["record"], fleet["root"], "alice")
    change(fleet, "grant", key_file=bob_key(fleet["tmp"]))
    assert digests(fleet, "bob") == [None, None]
    membership.publish_token(fleet["hosts"], "f", "bob", D1, fleet["root"])
    assert digests(fleet, "bob") == [D1, D1]
    change(fleet, "revoke")
    assert all("token_sha256" not in d["revoked"]["bob"] for d in docs(fleet))


def test_a_rotated_token_goes_to_the_fleets_that_held_the_old_one(fleet, tmp_path, monkeypatch):
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


def test_the_module_parameters_of_operation_token(fleet, monkeypatch):
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
def test_operation_token_refuses_bad_parameters(fleet, monkeypatch, given, message):
    monkeypatch.setenv("GPUFLEET_USER", "alice")
    params = dict((k, v.get("default")) for k, v in membership.FLEET_MEMBERS_ARGS.items())
    params.update(operation="token", state_dir=fleet["root"], **given)
    with pytest.raises(membership.MembershipError, match=message):
        membership.run(params, docker=object())


def test_a_fleet_apply_copies_the_fleets_hooks_to_the_hosts_it_added(tmp_path):
    nodes = dict((name, HostNode(name, tmp_path)) for name in ("gpus-0", "gpus-1"))
    hook = {"id": "ops", "url": "https://hooks.example/services/T0/B1/secret", "on": [],
            "fleet": "gpus", "format": "slack", "by": "ann"}
    nodes["gpus-0"].call("notify_set", {"hook": hook})

    answer = notifications.copy_to_new_hosts(nodes)

    assert answer == {"copied": {"gpus-1": ["ops"]}, "unreachable": {}}
    (kept,) = nodes["gpus-1"].call("notify_list")["hooks"]
    assert kept["id"] == "ops" and kept["url"] == "https://hooks.example/..."
    assert notifications.copy_to_new_hosts(nodes)["copied"] == {}


def test_a_hook_removed_while_a_host_was_away_is_not_copied_back(tmp_path):
    nodes = dict((name, HostNode(name, tmp_path)) for name in ("gpus-0", "gpus-1", "gpus-2"))
    hook = {"id": "ops", "url": "https://hooks.example/services/T0/B1/secret", "on": [],
            "fleet": "gpus", "format": "json", "by": "ann"}
    nodes["gpus-0"].call("notify_set", {"hook": hook})
    nodes["gpus-1"].call("notify_set", {"hook": hook})
    nodes["gpus-1"].call("notify_remove", {"id": "ops"})   # gpus-0 was away then

    answer = notifications.copy_to_new_hosts(nodes)

    assert answer["copied"] == {}
    assert nodes["gpus-2"].call("notify_list")["hooks"] == []
