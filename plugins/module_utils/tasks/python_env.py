# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""``python`` and the default image's virtual environment, as dstack sets them up.

In dstack's default image (a task without ``image``, ``entrypoint`` or ``docker``), the job's
commands are preceded by the making of ``/dstack/venv`` with ``uv venv --seed`` for the task's
``python`` (else the version of the Python dstack's server runs: here, the controller's; on
the local backend, the task image's), and its activation, also written to ``/dstack/profile``
so SSH sessions get it. ``python`` and ``pip`` are then the venv's.

On the local backend's offline task image only the image's Python can be had
(backends.task_image.PYTHON_VERSIONS); another version is refused before any host is touched.
That image's venv also sees the system site packages (Debian's mpi4py: nothing can be installed
from an index there). Pure functions.
"""

from __future__ import annotations

import sys

from ..spec.task import PYTHON_VERSIONS as SUPPORTED
from .errors import PlanError

VENV_DIR = "/dstack/venv"


def wants_venv(config):
    """Whether dstack makes the venv for this task: its default image, running commands."""
    return not (config.get("image") or config.get("entrypoint") or config.get("docker"))


def controller_python():
    """dstack's default: the major.minor of the Python its server runs (here, the controller)."""
    version = "%d.%d" % sys.version_info[:2]
    if version not in SUPPORTED:
        raise PlanError("python: the controller runs Python %s, which dstack's images do not "
                        "support as a default; set python in the task (%s)"
                        % (version, ", ".join(SUPPORTED)))
    return version


def choose(config, available=None):
    """The venv's setup for the task: ``{"python", "system_site_packages"}``, or None when the
    task does not get dstack's venv. ``available``: the versions the image can offer (the local
    task image's); None: any (dstack's images download the version uv is asked for)."""
    if not wants_venv(config):
        return None
    wanted = config.get("python")
    if available is not None:
        offered = [str(v) for v in available]
        version = wanted or offered[0]
        if version not in offered:
            raise PlanError(
                "python: %s is not available on the local backend, whose offline task image has "
                "Python %s; set python: \"%s\" (or leave python out), or give the task an image "
                "with Python %s" % (version, ", ".join(offered), offered[0], version))
        return {"python": version, "system_site_packages": True}
    return {"python": wanted or controller_python(), "system_site_packages": False}


def image_commands(config, setup):
    """What dstack runs before the task's commands in its own images: ``start-dockerd`` in
    ``dstackai/dind`` (``docker: true``), else the venv's commands when ``setup`` is given."""
    if config.get("docker"):
        return ["start-dockerd"]
    return setup_commands(setup) if setup else []


def setup_commands(setup):
    """The commands dstack runs before the task's own to make and activate the venv."""
    seed = "uv venv -q --prompt dstack -p %s --seed%s $DSTACK_VENV_DIR" % (
        setup["python"], " --system-site-packages" if setup.get("system_site_packages") else "")
    return [
        "eval $(echo 'export DSTACK_VENV_DIR=%s' | sudo tee -a /dstack/profile)" % VENV_DIR,
        "sudo rm -rf $DSTACK_VENV_DIR",
        "sudo mkdir $DSTACK_VENV_DIR",
        "sudo chown $(id -u):$(id -g) $DSTACK_VENV_DIR",
        seed,
        "eval $(echo '. $DSTACK_VENV_DIR/bin/activate' | sudo tee -a /dstack/profile)",
    ]
