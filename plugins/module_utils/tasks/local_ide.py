# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The version of the IDE on the submitter's machine, for a dev environment whose file sets no
``version``, read where dstack's CLI reads it.

The IDE server a dev environment installs must be the build of the desktop IDE that connects,
so dstack's CLI fills ``version`` from the IDE on the machine that submits: the second line of
``code --version`` (VS Code's commit) or ``cursor --version``, and for Windsurf
``windsurfVersion@commit`` from the ``resources/app/product.json`` found above the ``windsurf``
command. ``gpufleet apply`` does the same on the controller and passes the result as the task
module's ``ide_version``. With none found the job still starts; the IDE installs its server on
first connect, and :func:`hint` says how to make it found.

``detect(ide)`` takes ``which`` and ``run`` so that tests need no IDE installed.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess

# The command each IDE puts in PATH, and what the IDE calls the action that does it.
COMMANDS = {"vscode": ("code", "VS Code"), "cursor": ("cursor", "Cursor"),
            "windsurf": ("windsurf", "Windsurf")}
# How far above the windsurf command product.json may be (Linux, macOS and Windows layouts).
_LEVELS = 6
_TIMEOUT = 15


def _second_line(command, which, run):
    path = which(command)
    if not path:
        return None
    try:
        done = run([path, "--version"], capture_output=True, timeout=_TIMEOUT, check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    if done.returncode != 0:
        return None
    lines = (done.stdout or b"").decode("utf-8", "replace").splitlines()
    return lines[1].strip() or None if len(lines) > 1 else None


def _windsurf(which):
    path = which("windsurf")
    if not path:
        return None
    folder = os.path.dirname(os.path.realpath(path))
    for _level in range(_LEVELS):
        for resources in ("resources", "Resources"):
            product = os.path.join(folder, resources, "app", "product.json")
            try:
                with open(product, encoding="utf-8") as handle:
                    data = json.load(handle)
            except (OSError, ValueError):
                continue
            if isinstance(data, dict) and data.get("windsurfVersion") and data.get("commit"):
                return "%s@%s" % (data["windsurfVersion"], data["commit"])
        parent = os.path.dirname(folder)
        if parent == folder:
            break
        folder = parent
    return None


def detect(ide, which=shutil.which, run=subprocess.run):
    """The local ``ide``'s version as a dev environment's ``version`` takes it, or None (no such
    IDE here, or one that has no server to install: zed)."""
    if ide == "windsurf":
        return _windsurf(which)
    if ide in COMMANDS:
        return _second_line(COMMANDS[ide][0], which, run)
    return None


def hint(ide):
    """What to tell a user whose ``ide`` was not found here, or None when there is nothing to
    find (zed, no IDE)."""
    if ide not in COMMANDS:
        return None
    command, name = COMMANDS[ide]
    return ("No %s version found here (no working `%s` command in PATH), so its server and "
            "extensions are installed when %s first connects. To install them with the run, "
            "put `%s` in PATH (in %s: Command Palette, \"Shell Command: Install '%s' command in "
            "PATH\", then open a new terminal) or set version in the file."
            % (name, command, name, command, name, command))
