"""The Debian 12 image Molecule's test instances run, built offline (no registry).

``gpufleet/molecule-debian12:<digest>`` is a debootstrapped Debian 12 with systemd as its first
process, sshd, python3 (and python3-apt for Ansible's apt module), sudo and the few tools the
roles' tests use. Instances log in as ``molecule``, a user with passwordless sudo, so roles are
tested with ``become`` as they run on real hosts. The tag is a digest of the recipe: an
unchanged recipe reuses the image.

    python tests/molecule/image.py      # prints the image reference, building it if needed
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from gpufleet._collection import ensure_importable  # noqa: E402

ensure_importable()

from ansible_collections.gpufleet.cluster.plugins.module_utils.backends import local  # noqa: E402
from ansible_collections.gpufleet.cluster.plugins.module_utils.backends.docker_cli import (  # noqa: E402
    Docker,
)

REPOSITORY = "gpufleet/molecule-debian12"
USER = "molecule"
PACKAGES = (
    "systemd", "systemd-sysv", "dbus", "openssh-server", "python3", "python3-apt", "sudo",
    "iproute2", "iputils-ping", "procps", "ca-certificates", "gnupg", "kmod", "curl",
    "netcat-openbsd", "less",
)
SUDOERS = "%s ALL=(ALL) NOPASSWD:ALL\n" % USER
SSHD_CONFIG = ("HostKey /etc/ssh/ssh_host_ecdsa_key\nHostKey /etc/ssh/ssh_host_ed25519_key\n"
               "PasswordAuthentication no\nUseDNS no\n")
# Each instance makes its own host keys at boot, before sshd checks its configuration: ECDSA
# and Ed25519 only, as a local node does (ssh-keygen -A would also search an RSA key's primes,
# a few hundred CPU milliseconds on every instance).
SSH_KEYS_DROPIN = (
    "[Service]\nExecStartPre=\n"
    "ExecStartPre=/bin/sh -c 'for t in ecdsa ed25519; do k=/etc/ssh/ssh_host_$${t}_key; "
    "[ -e $$k ] || ssh-keygen -q -t $$t -N \"\" -f $$k; done'\n"
    "ExecStartPre=/usr/sbin/sshd -t\n"
)
# Units that only slow a container's boot down or fail in one.
MASKED = (
    "getty@tty1.service", "console-getty.service", "systemd-udevd.service",
    "systemd-udev-trigger.service", "systemd-modules-load.service", "sys-kernel-debug.mount",
    "sys-kernel-tracing.mount", "systemd-remount-fs.service", "systemd-firstboot.service",
    "apt-daily.timer", "apt-daily-upgrade.timer", "e2scrub_all.timer", "fstrim.timer",
)


def recipe():
    return {"suite": local.DEBIAN_SUITE, "packages": sorted(PACKAGES), "user": USER,
            "sudoers": SUDOERS, "sshd": SSHD_CONFIG, "ssh_keys": SSH_KEYS_DROPIN, "masked": sorted(MASKED), "stale_apt_lists": True}


def digest():
    return hashlib.sha256(json.dumps(recipe(), sort_keys=True).encode()).hexdigest()


def image_ref():
    return "%s:%s" % (REPOSITORY, digest()[:12])


def _chroot(rootfs, *argv):
    proc = subprocess.run(["chroot", rootfs] + list(argv), stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, check=False)
    if proc.returncode != 0:
        raise local.BuildError("in the molecule image, %s failed: %s"
                               % (" ".join(argv), proc.stdout.decode(errors="replace")))


def install(rootfs):
    local.write_rootfs_file(rootfs, "/etc/sudoers.d/molecule", SUDOERS, 0o440)
    local.write_rootfs_file(rootfs, "/etc/ssh/sshd_config.d/molecule.conf", SSHD_CONFIG, 0o644)
    local.write_rootfs_file(
        rootfs, "/etc/systemd/system/ssh.service.d/keys.conf",
        SSH_KEYS_DROPIN, 0o644)
    _chroot(rootfs, "useradd", "--create-home", "--shell", "/bin/bash", USER)
    for unit in MASKED:
        _chroot(rootfs, "systemctl", "mask", unit)
    local.prune_rootfs(rootfs)
    # The package lists are gone: say so, or apt's cache_valid_time would take the fresh
    # directory for a fresh cache and never read the lists.
    os.utime(os.path.join(rootfs, "var/lib/apt/lists"), (0, 0))


def ensure_image(docker=None):
    docker = docker or Docker()
    ref, _built = local.ensure_recipe_image(
        docker, image_ref(), digest(), False,
        lambda ref: local.build_rootfs_image(
            docker, ref, "molecule test image", PACKAGES, install,
            ['CMD ["/sbin/init"]'],
            {local.LABEL_PREFIX + "recipe": digest(), local.LABEL_PREFIX + "image": "molecule"}))
    return ref


if __name__ == "__main__":
    try:
        print(ensure_image())
    except local.BuildError as exc:
        sys.exit("molecule image: %s" % exc)
