# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The ``local`` backend: fleet nodes are containers on this machine's Docker engine.

A node runs its own sshd and its own dockerd, has its own address on a per-fleet network, and is
reached by real SSH as the user ``gpufleet`` (passwordless sudo) with the fleet's key. The node
image is built here without any registry: ``debootstrap`` makes a Debian root filesystem, which
is imported with ``docker import``. The image tag is a digest of the recipe below, so a changed
recipe builds a new image and an unchanged one is reused.

``Local(docker)`` is the backend's client (interface.Backend, as aws.Aws and gcp.Gcp are):
fleets/apply.py converges a local fleet through it. It wraps the functions below, which the
inventory plugin, the node image module and the tests also call directly.
"""

from __future__ import annotations

import getpass
import hashlib
import json
import os
import shutil
import socket
import subprocess
import tempfile
from typing import Any, Callable, Iterable

from .docker_cli import Docker

from ..core.errors import GpufleetError
from ..core.files import exclusive
from ..spec import support
from ..spec.naming import instance_name
from .docker_cli import DockerError
from . import local_members
from .interface import Backend
from .made_for import read as read_made_for, values as made_for_values

IMAGE_REPOSITORY = "gpufleet/node"
LABEL_PREFIX = "gpufleet."
NODE_USER = "gpufleet"
DEBIAN_SUITE = "bookworm"
DEFAULT_MIRROR = "http://deb.debian.org/debian"
NODE_PACKAGES = (
    "openssh-server", "python3", "sudo", "iproute2", "iputils-ping", "procps", "ca-certificates",
    "docker.io", "iptables",
)

# First process of a node: per-node SSH host keys (ECDSA and Ed25519, as a job container's: an
# RSA key costs a few hundred CPU milliseconds on every node made), the fleet's key for the login
# user, the node's own dockerd (overlay2 when /var/lib/docker is a volume, vfs otherwise), then
# sshd.
NODE_INIT = """#!/bin/sh
set -e
for type in ecdsa ed25519; do
  key=/etc/ssh/ssh_host_${type}_key
  [ -e "$key" ] || ssh-keygen -q -t "$type" -N '' -f "$key"
done
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
    "HostKey /etc/ssh/ssh_host_ecdsa_key\n"
    "HostKey /etc/ssh/ssh_host_ed25519_key\n"
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

# The local network volumes' pool (local_volumes.py): one Docker volume every node mounts here.
POOL_VOLUME = "gpufleet-volumes"
NODE_POOL_DIR = "/var/lib/gpufleet/volumes"


def pool_mount() -> list[str]:
    """The ``docker run`` arguments that give a node the volume pool."""
    return ["--mount", "type=volume,source=%s,target=%s" % (POOL_VOLUME, NODE_POOL_DIR)]


def recipe() -> dict[str, Any]:
    """Everything that determines the node image's content."""
    return {
        "suite": DEBIAN_SUITE,
        "packages": sorted(NODE_PACKAGES),
        "init": NODE_INIT,
        "sshd_config": SSHD_CONFIG,
        "sudoers": SUDOERS,
        "user": NODE_USER,
    }


def recipe_digest() -> str:
    data = json.dumps(recipe(), sort_keys=True).encode("utf-8")
    return hashlib.sha256(data).hexdigest()


def image_ref() -> str:
    """The node image for the current recipe, e.g. ``gpufleet/node:3f9c1a2b7d4e``."""
    return "%s:%s" % (IMAGE_REPOSITORY, recipe_digest()[:12])


class BuildError(GpufleetError):
    """Building the node image failed; the message says what to install or fix."""


def ensure_node_image(docker: Docker, mirror: str = DEFAULT_MIRROR, workdir: str | None = None,
                      check_mode: bool = False) -> tuple[str, bool]:
    """Make sure the engine has the node image of the current recipe; build it when missing.

    Returns ``(ref, built)``. In check mode nothing is built; ``built`` says a build is due.
    """
    return ensure_recipe_image(
        docker, image_ref(), recipe_digest(), check_mode,
        lambda ref: build_node_image(docker, ref, mirror=mirror, workdir=workdir))


def ensure_recipe_image(docker: Docker, ref: str, digest: str, check_mode: bool,
                        build: Callable[..., Any]) -> tuple[str, bool]:
    """``(ref, built)``: the image ``ref`` is kept when its recipe label is ``digest``, else
    ``build(ref)`` makes it (not in check mode, where ``built`` only says a build is due)."""
    docker.ping()
    if _has_recipe(docker, ref, digest):
        return ref, False
    if check_mode:
        return ref, True
    # Two commands of this machine that both find the image missing (two applies, two test
    # workers) build it once: the second waits for the first, then finds it made.
    with exclusive("image-" + hashlib.sha256(ref.encode("utf-8")).hexdigest()[:16]):
        if _has_recipe(docker, ref, digest):
            return ref, False
        build(ref)
    return ref, True


def _has_recipe(docker, ref, digest):
    labels = docker.image_labels(ref)
    return labels is not None and labels.get(LABEL_PREFIX + "recipe") == digest


def build_rootfs_image(docker: Docker, ref: str, what: str, packages: Iterable[str],
                       install: Callable[[str], Any], changes: Iterable[str],
                       labels: dict[str, str], mirror: str = DEFAULT_MIRROR,
                       workdir: str | None = None) -> None:
    """debootstrap a Debian root filesystem with ``packages``, let ``install(rootfs)`` add its
    files, and import it as ``ref`` with Dockerfile-style ``changes`` and ``labels``."""
    debootstrap = require_debootstrap(what)
    base = tempfile.mkdtemp(prefix="gpufleet-image-", dir=workdir)
    rootfs = os.path.join(base, "rootfs")
    try:
        debootstrap_rootfs(debootstrap, rootfs, packages, mirror)
        install(rootfs)
        docker.import_rootfs(rootfs, ref, changes=changes, labels=labels)
    except DockerError as exc:
        raise BuildError(str(exc)) from exc
    finally:
        shutil.rmtree(base, ignore_errors=True)


def build_node_image(docker: Docker, ref: str, mirror: str = DEFAULT_MIRROR,
                     workdir: str | None = None) -> None:
    """debootstrap a Debian root filesystem, add the node's files, and import it as ``ref``."""
    build_rootfs_image(
        docker, ref, "local node image", NODE_PACKAGES, install_node_files,
        ['CMD ["/usr/local/sbin/gpufleet-node-init"]'],
        {LABEL_PREFIX + "recipe": recipe_digest(), LABEL_PREFIX + "image": "node"},
        mirror=mirror, workdir=workdir)


# --- Root filesystems, shared by every image built here (node, task base) -------------------


def require_debootstrap(what: str) -> str:
    """The debootstrap command, checked usable: installed, and this process is root.

    ``what`` names the image in the message, e.g. "local node image".
    """
    debootstrap = shutil.which("debootstrap") or (
        "/usr/sbin/debootstrap" if os.path.exists("/usr/sbin/debootstrap") else None
    )
    if not debootstrap:
        raise BuildError(
            "debootstrap is needed to build the %s without a registry: install it "
            "(on Debian/Ubuntu: sudo apt-get install -y debootstrap)" % what
        )
    if hasattr(os, "geteuid") and os.geteuid() != 0:
        raise BuildError(
            "building the %s runs debootstrap, which needs root: run this step "
            "with become: true, or as root" % what
        )
    return debootstrap


def debootstrap_rootfs(debootstrap: str, rootfs: str, packages: Iterable[str],
                       mirror: str = DEFAULT_MIRROR) -> None:
    """Make a minbase Debian root filesystem at ``rootfs`` with ``packages`` installed."""
    command = [
        debootstrap, "--variant=minbase", "--include=" + ",".join(packages),
        DEBIAN_SUITE, rootfs, mirror,
    ]
    proc = subprocess.run(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, check=False)
    if proc.returncode != 0:
        tail = proc.stdout.decode("utf-8", "replace").strip().splitlines()[-5:]
        raise BuildError(
            "debootstrap of Debian %s from %s failed (exit %d); check that the mirror is "
            "reachable or pass another one: %s"
            % (DEBIAN_SUITE, mirror, proc.returncode, " | ".join(tail))
        )


def write_rootfs_file(rootfs: str, path: str, text: str, mode: int) -> None:
    """Write ``text`` to the absolute ``path`` inside ``rootfs`` with permissions ``mode``."""
    full = os.path.join(rootfs, path.lstrip("/"))
    os.makedirs(os.path.dirname(full), exist_ok=True)
    with open(full, "w") as handle:
        handle.write(text)
    os.chmod(full, mode)


def prune_rootfs(rootfs: str) -> None:
    """Remove SSH host keys (made per container at start) and apt's package lists and cache."""
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


def install_node_files(rootfs: str) -> None:
    """Add the login user, sudo rule, sshd settings and init script to a root filesystem."""
    write_rootfs_file(rootfs, "/usr/local/sbin/gpufleet-node-init", NODE_INIT, 0o755)
    write_rootfs_file(rootfs, "/etc/ssh/sshd_config.d/gpufleet.conf", SSHD_CONFIG, 0o644)
    write_rootfs_file(rootfs, "/etc/sudoers.d/gpufleet", SUDOERS, 0o440)
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
    prune_rootfs(rootfs)


def run_flags(privileged_allowed: bool) -> tuple[str, ...]:
    return PRIVILEGED_FLAGS if privileged_allowed else FALLBACK_FLAGS


def privilege_refused(message: str) -> bool:
    """True when a failed ``docker run`` was refused --privileged by the host's capabilities."""
    return PRIVILEGE_REFUSED in message


# --- Fleets --------------------------------------------------------------------------------
# A local fleet is containers, volumes and networks labelled with the fleet's name. Those labels
# are the only record of the fleet: listing, converging and deleting all start from them.

FLEET_LABEL = LABEL_PREFIX + "fleet"
INSTANCE_LABEL = LABEL_PREFIX + "instance"
CREATED_LABEL = LABEL_PREFIX + "created"
PLACEMENT_LABEL = LABEL_PREFIX + "placement"
# The fleet settings a listing needs without the file (nodes, placement, resources...), as JSON.
SPEC_LABEL = LABEL_PREFIX + "spec"
# A node made because a run needed it: the run's name and its idle limit (made_for.py).
MADE_FOR_LABEL = LABEL_PREFIX + "made-for-run"
IDLE_LABEL = LABEL_PREFIX + "idle-duration"
# Who made a node: ``user@host`` of the command that created it.
MADE_BY_LABEL = LABEL_PREFIX + "made-by"
# The state dir of the controller that made a node: a listing tells a fleet whose key this
# controller lost (its own state dir, moved away) from another controller's fleet on the same
# engine, which it was never meant to read.
MADE_FROM_LABEL = LABEL_PREFIX + "state-dir"
# Who created a node: the gpufleet user name of the controller (teams.identity.user_name).
CREATOR_LABEL = LABEL_PREFIX + "creator"
AUTHORIZED_KEY_ENV = "GPUFLEET_AUTHORIZED_KEY"
# What the engine answers a ``docker run --name`` whose name another container has.
NAME_TAKEN = "is already in use"
SPEC_KEYS = ("nodes", "placement", "blocks", "backends", "resources", "spot_policy", "max_price",
             "gateway")
NODE_SSH_PORT = 22


class FleetError(GpufleetError):
    """A local fleet cannot be changed as asked; the message says why and what to do."""


def container_name(fleet: str, num: int) -> str:
    return "gpufleet-%s-%d" % (fleet, num)


def volume_name(fleet: str, num: int) -> str:
    return "gpufleet-%s-%d-docker" % (fleet, num)


def network_name(fleet: str, num: int, placement: str) -> str:
    """``placement: cluster`` nodes share one network; other nodes get one network each."""
    if placement == "cluster":
        return "gpufleet-%s" % fleet
    return "gpufleet-%s-%d" % (fleet, num)


def _lines(text):
    return [line for line in text.splitlines() if line.strip()]


def list_nodes(docker: Docker, fleet: str | None = None) -> list[dict[str, Any]]:
    """The engine's raw answer for the nodes of ``fleet`` (every local fleet when None).

    A list of ``{id, name, state, labels, created, networks: {name: ip}}``, sorted by fleet and
    instance number. This raw answer is what the inventory plugin caches.
    """
    selector = FLEET_LABEL + ("=" + fleet if fleet else "")
    ids = _lines(docker.run("ps", "-a", "-q", "--no-trunc", "--filter", "label=" + selector))
    if not ids:
        return []
    data = json.loads(docker.run("inspect", *ids) or "[]")
    nodes = []
    for item in data:
        labels = (item.get("Config") or {}).get("Labels") or {}
        networks = ((item.get("NetworkSettings") or {}).get("Networks")) or {}
        env = (item.get("Config") or {}).get("Env") or []
        nodes.append({
            "id": item.get("Id"),
            "name": (item.get("Name") or "").lstrip("/"),
            "state": ((item.get("State") or {}).get("Status")) or "unknown",
            "labels": labels,
            "created": labels.get(CREATED_LABEL) or item.get("Created"),
            "networks": dict(
                (net, (info or {}).get("IPAddress") or None) for net, info in networks.items()
            ),
            # The public key the node was made with (it is no secret).
            "authorized_key": next((e.split("=", 1)[1] for e in env
                                    if e.startswith(AUTHORIZED_KEY_ENV + "=")), None),
        })

    def order(node):
        labels = node["labels"]
        try:
            num = int(labels.get(INSTANCE_LABEL, ""))
        except ValueError:
            num = -1
        return (labels.get(FLEET_LABEL, ""), num)

    return sorted(nodes, key=order)


_STATUS = {
    "running": "idle",
    "restarting": "provisioning",
    "created": "provisioning",
    "paused": "unreachable",
    "exited": "stopped",
    "dead": "failed",
    "removing": "terminating",
}


def node_num(node: dict[str, Any]) -> int | None:
    try:
        return int(node["labels"].get(INSTANCE_LABEL))
    except (TypeError, ValueError):
        return None


def instance_records(nodes: list[dict[str, Any]], fleet: str, blocks: int | str,
                     key_file: str) -> list[dict[str, Any]]:
    """Instance records (see fleets.records) for the raw nodes of one fleet."""
    records = []
    for node in nodes:
        labels = node["labels"]
        num = node_num(node)
        if labels.get(FLEET_LABEL) != fleet or num is None:
            continue
        placement = labels.get(PLACEMENT_LABEL) or "any"
        address = node["networks"].get(network_name(fleet, num, placement))
        if not address:
            address = next((ip for ip in node["networks"].values() if ip), None)
        records.append(dict({
            "name": instance_name(fleet, num),
            "num": num,
            "fleet": fleet,
            "backend": "local",
            "region": "local",
            "instance_type": "container",
            "price": 0.0,
            "spot": False,
            "status": _STATUS.get(node["state"], node["state"]),
            "error": None,
            "created": node["created"],
            "hostname": address,
            "port": NODE_SSH_PORT,
            "user": NODE_USER,
            "identity_file": key_file,
            "proxy_jump": None,
            "internal_ip": address,
            "network": None,
            "blocks": blocks,
            "placement": placement,
            "container": node["name"],
        }, **dict(read_made_for(labels.get(MADE_FOR_LABEL), labels.get(IDLE_LABEL)),
                  **_made_from(labels))))
    return records


def _made_from(labels):
    """``{"made_from": state dir, "creator": user}`` as far as a node says which controller
    made it, else {}."""
    found = {}
    if labels.get(MADE_FROM_LABEL):
        found["made_from"] = labels[MADE_FROM_LABEL]
    if labels.get(CREATOR_LABEL):
        found["creator"] = labels[CREATOR_LABEL]
    return found


def check_local_fleet(config: dict[str, Any], name: str) -> None:
    """Refuse what local nodes cannot offer: GPUs, and a placement change of a live fleet."""
    why = support.local_gpus_refusal(config)   # what gpufleet validate reports too
    if why:
        raise FleetError("fleet %s: resources.gpu %s" % (name, why))


def spec_label(config: dict[str, Any]) -> str:
    """The label value that lets a fleet be listed without its file."""
    return json.dumps(dict((k, config.get(k)) for k in SPEC_KEYS), sort_keys=True)


def spec_from_nodes(nodes: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The fleet settings stored on a fleet's nodes (the newest node's), or None."""
    for node in sorted(nodes, key=lambda n: n.get("created") or "", reverse=True):
        try:
            value = json.loads(node["labels"].get(SPEC_LABEL) or "null")
        except ValueError:
            continue
        if isinstance(value, dict):
            return value
    return None


def _run_node(docker, fleet, num, placement, image, public_key, created, flags, spec=None,
              made_for=None, made_from=None, creator=None):
    network = network_name(fleet, num, placement)
    args = [
        "run", "-d", "--name", container_name(fleet, num),
        "--hostname", "%s-%d" % (fleet, num),
        "--network", network, "--network-alias", "%s-%d" % (fleet, num),
        "--restart", "unless-stopped",
        "--label", "%s=%s" % (FLEET_LABEL, fleet),
        "--label", "%s=%d" % (INSTANCE_LABEL, num),
        "--label", "%s=%s" % (CREATED_LABEL, created),
        "--label", "%s=%s" % (PLACEMENT_LABEL, placement),
        "--label", "%s=%s" % (MADE_BY_LABEL, made_by()),
        "--env", AUTHORIZED_KEY_ENV + "=" + public_key,
        "--mount", "type=volume,source=%s,target=/var/lib/docker" % volume_name(fleet, num),
    ] + pool_mount()
    if spec:
        args += ["--label", "%s=%s" % (SPEC_LABEL, spec)]
    if made_from:
        args += ["--label", "%s=%s" % (MADE_FROM_LABEL, made_from)]
    if creator:
        args += ["--label", "%s=%s" % (CREATOR_LABEL, creator)]
    marks = made_for_values(made_for)
    if marks:
        args += ["--label", "%s=%s" % (MADE_FOR_LABEL, marks[0]),
                 "--label", "%s=%s" % (IDLE_LABEL, marks[1])]
    return docker.run(*(args + list(flags) + [image]), check=False)


def made_by() -> str:
    """``user@host`` of this process, for the label that says who made a node."""
    try:
        user = getpass.getuser()
    except (KeyError, OSError):
        user = str(os.getuid())
    return "%s@%s" % (user, socket.gethostname())


def _ensure_network(docker, name, fleet):
    rc, _out, _err = docker.run("network", "inspect", name, check=False)
    if rc == 0:
        return False
    rc, _out, err = docker.run("network", "create", "--driver", "bridge", "--label",
                               "%s=%s" % (FLEET_LABEL, fleet), name, check=False)
    if rc == 0:
        return True
    # Another command of the fleet made it meanwhile: it is the one to use.
    if docker.run("network", "inspect", name, check=False)[0] == 0:
        return False
    raise DockerError("docker network create %s failed (exit %d): %s" % (name, rc, err.strip()))


def _ensure_volume(docker, name, fleet):
    rc, _out, _err = docker.run("volume", "inspect", name, check=False)
    if rc == 0:
        return
    docker.run("volume", "create", "--label", "%s=%s" % (FLEET_LABEL, fleet), name)


def start_node(docker, fleet, num, placement, image, public_key, created, privileged=None,
               spec=None, made_for=None, made_from=None, creator=None):
    """Create and start one node. Returns whether --privileged was usable (for the next node).

    When the node's name is taken, another command made the node meanwhile (an apply that did
    not share this one's lock: another machine using this engine): it is left as it is, to be
    found by the listing that follows, never removed."""
    _ensure_network(docker, network_name(fleet, num, placement), fleet)
    _ensure_volume(docker, volume_name(fleet, num), fleet)
    attempts = [True, False] if privileged is None else [privileged]
    for allowed in attempts:
        rc, _out, err = _run_node(
            docker, fleet, num, placement, image, public_key, created, run_flags(allowed), spec,
            made_for, made_from, creator)
        if rc == 0:
            return allowed
        if NAME_TAKEN in err:
            return privileged
        docker.run("rm", "-f", container_name(fleet, num), check=False)
        if allowed and privilege_refused(err):
            continue
        raise FleetError(
            "could not start node %s-%d (container %s): %s"
            % (fleet, num, container_name(fleet, num), err.strip()[-1500:])
        )
    raise FleetError("could not start node %s-%d" % (fleet, num))


def remove_node(docker: Docker, fleet: str, num: int, placement: str) -> None:
    docker.run("rm", "-f", "-v", container_name(fleet, num), check=False)
    docker.run("volume", "rm", "-f", volume_name(fleet, num), check=False)
    if placement != "cluster":
        docker.run("network", "rm", network_name(fleet, num, placement), check=False)


def remove_fleet(docker: Docker, fleet: str, check_mode: bool = False) -> dict[str, list[str]]:
    """Remove every container, volume and network labelled with ``fleet``.

    Returns ``{"containers": [...], "volumes": [...], "networks": [...]}`` (what was, or in check
    mode would be, removed).
    """
    selector = "label=%s=%s" % (FLEET_LABEL, fleet)
    containers = [n["name"] for n in list_nodes(docker, fleet)]
    volumes = _lines(docker.run("volume", "ls", "-q", "--filter", selector))
    networks = _lines(docker.run("network", "ls", "--format", "{{.Name}}", "--filter", selector))
    if not check_mode:
        if containers:
            docker.run("rm", "-f", "-v", *containers)
        if volumes:
            docker.run("volume", "rm", "-f", *volumes)
        for network in networks:
            docker.run("network", "rm", network)
    return {"containers": containers, "volumes": volumes, "networks": networks}


# Adds $GPUFLEET_KEY to the login user's keys unless it is there; says "added" when it was not.
AUTHORIZE_SCRIPT = (
    'f=/home/%s/.ssh/authorized_keys; grep -qxF "$GPUFLEET_KEY" "$f" 2>/dev/null && exit 0; '
    'printf "%%s\\n" "$GPUFLEET_KEY" >> "$f" && chown %s:%s "$f" && chmod 600 "$f" && '
    'echo added' % (NODE_USER, NODE_USER, NODE_USER))


class Local(Backend):
    """The local backend's client: the nodes of fleets on one Docker engine (``docker``, a
    docker.Docker). A raw instance is a node as list_nodes describes it."""

    name = "local"

    def __init__(self, docker):
        self.docker = docker

    def fleet_instances(self, fleet: str,
                        regions: Iterable[str] | None = None) -> list[dict[str, Any]]:
        return list_nodes(self.docker, fleet)

    def all_fleet_instances(
            self, regions: Iterable[str] | None = None,
    ) -> dict[str, list[dict[str, Any]]]:
        found: dict[str, Any] = {}
        for node in list_nodes(self.docker):
            fleet = node["labels"].get(FLEET_LABEL)
            if fleet:
                found.setdefault(fleet, []).append(node)
        return found

    @staticmethod
    def view(placed: dict[str, Any]) -> dict[str, Any]:
        """A node's number, its engine state (exited nodes are started again) and placement."""
        return {"num": node_num(placed), "state": placed["state"],
                "placement": placed["labels"].get(PLACEMENT_LABEL) or "any"}

    def records(self, placed: list[dict[str, Any]], fleet: str, key_file: str,
                blocks: int | str = 1) -> list[dict[str, Any]]:
        """As Backend.records; a node does not carry ``blocks``, so the caller passes the
        fleet's (from its file, or from spec_from_nodes)."""
        return instance_records(placed, fleet, blocks, key_file)

    @staticmethod
    def check(config: dict[str, Any], name: str) -> None:
        """Refuse a fleet that local nodes cannot be (check_local_fleet)."""
        check_local_fleet(config, name)

    def create(self, fleet, nums, placement, image, public_key, created, spec=None,
               made_for=None, made_from=None, creator=None):
        """Create and start the nodes numbered ``nums`` from ``image``; the first tells
        whether the engine allows --privileged, and the others start the way it did.
        ``made_for``: the run they are made for (made_for.py), None for the fleet's own;
        ``made_from``: the state dir of the controller making them (a label the listing reads);
        ``creator``: its user name.
        """
        privileged = None
        for num in nums:
            privileged = start_node(self.docker, fleet, num, placement, image, public_key,
                                    created, privileged, spec=spec, made_for=made_for,
                                    made_from=made_from, creator=creator)

    def start(self, placed: list[dict[str, Any]]) -> None:
        for node in placed:
            self.docker.run("start", node["name"])

    def authorize(self, placed, public_key):
        """Let ``public_key`` log in to the running nodes made with another key (nodes another
        controller, with its own state dir, made): it is added to the login user's
        authorized_keys. Returns the names of the nodes it was added to. A node started again
        has only the key it was made with: the next apply adds it again."""
        added = []
        for node in placed:
            if node["state"] != "running" or node.get("authorized_key") in (None, public_key):
                continue
            out = self.docker.run("exec", "--env", "GPUFLEET_KEY=" + public_key, node["name"],
                                  "sh", "-c", AUTHORIZE_SCRIPT)
            if out.strip() == "added":
                added.append(node["name"])
        return added

    def terminate(self, placed: list[dict[str, Any]]) -> None:
        """Remove each node with its volume, and its network unless the fleet is a cluster
        (whose nodes share one network, removed with the fleet)."""
        for node in placed:
            view = self.view(node)
            remove_node(self.docker, node["labels"].get(FLEET_LABEL), view["num"],
                        view["placement"])

    def delete_fleet(self, fleet: str, regions: Iterable[str] | None = None,
                     check_mode: bool = False) -> dict[str, list[str]]:
        return remove_fleet(self.docker, fleet, check_mode=check_mode)

    @staticmethod
    def member_mark(fingerprint):
        """A member's fingerprint is kept as it is."""
        return fingerprint

    def fleet_members(self, fleet: str, placed: list[Any]) -> dict[str, str]:
        return local_members.list_members(self.docker).get(fleet, {})

    def all_members(self) -> dict[str, dict[str, str]]:
        """``{fleet: {user: fingerprint}}`` of every local fleet, in one engine call."""
        return local_members.list_members(self.docker)

    def set_member(self, fleet: str, placed: list[Any], user: str, mark: str | None) -> bool:
        return local_members.set_member(self.docker, fleet, user, mark)
