"""``gpufleet fleet delete NAME [-i N] -y`` on a real two-node local fleet: an instance running a
task is refused naming the run, an idle one is removed while the fleet stays, then the whole
fleet goes by its name, and a name no fleet has is said as dstack says it. Then two applies of
one new 2-node fleet at once, from one state dir and from two (two controllers): both end with
both nodes ready."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
from ansible_collections.gpufleet.cluster.plugins.module_utils.backends import local
from ansible_collections.gpufleet.cluster.plugins.module_utils.backends.docker_cli import Docker

from gpufleet._collection import collections_path
from gpufleet.runner import run_playbook

BIN = Path(sys.executable).parent
NAME = "byname-" + uuid.uuid4().hex[:6]
# A running container with a task's labels (what the task runner's survey counts as a job),
# from a two-file image made on the node itself, as tests/integration/test_reconcile.py does.
BUSY = (
    "tar -ch /usr/bin/sleep /lib/x86_64-linux-gnu/libc.so.6 /lib64/ld-linux-x86-64.so.2 "
    "2>/dev/null | docker import - gpufleet-test/sleep >/dev/null && "
    "docker run -d --name busy --label gpufleet.run=busy-run --label gpufleet.job=0 "
    "gpufleet-test/sleep /usr/bin/sleep 600"
)


@pytest.fixture(scope="module")
def fleet(tmp_path_factory):
    base = tmp_path_factory.mktemp("fleet-delete")
    path = base / (NAME + ".dstack.yml")
    path.write_text("type: fleet\nname: %s\nnodes: 2\nbackends: [local]\n" % NAME)
    docker = Docker()
    local.ensure_node_image(docker)
    env = dict(os.environ, GPUFLEET_STATE_DIR=str(base / "state"),
               ANSIBLE_COLLECTIONS_PATH=str(collections_path()), ANSIBLE_NOCOLOR="1")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("GPUFLEET_STATE_DIR", str(base / "state"))
        result = run_playbook("fleet.yml", {"fleet": str(path)})
        assert result.ok, result.stdout[-3000:]
        yield {"path": str(path), "docker": docker, "env": env, "state": base / "state"}
        if local.list_nodes(docker, NAME):
            run_playbook("delete.yml", {"fleet": str(path)})


def gpufleet(fleet, *args):
    return subprocess.run([str(BIN / "gpufleet")] + list(args), capture_output=True, text=True,
                          stdin=subprocess.DEVNULL, env=fleet["env"], check=False, timeout=900)


def nums(docker):
    return sorted(local.node_num(n) for n in local.list_nodes(docker, NAME))


def test_hosts_that_cannot_be_checked_are_never_taken_as_idle(fleet):
    """The state dir moved away, its key with it: the hosts cannot be checked, so delete (by
    file and by name) is refused naming them and why, and ps names the fleet it could not read
    and exits 1, while a run goes on. Nothing is tried with a key this controller lacks."""
    docker = fleet["docker"]
    node = local.container_name(NAME, 0)
    state = fleet["state"]
    moved = state.with_name("state-moved-away")
    docker.run("exec", node, "sh", "-c", BUSY)
    os.rename(state, moved)
    try:
        key = state / "fleets" / NAME / "id_ed25519"
        for argv in (["delete", "-y", "-f", fleet["path"]], ["fleet", "delete", NAME, "-y"]):
            refused = gpufleet(fleet, *argv)
            assert refused.returncode == 1, refused.stdout + refused.stderr
            assert "Failed to delete fleet %s. Cannot tell whether it is in use: " % NAME \
                in refused.stderr, refused.stderr
            for host in ("%s-0" % NAME, "%s-1" % NAME):
                assert "%s could not be checked (cannot be checked: its SSH key " % host \
                    in refused.stderr, refused.stderr
            assert str(key) in refused.stderr and "$GPUFLEET_STATE_DIR" in refused.stderr
            assert "the state dir %s does not exist" % state in refused.stderr
            assert "deleted" not in refused.stdout
            assert nums(docker) == [0, 1]
        listed = gpufleet(fleet, "ps")
        assert listed.returncode == 1, listed.stdout + listed.stderr
        assert "could not read fleet %s, its runs are not listed: %s-0: cannot be checked: " \
            "its SSH key %s is missing" % (NAME, NAME, key) in listed.stderr, listed.stderr
        assert "No runs.\n" != listed.stdout
    finally:
        if state.exists():   # made meanwhile: what the moved one holds is the truth
            shutil.rmtree(state)
        os.rename(moved, state)
        docker.run("exec", node, "docker", "rm", "-f", "busy")
    # With the state dir back, the fleet's hosts are read again; other local fleets on a shared
    # engine (other workers' worlds), made from other state dirs, are not this one's to read.
    listed = gpufleet(fleet, "ps")
    assert listed.returncode == 0, listed.stdout + listed.stderr
    assert "could not read fleet %s," % NAME not in listed.stderr, listed.stderr
    assert NAME + "-0" not in listed.stderr, listed.stderr


def test_instances_then_the_fleet_are_deleted_by_name(fleet):
    docker = fleet["docker"]
    assert nums(docker) == [0, 1]

    docker.run("exec", local.container_name(NAME, 1), "sh", "-c", BUSY)
    refused = gpufleet(fleet, "fleet", "delete", NAME, "-i", "1", "-y")
    assert refused.returncode == 1, refused.stdout + refused.stderr
    assert refused.stderr.startswith(
        "Failed to delete fleet %s instances [1]. Fleet instances are in use: %s-1 runs "
        "busy-run (stop it first: gpufleet stop busy-run)" % (NAME, NAME)), refused.stderr
    assert refused.stdout == "" and nums(docker) == [0, 1]

    docker.run("exec", local.container_name(NAME, 1), "docker", "rm", "-f", "busy")
    deleted = gpufleet(fleet, "fleet", "delete", NAME, "-i", "1", "-y")
    assert deleted.returncode == 0, deleted.stdout + deleted.stderr
    assert deleted.stdout == "Fleet %s instances deleted\n" % NAME
    assert nums(docker) == [0]
    assert (fleet["state"] / "fleets" / NAME).is_dir()  # the fleet stays

    gone = gpufleet(fleet, "fleet", "delete", NAME, "-y")
    assert gone.returncode == 0, gone.stdout + gone.stderr
    assert gone.stdout == "Fleet %s deleted\n" % NAME
    assert nums(docker) == []
    assert not (fleet["state"] / "fleets" / NAME).exists()

    unknown = gpufleet(fleet, "fleet", "delete", NAME, "-y")
    assert (unknown.returncode, unknown.stdout, unknown.stderr) == (
        1, "", "Fleet %s does not exist\n" % NAME)


# --- Two applies of one fleet at once (issue 32, defect 3) ----------------------------------


def _race(tmp_path, state_dirs):
    """Start ``gpufleet apply -y -f`` of one new 2-node local fleet once per state dir, all at
    once; returns (name, docker, [(rc, stdout, stderr)], envs). The caller removes the fleet."""
    name = "race-" + uuid.uuid4().hex[:6]
    path = tmp_path / (name + ".dstack.yml")
    path.write_text("type: fleet\nname: %s\nnodes: 2\nbackends: [local]\n" % name)
    docker = Docker()
    local.ensure_node_image(docker)
    envs = [dict(os.environ, GPUFLEET_STATE_DIR=str(state),
                 ANSIBLE_COLLECTIONS_PATH=str(collections_path()), ANSIBLE_NOCOLOR="1")
            for state in state_dirs]
    procs = [subprocess.Popen([str(BIN / "gpufleet"), "apply", "-y", "-f", str(path)],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                              stdin=subprocess.DEVNULL, env=env) for env in envs]
    results = []
    for proc in procs:
        out, err = proc.communicate(timeout=600)
        results.append((proc.returncode, out, err))
    return name, docker, results, envs


def _check_race(name, docker, results, envs):
    for rc, out, err in results:
        assert rc == 0, out[-3000:] + err[-3000:]
        # The fleet table each apply ends with shows both nodes, ready.
        rows = [line.split() for line in out[out.rindex("NAME"):].splitlines()
                if line.strip().startswith("instance=")]
        assert sorted(row[0] for row in rows) == ["instance=0", "instance=1"], out
        assert all("idle" in row for row in rows), out
        waits = [line for line in err.splitlines() if line.startswith("waiting for")]
        assert len(waits) <= 1, err
        for line in waits:
            assert line.startswith("waiting for another apply of fleet %s (pid " % name), err
    nodes = local.list_nodes(docker, name)
    assert sorted(local.node_num(n) for n in nodes) == [0, 1]
    assert all(n["state"] == "running" for n in nodes), nodes
    assert all(n["labels"].get(local.MADE_BY_LABEL) for n in nodes), nodes
    # What each controller lists afterwards: the fleet with both nodes.
    for env in envs:
        listed = subprocess.run([str(BIN / "gpufleet"), "fleet"], capture_output=True,
                                text=True, stdin=subprocess.DEVNULL, env=env, check=False,
                                timeout=300)
        assert listed.returncode == 0, listed.stderr
        assert _listed_instances(listed.stdout, name) == ["instance=0", "instance=1"], \
            listed.stdout


def _listed_instances(table, name):
    """The instance rows under the fleet ``name``'s row of a fleet table."""
    found, inside = [], False
    for line in table.splitlines():
        words = line.split()
        if not words:
            continue
        if words[0].startswith("instance="):
            if inside:
                found.append(words[0])
        else:
            inside = words[0] == name
    return sorted(found)


def test_three_applies_of_one_fleet_at_once_from_two_controllers_end_with_both_nodes(tmp_path):
    """The same new 2-node local fleet applied three times at once on one engine: twice by
    one controller (one state dir: the second waits for the first, or finds its nodes) and once
    by another (its own state dir and key). Neither removes what the other made, every apply
    ends with the 2 nodes ready, and both controllers can reach them (each one's key is let
    in). One race covers both kinds of meeting, one fleet instead of two."""
    name, docker = None, Docker()
    try:
        one, two = tmp_path / "one", tmp_path / "two"
        name, docker, results, envs = _race(tmp_path, [one, one, two])
        _check_race(name, docker, results, envs)
    finally:
        if name:
            local.remove_fleet(docker, name)
