# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The ``local`` backend: fleet nodes are containers on this machine's Docker engine.

A node runs its own sshd and its own dockerd, has its own address on a per-fleet network, and is
reached by real SSH as the user ``gpufleet`` (passwordless sudo) with the fleet's key. The node
image is built here without any registry: ``debootstrap`` makes a Debian root filesystem, which
is imported with ``docker import``. The image tag is a digest of the recipe below, so a changed
recipe builds a new image and an unchanged one is reused.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import tempfile

from .docker import DockerError

IMAGE_REPOSITORY = "gpufleet/node"
LABEL_PREFIX = "gpufleet."
NODE_USER = "gpufleet"
DEBIAN_SUITE = "bookworm"
DEFAULT_MIRROR = "http://deb.debian.org/debian"
NODE_PACKAGES = (
    "openssh-server", "python3", "sudo", "iproute2", "iputils-ping", "procps", "ca-certificates",
    "docker.io", "iptables",
)

# First process of a node: per-node SSH host keys, the fleet's key for the login user, the
# node's own dockerd (overlay2 when /var/lib/docker is a volume, vfs otherwise), then sshd.
NODE_INIT = """#!/bin/sh
set -e
ssh-keygen -A >/dev/null
mkdir -p /run/sshd /home/gpufleet/.ssh
if [ -n "$GPUFLEET_AUTHORIZED_KEY" ]; then
  printf '%s\\n' "$GPUFLEET_AUTHORIZED_KEY" > /home/gpufleet/.ssh/authorized_keys
fi
chown -R gpufleet:gpufleet /home/gpufleet/.ssh
chmod 700 /home/gpufleet/.ssh
[ ! -f /home/gpufleet/.ssh/authorized_keys ] || chmod 600 /home/gpufleet/.ssh/authorized_keys
driver=vfs
if grep -q ' /var/lib/docker ' /proc/mounts; then driver=overlay2; fi
nohup dockerd --storage-driver="$driver" >/var/log/dockerd.log 2>&1 &
exec /usr/sbin/sshd -D -e
"""
SSHD_CONFIG = (
    "PasswordAuthentication no\n"
    "PermitRootLogin no\n"
    "AllowTcpForwarding yes\n"
    "UseDNS no\n"
)
SUDOERS = "gpufleet ALL=(ALL) NOPASSWD:ALL\n"

# How `docker run` starts a node: --privileged where the engine allows it; where the host's
# capability bounding set lacks CAP_SYS_RESOURCE (some VMs), --privileged fails with "unable to
# apply caps" and this narrower set, still enough for sshd and a nested dockerd, is used.
PRIVILEGED_FLAGS = ("--privileged",)
FALLBACK_FLAGS = (
    "--cap-add=ALL", "--cap-drop=SYS_RESOURCE",
    "--security-opt", "seccomp=unconfined", "--security-opt", "apparmor=unconfined",
    "-v", "/sys/fs/cgroup:/sys/fs/cgroup:rw", "--cgroupns", "host", "--tmpfs", "/run",
)
PRIVILEGE_REFUSED = "unable to apply caps"


def recipe():
    """Everything that determines the node image's content."""
    return {
        "suite": DEBIAN_SUITE,
        "packages": sorted(NODE_PACKAGES),
        "init": NODE_INIT,
        "sshd_config": SSHD_CONFIG,
        "sudoers": SUDOERS,
        "user": NODE_USER,
    }


def recipe_digest():
    data = json.dumps(recipe(), sort_keys=True).encode("utf-8")
    return hashlib.sha256(data).hexdigest()


def image_ref():
    """The node image for the current recipe, e.g. ``gpufleet/node:3f9c1a2b7d4e``."""
    return "%s:%s" % (IMAGE_REPOSITORY, recipe_digest()[:12])


class BuildError(Exception):
    """Building the node image failed; the message says what to install or fix."""


def ensure_node_image(docker, mirror=DEFAULT_MIRROR, workdir=None, check_mode=False):
    """Make sure the engine has the node image of the current recipe; build it when missing.

    Returns ``(ref, built)``. In check mode nothing is built; ``built`` says a build is due.
    """
    docker.ping()
    ref = image_ref()
    labels = docker.image_labels(ref)
    if labels is not None and labels.get(LABEL_PREFIX + "recipe") == recipe_digest():
        return ref, False
    if check_mode:
        return ref, True
    build_node_image(docker, ref, mirror=mirror, workdir=workdir)
    return ref, True


def build_node_image(docker, ref, mirror=DEFAULT_MIRROR, workdir=None):
    """debootstrap a Debian root filesystem, add the node's files, and import it as ``ref``."""
    debootstrap = shutil.which("debootstrap") or (
        "/usr/sbin/debootstrap" if os.path.exists("/usr/sbin/debootstrap") else None
    )
    if not debootstrap:
        raise BuildError(
            "debootstrap is needed to build the local node image without a registry: install it "
            "(on Debian/Ubuntu: sudo apt-get install -y debootstrap)"
        )
    if hasattr(os, "geteuid") and os.geteuid() != 0:
        raise BuildError(
            "building the local node image runs debootstrap, which needs root: run this step "
            "with become: true, or as root"
        )
    base = tempfile.mkdtemp(prefix="gpufleet-node-", dir=workdir)
    rootfs = os.path.join(base, "rootfs")
    try:
        command = [
            debootstrap, "--variant=minbase", "--include=" + ",".join(NODE_PACKAGES),
            DEBIAN_SUITE, rootfs, mirror,
        ]
        proc = subprocess.run(
            command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, check=False
        )
        if proc.returncode != 0:
            tail = proc.stdout.decode("utf-8", "replace").strip().splitlines()[-5:]
            raise BuildError(
                "debootstrap of Debian %s from %s failed (exit %d); check that the mirror is "
                "reachable or pass another one: %s"
                % (DEBIAN_SUITE, mirror, proc.returncode, " | ".join(tail))
            )
        install_node_files(rootfs)
        docker.import_rootfs(
            rootfs,
            ref,
            changes=['CMD ["/usr/local/sbin/gpufleet-node-init"]'],
            labels={LABEL_PREFIX + "recipe": recipe_digest(), LABEL_PREFIX + "image": "node"},
        )
    except DockerError as exc:
        raise BuildError(str(exc))
    finally:
        shutil.rmtree(base, ignore_errors=True)


def install_node_files(rootfs):
    """Add the login user, sudo rule, sshd settings and init script to a root filesystem."""

    def write(path, text, mode):
        full = os.path.join(rootfs, path.lstrip("/"))
        os.makedirs(os.path.dirname(full), exist_ok=True)
        with open(full, "w") as handle:
            handle.write(text)
        os.chmod(full, mode)

    write("/usr/local/sbin/gpufleet-node-init", NODE_INIT, 0o755)
    write("/etc/ssh/sshd_config.d/gpufleet.conf", SSHD_CONFIG, 0o644)
    write("/etc/sudoers.d/gpufleet", SUDOERS, 0o440)
    proc = subprocess.run(
        ["chroot", rootfs, "useradd", "--create-home", "--shell", "/bin/bash",
         "--groups", "docker", NODE_USER],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, check=False,
    )
    if proc.returncode not in (0, 9):  # 9: the user exists already
        raise BuildError(
            "could not add the %s user to the node image: %s"
            % (NODE_USER, proc.stdout.decode("utf-8", "replace").strip())
        )
    # Host keys are made per node at start; package caches only add weight.
    for directory, prefix in (("/etc/ssh", "ssh_host_"), ("/var/cache/apt/archives", ""),
                              ("/var/lib/apt/lists", "")):
        full = os.path.join(rootfs, directory.lstrip("/"))
        if not os.path.isdir(full):
            continue
        for name in os.listdir(full):
            if name.startswith(prefix) and name not in ("partial", "lock"):
                path = os.path.join(full, name)
                if os.path.isfile(path):
                    os.remove(path)


def run_flags(privileged_allowed):
    return PRIVILEGED_FLAGS if privileged_allowed else FALLBACK_FLAGS


def privilege_refused(message):
    """True when a failed ``docker run`` was refused --privileged by the host's capabilities."""
    return PRIVILEGE_REFUSED in message
