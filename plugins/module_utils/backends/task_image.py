# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The task base image of the ``local`` backend, built offline.

dstack runs a task in ``dstackai/base`` unless the task names an image. No registry can be
reached from where local nodes run, so gpufleet builds a stand-in the same way as the node
image: ``debootstrap`` makes a Debian 12 root filesystem with what a distributed job needs (sshd
and ssh, Open MPI with mpi4py, python3, sudo, network tools), the settings dstack's base image
makes are added (the Open MPI and NCCL variables, ``WORKDIR /dstack/run``, the ``dstack`` user
with UID 1001 and passwordless sudo), and ``docker import`` turns it into
``gpufleet/task-base:<digest>``. The tag is a digest of the recipe below: an unchanged recipe
reuses the image, a changed one builds a new image beside the old one.

Like dstack's base image it has ``uv``, so each job gets dstack's ``/dstack/venv``
(tasks.python_env); the image offers Debian's Python (``PYTHON_VERSIONS``, also its
``gpufleet.pythons`` label) and the seed wheels, offline (backends.uv_bundle).
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
from typing import Any

from .docker_cli import Docker

from . import uv_bundle
from .local import (
    DEBIAN_SUITE,
    DEFAULT_MIRROR,
    LABEL_PREFIX,
    BuildError,
    build_rootfs_image,
    ensure_recipe_image,
    prune_rootfs,
    require_debootstrap,
    write_rootfs_file,
)

TASK_IMAGE_REPOSITORY = "gpufleet/task-base"
# The Python versions the image can make a venv with: Debian 12's python3 (checked at build).
PYTHON_VERSIONS = ("3.11",)
TASK_IMAGE_KIND = "task-base"
TASK_PACKAGES = (
    "openssh-server", "openssh-client", "openmpi-bin", "python3", "python3-mpi4py", "iproute2",
    "iputils-ping", "procps", "util-linux", "ca-certificates", "sudo", "git",
)
TASK_USER = "dstack"
TASK_UID = 1001
TASK_WORKDIR = "/dstack/run"
# What dstack's base image presets for MPI and NCCL (no UCX or InfiniBand here: plain TCP,
# never over the loopback or Docker's own bridge), and a PATH, which an imported image lacks.
TASK_ENV = (
    ("OMPI_MCA_pml", "^cm,ucx"),
    ("OMPI_MCA_btl", "tcp,self"),
    ("OMPI_MCA_btl_tcp_if_exclude", "lo,docker0"),
    ("NCCL_SOCKET_IFNAME", "^docker,lo"),
    ("PATH", "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"),
) + uv_bundle.IMAGE_ENV
TASK_CMD = ("/bin/bash",)
TASK_SUDOERS = "%s ALL=(ALL) NOPASSWD:ALL\n" % TASK_USER
# Directories the image must hold: the working directory, and sshd's privilege separation
# directory (so that `sshd -t` and `sshd -D` work once host keys are made).
TASK_DIRS = (TASK_WORKDIR, "/run/sshd")


def task_recipe() -> dict[str, Any]:
    """Everything that determines the task base image's content."""
    return {
        "suite": DEBIAN_SUITE,
        "variant": "minbase",
        "packages": sorted(TASK_PACKAGES),
        "env": [list(pair) for pair in TASK_ENV],
        "workdir": TASK_WORKDIR,
        "dirs": sorted(TASK_DIRS),
        "user": TASK_USER,
        "uid": TASK_UID,
        "sudoers": TASK_SUDOERS,
        "cmd": list(TASK_CMD),
        "pythons": list(PYTHON_VERSIONS),
        "uv": uv_bundle.recipe(),
    }


def task_recipe_digest() -> str:
    data = json.dumps(task_recipe(), sort_keys=True).encode("utf-8")
    return hashlib.sha256(data).hexdigest()


def task_image_ref() -> str:
    """The task base image for the current recipe, e.g. ``gpufleet/task-base:3f9c1a2b7d4e``."""
    return "%s:%s" % (TASK_IMAGE_REPOSITORY, task_recipe_digest()[:12])


def task_image_labels() -> dict[str, str]:
    return {LABEL_PREFIX + "recipe": task_recipe_digest(), LABEL_PREFIX + "image": TASK_IMAGE_KIND,
            LABEL_PREFIX + "pythons": ",".join(PYTHON_VERSIONS)}


def task_image_changes() -> list[str]:
    """The Dockerfile instructions ``docker import`` applies to the root filesystem."""
    changes = ["ENV %s=%s" % (name, json.dumps(value)) for name, value in TASK_ENV]
    changes.append("WORKDIR %s" % TASK_WORKDIR)
    changes.append("CMD %s" % json.dumps(list(TASK_CMD)))
    return changes


def ensure_task_image(docker: Docker, mirror: str = DEFAULT_MIRROR, workdir: str | None = None,
                      check_mode: bool = False) -> tuple[str, bool]:
    """Make sure the engine has the task base image of the current recipe; build it if missing.

    Returns ``(ref, built)``. In check mode nothing is built; ``built`` says a build is due.
    """
    return ensure_recipe_image(
        docker, task_image_ref(), task_recipe_digest(), check_mode,
        lambda ref: build_task_image(docker, ref, mirror=mirror, workdir=workdir))


def build_task_image(docker: Docker, ref: str, mirror: str = DEFAULT_MIRROR,
                     workdir: str | None = None) -> None:
    """debootstrap a Debian root filesystem, add dstack's settings, and import it as ``ref``."""
    require_debootstrap("local task base image")
    wheels = uv_bundle.fetch()   # before debootstrap: a missing index fails fast
    build_rootfs_image(docker, ref, "local task base image", TASK_PACKAGES,
                       lambda rootfs: install_task_files(rootfs, wheels),
                       task_image_changes(), task_image_labels(), mirror=mirror,
                       workdir=workdir)


def install_task_files(rootfs: str, wheels: dict[str, str] | None = None) -> None:
    """Add the ``dstack`` user, its sudo rule, the image's directories and (given ``wheels``,
    uv_bundle.fetch's) uv and the seed wheels to a root filesystem; check its Python."""
    for directory in TASK_DIRS:
        full = os.path.join(rootfs, directory.lstrip("/"))
        os.makedirs(full, exist_ok=True)
        os.chmod(full, 0o755)
    write_rootfs_file(rootfs, "/etc/sudoers.d/" + TASK_USER, TASK_SUDOERS, 0o440)
    proc = subprocess.run(
        ["chroot", rootfs, "useradd", "--uid", str(TASK_UID), "--user-group", "--create-home",
         "--shell", "/bin/bash", TASK_USER],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, check=False,
    )
    if proc.returncode not in (0, 9):  # 9: the user exists already
        raise BuildError(
            "could not add the %s user (uid %d) to the task base image: %s"
            % (TASK_USER, TASK_UID, proc.stdout.decode("utf-8", "replace").strip())
        )
    proc = subprocess.run(
        ["chroot", rootfs, "python3", "-c", "import sys; print('%d.%d' % sys.version_info[:2])"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, check=False)
    found = proc.stdout.decode("utf-8", "replace").strip()
    if proc.returncode != 0 or found not in PYTHON_VERSIONS:
        raise BuildError("the task base image's python3 is %s, not %s as PYTHON_VERSIONS says; "
                         "update PYTHON_VERSIONS for Debian %s" % (found or "missing",
                                                                   PYTHON_VERSIONS[0],
                                                                   DEBIAN_SUITE))
    if wheels:
        uv_bundle.install(rootfs, wheels)
    # Host keys are made per container at start; package lists and caches only add weight.
    prune_rootfs(rootfs)
    cache = os.path.join(rootfs, "var/cache/apt")
    if os.path.isdir(cache):
        for name in os.listdir(cache):
            if name.endswith(".bin"):
                os.remove(os.path.join(cache, name))
