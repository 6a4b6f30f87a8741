"""Mounting a network volume on a host (tasks/hostside/volumeside.py): formatted only when it holds
no filesystem, its root opened to everyone then, mounted once, unmounted; run for real on this
machine with a file-backed loop device (the tests run as root here)."""

from __future__ import annotations

import os
import shutil
import stat
import subprocess

import pytest
from ansible_collections.gpufleet.cluster.plugins.module_utils.tasks.hostside import (
    nodeside,
    volumeside,
)


def can_loop_mount():
    return (os.geteuid() == 0 and shutil.which("losetup") and shutil.which("mkfs.ext4")
            and subprocess.run(["losetup", "-f"], capture_output=True, check=False)
            .returncode == 0)


@pytest.mark.skipif(not can_loop_mount(),
                    reason="needs root and a free loop device to mount a volume")
def test_a_blank_volume_is_formatted_once_and_keeps_its_data(tmp_path):
    disk = tmp_path / "disk.img"
    with open(disk, "wb") as handle:
        handle.truncate(32 * 1024 * 1024)
    root = tmp_path / "volumes"
    payload = {"name": "data", "devices": [str(tmp_path / "nvme9n1"), str(disk)],
               "root": str(root), "wait": 1}
    try:
        first = volumeside.op_mount_volume(payload)
        assert first == {"device": str(disk), "mountpoint": str(root / "data"),
                         "formatted": True, "mounted": True}
        assert stat.S_IMODE(os.stat(root / "data").st_mode) == 0o777
        (root / "data" / "kept.txt").write_text("checkpoint\n")
        again = volumeside.op_mount_volume(payload)
        assert again["mounted"] is False            # already there: nothing done
        assert volumeside.op_unmount_volume(payload) == {"unmounted": True}
        assert not (root / "data" / "kept.txt").exists()
        second = volumeside.op_mount_volume(payload)
        assert second["formatted"] is False
        assert (root / "data" / "kept.txt").read_text() == "checkpoint\n"
    finally:
        volumeside.op_unmount_volume(payload)
    assert volumeside.op_unmount_volume(payload) == {"unmounted": False}


def test_a_volume_that_never_appears_is_named(tmp_path):
    with pytest.raises(nodeside.Failure, match=r"volume data: none of /nonexistent/a appeared "
                                               r"on this host within 0 s; is it attached\?"):
        volumeside.op_mount_volume({"name": "data", "devices": ["/nonexistent/a"],
                                    "root": str(tmp_path), "wait": 0})
