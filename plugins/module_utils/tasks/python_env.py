# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""``python`` and the default image's virtual environment, as dstack sets them up.

In dstack's default image (a task without ``image``, ``entrypoint`` or ``docker``), the job's
commands are preceded by the making of ``/dstack/venv`` with ``uv venv --seed`` for the task's
``python`` (else the version of the Python dstack's server runs: here, the controller's; on
the local backend, the task image's), and its activation, also written to ``/dstack/profile``
so SSH sessions get it. ``python`` and ``pip`` are then the venv's.

On the local backend's task image, the image's own Python (backends.task_image.PYTHON_VERSIONS)
makes the venv, which also sees the system site packages (Debian's mpi4py: nothing can be
installed from an index there). Another version is fetched at run time, as dstack's images do:
``uv python install`` downloads a python-build-standalone build (from github.com, or from the
mirror the job's ``UV_PYTHON_INSTALL_MIRROR`` names) into ``PYTHONS_DIR``, a folder of the node
(``NODE_PYTHONS_DIR``) that every job fetching a Python mounts, so a version is downloaded once
per node. Where the node cannot download it, the job stops before the task's commands with a
message naming the version, the host and what to do. Pure functions.
"""

from __future__ import annotations

import sys

from ..spec.task import PYTHON_VERSIONS as SUPPORTED
from .environment import quote_sh
from .errors import PlanError

VENV_DIR = "/dstack/venv"
# Where a job keeps the Pythons uv downloads (UV_PYTHON_INSTALL_DIR), bound from the node's
# NODE_PYTHONS_DIR: a second job of the same version on that node finds it there.
PYTHONS_DIR = "/opt/gpufleet/pythons"
NODE_PYTHONS_DIR = "/var/lib/gpufleet/pythons"


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
    task image's); None: any (dstack's images download the version uv is asked for). A version
    the local image lacks is fetched at run time: the setup then has ``fetch`` (the image's
    versions, for the message when the node cannot download it)."""
    if not wants_venv(config):
        return None
    wanted = config.get("python")
    if available is not None:
        offered = [str(v) for v in available]
        version = wanted or offered[0]
        if version in offered:
            return {"python": version, "system_site_packages": True}
        return {"python": version, "system_site_packages": False, "fetch": offered}
    return {"python": wanted or controller_python(), "system_site_packages": False}


def for_host(setup, host):
    """The setup as one job on ``host`` runs it (the host goes into the fetch's message)."""
    if not setup or not setup.get("fetch"):
        return setup
    return dict(setup, host=host)


def cache_mount(setup):
    """The node's folder of downloaded Pythons, for a job whose setup fetches one (else None),
    as a mount of the job (created on the node when missing, like an instance volume)."""
    if not setup or not setup.get("fetch"):
        return None
    return {"kind": "instance", "source": NODE_PYTHONS_DIR, "target": PYTHONS_DIR,
            "optional": False}


def fetch_refusal(setup):
    """What the job prints when the node cannot download the Python it asks for."""
    version = setup["python"]
    return (
        "gpufleet: python: %s is not in the local task image (it has Python %s), and uv could "
        "not download it on host %s (python-build-standalone's builds, from github.com or the "
        "mirror UV_PYTHON_INSTALL_MIRROR names). Give the task an image with Python %s, let the "
        "host reach github.com, set UV_PYTHON_INSTALL_MIRROR in the task's env to a mirror it "
        "can reach, or set python: \"%s\"" % (
            version, ", ".join(setup["fetch"]), setup.get("host") or "(unknown)", version,
            setup["fetch"][0]))


def fetch_commands(setup):
    """The commands that download the setup's Python into PYTHONS_DIR (as root, keeping the job's
    environment, so UV_PYTHON_INSTALL_MIRROR applies; the image keeps uv offline otherwise), or
    end the job with uv's output and fetch_refusal's message; none when the image has the
    version. uv says nothing when it succeeds (its ``-q`` would hide its errors too)."""
    if not setup.get("fetch"):
        return []
    install = ("sudo -E UV_OFFLINE=0 UV_PYTHON_DOWNLOADS=manual UV_PYTHON_INSTALL_DIR=%s "
               "uv python install %s 2>&1" % (PYTHONS_DIR, setup["python"]))
    return [
        "eval $(echo 'export UV_PYTHON_INSTALL_DIR=%s' | sudo tee -a /dstack/profile)"
        % PYTHONS_DIR,
        "if ! _gf_uv=$(%s); then printf '%%s\\n' \"$_gf_uv\" %s >&2; exit 1; fi"
        % (install, quote_sh(fetch_refusal(setup))),
    ]


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
    return fetch_commands(setup) + [
        "eval $(echo 'export DSTACK_VENV_DIR=%s' | sudo tee -a /dstack/profile)" % VENV_DIR,
        "sudo rm -rf $DSTACK_VENV_DIR",
        "sudo mkdir $DSTACK_VENV_DIR",
        "sudo chown $(id -u):$(id -g) $DSTACK_VENV_DIR",
        seed,
        "eval $(echo '. $DSTACK_VENV_DIR/bin/activate' | sudo tee -a /dstack/profile)",
    ]
