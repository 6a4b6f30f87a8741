# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Getting a run's image onto its hosts before its containers start.

An image a host already has is kept; otherwise each host pulls it (with the task's registry
credentials), and an image no host can pull is pushed from the controller (``docker save``
here, ``docker load`` there). All hosts are asked at once (tasks.ssh.parallel).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile

from ..backends.docker_cli import DockerError
from .errors import RunError
from .ssh import NodeError, parallel

IMAGE_SOURCES = ("auto", "pull", "push", "present")


def _local_has(docker, image):
    if docker is None:
        return False
    try:
        return docker.image_labels(image) is not None
    except DockerError:
        return False


def push_image(docker, image, nodes, hosts):
    """``docker save`` on the controller once, ``docker load`` on each host, all at once."""
    folder = tempfile.mkdtemp(prefix="gpufleet-image-")
    path = os.path.join(folder, "image.tar")
    try:
        with open(path, "wb") as handle:
            proc = subprocess.run([docker.binary, "save", image], stdout=handle,
                                  stderr=subprocess.PIPE, check=False)
        if proc.returncode != 0:
            raise RunError("docker save %s failed on the controller: %s"
                           % (image, proc.stderr.decode("utf-8", "replace").strip()))

        def load(host):
            node = nodes[host]
            with open(path, "rb") as handle:
                proc = subprocess.run(node.argv(node.sudo + "docker load -q"), stdin=handle,
                                      stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                      check=False)
            if proc.returncode != 0:
                raise NodeError(host, "docker load of %s failed: %s" % (
                    image, proc.stderr.decode("utf-8", "replace").strip()[-500:]))
            return True

        return parallel(hosts, load)
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def ensure_image(image, nodes, hosts, docker=None, source="auto", auth=None, emit=None,
                 known=None):
    """Make ``image`` present on ``hosts``: kept, pulled there, or pushed from the controller.

    Returns ``{host: image_info}`` (ENTRYPOINT, CMD, WORKDIR as the host sees the image).
    ``auth`` (registry credentials) is used for the pull only and never shown. ``known``:
    ``{host: image_info}`` already asked (with the claims); only the other hosts are asked.
    """
    emit = emit or (lambda event: None)
    known = dict((h, v) for h, v in (known or {}).items() if h in hosts and v)
    asking = [h for h in hosts if h not in known]
    info = dict(known)
    if asking:
        info.update(_checked(parallel(asking, lambda h: nodes[h].call("image_info",
                                                                      {"image": image}))))
    missing = [h for h in hosts if not info[h]["present"]]
    if not missing:
        return info
    if source == "present":
        raise RunError("image %s is not on %s, and image_source is present: load it there "
                       "first" % (image, ", ".join(missing)))
    failures = {}
    if source in ("auto", "pull"):
        emit({"kind": "info", "message": "pulling %s on %s" % (image, ", ".join(missing))})
        pulled = _checked(parallel(missing, lambda h: nodes[h].call(
            "pull", {"image": image, "auth": auth}, timeout=3600)))
        failures = dict((h, a["message"]) for h, a in pulled.items() if not a["pulled"])
        missing = sorted(failures)
    if missing and source in ("auto", "push"):
        if not _local_has(docker, image):
            detail = "; ".join("%s: %s" % (h, failures[h]) for h in missing if failures.get(h))
            raise RunError(
                "image %s could not be pulled on %s%s, and the controller does not have it to "
                "push: pull or build it on the controller (docker pull / docker build), or make "
                "the registry reachable from the hosts"
                % (image, ", ".join(missing), (" (" + detail + ")") if detail else ""))
        emit({"kind": "info", "message": "pushing %s from the controller to %s"
              % (image, ", ".join(missing))})
        _checked(push_image(docker, image, nodes, missing))
        missing = []
    if missing:
        raise RunError("image %s could not be pulled on %s: %s" % (
            image, ", ".join(missing), "; ".join(failures.get(h, "") for h in missing)))
    again = _checked(parallel(hosts, lambda h: nodes[h].call("image_info", {"image": image})))
    return again


def _checked(results):
    """The values of ``parallel`` results; the first error is raised as a RunError."""
    for host, (_value, error) in sorted(results.items()):
        if error is not None:
            raise RunError(str(error)) from error
    return dict((h, v) for h, (v, _e) in results.items())
