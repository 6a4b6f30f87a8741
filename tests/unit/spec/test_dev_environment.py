"""type: dev-environment: the fields dstack has (spec/dev_environment.py) and the job the runner
makes of it (tasks/devenv.py): dstack's commands in dstack's order, the IDE link, and a
container that stays up."""

from __future__ import annotations

import subprocess

import pytest
from ansible_collections.gpufleet.cluster.plugins.module_utils import spec
from ansible_collections.gpufleet.cluster.plugins.module_utils.tasks import devenv


def parse(**fields):
    return spec.parse_data(dict({"type": "dev-environment"}, **fields))[0]


def problems(**fields):
    with pytest.raises(spec.SpecError) as info:
        spec.parse_data(dict({"type": "dev-environment"}, **fields))
    return str(info.value)


def test_a_dev_environment_is_a_one_node_run_with_its_own_fields():
    config = parse(ide="vscode", init=["echo ready > /tmp/ready"], inactivity_duration="1m",
                   python="3.12", ports=[8888], resources={"gpu": "24GB"})
    assert config["type"] == "dev-environment"
    assert (config["ide"], config["version"], config["init"], config["inactivity_duration"]) \
        == ("vscode", None, ["echo ready > /tmp/ready"], 60)
    assert (config["nodes"], config["commands"], config["shell"]) == (1, [], "/bin/bash")
    assert config["ports"] == [{"local_port": 8888, "container_port": 8888}]
    # As dstack: its repo is cloned with every branch; without ide, SSH only.
    assert config["single_branch"] is False
    assert parse()["ide"] is None and parse()["inactivity_duration"] is None


@pytest.mark.parametrize("value, expected", [
    ("off", None), (False, None), (True, None), (None, None), (90, 90), ("2h", 7200),
    ("0s", 0)])
def test_inactivity_duration_reads_as_dstack_reads_it(value, expected):
    assert parse(inactivity_duration=value)["inactivity_duration"] == expected


@pytest.mark.parametrize("fields, message", [
    ({"version": "abc"}, "version: `version` requires `ide` to be set"),
    ({"ide": "windsurf", "version": "1.2"}, "Invalid Windsurf version format: `1.2`"),
    ({"ide": "emacs"}, "ide: must be one of vscode, cursor, windsurf, zed"),
    ({"commands": ["x"]}, "commands: a dev environment has no commands: put what runs once in "
                          "init"),
    ({"nodes": 2}, "nodes: a dev environment runs on one node"),
    ({"entrypoint": "x"}, "entrypoint: entrypoint is not supported for dev-environment"),
    ({"inactivity_duration": "-5m"}, "inactivity_duration: Duration cannot be negative"),
    ({"inactivity_duration": "1h", "dstack": True},
     "`dstack` is not supported together with `inactivity_duration`"),
    ({"image": "x", "python": "3.12"}, "image and python are mutually exclusive"),
])
def test_what_dstack_refuses_is_refused_naming_the_field(fields, message):
    assert message in problems(**fields)


def test_the_job_runs_dstacks_steps_in_dstacks_order_then_stays_up():
    config = parse(ide="vscode", setup=["echo set"], init=["echo one", "echo two"])
    commands = devenv.job_commands(config)
    assert commands[0].startswith("(echo 'uv pip install ipykernel...'")   # no version: none
    assert commands[1:5] == ["echo set", "echo", "echo one", "echo two"]
    assert commands[5:9] == [
        "echo 'To open in VS Code, use link below:'", "echo",
        'echo "  vscode://vscode-remote/ssh-remote+$DSTACK_RUN_NAME$DSTACK_WORKING_DIR"',
        "echo"]
    assert commands[-1] == "tail -f /dev/null"
    task = devenv.runnable(config)
    assert (task["type"], task["run_type"], task["nodes"], task["commands"]) == (
        "task", "dev-environment", 1, commands)
    assert devenv.runnable({"type": "task", "commands": ["x"]}) == {"type": "task",
                                                                    "commands": ["x"]}


@pytest.mark.parametrize("ide, expected", [
    ("vscode", "vscode://vscode-remote/ssh-remote+dev/workflow"),
    ("cursor", "cursor://vscode-remote/ssh-remote+dev/workflow"),
    ("windsurf", "windsurf://vscode-remote/ssh-remote+dev/workflow"),
    ("zed", "zed://ssh/dev/workflow"),
])
def test_ide_links_are_dstacks(ide, expected):
    assert devenv.link(ide, "dev", "/workflow") == expected


def test_the_ide_server_install_names_its_version_and_never_fails_the_job(tmp_path):
    (command,) = devenv.install_commands("vscode", "abc123")
    assert "https://update.code.visualstudio.com/commit:abc123/server-linux-$arch/stable" \
        in command
    assert '~/.vscode-server/bin/"abc123"' in command
    (windsurf,) = devenv.install_commands("windsurf", "1.106.0@8951cd3")
    assert "/stable/8951cd3/windsurf-reh-linux-$arch-1.106.0.tar.gz" in windsurf
    assert devenv.install_commands("zed", "1") == [] and devenv.install_commands("vscode", None) \
        == []
    # Offline (no wget here): it says so, and the next command runs.
    proc = subprocess.run(["/bin/sh", "-c", command + " && echo next"],
                          env={"PATH": str(tmp_path), "HOME": str(tmp_path)},
                          stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, check=False)
    lines = proc.stdout.decode().splitlines()
    assert proc.returncode == 0 and lines[-1] == "next", lines
    assert lines[0].startswith("Could not install the VS Code server abc123 here")


def test_the_task_modules_ide_version_becomes_the_servers_version():
    from ansible_collections.gpufleet.cluster.plugins.module_utils.tasks import actions

    config = actions.load_task({"config": {"type": "dev-environment", "ide": "cursor"},
                                "ide_version": "0.42.3"})
    assert config["version"] == "0.42.3"
    commands = devenv.runnable(config)["commands"]
    assert any("remote-releases/0.42.3/" in c for c in commands)
    with pytest.raises(actions.ActionError) as caught:
        actions.load_task({"config": {"type": "dev-environment"}, "ide_version": "0.42.3"})
    assert "ide_version: the dev environment sets no ide" in str(caught.value)
