"""Task images for integration tests: the collection's task base image, and a torch image on top.

``gpufleet/task-torch:<digest>`` is the task base image plus torch (the CPU build), made with a
classic ``docker build`` from the local base image (no registry involved) and a build context
holding torch installed by this venv's pip. Debian 12's python3 is 3.11, like this venv, so the
same wheels fit. The tag is a digest of the base image, the torch version and the Dockerfile;
an image with that tag and label is reused.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile

from ansible_collections.gpufleet.cluster.plugins.module_utils.backends import local, task_image

TORCH_VERSION = "2.13.0"
TORCH_REPOSITORY = "gpufleet/task-torch"
DIST_PACKAGES = "/usr/local/lib/python3.11/dist-packages"
# The label ensure_recipe_image reads to tell whether the image is of the current recipe.
RECIPE_LABEL = local.LABEL_PREFIX + "recipe"

DOCKERFILE = """FROM {base}
COPY site/ {dist_packages}/
COPY bin/ /usr/local/bin/
"""


def ensure_base_image(docker):
    """The task base image's ref; built (offline, minutes) when the engine lacks it."""
    ref, _built = task_image.ensure_task_image(docker)
    return ref


def torch_dockerfile(base_ref):
    return DOCKERFILE.format(base=base_ref, dist_packages=DIST_PACKAGES)


def torch_digest(base_ref):
    data = json.dumps({"base": base_ref, "torch": TORCH_VERSION,
                       "dockerfile": torch_dockerfile(base_ref)}, sort_keys=True)
    return hashlib.sha256(data.encode("utf-8")).hexdigest()


def torch_image_ref(base_ref):
    return "%s:%s" % (TORCH_REPOSITORY, torch_digest(base_ref)[:12])


def ensure_torch_image(docker):
    """The torch image's ref; built from the task base image when the engine lacks it."""
    ref, _built = ensure_torch_image_built(docker)
    return ref


def ensure_torch_image_built(docker):
    """Like ensure_torch_image, returning ``(ref, built)``."""
    base = ensure_base_image(docker)
    # The backend's rule for a recipe's image, with its build lock: test workers that both
    # need torch build it once.
    return local.ensure_recipe_image(docker, torch_image_ref(base), torch_digest(base), False,
                                     lambda ref: build_torch_image(docker, base, ref))


def build_torch_image(docker, base, ref):
    context = tempfile.mkdtemp(prefix="gpufleet-torch-")
    try:
        site = os.path.join(context, "site")
        pip = subprocess.run(
            [sys.executable, "-m", "pip", "install", "--quiet", "--disable-pip-version-check",
             "--no-warn-script-location", "--target", site, "torch==%s" % TORCH_VERSION],
            capture_output=True, text=True, check=False,
        )
        if pip.returncode != 0:
            raise RuntimeError("pip install of torch==%s into the build context failed:\n%s"
                               % (TORCH_VERSION, pip.stdout[-3000:] + pip.stderr[-3000:]))
        _move_scripts(site, os.path.join(context, "bin"))
        with open(os.path.join(context, "Dockerfile"), "w") as handle:
            handle.write(torch_dockerfile(base))
        # The classic builder: it takes a FROM image the engine has without asking a registry.
        env = dict(os.environ, DOCKER_BUILDKIT="0")
        build = subprocess.run(
            [docker.binary, "build", "--quiet", "--tag", ref,
             "--label", "%s=%s" % (RECIPE_LABEL, torch_digest(base)),
             "--label", "gpufleet.image=task-torch", context],
            capture_output=True, text=True, env=env, check=False,
        )
        if build.returncode != 0:
            raise RuntimeError("docker build of %s failed:\n%s" % (ref, build.stderr[-3000:]))
    finally:
        shutil.rmtree(context, ignore_errors=True)


def _move_scripts(site, bin_dir):
    """pip's console scripts (torchrun...) point at this venv's python: point them at python3."""
    os.makedirs(bin_dir)
    scripts = os.path.join(site, "bin")
    if not os.path.isdir(scripts):
        return
    for name in os.listdir(scripts):
        source = os.path.join(scripts, name)
        with open(source, "rb") as handle:
            data = handle.read()
        if data.startswith(b"#!") and b"python" in data.split(b"\n", 1)[0]:
            data = b"#!/usr/bin/python3\n" + data.split(b"\n", 1)[1]
        target = os.path.join(bin_dir, name)
        with open(target, "wb") as handle:
            handle.write(data)
        os.chmod(target, 0o755)
    shutil.rmtree(scripts)
