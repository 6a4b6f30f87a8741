"""A fleet's members on the task world's 3-node local fleet: the world's creator (controller A)
grants a second person B (a second identity and state dir), B's own key then reaches every
host, ``fleet members`` lists B, bad input is refused in one line and leaves the hosts as they
were, two controllers' concurrent changes end in one state on every host, and after the
revoke the hosts refuse B's plain ``ssh``. Granted, B submits from his own controller as A does,
and each run names its submitter.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

from ansible_collections.gpufleet.cluster.plugins.module_utils.tasks.ssh import Node

from gpufleet import api

from .task_world import CPU, FLEET, SUFFIX

GPUFLEET = os.path.join(os.path.dirname(sys.executable), "gpufleet")   # the command


def gpufleet(*args, env=None, timeout=240):
    return subprocess.run([GPUFLEET] + list(args), capture_output=True, text=True,
                          env=dict(os.environ, **(env or {})), timeout=timeout, check=False)


def keygen(path):
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", path.name, "-f",
                    str(path)], check=True)
    return path


def plain_ssh(instance, key):
    """B's own ssh to a host, as B would type it: only B's key."""
    return subprocess.run(
        ["ssh", "-T", "-o", "BatchMode=yes", "-o", "IdentitiesOnly=yes", "-o",
         "StrictHostKeyChecking=no", "-o", "UserKnownHostsFile=/dev/null", "-o",
         "ConnectTimeout=20", "-o", "LogLevel=ERROR", "-i", str(key), "-p",
         str(instance["port"]), "%s@%s" % (instance["user"], instance["hostname"]), "true"],
        capture_output=True, text=True, timeout=60, check=False)


def host_docs(world):
    """Each host's own members document (not the merged view)."""
    root = os.environ["GPUFLEET_STATE_DIR"]
    return {i["name"]: Node(i, root=root).call("members")["doc"]
            for i in world["fleet"]["instances"]}


def test_grant_lets_a_member_in_on_every_host_and_revoke_takes_them_out(world, tmp_path):
    listed = api.fleet_members(FLEET)
    admins = [r["user"] for r in listed["members"] if r["role"] == "admin"]
    assert admins, listed
    alice = {"GPUFLEET_USER": admins[0]}
    bob = "bob-" + SUFFIX
    bob_key = keygen(tmp_path / "bob")
    bob_env = {"GPUFLEET_USER": bob, "GPUFLEET_IDENTITY": str(bob_key),
               "GPUFLEET_STATE_DIR": str(tmp_path / "bob-state")}
    instances = world["fleet"]["instances"]
    assert all(plain_ssh(i, bob_key).returncode == 255 for i in instances)

    done = gpufleet("fleet", "grant", FLEET, "--user", bob, "--key", str(bob_key) + ".pub",
                    "--admin", env=alice)
    assert done.returncode == 0, done.stderr
    assert done.stdout == "%s is an admin of fleet %s\n" % (bob, FLEET)
    try:
        for instance in instances:
            reached = plain_ssh(instance, bob_key)
            assert reached.returncode == 0, (instance["name"], reached.stderr)
        shown = gpufleet("fleet", "members", FLEET, "--json", env=alice)
        assert shown.returncode == 0, shown.stderr
        rows = {r["user"]: r for r in json.loads(shown.stdout)["members"]}
        assert rows[bob]["role"] == "admin" and rows[bob]["by"] == admins[0]
        table = gpufleet("fleet", "members", FLEET, env=alice).stdout
        assert bob in table and "GRANTED BY" in table.splitlines()[0]

        # Bad input: one line each, and no host changed.
        before = host_docs(world)
        (tmp_path / "not-a-key").write_text("hello\n")
        bad = [
            (("fleet", "grant", FLEET, "--user", "eve", "--key", str(bob_key)), alice,
             "is a private key"),
            (("fleet", "grant", FLEET, "--user", "eve", "--key", str(tmp_path / "not-a-key")),
             alice, "is not an OpenSSH public key"),
            (("fleet", "revoke", FLEET, "--user", "nobody-" + SUFFIX), alice,
             "nobody-%s is not a member of fleet %s" % (SUFFIX, FLEET)),
            (("fleet", "limit", FLEET, "--user", bob, "--runs", "-1"), alice,
             "--runs -1 is not a limit"),
            (("fleet", "grant", FLEET, "--user", "eve", "--key", str(bob_key) + ".pub"),
             {"GPUFLEET_USER": "eve-" + SUFFIX}, "eve-%s is not an admin of fleet" % SUFFIX),
        ]
        for args, env, message in bad:
            refused = gpufleet(*args, env=env)
            assert refused.returncode == 1, (args, refused.stdout, refused.stderr)
            assert len(refused.stderr.splitlines()) == 1 and message in refused.stderr, \
                (args, refused.stderr)
        assert host_docs(world) == before

        # Two controllers at once: A from the world's state dir, B from its own with its key.
        both = [subprocess.Popen([GPUFLEET, "fleet", "limit", FLEET, "--user", bob, "--runs",
                                  str(runs)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                 text=True, env=dict(os.environ, **env))
                for runs, env in ((1, alice), (2, bob_env))]
        for proc in both:
            _out, err = proc.communicate(timeout=240)
            assert proc.returncode == 0, err
        docs = list(host_docs(world).values())
        assert all(d == docs[0] for d in docs), docs
        assert docs[0]["limits"][bob]["runs"] in (1, 2)

        # Both submit: B from his own state dir with his own key (his controller never applied
        # the fleet: it reads the hosts' facts from the hosts), A from the world's. Each run
        # names its submitter, and B's ps lists both.
        runs = {}
        for who, env in ((bob, bob_env), (admins[0], alice)):
            name = "mem%d-%s" % (len(runs), SUFFIX)
            path = tmp_path / (name + ".dstack.yml")
            # retry: other files' runs may still hold the worker's shared world.
            path.write_text("type: task\nname: %s\nimage: %s\nfleets: [%s]\n%scommands: [sleep 2]\n"
                            "retry:\n  on_events: [no-capacity]\n  duration: 5m\n"
                            % (name, world["base_image"], FLEET, CPU))
            submitted = gpufleet("apply", "-f", str(path), "-y", "-d", env=env)
            assert submitted.returncode == 0, (who, submitted.stdout, submitted.stderr)
            runs[name] = who
        deadline = time.time() + 360
        while True:
            listed = gpufleet("ps", "--json", env=bob_env)
            assert listed.returncode == 0, listed.stderr
            rows = dict((r["name"], r) for r in json.loads(listed.stdout))
            if all(rows.get(n, {}).get("status") == "done" for n in runs):
                break
            assert time.time() < deadline, rows
            time.sleep(2)
        assert dict((n, rows[n]["user"]) for n in runs) == runs
    finally:
        gone = gpufleet("fleet", "revoke", FLEET, "--user", bob, env=alice)
    assert gone.returncode == 0, gone.stderr
    for instance in instances:
        refused = plain_ssh(instance, bob_key)
        assert refused.returncode == 255 and "Permission denied" in refused.stderr, \
            (instance["name"], refused.stderr)
    again = gpufleet("fleet", "revoke", FLEET, "--user", bob, env=alice)
    assert again.returncode == 1
    assert "%s revoked them on " % admins[0] in again.stderr
