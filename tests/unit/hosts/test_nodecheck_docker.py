# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The docker check: packages, holds, daemon.json against what the running daemon reports."""

from __future__ import annotations

import json

from ansible_collections.gpufleet.cluster.plugins.module_utils.hosts.checks import docker
from ansible_collections.gpufleet.cluster.plugins.module_utils.hosts.checks._packages import (
    installed,
    version_matches,
)

from .nodecheck_fakes import FakeNode

QUERY = ("dpkg-query", "-W", "-f", "${Package}\\t${Version}\\t${Status}\\n") + docker.PACKAGES
DPKG_CE = (
    "docker-ce\t5:27.3.1-1~debian.12~bookworm\thold ok installed\n"
    "docker-ce-cli\t5:27.3.1-1~debian.12~bookworm\thold ok installed\n"
    "containerd.io\t1.7.22-1\tinstall ok installed\n"
    "docker.io\t20.10.24+dfsg1-1\tdeinstall ok config-files\n"
)
INFO = {"ServerVersion": "27.3.1", "LoggingDriver": "json-file", "DockerRootDir": "/data/docker",
        "DefaultRuntime": "runc", "Runtimes": {"runc": {}, "nvidia": {}}, "Driver": "overlay2",
        "CgroupDriver": "systemd"}
DAEMON = {"log-driver": "json-file", "log-opts": {"max-size": "100m", "max-file": "3"},
          "data-root": "/data/docker", "log-level": "warn"}


def node(dpkg=DPKG_CE, daemon=None, info=None, active="active", group="docker:x:999:alice"):
    daemon = DAEMON if daemon is None else daemon
    info = INFO if info is None else info
    files = {"/etc/docker/daemon.json": json.dumps(daemon)}
    commands = {
        QUERY: (0, dpkg, ""),
        ("systemctl", "is-active", "docker"): (0 if active == "active" else 3, active + "\n", ""),
        ("systemctl", "is-enabled", "docker"): (0, "enabled\n", ""),
        ("docker", "info", "--format", "{{json .}}"): (0, json.dumps(info), ""),
        ("getent", "group", "docker"): (0, group + "\n", ""),
    }
    return FakeNode(files=files, commands=commands, bins={"dpkg-query"})


def params(**expect):
    return {"expect": expect, "settings": {}}


def test_installed_reads_versions_and_holds_and_skips_removed_packages():
    found = installed(node(), docker.PACKAGES)
    assert found == {
        "docker-ce": {"version": "5:27.3.1-1~debian.12~bookworm", "held": True},
        "docker-ce-cli": {"version": "5:27.3.1-1~debian.12~bookworm", "held": True},
        "containerd.io": {"version": "1.7.22-1", "held": False},
    }


def test_version_matches_upstream_version_with_epoch_and_revision():
    assert version_matches("5:27.3.1-1~debian.12~bookworm", "27.3.1")
    assert version_matches("5:27.3.1-1~debian.12~bookworm", "27.3")
    assert version_matches("27.3.1-1.el9", "27.3.1")
    assert not version_matches("5:27.3.10-1~debian.12~bookworm", "27.3.1")
    assert not version_matches("5:27.4.0-1", "27.3.1")


def test_detect_always_applies_and_names_what_is_installed():
    found = docker.detect(node(), {})
    assert found.applies
    assert "docker-ce 5:27.3.1-1~debian.12~bookworm" in found.reason
    empty = docker.detect(node(dpkg=""), {})
    assert empty.applies and "not installed yet" in empty.reason


def test_verify_all_good():
    check = docker.verify(node(), params(
        version="27.3.1", users=["alice"],
        daemon={"log-driver": "json-file", "log-opts": {"max-size": "100m", "max-file": "3"},
                "data-root": "/data/docker"}))
    assert check["problems"] == []
    assert check["ok"] is True
    assert check["held"] == ["docker-ce", "docker-ce-cli"]
    assert check["package_version"] == "5:27.3.1-1~debian.12~bookworm"
    assert check["data_root"] == "/data/docker"
    assert check["runtimes"] == ["nvidia", "runc"]
    assert check["daemon_json"]["log-level"] == "warn"


def test_verify_finds_wrong_version_missing_key_and_user():
    check = docker.verify(node(), params(
        version="27.4.0", users=["bob"], daemon={"log-opts": {"max-size": "10m"}}))
    assert not check["ok"]
    text = "; ".join(check["problems"])
    assert "docker-ce is at 5:27.3.1-1~debian.12~bookworm, not 27.4.0" in text
    assert "does not set log-opts.max-size" in text
    assert "bob is not in the docker group" in text


def test_verify_says_when_the_running_daemon_has_not_picked_up_daemon_json():
    info = dict(INFO, DockerRootDir="/var/lib/docker")
    check = docker.verify(node(info=info), params(daemon={"data-root": "/data/docker"}))
    assert any("running daemon has '/var/lib/docker': restart Docker" in p
               for p in check["problems"])


def test_verify_reports_a_stopped_service_and_a_missing_engine():
    check = docker.verify(node(dpkg="", active="inactive"), params())
    assert "the docker-ce package is not installed" in check["problems"]
    assert "the docker service is inactive, not active" in check["problems"]
    assert check["server_version"] is None


def test_verify_reports_a_daemon_json_that_is_not_json():
    fake = node()
    fake.files["/etc/docker/daemon.json"] = "{oops"
    check = docker.verify(fake, params())
    assert any("is not valid JSON" in p for p in check["problems"])
