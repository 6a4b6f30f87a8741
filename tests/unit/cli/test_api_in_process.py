"""gpufleet.api's in-process path (``in_process=True``: gpufleet.direct, the modules' functions
in this process) and its answers of this controller alone, which the ``gpufleet`` command
uses instead of importing the collection. The playbooks' fake is installed: a call that
should not run one fails on it."""

from __future__ import annotations

import io
import os

import pytest

from gpufleet import api, runner
from tests.doubles.playbooks import FakeDirect, FakePlaybooks

TASK = "type: task\nname: train\nnodes: 1\ncommands:\n  - python train.py\n"


@pytest.fixture(autouse=True)
def playbooks(monkeypatch):
    fake = FakePlaybooks()
    monkeypatch.setattr(runner, "run_playbook", fake)
    return fake


@pytest.fixture
def direct(monkeypatch):
    return FakeDirect().install(monkeypatch)


def test_runs_logs_and_stop_in_process_run_no_playbook(playbooks, direct, tmp_path):
    direct.answer({"runs": [], "unreachable": {}, "unread": {}})
    assert api.runs(in_process=True, fleet_files=["/f/a.yml"], state_dir=str(tmp_path)) == {
        "runs": [], "unreachable": {}, "unread": {}}
    direct.answer({"name": "train", "status": "done"}, lines="[train-0] hi\n")
    out = io.StringIO()
    found = api.logs("train", job=0, stream=True, in_process=True, output=out)
    assert found == {"run": {"name": "train", "status": "done"}, "lines": [], "ranks": []}
    assert out.getvalue() == "[train-0] hi\n"
    direct.answer(None)
    assert api.stop("train", abort=True, in_process=True) == {}
    assert direct.calls == [
        ("runs", (), {"fleet_files": ["/f/a.yml"], "state_dir": str(tmp_path)}),
        ("logs", ("train", out), {"job": 0, "since": None, "fleet_files": []}),
        ("stop", ("train",), {"abort": True, "fleet_files": []})]
    assert playbooks.calls == []


def test_logs_the_in_process_path_cannot_give_go_through_the_playbook(playbooks, direct):
    """Lines kept in the record (no stream) and ``tail``: logs.yml."""
    for given in ({}, {"stream": True, "tail": 3}):
        playbooks.answer(stats={"gpufleet_run": {"name": "train"}, "gpufleet_log_lines": []})
        api.logs("train", in_process=True, **given)
    assert [c["playbook"] for c in playbooks.calls] == ["logs.yml", "logs.yml"]
    assert direct.calls == []


def test_a_detached_run_is_submitted_in_process_with_its_lines_as_events(
        playbooks, direct, tmp_path):
    path = tmp_path / "task.dstack.yml"
    path.write_text(TASK)
    events = []
    direct.answer({"run": "train", "status": "running"}, lines="plan\n\n")
    record = api.run_task(str(path), wait=False, in_process=True, name="t2",
                          on_event=events.append)
    assert record == {"run": "train", "status": "running"}
    [(name, args, kwargs)] = direct.calls
    assert (name, args[0]) == ("submit", str(path))
    assert (kwargs["name"], kwargs["show_plan"]) == ("t2", False)
    # Exactly what was written, blank line included, marked as answered in this process.
    assert events == [{"event": "verbose", "stdout": "plan\n", "in_process": True}]
    args[2].write("[WARNING]: spot_policy: not acted on\n")
    assert events[-1] == {"event": "warning", "in_process": True,
                          "stdout": "[WARNING]: spot_policy: not acted on"}
    assert playbooks.calls == []


def test_a_detached_run_the_playbook_must_submit_goes_through_task_yml(
        playbooks, direct, tmp_path):
    path = tmp_path / "task.dstack.yml"
    path.write_text(TASK)
    run = {"run": "train", "status": "running", "jobs": []}
    playbooks.answer(stats={"gpufleet_run": run})   # direct.submit answers None
    assert api.run_task(str(path), wait=False, in_process=True) == run
    assert [c[0] for c in direct.calls] == ["submit"]
    # What only task.yml does never tries the in-process path.
    playbooks.answer(stats={"gpufleet_run": run})
    api.run_task(str(path), wait=False, in_process=True, secrets={"A": "b"})
    playbooks.answer(stats={"gpufleet_run": run})
    api.run_task(str(path), wait=True, check=False, in_process=True)
    assert len(direct.calls) == 1 and len(playbooks.calls) == 3


def test_a_failed_in_process_submission_raises_only_when_checked(direct, tmp_path):
    path = tmp_path / "task.dstack.yml"
    path.write_text(TASK)
    failed = {"run": "train", "status": "failed", "failed": True, "msg": "no host fits"}
    direct.answer(failed)
    assert api.run_task(str(path), wait=False, check=False, in_process=True) == failed
    direct.answer(failed)
    with pytest.raises(api.CommandError, match="no host fits") as caught:
        api.run_task(str(path), wait=False, in_process=True)
    assert caught.value.record == failed and caught.value.result is None


def test_ctrl_c_during_an_in_process_submission_is_marked(direct, tmp_path):
    path = tmp_path / "task.dstack.yml"
    path.write_text(TASK)
    direct.answer(raises=KeyboardInterrupt())
    with pytest.raises(KeyboardInterrupt) as caught:
        api.run_task(str(path), wait=False, in_process=True)
    assert caught.value.in_process is True


def test_the_answers_of_this_controller(tmp_path, monkeypatch):
    path = tmp_path / "task.dstack.yml"
    path.write_text(TASK + "files:\n  - ./missing:/data\n")
    assert api.validate_file(path)["ok"] is True
    checked = api.validate_file(path, on_controller=True)
    assert checked["runnable"] is False and "missing" in str(checked["unsupported"])
    assert api.shorten("x" * 300, 200).endswith("(300 characters)")
    assert isinstance(api.random_run_name(), str)
    assert api.ports_problem([]) is None
    with pytest.raises(api.GpufleetError):
        api.check_secret_name("1bad")
    api.check_secret_name("GOOD_1")


def test_the_fleet_lock_tells_the_playbooks_it_is_held(tmp_path, monkeypatch):
    from ansible_collections.gpufleet.cluster.plugins.module_utils.fleets import lock

    monkeypatch.setenv(lock.DIR_ENV, str(tmp_path / "locks"))
    monkeypatch.delenv(lock.HELD_ENV, raising=False)
    with api.fleet_lock("web"):
        assert os.environ[lock.HELD_ENV] == "web"
    assert lock.HELD_ENV not in os.environ


def test_a_store_without_a_vault_password_is_a_gpufleet_error(tmp_path, monkeypatch):
    from ansible_collections.gpufleet.cluster.plugins.plugin_utils import secret_store

    monkeypatch.setenv("GPUFLEET_STATE_DIR", str(tmp_path))
    monkeypatch.delenv("ANSIBLE_VAULT_PASSWORD_FILE", raising=False)
    monkeypatch.setattr(secret_store.C, "DEFAULT_VAULT_PASSWORD_FILE", None)
    with pytest.raises(api.GpufleetError, match="no vault password"):
        api.secret_store()
