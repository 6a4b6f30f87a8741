"""The Python API and the playbooks as AWX runs them, on real local fleets.

- examples/python/two_node_task.py, as a user runs it: a local fleet, a two-node task, each
  rank's result read back, the fleet deleted.
- An AWX-style workflow (fleet -> task -> delete) through ansible-runner: inputs as extra vars
  (the fleet inline as a mapping, the task as a path relative to the project directory while
  $PWD says something else, as in an execution environment), results read from set_stats, every
  step re-run to show it is safe to.
"""

from __future__ import annotations

import os
import subprocess
import sys
import uuid

import pytest
from ansible_collections.gpufleet.cluster.plugins.module_utils.backends import local
from ansible_collections.gpufleet.cluster.plugins.module_utils.backends.docker_cli import Docker

from gpufleet.runner import run_playbook
from .task_images import ensure_base_image

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SUFFIX = uuid.uuid4().hex[:6]
CPU = {"cpu": "1..", "memory": "1GB..", "disk": "1GB.."}


@pytest.fixture(scope="module")
def docker():
    engine = Docker()
    local.ensure_node_image(engine)
    ensure_base_image(engine)
    return engine


def fleet_containers(docker, name):
    out = docker.run("ps", "-a", "--filter", "label=%s=%s" % (local.FLEET_LABEL, name),
                     "--format", "{{.Names}}")
    return sorted(line for line in out.splitlines() if line.strip())


def test_the_python_example_runs_a_two_node_task_and_cleans_up(docker, tmp_path):
    name = "pyex-" + SUFFIX
    env = dict(os.environ, GPUFLEET_STATE_DIR=str(tmp_path / "state"))
    proc = subprocess.run(
        [sys.executable, os.path.join(ROOT, "examples", "python", "two_node_task.py"),
         "--name", name, "-n", "1000"],
        cwd=str(tmp_path), env=env, capture_output=True, text=True, timeout=900, check=False)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    lines = proc.stdout.splitlines()
    assert lines[0].startswith("fleet %s: %s-0 (" % (name, name))
    assert "run %s-sum done, exit codes by rank: [0, 0]" % name in lines
    rank0 = next(line for line in lines if line.startswith("rank 0: "))
    rank1 = next(line for line in lines if line.startswith("rank 1: "))
    assert rank0.startswith("rank 0: squares of 1..500 sum to %d" % sum(
        i * i for i in range(1, 501)))
    assert rank1.startswith("rank 1: squares of 501..1000 sum to %d" % sum(
        i * i for i in range(501, 1001)))
    assert "total 333833500, expected 333833500" in lines
    assert lines[-1] == "fleet %s deleted" % name
    # The progress callback got the runner's rank-prefixed lines.
    assert "[%s-sum-1] RESULT" % name in proc.stderr
    assert fleet_containers(docker, name) == []


def test_an_awx_style_workflow_passes_results_through_set_stats(docker, tmp_path, monkeypatch):
    name = "awx-" + SUFFIX
    monkeypatch.setenv("GPUFLEET_STATE_DIR", str(tmp_path / "state"))
    # AWX runs a playbook from the project directory, but $PWD is the execution environment's
    # working directory: relative paths must follow the real one.
    project = tmp_path / "project"
    (project / "tasks").mkdir(parents=True)
    monkeypatch.chdir(project)
    monkeypatch.setenv("PWD", "/")
    fleet = {"type": "fleet", "name": name, "nodes": 2, "placement": "cluster",
             "backends": ["local"]}
    (project / "tasks" / "ranks.dstack.yml").write_text(
        "type: task\nname: %s-ranks\nnodes: 2\n"
        "resources: {cpu: 1.., memory: 1GB.., disk: 1GB..}\n"
        "commands:\n  - echo rank $DSTACK_NODE_RANK\n"
        # Rank 0 ends first; rank 1 fails after it (a failure stops the jobs still running).
        "  - if [ $DSTACK_NODE_RANK = 1 ]; then sleep 5; exit 3; fi\n"
        % name)
    try:
        applied = run_playbook("fleet.yml", {"fleet": fleet})
        assert applied.ok, applied.stdout[-4000:]
        assert applied.stats["gpufleet_fleet_name"] == name
        assert applied.stats["gpufleet_fleet_hosts"] == [name + "-0", name + "-1"]
        ids = sorted((i["container"], i["created"]) for i in
                     applied.stats["gpufleet_fleets"][0]["instances"])
        kept = tmp_path / "state" / "fleets" / name / "inline.dstack.yml"
        assert kept.is_file()

        again = run_playbook("fleet.yml", {"fleet": fleet})
        assert again.ok, again.stdout[-4000:]
        assert sorted((i["container"], i["created"]) for i in
                      again.stats["gpufleet_fleets"][0]["instances"]) == ids

        ran = run_playbook("task.yml", {"task": "tasks/ranks.dstack.yml"})
        assert not ran.ok  # rank 1 exits 3: the job template fails, its stats still come
        assert ran.stats["gpufleet_run_name"] == name + "-ranks"
        assert ran.stats["gpufleet_run_status"] == "failed"
        assert ran.stats["gpufleet_run_exit_codes"] == [0, 3]
    finally:
        deleted = run_playbook("delete.yml", {"fleet": fleet})
    assert deleted.ok, deleted.stdout[-4000:]
    assert deleted.stats["gpufleet_fleets"][0]["removed"]["containers"]
    assert fleet_containers(docker, name) == []
    assert not kept.exists()
    twice = run_playbook("delete.yml", {"fleet": fleet})
    assert twice.ok, twice.stdout[-4000:]
    assert not any(twice.stats["gpufleet_fleets"][0]["removed"].values())


def test_an_inline_ssh_fleet_with_a_relative_key_is_refused(tmp_path, monkeypatch):
    monkeypatch.setenv("GPUFLEET_STATE_DIR", str(tmp_path / "state"))
    fleet = {"type": "fleet", "name": "inline-ssh-" + SUFFIX,
             "ssh_config": {"user": "ubuntu", "identity_file": "keys/id_ed25519",
                            "hosts": ["10.0.0.1"]}}
    result = run_playbook("fleet.yml", {"fleet": fleet})
    assert not result.ok
    (failure,) = result.failures
    assert "ssh_config.identity_file: keys/id_ed25519" in failure["msg"]
    assert "give absolute paths" in failure["msg"]


def test_offer_takes_a_relative_path_from_the_real_working_directory(tmp_path, monkeypatch):
    (tmp_path / "h100.dstack.yml").write_text(
        "type: fleet\nname: h100\nnodes: 1\nbackends: [aws]\nresources:\n  gpu: H100:8\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("PWD", "/")
    by_path = run_playbook("offer.yml", {"config_file": "h100.dstack.yml"})
    assert by_path.ok, by_path.stdout[-3000:]
    inline = run_playbook("offer.yml", {"config_file": {
        "type": "fleet", "name": "h100", "nodes": 1, "backends": ["aws"],
        "resources": {"gpu": "H100:8"}}})
    assert inline.ok, inline.stdout[-3000:]
    assert by_path.stats["gpufleet_offers"]["offers"]
    assert by_path.stats["gpufleet_offers"] == inline.stats["gpufleet_offers"]
