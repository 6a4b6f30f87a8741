# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""A running service rolled to a new version in place (services.rolling), on fake hosts that
answer the host helper's operations as tasks.hostside does and a proxy that says which
replicas are up. tests/integration/test_services.py rolls a real one under load."""

from __future__ import annotations

import pytest
from ansible_collections.gpufleet.cluster.plugins.module_utils.services import rolling
from ansible_collections.gpufleet.cluster.plugins.module_utils.tasks.ssh import NodeError

CONFIG = {"port": 8000, "auth": True, "strip_prefix": True, "rate_limits": [], "probes": [],
          "model": None}
ADDRESSES = {"h-0": "10.0.0.1", "h-1": "10.0.0.2"}


class World(object):
    """Two hosts with one replica each (version ``old``), and the proxy on h-0."""

    def __init__(self, digests=("old", "old"), count=2, placed=True, refuse_claim=None,
                 ends=(), resources="2 CPUs", fails=None, silent=None, leased_by=None):
        self.log = []
        self.routes = []      # the replicas of each change of the route, in order
        self.published = []   # the whole routes published (their settings)
        self.fails = fails    # a host whose replace fails (the old replica comes back)
        self.silent = silent  # a host that does not answer status
        self.lease = leased_by   # who holds the update's lease on the proxy host
        self.hosts = {}       # the host of each replica a scale-up added
        self.released = []
        self.retired = []
        self.recounted = []
        self.no_drain = False   # a proxy host whose helper cannot drain
        self.leases = []
        self.ports = {}
        self.up = set(range(count))
        self.refuse_claim = refuse_claim
        self.ends = set(ends)
        self.kept = dict((n, {"kept": True, "container": "svc-0-%d" % n,
                              "placed": {"job_num": n, "host": "h-%d" % n} if placed else None,
                              "claim": {"run": "svc", "by": "first:1"},
                              "config_digest": digests[n], "resources": resources})
                         for n in range(count))
        self.boxes = dict((n, {"state": "running", "port": 40000 + n}) for n in range(count))
        self.nodes = dict(("h-%d" % n, Host(self, "h-%d" % n, n)) for n in range(2))

    def replicas(self):
        return [n for n, box in sorted(self.boxes.items()) if box["state"] == "running"]


class Host(object):
    def __init__(self, world, name, num):
        self.world, self.name, self.num = world, name, num

    def call(self, op, payload=None, timeout=120):
        world = self.world
        world.log.append((self.name, op, payload))
        if op == "replica_info":
            return dict(world.kept[payload["job_num"]])
        if op == "status":
            if world.silent == self.name:
                raise NodeError(self.name, "unreachable over SSH")
            return {"containers": [
                {"name": "svc-0-%d" % n, "state": box["state"], "address": "172.17.0.2",
                 "labels": {"gpufleet.job": str(n), "gpufleet.submission": "0"},
                 "published": {"8000/tcp": box["port"]}}
                for n, box in world.boxes.items() if world.hosts.get(n, "h-%d" % n) == self.name]}
        if op == "claim":
            if world.refuse_claim == self.name:
                return {"claimed": False, "reason": "busy (1 of 1 blocks held by other)"}
            # the run's claim, taken over; or a share added to it (the host keeps its maker)
            assert payload["by"] == "first:1" or payload.get("add")
            return {"claimed": True}
        if op == "release":
            world.released.append((self.name, payload["jobs"]))
            return {"released": True}
        if op == "start":
            num = payload["job"]["job_num"]
            assert payload["job"]["claim"]["add"] and self.name == payload["job"]["host"]
            world.boxes[num] = {"state": "running", "port": 42000 + num}
            world.hosts[num] = self.name
            return {"started": True}
        if op == "recount":
            world.recounted.append((self.name, payload["job_num"], payload["replicas"]))
            return {"recounted": True}
        if op == "retire":
            world.retired.append(payload["job_num"])
            del world.boxes[payload["job_num"]]
            return {"retired": True}
        if op == "replace":
            num = payload["job"]["job_num"]
            assert payload["job"]["claim"]["by"] == "first:1"
            if world.fails == self.name:   # replicaside.op_replace: the old one comes back
                raise NodeError(self.name, "could not start container svc-0-%d: no such image; "
                                           "the previous version runs again" % num)
            world.up.discard(num)
            world.boxes[num] = {"state": "exited" if num in world.ends else "running",
                                "port": 41000 + num}
            world.kept[num]["config_digest"] = payload["job"]["config_digest"]
            return {"started": True}
        if op == "proxy_drain":
            if world.no_drain:
                raise NodeError(self.name, "unknown op proxy_drain")
            if payload.get("ready"):
                world.routes.append(["ready" + ("/fresh" if payload.get("fresh") else "")] +
                                    payload["replicas"])
                return {"ready": True}
            world.routes.append(["drain"] + payload["replicas"])
            return {"drained": True, "left": 0}
        if op == "proxy_replicas":
            world.routes.append([r["replica_num"] for r in payload["replicas"]])
            return {"changed": True}
        if op == "proxy_publish":
            world.routes.append([r["replica_num"] for r in payload["route"]["replicas"]])
            world.published.append(payload["route"])
            return {"changed": True}
        if op == "proxy_roll":
            world.leases.append(("release scaled %s" % payload["scaled"]) if payload.get(
                "scaled") else "release" if payload.get("release") else "take")
            if payload.get("release"):
                world.lease = None if world.lease == payload["by"] else world.lease
                return {"released": True}
            if world.lease not in (None, payload["by"]):
                return {"taken": False, "by": world.lease, "until": 0}
            world.lease = payload["by"]
            return {"taken": True}
        if op == "proxy_status":
            for num, box in world.boxes.items():
                if box["state"] == "running":
                    world.up.add(num)   # its checks pass at the next look
            return {"servers": [{"replica_num": n, "status": "UP"} for n in sorted(world.up)]}
        raise AssertionError(op)


class Preparing(object):
    def __init__(self, runner):
        self.runner = runner

    def prepare(self, number, claimed):
        self.runner.prepared = (number, claimed.placed)
        return Submission([{"job_num": j["job_num"], "host": j["host"],
                            "container": "svc-0-%d" % j["job_num"],
                            "claim": {"run": "svc", "by": "me:2"},
                            "config_digest": self.runner.digest}
                           for j in claimed.placed["jobs"]])


class Submission(object):
    def __init__(self, jobs):
        self.jobs = jobs


class Runner(object):
    def __init__(self, digest="new", nodes=2, keeps=False, resources="2 CPUs", beside=()):
        self.config = {"nodes": nodes, "resources": resources}
        self.beside = beside   # the hosts new replicas are placed on (or the error raised)
        self.beside_asked = []
        self.digest = digest
        self.preparing = Preparing(self)
        self.run_id = None
        self.kept_entry = None
        self.keeps = keeps

    def keeps_entry(self):
        return self.keeps

    def place_beside(self, kept, probe=False):
        # As tasks.runs.Runner.place_beside: the jobs after ``kept``, numbered after them.
        self.beside_asked.append(kept)
        if isinstance(self.beside, Exception):
            raise self.beside
        return [dict(job_num=len(kept) + i, host=host) for i, host in enumerate(self.beside)]

    def keep_entry(self, submission):
        self.kept_entry = submission

    def drop_entry(self):
        self.dropped_entry = True

    def readmit(self, placed):
        self.readmitted = placed


def roll(world, runner, count=2, scale_only=False):
    record = {"name": "svc", "run_id": "r1", "submission": 3,
              "jobs": [{"job_num": n, "host": "h-%d" % n} for n in range(count)]}
    events = []
    world.reached = 0

    def reach():
        world.reached += 1

    job = rolling.Roll(runner, record, world.nodes, world.nodes["h-0"], ADDRESSES,
                       dict(CONFIG, probes=[{"url": "/ready"}]),
                       "alice", "f", {"address": "10.0.0.1", "port": 3000}, events.append,
                       sleep=lambda seconds: None, scale_only=scale_only, reach=reach)
    return job, events


def failing(world, host, op, why):
    """``host`` of ``world`` answers ``op`` with a NodeError saying ``why``."""
    original = world.nodes[host].call

    def call(op_, payload=None, timeout=120):
        if op_ == op:
            raise NodeError(host, why)
        return original(op_, payload, timeout)

    world.nodes[host].call = call


DONE = {"added": [], "retired": []}


def test_each_replica_leaves_the_proxy_is_replaced_and_back_before_the_next():
    world, runner = World(), Runner(keeps=True)
    job, events = roll(world, runner)
    assert job.run() == dict(DONE, rolled=[0, 1], unchanged=False)
    # The run's own id and submission, on the hosts the replicas hold.
    assert runner.run_id == "r1" and runner.prepared[0] == 3
    assert runner.prepared[1]["jobs"] == [{"job_num": 0, "host": "h-0"},
                                          {"job_num": 1, "host": "h-1"}]
    ops = [(host, op) for host, op, _p in world.log if op in ("claim", "replace")]
    assert ops == [("h-0", "claim"), ("h-0", "replace"), ("h-1", "claim"), ("h-1", "replace")]
    # Drained before it is replaced (no new request, those in flight ended), back with its new
    # port after: at every moment one replica serves. The old version's settings stay until
    # both run the new one, whose route (its probe) is published whole at the end.
    # A replica made again on the same port changes no route, and no reload undoes its drain:
    # the roll undoes it.
    assert world.routes == [["drain", 0], [0, 1], ["ready/fresh", 0], ["drain", 1], [0, 1],
                            ["ready/fresh", 1], [0, 1]]
    assert all(route for route in world.routes)
    # The proxy's host was made able to reach the replicas before each route it was given
    # (one per replica back) and before the whole route was published.
    assert world.reached == 2 + len(world.published)
    ((route),) = world.published
    assert route["probes"] == [{"url": "/ready"}]
    assert [(r["replica_num"], r["port"]) for r in route["replicas"]] == [(0, 41000), (1, 41001)]
    assert [e["message"] for e in events] == ["replica 0 runs the new version (1 of 2)",
                                              "replica 1 runs the new version (2 of 2)"]
    assert runner.kept_entry is not None   # retry resubmits the new version
    # The update's lease: taken, renewed for each replica, let go.
    assert world.leases == ["take", "take", "take", "release"] and world.lease is None


def test_an_unchanged_service_is_left_alone_and_a_half_done_roll_goes_on():
    world = World(digests=("new", "new"))
    assert roll(world, Runner())[0].run() == dict(DONE, rolled=[], unchanged=True)
    assert not [op for _h, op, _p in world.log if op in ("claim", "replace")]
    world = World(digests=("new", "old"))
    assert roll(world, Runner())[0].run() == dict(DONE, rolled=[1], unchanged=False)
    assert [h for h, op, _p in world.log if op == "replace"] == ["h-1"]


@pytest.mark.parametrize("world, runner, count, message", [
    (World(), Runner(nodes=3, beside=rolling.GpufleetError("user bob: 2 GPUs held, cap 2")),
     2, "replicas: service svc cannot grow from 2 to 3 replicas: user bob: 2 GPUs held"),
    (World(placed=False), Runner(), 2, "started by an older gpufleet"),
    (World(), Runner(resources="8 CPUs"), 2, "resources: service svc's replicas hold"),
])
def test_what_an_update_cannot_do_is_refused_before_anything_changes(world, runner, count,
                                                                     message):
    with pytest.raises(rolling.RollError, match=message):
        roll(world, runner, count)[0].run()
    assert not [op for _h, op, _p in world.log if op in ("claim", "replace")]
    with pytest.raises(rolling.RollError, match=message):   # the plan says so too
        roll(world, runner, count)[0].plan()


def test_a_host_that_cannot_hold_the_new_version_stops_the_roll_before_it_changes():
    world = World(refuse_claim="h-1")
    with pytest.raises(rolling.RollError) as caught:
        roll(world, Runner())[0].run()
    assert "host h-1 cannot hold replica 1 of the new version: busy" in str(caught.value)
    assert "rolled to the new version: 0; still on the old one: 1" in str(caught.value)
    assert [h for h, op, _p in world.log if op == "replace"] == ["h-0"]
    assert world.boxes[1]["state"] == "running"   # the old replica 1 serves on


def test_a_new_replica_that_ends_stops_the_roll_and_says_where_each_is():
    world = World(ends={0})
    with pytest.raises(rolling.RollError) as caught:
        roll(world, Runner())[0].run()
    text = str(caught.value)
    assert "replica 0 of the new version ended before it passed its checks" in text
    assert "still on the old one: 1" in text and "replica 0 runs the new version outside" in text
    assert [h for h, op, _p in world.log if op == "replace"] == ["h-0"]


def test_a_replace_that_fails_puts_the_replica_back_in_the_route_and_says_so():
    world = World(fails="h-0")
    with pytest.raises(rolling.RollError) as caught:
        roll(world, Runner())[0].run()
    text = str(caught.value)
    assert "the previous version runs again" in text and "still on the old one: 0, 1" in text
    assert world.routes == [["drain", 0], [0, 1], ["ready/fresh", 0]]   # out, then back


def test_a_replica_host_that_does_not_answer_stops_the_roll_before_the_route_changes():
    world = World(silent="h-1")
    with pytest.raises(rolling.RollError, match="its replica's host h-1 did not answer"):
        roll(world, Runner())[0].run()
    assert world.routes == [] and not [op for _h, op, _p in world.log if op == "replace"]


def test_a_service_another_controller_updates_is_not_rolled_twice_at_once():
    world = World(leased_by="other:7")
    with pytest.raises(rolling.RollError, match="is being updated by other:7; apply again"):
        roll(world, Runner())[0].run()
    assert not [op for _h, op, _p in world.log if op in ("claim", "replace", "proxy_replicas")]
    assert world.lease == "other:7"   # theirs is left alone


def test_one_replica_is_not_replaced_in_place_but_is_rolled_once_a_second_one_is_added():
    world = World(count=1)
    with pytest.raises(rolling.RollError, match="would run one replica, which cannot be "
                                                "replaced without a gap"):
        roll(world, Runner(nodes=1), 1)[0].run()
    assert not [op for _h, op, _p in world.log if op in ("claim", "replace", "start")]
    assert world.lease is None
    # Unchanged, it is left as it is.
    world = World(count=1, digests=("new",))
    assert roll(world, Runner(nodes=1), 1)[0].run() == dict(DONE, rolled=[], unchanged=True)
    # Asked for two, the new one starts beside it first, then the old one is rolled.
    world = World(count=1)
    job, _events = roll(world, Runner(nodes=2, beside=["h-1"]), 1)
    assert job.run() == dict(DONE, added=[1], rolled=[0], unchanged=False)
    ops = [(host, op) for host, op, _p in world.log if op in ("claim", "start", "replace")]
    assert ops == [("h-1", "claim"), ("h-1", "start"), ("h-0", "claim"), ("h-0", "replace")]
    assert all(route for route in world.routes)


def test_a_scale_up_places_new_replicas_after_the_others_and_waits_for_them():
    world, runner = World(digests=("new", "new")), Runner(nodes=4, beside=["h-1", "h-0"])
    job, events = roll(world, runner)
    assert job.run() == dict(DONE, added=[2, 3], rolled=[], unchanged=False)
    # Placed after the running ones, which it is told of (admitted with them).
    assert runner.beside_asked == [[{"job_num": 0, "host": "h-0"}, {"job_num": 1, "host": "h-1"}]]
    # Prepared as the run's four jobs: the replicas kept where they are, the new ones numbered
    # after them on the hosts placed.
    assert runner.prepared[1]["jobs"] == [{"job_num": 0, "host": "h-0"},
                                          {"job_num": 1, "host": "h-1"},
                                          {"job_num": 2, "host": "h-1"},
                                          {"job_num": 3, "host": "h-0"}]
    starts = [(h, p["job"]["job_num"]) for h, op, p in world.log if op == "start"]
    assert sorted(starts) == [("h-0", 3), ("h-1", 2)]
    assert world.routes[0] == [0, 1, 2, 3] and world.routes[-1] == [0, 1, 2, 3]
    assert world.up == {0, 1, 2, 3}
    assert events[-1]["message"] == "replicas 2, 3 added (4 replicas now)"


def test_autoscaling_changes_the_count_only_and_stamps_when():
    # Replica 1 runs another version: a scale only adds replica 2 and leaves both as they are;
    # the queue entry is the pass's own. The lease's release notes that the count changed.
    world, runner = World(digests=("new", "old")), Runner(nodes=3, beside=["h-0"], keeps=True)
    job, _events = roll(world, runner, scale_only=True)
    assert job.run() == dict(DONE, added=[2], rolled=[], unchanged=False)
    assert not [op for _h, op, _p in world.log if op == "replace"]
    assert runner.kept_entry is None and not hasattr(runner, "dropped_entry")
    assert world.leases[0] == "take" and world.leases[-1] == "release scaled r1"
    # An update that changed no count does not stamp; one that needs no entry drops its own.
    world, runner = World(digests=("new", "old")), Runner()
    roll(world, runner)[0].run()
    assert world.leases[-1] == "release" and runner.dropped_entry


def test_a_scale_up_that_does_not_fit_changes_nothing_and_gives_back_what_it_took():
    world = World(digests=("new", "new"), refuse_claim="h-1")
    with pytest.raises(rolling.RollError, match="host h-1 cannot hold replica 3: busy"):
        roll(world, Runner(nodes=4, beside=["h-0", "h-1"]))[0].run()
    assert world.released == [("h-0", [2])]   # replica 2's share on h-0 went back
    assert not [op for _h, op, _p in world.log if op == "start"] and world.routes == []
    nowhere = rolling.GpufleetError("no capacity for task svc: needs 1 node")
    with pytest.raises(rolling.RollError, match="cannot grow from 2 to 3 replicas: no capacity"):
        roll(World(), Runner(nodes=3, beside=nowhere))[0].plan()


def test_a_scale_down_drains_the_last_replicas_then_has_their_hosts_take_them_away():
    world, runner = World(digests=("new", "old")), Runner(nodes=1, digest="new")
    job, events = roll(world, runner)
    assert job.run() == dict(DONE, retired=[1], rolled=[], unchanged=False)
    # The count noted beside the replica that stays, then drained, then retired, then out of
    # the route; replica 0 (at the new version) is left alone.
    assert world.recounted == [("h-0", 0, 1)]
    ops = [op for _h, op, _p in world.log if op in ("recount", "proxy_drain", "retire",
                                                    "proxy_replicas")]
    assert ops[:4] == ["recount", "proxy_drain", "retire", "proxy_replicas"]
    assert world.routes[0] == ["drain", 1] and world.retired == [1]
    assert [op for _h, op, _p in world.log if op == "retire"] == ["retire"]
    retire = [p for _h, op, p in world.log if op == "retire"][0]
    assert retire == {"run": "svc", "job_num": 1, "run_id": "r1"}
    assert world.routes[-1] == [0]
    assert events[-1]["message"] == "replica 1 taken away (1 replica now)"
    # Admitted again for what it holds now: its owner's use drops.
    assert runner.readmitted == {"fleet": "f", "jobs": [{"job_num": 0, "host": "h-0"}]}


def test_an_update_reads_the_service_again_once_it_holds_the_lease():
    # Another controller added replica 2 while this one waited: this update sees it.
    world = World(digests=("new", "new"))
    world.kept[2] = dict(world.kept[1], container="svc-0-2",
                         placed={"job_num": 2, "host": "h-1"})
    world.boxes[2] = {"state": "running", "port": 40002}
    world.hosts[2] = "h-1"
    job, _events = roll(world, Runner(nodes=3, beside=RuntimeError("placed twice")))
    job.fresh = lambda record: dict(record, jobs=record["jobs"] + [{"job_num": 2, "host": "h-1"}])
    assert job.run() == dict(DONE, rolled=[], unchanged=True)
    assert not [op for _h, op, _p in world.log if op in ("claim", "start")]


def test_a_proxy_that_cannot_drain_gets_the_route_without_the_replica_for_a_while():
    world = World()
    world.no_drain = True
    naps = []
    job, _events = roll(world, Runner())
    job.sleep = naps.append
    assert job.run()["rolled"] == [0, 1]
    assert world.routes == [[1], [0, 1], [0], [0, 1], [0, 1]]
    assert naps.count(rolling.DRAIN_SECONDS) == 2


def test_a_drained_replica_is_taken_back_even_when_its_route_cannot_be_set():
    world = World(fails="h-0")
    job, events = roll(world, Runner())
    calls = []

    def broken(kept, leave_out=None):
        calls.append(leave_out)
        raise rolling.RollError("service svc: the proxy host did not answer")

    job._set_replicas = broken
    with pytest.raises(rolling.RollError):
        job.run()
    assert world.routes == [["drain", 0], ["ready/fresh", 0]]
    # A retire that fails puts the replica back in service the same way.
    world = World(digests=("new", "new"))
    job, events = roll(world, Runner(nodes=1))
    failing(world, "h-1", "retire", "could not remove svc-0-1: device busy")
    with pytest.raises(rolling.RollError, match="could not take away replica 1 on h-1"):
        job.run()
    assert world.routes[0] == ["drain", 1] and world.routes[-1] == ["ready", 1]


def test_a_scale_up_whose_start_fails_on_one_host_keeps_what_started_and_says_which():
    world = World(digests=("new", "new"))
    failing(world, "h-1", "start", "could not start container svc-0-3: no such image")
    with pytest.raises(rolling.RollError, match="could not start replica 3 on h-1: .*no such "
                                                "image; apply again"):
        roll(world, Runner(nodes=4, beside=["h-0", "h-1"]))[0].run()
    assert world.released == [("h-1", [3])]   # its share, given back
    assert world.routes[-1] == [0, 1, 2]      # the one that started serves


def grouped_world(digests=("old", "old")):
    """World whose two replicas are one each of replica groups a and b (1 CPU, 2 CPUs)."""
    world = World(digests=digests)
    for num, (group, resources) in enumerate((("a", "1 CPU"), ("b", "2 CPUs"))):
        world.kept[num]["placed"]["group"] = group
        world.kept[num]["resources"] = resources
    return world


def grouped_runner(groups=(("a", 1, "1 CPU"), ("b", 1, "2 CPUs"))):
    runner = Runner()
    runner.config["groups"] = [{"name": n, "nodes": c, "resources": r} for n, c, r in groups]
    return runner


def test_a_service_with_replica_groups_rolls_within_its_groups_and_keeps_them():
    world = grouped_world(("new", "old"))
    assert roll(world, grouped_runner())[0].run() == dict(DONE, rolled=[1], unchanged=False)
    # each replica is held to its own group's resources
    world = grouped_world()
    with pytest.raises(rolling.RollError, match="resources: service svc's replicas hold"):
        roll(world, grouped_runner((("a", 1, "2 CPUs"), ("b", 1, "2 CPUs"))))[0].run()
    # other groups, counts or order: refused before anything changes
    for groups, asked in (((("a", 2, "1 CPU"),), "replica groups a (2)"),
                          ((("b", 1, "2 CPUs"), ("a", 1, "1 CPU")), "replica groups b (1), a (1)"),
                          ((), "no replica groups")):
        world = grouped_world()
        runner = grouped_runner(groups) if groups else Runner()
        with pytest.raises(rolling.RollError, match=r"groups: service svc runs replica groups a "
                           r"\(1\), b \(1\), and this apply asks for %s: a running service "
                           r"keeps its replica groups" % asked.replace("(", r"\(").replace(
                               ")", r"\)")):
            roll(world, runner)[0].run()
        assert not [op for _h, op, _p in world.log if op in ("claim", "replace", "proxy_drain")]
    # a service without groups asked to have some
    with pytest.raises(rolling.RollError, match="runs no replica groups, and this apply asks "
                                                "for replica groups a"):
        roll(World(), grouped_runner())[0].run()
