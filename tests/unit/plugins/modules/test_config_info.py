# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""gpufleet.cluster.config_info, run for real: in-process through AnsibleModule, and the
validate playbook through ansible-playbook."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

from . import module_runner
import pytest
from ansible_collections.gpufleet.cluster.plugins.modules import config_info


FLEET = """\
type: fleet
name: gpu-fleet
nodes:
  min: 1
  target: 2
  max: 4
resources:
  gpu: H100:8
"""

BAD_FLEET = """\
type: fleet
name: gpu-fleet
nodes: 2
resources:
  gpu: -1
"""


def run_module(args):
    """Run the module's main() with ``args``; return (exit code, result dict)."""
    return module_runner.run_module(config_info.main, args)


def write(tmp_path, name, text):
    path = tmp_path / name
    path.write_text(textwrap.dedent(text))
    return str(path)


def test_fleet_file_is_returned_normalized(tmp_path):
    path = write(tmp_path, "fleet.dstack.yml", FLEET)
    code, result = run_module({"path": path})
    assert code == 0
    assert result["changed"] is False
    assert result["type"] == "fleet"
    assert result["config"]["nodes"] == {"min": 1, "target": 2, "max": 4}
    assert result["config"]["resources"]["gpu"]["count"] == {"min": 8, "max": 8}
    assert "problems" not in result


def test_inline_config_with_typed_values(tmp_path):
    code, result = run_module(
        {"config": {"type": "fleet", "name": "gpu-fleet", "nodes": 3}, "type": "fleet"}
    )
    assert code == 0
    assert result["type"] == "fleet"
    assert result["config"]["nodes"] == {"min": 3, "target": 3, "max": 3}


def test_bad_file_names_the_file_and_the_field(tmp_path):
    path = write(tmp_path, "bad.dstack.yml", BAD_FLEET)
    code, result = run_module({"path": path})
    assert code == 1
    assert result["failed"] is True
    assert "%s: resources.gpu: " % path in result["msg"]
    assert [p["path"] for p in result["problems"]] == ["resources.gpu"]
    assert "config" not in result


def test_bad_inline_config_is_attributed_to_it():
    code, result = run_module({"config": {"type": "fleet", "name": "gpu-fleet", "nodes": -2}})
    assert code == 1
    assert result["msg"].startswith("inline config: nodes")
    assert result["problems"][0]["path"].startswith("nodes")


def test_expected_type_mismatch_fails_clearly(tmp_path):
    path = write(tmp_path, "fleet.dstack.yml", FLEET)
    code, result = run_module({"path": path, "type": "task"})
    assert code == 1
    assert result["msg"] == "%s: type: expected a task configuration here, got type: fleet" % path
    assert result["problems"] == [
        {"path": "type", "message": "expected a task configuration here, got type: fleet"}
    ]


def test_check_mode_returns_the_same(tmp_path):
    path = write(tmp_path, "fleet.dstack.yml", FLEET)
    _code, normal = run_module({"path": path})
    code, checked = run_module({"path": path, "_ansible_check_mode": True})
    assert code == 0
    assert checked["config"] == normal["config"]
    assert checked["type"] == normal["type"]
    assert checked["changed"] is False


def test_missing_file_fails_without_traceback(tmp_path):
    path = str(tmp_path / "missing.dstack.yml")
    code, result = run_module({"path": path})
    assert code == 1
    assert result["msg"] == "%s: no such file" % path
    assert "Traceback" not in json.dumps(result)


def test_spec_warnings_become_ansible_warnings(tmp_path):
    path = write(tmp_path, "fleet.dstack.yml", FLEET + "name: other-name\n")
    code, result = run_module({"path": path})
    assert code == 0
    assert "%s: the key 'name' is given twice" % path in json.dumps(result["warnings"])


def test_missing_pyyaml_is_reported_as_a_missing_library(tmp_path, monkeypatch):
    monkeypatch.setattr(config_info, "HAS_YAML", False)
    code, result = run_module({"path": write(tmp_path, "fleet.dstack.yml", FLEET)})
    assert code == 1
    assert "PyYAML" in result["msg"]
    assert "Failed to import the required Python library" in result["msg"]


@pytest.mark.parametrize(
    "args, message",
    [
        ({}, "one of the following is required: path, config"),
        ({"path": "x.yml", "config": {"type": "task"}}, "mutually exclusive: path|config"),
        ({"path": "x.yml", "type": "gateway"},
         "value of type must be one of: fleet, task, dev-environment, service, volume"),
    ],
)
def test_argument_errors(args, message):
    code, result = run_module(args)
    assert code == 1
    assert message in result["msg"]


@pytest.mark.slow
def test_validate_playbook_fails_naming_every_bad_file(tmp_path):
    """gpufleet.cluster.validate, run by ansible-playbook with paths relative to its cwd."""
    write(tmp_path, "good.dstack.yml", FLEET)
    write(tmp_path, "bad.dstack.yml", BAD_FLEET)
    env = module_runner.ansible_env(tmp_path, ANSIBLE_SHOW_CUSTOM_STATS="1")
    files = ["good.dstack.yml", "bad.dstack.yml", "missing.dstack.yml"]
    proc = subprocess.run(
        [
            sys.executable, "-m", "ansible.cli.playbook", "gpufleet.cluster.validate",
            "-e", json.dumps({"gpufleet_config_files": files}),
        ],
        cwd=str(tmp_path),
        env=env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    output = proc.stdout + proc.stderr
    assert proc.returncode == 2, output
    assert "2 of 3 files are not valid" in output
    assert "bad.dstack.yml: resources.gpu: must not be negative" in output
    assert "missing.dstack.yml: no such file" in output
    failure = output.split("files are not valid:", 1)[1].split("PLAY RECAP", 1)[0]
    assert "good.dstack.yml" not in failure
    stats = custom_stats(output)["gpufleet_validate"]
    assert stats["ok"] is False
    assert [(f["file"], f["ok"], f["type"]) for f in stats["files"]] == [
        ("good.dstack.yml", True, "fleet"),
        ("bad.dstack.yml", False, None),
        ("missing.dstack.yml", False, None),
    ]
    assert stats["files"][1]["errors"][0]["path"] == "resources.gpu"


def custom_stats(output):
    """The set_stats data the default callback prints (ANSIBLE_SHOW_CUSTOM_STATS)."""
    for line in output.splitlines():
        if line.strip().startswith("RUN:"):
            return json.loads(line.split("RUN:", 1)[1])
    raise AssertionError("no custom stats in the output:\n" + output)


def test_a_service_is_read_and_what_apply_refuses_of_it_is_unsupported(tmp_path):
    path = write(tmp_path, "svc.dstack.yml", """\
        type: service
        port: 8000
        image: nginx
        model: my-model
        https: true
        gateway: false
        """)
    code, result = run_module({"path": path, "type": "service"})
    assert code == 0
    assert (result["type"], result["config"]["port"]) == ("service", 8000)
    assert result["config"]["model"]["prefix"] == "/v1"
    assert [p["path"] for p in result["unsupported"]] == ["https"]


def test_unsupported_holds_what_apply_refuses_as_gpufleet_validate_says_it(tmp_path):
    """The module's verdict is validate's: a backend gpufleet lacks, a files entry and a local
    repo that are not on this controller (relative to the file's folder)."""
    path = write(tmp_path, "task.dstack.yml", """\
        type: task
        commands: [x]
        backends: [kubernetes]
        files: [conf.yml]
        repos: [./code]
        """)
    code, result = run_module({"path": path})
    assert code == 0
    paths = [p["path"] for p in result["unsupported"]]
    assert paths == ["backends", "files[0]", "repos[0].local_path"]
    assert result["unsupported"][1]["message"].startswith(
        "%s does not exist on this controller" % (tmp_path / "conf.yml"))
    (tmp_path / "conf.yml").write_text("a: 1\n")
    (tmp_path / "code").mkdir()
    code, result = run_module({"path": path})
    assert [p["path"] for p in result["unsupported"]] == ["backends"]
