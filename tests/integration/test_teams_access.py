"""Fleets a controller cannot reach (issue 34), on the task world's shared 3-node local fleet.

A third controller (its own state dir, GPUFLEET_USER=carol, its own key) sees the world fleet
as ``no access``: ``gpufleet fleet`` lists it once so, ``gpufleet ps`` exits 0 with nothing
about it and without trying its hosts. Once carol's fingerprint is published
(fleets.access.publish) and her key is in the nodes' authorized_keys (what ``gpufleet fleet
grant`` does; here by ``docker exec``), her controller reaches the fleet with her own identity:
``ps`` shows the world's run.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from ansible_collections.gpufleet.cluster.plugins.module_utils.backends import local
from ansible_collections.gpufleet.cluster.plugins.module_utils.fleets import access
from ansible_collections.gpufleet.cluster.plugins.module_utils.teams import identity

from gpufleet._collection import collections_path

from .task_world import CPU, FLEET, SUFFIX, run_task

BIN = Path(sys.executable).parent
NAME = "access-" + SUFFIX
SLEEP = "type: task\nname: {name}\nimage: {image}\nfleets: [{fleet}]\n" + CPU + \
    "retry:\n  on_events: [no-capacity]\n  duration: 5m\n" \
    "commands:\n  - sleep 300\n"
# Takes carol's key out of the login user's authorized_keys again (the stand-in for revoke).
UNAUTHORIZE = ('f=/home/%s/.ssh/authorized_keys; grep -vxF "$GPUFLEET_KEY" "$f" > "$f.new"; '
               'cat "$f.new" > "$f"; rm -f "$f.new"' % local.NODE_USER)


@pytest.fixture(scope="module")
def carol(world, tmp_path_factory):
    base = tmp_path_factory.mktemp("carol")
    key = base / "id_ed25519"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "carol",
                    "-f", str(key)], check=True)
    env = dict(os.environ, GPUFLEET_STATE_DIR=str(base / "state"), GPUFLEET_USER="carol",
               GPUFLEET_IDENTITY=str(key), ANSIBLE_COLLECTIONS_PATH=str(collections_path()),
               ANSIBLE_NOCOLOR="1")
    return {"env": env, "key": key, "public": identity.read_public_key(str(key) + ".pub")}


def gpufleet(env, *args):
    start = time.monotonic()
    proc = subprocess.run([str(BIN / "gpufleet")] + list(args), capture_output=True,
                          text=True, stdin=subprocess.DEVNULL, env=env, check=False,
                          timeout=300)
    return proc, time.monotonic() - start


def fleet_line(text, name):
    return [line for line in text.splitlines() if line.split()[:1] == [name]]


def test_a_fleet_with_no_access_is_listed_once_and_never_tried_then_a_member_reaches_it(
        world, carol):
    docker = world["docker"]
    result, _record = run_task(world, NAME, SLEEP.format(
        name=NAME, image=world["base_image"], fleet=FLEET), gpufleet_task_wait=False)
    assert result.ok, result.stdout[-3000:]
    line = carol["public"].line("carol")
    try:
        listed, _took = gpufleet(carol["env"], "fleet")
        assert listed.returncode == 0, listed.stdout + listed.stderr
        rows = fleet_line(listed.stdout, FLEET)
        assert len(rows) == 1 and "no access" in rows[0], listed.stdout
        lines = listed.stdout.splitlines()
        after = lines[lines.index(rows[0]) + 1:][:1]
        assert not any(a.strip().startswith("instance=") for a in after), listed.stdout
        ps, took = gpufleet(carol["env"], "ps")
        assert ps.returncode == 0, ps.stdout + ps.stderr
        assert "Permission denied" not in ps.stdout + ps.stderr
        assert FLEET not in ps.stdout + ps.stderr and NAME not in ps.stdout
        assert took < 20, took   # nothing waited on: no host of the fleet was tried
        # The member: carol's fingerprint published, her key let in on every node.
        assert access.publish(world["fleet"], "carol", carol["public"].fingerprint, docker)
        for num in range(3):
            docker.run("exec", "--env", "GPUFLEET_KEY=" + line, local.container_name(FLEET, num),
                       "sh", "-c", local.AUTHORIZE_SCRIPT)
        listed, _took = gpufleet(carol["env"], "fleet")
        rows = fleet_line(listed.stdout, FLEET)
        assert len(rows) == 1 and "no access" not in rows[0], listed.stdout
        ps, _took = gpufleet(carol["env"], "ps")
        assert ps.returncode == 0, ps.stdout + ps.stderr
        assert NAME in ps.stdout, ps.stdout + ps.stderr
        assert "Permission denied" not in ps.stdout + ps.stderr
    finally:
        access.publish(world["fleet"], "carol", None, docker)
        for num in range(3):
            docker.run("exec", "--env", "GPUFLEET_KEY=" + line, local.container_name(FLEET, num),
                       "sh", "-c", UNAUTHORIZE, check=False)
        gpufleet(dict(os.environ, ANSIBLE_COLLECTIONS_PATH=str(collections_path())),
                 "stop", "-y", "--force", NAME)
