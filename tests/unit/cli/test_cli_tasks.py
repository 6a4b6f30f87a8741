# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The ``gpufleet`` task commands (apply -f TASK, ps, logs, stop) without Ansible.

``gpufleet.runner.run_playbook`` is replaced by a fake that records each call (playbook, extra
vars, check mode, whether a callback was given), hands the callback ansible-runner-like events,
and answers with a PlaybookResult carrying what the playbooks publish with set_stats
(gpufleet_run, gpufleet_runs, gpufleet_unreachable, gpufleet_log_lines).

``apply -f TASK`` asks after a planning play (task.yml in check mode), as does ``--array`` with
-y; with -y alone there is only the submission, with ``gpufleet_task_show_plan``, and the plan
table comes from it (the task action's printer) once the run is placed.
"""

from __future__ import annotations

import json
import os

import pytest
from ansible_collections.gpufleet.cluster.plugins.module_utils.render import run_table as runtable
from ansible_collections.gpufleet.cluster.plugins.module_utils.spec import parse_data

from gpufleet import cli, runner
from gpufleet.cli import apply as apply_cli
from gpufleet.direct import CommandError
from gpufleet.runner import RunnerError
from tests.doubles.playbooks import FakeDirect, run_cli

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


# The fake playbook runner and no terminal on stdin (conftest.py)
pytestmark = pytest.mark.usefixtures("playbooks", "stdin")


@pytest.fixture(autouse=True)
def direct(monkeypatch):
    """ps, logs and stop answered without the fleets of this machine: a test that expects
    none of them fails on a call (gpufleet.direct would reach the real hosts)."""
    return FakeDirect().install(monkeypatch)


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


def plan_event(path):
    """The plan table of a run submitted with show_plan (apply -y), as the real play hands it
    over: the task action's printer (plugin_utils.run_output) shows run_plan_lines and a blank
    line in one display call, which ansible-runner delivers as one verbose event, its lines
    joined by the pty's CRLF and its end stripped (the blank line with it)."""
    return verbose("\r\n".join(plan_lines(path)))


def printed_plan(path, tmp_path):
    """What the task action's printer writes for the same plan to the output pipe (an attached
    apply): the real printer, into a file."""
    from ansible_collections.gpufleet.cluster.plugins.plugin_utils import run_output

    target = tmp_path / "printed-plan"
    run_output.printer(str(target), path)({"kind": "plan", "plan": plan(), "config": config()})
    return target.read_text(encoding="utf-8")


@pytest.fixture
def random_name(monkeypatch):
    """The name apply -y draws for a task without one: fixed, and each draw counted."""
    drawn = []

    def draw():
        drawn.append("brave-otter-7")
        return "brave-otter-7"

    monkeypatch.setattr(apply_cli, "_random_name", draw)
    return drawn


# ---------------------------------------------------------------------------------------------
# apply -f TASK: the plan, the question (without -y: task.yml in check mode first)


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
    path = files("task.dstack.yml", TASK)
    stdin.tty, stdin.answer = True, answer
    playbooks.answer(stats=planned_stats())
    playbooks.answer(stats=ended_stats(), events=[verbose("train: done\n")])
    code, out, err = run(playbooks, "apply", "-f", "task.dstack.yml")
    assert code == 0
    assert out.splitlines() == plan_lines(path) + [
        "", "Submit the run train? [y/n] train: done", "Run train done"]
    assert err == "Planning...\n"
    assert [c["check"] for c in playbooks.calls] == [True, False]
    # The plan was shown before the question: the submission does not show it again.
    assert playbooks.calls[1]["extravars"] == {"task": path, "gpufleet_task_wait": True,
                                               "gpufleet_task_logs": True}


def test_apply_asking_with_no_room_now_says_the_run_would_wait(files, playbooks, stdin):
    files("task.dstack.yml", TASK)
    stats = planned_stats()
    stats["gpufleet_run"].update(plan=None, waits="no fleet has 2 hosts with gpu=H100:8 free")
    playbooks.answer(stats=stats)
    code, out, err = run(playbooks, "apply", "-f", "task.dstack.yml")
    assert code == 1
    assert out.splitlines() == [
        "No fleet has room for it now (no fleet has 2 hosts with gpu=H100:8 free).",
        "Its retry policy lets it wait: submitted, it waits in the queue and starts when "
        "capacity frees up.", "", "Nothing was submitted."]
    assert err == "Planning...\n" + NO_TERMINAL


# ---------------------------------------------------------------------------------------------
# apply -f TASK -y: the run alone, its plan shown once it is placed (show_plan)


def test_apply_yes_submits_with_the_files_and_streams_the_run_in_order(
        files, playbooks, stdin):
    path = files("task.dstack.yml", TASK)
    fleet = os.path.join(os.getcwd(), "gpus.dstack.yml")
    events = [
        plan_event(path),
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
    playbooks.answer(stats=ended_stats("done"), events=events)
    code, out, err = run(playbooks, "apply", "-f", "task.dstack.yml", "-y",
                         "--fleet-file", "gpus.dstack.yml", "--fleet-file", "/abs/other.yml")
    assert code == 0
    assert stdin.reads == 0
    # No planning play: the submission alone, asked to show its plan.
    (real,) = playbooks.calls
    assert real["playbook"] == "task.yml"
    assert real["check"] is False and real["streamed"] is True
    assert real["kwargs"]["output"] is playbooks.out
    assert real["extravars"] == {"task": path, "gpufleet_fleet_files": [fleet, "/abs/other.yml"],
                                 "gpufleet_task_wait": True, "gpufleet_task_logs": True,
                                 "gpufleet_task_show_plan": True}
    streamed = ["train job 0 on gpus-0: running", "train job 1 on gpus-1: running",
                "[train-0] step 1", "[train-1] step 1", "train: done"]
    # The plan's lines (its CRLF made plain newlines, its inner blank line kept), then the run's.
    assert out.splitlines() == plan_lines(path) + streamed + ["Run train done"]
    assert "\r" not in out
    assert err == ""
    # every line is out while the playbook still runs, not after it; the plan first
    plan_text = "\n".join(plan_lines(path)) + "\n"
    assert playbooks.snapshots[0] == plan_text
    assert playbooks.snapshots[1] == plan_text + streamed[0] + "\n"
    assert playbooks.snapshots[4] == plan_text + "\n".join(streamed[:3]) + "\n"


def test_apply_yes_attached_the_plan_comes_through_the_output_pipe_then_a_blank_line(
        files, playbooks, tmp_path):
    path = files("task.dstack.yml", TASK)
    playbooks.answer(stats=ended_stats("done"),
                     output=printed_plan(path, tmp_path) + "[train-0] step 1\n")
    code, out, err = run(playbooks, "apply", "-f", "task.dstack.yml", "-y")
    assert code == 0
    assert out.splitlines() == plan_lines(path) + ["", "[train-0] step 1", "Run train done"]
    assert err == ""
    assert playbooks.calls[0]["extravars"]["gpufleet_task_show_plan"] is True


def test_apply_streams_errors_and_warnings_to_stderr(files, playbooks):
    path = files("task.dstack.yml", TASK)
    playbooks.answer(stats=ended_stats("done"), events=[
        plan_event(path),
        {"event": "warning", "stdout": "[WARNING]: something odd\n"},
        verbose("train: done\n"),
        {"event": "error", "stdout": "ERROR! not quite\n"},
    ])
    code, out, err = run(playbooks, "apply", "-f", "task.dstack.yml", "-y")
    assert code == 0
    assert err == "[WARNING]: something odd\nERROR! not quite\n"
    assert out.splitlines() == plan_lines(path) + ["train: done", "Run train done"]


def test_apply_a_failed_run_exits_1_with_its_message(files, playbooks):
    files("task.dstack.yml", TASK)
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
    assert err == ""
    assert [c["check"] for c in playbooks.calls] == [False]


@pytest.mark.parametrize("status", ["terminated", "failed"])
def test_apply_a_run_that_did_not_end_done_exits_1(files, playbooks, status):
    files("task.dstack.yml", TASK)
    playbooks.answer(rc=2, stats=ended_stats(status))
    code, out, _err = run(playbooks, "apply", "-f", "task.dstack.yml", "-y")
    assert code == 1
    assert out.splitlines()[-1] == "Run train %s" % status
    assert len(playbooks.calls) == 1


def test_apply_yes_detach_submits_in_this_process(files, playbooks, direct):
    """Nothing to follow: the task action's call runs in the command (gpufleet.direct), its
    plan and job lines on stdout, and no playbook runs."""
    path = files("task.dstack.yml", TASK)
    direct.answer({"run": "train", "status": "running"},
                  lines="\n".join(plan_lines(path) + ["", "train job 0 on gpus-0: running\n"]))
    code, out, err = run(playbooks, "apply", "-f", "task.dstack.yml", "-y", "-d",
                         "--name", "train", "-e", "A=1", "--fleet", "gpus")
    assert (code, err) == (0, "")
    assert playbooks.calls == []
    [(name, args, kwargs)] = direct.calls
    assert name == "submit" and args[0] == path
    assert {k: kwargs[k] for k in ("name", "env", "fleets", "ide_version")} == {
        "name": "train", "env": ["A=1"], "fleets": ["gpus"], "ide_version": None}
    assert out.splitlines() == plan_lines(path) + [
        "", "train job 0 on gpus-0: running",
        "Run train submitted; follow it with gpufleet logs -f train"]


@pytest.mark.parametrize("answer, code, said", [
    ({"run": "train", "status": "failed", "message": "job 0 could not start", "failed": True},
     1, "Run train failed: job 0 could not start\n"),
    (None, 1, "gpufleet: no fleets found: apply a fleet first\n"),
])
def test_apply_yes_detach_in_this_process_that_fails_exits_1(files, playbooks, direct, answer,
                                                             code, said):
    from gpufleet.direct import CommandError

    files("task.dstack.yml", TASK)
    if answer is None:
        direct.answer(raises=CommandError("no fleets found: apply a fleet first"))
    else:
        direct.answer(answer)
    got, out, err = run(playbooks, "apply", "-f", "task.dstack.yml", "-y", "-d")
    assert (got, out, err) == (code, "", said)
    assert playbooks.calls == []


def test_apply_yes_detach_in_this_process_gets_the_name_drawn_here(files, playbooks, direct,
                                                                   random_name):
    files("task.dstack.yml", TASK.replace("name: train\n", ""))
    direct.answer({"run": "brave-otter-7", "status": "running"})
    code, out, _err = run(playbooks, "apply", "-f", "task.dstack.yml", "-y", "-d")
    assert code == 0 and random_name == ["brave-otter-7"]
    assert direct.calls[0][2]["name"] == "brave-otter-7"
    assert out == "Run brave-otter-7 submitted; follow it with gpufleet logs -f brave-otter-7\n"


def test_apply_detach_does_not_wait_and_says_how_to_follow(files, playbooks, direct):
    """When task.yml must submit (the fake direct.submit answers None, as for stored secrets
    or a fleet that grows), the detached run goes through the playbook as before."""
    path = files("task.dstack.yml", TASK)
    playbooks.answer(stats=ended_stats("running", reason=None),
                     events=[plan_event(path), verbose("train job 0 on gpus-0: running\n")])
    code, out, err = run(playbooks, "apply", "-f", "task.dstack.yml", "-y", "-d")
    assert code == 0
    assert [c[0] for c in direct.calls] == ["submit"]
    (real,) = playbooks.calls
    assert real["check"] is False
    assert real["extravars"] == {"task": path, "gpufleet_task_wait": False,
                                 "gpufleet_task_logs": False, "gpufleet_task_show_plan": True}
    # Detached, nothing goes through the output pipe: the lines are events.
    assert "output" not in real["kwargs"]
    assert out.splitlines() == plan_lines(path) + [
        "train job 0 on gpus-0: running",
        "Run train submitted; follow it with gpufleet logs -f train"]
    assert err == ""


def test_apply_detach_of_a_failed_submission_exits_1(files, playbooks):
    files("task.dstack.yml", TASK)
    playbooks.answer(rc=2, stats=ended_stats("failed", "job 0 could not start", failed=True))
    code, out, err = run(playbooks, "apply", "-f", "task.dstack.yml", "-y", "-d")
    assert code == 1
    assert err == "Run train failed: job 0 could not start\n"
    assert out == ""
    assert len(playbooks.calls) == 1


# ---------------------------------------------------------------------------------------------
# apply -f TASK: what goes wrong before or around the run


def no_capacity_record():
    return {"run": "train", "status": "failed", "reason": "failed_to_start_due_to_no_capacity",
            "message": "no fleet has 2 hosts with gpu=H100:8 free", "plan": None,
            "failed": True, "msg": NO_CAPACITY}


def test_apply_yes_no_capacity_the_run_fails_with_the_message_and_no_plan(files, playbooks):
    files("task.dstack.yml", TASK)
    playbooks.answer(rc=2, stats={"gpufleet_run": no_capacity_record()}, failures=[
        {"host": "localhost", "task": "Fail when the run did not end done", "msg": NO_CAPACITY}])
    code, out, err = run(playbooks, "apply", "-f", "task.dstack.yml", "-y")
    assert code == 1
    # Never placed, so no plan; no job ever started: the end is an error, on stderr.
    assert out == ""
    assert err == "Run train failed: no fleet has 2 hosts with gpu=H100:8 free\n"
    assert len(playbooks.calls) == 1 and playbooks.calls[0]["check"] is False


def test_apply_asking_no_capacity_reports_the_message_and_submits_nothing(
        files, playbooks, stdin):
    files("task.dstack.yml", TASK)
    stdin.tty, stdin.answer = True, "y\n"
    playbooks.answer(rc=2, stats={"gpufleet_run": no_capacity_record()}, failures=[
        {"host": "localhost", "task": "Fail when the run did not end done", "msg": NO_CAPACITY}])
    code, out, err = run(playbooks, "apply", "-f", "task.dstack.yml")
    assert code == 1
    assert out == ""
    assert err == "Planning...\ngpufleet: %s\n" % NO_CAPACITY
    assert stdin.reads == 0
    assert len(playbooks.calls) == 1 and playbooks.calls[0]["check"] is True


@pytest.mark.parametrize("argv, planning, check", [(["-y"], "", False),
                                                   ([], "Planning...\n", True)])
def test_apply_check_error_without_a_record_reports_the_failed_task(
        files, playbooks, argv, planning, check):
    files("task.dstack.yml", TASK)
    playbooks.answer(rc=2, failures=[{"host": "localhost", "task": "Check the input",
                                      "msg": "Pass the task with -e task=FILE"}])
    code, out, err = run(playbooks, "apply", "-f", "task.dstack.yml", *argv)
    assert code == 1
    assert out == ""
    assert err == (planning + "gpufleet: localhost: Check the input: "
                   "Pass the task with -e task=FILE\n")
    assert [c["check"] for c in playbooks.calls] == [check]


def test_apply_an_invalid_task_file_names_the_field_and_runs_nothing(files, playbooks):
    path = files("bad.dstack.yml", "type: task\ncommands: [x]\nnodes: two\n")
    code, out, err = run(playbooks, "apply", "-f", "bad.dstack.yml", "-y")
    assert code == 1
    assert out == ""
    assert err.startswith(path + ": nodes: ")
    assert playbooks.calls == []


@pytest.mark.parametrize("argv, planned, checks", [
    (["-y"], False, [False]),          # the submission itself cannot start
    ([], False, [True]),               # asking: the planning play cannot start
    ([], True, [True, False]),         # asking: planned, then the submission cannot start
])
def test_apply_a_playbook_that_cannot_start_exits_2(files, playbooks, stdin, argv, planned,
                                                    checks):
    files("task.dstack.yml", TASK)
    stdin.tty, stdin.answer = True, "y\n"
    if planned:
        playbooks.answer(stats=planned_stats())
    playbooks.answer(raises=RunnerError("ansible-playbook not found next to python"))
    code, _out, err = run(playbooks, "apply", "-f", "task.dstack.yml", *argv)
    assert code == 2
    assert err.endswith("gpufleet: ansible-playbook not found next to python\n")
    assert [c["check"] for c in playbooks.calls] == checks


@pytest.mark.parametrize("detach", [False, True])
def test_apply_an_error_of_the_real_run_is_reported_not_raised(files, playbooks, detach):
    files("task.dstack.yml", TASK)
    msg = "image python:3.11 could not be pulled on gpus-0: manifest unknown"
    playbooks.answer(rc=2, stats={"gpufleet_run": {"failed": True, "msg": msg}}, failures=[
        {"host": "localhost", "task": "Fail when the run did not end done", "msg": msg}])
    argv = ["apply", "-f", "task.dstack.yml", "-y"] + (["-d"] if detach else [])
    code, _out, err = run(playbooks, *argv)
    assert code == 1
    assert msg in err
    assert [c["check"] for c in playbooks.calls] == [False]


# ---------------------------------------------------------------------------------------------
# ps: answered in the command's process (gpufleet.direct), never by a playbook


def test_ps_prints_the_table_of_the_runs(files, playbooks, direct):
    runs = [run_record("train", "running"), run_record("dist", "failed", jobs=2)]
    direct.answer({"runs": runs, "unreachable": {}})
    code, out, err = run(playbooks, "ps", "--fleet-file", "gpus.dstack.yml")
    assert code == 0
    assert err == ""
    lines = out.splitlines()
    assert lines == runtable.run_table(runs)
    assert lines[0].split() == ["NAME", "USER", "BACKEND", "GPU", "PRICE", "STATUS",
                                "SUBMITTED"]
    assert [line.split()[0] for line in lines[1:]] == ["train", "dist", "job=0", "job=1"]
    assert direct.calls == [("runs", (), {
        "fleet_files": [os.path.join(os.getcwd(), "gpus.dstack.yml")]})]
    assert playbooks.calls == []


def test_ps_verbose_shows_resources_and_errors(playbooks, direct):
    runs = [run_record("train", "running")]
    direct.answer({"runs": runs, "unreachable": {}})
    code, out, _err = run(playbooks, "ps", "-v")
    assert code == 0
    assert out.splitlines() == runtable.run_table(runs, verbose=True)
    assert "RESOURCES" in out.splitlines()[0] and "ERROR" in out.splitlines()[0]
    assert "cpu=16 mem=256GB" in out


def test_ps_json_dumps_the_records(playbooks, direct):
    runs = [run_record("train", "running"), run_record("dist", "done", jobs=2)]
    direct.answer({"runs": runs, "unreachable": {}})
    code, out, _err = run(playbooks, "ps", "--json")
    assert code == 0
    assert json.loads(out) == runs


@pytest.mark.parametrize("argv, text", [([], "No runs.\n"), (["--json"], "[]\n")])
def test_ps_without_runs(playbooks, direct, argv, text):
    direct.answer({"runs": [], "unreachable": {}})
    code, out, err = run(playbooks, "ps", *argv)
    assert (code, out, err) == (0, text, "")


def test_ps_reports_unreachable_hosts_on_stderr_and_lists_the_others(playbooks, direct):
    runs = [run_record("train", "running")]
    direct.answer({"runs": runs, "unreachable": {
        "gpus-3": "ssh: connect to host 10.0.0.3 port 22: Connection refused",
        "gpus-2": "ssh: timed out"}})
    code, out, err = run(playbooks, "ps")
    assert code == 0
    assert out.splitlines() == runtable.run_table(runs)
    assert err.splitlines() == [
        "gpufleet: gpus-2: ssh: timed out",
        "gpufleet: gpus-3: ssh: connect to host 10.0.0.3 port 22: Connection refused"]


def test_ps_names_the_fleets_it_could_not_read_and_exits_1(playbooks, direct):
    runs = [run_record("train", "running")]
    key = "cannot be checked: its SSH key /s/fleets/gpus/id_ed25519 is missing"
    direct.answer({"runs": runs, "unreachable": {"gpus-0": "gpus-0: " + key, "x-1": "down"},
                   "unread": {"gpus": {"gpus-0": key}}})
    code, out, err = run(playbooks, "ps")
    assert code == 1
    assert out.splitlines() == runtable.run_table(runs)
    assert err.splitlines() == [
        "gpufleet: x-1: down",
        "gpufleet: could not read fleet gpus, its runs are not listed: gpus-0: " + key]
    direct.answer({"runs": [], "unreachable": {}, "unread": {"gpus": {"gpus-0": key}}})
    code, out, err = run(playbooks, "ps")
    assert (code, out) == (1, "No runs on the fleets that could be read.\n")
    assert "could not read fleet gpus" in err


def test_ps_a_failed_listing_exits_1_with_its_message(playbooks, direct):
    direct.answer(raises=CommandError("gpus.dstack.yml: no such file"))
    code, out, err = run(playbooks, "ps")
    assert (code, out, err) == (1, "", "gpufleet: gpus.dstack.yml: no such file\n")


# ---------------------------------------------------------------------------------------------
# logs: answered in the command's process; -f follows through logs.yml


def test_logs_streams_the_lines_the_hosts_kept(playbooks, direct):
    direct.answer(run_record("train", "done"),
                  lines="[train-0] step 1\n[train-0] done\n[train-1] step 1\n")
    code, out, err = run(playbooks, "logs", "train")
    assert (code, err) == (0, "")
    assert out == "[train-0] step 1\n[train-0] done\n[train-1] step 1\n"
    [(name, args, kwargs)] = direct.calls
    assert (name, args[0], args[1] is playbooks.out) == ("logs", "train", True)
    assert kwargs == {"job": None, "since": None, "fleet_files": []}
    assert playbooks.calls == []


def test_logs_passes_job_and_since_on(playbooks, direct):
    direct.answer(run_record("train", "done"), lines="step 1\n")
    code, out, _err = run(playbooks, "logs", "train", "--job", "1", "--since", "10m",
                          "--fleet-file", "/f/gpus.yml")
    assert (code, out) == (0, "step 1\n")
    assert direct.calls[0][2] == {"job": 1, "since": "10m", "fleet_files": ["/f/gpus.yml"]}
    playbooks.answer(stats={"gpufleet_run": run_record("train", "done"),
                            "gpufleet_log_lines": []})
    code, _out, _err = run(playbooks, "logs", "-f", "train", "--job", "0")
    assert code == 0
    assert playbooks.calls[0]["extravars"] == {"run": "train", "gpufleet_follow": True,
                                               "gpufleet_job": 0}
    assert len(direct.calls) == 1


def test_logs_of_a_run_without_lines_prints_nothing(playbooks, direct):
    direct.answer(run_record("train", "pending"))
    assert run(playbooks, "logs", "train") == (0, "", "")


def test_logs_follow_streams_the_lines_as_they_come(playbooks, direct):
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
    assert direct.calls == []


def test_logs_of_an_unknown_run_exits_1_with_the_failure(playbooks, direct):
    msg = "no run named nope on the fleets' hosts (gpufleet ps lists runs)"
    direct.answer(raises=CommandError(msg))
    code, out, err = run(playbooks, "logs", "nope")
    assert (code, out, err) == (1, "", "gpufleet: %s\n" % msg)


def test_logs_follow_a_playbook_that_cannot_start_exits_2(playbooks, direct):
    playbooks.answer(raises=RunnerError("no playbook named logs.yml"))
    assert run(playbooks, "logs", "-f", "train")[::2] == (
        2, "gpufleet: no playbook named logs.yml\n")


# ---------------------------------------------------------------------------------------------
# stop: answered in the command's process


def test_stop_without_yes_and_without_terminal_stops_nothing(playbooks, direct, stdin):
    code, out, err = run(playbooks, "stop", "train")
    assert code == 1
    assert out == "Nothing was stopped.\n"
    assert err == NO_TERMINAL
    assert stdin.reads == 0
    assert direct.calls == [] and playbooks.calls == []


def test_stop_asks_on_a_terminal(playbooks, direct, stdin):
    stdin.tty, stdin.answer = True, "no\n"
    code, out, _err = run(playbooks, "stop", "train")
    assert code == 1
    assert out == "Stop the run train? [y/n] Nothing was stopped.\n"
    assert direct.calls == []


@pytest.mark.parametrize("argv, abort", [([], False), (["-x"], True), (["--abort"], True)])
def test_stop_yes_stops_the_run(playbooks, direct, argv, abort):
    direct.answer(dict(run_record("train", "terminated"), stopped=["gpus-0"]))
    code, out, err = run(playbooks, "stop", "train", "-y", *argv)
    assert (code, out, err) == (0, "Run train terminated.\n", "")
    assert direct.calls == [("stop", ("train",), {"abort": abort, "fleet_files": []})]
    assert playbooks.calls == []


def test_stop_of_a_job_array_says_how_many_runs_and_containers(playbooks, direct):
    direct.answer({"name": "sweep", "array": "sweep", "runs": ["sweep-1", "sweep-2"],
                   "stopped": ["sweep-1-0-0", "sweep-2-0-0", "sweep-2-1-0"]})
    code, out, _err = run(playbooks, "stop", "sweep", "-y")
    assert (code, out) == (0, "Job array sweep: 3 containers of 2 runs stopped.\n")


def test_stop_of_an_unknown_run_exits_1_with_the_failure(playbooks, direct):
    msg = "no run or job array named nope on the fleets' hosts (gpufleet ps lists runs)"
    direct.answer(raises=CommandError(msg))
    code, out, err = run(playbooks, "stop", "nope", "-y")
    assert (code, out, err) == (1, "", "gpufleet: %s\n" % msg)


def test_delete_of_a_run_file_stops_and_removes_the_run_of_its_name(files, playbooks, direct):
    path = files("nightly.dstack.yml", "type: task\nname: nightly\ncommands: [eval]\n"
                 "schedule:\n  cron: '0 2 * * *'\n")
    direct.answer(dict(run_record("nightly", "terminated"), deleted=["gpus-0"]))
    code, out, err = run(playbooks, "delete", "-f", path, "-y")
    assert (code, out, err) == (0, "Run nightly deleted.\n", "")
    assert direct.calls == [
        ("stop", ("nightly",), {"abort": False, "fleet_files": [], "delete": True})]
    assert playbooks.calls == []


def test_delete_of_a_run_file_without_a_name_or_unanswered_deletes_nothing(
        files, playbooks, direct, stdin):
    path = files("anon.dstack.yml", "type: task\ncommands: [eval]\n")
    code, out, err = run(playbooks, "delete", "-f", path, "-y")
    assert (code, out) == (1, "")
    assert err == "%s: configuration specifies no run to delete (give it a name)\n" % path
    path = files("nightly.dstack.yml", "type: task\nname: nightly\ncommands: [eval]\n")
    stdin.tty, stdin.answer = True, "no\n"
    code, out, _err = run(playbooks, "delete", "-f", path)
    assert (code, out) == (1, "Delete the run nightly? [y/n] Nothing was deleted.\n")
    assert direct.calls == []
    # A run that is not there (deleted already): dstack's words.
    direct.answer({"name": "nightly", "deleted": []})
    code, out, err = run(playbooks, "delete", "-f", path, "-y")
    assert (code, out, err) == (1, "", "Run nightly does not exist\n")


# ---------------------------------------------------------------------------------------------
# apply -f TASK with dstack's --name, --env and --fleet


GIVEN = {"gpufleet_task_name": "hp-3", "gpufleet_task_env": ["CONFIG_ID=3", "HF_HOME"],
         "gpufleet_task_fleets": ["gpus", "team/big"]}
OVERRIDES = ["-n", "hp-3", "--env", "CONFIG_ID=3", "-e", "HF_HOME", "--fleet", "gpus",
             "--fleet", "team/big"]


def test_apply_yes_name_env_and_fleet_reach_the_run(files, playbooks, random_name):
    path = files("task.dstack.yml", TASK)
    playbooks.answer(stats=ended_stats("done"))
    code, _out, _err = run(playbooks, "apply", "-f", "task.dstack.yml", "-y", *OVERRIDES)
    assert code == 0
    (real,) = playbooks.calls
    assert real["extravars"] == dict(GIVEN, task=path, gpufleet_task_wait=True,
                                     gpufleet_task_logs=True, gpufleet_task_show_plan=True)
    assert random_name == []   # --name names it


def test_apply_asking_name_env_and_fleet_reach_the_plan_and_the_run(files, playbooks, stdin):
    path = files("task.dstack.yml", TASK)
    stdin.tty, stdin.answer = True, "y\n"
    playbooks.answer(stats=planned_stats())
    playbooks.answer(stats=ended_stats("done"))
    code, _out, _err = run(playbooks, "apply", "-f", "task.dstack.yml", *OVERRIDES)
    assert code == 0
    check, real = playbooks.calls
    assert check["extravars"] == dict(GIVEN, task=path)
    assert real["extravars"] == dict(GIVEN, task=path, gpufleet_task_wait=True,
                                     gpufleet_task_logs=True)


def test_apply_yes_a_task_without_a_name_runs_under_the_name_drawn_here(
        files, playbooks, random_name):
    path = files("task.dstack.yml", TASK.replace("name: train\n", ""))
    record = ended_stats("running", reason=None)
    record["gpufleet_run"]["run"] = "brave-otter-7"
    playbooks.answer(stats=record)
    code, out, _err = run(playbooks, "apply", "-f", "task.dstack.yml", "-y", "-d")
    assert code == 0
    assert random_name == ["brave-otter-7"]   # drawn once, with no planning play to draw it
    (real,) = playbooks.calls
    assert real["check"] is False
    assert real["extravars"] == {"task": path, "gpufleet_task_name": "brave-otter-7",
                                 "gpufleet_task_wait": False, "gpufleet_task_logs": False,
                                 "gpufleet_task_show_plan": True}
    assert out.splitlines()[-1] == ("Run brave-otter-7 submitted; follow it with gpufleet logs "
                                    "-f brave-otter-7")


def test_apply_yes_a_named_task_draws_no_name(files, playbooks, random_name):
    files("task.dstack.yml", TASK)
    playbooks.answer(stats=ended_stats("done"))
    assert run(playbooks, "apply", "-f", "task.dstack.yml", "-y")[0] == 0
    assert random_name == []
    assert "gpufleet_task_name" not in playbooks.calls[0]["extravars"]


def test_apply_draws_a_run_name_as_the_task_runner_does():
    import random

    from ansible_collections.gpufleet.cluster.plugins.module_utils.tasks import rankplan

    state = random.getstate()
    try:
        random.seed(20240611)
        drawn = apply_cli._random_name()
        random.seed(20240611)
        assert drawn == rankplan.random_run_name()
    finally:
        random.setstate(state)
    assert rankplan.run_name({"name": drawn}) == drawn   # a valid run name


def test_apply_asking_a_task_without_a_name_runs_under_the_name_the_plan_showed(
        files, playbooks, stdin, random_name):
    path = files("task.dstack.yml", TASK.replace("name: train\n", ""))
    stdin.tty, stdin.answer = True, "y\n"
    stats = planned_stats()
    stats["gpufleet_run"]["run"] = "calm-heron-3"
    stats["gpufleet_run"]["config"]["name"] = None
    playbooks.answer(stats=stats)
    playbooks.answer(stats=ended_stats("done"))
    code, out, _err = run(playbooks, "apply", "-f", "task.dstack.yml", "-d")
    assert code == 0
    assert "Submit the run calm-heron-3? [y/n] " in out
    check, real = playbooks.calls
    assert "gpufleet_task_name" not in check["extravars"]
    assert real["extravars"]["gpufleet_task_name"] == "calm-heron-3"
    assert real["extravars"]["task"] == path
    assert "gpufleet_task_show_plan" not in real["extravars"]
    assert random_name == []   # the plan's name, not one drawn here


def test_apply_yes_array_is_still_planned_first(files, playbooks, random_name):
    path = files("task.dstack.yml", TASK)
    runs = ["train-1", "train-2", "train-3"]
    stats = planned_stats()
    stats["gpufleet_run"].update(array="train", runs=runs)
    playbooks.answer(stats=stats)
    playbooks.answer(stats={"gpufleet_run": {
        "run": "train", "array": "train", "status": "done",
        "runs": [{"run": name, "status": "done"} for name in runs]}})
    code, out, err = run(playbooks, "apply", "-f", "task.dstack.yml", "-y", "--array", "1-3")
    assert code == 0
    assert err == "Planning...\n"
    assert out.splitlines() == plan_lines(path) + [
        "", "Job array train: 3 runs, train-1 to train-3 (the plan is the first's)",
        "train-1 done", "train-2 done", "train-3 done", "Job array train done: 3 done"]
    check, real = playbooks.calls
    assert (check["check"], real["check"]) == (True, False)
    assert check["extravars"] == {"task": path, "gpufleet_task_array": "1-3"}
    assert real["extravars"] == {"task": path, "gpufleet_task_array": "1-3",
                                 "gpufleet_task_wait": True, "gpufleet_task_logs": True}
    assert random_name == []


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
    assert err == (f"{path}: --name, --env, --fleet, --array and --after apply to tasks; this "
                   "is a fleet configuration\n")
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


# How a submission is reached: -y (the submission alone) or asking on a terminal (the planning
# play, then the submission).
FLOWS = {"yes": (["-y"], [False]), "asking": ([], [True, False])}


def in_flow(flow, stdin, playbooks, planned, submitted):
    """The arguments for ``flow``, with the answers its playbooks give."""
    argv, checks = FLOWS[flow]
    if flow == "asking":
        stdin.tty, stdin.answer = True, "y\n"
        playbooks.answer(stats=planned)
    playbooks.answer(stats=submitted)
    return argv, checks


@pytest.mark.parametrize("flow", sorted(FLOWS))
def test_apply_vault_password_file_reaches_the_playbooks_and_is_put_back(
        files, playbooks, monkeypatch, stdin, flow):
    files("task.dstack.yml", TASK)
    monkeypatch.delenv("ANSIBLE_VAULT_PASSWORD_FILE", raising=False)
    seen = []
    original = playbooks.__call__

    def spy(*args, **kwargs):
        seen.append(os.environ.get("ANSIBLE_VAULT_PASSWORD_FILE"))
        return original(*args, **kwargs)

    monkeypatch.setattr(runner, "run_playbook", spy)
    argv, checks = in_flow(flow, stdin, playbooks, planned_stats(), ended_stats("done"))
    assert run(playbooks, "apply", "-f", "task.dstack.yml", *argv, "--vault-password-file",
               "vault.txt")[0] == 0
    assert [c["check"] for c in playbooks.calls] == checks
    assert seen == [os.path.join(os.getcwd(), "vault.txt")] * len(checks)
    assert "ANSIBLE_VAULT_PASSWORD_FILE" not in os.environ


DEV = "type: dev-environment\nname: dev\nide: vscode\n"


def dev_stats(status):
    parsed, _warnings = parse_data({"type": "dev-environment", "name": "dev", "ide": "vscode"})
    record = {"run": "dev", "status": status, "config": parsed,
              "plan": {"fleet": "gpus", "jobs": [placed(0, "gpus-0")]}}
    return {"gpufleet_run": record}


@pytest.mark.parametrize("flow", sorted(FLOWS))
@pytest.mark.parametrize("installed", [True, False])
def test_apply_a_dev_environment_passes_the_local_vscode_version_as_dstack_does(
        files, playbooks, direct, monkeypatch, tmp_path, stdin, installed, flow):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    if installed:
        code = bin_dir / "code"
        code.write_text("#!/bin/sh\nprintf '1.95.3\\nf1a4fb10\\nx64\\n'\n")
        code.chmod(0o755)
    monkeypatch.setenv("PATH", str(bin_dir))
    path = files("dev.dstack.yml", DEV)
    argv, checks = in_flow(flow, stdin, playbooks, dev_stats("planned"), dev_stats("running"))
    code, _out, err = run(playbooks, "apply", "-f", "dev.dstack.yml", *argv, "-d")
    assert code == 0, err
    assert [c["check"] for c in playbooks.calls] == checks
    for call in playbooks.calls:   # the plan (when asking) and the run
        assert call["extravars"]["task"] == path
        if installed:
            assert call["extravars"]["gpufleet_task_ide_version"] == "f1a4fb10"
        else:
            assert "gpufleet_task_ide_version" not in call["extravars"]
    assert playbooks.calls[-1]["extravars"].get("gpufleet_task_show_plan") is (
        True if flow == "yes" else None)
    # -y -d tries the submission in this process first, with the same version.
    assert [kw["ide_version"] for _n, _a, kw in direct.calls] == (
        ["f1a4fb10" if installed else None] if flow == "yes" else [])
    if installed:
        assert "No VS Code version found" not in err
    else:
        # Said once, however many playbooks run.
        assert err.count("No VS Code version found here (no working `code` command in "
                         "PATH)") == 1


@pytest.mark.parametrize("flow", sorted(FLOWS))
def test_apply_a_dev_environment_with_its_own_version_asks_no_ide(
        files, playbooks, monkeypatch, tmp_path, stdin, flow):
    monkeypatch.setenv("PATH", str(tmp_path))
    files("dev.dstack.yml", DEV + "version: abc\n")
    argv, checks = in_flow(flow, stdin, playbooks, dev_stats("planned"), dev_stats("running"))
    code, _out, err = run(playbooks, "apply", "-f", "dev.dstack.yml", *argv, "-d")
    assert code == 0, err
    assert "No VS Code version" not in err
    assert [c["check"] for c in playbooks.calls] == checks
    assert all("gpufleet_task_ide_version" not in c["extravars"] for c in playbooks.calls)


# ---------------------------------------------------------------------------------------------
# Who runs what (issue 34): ps --user, the USER column, stop --force


def test_ps_user_lists_that_users_runs_and_the_table_has_their_users(playbooks, direct):
    runs = [dict(run_record("train", "running"), user="ann"),
            dict(run_record("old", "done"), user=None)]
    direct.answer({"runs": runs, "unreachable": {}})
    code, out, err = run(playbooks, "ps", "--user", "ann")
    assert (code, err) == (0, "")
    assert direct.calls == [("runs", (), {"fleet_files": [], "user": "ann"})]
    lines = out.splitlines()
    assert lines[0].split()[:2] == ["NAME", "USER"]
    assert lines[1].split()[:2] == ["train", "ann"]
    assert lines[2].split()[:2] == ["old", "-"]   # a run made before runs named their user


def test_ps_json_carries_the_user(playbooks, direct):
    runs = [dict(run_record("train", "running"), user="bob")]
    direct.answer({"runs": runs, "unreachable": {}})
    code, out, _err = run(playbooks, "ps", "--json")
    assert code == 0
    assert [r["user"] for r in json.loads(out)] == ["bob"]


def test_stop_force_is_passed_on(playbooks, direct):
    direct.answer(dict(run_record("train", "terminated"), stopped=["gpus-0"]))
    code, out, err = run(playbooks, "stop", "train", "-y", "--force")
    assert (code, out, err) == (0, "Run train terminated.\n", "")
    assert direct.calls == [("stop", ("train",), {"abort": False, "fleet_files": [],
                                                  "force": True})]


def test_a_refused_stop_is_one_line_naming_the_owner(playbooks, direct):
    direct.answer(raises=CommandError(
        "run train belongs to ann: you (bob) are not an admin of fleet gpus; ask ann, or stop "
        "it anyway with --force (the force option)"))
    code, out, err = run(playbooks, "stop", "train", "-y")
    assert code == 1 and out == ""
    assert err.count("\n") == 1 and "belongs to ann" in err and "--force" in err


@pytest.mark.parametrize("now, wanted, said", [
    (2, 2, "Service train is running: Each replica at an older version is replaced"),
    (2, 3, "Service train is running 2 replica(s) and goes to 3: the new ones start beside "
           "them first. Each replica"),
    (3, 2, "Service train is running 3 replica(s) and goes to 2: the last ones leave the "
           "proxy and stop. Each replica"),
])
def test_the_plan_of_a_running_service_says_it_is_updated_and_scaled(
        files, playbooks, now, wanted, said):
    files("task.dstack.yml", TASK)
    stats = planned_stats()
    stats["gpufleet_run"].update(rolls=True, replicas_now=now, service={"replicas": wanted})
    playbooks.answer(stats=stats)
    code, out, _err = run(playbooks, "apply", "-f", "task.dstack.yml")
    assert code == 1
    assert said in out, out


def test_the_plan_of_a_service_whose_proxy_host_is_lost_says_where_it_goes(files, playbooks):
    files("task.dstack.yml", TASK)
    stats = planned_stats()
    stats["gpufleet_run"].update(rolls=True, replicas_now=2, service={
        "replicas": 2, "moved_from": "b-0", "proxy_host": "b-1",
        "url": "http://10.0.0.3:3000/proxy/services/main/train/"})
    playbooks.answer(stats=stats)
    _code, out, _err = run(playbooks, "apply", "-f", "task.dstack.yml")
    assert ("Its proxy host b-0 is lost: the proxy on b-1 publishes it from now on, at "
            "http://10.0.0.3:3000/proxy/services/main/train/\n") in out, out


def test_apply_after_goes_to_task_yml_and_the_plan_says_it_waits(files, playbooks):
    files("task.dstack.yml", TASK)
    playbooks.answer(stats=planned_stats())
    code, out, _err = run(playbooks, "apply", "-f", "task.dstack.yml", "--after", "prep",
                          "--after", "fetch:any")
    assert code == 1   # the question is not answered
    assert "It runs after prep, fetch:any: it waits in the queue until then" in out, out
    assert playbooks.calls[0]["extravars"]["gpufleet_task_after"] == ["prep:ok", "fetch:any"]
    # a bad condition is refused before any playbook runs
    playbooks.calls.clear()
    code, _out, err = run(playbooks, "apply", "-f", "task.dstack.yml", "--after", "prep:maybe")
    assert code == 2 and "--after: 'prep:maybe': the condition is ok, notok or any" in err
    assert playbooks.calls == []


def test_a_detached_run_that_waits_for_others_or_cannot_says_so(files, playbooks):
    files("task.dstack.yml", TASK)
    playbooks.answer(stats={"gpufleet_run": {"run": "train", "status": "pending",
                                             "reason": "dependency",
                                             "message": "waiting for prep (ok)"}})
    code, out, _err = run(playbooks, "apply", "-f", "task.dstack.yml", "-y", "-d", "--after",
                          "prep")
    assert code == 0
    assert out.startswith("Run train is waiting for prep (ok); it is placed once they have "
                          "ended"), out
    playbooks.answer(stats={"gpufleet_run": {
        "run": "train", "status": "terminated", "reason": "dependency_failed",
        "message": "run prep ended failed, and it runs after prep:ok"}})
    code, _out, err = run(playbooks, "apply", "-f", "task.dstack.yml", "-y", "-d", "--after",
                          "prep")
    assert code == 1
    assert err == ("Run train terminated (dependency_failed): run prep ended failed, and it "
                   "runs after prep:ok\n")
