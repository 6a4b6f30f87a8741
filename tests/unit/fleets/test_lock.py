# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Two applies of one fleet at once (issue 32, defect 3): the per-fleet apply lock
(fleets/lock.py), the local backend adopting a node another apply made instead of removing it,
another controller's key let in, and an apply never ending with fewer instances than asked.
No Docker engine: the engine is a fake runner or an in-memory list of nodes."""

from __future__ import annotations

import os
import signal
import stat
import subprocess
import sys
import threading
import time

import pytest
from ansible_collections.gpufleet.cluster.plugins.module_utils.backends import local
from ansible_collections.gpufleet.cluster.plugins.module_utils.backends.docker_cli import (
    Docker,
    DockerError,
)
from ansible_collections.gpufleet.cluster.plugins.module_utils.fleets import apply, lock
from ansible_collections.gpufleet.cluster.plugins.module_utils.spec import parse_data

from .fakes import running_local_node


@pytest.fixture(autouse=True)
def lock_dir(tmp_path, monkeypatch):
    folder = tmp_path / "locks"
    monkeypatch.setenv(lock.DIR_ENV, str(folder))
    monkeypatch.delenv(lock.HELD_ENV, raising=False)
    monkeypatch.delenv(lock.TIMEOUT_ENV, raising=False)
    return folder


# --- the lock -------------------------------------------------------------------------------


def test_the_lock_folder_is_shared_and_the_file_open_to_every_user(lock_dir):
    with lock.fleet_lock("web") as waited:
        assert waited is False
        mode = os.stat(lock_dir).st_mode
        assert stat.S_IMODE(mode) == 0o1777
        path = lock.lock_path("web")
        assert stat.S_IMODE(os.stat(path).st_mode) == 0o666
        assert lock.describe_holder(open(path).read()).startswith("pid %d, user " % os.getpid())


def held_elsewhere(fleet, release_after):
    """A thread that holds ``fleet``'s apply lock (held once this returns) and lets it go
    ``release_after`` seconds later; the caller joins it."""
    held = threading.Event()
    release = threading.Event()

    def first():
        with lock.fleet_lock(fleet):
            held.set()
            release.wait(5)

    thread = threading.Thread(target=first)
    thread.start()
    assert held.wait(5)
    threading.Timer(release_after, release.set).start()
    return thread


def test_a_second_apply_says_once_that_it_waits_then_gets_the_lock():
    messages = []
    thread = held_elsewhere("web", release_after=0.7)
    started = time.monotonic()
    with lock.fleet_lock("web", on_wait=messages.append, limit=10) as waited:
        assert waited is True
        assert time.monotonic() - started >= 0.5
    thread.join(5)
    assert len(messages) == 1
    assert messages[0].startswith("waiting for another apply of fleet web (pid %d, user "
                                  % os.getpid()), messages
    assert messages[0].endswith("...")


def test_a_lock_never_had_says_who_holds_it_and_what_to_do(monkeypatch):
    monkeypatch.setenv(lock.TIMEOUT_ENV, "0.3")
    with lock.fleet_lock("web"):
        with pytest.raises(lock.LockError) as info:
            with lock.fleet_lock("web"):
                pytest.fail("got a lock another holds")
    message = str(info.value)
    assert message.startswith("another apply of fleet web (pid %d, user " % os.getpid())
    assert "still holds its lock after 0 s of waiting" in message
    assert lock.TIMEOUT_ENV in message


def test_other_fleets_do_not_wait():
    with lock.fleet_lock("web"):
        with lock.fleet_lock("db", limit=0) as waited:
            assert waited is False


def test_a_killed_holder_leaves_no_lock(tmp_path):
    script = ("import sys, time; sys.path[:0] = %r\n"
              "from ansible_collections.gpufleet.cluster.plugins.module_utils.fleets import lock\n"
              "with lock.fleet_lock('web'):\n"
              "    print('held', flush=True)\n"
              "    time.sleep(60)\n" % (sys.path,))
    proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True,
                            env=dict(os.environ))
    try:
        assert proc.stdout.readline().strip() == "held"
        with pytest.raises(lock.LockError, match=r"\(pid %d, user " % proc.pid):
            with lock.fleet_lock("web", limit=0.2):
                pass
        proc.send_signal(signal.SIGKILL)
        proc.wait(5)
        with lock.fleet_lock("web", limit=2) as waited:
            assert waited is False
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_a_caller_that_holds_the_lock_lets_its_children_through():
    env = lock.holding("web", {lock.HELD_ENV: "db"})
    assert env[lock.HELD_ENV] == "db,web"
    assert lock.held_by_caller("web", env) and lock.held_by_caller("db", env)
    assert not lock.held_by_caller("we", env)
    with lock.fleet_lock("web"):
        with lock.fleet_lock("web", limit=0, environ=env) as waited:
            assert waited is False


def test_the_holder_line_and_the_timeout_setting():
    assert lock.describe_holder(lock.holder_text(12, "me", "h", "T")) == \
        "pid 12, user me, host h, since T"
    assert lock.describe_holder("") == "unknown"
    assert lock.describe_holder("garbage") == "unknown"
    assert lock.timeout({lock.TIMEOUT_ENV: "5"}) == 5
    assert lock.timeout({lock.TIMEOUT_ENV: "soon"}) == lock.DEFAULT_TIMEOUT
    assert lock.timeout({}) == lock.DEFAULT_TIMEOUT


# --- the local backend: a name another apply took -------------------------------------------


def runner_answering(run_answer):
    calls = []

    def runner(argv, stdin=None):
        calls.append(argv[1:])
        if argv[1] == "run":
            return run_answer
        return (0, b"", b"")

    runner.calls = calls
    return runner


def test_a_node_name_another_apply_took_is_adopted_never_removed():
    taken = (125, b"", b'docker: Error response from daemon: Conflict. The container name '
                       b'"/gpufleet-web-0" is already in use by container "abc".')
    runner = runner_answering(taken)
    assert local.start_node(Docker("docker", runner), "web", 0, "any", "img", "ssh-ed25519 K",
                            "T", privileged=True) is True
    assert not any(call[:2] == ["rm", "-f"] for call in runner.calls), runner.calls


def test_a_node_that_failed_to_start_is_removed_and_named():
    runner = runner_answering((125, b"", b"no space left on device"))
    with pytest.raises(local.FleetError, match="could not start node web-0 .*no space left"):
        local.start_node(Docker("docker", runner), "web", 0, "any", "img", "K", "T",
                         privileged=True)
    assert ["rm", "-f", "gpufleet-web-0"] in runner.calls


def test_a_network_another_apply_made_meanwhile_is_used():
    inspected = []

    def runner(argv, stdin=None):
        if argv[1:3] == ["network", "inspect"]:
            inspected.append(1)
            return (0, b"[]", b"") if len(inspected) > 1 else (1, b"", b"No such network")
        if argv[1:3] == ["network", "create"]:
            return (1, b"", b"network with name gpufleet-web already exists")
        return (0, b"", b"")

    assert local._ensure_network(Docker("docker", runner), "gpufleet-web", "web") is False

    def refused(argv, stdin=None):
        return (1, b"", b"permission denied")

    with pytest.raises(DockerError, match="network create gpufleet-web failed.*permission"):
        local._ensure_network(Docker("docker", refused), "gpufleet-web", "web")


def test_nodes_say_who_made_them_and_with_which_key():
    runner = runner_answering((0, b"id\n", b""))
    local.start_node(Docker("docker", runner), "web", 0, "any", "img", "ssh-ed25519 K", "T",
                     privileged=True)
    run = next(call for call in runner.calls if call[0] == "run")
    assert "%s=%s" % (local.MADE_BY_LABEL, local.made_by()) in run
    assert "@" in local.made_by()
    assert local.AUTHORIZED_KEY_ENV + "=ssh-ed25519 K" in run


def test_another_controllers_key_is_let_in_once():
    calls = []

    def runner(argv, stdin=None):
        calls.append(argv[1:])
        return (0, b"added\n", b"")

    client = local.Local(Docker("docker", runner))
    nodes = [dict(running_local_node("web", 0), authorized_key="ssh-ed25519 THEIRS"),
             dict(running_local_node("web", 1), authorized_key="ssh-ed25519 MINE"),
             dict(running_local_node("web", 2), authorized_key="ssh-ed25519 THEIRS",
                  state="exited")]
    assert client.authorize(nodes, "ssh-ed25519 MINE") == ["gpufleet-web-0"]
    assert len(calls) == 1 and calls[0][:3] == ["exec", "--env", "GPUFLEET_KEY=ssh-ed25519 MINE"]
    assert calls[0][3] == "gpufleet-web-0"


# --- apply: serialized, and never short ------------------------------------------------------


def fleet_config(nodes=2):
    return parse_data({"type": "fleet", "name": "web", "nodes": nodes, "backends": ["local"]},
                      "test")[0]


class Engine:
    """Local nodes in memory; ``start_node`` takes ``delay`` seconds, as a real one does."""

    def __init__(self, monkeypatch, delay=0.0):
        self.nodes = []
        self.delay = delay
        self.runs = []
        monkeypatch.setattr(local, "list_nodes", self.list_nodes)
        monkeypatch.setattr(local, "start_node", self.start_node)
        monkeypatch.setattr(Docker, "ping", lambda _self: "27.0")

    def list_nodes(self, _docker, fleet=None):
        return [n for n in self.nodes if fleet is None or n["labels"][local.FLEET_LABEL] == fleet]

    def start_node(self, _docker, fleet, num, placement, _image, public_key, _created,
                   privileged=None, spec=None, made_for=None, made_from=None, creator=None):
        time.sleep(self.delay)
        self.runs.append(num)
        if all(local.node_num(n) != num for n in self.nodes):
            self.nodes.append(dict(running_local_node(fleet, num, placement),
                                   authorized_key=public_key))
        return True


def test_two_applies_at_once_make_each_node_once_and_both_see_both(tmp_path, monkeypatch):
    engine = Engine(monkeypatch, delay=0.3)
    root = str(tmp_path / "state")
    results, waits = {}, []

    def one(which):
        results[which] = apply.apply(fleet_config(), None, Docker("docker"), root,
                                     build_image=lambda _check: "img",
                                     on_wait=waits.append)

    threads = [threading.Thread(target=one, args=(n,)) for n in (1, 2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(10)
    assert sorted(engine.runs) == [0, 1]      # each node made once, by one of them
    for record, _changed in results.values():
        assert [i["name"] for i in record["instances"]] == ["web-0", "web-1"]
    assert sorted(changed for _record, changed in results.values()) == [False, True]
    assert len(waits) == 1 and waits[0].startswith("waiting for another apply of fleet web (")


def test_an_apply_that_ends_short_fails_naming_what_is_missing(tmp_path, monkeypatch):
    engine = Engine(monkeypatch)

    def lost(*args, **kwargs):
        # Another command removes node 0 while this apply makes node 1.
        Engine.start_node(engine, *args, **kwargs)
        engine.nodes = [n for n in engine.nodes if local.node_num(n) != 0]
        return True

    monkeypatch.setattr(local, "start_node", lost)
    with pytest.raises(apply.ApplyError) as info:
        apply.apply(fleet_config(), None, Docker("docker"), str(tmp_path / "state"),
                    build_image=lambda _check: "img")
    assert str(info.value) == (
        "fleet web has 1 of the 2 instances its file asks for after this apply (missing: "
        "web-0): another command removed them meanwhile; apply again")


def test_instances_missing_counts_live_instances_against_the_target():
    config = fleet_config(3)
    record = {"name": "web", "instances": [
        {"num": 0, "status": "idle"}, {"num": 2, "status": "terminated"},
        {"num": 3, "status": "provisioning"}]}
    assert apply.instances_missing(config, record) == ["web-1"]
    record["instances"].append({"num": 5, "status": "stopped"})
    assert apply.instances_missing(config, record) == []


def test_check_mode_takes_no_lock(tmp_path, monkeypatch):
    Engine(monkeypatch)
    monkeypatch.setenv(lock.TIMEOUT_ENV, "0")
    with lock.fleet_lock("web"):
        record, changed = apply.apply(fleet_config(), None, Docker("docker"),
                                      str(tmp_path / "state"), check_mode=True,
                                      build_image=lambda _check: "img")
    assert changed and record["plan"]["create"] == ["web-0", "web-1"]


# --- gpufleet apply: the wait said once, the playbook told the lock is held -----------------


def test_gpufleet_apply_says_it_waits_and_tells_its_playbook(monkeypatch):
    import io

    from gpufleet.cli import apply as apply_cli

    err = io.StringIO()
    thread = held_elsewhere("web", release_after=0.5)
    with apply_cli._fleet_lock("web", err):
        assert os.environ[lock.HELD_ENV] == "web"
        with lock.fleet_lock("web", limit=0) as waited:   # what the fleet module does
            assert waited is False
    thread.join(5)
    assert lock.HELD_ENV not in os.environ
    lines = err.getvalue().splitlines()
    assert len(lines) == 1 and lines[0].startswith("waiting for another apply of fleet web (pid ")


# --- SSH fleets: two controllers claiming one host at once ------------------------------------


def test_two_fleets_claiming_one_host_at_once_never_both_own_it(tmp_path, monkeypatch):
    from ansible_collections.gpufleet.cluster.plugins.module_utils.fleets import marker

    path = str(tmp_path / "etc" / "gpufleet" / "fleet.json")
    read = marker.read_marker

    def slow_read(where):
        found = read(where)
        time.sleep(0.3)   # both have read before either writes, unless they take turns
        return found

    monkeypatch.setattr(marker, "read_marker", slow_read)
    results = {}

    def claim(fleet):
        try:
            results[fleet] = marker.ensure(path, "present", fleet, instance=0, hosts=["h"],
                                           controller=fleet + "-laptop")["msg"]
        except marker.MarkerError as exc:
            results[fleet] = exc

    threads = [threading.Thread(target=claim, args=(f,)) for f in ("one", "two")]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(5)
    owner = read(path)["fleet"]
    other = "two" if owner == "one" else "one"
    assert results[owner] == "fleet %s claimed this host as instance 0" % owner
    assert isinstance(results[other], marker.MarkerError), results
    assert str(results[other]).startswith("host is already in fleet %s as instance 0" % owner)


def test_gpufleet_apply_that_never_gets_the_lock_says_who_holds_it(monkeypatch):
    import io

    from gpufleet.api import GpufleetError
    from gpufleet.cli import apply as apply_cli

    monkeypatch.setenv(lock.TIMEOUT_ENV, "0.2")
    err = io.StringIO()
    with lock.fleet_lock("web"):
        with pytest.raises(GpufleetError) as info:
            with apply_cli._fleet_lock("web", err):
                pytest.fail("got a lock another holds")
    assert str(info.value).startswith("another apply of fleet web (pid %d, " % os.getpid())
    assert err.getvalue().startswith("waiting for another apply of fleet web (")
    assert lock.HELD_ENV not in os.environ


def test_a_node_says_which_state_dir_made_it_and_a_listing_leaves_other_controllers_out(
        tmp_path):
    """A node carries its maker's state dir; ps reports this controller's fleet whose key is
    gone as unread, and leaves out another controller's fleet it holds no key for (two people,
    or two test workers, on one engine)."""
    from ansible_collections.gpufleet.cluster.plugins.module_utils.tasks import listing

    runner = runner_answering((0, b"id\n", b""))
    local.start_node(Docker("docker", runner), "web", 0, "any", "img", "ssh-ed25519 K", "T",
                     privileged=True, made_from="/home/ann/.gpufleet")
    run = next(call for call in runner.calls if call[0] == "run")
    assert "%s=/home/ann/.gpufleet" % local.MADE_FROM_LABEL in run

    mine, theirs = str(tmp_path / "mine"), str(tmp_path / "theirs")

    def fleet(name, made_from):
        node = running_local_node(name, 0)
        node["labels"][local.MADE_FROM_LABEL] = made_from
        key = os.path.join(mine, "fleets", name, "id_ed25519")
        return {"name": name, "instances": local.instance_records([node], name, 1, key)}

    fleets = [fleet("ours", mine), fleet("others", theirs)]
    assert fleets[0]["instances"][0]["made_from"] == mine
    errors = {"ours-0": "no key", "others-0": "no key"}
    assert list(listing.unread_fleets(fleets, errors, mine)) == ["ours"]
    assert list(listing.own_errors(fleets, errors, mine)) == ["ours-0"]
    # Without the root (or a label), nothing is left out: unknown is never taken as fine.
    assert sorted(listing.unread_fleets(fleets, errors)) == ["others", "ours"]
    # Another controller's fleet this one holds a key for is read, and reported, as its own.
    os.makedirs(os.path.join(mine, "fleets", "others"))
    open(os.path.join(mine, "fleets", "others", "id_ed25519"), "w").close()
    assert sorted(listing.unread_fleets(fleets, errors, mine)) == ["others", "ours"]
