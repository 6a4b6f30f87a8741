"""Stand-ins for Google's GPUDirect images, for the gcp_gpudirect Molecule scenario.

Google's NCCL plugin installers and receive-datapath-manager (RxDM) images live in Artifact
Registry, which the tests cannot reach, and the real RxDM needs GPUs and gVNIC NICs. These
images are built here without any registry, from a static busybox (``busybox-static``) root
filesystem imported with ``docker import``, and behave like the real ones where the role
depends on it:

* ``gpufleet/gpudirect-stub-installer:<stack>-<digest>`` (stack tcpx, tcpxo, gib): its
  ``/scripts/container_entry.sh install [--install-nccl]`` copies a stub ``libnccl-net.so``
  (and with ``--install-nccl`` a stub ``libnccl.so.2``) into the directory the real installer
  fills through the ``/var/lib`` mount (``/var/lib/tcpx/lib64``, ``/var/lib/tcpxo/lib64`` with
  ``nccl-env-profile.sh``, ``/var/lib/gib/lib64`` with ``scripts/set_nccl_env.sh``), and writes
  the arguments it got to ``stub-installer.log`` there;
* ``gpufleet/gpudirect-stub-rxdm:<stack>-<digest>`` (tcpx, tcpxo): the TCPX entry point
  ``/tcpgpudmarxd/build/app/tcpgpudmarxd`` and the TCPXO one ``/fts/entrypoint_rxdm_container.sh``
  print their arguments, leave ``rxdm-stub-ready`` in the ``--uds_path`` directory when given
  one, print the real daemon's readiness line eight seconds later (so that a readiness wait
  has to wait), and run until stopped.

The tag carries a digest of the recipe, so an unchanged recipe reuses the images.

    python tests/molecule/gpudirect_images.py     # prints {"images": {...}, "built": [...]}
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from gpufleet._collection import ensure_importable  # noqa: E402

ensure_importable()

from ansible_collections.gpufleet.cluster.plugins.module_utils.backends import local  # noqa: E402
from ansible_collections.gpufleet.cluster.plugins.module_utils.backends.docker_cli import (  # noqa: E402
    Docker,
)

BUSYBOX_PATHS = ("/bin/busybox", "/usr/bin/busybox")
APPLETS = ("sh", "mkdir", "cp", "rm", "cat", "echo", "sleep", "touch", "ls", "chmod", "env")

INSTALLER = """#!/bin/sh
# Stand-in for Google's NCCL plugin installer (gpufleet Molecule tests).
set -e
if [ "$1" != install ]; then
  echo "usage: container_entry.sh install [--install-nccl]" >&2
  exit 2
fi
mkdir -p "$STUB_TARGET"
cp /stub/lib64/libnccl-net.so "$STUB_TARGET/"
for arg in "$@"; do
  if [ "$arg" = --install-nccl ]; then cp /stub/lib64/libnccl.so.2 "$STUB_TARGET/"; fi
done
if [ -d /stub/extra ]; then cp -R /stub/extra/. "$STUB_ROOT/"; fi
echo "$*" > "$STUB_TARGET/stub-installer.log"
echo "installed the stub NCCL plugin into $STUB_TARGET"
"""

RXDM = """#!/bin/sh
# Stand-in for Google's receive-datapath-manager (gpufleet Molecule tests).
echo "stub receive-datapath-manager started with: $*"
previous=
for arg in "$@"; do
  if [ "$previous" = --uds_path ]; then mkdir -p "$arg" && touch "$arg/rxdm-stub-ready"; fi
  previous=$arg
done
trap 'echo "stub receive-datapath-manager stopping"; exit 0' TERM INT
sleep 8 & wait $!
echo "I0101 00:00:08.000000 1 fastrak_gpumem_manager.cu.cc:284] Buffer manager \
initialization completed."
while :; do sleep 3600 & wait $!; done
"""

TCPXO_PROFILE = """# stub nccl-env-profile.sh (the real one assumes eth0..eth8)
export NCCL_FASTRAK_CTRL_DEV=eth0
export NCCL_FASTRAK_IFNAME=eth1,eth2,eth3,eth4,eth5,eth6,eth7,eth8
export NCCL_SOCKET_IFNAME=eth0
"""
GIB_ENV = """# stub set_nccl_env.sh
export NCCL_NET=gIB
"""

# stack -> (STUB_ROOT, STUB_TARGET, extra files under STUB_ROOT)
INSTALLERS = {
    "tcpx": ("/var/lib/tcpx", "/var/lib/tcpx/lib64", {}),
    "tcpxo": ("/var/lib/tcpxo", "/var/lib/tcpxo/lib64",
              {"lib64/nccl-env-profile.sh": TCPXO_PROFILE}),
    "gib": ("/var/lib/gib", "/var/lib/gib/lib64", {"scripts/set_nccl_env.sh": GIB_ENV}),
}
RXDM_ENTRYPOINTS = {
    "tcpx": "/tcpgpudmarxd/build/app/tcpgpudmarxd",
    "tcpxo": "/fts/entrypoint_rxdm_container.sh",
}
INSTALLER_REPOSITORY = "gpufleet/gpudirect-stub-installer"
RXDM_REPOSITORY = "gpufleet/gpudirect-stub-rxdm"


def busybox():
    for path in BUSYBOX_PATHS:
        if os.path.isfile(path):
            return path
    raise local.BuildError("the GPUDirect stand-in images need a static busybox: "
                           "apt-get install -y busybox-static")


def _stub_library(name):
    return "stub %s for the gpufleet gcp_gpudirect Molecule tests\n" % name


def recipes():
    """Every image: name -> (repository, stack, files {path: (text, mode)}, Dockerfile changes)."""
    images = {}
    for stack, (root, target, extra) in sorted(INSTALLERS.items()):
        files = {
            "/scripts/container_entry.sh": (INSTALLER, 0o755),
            "/stub/lib64/libnccl-net.so": (_stub_library("libnccl-net.so"), 0o644),
            "/stub/lib64/libnccl.so.2": (_stub_library("libnccl.so.2"), 0o644),
        }
        for path, text in extra.items():
            files["/stub/extra/" + path] = (text, 0o644)
        images[stack + "_installer"] = (INSTALLER_REPOSITORY, stack, files, [
            "ENV STUB_ROOT=%s" % root, "ENV STUB_TARGET=%s" % target,
            'ENTRYPOINT ["/scripts/container_entry.sh"]'])
    for stack, entrypoint in sorted(RXDM_ENTRYPOINTS.items()):
        images[stack + "_rxdm"] = (RXDM_REPOSITORY, stack, {entrypoint: (RXDM, 0o755)}, [
            'ENTRYPOINT ["%s"]' % entrypoint])
    return images


def digest(recipe):
    repository, stack, files, changes = recipe
    data = {"repository": repository, "stack": stack, "changes": changes, "applets": APPLETS,
            "files": {path: [text, mode] for path, (text, mode) in files.items()}}
    return hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()


def build(docker, ref, recipe, label):
    _repository, _stack, files, changes = recipe
    base = tempfile.mkdtemp(prefix="gpufleet-gpudirect-")
    rootfs = os.path.join(base, "rootfs")
    try:
        os.makedirs(os.path.join(rootfs, "bin"))
        os.makedirs(os.path.join(rootfs, "tmp"), mode=0o1777)
        shutil.copy2(busybox(), os.path.join(rootfs, "bin", "busybox"))
        for applet in APPLETS:
            os.symlink("busybox", os.path.join(rootfs, "bin", applet))
        for path, (text, mode) in files.items():
            local.write_rootfs_file(rootfs, path, text, mode)
        docker.import_rootfs(rootfs, ref, changes=changes, labels=label)
    finally:
        shutil.rmtree(base, ignore_errors=True)


def ensure_images(docker=None):
    """Build the images that are missing; returns ({name: ref}, [names built])."""
    docker = docker or Docker()
    refs, built = {}, []
    for name, recipe in sorted(recipes().items()):
        recipe_digest = digest(recipe)
        ref = "%s:%s-%s" % (recipe[0], recipe[1], recipe_digest[:12])
        labels = {local.LABEL_PREFIX + "recipe": recipe_digest,
                  local.LABEL_PREFIX + "image": "gpudirect-stub"}
        _ref, was_built = local.ensure_recipe_image(
            docker, ref, recipe_digest, False,
            lambda ref, recipe=recipe, labels=labels: build(docker, ref, recipe, labels))
        refs[name] = ref
        if was_built:
            built.append(name)
    return refs, built


if __name__ == "__main__":
    try:
        images, made = ensure_images()
    except local.BuildError as exc:
        sys.exit("gpudirect stand-in images: %s" % exc)
    print(json.dumps({"images": images, "built": made}, sort_keys=True))
