"""The task world: one real 3-node local cluster fleet that every task test shares.

Made once per session (tests/integration/conftest.py's ``world`` fixture) and deleted at its
end; each test module adds runs of its own, named with ``SUFFIX``. Each node is a container with
its own sshd and dockerd; runs go through playbooks/task.yml (ansible-runner, the action plugin,
SSH to the nodes).
"""

from __future__ import annotations

import contextlib
import time
import uuid

import pytest
from ansible_collections.gpufleet.cluster.plugins.module_utils.backends import local
from ansible_collections.gpufleet.cluster.plugins.module_utils.backends.docker_cli import Docker

from gpufleet.runner import run_playbook

from .task_images import ensure_base_image

SUFFIX = uuid.uuid4().hex[:6]
FLEET = "tk-" + SUFFIX


def make_world(tmp_path_factory):
    """Makes the fleet, yields the world, deletes the fleet; GPUFLEET_STATE_DIR points at the
    world's state dir while it does (``use_world`` sets it for a module's tests)."""
    base = tmp_path_factory.mktemp("tasks")
    docker = Docker()
    fleet = base / "fleet.dstack.yml"
    with use_world({"base": base}):
        local.ensure_node_image(docker)
        world = {"base": base, "docker": docker, "base_image": ensure_base_image(docker)}
        # One vault password for the world's secrets store, which every test shares.
        world["vault_password"] = base / "vault-password"
        world["vault_password"].write_text("the task world's vault password\n")
        fleet.write_text("type: fleet\nname: %s\nnodes: 3\nplacement: cluster\n"
                         "backends: [local]\n" % FLEET)
        result = run_playbook("fleet.yml", {"fleet": str(fleet)})
        assert result.ok, result.stdout[-4000:]
        world["fleet"] = result.stats["gpufleet_fleets"][0]
        world["ips"] = [i["internal_ip"] for i in world["fleet"]["instances"]]
    yield world
    with use_world(world):
        # Runs a test left behind go with the fleet. A delete that fails is a fault of its own:
        # tried once more, then the nodes are removed by hand (nothing is left on the machine)
        # and the failure is reported.
        for _attempt in range(2):
            result = run_playbook("delete.yml", {"fleet": str(fleet),
                                                 "gpufleet_refuse_busy": False})
            if result.ok:
                return
    for num in range(3):
        docker.run("rm", "-f", "-v", local.container_name(FLEET, num), check=False)
    pytest.fail("delete.yml could not delete the task world's fleet %s:\n%s"
                % (FLEET, result.stdout[-4000:]))


@contextlib.contextmanager
def use_world(world):
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("GPUFLEET_STATE_DIR", str(world["base"] / "state"))
        yield world


def task_file(world, name, text):
    path = world["base"] / (name + ".dstack.yml")
    path.write_text(text)
    return str(path)


def run_task(world, name, text, **extra):
    result = run_playbook("task.yml", dict({"task": task_file(world, name, text)}, **extra))
    record = result.stats.get("gpufleet_run")
    assert record is not None, result.stdout[-4000:]
    return result, record


def logs(name):
    result = run_playbook("logs.yml", {"run": name})
    assert result.ok, result.stdout[-3000:]
    by_rank = {}
    for line in result.stats["gpufleet_log_lines"]:
        prefix, _sep, text = line.partition("] ")
        by_rank.setdefault(int(prefix.rsplit("-", 1)[1]), []).append(text)
    return by_rank


def node_containers(world, run):
    """{node container: [(name, state)]} of the run's task containers, from each node's engine."""
    found = {}
    for num in range(3):
        node = local.container_name(FLEET, num)
        out = world["docker"].run(
            "exec", node, "docker", "ps", "-a", "--filter", "label=gpufleet.run=" + run,
            "--format", "{{.Names}} {{.State}}")
        found[node] = [tuple(line.split()) for line in out.splitlines() if line.strip()]
    return found


CPU = "resources:\n  cpu: 1..\n  memory: 1GB..\n  disk: 1GB..\n"


def restore_node(world, node, seconds=120):
    """Start ``node`` again with its restart policy, and wait until its sshd and dockerd
    answer (the other tests of the world use it)."""
    world["docker"].run("update", "--restart", "unless-stopped", node, check=False)
    world["docker"].run("start", node, check=False)
    deadline = time.time() + seconds
    while time.time() < deadline:
        rc = world["docker"].run("exec", node, "docker", "info", check=False)[0]
        ssh = world["docker"].run("exec", node, "sh", "-c", "pgrep -x sshd", check=False)[0]
        if rc == 0 and ssh == 0:
            return
        time.sleep(1)
    raise AssertionError("node %s did not come back" % node)
