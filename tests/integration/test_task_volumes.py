"""Local network volumes on the shared 3-node task world (docs/volumes.md "Local volumes"):
made with ``gpufleet apply`` of a ``backend: local`` volume file, written by one run and read
back by the next, held by the node of a running job so that no other node takes it, and
deleted only once nothing uses it.

Uses tests/integration/task_world.py's fleet; every name carries SUFFIX.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

from ansible_collections.gpufleet.cluster.plugins.module_utils.backends import local_volumes

from .task_world import CPU, SUFFIX, logs, node_containers, run_task

VOLUME = "lv-" + SUFFIX


def gpufleet(*args, timeout=240):
    """The gpufleet command in its own process: (exit status, stdout, stderr)."""
    command = os.path.join(os.path.dirname(sys.executable), "gpufleet")
    proc = subprocess.run([command] + [str(a) for a in args], capture_output=True, text=True,
                          env=dict(os.environ), timeout=timeout, check=False)
    return proc.returncode, proc.stdout, proc.stderr


def task(name, command):
    return ("type: task\nname: %s\ncommands:\n  - %s\nvolumes:\n  - %s:/data\n%s"
            % (name, command, VOLUME, CPU))


def listed():
    rc, out, err = gpufleet("volume", "--json")
    assert rc == 0, err
    return [v for v in json.loads(out) if v["name"] == VOLUME]


def test_a_local_volume_is_kept_between_runs_held_by_one_node_and_deleted_when_free(
        world, tmp_path):
    volume_file = tmp_path / "vol.dstack.yml"
    volume_file.write_text("type: volume\nname: %s\nbackend: local\nsize: 1GB\n" % VOLUME)
    holder = "lvh-" + SUFFIX
    try:
        rc, out, err = gpufleet("apply", "-f", volume_file, "-y")
        assert rc == 0, out + err
        assert "Volume %s ready: local local 1GB" % VOLUME in out
        [record] = listed()
        assert record["backend"] == "local" and record["attached_to"] == []

        # One run writes into the volume, the next (on whichever node) reads it back.
        _result, written = run_task(world, "lvw-" + SUFFIX,
                                    task("lvw-" + SUFFIX, "echo kept-%s > /data/f" % SUFFIX))
        assert written["status"] == "done", written
        _result, read = run_task(world, "lvr-" + SUFFIX, task("lvr-" + SUFFIX, "cat /data/f"))
        assert read["status"] == "done", read
        assert logs("lvr-" + SUFFIX)[0] == ["kept-%s" % SUFFIX]

        # A running job holds it on its node: another run (placed on a free node) is refused.
        (tmp_path / "hold.dstack.yml").write_text(task(holder, "sleep 300"))
        rc, out, err = gpufleet("apply", "-f", tmp_path / "hold.dstack.yml", "-y", "-d")
        assert rc == 0, out + err
        deadline = time.time() + 60
        node = None
        while node is None and time.time() < deadline:
            node = next((n for n, found in node_containers(world, holder).items()
                         if any(state == "running" for _name, state in found)), None)
            time.sleep(1)
        assert node, node_containers(world, holder)
        assert listed()[0]["attached_to"] == [node]
        (tmp_path / "take.dstack.yml").write_text(task("lvt-" + SUFFIX, "echo taken"))
        rc, out, err = gpufleet("apply", "-f", tmp_path / "take.dstack.yml", "-y")
        assert rc != 0
        assert "volume %s is in use on node %s by container" % (VOLUME, node) in out + err
        assert listed()[0]["attached_to"] == [node]

        # Deleting it is refused while the job runs, by name and by file; it works after.
        for args in (("volume", "delete", VOLUME, "-y"), ("delete", "-f", volume_file, "-y")):
            rc, out, err = gpufleet(*args)
            assert rc != 0 and "is in use on node %s" % node in out + err, out + err
        assert listed()
        rc, out, err = gpufleet("stop", "-y", holder)
        assert rc == 0, out + err
        rc, out, err = gpufleet("delete", "-f", volume_file, "-y")
        assert rc == 0, out + err
        assert "Volume %s deleted" % VOLUME in out
        assert listed() == []
    finally:
        gpufleet("stop", "-y", holder)
        pool = local_volumes.Pool(world["docker"])
        raw = pool.volume(VOLUME)
        if raw is not None:
            pool.call("delete", {"name": VOLUME})
