# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""``uv`` and the wheels a seeded virtual environment needs, for the local task image.

dstack's default image makes each job's ``/dstack/venv`` with ``uv venv --seed`` (tasks.python_env).
The local backend's task image is built and run without a registry or an index, so the uv
binary and the seed wheels (pip, setuptools, wheel and what they need) are fetched once on the
controller with ``pip download`` (the controller's pip configuration applies: mirrors, proxies),
checked against the pinned SHA-256 below, cached, and put in the image: ``uv`` in
``/usr/local/bin``, the wheels in ``WHEELS_DIR``, which ``UV_FIND_LINKS`` names, with
``UV_OFFLINE=1`` so that uv never waits on an index it cannot reach.
"""

from __future__ import annotations

import hashlib
import os
import platform
import shutil
import subprocess
import sys
import zipfile
from typing import Any, Callable

from .local import BuildError

UV_VERSION = "0.13.9"
WHEELS_DIR = "/opt/gpufleet/wheels"
# name, version, {machine: sha256} for the platform wheel of uv, {"any": sha256} for the others.
PINNED = (
    ("uv", UV_VERSION, {
        "x86_64": "d7f459fe4fd247d830351c75686d3996ace3c6f3f728eb0e85a30b7ada0cef19",
        "aarch64": "5435c5ce14a56431208ca0996416d310f1598e8c2c8ba707688985a16bb82dbe",
    }),
    ("pip", "26.3", {"any": "f3b60b20ffaadd4415ed7957212a38ac63fa4c5fa375bd0f4a797777940fad13"}),
    ("setuptools", "84.2.1",
     {"any": "ca140b45d5325a9478f880e351484f62fef15f336462e449ca0c03c873d589c2"}),
    ("wheel", "0.48.0",
     {"any": "3217dcc807155e45db462d7ef2431f5ddda0d7273b700d05a67b271ceb1287ab"}),
    ("packaging", "26.4",
     {"any": "81383611a09c1bc0b08b76e0fd5829d7c6824c65b27a6aee339da133f4233ea2"}),
)
IMAGE_ENV = (
    ("UV_FIND_LINKS", WHEELS_DIR),
    ("UV_OFFLINE", "1"),
    ("UV_PYTHON_DOWNLOADS", "never"),
)


def machine() -> str:
    """The architecture the local nodes run (the controller's own)."""
    name = platform.machine().lower()
    return {"amd64": "x86_64", "arm64": "aarch64"}.get(name, name)


def recipe() -> dict[str, Any]:
    """What the bundle adds to the image recipe (its digest changes when a pin does)."""
    return {"wheels": [[name, version, sorted(digests.items())]
                       for name, version, digests in PINNED],
            "env": [list(pair) for pair in IMAGE_ENV], "wheels_dir": WHEELS_DIR}


def cache_dir() -> str:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "gpufleet", "wheels")


def _sha256(path):
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def _cached(folder, name, version, wanted):
    prefix = "%s-%s-" % (name.replace("-", "_"), version)
    for entry in sorted(os.listdir(folder)) if os.path.isdir(folder) else ():
        if entry.startswith(prefix) and entry.endswith(".whl"):
            path = os.path.join(folder, entry)
            if _sha256(path) == wanted:
                return path
    return None


def fetch(folder: str | None = None, arch: str | None = None,
          runner: Callable[..., Any] = subprocess.run) -> dict[str, str]:
    """``{name: wheel path}`` for every pinned wheel, downloaded into ``folder`` (the cache)
    unless there already; BuildError naming the package when pip cannot get it or its hash is
    not the pinned one."""
    folder = folder or cache_dir()
    arch = arch or machine()
    os.makedirs(folder, exist_ok=True)
    out = {}
    for name, version, digests in PINNED:
        wanted = digests.get("any") or digests.get(arch)
        if wanted is None:
            raise BuildError("the local task image bundles uv %s for %s only; this controller "
                             "is %s" % (version, " and ".join(sorted(digests)), arch))
        found = _cached(folder, name, version, wanted)
        if found is None:
            argv = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary",
                    ":all:", "--disable-pip-version-check", "-q", "-d", folder,
                    "%s==%s" % (name, version)]
            if "any" not in digests:
                argv[4:4] = ["--platform", "manylinux_2_17_%s" % arch, "--python-version",
                             "3.11", "--implementation", "py"]
            proc = runner(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, check=False)
            if proc.returncode != 0:
                tail = proc.stdout.decode("utf-8", "replace").strip().splitlines()[-3:]
                raise BuildError(
                    "the local task image needs %s==%s from PyPI (for uv venv --seed), and pip "
                    "could not download it: %s; make PyPI (or a mirror in pip's configuration) "
                    "reachable from the controller" % (name, version, " / ".join(tail)))
            found = _cached(folder, name, version, wanted)
            if found is None:
                raise BuildError("%s==%s was downloaded but its SHA-256 is not the pinned one "
                                 "(%s): the index served another file; check pip's index "
                                 "settings" % (name, version, wanted))
        out[name] = found
    return out


def install(rootfs: str, wheels: dict[str, str]) -> None:
    """Put ``uv`` in the root filesystem's /usr/local/bin and the other wheels in WHEELS_DIR."""
    target = os.path.join(rootfs, WHEELS_DIR.lstrip("/"))
    os.makedirs(target, exist_ok=True)
    for name, path in sorted(wheels.items()):
        if name != "uv":
            shutil.copy(path, os.path.join(target, os.path.basename(path)))
            continue
        bindir = os.path.join(rootfs, "usr/local/bin")
        os.makedirs(bindir, exist_ok=True)
        with zipfile.ZipFile(path) as archive:
            members = [m for m in archive.namelist()
                       if m.endswith(".data/scripts/uv") or m.endswith(".data/scripts/uvx")]
            if not members:
                raise BuildError("%s holds no uv binary" % os.path.basename(path))
            for member in members:
                dest = os.path.join(bindir, os.path.basename(member))
                with archive.open(member) as src, open(dest, "wb") as out:
                    shutil.copyfileobj(src, out)
                os.chmod(dest, 0o755)
