# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""services.submit.queue_hook: what a pass over the queue (tasks.queue.QueuePass) does for a
service it started from its entry (the route published with the replicas the hosts report,
again after a resubmission) and for one it saw finished (the route taken off)."""

from __future__ import annotations

import pytest
from ansible_collections.gpufleet.cluster.plugins.module_utils.services import publish, replicas
from ansible_collections.gpufleet.cluster.plugins.module_utils.services import submit as services
from ansible_collections.gpufleet.cluster.plugins.module_utils.tasks.ssh import NodeError

from .fakes import SERVICE, FakeNode, fleets, replica_entry


def entry(**more):
    """A queue entry of the service (tasks.runbook): its config as the runner took it."""
    proxy = replicas.proxy_of("svc", "b-0", "192.0.2.1", SERVICE["model"])
    return dict({"run": "svc", "run_id": "r1", "user": "alice", "submissions": 0,
                 "config": replicas.runnable(dict(SERVICE), proxy)}, **more)


def hosts(first, second, proxy_publish=None):
    proxy = FakeNode("b-0", status={"containers": first},
                     proxy_publish=proxy_publish or {"changed": True, "routes": ["svc"]},
                     proxy_unpublish={"changed": True, "routes": []})
    return {"b-0": proxy, "b-1": FakeNode("b-1", status={"containers": second}),
            "c-0": FakeNode("c-0", status={"containers": []})}


def published(node):
    ((op, payload),) = [c for c in node.calls if c[0] == "proxy_publish"]
    # A pass has no proxy_check answer to hand on: the host listens where the gateway role
    # recorded (/etc/haproxy/gpufleet-listen.json), as it did when the service was first applied.
    assert op == "proxy_publish" and "listen" not in payload
    return payload["route"]


def test_a_service_started_by_a_pass_is_published_with_its_replicas():
    nodes = hosts([], [replica_entry(0, 49153), replica_entry(1, 49154)])
    answer = services.queue_hook({"kind": "started", "run": "svc", "entry": entry()},
                                 fleets(), nodes)
    assert answer == {"changed": True}
    route = published(nodes["b-0"])
    assert (route["run"], route["user"], route["fleet"], route["port"]) == (
        "svc", "alice", "b", 8000)
    assert route["model"]["name"] == "tiny" and route["auth"] is True
    assert [(r["replica_num"], r["host"], r["address"], r["port"]) for r in route["replicas"]] \
        == [(0, "b-1", "10.1.0.3", 49153), (1, "b-1", "10.1.0.3", 49154)]
    # the replicas' hosts are the fleet's: another fleet's host is not asked
    assert nodes["c-0"].calls == []


def test_a_resubmitted_service_is_published_with_its_new_replicas_only():
    """Retry placed the new submission on other hosts and ports: the route follows them
    (the old submission's containers, if any are left, are not in it)."""
    nodes = hosts([replica_entry(0, 40001, submission=1), replica_entry(1, 40002, submission=1)],
                  [replica_entry(0, 49153), replica_entry(1, 49154, state="exited")])
    nodes["b-0"].answers["status"]["containers"][0]["address"] = "172.17.0.9"
    services.queue_hook({"kind": "started", "run": "svc", "entry": entry(submissions=1)},
                        fleets(), nodes)
    route = published(nodes["b-0"])
    assert [(r["replica_num"], r["host"], r["port"]) for r in route["replicas"]] == [
        (0, "b-0", 40001), (1, "b-0", 40002)]


def test_a_service_that_ended_is_taken_off_its_proxy():
    nodes = hosts([], [])
    record = {"name": "svc", "status": "failed",
              "service": {"proxy_host": "b-0", "url": "http://192.0.2.1:3000/x/"}}
    answer = services.queue_hook({"kind": "ended", "record": record}, fleets(), nodes)
    assert answer["changed"] is True
    assert nodes["b-0"].calls == [("proxy_unpublish", {"run": "svc"})]
    # a proxy host that is gone has nothing left to take off
    answer = services.queue_hook({"kind": "ended", "record": dict(
        record, service={"proxy_host": "gone-0"})}, fleets(), nodes)
    assert answer["changed"] is False


def test_what_is_no_service_is_left_alone():
    nodes = hosts([], [])
    task_entry = {"run": "train", "run_id": "r2", "config": {"type": "task", "name": "train"}}
    assert services.queue_hook({"kind": "started", "run": "train", "entry": task_entry},
                               fleets(), nodes) is None
    assert services.queue_hook({"kind": "ended", "record": {"name": "train"}},
                               fleets(), nodes) is None
    assert all(node.calls == [] for node in nodes.values())


def test_a_proxy_that_refuses_or_cannot_be_reached_is_a_clear_error():
    nodes = hosts([], [replica_entry(0, 49153), replica_entry(1, 49154)],
                  proxy_publish=NodeError("b-0", "haproxy: bad config"))
    with pytest.raises(publish.PublishError, match="could not publish service svc on b-0: "
                                                   "b-0: haproxy: bad config"):
        services.queue_hook({"kind": "started", "run": "svc", "entry": entry()}, fleets(), nodes)
    del nodes["b-0"]
    with pytest.raises(publish.PublishError, match="its proxy host b-0 cannot be reached"):
        services.queue_hook({"kind": "started", "run": "svc", "entry": entry()}, fleets(), nodes)
