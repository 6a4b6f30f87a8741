"""Per-user limits and fair share (issue 34, point 5) on the shared 3-node task world.

A cap of one run for a user this file invents holds while two controllers (two state dirs)
submit ten of that user's runs at once: never more than one of them runs, the others wait
``pending`` with the reason ``user limit`` and the queue's passes (made by ``gpufleet ps``)
start them one after the other until all ten end done. Fair share: a waiting run of a user who
used little goes before an earlier one, of equal priority, of a user who used much.

The caps are written into the members document on the nodes (teams.members describes it),
under its lock, beside whatever other tests keep there, and taken out again at the end.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time

import pytest
from ansible_collections.gpufleet.cluster.plugins.module_utils.backends import local

from .task_world import CPU, FLEET, SUFFIX

CAPPED = "capped" + SUFFIX
HEAVY = "heavy" + SUFFIX
LIGHT = "light" + SUFFIX
ACTIVE = ("submitted", "provisioning", "running", "terminating")

# Sets (or, with null, takes out) one user's caps in the node's members document, under the
# document's lock; a document this made and that holds nothing else goes with it.
SET_LIMIT = r"""
import fcntl, json, os, sys
root = "/var/lib/gpufleet/team"
os.makedirs(root, 0o700, exist_ok=True)
fleet, user, value = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
with open(os.path.join(root, "lock"), "a") as lock:
    fcntl.flock(lock.fileno(), fcntl.LOCK_EX)
    path = os.path.join(root, "members.json")
    try:
        with open(path) as handle:
            doc = json.load(handle)
    except (IOError, OSError, ValueError):
        doc = {"fleet": fleet, "members": {}, "revoked": {}, "limits": {}, "made_by_test": True}
    limits = doc.setdefault("limits", {})
    if value is None:
        limits.pop(user, None)
    else:
        limits[user] = value
    if doc.get("made_by_test") and not limits and not doc.get("members") and not doc.get(
            "revoked"):
        os.remove(path)
    else:
        with open(path + ".tmp", "w") as handle:
            json.dump(doc, handle)
        os.chmod(path + ".tmp", 0o600)
        os.rename(path + ".tmp", path)
"""


def set_limit(world, user, value):
    for num in range(3):
        world["docker"].run("exec", local.container_name(FLEET, num), "python3", "-c",
                            SET_LIMIT, FLEET, user, json.dumps(value))


def gpufleet(env, *args):
    """The gpufleet command in its own process, as a controller's user would run it."""
    command = os.path.join(os.path.dirname(sys.executable), "gpufleet")
    return subprocess.Popen([command] + list(args), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=env)


def ps(env):
    proc = gpufleet(env, "ps", "--json")
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, err
    return dict((r["name"], r) for r in json.loads(out))


@pytest.fixture
def controllers(world, tmp_path):
    """Two controllers of the capped user: the world's state dir, and a copy of it."""
    first = str(world["base"] / "state")
    second = str(tmp_path / "state-2")
    shutil.copytree(first, second, symlinks=True, ignore=lambda folder, names: [
        n for n in names if not (os.path.isfile(os.path.join(folder, n)) or os.path.isdir(
            os.path.join(folder, n)))])
    return [dict(os.environ, GPUFLEET_STATE_DIR=path, GPUFLEET_USER=CAPPED)
            for path in (first, second)]


def test_a_cap_of_one_run_holds_under_ten_submissions_from_two_controllers(
        world, tmp_path, controllers):
    prefix = "cap%s-" % SUFFIX
    task = tmp_path / "capped.dstack.yml"
    # retry on no-capacity only so that other test files' runs filling the shared world do not
    # fail these: the user limit holds them whatever retry says (the unit tests show that).
    task.write_text("type: task\nimage: %s\n%scommands: [sleep 2]\n"
                    "retry:\n  on_events: [no-capacity]\n  duration: 10m\n"
                    % (world["base_image"], CPU))
    set_limit(world, CAPPED, {"runs": 1})
    try:
        procs = [gpufleet(controllers[i % 2], "apply", "-f", str(task), "-y", "-d", "--name",
                          prefix + str(i), "--fleet", FLEET) for i in range(10)]
        outcomes = []
        for proc in procs:
            out, err = proc.communicate(timeout=600)
            outcomes.append((proc.returncode, out + err))
        assert all(rc == 0 for rc, _text in outcomes), outcomes
        waiting = [text for _rc, text in outcomes if "user limit" in text]
        assert len(waiting) >= 5, outcomes   # one runs at a time: most of them wait
        # ps makes the passes that start the waiting runs; sampled, at most one runs at a time.
        names = [prefix + str(i) for i in range(10)]
        deadline = time.time() + 150
        most = 0
        turn = 0
        while True:
            listed = ps(controllers[turn % 2])
            turn += 1
            mine = [listed[n] for n in names if n in listed]
            alive = [r["name"] for r in mine if r["status"] in ACTIVE]
            most = max(most, len(alive))
            assert len(alive) <= 1, alive
            held = [r for r in mine if r["status"] == "pending"]
            # Held by the cap (or, when other tests fill the world, waiting for capacity).
            assert all(r["reason"] in ("user limit", None) for r in held), held
            if len(mine) == 10 and all(r["status"] == "done" for r in mine):
                break
            assert time.time() < deadline, dict((r["name"], r["status"]) for r in mine)
            time.sleep(1)
        assert most <= 1
        # The containers' own times agree: no two of the user's runs overlapped.
        spans = []
        for num in range(3):
            node = local.container_name(FLEET, num)
            ids = world["docker"].run("exec", node, "docker", "ps", "-aq", "--filter",
                                      "label=gpufleet.run").split()
            if ids:
                for item in json.loads(world["docker"].run("exec", node, "docker", "inspect",
                                                           *ids)):
                    if item["Config"]["Labels"].get("gpufleet.run", "").startswith(prefix):
                        spans.append((item["State"]["StartedAt"], item["State"]["FinishedAt"]))
        spans.sort()
        assert len(spans) == 10
        for (_begin, end), (begin, _end) in zip(spans, spans[1:]):
            assert end <= begin, spans
    finally:
        set_limit(world, CAPPED, None)


def test_fair_share_starts_the_lighter_users_run_before_an_earlier_heavier_ones(
        world, tmp_path, capsys, monkeypatch):
    """The fleet is full; the heavy user's run, then the light user's, wait (equal priority).
    The hosts' 24 h usage says the heavy user used ten hours and the light one a minute (this
    world has no GPUs to count, so the usage the survey read is given): when the fleet frees
    up, the light user's run starts first."""
    from ansible_collections.gpufleet.cluster.plugins.module_utils.tasks import surveys

    from gpufleet import cli

    fill, heavy, light = ("fs%s-%s" % (n, SUFFIX) for n in ("fill", "heavy", "light"))
    body = ("image: %s\nnodes: 3\n%scommands: [sleep infinity]\nstop_duration: 1\n"
            % (world["base_image"], CPU))
    waiting = "retry:\n  on_events: [no-capacity]\n  duration: 10m\n"

    def submit(name, user, text):
        monkeypatch.setenv("GPUFLEET_USER", user)
        path = tmp_path / (name + ".dstack.yml")
        path.write_text(text)
        assert cli.main(["apply", "-f", str(path), "-y", "-d", "--fleet", FLEET]) == 0

    def listed():
        capsys.readouterr()
        assert cli.main(["ps", "--json"]) == 0
        return dict((r["name"], r) for r in json.loads(capsys.readouterr().out))

    # The fill takes all 3 nodes: runs an earlier file of this worker left ending must be gone.
    deadline = time.time() + 120
    while True:
        alive = [(n, r["status"]) for n, r in listed().items() if r["status"] in ACTIVE]
        if not alive:
            break
        assert time.time() < deadline, "the world's fleet is still busy: %s" % alive
        time.sleep(2)
    usage = {"hours": {HEAVY: 36000.0, LIGHT: 60.0}}
    monkeypatch.setattr(surveys, "usage_of", lambda survey: usage)
    submit(fill, LIGHT, "type: task\nname: %s\n%s" % (fill, body))
    submit(heavy, HEAVY, "type: task\nname: %s\n%s%s" % (heavy, waiting, body))
    submit(light, LIGHT, "type: task\nname: %s\n%s%s" % (light, waiting, body))
    runs = listed()
    assert runs[fill]["status"] == "running"
    assert [(runs[n]["status"], runs[n]["queue_position"]) for n in (light, heavy)] == [
        ("pending", 1), ("pending", 2)]
    try:
        assert cli.main(["stop", "-y", fill]) == 0   # its pass starts the next waiting run
        runs = listed()
        assert runs[light]["status"] in ("provisioning", "running"), runs[light]
        assert (runs[heavy]["status"], runs[heavy]["queue_position"]) == ("pending", 1)
    finally:
        for name in (heavy, light, fill):
            cli.main(["stop", "-y", "--force", name])
