"""``gpufleet validate``: exit codes, the one-line-per-problem text output, the --json shape and
the normalized values it carries, and no traceback for any pathological file."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from gpufleet import cli

from ..spec import pathological

REPO = Path(__file__).resolve().parents[3]
JSON_KEYS = {"file", "ok", "runnable", "config", "errors", "unsupported", "warnings"}

TASK = """\
type: task
name: train
nodes: 3
commands:
  - python train.py
resources:
  cpu: 8..
  memory: 512MB..1TB
  gpu: 24GB..:2
  disk: 100GB..
  shm_size: 512MB
max_duration: 2h
stop_duration: off
idle_duration: 30m
retry:
  duration: 1d
"""

FLEET = """\
type: fleet
name: my-fleet
nodes: 0..4
placement: cluster
idle_duration: 1h
resources:
  gpu: H100:8
  memory: 1.5GB..
  disk: 1TB
"""

VOLUME = """\
type: volume
name: my-volume
backend: aws
region: us-east-1
size: 1TB
auto_cleanup_duration: 1d
"""

BAD_TASK = """\
type: task
commands: [python train.py]
resources:
  memory: 16GiB
ports: [99999]
max_duration: 1h30m
"""
BAD_TASK_PATHS = ["max_duration", "ports[0]", "resources.memory"]

BAD_FLEET = """\
type: fleet
ssh_config:
  user: ubuntu
  identity_file: ~/.ssh/id_rsa
  hosts:
    - 10.0.0.1
    - hostname: 10.0.0.2
      port: 0
"""


def run(*argv):
    """main() in-process; it must return an exit code, never raise, and write no traceback."""
    out, err = io.StringIO(), io.StringIO()
    with pathological.time_limit():
        code = cli.main(list(argv), out=out, err=err)
    text = out.getvalue() + err.getvalue()
    assert "Traceback" not in text
    return code, out.getvalue(), err.getvalue()


@pytest.fixture
def files(tmp_path):
    def write(name, content):
        path = tmp_path / name
        if isinstance(content, bytes):
            path.write_bytes(content)
        else:
            path.write_text(content, encoding="utf-8")
        return str(path)

    return write


# ---------------------------------------------------------------------------------------------
# Text output and exit codes


def test_all_valid_exit_0_with_one_line_per_file(files):
    task, fleet, volume = files("t.yml", TASK), files("f.yml", FLEET), files("v.yml", VOLUME)
    code, out, err = run("validate", task, fleet, volume)
    assert code == 0
    assert out.splitlines() == [
        "%s: ok (task)" % task,
        "%s: ok (fleet)" % fleet,
        "%s: ok (volume)" % volume,
    ]
    assert err == ""


def test_invalid_file_exit_1_each_line_names_file_and_field(files):
    bad = files("bad.yml", BAD_TASK)
    code, out, _err = run("validate", bad)
    assert code == 1
    lines = out.splitlines()
    assert len(lines) == len(BAD_TASK_PATHS)
    paths = []
    for line in lines:
        assert line.startswith(bad + ": "), line
        path, _sep, message = line[len(bad) + 2:].partition(": ")
        assert message, line
        paths.append(path)
    assert sorted(paths) == BAD_TASK_PATHS


def test_error_lines_match_validate_file(files):
    from gpufleet._collection import config_model

    bad = files("bad.yml", BAD_FLEET)
    code, out, _err = run("validate", bad)
    assert code == 1
    result = config_model().validate_file(bad)
    assert out.splitlines() == [
        "%s: %s: %s" % (bad, e["path"], e["message"]) for e in result["errors"]
    ]
    assert any(e["path"] == "ssh_config.hosts[1].port" for e in result["errors"])


def test_top_level_problem_has_no_field_path(files):
    bad = files("notype.yml", "name: my-task\ncommands: [x]\n")
    code, out, _err = run("validate", bad)
    assert code == 1
    assert out == "%s: missing type: set type: fleet, type: task or type: volume\n" % bad


def test_warnings_follow_the_ok_line(files):
    path = files("dup.yml", "type: task\ncommands: [a]\ncommands: [b]\n")
    code, out, _err = run("validate", path)
    assert code == 0
    lines = out.splitlines()
    assert lines[0] == "%s: ok (task)" % path
    assert len(lines) == 2
    assert lines[1].startswith("%s: warning: " % path) and "twice" in lines[1]


def test_mixed_files_keep_order_and_exit_1(files, tmp_path):
    task = files("t.yml", TASK)
    bad = files("bad.yml", BAD_TASK)
    missing = str(tmp_path / "missing.yml")
    fleet = files("f.yml", FLEET)
    code, out, _err = run("validate", task, bad, missing, fleet)
    assert code == 1
    lines = out.splitlines()
    assert lines[0] == "%s: ok (task)" % task
    assert all(line.startswith(bad + ": ") for line in lines[1:1 + len(BAD_TASK_PATHS)])
    assert lines[1 + len(BAD_TASK_PATHS)] == "%s: no such file" % missing
    assert lines[2 + len(BAD_TASK_PATHS)] == "%s: ok (fleet)" % fleet
    assert len(lines) == 3 + len(BAD_TASK_PATHS)


def test_nonexistent_file(tmp_path):
    missing = str(tmp_path / "nope.dstack.yml")
    code, out, _err = run("validate", missing)
    assert code == 1
    assert out == "%s: no such file\n" % missing


def test_directory(tmp_path):
    code, out, _err = run("validate", str(tmp_path))
    assert code == 1
    assert out.startswith("%s: " % tmp_path) and "directory" in out


def test_one_invalid_among_valid_exits_1(files):
    good = [files("g%d.yml" % i, TASK) for i in range(3)]
    bad = files("bad.yml", "type: task\n")
    assert run("validate", *good)[0] == 0
    assert run("validate", *(good + [bad]))[0] == 1
    assert run("validate", bad, *good)[0] == 1


# ---------------------------------------------------------------------------------------------
# --json


def validate_json(*paths):
    code, out, err = run("validate", "--json", *paths)
    results = json.loads(out)
    assert isinstance(results, list) and len(results) == len(paths)
    for path, result in zip(paths, results):
        assert set(result) == JSON_KEYS
        assert result["file"] == path
        assert isinstance(result["ok"], bool)
        assert isinstance(result["errors"], list)
        for error in result["errors"]:
            assert set(error) == {"path", "message"}
            assert isinstance(error["path"], str) and isinstance(error["message"], str)
        if result["ok"]:
            assert isinstance(result["config"], dict) and result["errors"] == []
        else:
            assert result["config"] is None and result["errors"]
    assert code == (0 if all(r["ok"] for r in results) else 1)
    return code, results, out


def test_json_shape_mixed(files, tmp_path):
    task, bad = files("t.yml", TASK), files("bad.yml", BAD_TASK)
    missing = str(tmp_path / "missing.yml")
    code, results, out = validate_json(task, bad, missing)
    assert code == 1
    assert [r["ok"] for r in results] == [True, False, False]
    assert results[0]["config"]["type"] == "task"
    assert sorted(e["path"] for e in results[1]["errors"]) == BAD_TASK_PATHS
    assert results[2]["errors"] == [{"path": "", "message": "no such file"}]
    assert '"config": null' in out


def test_json_task_normalization(files):
    _code, (result,), out = validate_json(files("t.yml", TASK))
    config = result["config"]
    resources = config["resources"]
    assert resources["memory"] == {"min": 0.5, "max": 1024}
    assert resources["cpu"]["count"] == {"min": 8, "max": None}
    assert resources["gpu"]["memory"] == {"min": 24, "max": None}
    assert resources["gpu"]["count"] == {"min": 2, "max": 2}
    assert resources["disk"] == {"size": {"min": 100, "max": None}}
    assert resources["shm_size"] == 0.5
    assert config["nodes"] == 3
    assert isinstance(config["nodes"], int) and not isinstance(config["nodes"], bool)
    assert config["max_duration"] == 7200
    assert config["stop_duration"] == "off"
    assert config["idle_duration"] == 1800
    assert config["retry"] == {"on_events": ["no-capacity", "interruption", "error"],
                               "duration": 86400}
    # Open range ends are JSON null, not missing and not "inf".
    assert '"max": null' in out
    assert "Infinity" not in out and "NaN" not in out


def test_json_task_defaults(files):
    _code, (result,), _out = validate_json(files("t.yml", "type: task\ncommands: [x]\n"))
    config = result["config"]
    assert config["nodes"] == 1
    assert config["max_duration"] == "off"
    assert config["stop_duration"] == 300
    # Unset stays unset: instances the run makes take the fleet's, else 5m (fleets/idle.py).
    assert config["idle_duration"] is None
    assert config["resources"]["memory"] == {"min": 8, "max": None}
    assert config["resources"]["disk"] == {"size": {"min": 100, "max": None}}


@pytest.mark.parametrize("nodes,expected", [
    ("0..4", {"min": 0, "target": 0, "max": 4}),
    ("2", {"min": 2, "target": 2, "max": 2}),
    ("1..", {"min": 1, "target": 1, "max": None}),
    ("..3", {"min": 0, "target": 0, "max": 3}),
    ("{min: 1, target: 2, max: 3}", {"min": 1, "target": 2, "max": 3}),
])
def test_json_fleet_nodes(files, nodes, expected):
    path = files("f.yml", "type: fleet\nnodes: %s\n" % nodes)
    _code, (result,), _out = validate_json(path)
    assert result["config"]["nodes"] == expected


def test_json_fleet_normalization(files):
    _code, (result,), _out = validate_json(files("f.yml", FLEET))
    config = result["config"]
    assert config["fleet_type"] == "backend"
    assert config["nodes"] == {"min": 0, "target": 0, "max": 4}
    assert config["idle_duration"] == 3600
    assert config["resources"]["gpu"]["name"] == ["H100"]
    assert config["resources"]["gpu"]["count"] == {"min": 8, "max": 8}
    assert config["resources"]["memory"] == {"min": 1.5, "max": None}
    assert config["resources"]["disk"] == {"size": {"min": 1024, "max": 1024}}


@pytest.mark.parametrize("value,expected", [
    ("1h", 3600), ("90", 90), ("15m", 900), ("1d", 86400), ("1w", 604800),
    ("off", "off"), ("-1", "off"), ("false", "off"),
])
def test_json_fleet_idle_duration(files, value, expected):
    path = files("f.yml", "type: fleet\nnodes: 1\nidle_duration: %s\n" % value)
    _code, (result,), _out = validate_json(path)
    assert result["config"]["idle_duration"] == expected


@pytest.mark.parametrize("size,expected", [
    ("512MB", 0.5), ("1TB", 1024), ("100GB", 100), ("100", 100), ("2048MB", 2), ("1.5TB", 1536),
])
def test_json_volume_size_in_gb(files, size, expected):
    path = files("v.yml", VOLUME.replace("size: 1TB", "size: %s" % size))
    _code, (result,), _out = validate_json(path)
    assert result["config"]["size"] == expected
    assert result["config"]["auto_cleanup_duration"] == 86400


def test_json_ssh_fleet_hosts_are_merged(files):
    good = BAD_FLEET.replace("port: 0", "port: 2222")
    _code, (result,), _out = validate_json(files("ssh.yml", good))
    config = result["config"]
    assert config["fleet_type"] == "ssh"
    hosts = config["ssh_config"]["hosts"]
    assert [(h["hostname"], h["port"], h["user"]) for h in hosts] == [
        ("10.0.0.1", 22, "ubuntu"), ("10.0.0.2", 2222, "ubuntu")]


def test_json_all_invalid(files):
    code, results, _out = validate_json(files("a.yml", "type: task\n"), files("b.yml", b"\x00"))
    assert code == 1
    assert [r["config"] for r in results] == [None, None]


# ---------------------------------------------------------------------------------------------
# Pathological files: refused with a message, never a traceback


@pytest.mark.parametrize("case", sorted(pathological.PATHOLOGICAL))
def test_pathological_file_reports_without_traceback(files, case):
    data, expected = pathological.PATHOLOGICAL[case]
    path = files("case.yml", data)
    code, out, _err = run("validate", path)
    assert code == 1
    lines = out.splitlines()
    assert lines and all(line.startswith(path + ": ") for line in lines)
    for needle in expected:
        assert needle.lower() in out.lower()
    code, results, _out = validate_json(path)
    assert code == 1 and results[0]["ok"] is False


def test_big_valid_file_is_ok(files):
    data, _count = pathological.large_task()
    path = files("big.yml", data)
    assert run("validate", path)[:2] == (0, "%s: ok (task)\n" % path)


# ---------------------------------------------------------------------------------------------
# The installed console script


def console_script():
    candidates = (Path(sys.executable).parent / "gpufleet", REPO / ".venv" / "bin" / "gpufleet")
    for candidate in candidates:
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return str(candidate)
    pytest.fail(
        "the gpufleet console script is not installed next to %s or in .venv; "
        "run make venv (pip install -e '.[test]')" % sys.executable
    )


def run_script(*argv, cwd):
    proc = subprocess.run(
        [console_script()] + list(argv),
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert "Traceback" not in proc.stdout + proc.stderr, proc.stderr[-3000:]
    return proc


def test_console_script_validates(files, tmp_path):
    task = files("t.yml", TASK)
    files("f.yml", FLEET)
    bad = files("bad.yml", BAD_TASK)
    proc = run_script("validate", "t.yml", "f.yml", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines() == ["t.yml: ok (task)", "f.yml: ok (fleet)"]

    proc = run_script("validate", "--json", task, bad, cwd=tmp_path)
    assert proc.returncode == 1
    results = json.loads(proc.stdout)
    assert [set(r) for r in results] == [JSON_KEYS, JSON_KEYS]
    assert results[0]["config"]["resources"]["memory"] == {"min": 0.5, "max": 1024}
    assert results[1]["config"] is None
    assert sorted(e["path"] for e in results[1]["errors"]) == BAD_TASK_PATHS


@pytest.mark.slow
def test_console_script_survives_every_pathological_file(tmp_path):
    """All of spec/pathological.py's inputs, including those that once crashed the parser,
    in one run: one verdict per file, exit 1, no traceback (text and --json)."""
    cases = {name: data for name, (data, _expected) in pathological.PATHOLOGICAL.items()}
    crashers = pathological.CRASHERS.items()
    cases.update({"crasher-" + name: data for name, (data, _expected) in crashers})
    for name, data in cases.items():
        (tmp_path / (name + ".yml")).write_bytes(data)
    names = sorted(name + ".yml" for name in cases)

    proc = run_script("validate", *names, cwd=tmp_path)
    assert proc.returncode == 1
    assert proc.stderr == ""
    reported = set(line.split(": ", 1)[0] for line in proc.stdout.splitlines())
    assert reported == set(names)

    proc = run_script("validate", "--json", *names, cwd=tmp_path)
    assert proc.returncode == 1
    results = json.loads(proc.stdout)
    assert [r["file"] for r in results] == names
    assert not any(r["ok"] for r in results)


def test_console_script_json_for_an_accepted_huge_number(tmp_path):
    """An accepted config must always dump as JSON (nodes given as a ~4800-digit YAML int)."""
    (tmp_path / "t.yml").write_text(
        "type: task\ncommands: [x]\nnodes: %s\n" % pathological.HUGE_HEX)
    proc = run_script("validate", "--json", "t.yml", cwd=tmp_path)
    results = json.loads(proc.stdout)
    assert results[0]["file"] == "t.yml"
    assert proc.returncode == (0 if results[0]["ok"] else 1)


# ---------------------------------------------------------------------------------------------
# apply / fleet / delete refuse bad files before any playbook runs


@pytest.mark.parametrize("command", [["apply"], ["delete", "-y"], ["fleet"]])
def test_fleet_commands_refuse_an_invalid_file_without_running_anything(files, command):
    path = files("bad.dstack.yml", "type: fleet\nname: bad\nnodes: 0..x\n")
    code, out, err = run(*(command + ["-f", path]))
    assert code == 1
    assert out == ""
    assert err.startswith(path + ": nodes: ")


def test_apply_of_a_volume_without_a_usable_name_says_so(files):
    path = files("v.dstack.yml", "type: volume\nbackend: aws\nregion: us-east-1\nsize: 100GB\n")
    code, _out, err = run("apply", "-y", "-f", path)
    assert code == 1
    assert "add `name: <name>`" in err and "Traceback" not in err


def test_apply_needs_a_file():
    with pytest.raises(SystemExit) as info:
        run("apply")
    assert info.value.code == 2


# ---------------------------------------------------------------------------------------------
# One verdict: what apply refuses, validate reports with the same message


def test_validate_reports_what_apply_refuses_and_what_it_ignores(files):
    from ansible_collections.gpufleet.cluster.plugins.module_utils.spec import parse_file
    from ansible_collections.gpufleet.cluster.plugins.module_utils.tasks import runs

    path = files("nightly.dstack.yml", "type: task\ncommands: [train]\npriority: 50\n"
                 "retry: true\nschedule:\n  cron: '0 2 * * *'\n")
    code, out, _err = run("validate", path)
    assert code == 1
    lines = out.splitlines()
    assert lines[0] == "%s: valid for dstack, but gpufleet apply refuses it (task):" % path
    assert lines[1].startswith("%s: retry: a scheduled task runs once at each firing" % path)
    # priority orders the runs waiting in the queue: gpufleet acts on it, so no warning
    assert not any("priority" in line for line in lines), lines
    # apply stops on the very same message, before anything runs
    config = parse_file(path)[0]
    with pytest.raises(runs.RunError) as caught:
        runs.Runner(config, [])
    assert str(caught.value) == lines[1].split(": ", 1)[1]
    code, out, _err = run("validate", "--json", path)
    result = json.loads(out)[0]
    assert result["ok"] is True and result["runnable"] is False
    assert [p["path"] for p in result["unsupported"]] == ["retry"]
    # Without retry, the schedule is kept on its hosts: valid and runnable.
    path = files("nightly.dstack.yml", "type: task\ncommands: [train]\n"
                 "schedule:\n  cron: '0 2 * * *'\n")
    assert run("validate", path)[0] == 0


def refused_lines(path):
    """What validate says a valid file is refused for: ``[(field, message)]``."""
    code, out, _err = run("validate", path)
    assert code == 1
    lines = out.splitlines()
    assert lines[0].startswith("%s: valid for dstack, but gpufleet apply refuses it" % path)
    return [tuple(line[len(path) + 2:].split(": ", 1)) for line in lines[1:]]


def test_validate_refuses_a_repo_that_is_not_there_as_apply_does(files, tmp_path, monkeypatch):
    from ansible_collections.gpufleet.cluster.plugins.module_utils.tasks import actions

    path = files("code.dstack.yml", "type: task\ncommands: [x]\nrepos: [./nowhere]\n")
    assert refused_lines(path) == [(
        "repos[0].local_path", "%s is not a folder on this controller (relative paths start "
        "at the task file's folder, %s)" % (tmp_path / "nowhere", tmp_path))]
    monkeypatch.setattr(actions, "_fleets", lambda params: pytest.fail("hosts were looked at"))
    with pytest.raises(actions.ActionError) as caught:
        actions.submit({"path": path})
    assert str(caught.value) == ": ".join(refused_lines(path)[0])


def test_validate_refuses_backends_gpufleet_does_not_have_as_apply_does(files):
    from ansible_collections.gpufleet.cluster.plugins.module_utils.backends import base
    from ansible_collections.gpufleet.cluster.plugins.module_utils.spec import parse_file
    from ansible_collections.gpufleet.cluster.plugins.module_utils.tasks import runs
    from ansible_collections.gpufleet.cluster.plugins.module_utils.volumes import provision

    fleet = files("k8s.dstack.yml", "type: fleet\nname: k8s\nnodes: 1\nbackends: [kubernetes]\n")
    (field, message), = refused_lines(fleet)
    assert (field, message) == ("backends", "kubernetes cannot provision nodes in this version "
                                "of gpufleet (available: local, aws, gcp): add local to "
                                "backends, or describe existing hosts with ssh_config")
    with pytest.raises(base.UnsupportedBackend) as caught:
        base.select(parse_file(fleet)[0], "k8s")
    assert str(caught.value) == "fleet k8s: backends " + message

    task = files("k8s-task.dstack.yml", "type: task\ncommands: [x]\nbackends: [kubernetes]\n")
    (field, message), = refused_lines(task)
    assert field == "backends" and message.startswith("gpufleet has no kubernetes backend")
    with pytest.raises(runs.RunError) as caught:
        runs.Runner(parse_file(task)[0], [])
    assert str(caught.value) == "backends: " + message
    # SSH fleets' hosts are dstack's remote backend: a run may ask for them.
    ssh = files("ssh-task.dstack.yml", "type: task\ncommands: [x]\nbackends: [remote]\n")
    assert run("validate", ssh)[0] == 0

    volume = files("pod.dstack.yml", "type: volume\nname: pod\nbackend: runpod\n"
                   "region: eu\nsize: 10GB\n")
    (field, message), = refused_lines(volume)
    assert (field, message) == ("backend", "backend runpod volumes are not provisioned by "
                                "gpufleet (local, aws, gcp)")
    with pytest.raises(provision.VolumeError) as caught:
        provision.describe(parse_file(volume)[0], "pod")
    assert str(caught.value) == "volume pod: " + message


def test_validate_reports_the_other_refusals_of_apply(files):
    from ansible_collections.gpufleet.cluster.plugins.module_utils.backends import local
    from ansible_collections.gpufleet.cluster.plugins.module_utils.spec import parse_file
    from ansible_collections.gpufleet.cluster.plugins.module_utils.tasks import (
        command,
        environment,
        rankplan,
    )
    from ansible_collections.gpufleet.cluster.plugins.module_utils.tasks.errors import PlanError

    gpus = files("gpus.dstack.yml", "type: fleet\nname: gpus\nnodes: 1\nbackends: [local]\n"
                 "resources:\n  gpu: 1\n")
    (field, message), = refused_lines(gpus)
    assert field == "resources.gpu" and message.startswith("asks for at least 1 GPU(s), but "
                                                           "local nodes are containers")
    with pytest.raises(local.FleetError) as caught:
        local.check_local_fleet(parse_file(gpus)[0], "gpus")
    assert str(caught.value).startswith("fleet gpus: resources.gpu asks for at least 1 GPU(s)")

    task = files("odd.dstack.yml", "type: task\nimage: busybox\nentrypoint: \"sh -c 'x\"\n"
                 "env:\n  my-var: x\nfiles:\n  - \"a.txt:/x\\ny\"\n")
    open(os.path.join(os.path.dirname(task), "a.txt"), "w").close()
    found = dict(refused_lines(task))
    config = parse_file(task)[0]
    with pytest.raises(PlanError) as caught:
        command.command_script(config)
    assert str(caught.value) == "entrypoint: " + found["entrypoint"]
    with pytest.raises(PlanError) as caught:
        environment.resolve_env(config, {}, {})
    assert str(caught.value) == "env.my-var: " + found["env.my-var"]
    with pytest.raises(PlanError) as caught:
        rankplan._files_of(config, os.path.dirname(task))
    assert str(caught.value) == "files[0].path: " + found["files[0].path"]
