# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The ``gpufleet`` task commands (apply -f TASK, ps, logs, stop) without Ansible.

``gpufleet.runner.run_playbook`` is replaced by a fake that records each call (playbook, extra
vars, check mode, whether a callback was given), hands the callback ansible-runner-like events,
and answers with a PlaybookResult carrying what the playbooks publish with set_stats
(gpufleet_run, gpufleet_runs, gpufleet_unreachable, gpufleet_log_lines).
"""

from __future__ import annotations

import json
import os
import sys

import pytest
from ansible_collections.gpufleet.cluster.plugins.module_utils.render import run_table as runtable
from ansible_collections.gpufleet.cluster.plugins.module_utils.spec import parse_data

from gpufleet import cli, runner
from gpufleet.runner import RunnerError
from tests.doubles.playbooks import FakePlaybooks, Stdin, run_cli

TASK = """\
type: task
name: train
nodes: 2
commands:
  - python train.py
resources:
  gpu: H100:8
max_duration: 2h
"""
TASK_DATA = {"type": "task", "name": "train", "nodes": 2, "commands": ["python train.py"],
             "resources": {"gpu": "H100:8"}, "max_duration": "2h"}

NO_TERMINAL = "gpufleet: no terminal to ask on; pass -y to go ahead without asking\n"
NO_CAPACITY = ("run train failed (failed_to_start_due_to_no_capacity): no fleet has 2 hosts "
               "with gpu=H100:8 free")


# ---------------------------------------------------------------------------------------------
# The fake playbook runner, stdin, and running main()


@pytest.fixture(autouse=True)
def stdin(monkeypatch):
    """No terminal unless a test says otherwise (``stdin.tty``, ``stdin.answer``)."""
    fake = Stdin(False)
    monkeypatch.setattr(sys, "stdin", fake)
    return fake


@pytest.fixture(autouse=True)
def playbooks(monkeypatch):
    fake = FakePlaybooks()
    monkeypatch.setattr(runner, "run_playbook", fake)
    return fake


@pytest.fixture
def files(tmp_path, monkeypatch):
    """Writes a file in a temporary directory that is also the current directory."""
    monkeypatch.chdir(tmp_path)

    def write(name, content):
        path = tmp_path / name
        path.write_text(content, encoding="utf-8")
        return str(path)

    return write


run = run_cli


def verbose(text):
    return {"event": "verbose", "stdout": text}


# ---------------------------------------------------------------------------------------------
# Records as the playbooks publish them


def placed(num, host, gpus=8):
    return {"job_num": num, "host": host, "backend": "ssh", "region": "remote", "price": None,
            "blocks": 1, "total_blocks": 1, "cpus": 16, "memory_mib": 262144,
            "disk_mib": 1000000, "gpu_vendor": "nvidia", "gpu_name": "H100",
            "gpu_memory_mib": 81920,
            "gpus": [{"vendor": "nvidia", "name": "H100", "memory_mib": 81559, "index": i,
                      "id": "GPU-%d" % i, "bus_id": None} for i in range(gpus)]}


def config():
    parsed, _warnings = parse_data(dict(TASK_DATA))
    return parsed


def plan():
    return {"fleet": "gpus", "jobs": [placed(0, "gpus-0"), placed(1, "gpus-1")]}


def planned_stats():
    """task.yml in check mode, the task placed."""
    return {"gpufleet_run": {"run": "train", "status": "planned", "plan": plan(),
                             "config": config()}}


def ended_stats(status="done", message=None, **extra):
    record = {"run": "train", "run_id": "0123", "status": status,
              "reason": "all_jobs_done" if status == "done" else "job_failed",
              "message": message, "fleet": "gpus", "submissions": 1,
              "jobs": [{"job_num": n, "host": "gpus-%d" % n, "container": "train-0-%d" % n,
                        "internal_ip": "10.0.0.%d" % n, "status": status, "reason": None,
                        "exit_code": 0 if status == "done" else 3} for n in range(2)]}
    record.update(extra)
    return {"gpufleet_run": record}


def run_record(name, status, jobs=1, submitted=None):
    return {"name": name, "run_id": "id-" + name, "submission": 0, "submitted": submitted,
            "status": status, "reason": None, "fleet": "gpus", "backend": "ssh",
            "region": "remote", "price": None, "spot": False, "gpu": "H100:80GB:8",
            "nodes": jobs,
            "jobs": [{"job_num": n, "host": "gpus-%d" % n, "container": "%s-0-%d" % (name, n),
                      "status": status, "reason": None, "exit_code": None,
                      "resources": "cpu=16 mem=256GB", "gpus": []} for n in range(jobs)]}


def plan_lines(path):
    return runtable.run_plan_lines(config(), plan(), path)


# ---------------------------------------------------------------------------------------------
# apply -f TASK: the plan, the question


def test_apply_without_yes_and_without_terminal_shows_the_plan_and_submits_nothing(
        files, playbooks, stdin):
    path = files("task.dstack.yml", TASK)
    playbooks.answer(stats=planned_stats())
    code, out, err = run(playbooks, "apply", "-f", "task.dstack.yml")
    assert code == 1
    lines = out.splitlines()
    expected = plan_lines(path)
    assert lines[:len(expected)] == expected
    assert expected[0] == "Configuration  %s" % path
    assert "Type           task (nodes=2)" in expected
    # the header, a blank line, the table's header and one row per job
    rows = lines[expected.index("") + 2:len(expected)]
    assert [row.split()[0] for row in rows] == ["0", "1"]
    assert [row.split()[-2] for row in rows] == ["gpus-0", "gpus-1"]
    assert lines[len(expected):] == ["", "Nothing was submitted."]
    assert err == "Planning...\n" + NO_TERMINAL
    assert stdin.reads == 0
    assert [(c["playbook"], c["check"], c["streamed"]) for c in playbooks.calls] == [
        ("task.yml", True, False)]
    assert playbooks.calls[0]["extravars"] == {"task": path}


def test_apply_asks_on_a_terminal_and_no_means_nothing_submitted(files, playbooks, stdin):
    files("task.dstack.yml", TASK)
    stdin.tty, stdin.answer = True, "n\n"
    playbooks.answer(stats=planned_stats())
    code, out, err = run(playbooks, "apply", "-f", "task.dstack.yml")
    assert code == 1
    assert stdin.reads == 1
    assert out.endswith("\nSubmit the run train? [y/n] Nothing was submitted.\n")
    assert "no terminal" not in err
    assert len(playbooks.calls) == 1


@pytest.mark.parametrize("answer", ["y\n", "YES\n", " yes \n"])
def test_apply_asks_on_a_terminal_and_yes_submits(files, playbooks, stdin, answer):
    files("task.dstack.yml", TASK)
    stdin.tty, stdin.answer = True, answer
    playbooks.answer(stats=planned_stats())
    playbooks.answer(stats=ended_stats())
    code, out, _err = run(playbooks, "apply", "-f", "task.dstack.yml")
    assert code == 0
    assert "Submit the run train? [y/n] " in out
    assert [c["check"] for c in playbooks.calls] == [True, False]


# ---------------------------------------------------------------------------------------------
# apply -f TASK -y: the run


def test_apply_yes_submits_with_the_files_and_streams_the_run_in_order(
        files, playbooks, stdin):
    path = files("task.dstack.yml", TASK)
    fleet = os.path.join(os.getcwd(), "gpus.dstack.yml")
    events = [
        verbose("train job 0 on gpus-0: running\n"),
        {"event": "runner_on_ok", "stdout": "ok: [localhost]",
         "event_data": {"host": "localhost", "res": {"changed": True}}},
        verbose("train job 1 on gpus-1: running\n"),
        verbose("[train-0] step 1\n"),
        verbose("   \n"),
        {"event": "playbook_on_task_start", "stdout": "TASK [Run the task on a fleet] ***"},
        verbose("[train-1] step 1\n"),
        verbose("train: done\n"),
    ]
    playbooks.answer(stats=planned_stats())
    playbooks.answer(stats=ended_stats("done"), events=events)
    code, out, err = run(playbooks, "apply", "-f", "task.dstack.yml", "-y",
                         "--fleet-file", "gpus.dstack.yml", "--fleet-file", "/abs/other.yml")
    assert code == 0
    assert stdin.reads == 0
    check, real = playbooks.calls
    assert check["check"] is True and check["streamed"] is False
    assert check["extravars"] == {"task": path,
                                  "gpufleet_fleet_files": [fleet, "/abs/other.yml"]}
    assert real["playbook"] == "task.yml"
    assert real["check"] is False and real["streamed"] is True
    assert real["extravars"] == {"task": path, "gpufleet_fleet_files": [fleet, "/abs/other.yml"],
                                 "gpufleet_task_wait": True, "gpufleet_task_logs": True}
    streamed = ["train job 0 on gpus-0: running", "train job 1 on gpus-1: running",
                "[train-0] step 1", "[train-1] step 1", "train: done"]
    assert out.splitlines() == plan_lines(path) + [""] + streamed + ["Run train done"]
    assert err == "Planning...\n"
    # every line is out while the playbook still runs, not after it
    plan_text = "\n".join(plan_lines(path)) + "\n\n"
    assert playbooks.snapshots[0] == plan_text + streamed[0] + "\n"
    assert playbooks.snapshots[3] == plan_text + "\n".join(streamed[:3]) + "\n"


def test_apply_streams_errors_and_warnings_to_stderr(files, playbooks):
    files("task.dstack.yml", TASK)
    playbooks.answer(stats=planned_stats())
    playbooks.answer(stats=ended_stats("done"), events=[
        {"event": "warning", "stdout": "[WARNING]: something odd\n"},
        verbose("train: done\n"),
        {"event": "error", "stdout": "ERROR! not quite\n"},
    ])
    code, out, err = run(playbooks, "apply", "-f", "task.dstack.yml", "-y")
    assert code == 0
    assert err == "Planning...\n[WARNING]: something odd\nERROR! not quite\n"
    assert out.splitlines()[-2:] == ["train: done", "Run train done"]


def test_apply_a_failed_run_exits_1_with_its_message(files, playbooks):
    files("task.dstack.yml", TASK)
    playbooks.answer(stats=planned_stats())
    message = "job 1 on gpus-1 exited with code 3"
    playbooks.answer(
        rc=2, stats=ended_stats("failed", message, log_tail=["Traceback?", "boom"],
                                failed=True, msg="run train failed (job_failed): " + message),
        failures=[{"host": "localhost", "task": "Fail when the run did not end done",
                   "msg": "run train failed (job_failed): " + message}],
        events=[verbose("train job 1 on gpus-1: failed (exit code 3)\n")])
    code, out, err = run(playbooks, "apply", "-f", "task.dstack.yml", "-y")
    assert code == 1
    assert out.splitlines()[-2:] == ["train job 1 on gpus-1: failed (exit code 3)",
                                     "Run train failed: " + message]
    assert err == "Planning...\n"


@pytest.mark.parametrize("status", ["terminated", "failed"])
def test_apply_a_run_that_did_not_end_done_exits_1(files, playbooks, status):
    files("task.dstack.yml", TASK)
    playbooks.answer(stats=planned_stats())
    playbooks.answer(rc=2, stats=ended_stats(status))
    code, out, _err = run(playbooks, "apply", "-f", "task.dstack.yml", "-y")
    assert code == 1
    assert out.splitlines()[-1] == "Run train %s" % status


def test_apply_detach_does_not_wait_and_says_how_to_follow(files, playbooks):
    path = files("task.dstack.yml", TASK)
    playbooks.answer(stats=planned_stats())
    playbooks.answer(stats=ended_stats("running", reason=None),
                     events=[verbose("train job 0 on gpus-0: running\n")])
    code, out, err = run(playbooks, "apply", "-f", "task.dstack.yml", "-y", "-d")
    assert code == 0
    real = playbooks.calls[1]
    assert real["extravars"] == {"task": path, "gpufleet_task_wait": False,
                                 "gpufleet_task_logs": False}
    assert out.splitlines()[-2:] == [
        "train job 0 on gpus-0: running",
        "Run train submitted; follow it with gpufleet logs -f train"]
    assert err == "Planning...\n"


def test_apply_detach_of_a_failed_submission_exits_1(files, playbooks):
    files("task.dstack.yml", TASK)
    playbooks.answer(stats=planned_stats())
    playbooks.answer(rc=2, stats=ended_stats("failed", "job 0 could not start", failed=True))
    code, _out, _err = run(playbooks, "apply", "-f", "task.dstack.yml", "-y", "-d")
    assert code == 1


# ---------------------------------------------------------------------------------------------
# apply -f TASK: what goes wrong before or around the run


def test_apply_no_capacity_reports_the_message_and_submits_nothing(files, playbooks):
    files("task.dstack.yml", TASK)
    record = {"run": "train", "status": "failed", "reason": "failed_to_start_due_to_no_capacity",
              "message": "no fleet has 2 hosts with gpu=H100:8 free", "plan": None,
              "failed": True, "msg": NO_CAPACITY}
    playbooks.answer(rc=2, stats={"gpufleet_run": record}, failures=[
        {"host": "localhost", "task": "Fail when the run did not end done", "msg": NO_CAPACITY}])
    code, out, err = run(playbooks, "apply", "-f", "task.dstack.yml", "-y")
    assert code == 1
    assert out == ""
    assert err == "Planning...\ngpufleet: %s\n" % NO_CAPACITY
    assert len(playbooks.calls) == 1 and playbooks.calls[0]["check"] is True


def test_apply_check_error_without_a_record_reports_the_failed_task(files, playbooks):
    files("task.dstack.yml", TASK)
    playbooks.answer(rc=2, failures=[{"host": "localhost", "task": "Check the input",
                                      "msg": "Pass the task with -e task=FILE"}])
    code, out, err = run(playbooks, "apply", "-f", "task.dstack.yml", "-y")
    assert code == 1
    assert out == ""
    assert err == ("Planning...\ngpufleet: localhost: Check the input: "
                   "Pass the task with -e task=FILE\n")
    assert len(playbooks.calls) == 1


def test_apply_an_invalid_task_file_names_the_field_and_runs_nothing(files, playbooks):
    path = files("bad.dstack.yml", "type: task\ncommands: [x]\nnodes: two\n")
    code, out, err = run(playbooks, "apply", "-f", "bad.dstack.yml", "-y")
    assert code == 1
    assert out == ""
    assert err.startswith(path + ": nodes: ")
    assert playbooks.calls == []


@pytest.mark.parametrize("failing_call", [0, 1])
def test_apply_a_playbook_that_cannot_start_exits_2(files, playbooks, failing_call):
    files("task.dstack.yml", TASK)
    if failing_call == 1:
        playbooks.answer(stats=planned_stats())
    playbooks.answer(raises=RunnerError("ansible-playbook not found next to python"))
    code, _out, err = run(playbooks, "apply", "-f", "task.dstack.yml", "-y")
    assert code == 2
    assert err.endswith("gpufleet: ansible-playbook not found next to python\n")
    assert len(playbooks.calls) == failing_call + 1


@pytest.mark.parametrize("detach", [False, True])
def test_apply_an_error_of_the_real_run_is_reported_not_raised(files, playbooks, detach):
    files("task.dstack.yml", TASK)
    msg = "image python:3.11 could not be pulled on gpus-0: manifest unknown"
    playbooks.answer(stats=planned_stats())
    playbooks.answer(rc=2, stats={"gpufleet_run": {"failed": True, "msg": msg}}, failures=[
        {"host": "localhost", "task": "Fail when the run did not end done", "msg": msg}])
    argv = ["apply", "-f", "task.dstack.yml", "-y"] + (["-d"] if detach else [])
    code, _out, err = run(playbooks, *argv)
    assert code == 1
    assert msg in err


# ---------------------------------------------------------------------------------------------
# ps


def test_ps_prints_the_table_of_the_published_runs(files, playbooks):
    runs = [run_record("train", "running"), run_record("dist", "failed", jobs=2)]
    playbooks.answer(stats={"gpufleet_runs": runs, "gpufleet_unreachable": {}})
    code, out, err = run(playbooks, "ps", "--fleet-file", "gpus.dstack.yml")
    assert code == 0
    assert err == ""
    lines = out.splitlines()
    assert lines == runtable.run_table(runs)
    assert lines[0].split() == ["NAME", "BACKEND", "GPU", "PRICE", "STATUS", "SUBMITTED"]
    assert [line.split()[0] for line in lines[1:]] == ["train", "dist", "job=0", "job=1"]
    (call,) = playbooks.calls
    assert call["playbook"] == "ps.yml" and call["check"] is False
    assert call["extravars"] == {
        "gpufleet_fleet_files": [os.path.join(os.getcwd(), "gpus.dstack.yml")]}


def test_ps_verbose_shows_resources_and_errors(playbooks):
    runs = [run_record("train", "running")]
    playbooks.answer(stats={"gpufleet_runs": runs})
    code, out, _err = run(playbooks, "ps", "-v")
    assert code == 0
    assert out.splitlines() == runtable.run_table(runs, verbose=True)
    assert "RESOURCES" in out.splitlines()[0] and "ERROR" in out.splitlines()[0]
    assert "cpu=16 mem=256GB" in out


def test_ps_json_dumps_the_records(playbooks):
    runs = [run_record("train", "running"), run_record("dist", "done", jobs=2)]
    playbooks.answer(stats={"gpufleet_runs": runs, "gpufleet_unreachable": {}})
    code, out, _err = run(playbooks, "ps", "--json")
    assert code == 0
    assert json.loads(out) == runs


@pytest.mark.parametrize("argv, text", [([], "No runs.\n"), (["--json"], "[]\n")])
def test_ps_without_runs(playbooks, argv, text):
    playbooks.answer(stats={"gpufleet_runs": [], "gpufleet_unreachable": {}})
    code, out, err = run(playbooks, "ps", *argv)
    assert (code, out, err) == (0, text, "")


def test_ps_reports_unreachable_hosts_on_stderr_and_lists_the_others(playbooks):
    runs = [run_record("train", "running")]
    playbooks.answer(stats={"gpufleet_runs": runs, "gpufleet_unreachable": {
        "gpus-3": "ssh: connect to host 10.0.0.3 port 22: Connection refused",
        "gpus-2": "ssh: timed out"}})
    code, out, err = run(playbooks, "ps")
    assert code == 0
    assert out.splitlines() == runtable.run_table(runs)
    assert err.splitlines() == [
        "gpufleet: gpus-2: ssh: timed out",
        "gpufleet: gpus-3: ssh: connect to host 10.0.0.3 port 22: Connection refused"]


def test_ps_a_failed_playbook_exits_1_with_the_failure(playbooks):
    playbooks.answer(rc=2, failures=[{"host": "localhost", "task": "Ask the hosts for their runs",
                                      "msg": "gpus.dstack.yml: no such file"}])
    code, out, err = run(playbooks, "ps")
    assert code == 1
    assert out == ""
    assert err == "gpufleet: localhost: Ask the hosts for their runs: gpus.dstack.yml: " \
                  "no such file\n"


def test_ps_a_playbook_that_cannot_start_exits_2(playbooks):
    playbooks.answer(raises=RunnerError("no playbook named ps.yml"))
    code, out, err = run(playbooks, "ps")
    assert (code, out, err) == (2, "", "gpufleet: no playbook named ps.yml\n")


# ---------------------------------------------------------------------------------------------
# logs


def test_logs_streams_the_lines_the_hosts_kept_through_the_output_pipe(playbooks):
    playbooks.answer(stats={"gpufleet_run": run_record("train", "done"),
                            "gpufleet_log_lines": []},
                     output="[train-0] step 1\n[train-0] done\n[train-1] step 1\n",
                     events=[{"event": "runner_on_ok", "stdout": "ok: [localhost]"},
                             {"event": "warning", "stdout": "[WARNING]: a warning\n"}])
    code, out, err = run(playbooks, "logs", "train")
    assert code == 0
    assert out == "[train-0] step 1\n[train-0] done\n[train-1] step 1\n"
    assert err == "[WARNING]: a warning\n"
    (call,) = playbooks.calls
    assert call["playbook"] == "logs.yml" and call["streamed"] is True
    assert call["kwargs"]["output"] is playbooks.out
    assert call["extravars"] == {"run": "train", "gpufleet_stream": True}


def test_logs_passes_job_and_since_on(playbooks):
    playbooks.answer(stats={"gpufleet_run": run_record("train", "done"),
                            "gpufleet_log_lines": []}, events=[verbose("step 1\n")])
    code, out, _err = run(playbooks, "logs", "train", "--job", "1", "--since", "10m")
    assert (code, out) == (0, "step 1\n")
    assert playbooks.calls[0]["extravars"] == {"run": "train", "gpufleet_stream": True,
                                               "gpufleet_job": 1, "gpufleet_since": "10m"}
    playbooks.answer(stats={"gpufleet_run": run_record("train", "done"),
                            "gpufleet_log_lines": []})
    code, _out, _err = run(playbooks, "logs", "-f", "train", "--job", "0")
    assert code == 0
    assert playbooks.calls[1]["extravars"] == {"run": "train", "gpufleet_follow": True,
                                               "gpufleet_job": 0}


def test_logs_of_a_run_without_lines_prints_nothing(playbooks):
    playbooks.answer(stats={"gpufleet_run": run_record("train", "pending"),
                            "gpufleet_log_lines": []})
    assert run(playbooks, "logs", "train") == (0, "", "")


def test_logs_follow_streams_the_lines_as_they_come(playbooks):
    playbooks.answer(stats={"gpufleet_run": run_record("train", "done"),
                            "gpufleet_log_lines": []},
                     events=[verbose("[train-0] step 1\n"), verbose("[train-1] step 1\n"),
                             {"event": "runner_on_ok", "stdout": "ok: [localhost]"},
                             verbose("[train-0] step 2\n")])
    code, out, _err = run(playbooks, "logs", "-f", "train", "--fleet-file", "/f/gpus.yml")
    assert code == 0
    assert out == "[train-0] step 1\n[train-1] step 1\n[train-0] step 2\n"
    assert playbooks.snapshots[0] == "[train-0] step 1\n"
    (call,) = playbooks.calls
    assert call["kwargs"]["output"] is playbooks.out
    assert call["streamed"] is True
    assert call["extravars"] == {"gpufleet_fleet_files": ["/f/gpus.yml"], "run": "train",
                                 "gpufleet_follow": True}


def test_logs_of_an_unknown_run_exits_1_with_the_failure(playbooks):
    msg = "no run named nope on the fleets' hosts (gpufleet ps lists runs)"
    playbooks.answer(rc=2, failures=[{"host": "localhost", "task": "Fetch the logs",
                                      "msg": msg}])
    code, out, err = run(playbooks, "logs", "nope")
    assert code == 1
    assert out == ""
    assert err == "gpufleet: localhost: Fetch the logs: %s\n" % msg


def test_logs_a_playbook_that_cannot_start_exits_2(playbooks):
    playbooks.answer(raises=RunnerError("no playbook named logs.yml"))
    assert run(playbooks, "logs", "train")[::2] == (2, "gpufleet: no playbook named logs.yml\n")


# ---------------------------------------------------------------------------------------------
# stop


def test_stop_without_yes_and_without_terminal_stops_nothing(playbooks, stdin):
    code, out, err = run(playbooks, "stop", "train")
    assert code == 1
    assert out == "Nothing was stopped.\n"
    assert err == NO_TERMINAL
    assert stdin.reads == 0
    assert playbooks.calls == []


def test_stop_asks_on_a_terminal(playbooks, stdin):
    stdin.tty, stdin.answer = True, "no\n"
    code, out, _err = run(playbooks, "stop", "train")
    assert code == 1
    assert out == "Stop the run train? [y/n] Nothing was stopped.\n"
    assert playbooks.calls == []


@pytest.mark.parametrize("argv, abort", [([], False), (["-x"], True), (["--abort"], True)])
def test_stop_yes_stops_the_run(playbooks, argv, abort):
    playbooks.answer(stats={"gpufleet_run": dict(run_record("train", "terminated"),
                                                 stopped=["gpus-0"])})
    code, out, err = run(playbooks, "stop", "train", "-y", *argv)
    assert code == 0
    assert out == "Run train terminated.\n"
    assert err == ""
    (call,) = playbooks.calls
    assert call["playbook"] == "stop.yml" and call["check"] is False
    assert call["extravars"] == {"run": "train", "gpufleet_abort": abort}


def test_stop_of_an_unknown_run_exits_1_with_the_failure(playbooks):
    msg = "no run named nope on the fleets' hosts (gpufleet ps lists runs)"
    playbooks.answer(rc=2, failures=[{"host": "localhost", "task": "Stop every job of the run",
                                      "msg": msg}])
    code, out, err = run(playbooks, "stop", "nope", "-y")
    assert code == 1
    assert out == ""
    assert err == "gpufleet: localhost: Stop every job of the run: %s\n" % msg


def test_stop_a_playbook_that_cannot_start_exits_2(playbooks):
    playbooks.answer(raises=RunnerError("no playbook named stop.yml"))
    code, out, err = run(playbooks, "stop", "train", "-y")
    assert (code, out, err) == (2, "", "gpufleet: no playbook named stop.yml\n")


# ---------------------------------------------------------------------------------------------
# apply -f TASK with dstack's --name, --env and --fleet


def test_apply_name_env_and_fleet_reach_the_plan_and_the_run(files, playbooks):
    path = files("task.dstack.yml", TASK)
    playbooks.answer(stats=planned_stats())
    playbooks.answer(stats=ended_stats("done"))
    code, _out, _err = run(playbooks, "apply", "-f", "task.dstack.yml", "-y", "-n", "hp-3",
                           "--env", "CONFIG_ID=3", "-e", "HF_HOME", "--fleet", "gpus",
                           "--fleet", "team/big")
    assert code == 0
    given = {"task": path, "gpufleet_task_name": "hp-3",
             "gpufleet_task_env": ["CONFIG_ID=3", "HF_HOME"],
             "gpufleet_task_fleets": ["gpus", "team/big"]}
    check, real = playbooks.calls
    assert check["extravars"] == given
    assert real["extravars"] == dict(given, gpufleet_task_wait=True, gpufleet_task_logs=True)


def test_apply_a_task_without_a_name_runs_under_the_name_the_plan_showed(files, playbooks):
    path = files("task.dstack.yml", TASK.replace("name: train\n", ""))
    stats = planned_stats()
    stats["gpufleet_run"]["run"] = "brave-otter-7"
    stats["gpufleet_run"]["config"]["name"] = None
    playbooks.answer(stats=stats)
    playbooks.answer(stats=ended_stats("done"))
    code, out, _err = run(playbooks, "apply", "-f", "task.dstack.yml", "-y", "-d")
    assert code == 0
    check, real = playbooks.calls
    assert "gpufleet_task_name" not in check["extravars"]
    assert real["extravars"]["gpufleet_task_name"] == "brave-otter-7"
    assert real["extravars"]["task"] == path


@pytest.mark.parametrize("argv, message", [
    (["-n", "Bad_Name"], "--name: invalid name 'Bad_Name'"),
    (["-e", "1A=2"], "--env[0]: invalid entry '1A=2'"),
    (["--fleet", "a/b/c"], "--fleet[0]: invalid fleet reference 'a/b/c'"),
])
def test_apply_a_bad_override_is_refused_naming_the_option_before_any_playbook(
        files, playbooks, argv, message):
    path = files("task.dstack.yml", TASK)
    code, out, err = run(playbooks, "apply", "-f", "task.dstack.yml", "-y", *argv)
    assert code == 2
    assert out == ""
    assert f"{path}: {message}" in err
    assert playbooks.calls == []


def test_apply_overrides_are_for_tasks_only(files, playbooks):
    path = files("fleet.dstack.yml", "type: fleet\nname: gpus\nnodes: 1\n")
    code, _out, err = run(playbooks, "apply", "-f", "fleet.dstack.yml", "-y", "--env", "A=1")
    assert code == 1
    assert err == (f"{path}: --name, --env, --fleet and --array apply to tasks; this is a fleet "
                   "configuration\n")
    assert playbooks.calls == []


@pytest.mark.parametrize("argv", [["apply", "-f", "t.yml", "--fleet-f", "x.yml"],
                                  ["apply", "--fi", "t.yml"],
                                  ["ps", "--js"]])
def test_options_are_never_abbreviated(playbooks, argv, capsys):
    with pytest.raises(SystemExit) as exited:
        cli.main(argv)
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert "unrecognized arguments" in err or "required" in err, err
    assert playbooks.calls == []


def test_apply_vault_password_file_reaches_the_playbooks_and_is_put_back(files, playbooks,
                                                                         monkeypatch):
    files("task.dstack.yml", TASK)
    monkeypatch.delenv("ANSIBLE_VAULT_PASSWORD_FILE", raising=False)
    seen = []
    original = playbooks.__call__

    def spy(*args, **kwargs):
        seen.append(os.environ.get("ANSIBLE_VAULT_PASSWORD_FILE"))
        return original(*args, **kwargs)

    monkeypatch.setattr(runner, "run_playbook", spy)
    playbooks.answer(stats=planned_stats())
    playbooks.answer(stats=ended_stats("done"))
    assert run(playbooks, "apply", "-f", "task.dstack.yml", "-y", "--vault-password-file",
               "vault.txt")[0] == 0
    assert seen == [os.path.join(os.getcwd(), "vault.txt")] * 2
    assert "ANSIBLE_VAULT_PASSWORD_FILE" not in os.environ


DEV = "type: dev-environment\nname: dev\nide: vscode\n"


def dev_stats(status):
    parsed, _warnings = parse_data({"type": "dev-environment", "name": "dev", "ide": "vscode"})
    record = {"run": "dev", "status": status, "config": parsed,
              "plan": {"fleet": "gpus", "jobs": [placed(0, "gpus-0")]}}
    return {"gpufleet_run": record}


@pytest.mark.parametrize("installed", [True, False])
def test_apply_a_dev_environment_passes_the_local_vscode_version_as_dstack_does(
        files, playbooks, monkeypatch, tmp_path, installed):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    if installed:
        code = bin_dir / "code"
        code.write_text("#!/bin/sh\nprintf '1.95.3\\nf1a4fb10\\nx64\\n'\n")
        code.chmod(0o755)
    monkeypatch.setenv("PATH", str(bin_dir))
    path = files("dev.dstack.yml", DEV)
    playbooks.answer(stats=dev_stats("planned"))
    playbooks.answer(stats=dev_stats("running"))
    code, _out, err = run(playbooks, "apply", "-f", "dev.dstack.yml", "-y", "-d")
    assert code == 0, err
    check, real = playbooks.calls
    assert check["extravars"]["task"] == real["extravars"]["task"] == path
    if installed:
        assert check["extravars"]["gpufleet_task_ide_version"] == "f1a4fb10"
        assert real["extravars"]["gpufleet_task_ide_version"] == "f1a4fb10"
        assert "No VS Code version found" not in err
    else:
        assert "gpufleet_task_ide_version" not in check["extravars"]
        assert "No VS Code version found here (no working `code` command in PATH)" in err


def test_apply_a_dev_environment_with_its_own_version_asks_no_ide(files, playbooks, monkeypatch,
                                                                  tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))
    files("dev.dstack.yml", DEV + "version: abc\n")
    playbooks.answer(stats=dev_stats("planned"))
    playbooks.answer(stats=dev_stats("running"))
    code, _out, err = run(playbooks, "apply", "-f", "dev.dstack.yml", "-y", "-d")
    assert code == 0, err
    assert "No VS Code version" not in err
    assert all("gpufleet_task_ide_version" not in c["extravars"] for c in playbooks.calls)
