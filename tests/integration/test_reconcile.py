"""playbooks/reconcile.yml on a real local fleet: idle nodes beyond nodes.min are removed,
highest numbers first, a node running a task container stays, check mode only reports, and a
fleet below nodes.min is refilled."""

from __future__ import annotations

import time
import uuid

import pytest
from ansible_collections.gpufleet.cluster.plugins.module_utils.backends import local
from ansible_collections.gpufleet.cluster.plugins.module_utils.backends.docker_cli import Docker

from gpufleet.runner import run_playbook

NAME = "idle-" + uuid.uuid4().hex[:6]
# A running container with a task's labels, from a two-file image made on the node itself.
BUSY = (
    "tar -ch /usr/bin/sleep /lib/x86_64-linux-gnu/libc.so.6 /lib64/ld-linux-x86-64.so.2 "
    "2>/dev/null | docker import - gpufleet-test/sleep >/dev/null && "
    "docker run -d --label gpufleet.run=busy-run --label gpufleet.job=0 "
    "gpufleet-test/sleep /usr/bin/sleep 600"
)


@pytest.fixture(scope="module")
def fleet(tmp_path_factory):
    base = tmp_path_factory.mktemp("reconcile")
    path = base / (NAME + ".dstack.yml")
    path.write_text("type: fleet\nname: %s\nnodes: {min: 1, target: 3, max: 3}\n"
                    "idle_duration: 1s\nbackends: [local]\n" % NAME)
    docker = Docker()
    local.ensure_node_image(docker)
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("GPUFLEET_STATE_DIR", str(base / "state"))
        result = run_playbook("fleet.yml", {"fleet": str(path)})
        assert result.ok, result.stdout[-3000:]
        yield {"path": str(path), "docker": docker}
        run_playbook("delete.yml", {"fleet": str(path)})


def nums(docker):
    return sorted(local.node_num(n) for n in local.list_nodes(docker, NAME))


def reconcile(path, check=False):
    result = run_playbook("reconcile.yml", {"fleets": [path]}, check=check)
    assert result.ok, result.stdout[-3000:]
    found = result.stats["gpufleet_reconcile"]["fleets"]
    assert [f["name"] for f in found] == [NAME]
    return found[0]


def test_idle_nodes_go_down_to_min_and_busy_ones_stay(fleet):
    docker = fleet["docker"]
    assert nums(docker) == [0, 1, 2]
    docker.run("exec", local.container_name(NAME, 1), "sh", "-c", BUSY)
    time.sleep(2)
    planned = reconcile(fleet["path"], check=True)
    assert planned["remove"] == [NAME + "-0", NAME + "-2"]
    assert planned["reasons"][NAME + "-1"] == "kept: busy"
    assert planned["reasons"][NAME + "-2"].startswith("remove: idle ")
    assert nums(docker) == [0, 1, 2]          # check mode removed nothing

    done = reconcile(fleet["path"])
    assert done["remove"] == [NAME + "-0", NAME + "-2"] and done["create"] == 0
    assert nums(docker) == [1]
    again = reconcile(fleet["path"])
    assert again["remove"] == [] and again["keep"] == [NAME + "-1"]


def test_a_fleet_below_min_is_refilled(fleet):
    docker = fleet["docker"]
    local.remove_node(docker, NAME, 1, "any")
    assert nums(docker) == []
    refilled = reconcile(fleet["path"])
    assert refilled["create"] == 1
    assert nums(docker) == [0]
