# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Docker: every node runs its jobs in Docker, so the docker role always applies; the check
reads the packages, daemon.json, the service and what the running daemon reports.

``expect`` keys: ``version`` (upstream version the engine package must have, e.g. "27.3.1"),
``daemon`` (daemon.json settings that must be in the file, and in effect where the daemon
reports them), ``users`` (must be in the docker group), ``running`` (bool).
``settings`` keys: ``daemon_json`` (path), ``source`` ("docker" or "distribution").

PRIVATE to gpufleet.cluster.
"""

from __future__ import annotations

import json
from typing import Any

from ..facts.probe import System
from . import CheckError, Detection, result
from ._packages import installed, unit_state, version_matches

PACKAGES = ("docker-ce", "docker-ce-cli", "containerd.io", "docker.io", "moby-engine")
ENGINE_PACKAGE = {"docker": "docker-ce", "distribution": "docker.io"}
DAEMON_JSON = "/etc/docker/daemon.json"
# daemon.json keys and the `docker info` fields that show them in effect.
INFO_FIELDS = {
    "log-driver": "LoggingDriver",
    "data-root": "DockerRootDir",
    "default-runtime": "DefaultRuntime",
    "storage-driver": "Driver",
}


def detect(system: System, params: dict[str, Any]) -> Detection:
    found = installed(system, PACKAGES)
    if found:
        names = ", ".join("%s %s" % (n, found[n]["version"]) for n in sorted(found))
        reason = "Docker runs every job; installed now: %s" % names
    else:
        reason = "Docker runs every job; not installed yet"
    return Detection(True, reason, {"packages": found})


def _docker_info(system):
    rc, out, err = system.run(["docker", "info", "--format", "{{json .}}"])
    if rc != 0:
        return None, (err or out).strip()
    try:
        return json.loads(out), None
    except ValueError as exc:
        raise CheckError("docker info printed something that is not JSON: %s" % out[:200]) from exc


def _missing(wanted, actual, prefix=""):
    """Dotted keys of ``wanted`` whose values ``actual`` lacks or differs in."""
    missing = []
    for key, value in wanted.items():
        path = prefix + key
        if isinstance(value, dict) and isinstance(actual.get(key), dict):
            missing.extend(_missing(value, actual[key], path + "."))
        elif actual.get(key) != value:
            missing.append(path)
    return missing


def _group_members(system, group):
    rc, out, _err = system.run(["getent", "group", group])
    if rc != 0 or not out.strip():
        return []
    members = out.strip().split(":")[-1]
    return [m for m in members.split(",") if m]


def verify(system: System, params: dict[str, Any]) -> dict[str, Any]:
    expect = params.get("expect") or {}
    settings = params.get("settings") or {}
    path = settings.get("daemon_json") or DAEMON_JSON
    source = settings.get("source") or "docker"
    problems = []

    packages = installed(system, PACKAGES)
    engine = ENGINE_PACKAGE.get(source, "docker-ce")
    package_version = (packages.get(engine) or {}).get("version")
    if package_version is None:
        problems.append("the %s package is not installed" % engine)
    elif expect.get("version") and not version_matches(package_version, expect["version"]):
        problems.append("%s is at %s, not %s" % (engine, package_version, expect["version"]))

    daemon_json = {}
    if system.exists(path):
        try:
            daemon_json = json.loads(system.read_text(path) or "{}")
        except ValueError as exc:
            problems.append("%s is not valid JSON: %s" % (path, exc))
    wanted = expect.get("daemon") or {}
    for key in _missing(wanted, daemon_json):
        problems.append("%s does not set %s as wanted" % (path, key))

    active, enabled = unit_state(system, "docker")
    info, info_error = _docker_info(system) if active == "active" else (None, None)
    if expect.get("running", True) and active != "active":
        problems.append("the docker service is %s, not active" % active)
    if info_error:
        problems.append("docker info failed: %s" % info_error)
    if info:
        for key, field in INFO_FIELDS.items():
            if key in wanted and info.get(field) != wanted[key]:
                problems.append(
                    "daemon.json sets %s to %r but the running daemon has %r: restart Docker"
                    % (key, wanted[key], info.get(field)))
        for runtime in (wanted.get("runtimes") or {}):
            if runtime not in (info.get("Runtimes") or {}):
                problems.append("the running daemon does not know the %s runtime: restart "
                                "Docker" % runtime)

    members = _group_members(system, "docker")
    for user in expect.get("users") or []:
        if user not in members:
            problems.append("%s is not in the docker group" % user)

    info = info or {}
    return result(
        problems=problems,
        source=source,
        packages=dict((n, p["version"]) for n, p in packages.items()),
        held=sorted(n for n, p in packages.items() if p["held"]),
        package_version=package_version,
        server_version=info.get("ServerVersion"),
        service={"active": active, "enabled": enabled},
        daemon_json=daemon_json,
        logging_driver=info.get("LoggingDriver"),
        data_root=info.get("DockerRootDir"),
        default_runtime=info.get("DefaultRuntime"),
        runtimes=sorted(info.get("Runtimes") or {}),
        storage_driver=info.get("Driver"),
        cgroup_driver=info.get("CgroupDriver"),
        docker_group=members,
    )
