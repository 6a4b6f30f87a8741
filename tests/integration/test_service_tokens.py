"""Users' service tokens on the task world's 3-node local fleet: ``gpufleet token`` makes the
token once in the world's Vault store, ``--publish`` puts its SHA-256 in the user's own entry on
every host (through playbooks/members.yml and the hosts' ``member_token``), ``--rotate`` puts
the new digest in its place, a user who is not a member is refused in one line, and the token
itself is in no file of the state dir but the encrypted store, nor in the playbook's output at
-vvvv.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys

from ansible_collections.gpufleet.cluster.plugins.module_utils.tasks.ssh import Node

from gpufleet import api
from gpufleet.runner import run_playbook

from .task_world import FLEET, SUFFIX

GPUFLEET = os.path.join(os.path.dirname(sys.executable), "gpufleet")   # the command


def gpufleet(*args, env=None, timeout=240):
    return subprocess.run([GPUFLEET] + list(args), capture_output=True, text=True,
                          env=dict(os.environ, **(env or {})), timeout=timeout, check=False)


def digests(world, user):
    root = os.environ["GPUFLEET_STATE_DIR"]
    return {i["name"]: ((Node(i, root=root).call("members")["doc"] or {}).get("members") or {})
            .get(user, {}).get("token_sha256") for i in world["fleet"]["instances"]}


def sha(text):
    return hashlib.sha256(text.encode()).hexdigest()


def test_a_token_is_published_on_every_host_and_replaced_by_a_rotate(world, monkeypatch):
    monkeypatch.setenv("ANSIBLE_VAULT_PASSWORD_FILE", str(world["vault_password"]))
    state = os.environ["GPUFLEET_STATE_DIR"]
    admins = [r["user"] for r in api.fleet_members(FLEET)["members"] if r["role"] == "admin"]
    me = {"GPUFLEET_USER": admins[0]}
    hosts = [i["name"] for i in world["fleet"]["instances"]]

    shown = gpufleet("token", env=me)
    assert shown.returncode == 0 and shown.stderr == "", shown.stderr
    token = shown.stdout.strip()
    published = gpufleet("token", "--publish", FLEET, env=me)
    assert published.returncode == 0, published.stderr
    assert published.stdout == token + "\n"
    assert published.stderr == "Published on fleet %s.\n" % FLEET
    assert digests(world, admins[0]) == dict.fromkeys(hosts, sha(token))

    rotated = gpufleet("token", "--rotate", env=me)
    assert rotated.returncode == 0, rotated.stderr
    new = rotated.stdout.strip()
    assert new != token and FLEET in rotated.stderr
    assert digests(world, admins[0]) == dict.fromkeys(hosts, sha(new))

    # Someone who is not a member: one line, and no host changed.
    stranger = {"GPUFLEET_USER": "nobody-" + SUFFIX}
    refused = gpufleet("token", "--publish", FLEET, env=stranger)
    assert refused.returncode == 1 and refused.stdout == ""
    assert len(refused.stderr.splitlines()) == 1, refused.stderr
    assert "nobody-%s is not a member of fleet %s" % (SUFFIX, FLEET) in refused.stderr
    assert digests(world, "nobody-" + SUFFIX) == dict.fromkeys(hosts)

    # The playbook at -vvvv never sees the token (its digest only).
    monkeypatch.setenv("ANSIBLE_VERBOSITY", "4")
    result = run_playbook("members.yml", {
        "fleet_name": FLEET, "gpufleet_members_operation": "token", "gpufleet_user": admins[0],
        "gpufleet_member_token_sha256": sha(new)})
    monkeypatch.delenv("ANSIBLE_VERBOSITY")
    assert result.ok, result.stdout[-4000:]
    assert "task path:" in result.stdout and new not in result.stdout
    assert sha(new) not in result.stdout   # no_log: the digest is masked too

    store = os.path.join(state, "secrets.yml")
    for root, _dirs, files in os.walk(state):
        for file_name in files:
            path = os.path.join(root, file_name)
            if path != store:
                with open(path, "rb") as handle:
                    data = handle.read()
                assert new.encode() not in data and token.encode() not in data, path
