# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""gpufleet.cluster.preflight run as a module: in-process through AnsibleModule, with a played
host where sudo, Docker or sshd are involved and real sockets for the peers check; and once
through ``ansible`` (AnsiballZ) on localhost."""

from __future__ import annotations

import json

from . import module_runner
import pytest
from ansible_collections.gpufleet.cluster.plugins.module_utils.hosts import preflight as preflight_utils
from ansible_collections.gpufleet.cluster.plugins.modules import preflight

SUDO = "/usr/bin/sudo"
DOCKER = "/usr/bin/docker"


def run_module(args):
    return module_runner.run_module(preflight.main, args)


class NoFilesHost(preflight_utils.Host):
    """A Host on which no path exists."""

    def exists(self, path):
        return False


@pytest.fixture
def played_host(monkeypatch):
    """Make the module check a played host: the login user ubuntu, the commands in the returned
    table, the commands on PATH in ``on_path``; records the commands run."""
    table = {"commands": {}, "on_path": {}, "calls": []}

    def run_played(argv):
        table["calls"].append(tuple(argv))
        return table["commands"][tuple(argv)]

    def make_host(run, which):  # what the module passes (run_command, get_bin_path) is unused
        assert callable(run) and callable(which)
        return NoFilesHost(
            run=run_played,
            which=table["on_path"].get,
            euid=1000,
            env={},
            user="ubuntu",
        )

    monkeypatch.setattr(preflight, "Host", make_host)
    return table


def test_reachable_peers_pass(listener):
    args = {
        "checks": ["peers"],
        "peers": [
            {"name": "me", "address": "192.0.2.1"},
            {"name": "node-1", "address": "127.0.0.1", "port": listener},
        ],
        "self_name": "me",
    }
    code, result = run_module(args)
    assert code == 0, result
    assert result["changed"] is False
    assert result["ok"] is True
    assert result["checks"] == [
        {"name": "peers", "status": "ok", "message": "reached all 1 other nodes (node-1)"}
    ]
    assert result["peers"] == [
        {
            "name": "node-1",
            "address": "127.0.0.1",
            "port": listener,
            "reachable": True,
            "error": None,
        }
    ]
    assert result["docker"] is None

    code, checked = run_module(dict(args, _ansible_check_mode=True))
    assert code == 0
    assert checked["checks"] == result["checks"]


def test_unreachable_peer_fails_the_task_with_every_result(closed_port):
    code, result = run_module(
        {"checks": ["peers"], "peers": [{"address": "127.0.0.1", "port": closed_port}]}
    )
    assert code == 1
    assert result["failed"] is True
    assert result["msg"] == (
        "preflight failed: cannot reach 127.0.0.1 at 127.0.0.1:%d (connection refused); nodes "
        "of a cluster fleet must reach each other's internal IPs: check routing and firewalls "
        "between the hosts, or set internal_ip / network in ssh_config" % closed_port
    )
    assert result["ok"] is False
    assert result["checks"][0]["status"] == "failed"
    assert result["peers"][0]["error"] == "connection refused"
    assert "exception" not in result


def test_sudo_failure_through_the_module(played_host):
    played_host["on_path"].update(sudo=SUDO, docker=DOCKER)
    played_host["commands"][(SUDO, "-n", "true")] = (1, "", "sudo: a password is required\n")
    code, result = run_module({"gpu_vendor": "none"})
    assert code == 1
    assert result["msg"].startswith(
        "preflight failed: the login user ubuntu has no passwordless sudo (sudo -n true: a "
        "password is required)"
    )
    assert [(c["name"], c["status"]) for c in result["checks"]] == [
        ("sudo", "failed"),
        ("docker", "skipped"),
        ("nvidia_container_toolkit", "skipped"),
        ("tcp_forwarding", "skipped"),
    ]
    assert played_host["calls"] == [(SUDO, "-n", "true")]


def test_docker_through_the_module(played_host):
    played_host["on_path"].update(sudo=SUDO, docker=DOCKER)
    played_host["commands"][(SUDO, "-n", "true")] = (0, "", "")
    info = {"ServerVersion": "27.5.1", "Runtimes": {"runc": {}, "nvidia": {}}}
    played_host["commands"][(SUDO, "-n", DOCKER, "info", "--format", "{{json .}}")] = (
        0,
        json.dumps(info),
        "",
    )
    code, result = run_module({"checks": ["docker", "nvidia_container_toolkit"]})
    assert code == 0, result
    assert result["docker"] == {
        "version": "27.5.1",
        "runtimes": ["nvidia", "runc"],
        "default_runtime": None,
        "root_dir": None,
    }
    assert [c["name"] for c in result["checks"]] == ["sudo", "docker", "nvidia_container_toolkit"]


@pytest.mark.parametrize(
    "args, message",
    [
        ({"checks": ["docker", "gpu"]}, "value of checks must be one or more of"),
        ({"gpu_vendor": "matrox"}, "value of gpu_vendor must be one of"),
        ({"peers": [{"name": "n1"}]}, "missing required arguments: address found in peers"),
        ({"peers": [{"address": "10.0.0.1", "port": 70000}]}, "port must be a whole number"),
        ({"checks": ["peers"], "peer_timeout": 0}, "peer_timeout must be a number of seconds"),
        ({"color": "red"}, "Unsupported parameters"),
    ],
)
def test_bad_options_are_reported(args, message):
    code, result = run_module(args)
    assert code == 1
    assert message in result["msg"]
    assert "exception" not in result


def test_an_internal_error_is_reported_as_such(monkeypatch):
    def broken(*_args, **_kwargs):
        raise KeyError("docker")

    monkeypatch.setattr(preflight, "run_preflight", broken)
    code, result = run_module({"checks": ["peers"]})
    assert code == 1
    assert result["msg"] == "internal error in gpufleet preflight (please report it): 'docker'"


@pytest.mark.slow
def test_through_ansible_on_localhost(tmp_path, listener):
    """The module as Ansible ships it (AnsiballZ with its module_utils)."""
    args = {
        "checks": ["peers"],
        "peers": [{"name": "here", "address": "127.0.0.1", "port": listener}],
    }
    proc = module_runner.run_adhoc(tmp_path, "gpufleet.cluster.preflight", json.dumps(args))
    result = module_runner.adhoc_result(proc)
    assert result["ok"] is True
    assert result["peers"][0]["reachable"] is True
