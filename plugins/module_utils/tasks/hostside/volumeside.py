# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Network volumes on a host: mounting an attached volume where tasks bind it from, and
unmounting it before it is detached (the ``mount_volume`` and ``unmount_volume`` requests).

This file travels to the hosts after tasks.hostside.nodeside (tasks.ssh.host_source) and runs
in its namespace, so it uses the standard library only and the Python 3.6+ of any
Ansible-managed host; its operations join nodeside's ``OPS``.
"""

import os
import time

try:  # imported as part of the collection (tests, the controller)
    from .nodeside import OPS, Failure
except ImportError:  # on a host: nodeside's source runs first in the same namespace
    pass

# Where network volumes are mounted on a host (dstack's path; tasks bind them from there).
NETWORK_VOLUMES_ROOT = "/mnt/disks/dstack-volumes"


def _run(argv):
    import subprocess

    try:
        proc = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, check=False)
    except OSError as exc:
        raise Failure("%s: %s" % (argv[0], exc)) from exc
    return (proc.returncode, proc.stdout.decode("utf-8", "replace"),
            proc.stderr.decode("utf-8", "replace"))


def _mounted_at(mountpoint):
    """The source mounted at ``mountpoint`` (from /proc/mounts), or None."""
    try:
        with open("/proc/mounts") as handle:
            for line in handle:
                fields = line.split()
                if len(fields) > 1 and fields[1] == mountpoint:
                    return fields[0]
    except (IOError, OSError):
        pass
    return None


def _bind_volume(payload, mountpoint):
    """A local volume (backends/local_volumes.py): its folder in the node's volume pool
    (``pool``, a mount every local node made since local volumes exist has), bind-mounted."""
    name, pool, folder = payload["name"], payload["pool"], payload["devices"][0]
    if not _mounted_at(pool):
        raise Failure("volume %s: this node has no local volume pool at %s: it was made before "
                      "local volumes existed; recreate the fleet (gpufleet delete -f <fleet "
                      "file>, then gpufleet apply -f <fleet file>)" % (name, pool))
    if not os.path.isdir(folder):
        raise Failure("volume %s: its folder %s is not in the pool (was the volume deleted?)"
                      % (name, folder))
    if _mounted_at(mountpoint):
        return {"device": folder, "mountpoint": mountpoint, "formatted": False, "mounted": False}
    if not os.path.isdir(mountpoint):
        os.makedirs(mountpoint, 0o755)
    rc, _out, err = _run(["mount", "--bind", folder, mountpoint])
    if rc != 0:
        raise Failure("volume %s: binding %s at %s failed: %s"
                      % (name, folder, mountpoint, err.strip()[-500:]))
    return {"device": folder, "mountpoint": mountpoint, "formatted": False, "mounted": True}


def op_mount_volume(payload):
    """Mount an attached network volume at ``<root>/<name>``
    (docs/reference/dstack-files.md#volume-files): the first of ``devices`` that appears within
    ``wait`` seconds; formatted ext4 only when it holds no filesystem, and then its root opened
    to everyone, as dstack does. With ``pool``, a local volume: the folder ``devices[0]``
    bind-mounted (_bind_volume)."""
    root = payload.get("root") or NETWORK_VOLUMES_ROOT
    if payload.get("pool"):
        return _bind_volume(payload, os.path.join(root, payload["name"]))
    mountpoint = os.path.join(root, payload["name"])
    deadline = time.time() + float(payload.get("wait", 60))
    device = None
    while device is None:
        device = next((d for d in payload["devices"] if os.path.exists(d)), None)
        if device is None:
            if time.time() > deadline:
                raise Failure("volume %s: none of %s appeared on this host within %s s; is it "
                              "attached?" % (payload["name"], ", ".join(payload["devices"]),
                                             payload.get("wait", 60)))
            time.sleep(1)
    device = os.path.realpath(device)
    if _mounted_at(mountpoint):
        return {"device": device, "mountpoint": mountpoint, "formatted": False,
                "mounted": False}
    rc, out, _err = _run(["blkid", "-p", "-o", "value", "-s", "TYPE", device])
    formatted = False
    if rc == 2 or (rc == 0 and not out.strip()):
        rc, _out, err = _run(["mkfs.ext4", "-F", "-q", device])
        if rc != 0:
            raise Failure("volume %s: mkfs.ext4 %s failed: %s"
                          % (payload["name"], device, err.strip()[-500:]))
        formatted = True
    elif rc != 0:
        raise Failure("volume %s: blkid %s failed (exit %d)" % (payload["name"], device, rc))
    if not os.path.isdir(mountpoint):
        os.makedirs(mountpoint, 0o755)
    options = ["-o", "loop"] if os.path.isfile(device) else []
    rc, _out, err = _run(["mount"] + options + [device, mountpoint])
    if rc != 0:
        raise Failure("volume %s: mounting %s at %s failed: %s"
                      % (payload["name"], device, mountpoint, err.strip()[-500:]))
    if formatted:
        os.chmod(mountpoint, 0o777)
    return {"device": device, "mountpoint": mountpoint, "formatted": formatted,
            "mounted": True}


def op_unmount_volume(payload):
    """Unmount ``<root>/<name>`` if it is mounted (before the volume is detached)."""
    root = payload.get("root") or NETWORK_VOLUMES_ROOT
    mountpoint = os.path.join(root, payload["name"])
    if not _mounted_at(mountpoint):
        return {"unmounted": False}
    rc, _out, err = _run(["umount", mountpoint])
    if rc != 0:
        raise Failure("volume %s: umount %s failed: %s" % (payload["name"], mountpoint,
                                                           err.strip()[-500:]))
    return {"unmounted": True}


OPS.update({
    "mount_volume": op_mount_volume,
    "unmount_volume": op_unmount_volume,
})
