# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""gpufleet.runner: the collection's playbooks run for real through ansible-runner (the slow
tests), and the parts that read its events, on their own."""

from __future__ import annotations

import io
import os
import sys
import tempfile
import textwrap
from pathlib import Path

import pytest

from gpufleet import runner
from gpufleet._collection import collection_root, collections_path

DOCS = Path(__file__).resolve().parents[1] / "fixtures" / "dstack_docs"
GOOD = DOCS / "fleet-backend-basic.dstack.yml"
BAD = DOCS / "doc_bugs" / "fleet-ssh-blocks-hostaname-typo.dstack.yml"


def validate(files, tmp_path, monkeypatch, **kwargs):
    """Run the validate playbook on ``files``; return (result, progress text)."""
    # Temporary private data directories go under tmp_path, to see them removed.
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    progress = io.StringIO()
    result = runner.run_playbook(
        "validate.yml",
        extravars={"gpufleet_config_files": [str(f) for f in files]},
        on_event=runner.progress_printer(progress),
        **kwargs
    )
    return result, progress.getvalue()


# ---------------------------------------------------------------------------------------------
# Real runs
# ---------------------------------------------------------------------------------------------


@pytest.mark.slow
def test_valid_file_through_the_validate_playbook(tmp_path, monkeypatch):
    # A path relative to the current directory means what it means to the user.
    monkeypatch.chdir(DOCS)
    result, progress = validate([GOOD.name], tmp_path, monkeypatch)
    assert (result.rc, result.status, result.ok) == (0, "successful", True), result.stdout
    assert result.stats == {
        "gpufleet_validate": {
            "ok": True,
            "files": [{"file": GOOD.name, "ok": True, "type": "fleet", "errors": []}],
        }
    }
    assert result.failures == []
    assert result.failure_lines() == []
    assert "PLAY RECAP" in result.stdout
    assert progress.splitlines()[:3] == [
        "PLAY Validate dstack configuration files",
        "TASK Require the list of files to check",
        "TASK Check each file",
    ]
    assert "TASK Publish the results as custom stats" in progress
    assert "localhost" not in progress  # nothing failed or changed
    # The temporary private data directory is gone.
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith("gpufleet-run-")] == []


@pytest.mark.slow
def test_invalid_file_through_the_validate_playbook(tmp_path, monkeypatch):
    result, progress = validate([GOOD, BAD], tmp_path, monkeypatch)
    assert (result.rc, result.status, result.ok) == (2, "failed", False)
    report = result.stats["gpufleet_validate"]
    assert report["ok"] is False
    assert [(f["file"], f["ok"], f["type"]) for f in report["files"]] == [
        (str(GOOD), True, "fleet"),
        (str(BAD), False, None),
    ]
    assert report["files"][1]["errors"][0]["path"] == "ssh_config.hosts[1].hostaname"
    # The bad file's own task failure is ignored by the playbook: only the final one counts.
    assert len(result.failures) == 1
    failure = result.failures[0]
    assert failure["host"] == "localhost"
    assert failure["task"] == "Fail listing every file that is not valid"
    assert failure["msg"].startswith("1 of 2 files are not valid:")
    assert "%s: ssh_config.hosts[1].hostaname: unknown field 'hostaname'" % BAD in failure["msg"]
    assert result.failure_lines()[0].startswith(
        "localhost: Fail listing every file that is not valid: 1 of 2 files are not valid:")
    assert "TASK Fail listing every file that is not valid\n  localhost: failed: 1 of 2" in (
        progress)
    assert "failed (ignored)" not in progress


@pytest.mark.slow
def test_check_mode_rescue_unreachable_and_kept_artifacts(tmp_path):
    playbook = tmp_path / "play.yml"
    playbook.write_text(textwrap.dedent("""\
        - name: Several kinds of failure
          hosts: localhost
          gather_facts: false
          tasks:
            - name: A failure a rescue handles
              block:
                - name: Fail inside the block
                  ansible.builtin.fail:
                    msg: handled
              rescue:
                - name: Recover
                  ansible.builtin.set_fact:
                    recovered: true
            - name: Publish what the run saw
              ansible.builtin.set_stats:
                data:
                  check_mode: "{{ ansible_check_mode }}"
                  playbook_python: "{{ ansible_playbook_python }}"
                  module_python: "{{ ansible_python_interpreter }}"
                  recovered: "{{ recovered }}"
            - name: Reach a host that refuses connections
              ansible.builtin.ping:
              delegate_to: refused
              vars:
                ansible_connection: ssh
                ansible_host: 127.0.0.1
                ansible_port: 1
        """))
    data_dir = tmp_path / "runner"
    progress = io.StringIO()
    result = runner.run_playbook(
        playbook, check=True, private_data_dir=data_dir, on_event=runner.progress_printer(progress)
    )
    assert result.rc != 0 and result.status == "failed"
    stats = result.stats
    assert (stats["check_mode"], stats["recovered"]) == (True, True)
    # This environment's ansible-playbook ran, and modules on localhost run with this Python.
    assert Path(stats["playbook_python"]).parent == Path(sys.executable).parent
    assert stats["module_python"] == sys.executable
    # The rescued failure is not one that ended the play; the unreachable host is.
    assert len(result.failures) == 1
    assert result.failures[0]["task"] == "Reach a host that refuses connections"
    assert "127.0.0.1" in result.failures[0]["msg"] or "port 1" in result.failures[0]["msg"]
    assert "  localhost: unreachable: " in progress.getvalue()
    # A given private data directory keeps ansible-runner's files.
    assert list((data_dir / "artifacts").glob("*/job_events/*.json"))


@pytest.mark.slow
def test_playbook_errors_come_back_as_lines(tmp_path):
    playbook = tmp_path / "broken.yml"
    playbook.write_text(
        "- hosts: localhost\n  tasks:\n    - name: Nope\n      no.such.module: {}\n")
    progress = io.StringIO()
    result = runner.run_playbook(playbook, on_event=runner.progress_printer(progress))
    assert result.rc != 0 and result.failures == [] and result.stats == {}
    lines = result.failure_lines()
    assert len(lines) == 1
    assert "couldn't resolve module/action 'no.such.module'" in lines[0]
    assert "broken.yml:3" in lines[0]
    assert "couldn't resolve module/action 'no.such.module'" in progress.getvalue()


@pytest.mark.parametrize("binary", [True, False])
def test_output_comes_through_a_pipe_and_is_not_kept(tmp_path, monkeypatch, binary):
    # What the playbook writes to gpufleet_output_path reaches ``output`` as it comes, the
    # result keeps none of it, and ansible-runner's stdout never sees it.
    playbook = tmp_path / "writes.yml"
    playbook.write_text(textwrap.dedent("""\
        - hosts: localhost
          gather_facts: false
          tasks:
            - name: Write three megabytes and a last line
              ansible.builtin.shell: >-
                head -c 3000000 /dev/zero | tr '\\0' x > {{ gpufleet_output_path }};
                printf '\\nlast line\\n' >> {{ gpufleet_output_path }}
              changed_when: false
        """))
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(scratch))
    raw = io.BytesIO()
    out = io.TextIOWrapper(raw, encoding="utf-8") if binary else io.StringIO()
    result = runner.run_playbook(playbook, output=out)
    assert result.ok, result.stdout[-2000:]
    text = raw.getvalue().decode() if binary else out.getvalue()
    assert text == "x" * 3000000 + "\nlast line\n"
    assert "xxxxxxxxxx" not in result.stdout
    # The pipe's private folder is gone.
    assert not [p for p in os.listdir(str(scratch)) if p.startswith("gpufleet-out-")]


def test_the_printer_drops_lines_when_nobody_reads_its_fifo(tmp_path):
    from ansible_collections.gpufleet.cluster.plugins.plugin_utils import run_output

    fifo = tmp_path / "output"
    os.mkfifo(str(fifo))
    emit = run_output.printer(str(fifo))
    emit({"kind": "info", "run": "train", "message": "hello"})   # no hang, no error
    emit({"kind": "info", "run": "train", "message": "again"})
    plain = tmp_path / "plain"
    emit = run_output.printer(str(plain))
    emit({"kind": "log", "run": "train", "rank": 0, "lines": ["a", "b"]})
    assert plain.read_text() == "[train-0] a\n[train-0] b\n"


def test_the_pump_writes_bytes_to_a_binary_file_and_text_to_a_text_one(tmp_path):
    for out, read in ((io.BytesIO(), lambda o: o.getvalue().decode()),
                      (io.StringIO(), lambda o: o.getvalue())):
        pump = runner._Pump(out)
        with open(pump.path, "wb") as writer:
            writer.write("héllo\n".encode())
        pump.close()
        assert read(out) == "héllo\n"
        assert not os.path.exists(pump.folder)


def test_the_result_keeps_only_the_end_of_a_long_output(tmp_path, monkeypatch):
    monkeypatch.setattr(runner, "STDOUT_KEPT", 100)
    handle = tmp_path / "stdout"
    handle.write_text("a" * 500 + "ERROR! the end\n")
    with open(handle) as opened:
        kept = runner._tail(opened)
    assert kept.endswith("ERROR! the end\n") and len(kept) == 100


# ---------------------------------------------------------------------------------------------
# Finding playbooks, environment, inventory
# ---------------------------------------------------------------------------------------------


def test_playbooks_are_found_by_name_or_path(tmp_path):
    assert runner.playbook_path("validate.yml") == collection_root() / "playbooks" / "validate.yml"
    own = tmp_path / "own.yml"
    own.write_text("[]\n")
    assert runner.playbook_path(own) == own
    with pytest.raises(runner.RunnerError, match=r"no playbook named nope\.yml in .*playbooks; "
                                                 r"there are: .*validate\.yml"):
        runner.playbook_path("nope.yml")
    with pytest.raises(runner.RunnerError, match="no playbook at .*missing.yml"):
        runner.playbook_path(tmp_path / "missing.yml")


def test_environment_puts_this_checkout_and_this_python_first(monkeypatch):
    monkeypatch.setenv("ANSIBLE_COLLECTIONS_PATH", "/opt/collections")
    monkeypatch.setenv("PATH", "/usr/bin")
    env = runner._environment()
    assert env["ANSIBLE_COLLECTIONS_PATH"] == os.pathsep.join(
        [str(collections_path()), "/opt/collections"])
    assert env["PATH"] == os.pathsep.join([str(Path(sys.executable).parent), "/usr/bin"])
    monkeypatch.delenv("ANSIBLE_COLLECTIONS_PATH")
    assert runner._environment()["ANSIBLE_COLLECTIONS_PATH"].split(os.pathsep) == [
        str(collections_path()), "~/.ansible/collections", "/usr/share/ansible/collections"]


def test_environment_checks_host_keys_unless_the_user_chose(monkeypatch):
    """ansible-runner turns host key checking off when ANSIBLE_HOST_KEY_CHECKING is unset."""
    monkeypatch.delenv("ANSIBLE_HOST_KEY_CHECKING", raising=False)
    assert runner._environment()["ANSIBLE_HOST_KEY_CHECKING"] == "True"
    monkeypatch.setenv("ANSIBLE_HOST_KEY_CHECKING", "False")
    assert runner._environment()["ANSIBLE_HOST_KEY_CHECKING"] == "False"


def test_inventory_choices(tmp_path, monkeypatch):
    local = runner._inventory(None)["all"]["hosts"]["localhost"]
    assert local == {"ansible_connection": "local", "ansible_python_interpreter": sys.executable}
    data = {"all": {"hosts": {"node-0": {"ansible_host": "10.0.0.1"}}}}
    assert runner._inventory(data) is data
    (tmp_path / "hosts.yml").write_text("all: {}\n")
    monkeypatch.chdir(tmp_path)
    assert runner._inventory("hosts.yml") == str(tmp_path / "hosts.yml")
    assert runner._inventory(["hosts.yml"]) == [str(tmp_path / "hosts.yml")]
    with pytest.raises(runner.RunnerError, match="inventory nowhere.yml does not exist"):
        runner._inventory("nowhere.yml")


# ---------------------------------------------------------------------------------------------
# Reading events
# ---------------------------------------------------------------------------------------------


def event(kind, **data):
    return {"event": kind, "event_data": data, "stdout": data.pop("stdout", "")}


@pytest.mark.parametrize(
    "res, expected",
    [
        ({"msg": "boom"}, "boom"),
        ({"msg": "non-zero return code", "stderr": "disk full"},
         "non-zero return code (stderr: disk full)"),
        ({"stderr": "only stderr"}, "only stderr"),
        ({"exception": "Traceback...\nValueError: bad"}, "ValueError: bad"),
        ({"msg": "One or more items failed", "results": [
            {"item": "a", "failed": False, "msg": "fine"},
            {"item": "b", "failed": True, "msg": "b broke"},
            {"item": "c", "failed": True, "msg": "disk full"}]},
         "b broke; c: disk full"),
        ("text", "text"),
    ],
)
def test_result_messages(res, expected):
    assert runner._result_message(res) == expected


def test_failures_drop_ignored_and_rescued_ones():
    seen = []
    collect = runner._Collector(seen.append)
    events = [
        event("runner_on_failed", host="a", task="probe", ignore_errors=True, res={"msg": "x"}),
        event("runner_on_failed", host="a", task="try", res={"msg": "rescued"}),
        event("runner_on_failed", host="a", task="final", res={"msg": "fatal"}, role="node"),
        event("runner_on_unreachable", host="b", task="ping", res={"msg": "no route"}),
        event("runner_on_failed", host="c", task="try", res={"msg": "rescued too"}),
        event("runner_on_async_failed", host="d", task="wait", res={"msg": "async broke"}),
        event("playbook_on_stats", failures={"a": 1, "d": 1}, dark={"b": 1},
              rescued={"a": 1, "c": 1},
              artifact_data={"gpufleet_fleets": []}),
    ]
    assert all(collect(e) is True for e in events)
    assert seen == events
    assert collect.stats == {"gpufleet_fleets": []}
    assert collect.failures() == [
        {"host": "a", "task": "node : final", "msg": "fatal"},
        {"host": "b", "task": "ping", "msg": "no route"},
        {"host": "d", "task": "wait", "msg": "async broke"},
    ]


def test_without_final_stats_every_unignored_failure_counts():
    collect = runner._Collector(None)
    collect(event("runner_on_failed", host="a", task="one", res={"msg": "m1"}))
    collect(event("runner_on_failed", host="a", task="two", ignore_errors=True, res={"msg": "m"}))
    assert collect.failures() == [{"host": "a", "task": "one", "msg": "m1"}]
    assert collect.stats == {}


def test_progress_lines():
    out = io.StringIO()
    show = runner.progress_printer(out)
    for e in [
        event("playbook_on_play_start", name="Bring up the fleet"),
        event("playbook_on_task_start", task="Start the nodes", role="local_fleet"),
        event("runner_on_ok", host="demo-0", res={"changed": True}),
        event("runner_on_ok", host="demo-1", res={"changed": False}),
        event("runner_on_skipped", host="demo-2"),
        event("runner_on_failed", host="demo-3", ignore_errors=True, res={"msg": "probe"}),
        event("runner_on_failed", host="demo-4", res={"msg": "no space\nleft on device"}),
        event("runner_on_unreachable", host="demo-5", res={"msg": "timed out"}),
        event("verbose", stdout="[WARNING]: something to know"),
        event("verbose", stdout="noise"),
    ]:
        show(e)
    assert out.getvalue().splitlines() == [
        "PLAY Bring up the fleet",
        "TASK local_fleet : Start the nodes",
        "  demo-0: changed",
        "  demo-4: failed: no space",
        "    left on device",
        "  demo-5: unreachable: timed out",
        "[WARNING]: something to know",
    ]
    out = io.StringIO()
    show = runner.progress_printer(out, verbose=True)
    show(event("runner_on_ok", host="demo-1", res={"changed": False}))
    show(event("runner_on_skipped", host="demo-2"))
    show(event("runner_on_failed", host="demo-3", ignore_errors=True, res={"msg": "probe"}))
    assert out.getvalue().splitlines() == [
        "  demo-1: ok", "  demo-2: skipped", "  demo-3: failed (ignored): probe"]


def test_failure_lines_fall_back_to_printed_errors_then_status():
    printed = textwrap.dedent("""\
        [WARNING]: fine
        ERROR! the playbook: x.yml could not be found

        PLAY RECAP
        """)
    result = runner.PlaybookResult(rc=1, status="failed", stdout=printed)
    assert result.failure_lines() == ["ERROR! the playbook: x.yml could not be found"]
    assert runner.PlaybookResult(rc=None or -1, status="timeout").failure_lines() == [
        "ansible-playbook ended with status timeout (exit code -1)"]
