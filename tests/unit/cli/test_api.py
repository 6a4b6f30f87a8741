"""``gpufleet.api`` without Ansible: which playbook each call runs with which extra vars, what
it returns from the published stats, and the one exception type it raises.

``gpufleet.runner.run_playbook`` is replaced by tests/doubles/playbooks.FakePlaybooks; the
real playbooks run under this API in tests/integration/test_api.py.
"""

from __future__ import annotations

import pytest

from gpufleet import api
from gpufleet.runner import RunnerError

FLEET = {"type": "fleet", "name": "gpus", "nodes": 2, "placement": "cluster",
         "backends": ["local"]}
TASK = {"type": "task", "name": "hello", "nodes": 2, "commands": ["echo $DSTACK_NODE_RANK"]}
VOLUME = {"type": "volume", "name": "data", "backend": "aws", "region": "us-east-1",
          "size": "100GB"}


pytestmark = pytest.mark.usefixtures("playbooks")  # the fake playbook runner (conftest.py)


def fleet_record(errors=()):
    instances = [{"name": "gpus-%d" % n, "status": "idle", "error": None} for n in range(2)]
    for num, error in errors:
        instances[num].update(status="failed", error=error)
    return {"name": "gpus", "instances": instances}


def job(num, status, code):
    return {"job_num": num, "host": "gpus-%d" % num, "status": status, "exit_code": code}


def run_record(status="done", codes=(0, 0), message=None):
    return {"run": "hello", "status": status, "message": message,
            "jobs": [job(n, "done" if c == 0 else "failed", c) for n, c in enumerate(codes)]}


# ---------------------------------------------------------------------------------------------
# Configurations: a path or a mapping, read by the one config model


def test_validate_returns_the_normalized_config_of_a_mapping():
    config = api.validate(TASK)
    assert config["type"] == "task" and config["nodes"] == 2


def test_validate_names_the_field_and_the_file(tmp_path):
    path = tmp_path / "bad.dstack.yml"
    path.write_text("type: fleet\nname: gpus\nnodes: -1\n")
    with pytest.raises(api.GpufleetError) as caught:
        api.validate(path)
    assert str(path) in caught.value.message and "nodes" in caught.value.message
    assert caught.value.result is None and caught.value.host is None


def test_an_inline_config_with_a_bad_field_is_refused_before_any_playbook(playbooks):
    with pytest.raises(api.GpufleetError) as caught:
        api.apply(dict(FLEET, placement="everywhere"))
    assert caught.value.message.startswith("inline config: placement")
    assert playbooks.calls == []


def test_a_config_that_is_neither_path_nor_mapping_is_refused():
    with pytest.raises(api.GpufleetError, match="a path or a mapping, not int"):
        api.apply(3)


def test_delete_refuses_a_task(playbooks):
    with pytest.raises(api.GpufleetError, match="task configuration; expected fleet or volume"):
        api.delete(TASK)
    assert playbooks.calls == []


# ---------------------------------------------------------------------------------------------
# Fleets


def test_apply_a_fleet_file_runs_fleet_yml_with_its_absolute_path(tmp_path, monkeypatch,
                                                                  playbooks):
    (tmp_path / "gpus.dstack.yml").write_text("type: fleet\nname: gpus\nnodes: 2\n"
                                              "backends: [local]\n")
    monkeypatch.chdir(tmp_path)
    playbooks.answer(stats={"gpufleet_fleets": [fleet_record()]})
    events = []
    record = api.apply("gpus.dstack.yml", roles=["docker"], on_event=events.append,
                       state_dir=str(tmp_path / "state"),
                       backend_settings={"aws": {"regions": ["us-east-1"]}})
    assert record == fleet_record()
    (call,) = playbooks.calls
    assert call["playbook"] == "fleet.yml" and call["check"] is False and call["streamed"]
    assert call["extravars"] == {
        "fleet": str(tmp_path / "gpus.dstack.yml"), "gpufleet_fleet_roles": ["docker"],
        "gpufleet_state_dir": str(tmp_path / "state"),
        "gpufleet_backend_settings": {"aws": {"regions": ["us-east-1"]}}}


def test_apply_an_inline_fleet_passes_the_mapping(playbooks):
    playbooks.answer(stats={"gpufleet_fleets": [fleet_record()]})
    api.apply(FLEET)
    assert playbooks.calls[0]["extravars"] == {"fleet": FLEET}


def test_a_host_that_is_not_ready_raises_with_the_host_and_the_record(playbooks):
    record = fleet_record(errors=[(1, "preflight: docker is not installed")])
    playbooks.answer(rc=2, stats={"gpufleet_fleets": [record]},
                     failures=[{"host": "localhost", "task": "Fail when a host is not ready",
                                "msg": "gpus-1: preflight: docker is not installed"}])
    with pytest.raises(api.GpufleetError) as caught:
        api.apply(FLEET)
    error = caught.value
    assert (error.host, error.message) == ("gpus-1", "preflight: docker is not installed")
    assert str(error) == "gpus-1: preflight: docker is not installed"
    assert error.record == record and error.result.rc == 2


def test_a_playbook_failure_without_a_record_raises_with_its_host(playbooks):
    playbooks.answer(rc=2, failures=[{"host": "localhost", "task": "Converge the fleet",
                                      "msg": "the Docker engine does not answer"}])
    with pytest.raises(api.GpufleetError) as caught:
        api.apply(FLEET)
    assert (caught.value.host, caught.value.message) == (
        "localhost", "the Docker engine does not answer")
    assert caught.value.record is None and len(caught.value.failures) == 1


def test_a_playbook_that_cannot_start_raises_without_a_result(playbooks):
    playbooks.answer(raises=RunnerError("ansible-playbook not found"))
    with pytest.raises(api.GpufleetError) as caught:
        api.fleets()
    assert caught.value.message == "ansible-playbook not found"
    assert caught.value.result is None


def test_plan_runs_in_check_mode_and_delete_plans_with_delete_yml(playbooks):
    playbooks.answer(stats={"gpufleet_fleets": [dict(fleet_record(), plan={"create": 2})]})
    playbooks.answer(stats={"gpufleet_fleets": [fleet_record()]})
    assert api.plan(FLEET)["plan"] == {"create": 2}
    api.plan(FLEET, delete=True)
    assert [(c["playbook"], c["check"]) for c in playbooks.calls] == [
        ("fleet.yml", True), ("delete.yml", True)]


def test_delete_returns_what_was_removed(playbooks):
    playbooks.answer(stats={"gpufleet_fleets": [dict(fleet_record(),
                                                     removed={"containers": ["gpus-0"]})]})
    assert api.delete(FLEET)["removed"] == {"containers": ["gpus-0"]}
    assert playbooks.calls[0]["playbook"] == "delete.yml"
    assert "gpufleet_refuse_busy" not in playbooks.calls[0]["extravars"]


def test_unreachable_of_a_plan_is_its_unreachable_ssh_hosts():
    ssh = {"fleet_type": "ssh", "instances": [
        {"name": "a-0", "status": "idle"}, {"name": "a-1", "status": "unreachable",
                                            "error": "refused"}]}
    assert api.unreachable_of(ssh) == {"a-1": "refused"}
    assert api.unreachable_of(dict(ssh, fleet_type="backend")) == {}
    assert api.unreachable_of(None) == {}


def test_delete_with_force_does_not_refuse_a_fleet_in_use_or_unchecked(playbooks):
    playbooks.answer(stats={"gpufleet_fleets": [fleet_record()]})
    api.delete(FLEET, force=True)
    assert playbooks.calls[0]["extravars"]["gpufleet_refuse_busy"] is False


def test_fleets_lists_the_given_files(tmp_path, playbooks):
    path = tmp_path / "gpus.dstack.yml"
    path.write_text("type: fleet\nname: gpus\nnodes: 1\n")
    playbooks.answer(stats={"gpufleet_fleets": [fleet_record()]})
    assert api.fleets([path]) == [fleet_record()]
    assert playbooks.calls[0]["extravars"] == {"fleets": [str(path)]}


# ---------------------------------------------------------------------------------------------
# Volumes and offers


def test_apply_and_delete_a_volume(playbooks):
    playbooks.answer(stats={"gpufleet_volume": {"name": "data", "status": "active"}})
    playbooks.answer(stats={"gpufleet_volume": {"name": "data", "status": "terminated"}})
    assert api.apply(VOLUME)["status"] == "active"
    assert api.delete(VOLUME)["status"] == "terminated"
    assert [c["extravars"] for c in playbooks.calls] == [
        {"volume": VOLUME}, {"volume": VOLUME, "gpufleet_volume_state": "absent"}]


def test_options_of_the_other_kind_are_refused(playbooks):
    with pytest.raises(api.GpufleetError, match="wait: only for tasks"):
        api.apply(FLEET, wait=False)
    with pytest.raises(api.GpufleetError, match="image_source: only for tasks"):
        api.apply(FLEET, image_source="pull")
    with pytest.raises(api.GpufleetError, match="roles: only for fleets"):
        api.apply(TASK, roles=["docker"])
    with pytest.raises(api.GpufleetError, match="fleets\\(\\) lists fleet files"):
        api.fleets([FLEET])
    assert playbooks.calls == []


def test_offers_pass_the_limit(playbooks):
    playbooks.answer(stats={"gpufleet_offers": {"offers": [], "total": 0, "msg": "none"}})
    assert api.offers(FLEET, limit=3)["total"] == 0
    assert playbooks.calls[0]["extravars"] == {"config_file": FLEET,
                                               "gpufleet_offer_limit": 3}


# ---------------------------------------------------------------------------------------------
# Task runs


def test_run_task_waits_and_returns_the_exit_code_of_each_rank(playbooks):
    playbooks.answer(stats={"gpufleet_run": run_record()},
                     events=[{"event": "verbose", "stdout": "[hello-0] 0\n"}])
    seen = []
    record = api.run_task(TASK, on_event=seen.append, fleet_files=["/f/ssh.dstack.yml"],
                          run_args=["--fast"], secrets={"TOKEN": "x"})
    assert [j["exit_code"] for j in record["jobs"]] == [0, 0]
    assert seen == [{"event": "verbose", "stdout": "[hello-0] 0\n"}]
    assert playbooks.calls[0]["extravars"] == {
        "task": TASK, "gpufleet_task_wait": True, "gpufleet_task_logs": True,
        "gpufleet_run_args": ["--fast"], "gpufleet_secrets": {"TOKEN": "x"},
        "gpufleet_fleet_files": ["/f/ssh.dstack.yml"]}


def test_a_run_that_fails_raises_with_the_failing_rank_host(playbooks):
    record = run_record("failed", codes=(0, 3), message="job 1 on gpus-1 exited with code 3")
    playbooks.answer(rc=2, stats={"gpufleet_run": record})
    with pytest.raises(api.GpufleetError) as caught:
        api.run_task(TASK)
    assert caught.value.host == "gpus-1"
    assert caught.value.message == "job 1 on gpus-1 exited with code 3"
    assert caught.value.record == record


def test_check_false_returns_the_failed_run(playbooks):
    record = run_record("failed", codes=(0, 3), message="job 1 on gpus-1 exited with code 3")
    playbooks.answer(rc=2, stats={"gpufleet_run": record})
    assert api.run_task(TASK, check=False) == record


def test_a_run_that_was_not_placed_raises_the_module_message(playbooks):
    playbooks.answer(rc=2, stats={"gpufleet_run": {"run": "hello", "status": "failed",
                                                   "msg": "no fleet has 2 hosts free"}})
    with pytest.raises(api.GpufleetError, match="no fleet has 2 hosts free"):
        api.run_task(TASK)


def test_detached_run_returns_once_started(playbooks):
    playbooks.answer(stats={"gpufleet_run": run_record("running", codes=(None, None))})
    assert api.run_task(TASK, wait=False)["status"] == "running"
    assert playbooks.calls[0]["extravars"]["gpufleet_task_wait"] is False


def test_wait_follows_the_logs_until_the_run_ends(playbooks):
    playbooks.answer(stats={"gpufleet_run": {"name": "hello", "status": "done", "jobs": []},
                            "gpufleet_log_lines": []})
    assert api.wait("hello")["status"] == "done"
    assert playbooks.calls[0]["extravars"] == {"run": "hello", "gpufleet_follow": True}
    assert playbooks.calls[0]["playbook"] == "logs.yml"


def test_wait_on_a_terminated_run_raises(playbooks):
    playbooks.answer(stats={"gpufleet_run": {"name": "hello", "status": "terminated",
                                             "jobs": [job(0, "terminated", None)]}})
    with pytest.raises(api.GpufleetError, match="the run hello ended terminated"):
        api.wait("hello")


def test_logs_by_rank(playbooks):
    ranks = [{"rank": 0, "lines": ["a"]}, {"rank": 1, "lines": ["b"]}]
    playbooks.answer(stats={"gpufleet_run": {"name": "hello"},
                            "gpufleet_log_lines": ["[hello-0] a", "[hello-1] b"],
                            "gpufleet_log_ranks": ranks})
    found = api.logs("hello", tail=5)
    assert found["ranks"] == ranks and found["lines"] == ["[hello-0] a", "[hello-1] b"]
    assert playbooks.calls[0]["extravars"] == {"run": "hello", "gpufleet_tail": 5}


def test_status_of_one_run_and_of_a_missing_one(playbooks):
    runs = [{"name": "hello", "status": "running"}, {"name": "other", "status": "done"}]
    playbooks.answer(stats={"gpufleet_runs": runs, "gpufleet_unreachable": {"x": "timeout"},
                            "gpufleet_unread": {"f": {"x": "timeout"}}})
    playbooks.answer(stats={"gpufleet_runs": runs, "gpufleet_unreachable": {}})
    playbooks.answer(stats={"gpufleet_runs": runs, "gpufleet_unreachable": {}})
    found = api.runs()
    assert found["unreachable"] == {"x": "timeout"} and found["unread"] == {"f": {"x": "timeout"}}
    assert api.status("other")["status"] == "done"
    with pytest.raises(api.GpufleetError, match="no run named gone"):
        api.status("gone")


def test_stop_aborts(playbooks):
    playbooks.answer(stats={"gpufleet_run": {"name": "hello", "status": "terminated"}})
    assert api.stop("hello", abort=True)["status"] == "terminated"
    assert playbooks.calls[0]["extravars"] == {"run": "hello", "gpufleet_abort": True}


def test_run_task_and_plan_take_dstack_apply_name_env_and_fleets(playbooks):
    playbooks.answer(stats={"gpufleet_run": {"run": "hp-1", "status": "planned",
                                             "plan": {"fleet": "gpus", "jobs": []}}})
    playbooks.answer(stats={"gpufleet_run": {"run": "hp-1", "status": "done", "jobs": []}})
    api.plan(TASK, name="hp-1", env={"LR": 0.1, "HOME_DIR": None}, fleets="gpus")
    api.run_task(TASK, name="hp-1", env=["LR=0.1"], fleets=["gpus", "team/big"])
    planned, ran = (c["extravars"] for c in playbooks.calls)
    assert planned["gpufleet_task_name"] == ran["gpufleet_task_name"] == "hp-1"
    assert planned["gpufleet_task_env"] == {"LR": 0.1, "HOME_DIR": None}
    assert planned["gpufleet_task_fleets"] == ["gpus"]
    assert ran["gpufleet_task_env"] == ["LR=0.1"]
    assert ran["gpufleet_task_fleets"] == ["gpus", "team/big"]


def test_bad_overrides_are_refused_before_any_playbook_and_only_tasks_take_them(playbooks):
    with pytest.raises(api.GpufleetError, match=r"inline config: --name: invalid name 'X'"):
        api.run_task(TASK, name="X")
    with pytest.raises(api.GpufleetError, match="only for tasks"):
        api.apply(FLEET, env=["A=1"])
    with pytest.raises(api.GpufleetError, match="only for tasks"):
        api.plan(FLEET, name="x1")
    assert playbooks.calls == []


def test_runs_stop_and_run_task_pass_the_user_force_and_submitter(playbooks):
    playbooks.answer(stats={"gpufleet_runs": [], "gpufleet_unreachable": {}})
    playbooks.answer(stats={"gpufleet_run": {"name": "hello", "status": "terminated"}})
    playbooks.answer(stats={"gpufleet_run": {"run": "hello", "status": "done", "jobs": []}})
    assert api.runs(user="ann")["runs"] == []
    api.stop("hello", force=True)
    api.run_task(TASK, user="ann")
    listed, stopped, ran = (c["extravars"] for c in playbooks.calls)
    assert listed == {"gpufleet_ps_user": "ann"}
    assert stopped == {"run": "hello", "gpufleet_abort": False, "gpufleet_force": True}
    assert ran["gpufleet_user"] == "ann"


def test_runs_and_stop_without_user_or_force_pass_neither(playbooks):
    playbooks.answer(stats={"gpufleet_runs": [], "gpufleet_unreachable": {}})
    playbooks.answer(stats={"gpufleet_run": {"name": "hello", "status": "terminated"}})
    api.runs()
    api.stop("hello")
    listed, stopped = (c["extravars"] for c in playbooks.calls)
    assert listed == {} and stopped == {"run": "hello", "gpufleet_abort": False}
