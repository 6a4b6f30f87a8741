"""attach.stop.stop_run: a stop's one sequence of steps (every job stopped, then the run's SSH
aliases on this controller forgotten), which the run_stop module (playbooks/stop.yml's one
step) and ``gpufleet stop`` in its own process (gpufleet.direct, behind gpufleet.api) both
call."""

from __future__ import annotations

import ast
import os
from pathlib import Path

import pytest
import yaml
from ansible_collections.gpufleet.cluster.plugins.module_utils.attach import session, stop
from ansible_collections.gpufleet.cluster.plugins.module_utils.tasks import actions

from gpufleet import direct

ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture
def calls(monkeypatch):
    """actions.run_stop and the attach session's entry replaced by recorders of ``(name,
    params, kwargs)``, answering ``calls.answers[name]``."""
    class Calls(list):
        answers = {}

    made = Calls()

    def fake(name):
        def function(params, **kwargs):
            made.append((name, dict(params), kwargs))
            return made.answers[name]
        return function

    monkeypatch.setattr(actions, "run_stop", fake("run_stop"))
    monkeypatch.setattr(session, "attach_entry", fake("attach_entry"))
    made.answers["run_stop"] = {"run": {"name": "train", "status": "terminated",
                                        "stopped": ["a"]}, "changed": True}
    made.answers["attach_entry"] = {"run": "train", "changed": False}
    return made


def test_a_stop_stops_then_forgets_the_runs_ssh_aliases(calls):
    """The one sequence, as gpufleet stop runs it in its own process (the command's
    parameters become the module's): the jobs stopped first, then the aliases forgotten."""
    record = direct.stop("train", abort=True, state_dir="/s")
    assert record["status"] == "terminated"
    assert [c[0] for c in calls] == ["run_stop", "attach_entry"]
    assert calls[0][1] == {"name": "train", "abort": True, "force": False, "user": None,
                           "delete": False, "fleets": [], "state_dir": "/s"}
    assert (calls[1][1]["name"], calls[1][1]["state"], calls[1][1]["state_dir"]) == (
        "train", "absent", "/s")


def test_the_sequence_takes_the_modules_parameters_and_says_what_changed(calls):
    params = {"name": "train", "abort": False, "fleets": ["/f/gpus.yml"], "state_dir": None}
    answer = stop.stop_run(params)
    assert answer == {"run": calls.answers["run_stop"]["run"], "changed": True}
    assert calls[0][1] == params and calls[0][2]["check_mode"] is False
    # the pass over the queue after the stop keeps services' routes (services.submit)
    assert set(calls[0][2]) == {"check_mode", "services", "gate"}
    assert callable(calls[0][2]["services"]) and callable(calls[0][2]["gate"])
    forget = calls[1][1]
    # Forgetting asks nothing of the hosts: no fleet files; the attach module's defaults.
    assert (forget["fleets"], forget["job"], forget["forward"], forget["include"]) == (
        [], 0, False, True)
    assert forget["ssh_config"] == os.path.expanduser("~/.ssh/config")
    assert set(forget) == set(session.ATTACH_ARGS)
    # A run already stopped whose aliases were still there: the removal is the change.
    calls.answers["run_stop"] = {"run": {"name": "train", "status": "terminated",
                                         "stopped": []}, "changed": False}
    calls.answers["attach_entry"] = {"run": "train", "changed": True}
    assert stop.stop_run(params)["changed"] is True


def test_in_check_mode_nothing_is_stopped_and_nothing_forgotten(calls):
    """As stop.yml in check mode did: run_stop checks, the alias removal does not run."""
    stop.stop_run({"name": "train", "abort": False, "fleets": [], "state_dir": None},
                  check_mode=True)
    assert [(c[0], c[2]) for c in calls] == [("run_stop", {"check_mode": True})]


def test_stop_yml_and_the_run_stop_module_have_the_sequence_once():
    """stop.yml's one step is run_stop, whose module calls the sequence; no second step
    removes the aliases."""
    [play] = yaml.safe_load((ROOT / "playbooks" / "stop.yml").read_text())
    modules = [next(k for k in task if k.startswith(("gpufleet.", "ansible.")))
               for task in play["tasks"]]
    assert modules.count("gpufleet.cluster.run_stop") == 1
    assert "gpufleet.cluster.run_attach" not in modules
    tree = ast.parse((ROOT / "plugins" / "modules" / "run_stop.py").read_text())
    called = [ast.unparse(node.func) for node in ast.walk(tree) if isinstance(node, ast.Call)]
    assert "stop.stop_run" in called and "actions.run_stop" not in called


def test_a_stopped_services_route_goes_off_its_proxy_after_its_replicas(calls, monkeypatch):
    """A service: once run_stop stopped its replicas, proxy_unpublish on its proxy host (the
    host its record names), before the aliases are forgotten; a task asks no proxy."""
    from ansible_collections.gpufleet.cluster.plugins.module_utils.tasks import surveys

    from ..services.fakes import FakeNode

    proxy = FakeNode("b-0", proxy_unpublish={"changed": True, "routes": []})
    monkeypatch.setattr(actions, "fleets_of", lambda params: ("/s", []))
    monkeypatch.setattr(surveys, "nodes_of", lambda fleets, root: {"b-0": proxy})
    calls.answers["run_stop"] = {"run": {"name": "svc", "status": "terminated", "stopped": ["a"],
                                         "service": {"proxy_host": "b-0"}}, "changed": True}
    answer = stop.stop_run({"name": "svc", "abort": False, "fleets": [], "state_dir": "/s"})
    assert proxy.calls == [("proxy_unpublish", {"run": "svc"})]
    assert answer["unpublished"] is True and answer["changed"] is True
    assert [c[0] for c in calls] == ["run_stop", "attach_entry"]


def test_the_pass_after_a_stop_leaves_the_stopped_service_to_the_stop(calls):
    """run_stop's pass over the queue takes services.submit's hook, except for the stopped run
    itself: the stop takes its route off (and says so in ``unpublished``)."""
    from ..services.fakes import FakeNode

    stop.stop_run({"name": "svc", "abort": False, "fleets": [], "state_dir": "/s"})
    hook = calls[0][2]["services"]
    proxy = FakeNode("b-0", proxy_unpublish={"changed": True, "routes": []})
    mine = {"name": "svc", "status": "terminated", "service": {"proxy_host": "b-0"}}
    assert hook({"kind": "ended", "record": mine}, [], {"b-0": proxy}) is None
    assert proxy.calls == []
    other = dict(mine, name="older", status="failed")
    assert hook({"kind": "ended", "record": other}, [], {"b-0": proxy})["changed"] is True
    assert proxy.calls == [("proxy_unpublish", {"run": "older"})]
