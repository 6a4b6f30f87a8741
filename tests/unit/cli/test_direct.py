"""gpufleet.direct: ps, logs and stop answered in the command's process by the functions the
modules call (tasks.actions), with the parameters the modules would get. (A stop's one sequence,
which direct.stop runs, is tested in tests/unit/attach/test_stop.py.)"""

from __future__ import annotations

import io
import os

import pytest
from ansible_collections.gpufleet.cluster.plugins.module_utils.attach import session
from ansible_collections.gpufleet.cluster.plugins.module_utils.tasks import actions

from gpufleet import direct


@pytest.fixture
def calls(monkeypatch):
    """The entry functions replaced by recorders; ``calls.answers[name]`` is what they give
    back (an exception is raised)."""
    class Calls(list):
        answers = {}

    made = Calls()

    def fake(name):
        def function(params, **kwargs):
            made.append((name, dict(params), kwargs))
            answer = made.answers[name]
            if isinstance(answer, Exception):
                raise answer
            return answer(params, **kwargs) if callable(answer) else answer
        return function

    for name in ("run_info", "run_queue", "run_logs", "run_stop", "submit"):
        monkeypatch.setattr(actions, name, fake(name))
    monkeypatch.setattr(session, "attach_entry", fake("attach_entry"))
    return made


def test_runs_asks_run_info_with_the_modules_defaults(calls, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    calls.answers["run_info"] = {"runs": [{"name": "a"}], "unreachable_hosts": {"h": "down"},
                                 "queue_due": False}
    found = direct.runs(fleet_files=["f.yml", "~/g.yml"], state_dir="/s")
    assert found == {"runs": [{"name": "a"}], "unreachable": {"h": "down"}, "unread": {}}
    [(name, params, _kw)] = calls
    assert name == "run_info"
    assert params == {"name": None, "user": None, "fleets": [str(tmp_path / "f.yml"),
                                                             os.path.expanduser("~/g.yml")],
                      "state_dir": "/s"}


def test_runs_moves_the_queue_first_when_something_is_due_as_ps_yml_does(calls):
    calls.answers["run_info"] = {"runs": [{"name": "old"}], "unreachable_hosts": {},
                                 "queue_due": True}
    calls.answers["run_queue"] = {"runs": [{"name": "started"}], "unreachable_hosts": {},
                                  "report": {"started": ["started"]}, "changed": True}
    assert direct.runs() == {"runs": [{"name": "started"}], "unreachable": {}, "unread": {}}
    assert [c[0] for c in calls] == ["run_info", "run_queue"]
    # A pass that stays short: scaling services is the scheduled pass's.
    assert calls[1][1] == {"fleets": [], "state_dir": None, "autoscale": False}
    # the pass publishes a service it starts and takes off one that ended (services.submit)
    from ansible_collections.gpufleet.cluster.plugins.module_utils.automation import dependencies
    from ansible_collections.gpufleet.cluster.plugins.module_utils.services import submit

    # and it judges the runs that wait for others (automation.dependencies)
    assert calls[1][2] == {"services": submit.queue_hook, "gate": dependencies.gate}


def test_runs_passes_on_the_fleets_that_could_not_be_read(calls):
    calls.answers["run_info"] = {"runs": [], "unreachable_hosts": {"h-0": "h-0: down"},
                                 "unread_fleets": {"h": {"h-0": "down"}}, "queue_due": False}
    assert direct.runs()["unread"] == {"h": {"h-0": "down"}}


def test_logs_streams_every_batch_to_the_output_and_returns_the_record(calls):
    def answer(params, emit=None):
        emit({"kind": "log", "run": "train", "rank": 0, "lines": ["a", "b"], "raw": False})
        emit({"kind": "log", "run": "train", "rank": 1, "lines": ["c"], "raw": False})
        return {"run": {"name": "train", "status": "done"}, "lines": [], "ranks": []}

    calls.answers["run_logs"] = answer
    out = io.StringIO()
    record = direct.logs("train", out, job=None, since="5m")
    assert record == {"name": "train", "status": "done"}
    assert out.getvalue() == "[train-0] a\n[train-0] b\n[train-1] c\n"
    params = calls[0][1]
    assert (params["name"], params["since"], params["stream"], params["follow"]) == (
        "train", "5m", True, False)
    assert params["job"] is None and params["tail"] is None


def test_logs_of_one_job_are_unprefixed(calls):
    def answer(params, emit=None):
        emit({"kind": "log", "run": "train", "rank": 1, "lines": ["x"], "raw": True})
        return {"run": {}, "lines": [], "ranks": []}

    calls.answers["run_logs"] = answer
    out = io.StringIO()
    direct.logs("train", out, job=1)
    assert out.getvalue() == "x\n"
    assert calls[0][1]["job"] == 1


@pytest.mark.parametrize("function, args, name", [
    (direct.runs, (), "run_info"), (direct.stop, ("nope",), "run_stop"),
    (direct.logs, ("nope", io.StringIO()), "run_logs")])
def test_an_error_of_the_operation_is_a_command_error_with_its_message(
        calls, function, args, name):
    calls.answers[name] = actions.ActionError("no run named nope on the fleets' hosts")
    with pytest.raises(direct.CommandError, match="no run named nope on the fleets' hosts"):
        function(*args)


# ---------------------------------------------------------------------------------------------
# submit: gpufleet apply -y -d


TASK = "type: task\nname: train\nnodes: 2\ncommands:\n  - python train.py\n"


def a_plan():
    return {"fleet": "gpus", "create": [], "jobs": [
        {"job_num": n, "host": "gpus-%d" % n, "fleet": "gpus", "instance": "gpus-%d" % n,
         "backend": "local", "resources": {"cpu": 2, "memory_mib": 4096, "gpus": []},
         "price": 0.0, "spot": False} for n in (0, 1)]}


def test_submit_is_the_task_actions_call_with_its_lines_on_the_output(calls, tmp_path,
                                                                      monkeypatch):
    from ansible_collections.gpufleet.cluster.plugins.module_utils.render import run_table
    from ansible_collections.gpufleet.cluster.plugins.module_utils.spec import parse_data

    monkeypatch.chdir(tmp_path)
    (tmp_path / "task.dstack.yml").write_text(TASK)
    config, _warnings = parse_data({"type": "task", "name": "train", "nodes": 2,
                                    "commands": ["python train.py"]})

    def answer(params, emit=None, services=None, gate=None):
        emit({"kind": "plan", "plan": a_plan(), "config": config})
        emit({"kind": "job", "run": "train", "job_num": 0, "host": "gpus-0",
              "status": "provisioning"})
        return {"run": "train", "status": "running", "changed": True,
                "warnings": ["spot_policy: not acted on"]}, False

    calls.answers["submit"] = answer
    out, err = io.StringIO(), io.StringIO()
    record = direct.submit("task.dstack.yml", out, err, fleet_files=["f.yml"], name="t2",
                           env=["A=1"], fleets=["gpus"], ide_version=None)
    assert record == {"run": "train", "status": "running"}
    [(name, params, kwargs)] = calls
    assert name == "submit"
    # the passes over the queue it makes keep services' routes (services.submit)
    assert kwargs["services"].__name__ == "queue_hook"
    assert (params["path"], params["name"], params["env"], params["fleet_names"]) == (
        str(tmp_path / "task.dstack.yml"), "t2", ["A=1"], ["gpus"])
    assert params["fleets"] == [str(tmp_path / "f.yml")]
    assert (params["wait"], params["logs"], params["show_plan"]) == (False, False, True)
    assert params["image_source"] == "auto" and params["secrets"] == {}
    plan = run_table.run_plan_lines(config, a_plan(), "task.dstack.yml")
    assert out.getvalue().splitlines() == plan + ["", "train job 0 on gpus-0: provisioning"]
    assert err.getvalue() == "[WARNING]: spot_policy: not acted on\n"


def test_submit_that_could_not_start_is_failed_with_the_modules_message(calls):
    calls.answers["submit"] = ({"run": "train", "status": "failed", "reason": "no_capacity",
                                "message": "no host fits", "changed": False}, True)
    record = direct.submit("t.yml", io.StringIO(), io.StringIO())
    assert record["failed"] is True
    assert record["msg"] == "run train failed (no_capacity): no host fits"


def test_submit_leaves_a_fleet_that_must_grow_to_the_playbook(calls):
    calls.answers["submit"] = ({"run": "train", "status": "pending", "grow": [{"num": 2}],
                                "message": "needs 1 more; the fleet grows first",
                                "changed": False}, False)
    out = io.StringIO()
    assert direct.submit("t.yml", out, io.StringIO()) is None
    assert out.getvalue() == ""


def test_submit_leaves_secrets_from_the_store_to_the_playbook(calls, tmp_path, monkeypatch):
    """The store is decrypted with the play's vault secrets: task.yml's action does that."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "t.yml").write_text(TASK + "env:\n  HF_TOKEN: ${{ secrets.HF_TOKEN }}\n")
    assert direct.submit("t.yml", io.StringIO(), io.StringIO()) is None
    (tmp_path / "r.yml").write_text(TASK + "repos:\n  - https://github.com/org/repo.git\n")
    assert direct.submit("r.yml", io.StringIO(), io.StringIO()) is None
    assert calls == []   # nothing submitted here


def test_submit_errors_are_command_errors(calls):
    calls.answers["submit"] = actions.ActionError("no fleets found: apply a fleet first")
    with pytest.raises(direct.CommandError, match="no fleets found"):
        direct.submit("t.yml", io.StringIO(), io.StringIO())


def test_submit_leaves_a_service_to_the_playbook(calls, monkeypatch):
    """A service's token is read from the store and its proxy host may need HAProxy first
    (task.yml plays gpufleet.cluster.gateway there): task.yml submits it."""
    from ansible_collections.gpufleet.cluster.plugins.module_utils.tasks import actions

    monkeypatch.setattr(actions, "load_task", lambda params: {"type": "service"})
    assert direct.submit("svc.yml", io.StringIO(), io.StringIO()) is None
    assert [c for c in calls if c[0] == "submit"] == []
