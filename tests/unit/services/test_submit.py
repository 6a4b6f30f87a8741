# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""services.submit: a service's proxy host checked (and set up by task.yml when HAProxy is
missing), its user's token put on the fleet, its replicas submitted through the task runner,
its route published once they run and taken off when an attached run ends."""

from __future__ import annotations

import pytest
from ansible_collections.gpufleet.cluster.plugins.module_utils.services import submit as services
from ansible_collections.gpufleet.cluster.plugins.module_utils.tasks import (
    actions,
    listing,
    membership,
    surveys,
)

from ..tasks.fakes import fleet_of_instances
from .fakes import FakeNode, StoreFake, replica_entry

SERVICE = {"type": "service", "name": "svc", "commands": ["python3 -m http.server 8000"],
           "port": 8000, "replicas": {"min": 2, "max": 2}, "groups": None, "scaling": None,
           "model": {"type": "chat", "name": "tiny", "format": "openai", "prefix": "/v1"},
           "auth": True, "https": None, "gateway": None, "strip_prefix": True,
           "rate_limits": [], "probes": [], "fleets": None, "nodes": 1, "ports": []}
PARAMS = {"path": "/x/svc.dstack.yml", "wait": True, "array": None, "state_dir": None,
          "fleets": []}


class World(object):
    """The fleets, their hosts and the task runner as services.submit sees them."""

    def __init__(self, monkeypatch, config=None, installed=True, events=("running",),
                 status="terminated"):
        config = dict(SERVICE) if config is None else config
        self.fleets = [fleet_of_instances("b", 2, internal_ip=None, port=22, user="root")]
        for record in self.fleets[0]["instances"]:
            record["placement"] = "any"
        self.fleets[0]["instances"][1]["internal_ip"] = "10.1.0.3"
        self.submitted = []
        self.tokens = []
        status_answer = {"containers": [replica_entry(0, 49153), replica_entry(1, 49154)]}
        self.proxy = FakeNode("b-0", proxy_check={"installed": installed, "running": installed,
                                                  "version": "2.6" if installed else None},
                              proxy_publish={"changed": True, "routes": ["svc"]},
                              proxy_unpublish={"changed": True, "routes": []},
                              status={"containers": []})
        self.other = FakeNode("b-1", status=status_answer)
        nodes = {"b-0": self.proxy, "b-1": self.other}

        def submit(params, emit=None, check_mode=False, stop_event=None, runnable=None,
                   config=None, services=None, gate=None):
            self.submitted.append({"params": params, "runnable": runnable, "config": config,
                                   "services": services, "gate": gate})
            for status_ in events:
                emit({"kind": "run", "run": "svc", "status": status_})
            return {"run": params.get("name"), "status": status, "jobs": []}, False

        monkeypatch.setattr(actions, "load_task", lambda params: dict(config))
        monkeypatch.setattr(actions, "fleets_of", lambda params: ("/state", self.fleets))
        monkeypatch.setattr(actions, "submitter", lambda params: "alice")
        monkeypatch.setattr(actions, "submit", submit)
        monkeypatch.setattr(surveys, "nodes_of", lambda fleets, root: dict(nodes))
        monkeypatch.setattr(listing, "list_runs", lambda nodes: ([], {}))
        monkeypatch.setattr(membership, "publish_token",
                            lambda nodes, fleet, user, digest: self.tokens.append(
                                (sorted(nodes), fleet, user, digest)))


def run(params=None, **kwargs):
    events = []
    result, failed = services.submit(dict(PARAMS if params is None else params),
                                     emit=events.append, **kwargs)
    return result, failed, events


def test_a_task_goes_to_the_runner_as_it_is(monkeypatch):
    world = World(monkeypatch, config={"type": "task", "name": "train"})
    result, failed, _events = run()
    assert not failed and result["status"] == "terminated" and "service" not in result
    (call,) = world.submitted
    assert call["runnable"] is None
    # the passes over the queue it makes keep queued services' routes, and judge the runs
    # that wait for others with the gate it was given
    assert call["services"] is services.queue_hook and call["gate"] is None
    gate = object()
    services.submit(dict(PARAMS), gate=gate)
    assert world.submitted[-1]["gate"] is gate


def test_without_haproxy_on_the_proxy_host_nothing_runs_and_task_yml_sets_it_up(monkeypatch):
    world = World(monkeypatch, installed=False)
    result, failed, _events = run()
    assert not failed and world.submitted == [] and world.proxy.ops() == ["proxy_check"]
    setup = result["proxy_setup"]
    assert (setup["host"], setup["fleet"]) == ("b-0", "b")
    assert setup["host_entry"]["name"] == "b-0"
    assert setup["host_entry"]["vars"]["ansible_host"] == "192.0.2.1"
    assert "HAProxy is not installed on b-0" in result["message"]
    # a plan (check mode) asks, and goes on to place the replicas
    result, failed, _events = run(check_mode=True)
    assert "proxy_setup" not in result and len(world.submitted) == 1


def test_the_replicas_run_on_the_proxys_fleet_and_their_route_is_published(monkeypatch):
    world = World(monkeypatch)
    result, failed, events = run(token_digest="ab" * 32)
    (call,) = world.submitted
    assert call["params"]["name"] == "svc"
    runnable = call["runnable"](dict(SERVICE))
    assert runnable["fleets"] == ["b"] and runnable["nodes"] == 2
    assert runnable["service"]["proxy_host"] == "b-0"
    assert runnable["service"]["url"] == "http://192.0.2.1:3000/proxy/services/main/svc/"
    # published when the run's replicas all ran, with the ports their hosts report
    op, payload = [c for c in world.proxy.calls if c[0] == "proxy_publish"][0]
    # a host the role did not record: its address, port 3000 (the world's hosts have no
    # internal address but the one SSH uses)
    assert payload["listen"] == {"address": "192.0.2.1", "port": 3000}
    assert [(r["host"], r["address"], r["port"]) for r in payload["route"]["replicas"]] == [
        ("b-1", "10.1.0.3", 49153), ("b-1", "10.1.0.3", 49154)]
    assert payload["route"]["user"] == "alice" and payload["route"]["fleet"] == "b"
    shown = [e for e in events if e["kind"] == "service"]
    assert shown and shown[0]["url"] == "http://192.0.2.1:3000/proxy/services/main/svc/"
    assert shown[0]["model"] == "tiny"
    assert shown[0]["model_url"] == "http://192.0.2.1:3000/proxy/models/main/"
    # the user's token digest went to the fleet's hosts first
    assert world.tokens == [(["b-0", "b-1"], "b", "alice", "ab" * 32)]
    # attached, the run ended (stopped): its route went with it
    assert world.proxy.ops()[-1] == "proxy_unpublish"
    service = result["service"]
    assert (service["proxy_host"], service["replicas"], service["port"]) == ("b-0", 2, 8000)
    assert service["published"] is False and not failed


@pytest.mark.parametrize("listen, url", [
    ({"address": "10.1.0.2", "port": 8080}, "http://10.1.0.2:8080/proxy/services/main/svc/"),
    ({"address": "0.0.0.0", "port": 3001}, "http://192.0.2.1:3001/proxy/services/main/svc/"),
])
def test_the_url_takes_the_address_and_port_the_gateway_role_listens_on(
        monkeypatch, listen, url):
    world = World(monkeypatch)
    world.proxy.answers["proxy_check"] = dict(world.proxy.answers["proxy_check"],
                                              listen=listen)
    result, _failed, events = run()
    (call,) = world.submitted
    assert call["runnable"](dict(SERVICE))["service"]["url"] == url
    assert call["runnable"](dict(SERVICE))["service"]["proxy_port"] == listen["port"]
    assert [e for e in events if e["kind"] == "service"][0]["url"] == url
    assert result["service"]["url"] == url
    op, payload = [c for c in world.proxy.calls if c[0] == "proxy_publish"][0]
    assert payload["listen"] == listen


def test_a_detached_service_is_published_once_submitted(monkeypatch):
    world = World(monkeypatch, events=(), status="provisioning")
    result, failed, _events = run(dict(PARAMS, wait=False))
    assert "proxy_publish" in world.proxy.ops() and "proxy_unpublish" not in world.proxy.ops()
    assert result["service"]["published"] is True and result["service"]["error"] is None


def test_a_failed_publish_is_said_and_the_run_goes_on(monkeypatch):
    from ansible_collections.gpufleet.cluster.plugins.module_utils.tasks.ssh import NodeError

    world = World(monkeypatch, events=(), status="running")
    world.proxy.answers["proxy_publish"] = NodeError("b-0", "haproxy -c failed: line 3")
    result, failed, events = run(dict(PARAMS, wait=False))
    assert not failed and result["service"]["published"] is False
    assert "line 3" in result["service"]["error"]
    assert any("could not publish service svc" in e.get("message", "") for e in events)


def test_a_service_is_refused_as_a_job_array_and_with_a_clashing_model(monkeypatch):
    World(monkeypatch)
    with pytest.raises(actions.ActionError, match="array: a service is not run as a job array"):
        run(dict(PARAMS, array="1-3"))
    other = {"name": "old", "status": "running",
             "service": {"proxy_host": "b-0", "model": "tiny"}}
    monkeypatch.setattr(listing, "list_runs", lambda nodes: ([other], {}))
    with pytest.raises(actions.ActionError, match="model: tiny is already published"):
        run()


def test_a_token_the_fleet_refuses_is_said_and_the_service_runs(monkeypatch):
    from ansible_collections.gpufleet.cluster.plugins.module_utils.core.errors import (
        GpufleetError,
    )

    world = World(monkeypatch)

    def refuse(nodes, fleet, user, digest):
        raise GpufleetError("alice is not a member of fleet b")

    monkeypatch.setattr(membership, "publish_token", refuse)
    result, failed, events = run(token_digest="ef" * 32)
    assert not failed and len(world.submitted) == 1
    assert any("not a member of fleet b" in e.get("message", "") for e in events)


def test_the_token_is_made_in_the_store_for_a_service_only(monkeypatch):
    from ansible_collections.gpufleet.cluster.plugins.module_utils.services import tokens

    World(monkeypatch)

    store = StoreFake()
    opened = []

    def open_store():
        opened.append(1)
        return store

    digest = services.token_digest(PARAMS, open_store)
    assert digest == tokens.digest(store.values[tokens.store_name("alice")])
    assert services.token_digest(PARAMS, open_store) == digest   # made once
    monkeypatch.setattr(actions, "load_task", lambda params: {"type": "task"})
    assert services.token_digest(PARAMS, open_store) is None and opened == [1, 1]


def test_why_there_is_no_token_is_said_and_the_service_runs(monkeypatch):
    world = World(monkeypatch)
    result, failed, events = run(token_error="no vault password to open the store")
    assert not failed and len(world.submitted) == 1 and world.tokens == []
    assert any("no vault password" in e.get("message", "") for e in events)


def test_apply_of_a_running_autoscaled_service_keeps_its_count_within_the_range(monkeypatch):
    from ansible_collections.gpufleet.cluster.plugins.module_utils.services import rolling

    rules = {"metric": "rps", "target": 5.0, "window": 30, "scale_up_delay": 0,
             "scale_down_delay": 0}
    made = []

    class Roll(object):
        def __init__(self, runner, *args, **kwargs):
            made.append(runner)

        def run(self):
            return {"rolled": [], "unchanged": True, "added": [], "retired": []}

    def factory(params, config, emit, check_mode, runnable, hook):
        return "/state", [], lambda config_: type("Runner", (), {"config": runnable(config_)})

    monkeypatch.setattr(rolling, "Roll", Roll)
    monkeypatch.setattr(actions, "runner_factory", factory)
    for jobs, (least, most), count in ((3, (1, 4), 3), (3, (1, 2), 2), (1, (2, 4), 2)):
        config = dict(SERVICE, replicas={"min": least, "max": most}, scaling=rules)
        World(monkeypatch, config)
        live = {"name": "svc", "run_id": "r1", "status": "running", "service": {"port": 8000},
                "jobs": [{"job_num": n, "host": "b-1"} for n in range(jobs)]}
        monkeypatch.setattr(listing, "list_runs", lambda nodes: ([live], {}))
        result, failed, _events = run()
        assert not failed and result["service"]["replicas"] == count
        runner = made.pop()
        assert runner.config["nodes"] == count
        assert runner.config["service"]["scaling"]["max"] == most


def gateway_world(monkeypatch, config):
    """World with a gateway gw (one host, gw-0) beside fleet b."""
    world = World(monkeypatch, config)
    record = fleet_of_instances("gw", 1, internal_ip="172.20.0.2", port=22, user="root")
    record["gateway"] = {"domain": "example.com", "default": None}
    world.fleets.append(record)
    listen = {"address": "0.0.0.0", "port": 80, "https_port": 443, "gateway": "gw",
              "domain": "example.com", "certificate": "self-signed", "default": None}
    world.gateway = FakeNode("gw-0", proxy_check={"installed": True, "running": True,
                                                  "listen": listen},
                             proxy_publish={"changed": True, "routes": ["svc"]})
    nodes = {"b-0": world.proxy, "b-1": world.other, "gw-0": world.gateway}
    monkeypatch.setattr(surveys, "nodes_of", lambda fleets, root: dict(nodes))
    return world


def test_a_service_on_the_default_gateway_is_published_there_with_its_token(monkeypatch):
    world = gateway_world(monkeypatch, dict(SERVICE))
    result, failed, events = run(token_digest="d" * 64)
    assert not failed
    assert (result["service"]["url"], result["service"]["model_url"]) == (
        "https://svc.example.com/", "https://gateway.example.com/")
    assert (result["service"]["gateway"], result["service"]["proxy_host"]) == ("gw", "gw-0")
    # The replicas stay on fleet b; the route, with https, goes to the gateway's host.
    assert world.submitted[0]["runnable"](dict(SERVICE))["fleets"] == ["b"]
    (route,) = [p["route"] for op, p in world.gateway.calls if op == "proxy_publish"]
    assert route["https"] is True and route["fleet"] == "b"
    assert not [op for op, _p in world.proxy.calls if op.startswith("proxy_")]
    # The token goes to the gateway's members, who its requests are checked against.
    assert world.tokens == [(["gw-0"], "gw", "alice", "d" * 64)]
    # gateway: false keeps the in-fleet proxy.
    world = gateway_world(monkeypatch, dict(SERVICE, gateway=False))
    result, failed, _events = run()
    assert result["service"]["url"].endswith("/proxy/services/main/svc/")


def test_a_running_service_is_not_moved_to_another_proxy_by_an_apply(monkeypatch):
    gateway_world(monkeypatch, dict(SERVICE))
    live = {"name": "svc", "run_id": "r1", "status": "running",
            "service": {"port": 8000, "proxy_host": "b-0", "gateway": None},
            "jobs": [{"job_num": 0, "host": "b-1"}]}
    monkeypatch.setattr(listing, "list_runs", lambda nodes: ([live], {}))
    with pytest.raises(actions.ActionError, match="service svc runs published by the proxy of "
                                                  "its fleet on b-0, and this apply would "
                                                  "publish it by gateway gw: stop it"):
        run()


class StillRoll(object):
    """services.rolling.Roll where nothing changes: how it was made is kept."""

    made = []

    def __init__(self, runner, record, nodes, proxy_node, *args, **kwargs):
        StillRoll.made.append({"proxy_node": proxy_node.name, "moved": kwargs.get("moved")})

    def run(self):
        return {"rolled": [], "unchanged": True, "added": [], "retired": []}

    def plan(self):
        return {"replicas": []}


def running_world(monkeypatch, proxy_host, jobs=((0, "b-1"),), nodes=None):
    from ansible_collections.gpufleet.cluster.plugins.module_utils.services import rolling

    from ansible_collections.gpufleet.cluster.plugins.module_utils.services import replicas

    world = World(monkeypatch)
    # where it is published: as submit works it out for proxy_host, when that is in the fleet
    found = [i for i in world.fleets[0]["instances"] if i["name"] == proxy_host]
    address = (found[0].get("internal_ip") or found[0]["hostname"]) if found else "10.9.9.9"
    live = {"name": "svc", "run_id": "r1", "status": "running", "nodes": nodes or len(jobs),
            "service": dict(replicas.proxy_of("svc", proxy_host, address, SERVICE["model"]),
                            port=8000, gateway=None),
            "jobs": [{"job_num": n, "host": h} for n, h in jobs]}
    monkeypatch.setattr(listing, "list_runs", lambda nodes_: ([live], {}))
    monkeypatch.setattr(rolling, "Roll", StillRoll)
    monkeypatch.setattr(actions, "runner_factory", lambda params, config, emit, check_mode,
                        runnable, hook: ("/state", [], lambda config_: type(
                            "Runner", (), {"config": runnable(config_)})))
    StillRoll.made = []
    return world


def test_a_service_whose_proxy_host_is_lost_is_published_by_another_host_and_apply_says_so(
        monkeypatch):
    world = running_world(monkeypatch, "b-7")   # b-7 is no host of fleet b any more
    result, failed, events = run()
    assert not failed
    assert StillRoll.made == [{"proxy_node": "b-0", "moved": True}]
    assert (result["service"]["proxy_host"], result["service"]["moved_from"]) == ("b-0", "b-7")
    (said,) = [e["message"] for e in events if e["kind"] == "info" and "b-7" in e["message"]]
    assert said == ("service svc: its proxy host b-7 is no longer a host of fleet b; the proxy "
                    "on b-0 publishes it from now on")
    # apply prints the new URL as the first one did
    (service,) = [e for e in events if e["kind"] == "service"]
    assert service["url"] == result["service"]["url"] and service["proxy_host"] == "b-0"
    # the replica notes where it is published now, for every later look at the run
    (note,) = [p for op, p in world.other.calls if op == "repoint"]
    assert (note["run"], note["job_num"], note["run_id"]) == ("svc", 0, "r1")
    assert (note["proxy"]["proxy_host"], note["proxy"]["moved_from"]) == ("b-0", "b-7")
    assert note["proxy"]["url"] == result["service"]["url"]


def test_a_plan_says_the_proxy_moves_and_the_new_host_gets_haproxy_first(monkeypatch):
    running_world(monkeypatch, "b-7")
    result, _failed, events = run(check_mode=True)
    assert result["rolls"] and result["service"]["moved_from"] == "b-7"
    assert any("its proxy host b-7 is no longer" in e.get("message", "") for e in events)
    world = running_world(monkeypatch, "b-7")
    world.proxy.answers["proxy_check"] = {"installed": False, "running": False}
    result, failed, _events = run()
    assert not failed and result["proxy_setup"]["host"] == "b-0"
    assert result["moved_from"] == "b-7" and StillRoll.made == []


def test_the_host_that_publishes_a_service_keeps_it_while_it_is_in_its_fleet(monkeypatch):
    # b-1 publishes it (b-0, the queue host now, came later): b-1 stays its proxy
    world = running_world(monkeypatch, "b-1", jobs=((0, "b-0"),))
    world.other.answers["proxy_check"] = {"installed": True, "running": True}
    result, failed, events = run()
    assert not failed and StillRoll.made == [{"proxy_node": "b-1", "moved": False}]
    assert result["service"]["proxy_host"] == "b-1" and result["service"]["moved_from"] is None
    assert not [e for e in events if e["kind"] == "service"]
    assert "repoint" not in world.proxy.ops()


def test_a_silent_proxy_host_or_a_replica_lost_with_it_is_said_and_nothing_moves(monkeypatch):
    from ansible_collections.gpufleet.cluster.plugins.module_utils.tasks.ssh import NodeError

    world = running_world(monkeypatch, "b-1", jobs=((0, "b-0"),))
    world.other.answers["proxy_check"] = NodeError("b-1", "ssh: connection timed out")
    with pytest.raises(actions.ActionError, match=r"service svc is published by the proxy on "
                       r"b-1, which does not answer \(.*connection timed out\): apply it again "
                       r"once b-1 is back; if it is lost for good, take it out of fleet b "
                       r"\(gpufleet fleet delete b -i N\)"):
        run()
    # two replicas, one of them on the lost host (so no host lists it any more)
    running_world(monkeypatch, "b-7", nodes=2)
    with pytest.raises(actions.ActionError, match="service svc lost its proxy host b-7, and its "
                                                  "replica 1 with it: stop it"):
        run()
    assert StillRoll.made == []


def test_a_service_published_at_another_address_now_is_published_there_again(monkeypatch):
    # b-0 publishes it at 10.9.9.9 in its records, and b-0 is at another address now (the
    # gateway role played with other values, or the host made again under its name)
    world = running_world(monkeypatch, "b-0")
    live = listing.list_runs({})[0][0]
    live["service"].update(proxy_address="10.9.9.9",
                           url="http://10.9.9.9:3000/proxy/services/main/svc/")
    result, failed, events = run()
    assert not failed and StillRoll.made == [{"proxy_node": "b-0", "moved": True}]
    assert result["service"]["moved_from"] is None
    assert not [e for e in events if "no longer a host" in e.get("message", "")]
    # published there before the roll, its URL said again, its replicas told
    assert "proxy_publish" in world.proxy.ops()
    (service,) = [e for e in events if e["kind"] == "service"]
    assert service["url"] == result["service"]["url"] != live["service"]["url"]
    (note,) = [p for op, p in world.other.calls if op == "repoint"]
    assert note["proxy"]["url"] == result["service"]["url"]
    assert note["proxy"]["moved_from"] is None
    # at the address it has, nothing is published again before the roll
    world = running_world(monkeypatch, "b-0")
    result, failed, events = run()
    assert not failed and StillRoll.made == [{"proxy_node": "b-0", "moved": False}]
    assert "proxy_publish" not in world.proxy.ops() and "repoint" not in world.other.ops()


def test_a_move_the_new_proxy_refuses_changes_nothing_else(monkeypatch):
    from ansible_collections.gpufleet.cluster.plugins.module_utils.tasks.ssh import NodeError

    world = running_world(monkeypatch, "b-7")
    world.proxy.answers["proxy_publish"] = NodeError("b-0", "haproxy: bad config")
    with pytest.raises(actions.ActionError, match="could not publish service svc on b-0"):
        run()
    assert StillRoll.made == [{"proxy_node": "b-0", "moved": True}]
    assert "repoint" not in world.other.ops()
