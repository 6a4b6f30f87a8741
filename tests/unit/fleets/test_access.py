"""fleets/access.py: which fleets this controller may reach, told without SSH, and publishing a
member where the backend keeps it."""

from __future__ import annotations

import os

import pytest
from ansible_collections.gpufleet.cluster.plugins.module_utils.backends import local_members
from ansible_collections.gpufleet.cluster.plugins.module_utils.backends.docker_cli import Docker
from ansible_collections.gpufleet.cluster.plugins.module_utils.fleets import access, state
from ansible_collections.gpufleet.cluster.plugins.module_utils.tasks import surveys
from ansible_collections.gpufleet.cluster.plugins.module_utils.teams import identity

KEY = ("ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIGc0KD0pJ2cZ6fJ3bq1Wcq0x1ZpQ5y8k8Yl8Vd1pWm3a "
       "carol@lab")


class Engine(object):
    """A Docker engine's member volumes, answered as ``docker volume`` does."""

    def __init__(self):
        self.volumes = {}
        self.calls = []

    def __call__(self, argv, stdin=None):
        args = argv[1:]
        self.calls.append(args)
        if args[:2] == ["volume", "ls"]:
            lines = ["%s\t%s\t%s" % (labels[local_members.FLEET_LABEL],
                                     labels[local_members.MEMBER_LABEL],
                                     labels[local_members.FINGERPRINT_LABEL])
                     for labels in self.volumes.values()]
            return 0, ("\n".join(lines) + "\n").encode(), b""
        if args[:2] == ["volume", "create"]:
            labels = dict(a.split("=", 1) for a in args[2:-1] if "=" in a)
            self.volumes[args[-1]] = labels
        if args[:2] == ["volume", "rm"]:
            self.volumes.pop(args[-1], None)
        return 0, b"", b""


def docker(engine):
    return Docker(binary="docker", runner=engine)


def who(tmp_path, user="carol", key=True):
    path = tmp_path / ("id_" + user)
    path.write_text("private\n")
    public = None
    if key:
        public = identity.parse_public_key(KEY)
    return identity.Identity(user, str(path), public)


def record(name, backend="local", **instance):
    inst = dict({"name": name + "-0", "fleet": name, "backend": backend,
                 "identity_file": "/nowhere/%s/id_ed25519" % name, "hostname": "10.0.0.1",
                 "user": "gpufleet"}, **instance)
    return {"name": name, "fleet_type": "backend", "backends": [backend], "instances": [inst]}


def test_each_fleet_gets_its_access(tmp_path):
    root = str(tmp_path / "state")
    state.ensure_key(root, "mine")
    me = who(tmp_path)
    engine = Engine()
    local_members.set_member(docker(engine), "shared", "carol", me.public_key.fingerprint)
    records = [
        record("mine", made_from=root),
        record("shared", made_from="/other/state"),
        record("theirs", made_from="/other/state", creator="alice"),
        record("moved", made_from=root),                      # this state dir, key gone
        record("legacy"),                                     # says nothing: as before
        record("alices", backend="aws", creator="alice"),
        record("carols", backend="aws", creator="carol"),
        record("granted", backend="aws", creator="alice",
               members={"carol": me.public_key.fingerprint}),
    ]
    access.annotate(records, root, docker(engine), who=me)
    assert dict((r["name"], r["access"]) for r in records) == {
        "mine": "key", "shared": "member", "theirs": "no access", "moved": "key missing",
        "legacy": "key missing", "alices": "no access", "carols": "key missing",
        "granted": "member"}
    # A member's hosts are reached with this controller's identity; others keep theirs.
    by_name = dict((r["name"], r) for r in records)
    assert by_name["shared"]["instances"][0]["identity_file"] == me.identity_file
    assert by_name["granted"]["instances"][0]["identity_file"] == me.identity_file
    assert by_name["mine"]["instances"][0]["identity_file"] == "/nowhere/mine/id_ed25519"
    # The engine was asked for the members once, for all local fleets.
    assert [c[:2] for c in engine.calls].count(["volume", "ls"]) == 2  # set_member's + one


def test_the_engine_is_not_asked_when_every_key_is_here(tmp_path):
    root = str(tmp_path / "state")
    state.ensure_key(root, "mine")
    engine = Engine()
    access.annotate([record("mine", made_from=root)], root, docker(engine), who=who(tmp_path))
    assert engine.calls == []


def test_without_a_public_key_only_key_fleets_are_reached(tmp_path):
    root = str(tmp_path / "state")
    engine = Engine()
    me = who(tmp_path, key=False)
    local_members.set_member(docker(engine), "shared", "carol",
                             identity.parse_public_key(KEY).fingerprint)
    records = [record("shared", made_from="/other/state")]
    access.annotate(records, root, docker(engine), who=me)
    assert records[0]["access"] == "no access"


def test_a_gcp_member_is_compared_by_its_digest(tmp_path):
    from ansible_collections.gpufleet.cluster.plugins.module_utils.backends import gcp_layout

    me = who(tmp_path)
    digest = gcp_layout.member_mark(me.public_key.fingerprint)
    records = [record("g", backend="gcp", creator="alice", members={"carol": digest}),
               record("h", backend="gcp", creator="alice",
                      members={"carol": me.public_key.fingerprint})]
    access.annotate(records, str(tmp_path), None, who=me)
    assert [r["access"] for r in records] == ["member", "no access"]


def test_an_ssh_fleet_is_reached_through_its_file(tmp_path):
    key = tmp_path / "id_lab"
    key.write_text("k")
    here = record("lab", backend="ssh", identity_file=str(key))
    gone = record("old", backend="ssh", identity_file=str(tmp_path / "gone"))
    access.annotate([here, gone], str(tmp_path), None, who=who(tmp_path))
    assert here["access"] == "member" and here["instances"][0]["identity_file"] == str(key)
    assert gone["access"] == "key missing"   # its own file: named, as issue 32 does


def test_no_access_fleets_are_never_nodes_and_listed_once(tmp_path):
    fleets = [dict(record("mine"), access="key"), dict(record("theirs"), access="no access")]
    assert sorted(surveys.nodes_of(fleets)) == ["mine-0"]
    asked = []

    def refresh(records):
        asked.extend(r["name"] for r in records)
        return [dict(r, status="active") for r in records]

    listed = access.listed(fleets, refresh)
    assert asked == ["mine"]
    assert [(r["name"], r["status"]) for r in listed] == [("mine", "active"),
                                                          ("theirs", "no access")]


def test_publish_puts_and_removes_a_local_member(tmp_path):
    engine = Engine()
    fleet = record("lab")
    assert access.publish(fleet, "bob", "SHA256:x", docker(engine), str(tmp_path)) is True
    assert local_members.list_members(docker(engine)) == {"lab": {"bob": "SHA256:x"}}
    assert engine.volumes[local_members.member_volume("lab", "bob")][
        "gpufleet.fleet"] == "lab"   # deleting the fleet removes it with its other volumes
    assert access.publish(fleet, "bob", "SHA256:x", docker(engine), str(tmp_path)) is False
    assert access.publish(fleet, "bob", "SHA256:y", docker(engine), str(tmp_path)) is True
    assert local_members.list_members(docker(engine)) == {"lab": {"bob": "SHA256:y"}}
    assert access.publish(fleet, "bob", None, docker(engine), str(tmp_path)) is True
    assert local_members.list_members(docker(engine)) == {}
    # A config as fleets.lookup.find gives it works the same; an SSH fleet has nothing to do.
    config = {"name": "lab", "fleet_type": "backend", "backends": ["local"]}
    assert access.publish(config, "bob", "SHA256:x", docker(engine), str(tmp_path)) is True
    assert access.publish({"name": "s", "fleet_type": "ssh"}, "bob", "SHA256:x") is False


def test_publish_refuses_a_bad_user_name(tmp_path):
    with pytest.raises(identity.IdentityError, match="not valid"):
        access.publish(record("lab"), "Bob Smith", "SHA256:x", docker(Engine()), str(tmp_path))


def test_collect_fleets_leaves_out_a_fleet_with_no_access(tmp_path, monkeypatch):
    from ansible_collections.gpufleet.cluster.plugins.module_utils.fleets import apply

    root = str(tmp_path / "state")
    state.ensure_key(root, "mine")
    monkeypatch.setenv("GPUFLEET_USER", "carol")
    monkeypatch.setenv("GPUFLEET_IDENTITY", str(tmp_path / "none"))
    monkeypatch.setattr(apply, "local_fleet_nodes", lambda d: {})
    monkeypatch.setattr(apply, "discover", lambda *a, **k: [
        record("mine", made_from=root), record("theirs", made_from="/o", creator="alice")])
    found = surveys.collect_fleets((), docker(Engine()), root)
    assert [(f["name"], f["access"]) for f in found] == [("mine", "key")]
    every = surveys.collect_fleets((), docker(Engine()), root, unreachable=True)
    assert [(f["name"], f["access"]) for f in every] == [("mine", "key"),
                                                         ("theirs", "no access")]
    assert os.path.isdir(root)


def test_lookup_find_tells_the_access_of_a_fleet_found_by_its_labels(tmp_path, monkeypatch):
    from ansible_collections.gpufleet.cluster.plugins.module_utils.backends import base, local
    from ansible_collections.gpufleet.cluster.plugins.module_utils.fleets import lookup

    root = str(tmp_path / "state")
    me = who(tmp_path)
    node = {"name": "gpufleet-lab-0", "state": "running", "created": None,
            "networks": {"gpufleet-lab-0": "10.0.0.2"},
            "labels": {local.FLEET_LABEL: "lab", local.INSTANCE_LABEL: "0",
                       local.MADE_FROM_LABEL: "/other", local.CREATOR_LABEL: "alice"}}
    members = {}

    class Client(object):
        def fleet_instances(self, name, regions=None):
            return [node] if name == "lab" else []

        def all_members(self):
            return members

    monkeypatch.setattr(base, "client", lambda *a, **k: Client())
    monkeypatch.setattr(access, "me", lambda: me)
    config, path = lookup.find("lab", object(), root, {})
    assert path is None and config["access"] == "no access"
    members["lab"] = {"carol": me.public_key.fingerprint}
    assert lookup.find("lab", object(), root, {})[0]["access"] == "member"
