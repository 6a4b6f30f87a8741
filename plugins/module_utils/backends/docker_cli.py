# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""A small client for this machine's Docker engine, through the ``docker`` command.

gpufleet depends only on ansible-core, so it talks to the engine with the CLI rather than the
Docker SDK. Every failure becomes a DockerError whose message says what to install or start.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from typing import Any

from ..core.errors import GpufleetError


class DockerError(GpufleetError):
    """The engine is missing, not running, or refused a command; the message says what to do."""


NOT_INSTALLED = (
    "the docker command was not found: install Docker (on Debian/Ubuntu: "
    "sudo apt-get install -y docker.io) and start the engine (sudo systemctl start docker, "
    "or sudo dockerd & where systemd is not running)"
)
NOT_RUNNING = (
    "the Docker engine is not running or not reachable (%s): start it with "
    "sudo systemctl start docker, or sudo dockerd & where systemd is not running; "
    "if it runs, make sure this user may use it (member of the docker group, or run as root)"
)


def _default_runner(argv, stdin=None):
    """Run argv; ``stdin`` is bytes to send, or an open file/pipe to read from."""
    if stdin is None or isinstance(stdin, bytes):
        proc = subprocess.run(
            argv, input=stdin, stdout=subprocess.PIPE, stderr=subprocess.PIPE, check=False
        )
    else:
        proc = subprocess.run(
            argv, stdin=stdin, stdout=subprocess.PIPE, stderr=subprocess.PIPE, check=False
        )
    return proc.returncode, proc.stdout, proc.stderr


class Docker(object):
    """Runs ``docker`` commands. ``runner(argv, stdin=None) -> (rc, stdout, stderr)`` (bytes)."""

    def __init__(self, binary=None, runner=None):
        self.binary = binary or shutil.which("docker")
        self._runner = runner or _default_runner

    def run(self, *args: str, **kwargs: Any) -> Any:
        """Run ``docker args...``; return stdout as text; raise DockerError on failure."""
        if not self.binary:
            raise DockerError(NOT_INSTALLED)
        check = kwargs.pop("check", True)
        stdin = kwargs.pop("stdin", None)
        rc, out, err = self._runner([self.binary] + list(args), stdin=stdin)
        out = out.decode("utf-8", "replace") if isinstance(out, bytes) else (out or "")
        err = err.decode("utf-8", "replace") if isinstance(err, bytes) else (err or "")
        if check and rc != 0:
            raise DockerError(
                "docker %s failed (exit %d): %s" % (args[0] if args else "", rc, err.strip()[-2000:])
            )
        return out if check else (rc, out, err)

    def ping(self) -> str:
        """Check the engine answers; return its version. Raise DockerError saying what to fix."""
        if not self.binary:
            raise DockerError(NOT_INSTALLED)
        rc, out, err = self.run("version", "--format", "{{.Server.Version}}", check=False)
        if rc != 0 or not out.strip():
            reason = err.strip().splitlines()[-1] if err.strip() else "no answer"
            raise DockerError(NOT_RUNNING % reason)
        return out.strip()

    def image_labels(self, ref: str) -> dict[str, str] | None:
        """The labels of image ``ref``, or None when the engine has no such image."""
        rc, out, _err = self.run("image", "inspect", "--format", "{{json .Config.Labels}}", ref,
                                 check=False)
        if rc != 0:
            return None
        return json.loads(out or "null") or {}

    def import_rootfs(self, rootfs, ref, changes=(), labels=None):
        """``tar -C rootfs -c . | docker import`` with Dockerfile-style ``changes``."""
        if not os.path.isdir(rootfs):
            raise DockerError("no root filesystem at %s to import" % rootfs)
        args = ["import"]
        for change in changes:
            args += ["--change", change]
        for key, value in sorted((labels or {}).items()):
            args += ["--change", "LABEL %s=%s" % (key, json.dumps(value))]
        tar = subprocess.Popen(
            ["tar", "--numeric-owner", "-C", rootfs, "-c", "."], stdout=subprocess.PIPE
        )
        try:
            rc, _out, err = self._runner([self.binary] + args + ["-", ref], stdin=tar.stdout)
        finally:
            tar.stdout.close()
            tar_rc = tar.wait()
        if tar_rc != 0:
            raise DockerError("could not archive %s (tar exit %d)" % (rootfs, tar_rc))
        if rc != 0:
            message = err.decode("utf-8", "replace") if isinstance(err, bytes) else err
            raise DockerError("docker import of %s failed: %s" % (ref, message.strip()))
