# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The SSH-host preflight (plugins/module_utils/hosts/preflight.py) against played hosts: every
check's passing and failing branches, with real sudo, docker and sshd output, and the peers check
against real sockets on 127.0.0.1."""

from __future__ import annotations

import json
import socket
import threading

import pytest
from ansible_collections.gpufleet.cluster.plugins.module_utils.hosts import preflight
from ansible_collections.gpufleet.cluster.plugins.module_utils.hosts.preflight import (
    Host,
    PreflightError,
    failure_message,
    run_preflight,
)

SUDO = "/usr/bin/sudo"
DOCKER = "/usr/bin/docker"
SSHD = "/usr/sbin/sshd"
SSH_CONNECTION = "10.0.0.1 51234 10.0.0.5 22"
SPEC = "user=ubuntu,host=10.0.0.1,addr=10.0.0.1,laddr=10.0.0.5,lport=22"
DOCKER_INFO = (DOCKER, "info", "--format", "{{json .}}")

# `sshd -T` of OpenSSH 9.2p1 with Debian 12's default sshd_config (the long algorithm lists
# left out).
SSHD_T = """\
port 22
addressfamily any
listenaddress [::]:22
listenaddress 0.0.0.0:22
usepam yes
logingracetime 120
x11displayoffset 10
maxauthtries 6
maxsessions 10
clientaliveinterval 0
clientalivecountmax 3
requiredrsasize 1024
streamlocalbindmask 0177
unusedconnectiontimeout none
permitrootlogin without-password
ignorerhosts yes
ignoreuserknownhosts no
hostbasedauthentication no
hostbasedusesnamefrompacketonly no
pubkeyauthentication yes
kerberosauthentication no
kerberosorlocalpasswd yes
kerberosticketcleanup yes
gssapiauthentication no
gssapicleanupcredentials yes
gssapikeyexchange no
gssapistrictacceptorcheck yes
gssapistorecredentialsonrekey no
passwordauthentication yes
kbdinteractiveauthentication no
printmotd no
printlastlog yes
x11forwarding yes
x11uselocalhost yes
permittty yes
permituserrc yes
strictmodes yes
tcpkeepalive yes
permitemptypasswords no
compression yes
gatewayports no
usedns no
allowtcpforwarding yes
allowagentforwarding yes
disableforwarding no
allowstreamlocalforwarding yes
streamlocalbindunlink no
fingerprinthash SHA256
exposeauthinfo no
syslogfacility AUTH
authorizedkeysfile .ssh/authorized_keys .ssh/authorized_keys2
hostkey /etc/ssh/ssh_host_rsa_key
hostkey /etc/ssh/ssh_host_ecdsa_key
hostkey /etc/ssh/ssh_host_ed25519_key
acceptenv LANG
acceptenv LC_*
authenticationmethods any
subsystem sftp /usr/lib/openssh/sftp-server
maxstartups 10:30:100
persourcemaxstartups none
persourcenetblocksize 32:128
permittunnel no
ipqos lowdelay throughput
rekeylimit 0 0
permitopen any
permitlisten any
permituserenvironment no
pubkeyauthoptions none
"""

# `docker info --format '{{json .}}'` of Debian 12's docker.io 20.10 engine (docker 28 client),
# the fields the preflight reads and a few around them.
ENGINE_INFO = {
    "ID": "4JWF:TRTQ:ZYCV:ZN7V:OPZ3:5F3C:T7V6:U6S7:MVOM:BCZ6:R3M2:424J",
    "Containers": 0,
    "Driver": "overlay2",
    "CgroupDriver": "cgroupfs",
    "OperatingSystem": "Debian GNU/Linux 12 (bookworm)",
    "DockerRootDir": "/var/lib/docker",
    "ServerVersion": "20.10.24+dfsg1",
    "Runtimes": {
        "io.containerd.runc.v2": {"path": "runc"},
        "io.containerd.runtime.v1.linux": {"path": "runc"},
        "runc": {"path": "runc"},
    },
    "DefaultRuntime": "runc",
    "ClientInfo": {"Debug": False, "Version": "28.2.2", "Context": "default", "Plugins": []},
}
# The same engine after `nvidia-ctk runtime configure --runtime=docker` and a restart.
NVIDIA_ENGINE_INFO = dict(
    ENGINE_INFO,
    Runtimes=dict(ENGINE_INFO["Runtimes"], nvidia={"args": [], "path": "nvidia-container-runtime"}),
)
DAEMON_DOWN = (
    "Cannot connect to the Docker daemon at unix:///var/run/docker.sock. Is the docker daemon "
    "running?"
)
# What the docker 28 client prints, with exit status 1, when no engine answers.
ENGINE_DOWN = (
    1,
    json.dumps(
        {"ID": "", "ServerVersion": "", "Runtimes": None, "ClientInfo": {"Version": "28.2.2"}}
    )
    + "\n",
    DAEMON_DOWN + "\n",
)
# What older clients print, with exit status 0, when no engine answers.
ENGINE_DOWN_OLD_CLIENT = (
    0,
    json.dumps(
        {
            "ServerErrors": [DAEMON_DOWN],
            "ClientInfo": {"Version": "20.10.24+dfsg1"},
        }
    )
    + "\n",
    "",
)
SUDO_PASSWORD = (1, "", "sudo: a password is required\n")


def engine(info=None):
    """docker info's output for a running engine (ENGINE_INFO unless told)."""
    return (0, json.dumps(ENGINE_INFO if info is None else info) + "\n", "")


def sshd_t(**settings):
    """SSHD_T with some keywords set to other values."""
    lines = []
    for line in SSHD_T.splitlines():
        keyword = line.split()[0]
        lines.append("%s %s" % (keyword, settings[keyword]) if keyword in settings else line)
    return (0, "\n".join(lines) + "\n", "")


class PathsHost(Host):
    """A Host whose file system holds only ``paths``."""

    def __init__(self, paths, **kwargs):
        Host.__init__(self, **kwargs)
        self.paths = paths

    def exists(self, path):
        return path in self.paths


class Played:
    """A host played from a table of commands and paths, recording what ran."""

    def __init__(self, commands=None, paths=(), on_path=None, euid=1000, env=None, connect=None):
        self.commands = dict(commands or {})
        self.paths = set(paths)
        self.on_path = dict(on_path or {})
        self.calls = []
        self.host = PathsHost(
            self.paths,
            run=self.run,
            which=self.on_path.get,
            connect=connect or self.no_connect,
            euid=euid,
            env={"SSH_CONNECTION": SSH_CONNECTION} if env is None else env,
            user="ubuntu" if euid else "root",
        )

    def run(self, argv):
        self.calls.append(tuple(argv))
        assert tuple(argv) in self.commands, "unexpected command %r" % (argv,)
        return self.commands[tuple(argv)]

    @staticmethod
    def no_connect(address, port, timeout):
        raise AssertionError("unexpected connection to %s:%s" % (address, port))


def healthy(**changes):
    """Commands and paths of a host that passes every check as the sudo user ubuntu."""
    table = {
        "commands": {
            (SUDO, "-n", "true"): (0, "", ""),
            (SUDO, "-n") + DOCKER_INFO: engine(),
            (SUDO, "-n", SSHD, "-T", "-C", SPEC): sshd_t(),
        },
        "on_path": {"sudo": SUDO, "docker": DOCKER, "sshd": SSHD},
        "paths": set(),
    }
    table.update(changes)
    return table


def run(played, **options):
    return run_preflight(played.host, **options)


def by_name(result):
    return {check["name"]: check for check in result["checks"]}


def test_a_healthy_host_passes_every_default_check():
    played = Played(**healthy())
    result = run(played)
    assert [c["name"] for c in result["checks"]] == [
        "sudo",
        "docker",
        "nvidia_container_toolkit",
        "tcp_forwarding",
    ]
    assert all(c["status"] == "ok" for c in result["checks"]), result
    assert result["ok"] is True
    assert failure_message(result) is None
    assert result["docker"] == {
        "version": "20.10.24+dfsg1",
        "runtimes": ["io.containerd.runc.v2", "io.containerd.runtime.v1.linux", "runc"],
        "default_runtime": "runc",
        "root_dir": "/var/lib/docker",
    }
    assert result["peers"] == []
    checks = by_name(result)
    assert checks["sudo"]["message"] == "ubuntu has passwordless sudo"
    assert checks["docker"]["message"].startswith("Docker 20.10.24+dfsg1 is running")
    assert checks["nvidia_container_toolkit"]["message"] == (
        "no NVIDIA GPU (no /dev/nvidiactl): the toolkit is not needed"
    )
    assert checks["tcp_forwarding"]["message"] == (
        "sshd allows TCP forwarding (AllowTcpForwarding yes, for user ubuntu connecting from "
        "10.0.0.1)"
    )


# sudo


def test_root_needs_no_sudo_and_runs_commands_directly():
    played = Played(
        commands={
            DOCKER_INFO: engine(),
            (SSHD, "-T", "-C", SPEC.replace("ubuntu", "root")): sshd_t(),
        },
        on_path={"docker": DOCKER, "sshd": SSHD},
        euid=0,
    )
    result = run(played)
    assert result["ok"] is True, result
    assert by_name(result)["sudo"]["message"] == "running as root (uid 0): sudo is not needed"
    assert not any("sudo" in argv[0] for argv in played.calls)


def test_sudo_asking_for_a_password_fails_and_skips_what_needs_it():
    table = healthy()
    table["commands"][(SUDO, "-n", "true")] = SUDO_PASSWORD
    played = Played(**table)
    result = run(played)
    checks = by_name(result)
    assert checks["sudo"]["status"] == "failed"
    message = checks["sudo"]["message"]
    assert "the login user ubuntu has no passwordless sudo" in message
    assert "(sudo -n true: a password is required)" in message
    assert "add `ubuntu ALL=(ALL) NOPASSWD:ALL` in /etc/sudoers.d/ubuntu" in message
    assert "visudo -f /etc/sudoers.d/ubuntu" in message
    for name in ("docker", "nvidia_container_toolkit", "tcp_forwarding"):
        assert checks[name] == {
            "name": name,
            "status": "skipped",
            "message": "needs passwordless sudo",
        }
    assert played.calls == [(SUDO, "-n", "true")]
    assert result["ok"] is False
    # Skipped checks are not failures of their own: the message is about sudo only.
    assert failure_message(result) == "preflight failed: " + message


def test_sudo_refusal_other_than_a_password_is_quoted():
    table = healthy()
    table["commands"][(SUDO, "-n", "true")] = (
        1,
        "",
        "ubuntu is not in the sudoers file.  This incident will be reported.\n",
    )
    result = run(Played(**table), checks=["sudo"])
    assert (
        "(sudo -n true: ubuntu is not in the sudoers file.  This incident will be reported.)"
        in (by_name(result)["sudo"]["message"])
    )


def test_missing_sudo_fails():
    table = healthy(on_path={"docker": DOCKER, "sshd": SSHD})
    result = run(Played(**table))
    checks = by_name(result)
    assert checks["sudo"]["status"] == "failed"
    assert checks["sudo"]["message"].startswith(
        "sudo is not installed and the login user ubuntu is not root: install sudo, then add "
        "`ubuntu ALL=(ALL) NOPASSWD:ALL`"
    )
    assert checks["docker"]["status"] == "skipped"


def test_sudo_outside_path_is_found_in_usr_bin():
    table = healthy(on_path={"docker": DOCKER, "sshd": SSHD}, paths={SUDO})
    assert run(Played(**table))["ok"] is True


def test_a_check_that_needs_sudo_brings_the_sudo_check_along():
    table = healthy()
    table["commands"][(SUDO, "-n", "true")] = SUDO_PASSWORD
    result = run(Played(**table), checks=["docker"])
    assert [(c["name"], c["status"]) for c in result["checks"]] == [
        ("sudo", "failed"),
        ("docker", "skipped"),
    ]
    assert failure_message(result).startswith("preflight failed: the login user ubuntu has no")


def test_as_root_a_chosen_check_runs_alone():
    played = Played(commands={DOCKER_INFO: engine()}, on_path={"docker": DOCKER}, euid=0)
    result = run(played, checks=["docker"])
    assert [c["name"] for c in result["checks"]] == ["docker"]
    assert played.calls == [DOCKER_INFO]


# docker


def test_docker_not_installed():
    table = healthy(on_path={"sudo": SUDO, "sshd": SSHD})
    result = run(Played(**table))
    docker = by_name(result)["docker"]
    assert docker["status"] == "failed"
    assert docker["message"].startswith(
        "Docker is not installed (no docker command on PATH, in /usr/bin or in /usr/local/bin)"
    )
    assert "install Docker: https://docs.docker.com/engine/install/" in docker["message"]
    assert result["docker"] is None
    assert failure_message(result) == "preflight failed: " + docker["message"]


def test_docker_outside_path_is_found_in_usr_local_bin():
    table = healthy(on_path={"sudo": SUDO, "sshd": SSHD}, paths={"/usr/local/bin/docker"})
    table["commands"][(SUDO, "-n", "/usr/local/bin/docker") + DOCKER_INFO[1:]] = engine()
    assert run(Played(**table))["ok"] is True


@pytest.mark.parametrize("output", [ENGINE_DOWN, ENGINE_DOWN_OLD_CLIENT], ids=["rc1", "rc0"])
def test_docker_installed_but_not_running(output):
    table = healthy()
    table["commands"][(SUDO, "-n") + DOCKER_INFO] = output
    result = run(Played(**table))
    docker = by_name(result)["docker"]
    assert docker["status"] == "failed"
    assert docker["message"] == (
        "Docker is installed (/usr/bin/docker) but the engine is not running or cannot be reached "
        "(docker info: Cannot connect to the Docker daemon at unix:///var/run/docker.sock. Is the "
        "docker daemon running?): start it: sudo systemctl start docker (and sudo systemctl "
        "enable docker to start it at boot), and read sudo journalctl -u docker if it does not "
        "stay up"
    )
    assert result["docker"] is None


def test_docker_info_that_is_not_json():
    table = healthy()
    table["commands"][(SUDO, "-n") + DOCKER_INFO] = (0, "Client:\n Context:    default\n", "")
    docker = by_name(run(Played(**table)))["docker"]
    assert docker["status"] == "failed"
    assert docker["message"] == (
        '/usr/bin/docker info printed something that is not a JSON object: "Context:    default"'
    )


def test_docker_failure_through_sudo_quotes_sudo():
    # sudo allowed `true` but not docker (a sudoers rule limited to some commands).
    table = healthy()
    table["commands"][(SUDO, "-n") + DOCKER_INFO] = SUDO_PASSWORD
    message = by_name(run(Played(**table)))["docker"]["message"]
    assert "(docker info: sudo: a password is required)" in message


# nvidia_container_toolkit

NVIDIACTL = "/dev/nvidiactl"


def nvidia_host(runtimes=False, tools=(), gpu=True):
    table = healthy(paths={NVIDIACTL} if gpu else set())
    if runtimes:
        table["commands"][(SUDO, "-n") + DOCKER_INFO] = engine(NVIDIA_ENGINE_INFO)
    for tool in tools:
        if tool.startswith("/"):
            table["paths"].add(tool)
        else:
            table["on_path"][tool] = "/usr/bin/" + tool
    return Played(**table)


def toolkit(played, **options):
    return by_name(run(played, **options))["nvidia_container_toolkit"]


def test_nvidia_runtime_in_docker_passes():
    check = toolkit(nvidia_host(runtimes=True))
    assert check == {
        "name": "nvidia_container_toolkit",
        "status": "ok",
        "message": "Docker has the nvidia runtime",
    }


@pytest.mark.parametrize(
    "tool, where",
    [
        ("nvidia-ctk", "/usr/bin/nvidia-ctk"),
        ("/usr/local/bin/nvidia-ctk", "/usr/local/bin/nvidia-ctk"),
        ("/usr/bin/nvidia-container-cli", "/usr/bin/nvidia-container-cli"),
    ],
)
def test_installed_toolkit_passes_without_the_runtime(tool, where):
    check = toolkit(nvidia_host(tools=[tool]))
    assert check["status"] == "ok"
    assert check["message"] == "NVIDIA Container Toolkit found (%s)" % where


def test_nvidia_gpu_without_the_toolkit_fails():
    check = toolkit(nvidia_host())
    assert check["status"] == "failed"
    message = check["message"]
    assert message.startswith(
        "the host has NVIDIA GPUs (found /dev/nvidiactl) but not the NVIDIA Container Toolkit: "
        "Docker has no nvidia runtime (runtimes: io.containerd.runc.v2, "
        "io.containerd.runtime.v1.linux, runc) and neither nvidia-ctk nor nvidia-container-cli"
    )
    assert "could not select device driver" in message
    assert "package nvidia-container-toolkit" in message
    assert "run `sudo nvidia-ctk runtime configure --runtime=docker`" in message
    assert message.endswith("restart Docker (sudo systemctl restart docker)")


def test_toolkit_check_without_docker_looks_at_the_tools_only():
    table = healthy(paths={NVIDIACTL}, on_path={"sudo": SUDO, "sshd": SSHD})
    check = toolkit(Played(**table))
    assert check["status"] == "failed"
    assert "Docker has no nvidia runtime" not in check["message"]
    assert "NVIDIA Container Toolkit: neither nvidia-ctk nor" in check["message"]


def test_wsl_nvidia_gpu_is_detected_like_host_facts_does():
    table = healthy(paths={"/dev/dxg", "/usr/lib/wsl/lib/nvidia-smi"})
    check = toolkit(Played(**table))
    assert check["status"] == "failed"
    assert "(found /dev/dxg and /usr/lib/wsl/lib/nvidia-smi)" in check["message"]


@pytest.mark.parametrize("vendor", ["none", "amd", "intel", "tenstorrent"])
def test_gpu_vendor_other_than_nvidia_needs_no_toolkit(vendor):
    check = toolkit(nvidia_host(), gpu_vendor=vendor)
    assert check["status"] == "ok"
    assert check["message"] == "no NVIDIA GPU (gpu_vendor: %s): the toolkit is not needed" % vendor


def test_gpu_vendor_nvidia_overrides_detection():
    check = toolkit(nvidia_host(gpu=False), gpu_vendor="nvidia")
    assert check["status"] == "failed"
    assert "the host has NVIDIA GPUs (gpu_vendor: nvidia)" in check["message"]


def test_unknown_gpu_vendor_is_refused():
    with pytest.raises(PreflightError, match="gpu_vendor must be one of nvidia, amd, intel"):
        run(nvidia_host(), gpu_vendor="matrox")


# tcp_forwarding


def forwarding(table, **options):
    played = Played(**table)
    return by_name(run(played, **options))["tcp_forwarding"], played


@pytest.mark.parametrize("value", ["yes", "all", "local"])
def test_forwarding_values_that_allow_local_forwards(value):
    table = healthy()
    table["commands"][(SUDO, "-n", SSHD, "-T", "-C", SPEC)] = sshd_t(allowtcpforwarding=value)
    check, _played = forwarding(table)
    assert check["status"] == "ok"
    assert check["message"].startswith("sshd allows TCP forwarding (AllowTcpForwarding %s," % value)


@pytest.mark.parametrize("value", ["no", "remote"])
def test_forwarding_values_that_refuse_local_forwards(value):
    table = healthy()
    table["commands"][(SUDO, "-n", SSHD, "-T", "-C", SPEC)] = sshd_t(allowtcpforwarding=value)
    check, _played = forwarding(table)
    assert check["status"] == "failed"
    assert check["message"] == (
        "sshd does not allow TCP forwarding (AllowTcpForwarding %s, for user ubuntu connecting "
        "from 10.0.0.1), and dstack reaches the host through SSH local port forwarding: set "
        "`AllowTcpForwarding yes` in /etc/ssh/sshd_config (or in the Match block that applies to "
        "ubuntu), then reload sshd (sudo systemctl reload ssh, or sshd on RHEL-like systems)"
        % value
    )


def test_the_match_spec_comes_from_ssh_connection():
    # A Match block for this user turns forwarding off; the global setting says yes.
    table = healthy()
    table["commands"][(SUDO, "-n", SSHD, "-T", "-C", SPEC)] = sshd_t(allowtcpforwarding="no")
    table["commands"][(SUDO, "-n", SSHD, "-T")] = sshd_t()
    check, played = forwarding(table)
    assert check["status"] == "failed"
    assert (SUDO, "-n", SSHD, "-T") not in played.calls


def test_failing_match_spec_falls_back_to_the_global_settings():
    table = healthy()
    # What an sshd that does not know laddr/lport says.
    table["commands"][(SUDO, "-n", SSHD, "-T", "-C", SPEC)] = (
        1,
        "",
        "Invalid test mode specification laddr=10.0.0.5\n",
    )
    table["commands"][(SUDO, "-n", SSHD, "-T")] = sshd_t()
    check, played = forwarding(table)
    assert check["status"] == "ok"
    assert check["message"] == (
        "sshd allows TCP forwarding (AllowTcpForwarding yes, global setting: Match blocks not "
        "evaluated, sshd -T -C failed)"
    )
    assert played.calls[-2:] == [
        (SUDO, "-n", SSHD, "-T", "-C", SPEC),
        (SUDO, "-n", SSHD, "-T"),
    ]


def test_without_ssh_connection_the_global_settings_are_read():
    table = healthy()
    table["commands"][(SUDO, "-n", SSHD, "-T")] = sshd_t(allowtcpforwarding="no")
    played = Played(env={}, **table)
    check = by_name(run(played))["tcp_forwarding"]
    assert check["status"] == "failed"
    assert (
        "(AllowTcpForwarding no, global setting: Match blocks not evaluated, no SSH_CONNECTION "
        "to evaluate them with)" in check["message"]
    )
    assert not any("-C" in argv for argv in played.calls)


def test_sshd_that_cannot_print_its_settings():
    table = healthy()
    missing = (255, "", "Missing privilege separation directory: /run/sshd\n")
    table["commands"][(SUDO, "-n", SSHD, "-T", "-C", SPEC)] = missing
    table["commands"][(SUDO, "-n", SSHD, "-T")] = missing
    check, _played = forwarding(table)
    assert check["status"] == "failed"
    assert check["message"] == (
        "cannot read sshd's effective settings (sshd -T -C: Missing privilege separation "
        "directory: /run/sshd, sshd -T: Missing privilege separation directory: /run/sshd): "
        "check /etc/ssh/sshd_config with sudo sshd -t and fix what it reports"
    )


def test_disable_forwarding_and_permit_open_none_are_reported_too():
    table = healthy()
    table["commands"][(SUDO, "-n", SSHD, "-T", "-C", SPEC)] = sshd_t(
        disableforwarding="yes", permitopen="none"
    )
    check, _played = forwarding(table)
    assert check["status"] == "failed"
    message = check["message"]
    assert "sshd has DisableForwarding yes (for user ubuntu connecting from 10.0.0.1)" in message
    assert "set `DisableForwarding no`" in message
    assert "sshd has PermitOpen none" in message
    assert "set `PermitOpen any`" in message
    # AllowTcpForwarding itself is yes here, and not reported.
    assert "AllowTcpForwarding" not in message


def test_sshd_found_outside_path():
    table = healthy(on_path={"sudo": SUDO, "docker": DOCKER}, paths={"/usr/local/sbin/sshd"})
    table["commands"][(SUDO, "-n", "/usr/local/sbin/sshd", "-T", "-C", SPEC)] = sshd_t()
    check, _played = forwarding(table)
    assert check["status"] == "ok"


def test_no_sshd_to_ask():
    table = healthy(on_path={"sudo": SUDO, "docker": DOCKER})
    check, _played = forwarding(table)
    assert check["status"] == "failed"
    assert check["message"].startswith(
        "cannot find sshd (not on PATH, at /usr/sbin/sshd or at /usr/local/sbin/sshd)"
    )
    assert "leave tcp_forwarding out of checks" in check["message"]


def test_parse_sshd_settings_keeps_the_first_value_and_lowercases_keywords():
    settings = preflight.parse_sshd_settings(
        "Port 22\nAllowTcpForwarding no\nallowtcpforwarding yes\n"
    )
    assert settings == {"port": "22", "allowtcpforwarding": "no"}


def test_match_spec():
    assert preflight.match_spec("u", SSH_CONNECTION) == (
        "user=u,host=10.0.0.1,addr=10.0.0.1,laddr=10.0.0.5,lport=22"
    )
    assert preflight.match_spec("u", "fe80::1 1 fe80::2 2222") == (
        "user=u,host=fe80::1,addr=fe80::1,laddr=fe80::2,lport=2222"
    )
    assert preflight.match_spec("u", "10.0.0.1") == "user=u,host=10.0.0.1,addr=10.0.0.1"
    assert preflight.match_spec("u", "") is None
    assert preflight.match_spec("u", None) is None


# peers


def peers_host(connect=None):
    return Played(euid=0, connect=connect or preflight.tcp_connect)


def test_reachable_and_unreachable_peers_over_real_sockets(listener, closed_port):
    played = peers_host()
    peers = [
        {"name": "node-0", "address": "127.0.0.1", "port": 1},
        {"name": "node-1", "address": "127.0.0.1", "port": listener},
        {"name": "node-2", "address": "127.0.0.1", "port": closed_port},
    ]
    result = run(played, checks=["peers"], peers=peers, self_name="node-0")
    assert played.calls == []
    assert result["peers"] == [
        {
            "name": "node-1",
            "address": "127.0.0.1",
            "port": listener,
            "reachable": True,
            "error": None,
        },
        {
            "name": "node-2",
            "address": "127.0.0.1",
            "port": closed_port,
            "reachable": False,
            "error": "connection refused",
        },
    ]
    check = by_name(result)["peers"]
    assert check["status"] == "failed"
    assert check["message"] == (
        "cannot reach node-2 at 127.0.0.1:%d (connection refused); nodes of a cluster fleet must "
        "reach each other's internal IPs: check routing and firewalls between the hosts, or set "
        "internal_ip / network in ssh_config" % closed_port
    )
    assert result["ok"] is False


def test_all_peers_reachable(listener):
    peers = [
        {"name": "a", "address": "127.0.0.1", "port": listener},
        {"address": "localhost", "port": listener},
    ]
    result = run(peers_host(), checks=["peers"], peers=peers)
    assert result["ok"] is True
    assert by_name(result)["peers"]["message"] == "reached all 2 other nodes (a, localhost)"
    assert [p["name"] for p in result["peers"]] == ["a", "localhost"]


def test_every_unreachable_peer_is_named_with_its_reason():
    errors = {
        "10.0.0.6": TimeoutError("timed out"),
        "10.0.0.7": socket.gaierror(-2, "Name or service not known"),
        "fd00::8": OSError(113, "No route to host"),
    }

    def connect(address, port, timeout):
        assert timeout == 1.5
        raise errors[address]

    peers = [
        {"name": "n6", "address": "10.0.0.6"},
        {"name": "n7", "address": "10.0.0.7", "port": 2222},
        {"name": "n8", "address": "fd00::8"},
    ]
    result = run(peers_host(connect), checks=["peers"], peers=peers, peer_timeout=1.5)
    assert by_name(result)["peers"]["message"].startswith(
        "cannot reach n6 at 10.0.0.6:22 (timed out after 1.5 s), "
        "cannot reach n7 at 10.0.0.7:2222 (cannot resolve the address: Name or service not known), "
        "cannot reach n8 at [fd00::8]:22 (No route to host); nodes of a cluster fleet"
    )


def test_peers_are_tried_at_the_same_time():
    """All 64 tries are open at one moment: each waits at a barrier until the last one has
    begun. Tried one after another (or fewer at a time), the barrier breaks after its timeout
    and the count of tries open together stays below 64. No clock is read: a busy machine
    only makes the threads slower to start, never the answer different."""
    lock = threading.Lock()
    state = {"now": 0, "most": 0}
    together = threading.Barrier(64, timeout=10)

    def connect(address, port, timeout):
        with lock:
            state["now"] += 1
            state["most"] = max(state["most"], state["now"])
        try:
            together.wait()
        except threading.BrokenBarrierError:
            pass
        with lock:
            state["now"] -= 1
        raise ConnectionRefusedError(111, "Connection refused")   # not tried again

    peers = [{"name": "n%d" % i, "address": "10.0.1.%d" % i} for i in range(64)]
    result = run(peers_host(connect), checks=["peers"], peers=peers, peer_timeout=0.2)
    assert state["most"] == 64 and not together.broken
    assert [p["name"] for p in result["peers"]] == ["n%d" % i for i in range(64)]
    assert all(p["error"] == "connection refused" for p in result["peers"])


def test_a_peer_lost_in_the_burst_is_tried_again_before_it_is_unreachable():
    """Timeouts and missing routes get a second try (a few at a time); refusals do not."""
    tries = {}
    lock = threading.Lock()

    def connect(address, port, timeout):
        with lock:
            tries[address] = tries.get(address, 0) + 1
            count = tries[address]
        if address == "10.0.0.1" and count == 1:
            raise TimeoutError("timed out")          # lost once: reachable on the retry
        if address == "10.0.0.2" and count == 1:
            raise OSError(113, "No route to host")  # no ARP answer in the burst
        if address == "10.0.0.3":
            raise TimeoutError("timed out")          # down: unreachable after two tries
        if address == "10.0.0.4":
            raise ConnectionRefusedError(111, "Connection refused")

    peers = [{"name": "n%d" % i, "address": "10.0.0.%d" % i} for i in range(5)]
    result = run(peers_host(connect), checks=["peers"], peers=peers, peer_timeout=0.1)
    assert [(p["name"], p["reachable"], p["error"]) for p in result["peers"]] == [
        ("n0", True, None), ("n1", True, None), ("n2", True, None),
        ("n3", False, "timed out after 0.1 s"), ("n4", False, "connection refused")]
    assert tries == {"10.0.0.0": 1, "10.0.0.1": 2, "10.0.0.2": 2, "10.0.0.3": 2,
                     "10.0.0.4": 1}


def test_peers_join_the_default_checks_only_when_given(listener):
    played = Played(**healthy())
    assert "peers" not in by_name(run(played))
    played = Played(**healthy(), connect=preflight.tcp_connect)
    result = run(played, peers=[{"address": "127.0.0.1", "port": listener}])
    assert [c["name"] for c in result["checks"]][-1] == "peers"
    assert result["ok"] is True


def test_peers_left_out_of_the_checks_are_tried_and_reported_not_judged(listener, closed_port):
    """What playbooks/fleet.yml's first request does with the last apply's addresses."""
    peers = [{"name": "me", "address": "127.0.0.1", "port": listener},
             {"name": "up", "address": "127.0.0.1", "port": listener},
             {"name": "down", "address": "127.0.0.1", "port": closed_port}]
    result = run(peers_host(), checks=["sudo"], peers=peers, self_name="me")
    assert [c["name"] for c in result["checks"]] == ["sudo"]
    assert result["ok"] is True   # an unreachable peer fails nothing here
    assert [(p["name"], p["reachable"]) for p in result["peers"]] == [("up", True),
                                                                      ("down", False)]


def test_peers_reached_tells_whether_a_peers_check_would_pass_without_asking_again():
    probed = [{"name": "n-1", "address": "10.0.0.6", "port": 22, "reachable": True},
              {"name": "n-2", "address": "10.0.0.7", "port": 22, "reachable": True},
              {"name": "n-3", "address": "10.0.0.8", "port": 22, "reachable": False}]
    ready = [{"name": "n-0", "address": "10.0.0.5"},   # this host: left out
             {"name": "n-1", "address": "10.0.0.6"}, {"name": "n-2", "address": "10.0.0.7"}]
    assert preflight.peers_reached(probed, ready, "n-0") is True
    # A ready node that was not reached, was not tried, or moved: ask again.
    assert preflight.peers_reached(probed, ready + [{"address": "10.0.0.8"}], "n-0") is False
    assert preflight.peers_reached(probed, ready + [{"address": "10.0.0.9"}], "n-0") is False
    moved = [dict(p, address="10.0.1.6") if p["name"] == "n-1" else p for p in ready]
    assert preflight.peers_reached(probed, moved, "n-0") is False
    assert preflight.peers_reached(probed, [{"address": "10.0.0.6", "port": 2222}]) is False
    # Without this host among them, it is not left out.
    assert preflight.peers_reached(probed, ready) is False
    # No other ready node: the check would pass with nothing to reach.
    assert preflight.peers_reached([], [{"name": "n-0", "address": "10.0.0.5"}], "n-0") is True
    with pytest.raises(preflight.PreflightError, match="address is required"):
        preflight.peers_reached(probed, [{"name": "n-1"}])


@pytest.mark.parametrize("peers", [[], [{"name": "me", "address": "10.0.0.5"}]])
def test_peers_check_with_no_other_node_passes(peers):
    result = run(peers_host(), checks=["peers"], peers=peers, self_name="me")
    assert result["checks"] == [
        {"name": "peers", "status": "ok", "message": "no other nodes to reach"}
    ]


@pytest.mark.parametrize(
    "peers, message",
    [
        ([{"name": "n1"}], "peers[0]: address is required"),
        ([{"address": " "}], "peers[0]: address is required"),
        (
            [{"address": "10.0.0.1", "port": 0}],
            "peers[0] (10.0.0.1): port must be a whole number from 1 to 65535, got 0",
        ),
        (
            [{"address": "10.0.0.1"}, {"address": "h", "port": "22"}],
            "peers[1] (h): port must be a whole number",
        ),
        (["10.0.0.1"], "peers[0] must be a dict with name, address and port"),
        ("10.0.0.1", "peers must be a list"),
    ],
)
def test_bad_peers_are_refused(peers, message):
    with pytest.raises(PreflightError) as info:
        run(peers_host(), checks=["peers"], peers=peers)
    assert message in str(info.value)


@pytest.mark.parametrize("timeout", [0, -1, "5", True, float("nan"), float("inf")])
def test_bad_peer_timeout_is_refused(timeout):
    with pytest.raises(PreflightError, match="peer_timeout must be a number of seconds above 0"):
        run(peers_host(), checks=["peers"], peer_timeout=timeout)


# choosing checks, the overall result


def test_unknown_checks_are_refused():
    with pytest.raises(PreflightError) as info:
        run(Played(**healthy()), checks=["docker", "gpu", "disk"])
    assert str(info.value) == (
        "unknown checks gpu, disk in checks: choose from sudo, docker, nvidia_container_toolkit, "
        "tcp_forwarding, peers"
    )
    with pytest.raises(PreflightError, match="checks must be a list"):
        run(Played(**healthy()), checks="docker")


def test_checks_run_in_their_own_order_whatever_the_order_asked():
    result = run(Played(**healthy()), checks=["tcp_forwarding", "docker", "sudo"])
    assert [c["name"] for c in result["checks"]] == ["sudo", "docker", "tcp_forwarding"]


def test_failure_message_joins_every_failed_check(closed_port):
    table = healthy(on_path={"sudo": SUDO, "sshd": SSHD}, connect=preflight.tcp_connect)
    table["commands"][(SUDO, "-n", SSHD, "-T", "-C", SPEC)] = sshd_t(allowtcpforwarding="no")
    result = run(
        Played(**table), peers=[{"name": "n2", "address": "127.0.0.1", "port": closed_port}]
    )
    failed = [c for c in result["checks"] if c["status"] == "failed"]
    assert [c["name"] for c in failed] == ["docker", "tcp_forwarding", "peers"]
    assert failure_message(result) == "preflight failed: " + "; ".join(c["message"] for c in failed)


def test_error_tail_takes_the_last_line_and_cuts_it():
    assert preflight.error_tail("", "first\nlast\n\n") == "last"
    assert preflight.error_tail(None, "") == ""
    long = preflight.error_tail("x" * 500)
    assert long == "x" * preflight.ERROR_LIMIT + "..."


def test_an_unknown_forwarding_value_fails():
    table = healthy()
    table["commands"][(SUDO, "-n", SSHD, "-T", "-C", SPEC)] = sshd_t(allowtcpforwarding="maybe")
    check, _played = forwarding(table)
    assert check["status"] == "failed"
    assert check["message"].startswith('sshd reports an unknown AllowTcpForwarding value "maybe"')


def test_sshd_output_without_the_setting_counts_as_unreadable():
    table = healthy()
    table["commands"][(SUDO, "-n", SSHD, "-T", "-C", SPEC)] = (0, "port 22\n", "")
    table["commands"][(SUDO, "-n", SSHD, "-T")] = (0, "", "")
    check, _played = forwarding(table)
    assert check["status"] == "failed"
    assert check["message"].startswith(
        "cannot read sshd's effective settings (sshd -T -C: printed no allowtcpforwarding line, "
        "sshd -T: printed no allowtcpforwarding line)"
    )


def test_fleet_yml_first_request_runs_the_default_checks():
    """playbooks/fleet.yml names its first request's checks (so that the last apply's peers
    are tried, not judged): they must stay preflight's defaults."""
    import pathlib

    import yaml

    play = yaml.safe_load((pathlib.Path(__file__).parents[3] / "playbooks" / "fleet.yml")
                          .read_text())[1]
    block = play["tasks"][0]["block"]
    first = [t for t in block if "gpufleet.cluster.preflight" in t][0]
    assert first["gpufleet.cluster.preflight"]["checks"] == preflight.select_checks(None, [])
