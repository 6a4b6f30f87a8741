# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Preflight of an SSH fleet host: what dstack needs from a host and only finds out by failing.

dstack asks four things of a host it adopts (passwordless sudo for the login user, a running
Docker engine, the NVIDIA Container Toolkit where there are NVIDIA GPUs, sshd allowing TCP
forwarding) and, for ``placement: cluster``, that the hosts reach each other. It checks none of
them up front. ``run_preflight`` checks them all on the host, read-only, and says for each what
is wrong and what to do. Used by gpufleet.cluster.preflight; described in docs/preflight.md.

Everything that touches the host goes through a ``Host``, the host facts' ``System`` (run a
command, find one, see whether a path exists) with the little preflight needs beyond it, so
tests can play any host:

    result = run_preflight(Host(run=run_command, which=which), peers=[...], self_name="n1")
    message = failure_message(result)   # None when every check passed

Pure Python; no Ansible imports.
"""

from __future__ import annotations

import json
import math
import os
import socket
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Iterable

from ..core.errors import GpufleetError
from .facts import System, matching_probe

SUDO = "sudo"
DOCKER = "docker"
NVIDIA_TOOLKIT = "nvidia_container_toolkit"
TCP_FORWARDING = "tcp_forwarding"
PEERS = "peers"

# Every check, in the order they run and are reported.
CHECKS = (SUDO, DOCKER, NVIDIA_TOOLKIT, TCP_FORWARDING, PEERS)
# Checks that run commands with sudo when the module does not run as root.
NEEDS_SUDO = (DOCKER, NVIDIA_TOOLKIT, TCP_FORWARDING)

OK = "ok"
FAILED = "failed"
SKIPPED = "skipped"

# Where commands are looked for when they are not on PATH (a non-interactive SSH session often
# has a short PATH).
SUDO_DIRS = ("/usr/bin", "/bin", "/usr/local/bin")
DOCKER_DIRS = ("/usr/bin", "/usr/local/bin")
SSHD_DIRS = ("/usr/sbin", "/usr/local/sbin")
NVIDIA_TOOLS = ("nvidia-ctk", "nvidia-container-cli")

GPU_VENDORS = ("nvidia", "amd", "intel", "tenstorrent", "none")
DEFAULT_PEER_PORT = 22
DEFAULT_PEER_TIMEOUT = 5
MAX_PEER_THREADS = 64
# Peers tried a second time (probe_peers) are tried this many at a time.
RETRY_PEER_THREADS = 8

# How much of a command's error output a message quotes.
ERROR_LIMIT = 200

# AllowTcpForwarding values (as sshd -T prints them, and as written in sshd_config) that let a
# client open local forwards, which is what dstack's tunnels are.
FORWARDING_ALLOWED = ("yes", "all", "local")
FORWARDING_DENIED = ("no", "remote")


class PreflightError(GpufleetError):
    """Options that cannot be used (an unknown check, a peer without an address...).

    Not raised for a host that fails a check: that is a result, not an error.
    """


def tcp_connect(address: str, port: int, timeout: float) -> None:
    """Open a TCP connection to address:port within ``timeout`` seconds and close it again.

    Raises OSError (socket.timeout, ConnectionRefusedError, socket.gaierror...) when it cannot.
    """
    sock = socket.create_connection((address, port), timeout=timeout)
    sock.close()


def _login_name(euid, env):
    try:
        import pwd  # pylint: disable=import-outside-toplevel

        return pwd.getpwuid(euid).pw_name
    except (ImportError, KeyError):
        return env.get("USER") or env.get("LOGNAME") or "uid %d" % euid


class Host(System):
    """The host being checked: a ``System`` (``run``, ``which``, ``exists``) plus what only
    preflight asks of a host.

    ``connect(address, port, timeout)`` opens and closes a TCP connection or raises OSError;
    ``euid`` is the user id the checks run as, ``user`` its login name and ``env`` the
    environment (SSH_CONNECTION is read from it).
    """

    def __init__(self, run, which, connect=None, euid=None, env=None, user=None):
        System.__init__(self, run, which)
        self.connect = connect if connect is not None else tcp_connect
        self.euid = os.geteuid() if euid is None else euid
        self.env = dict(os.environ) if env is None else env
        self.user = user if user is not None else _login_name(self.euid, self.env)

    @property
    def is_root(self) -> bool:
        return self.euid == 0


def find_command(host: Host, name: str, dirs: Iterable[str]) -> str | None:
    """The path of command ``name``: on PATH, else the first of ``dirs`` holding it; or None."""
    found = host.which(name)
    if found:
        return found
    for directory in dirs:
        path = os.path.join(directory, name)
        if host.exists(path):
            return path
    return None


def error_tail(*texts: str | None) -> str:
    """The last non-empty line of the first text that has one, cut to ERROR_LIMIT characters."""
    for text in texts:
        lines = [line.strip() for line in (text or "").splitlines() if line.strip()]
        if lines:
            line = lines[-1]
            if len(line) > ERROR_LIMIT:
                line = line[:ERROR_LIMIT] + "..."
            return line
    return ""


def check_result(name: str, status: str, message: str) -> dict[str, str]:
    return {"name": name, "status": status, "message": message}


def _sudoers_hint(user):
    return "add `%s ALL=(ALL) NOPASSWD:ALL` in /etc/sudoers.d/%s (visudo -f /etc/sudoers.d/%s)" % (
        user,
        user,
        user,
    )


def check_sudo(host: Host) -> tuple[dict[str, str], list[str] | None]:
    """(result, command prefix for privileged commands or None when there is none)."""
    if host.is_root:
        return check_result(SUDO, OK, "running as root (uid 0): sudo is not needed"), []
    user = host.user
    sudo = find_command(host, "sudo", SUDO_DIRS)
    if sudo is None:
        return (
            check_result(
                SUDO,
                FAILED,
                "sudo is not installed and the login user %s is not root: install sudo, then %s"
                % (user, _sudoers_hint(user)),
            ),
            None,
        )
    rc, out, err = host.run([sudo, "-n", "true"])
    if rc == 0:
        return check_result(SUDO, OK, "%s has passwordless sudo" % user), [sudo, "-n"]
    reason = error_tail(err, out) or "exit status %d" % rc
    if reason.startswith("sudo: "):
        reason = reason.split(": ", 1)[1]
    return (
        check_result(
            SUDO,
            FAILED,
            "the login user %s has no passwordless sudo (sudo -n true: %s), which dstack needs "
            "to set the host up: %s" % (user, reason, _sudoers_hint(user)),
        ),
        None,
    )


def parse_docker_info(text: str) -> dict[str, Any] | None:
    """The JSON object ``docker info --format '{{json .}}'`` printed, or None if it is not one."""
    try:
        info = json.loads(text.strip())
    except ValueError:
        return None
    return info if isinstance(info, dict) else None


def docker_summary(info: dict[str, Any]) -> dict[str, Any]:
    """What the preflight reports about a running engine, from docker info's JSON."""
    runtimes = info.get("Runtimes") or {}
    return {
        "version": info.get("ServerVersion"),
        "runtimes": sorted(runtimes) if isinstance(runtimes, dict) else [],
        "default_runtime": info.get("DefaultRuntime") or None,
        "root_dir": info.get("DockerRootDir") or None,
    }


def check_docker(host: Host,
                 prefix: list[str]) -> tuple[dict[str, str], dict[str, Any] | None]:
    """(result, docker summary or None)."""
    docker = find_command(host, "docker", DOCKER_DIRS)
    if docker is None:
        return (
            check_result(
                DOCKER,
                FAILED,
                "Docker is not installed (no docker command on PATH, in /usr/bin or in "
                "/usr/local/bin), and dstack runs every job in a container: install Docker: "
                "https://docs.docker.com/engine/install/ (or the distribution's docker.io "
                "package), then start it: sudo systemctl enable --now docker",
            ),
            None,
        )
    rc, out, err = host.run(prefix + [docker, "info", "--format", "{{json .}}"])
    info = parse_docker_info(out)
    if rc == 0 and info is None:
        return (
            check_result(
                DOCKER,
                FAILED,
                "%s info printed something that is not a JSON object: %s"
                % (docker, json.dumps(error_tail(out))),
            ),
            None,
        )
    server_errors = [str(e) for e in (info or {}).get("ServerErrors") or []]
    if rc != 0 or server_errors or not (info or {}).get("ServerVersion"):
        reason = error_tail(err, "\n".join(server_errors), out) or "exit status %d" % rc
        return (
            check_result(
                DOCKER,
                FAILED,
                "Docker is installed (%s) but the engine is not running or cannot be reached "
                "(docker info: %s): start it: sudo systemctl start docker (and sudo systemctl "
                "enable docker to start it at boot), and read sudo journalctl -u docker if it "
                "does not stay up" % (docker, reason),
            ),
            None,
        )
    summary = docker_summary(info or {})   # a dict: a failed parse returned above
    return (
        check_result(
            DOCKER,
            OK,
            "Docker %s is running (runtimes: %s)"
            % (summary["version"], ", ".join(summary["runtimes"]) or "none listed"),
        ),
        summary,
    )


def nvidia_gpu(host: Host, gpu_vendor: str | None) -> tuple[bool, str]:
    """(whether the host has NVIDIA GPUs, how that was decided)."""
    if gpu_vendor:
        return gpu_vendor == "nvidia", "gpu_vendor: %s" % gpu_vendor
    vendor, paths = matching_probe(host.exists)
    if vendor == "nvidia":
        return True, "found %s" % " and ".join(paths)
    return False, "no /dev/nvidiactl"


def check_nvidia_toolkit(host: Host, gpu_vendor: str | None,
                         docker: dict[str, Any] | None) -> dict[str, str]:
    has_gpu, why = nvidia_gpu(host, gpu_vendor)
    if not has_gpu:
        return check_result(
            NVIDIA_TOOLKIT, OK, "no NVIDIA GPU (%s): the toolkit is not needed" % why
        )
    if docker and "nvidia" in docker["runtimes"]:
        return check_result(NVIDIA_TOOLKIT, OK, "Docker has the nvidia runtime")
    for tool in NVIDIA_TOOLS:
        path = find_command(host, tool, DOCKER_DIRS)
        if path:
            return check_result(NVIDIA_TOOLKIT, OK, "NVIDIA Container Toolkit found (%s)" % path)
    runtimes = (
        "Docker has no nvidia runtime (runtimes: %s) and " % ", ".join(docker["runtimes"])
        if docker
        else ""
    )
    return check_result(
        NVIDIA_TOOLKIT,
        FAILED,
        "the host has NVIDIA GPUs (%s) but not the NVIDIA Container Toolkit: %sneither "
        "nvidia-ctk nor nvidia-container-cli is on PATH, in /usr/bin or in /usr/local/bin, so "
        'containers would fail with \'could not select device driver "" with capabilities: '
        "[[gpu]]'. Install the NVIDIA Container Toolkit (package nvidia-container-toolkit, "
        "https://docs.nvidia.com/datacenter/cloud-native/container-toolkit/latest/"
        "install-guide.html), run `sudo nvidia-ctk runtime configure --runtime=docker` and "
        "restart Docker (sudo systemctl restart docker)" % (why, runtimes),
    )


def match_spec(user: str | None, ssh_connection: str | None) -> str | None:
    """The ``sshd -T -C`` connection spec for this SSH session, or None without SSH_CONNECTION.

    SSH_CONNECTION is "client-address client-port server-address server-port"; the client
    address stands for the host name too (sshd does so itself unless UseDNS is on).
    """
    parts = (ssh_connection or "").split()
    if not parts:
        return None
    fields = ["user=%s" % user, "host=%s" % parts[0], "addr=%s" % parts[0]]
    if len(parts) >= 4:
        fields += ["laddr=%s" % parts[2], "lport=%s" % parts[3]]
    return ",".join(fields)


def parse_sshd_settings(text: str) -> dict[str, str]:
    """sshd -T output ("keyword value" lines) as {keyword: value}; the first line of a keyword
    wins, as it does in sshd_config."""
    settings: dict[str, Any] = {}
    for line in text.splitlines():
        parts = line.strip().split(None, 1)
        if parts:
            settings.setdefault(parts[0].lower(), parts[1].strip() if len(parts) > 1 else "")
    return settings


def _reload_hint():
    return "then reload sshd (sudo systemctl reload ssh, or sshd on RHEL-like systems)"


def check_tcp_forwarding(host: Host, prefix: list[str]) -> dict[str, str]:
    sshd = find_command(host, "sshd", SSHD_DIRS)
    if sshd is None:
        return check_result(
            TCP_FORWARDING,
            FAILED,
            "cannot find sshd (not on PATH, at /usr/sbin/sshd or at /usr/local/sbin/sshd) to "
            "read whether it allows TCP forwarding, which dstack's tunnels to the host need: "
            "install OpenSSH's server, or leave tcp_forwarding out of checks if the host runs "
            "another SSH server that allows it",
        )
    connection = host.env.get("SSH_CONNECTION")
    spec = match_spec(host.user, connection)
    attempts: list[tuple[list[str], str | None]] = []
    if spec:
        client = connection.split()[0]
        attempts.append(
            (
                prefix + [sshd, "-T", "-C", spec],
                "for user %s connecting from %s" % (host.user, client),
            )
        )
    attempts.append((prefix + [sshd, "-T"], None))
    errors = []
    for argv, scope in attempts:
        rc, out, err = host.run(argv)
        settings = parse_sshd_settings(out) if rc == 0 else {}
        if "allowtcpforwarding" in settings:
            break
        if rc == 0:
            reason = "printed no allowtcpforwarding line"
        else:
            reason = error_tail(err, out) or "exit status %d" % rc
        errors.append("sshd -T%s: %s" % (" -C" if scope else "", reason))
    else:
        return check_result(
            TCP_FORWARDING,
            FAILED,
            "cannot read sshd's effective settings (%s): check /etc/ssh/sshd_config with "
            "sudo sshd -t and fix what it reports" % ", ".join(errors),
        )
    if scope is None:
        scope = "global setting: Match blocks not evaluated, %s" % (
            "sshd -T -C failed" if spec else "no SSH_CONNECTION to evaluate them with"
        )
    where = "in /etc/ssh/sshd_config (or in the Match block that applies to %s)" % host.user

    forwarding = settings["allowtcpforwarding"].lower()
    problems = []
    if settings.get("disableforwarding", "no").lower() == "yes":
        problems.append(
            "sshd has DisableForwarding yes (%s), which turns off all forwarding: set "
            "`DisableForwarding no` %s" % (scope, where)
        )
    if forwarding in FORWARDING_DENIED:
        problems.append(
            "sshd does not allow TCP forwarding (AllowTcpForwarding %s, %s), and dstack reaches "
            "the host through SSH local port forwarding: set `AllowTcpForwarding yes` %s"
            % (forwarding, scope, where)
        )
    elif forwarding not in FORWARDING_ALLOWED:
        problems.append(
            "sshd reports an unknown AllowTcpForwarding value %s (%s): set "
            "`AllowTcpForwarding yes` %s" % (json.dumps(forwarding), scope, where)
        )
    if settings.get("permitopen", "any").lower() == "none":
        problems.append(
            "sshd has PermitOpen none (%s), which refuses every forward: set `PermitOpen any` %s"
            % (scope, where)
        )
    if problems:
        return check_result(TCP_FORWARDING, FAILED, ", and ".join(problems) + ", " + _reload_hint())
    return check_result(
        TCP_FORWARDING,
        OK,
        "sshd allows TCP forwarding (AllowTcpForwarding %s, %s)" % (forwarding, scope),
    )


def normalize_peers(peers: Iterable[Any] | None,
                    self_name: str | None = None) -> list[dict[str, Any]]:
    """Peers as [{"name", "address", "port"}], leaving out the one named ``self_name``."""
    if peers is None:
        return []
    if not isinstance(peers, (list, tuple)):
        raise PreflightError("peers must be a list of {name, address, port}, got %r" % (peers,))
    result = []
    for index, peer in enumerate(peers):
        where = "peers[%d]" % index
        if not isinstance(peer, dict):
            raise PreflightError(
                "%s must be a dict with name, address and port, got %r" % (where, peer)
            )
        address = peer.get("address")
        if not isinstance(address, str) or not address.strip():
            raise PreflightError(
                "%s: address is required (the node's internal IP or host name), got %r"
                % (where, address)
            )
        address = address.strip()
        name = peer.get("name") or address
        port = peer.get("port")
        port = DEFAULT_PEER_PORT if port is None else port
        if isinstance(port, bool) or not isinstance(port, int) or not 0 < port < 65536:
            raise PreflightError(
                "%s (%s): port must be a whole number from 1 to 65535, got %r" % (where, name, port)
            )
        if self_name is not None and name == self_name:
            continue
        result.append({"name": str(name), "address": address, "port": port})
    return result


def _format_seconds(seconds):
    return ("%.3f" % seconds).rstrip("0").rstrip(".")


def connect_error(exc: OSError, timeout: float) -> str:
    """A short description of why a TCP connection failed."""
    # socket.timeout: the timeout given ran out (an alias of TimeoutError from Python 3.10 on);
    # TimeoutError: the kernel gave up (ETIMEDOUT).
    if isinstance(exc, (socket.timeout, TimeoutError)):
        return "timed out after %s s" % _format_seconds(timeout)
    if isinstance(exc, ConnectionRefusedError):
        return "connection refused"
    if isinstance(exc, socket.gaierror):
        return "cannot resolve the address: %s" % (exc.strerror or exc)
    return exc.strerror or str(exc) or type(exc).__name__


def _endpoint(address, port):
    return "[%s]:%d" % (address, port) if ":" in address else "%s:%d" % (address, port)


def probe_peer(host: Host, peer: dict[str, Any], timeout: float) -> dict[str, Any]:
    """The peer with ``reachable`` and ``error`` (None when reachable) added."""
    result = dict(peer, reachable=True, error=None)
    try:
        host.connect(peer["address"], peer["port"], timeout)
    except OSError as exc:
        result.update(reachable=False, error=connect_error(exc, timeout))
    return result


def probe_peers(host: Host, peers: list[dict[str, Any]], timeout: float) -> list[dict[str, Any]]:
    """Every peer probed at once (one thread each, up to MAX_PEER_THREADS), in input order.

    A peer that timed out or had no route is tried once more, a few at a time, before it is
    called unreachable: when every node of a large fleet checks every other at the same moment
    (N x N connections, and as many ARP requests at once), a SYN or an ARP answer lost in the
    burst is not a broken network. A refusal or a name that does not resolve is not retried."""
    if not peers:
        return []
    workers = min(MAX_PEER_THREADS, len(peers))
    with ThreadPoolExecutor(max_workers=workers) as pool:
        probed = list(pool.map(lambda peer: probe_peer(host, peer, timeout), peers))
    again = [i for i, p in enumerate(probed) if not p["reachable"] and _transient(p["error"])]
    if again:
        with ThreadPoolExecutor(max_workers=min(RETRY_PEER_THREADS, len(again))) as pool:
            retried = list(pool.map(lambda i: probe_peer(host, peers[i], timeout), again))
        for index, result in zip(again, retried):
            probed[index] = result
    return probed


def _transient(error):
    return error.startswith("timed out") or "No route to host" in error


def check_peers(probed: list[dict[str, Any]]) -> dict[str, str]:
    if not probed:
        return check_result(PEERS, OK, "no other nodes to reach")
    failed = [p for p in probed if not p["reachable"]]
    if not failed:
        return check_result(
            PEERS,
            OK,
            "reached all %d other nodes (%s)" % (len(probed), ", ".join(p["name"] for p in probed)),
        )
    return check_result(
        PEERS,
        FAILED,
        "%s; nodes of a cluster fleet must reach each other's internal IPs: check routing and "
        "firewalls between the hosts, or set internal_ip / network in ssh_config"
        % ", ".join(
            "cannot reach %s at %s (%s)"
            % (p["name"], _endpoint(p["address"], p["port"]), p["error"])
            for p in failed
        ),
    )


def select_checks(checks: Iterable[str] | None, peers: Any) -> list[str]:
    """The checks to run, in CHECKS order; all but ``peers`` by default, ``peers`` too when
    there are peers."""
    if checks is None:
        return [c for c in CHECKS if c != PEERS or peers]
    if isinstance(checks, str) or not isinstance(checks, (list, tuple)):
        raise PreflightError("checks must be a list of check names, got %r" % (checks,))
    unknown = [c for c in checks if c not in CHECKS]
    if unknown:
        raise PreflightError(
            "unknown check%s %s in checks: choose from %s"
            % ("s" if len(unknown) > 1 else "", ", ".join(map(str, unknown)), ", ".join(CHECKS))
        )
    return [c for c in CHECKS if c in checks]


def run_preflight(host: Host, checks: Iterable[str] | None = None,
                  peers: Iterable[Any] | None = None, self_name: str | None = None,
                  gpu_vendor: str | None = None,
                  peer_timeout: float = DEFAULT_PEER_TIMEOUT) -> dict[str, Any]:
    """Check the host; return {"ok", "checks", "docker", "peers"}.

    ``checks`` chooses checks (None: the default set). ``sudo`` runs as well whenever a chosen
    check needs it and the host is not checked as root; a check that needs sudo is ``skipped``
    when sudo failed. ``gpu_vendor`` (one of GPU_VENDORS) replaces detection from device paths.
    ``peers`` ({name, address, port}) are reached over TCP within ``peer_timeout`` seconds, all
    at once, except the one named ``self_name``; when ``checks`` leaves ``peers`` out, they are
    tried and reported but not judged.
    """
    if gpu_vendor is not None and gpu_vendor not in GPU_VENDORS:
        raise PreflightError(
            "gpu_vendor must be one of %s, got %r" % (", ".join(GPU_VENDORS), gpu_vendor)
        )
    if (
        isinstance(peer_timeout, bool)
        or not isinstance(peer_timeout, (int, float))
        or not math.isfinite(peer_timeout)
        or peer_timeout <= 0
    ):
        raise PreflightError(
            "peer_timeout must be a number of seconds above 0, got %r" % (peer_timeout,)
        )
    peer_list = normalize_peers(peers, self_name)
    chosen = select_checks(checks, peers)
    if not host.is_root and any(c in NEEDS_SUDO for c in chosen) and SUDO not in chosen:
        chosen.insert(0, SUDO)

    results = []
    prefix: list[str] | None = []
    docker = None
    probed = []
    if SUDO in chosen:
        result, prefix = check_sudo(host)
        results.append(result)
    for name in chosen:
        if name == SUDO:
            continue
        if prefix is None and name in NEEDS_SUDO:
            results.append(check_result(name, SKIPPED, "needs passwordless sudo"))
        elif name == DOCKER:
            result, docker = check_docker(host, prefix or [])   # not None: NEEDS_SUDO
            results.append(result)
        elif name == NVIDIA_TOOLKIT:
            results.append(check_nvidia_toolkit(host, gpu_vendor, docker))
        elif name == TCP_FORWARDING:
            results.append(check_tcp_forwarding(host, prefix or []))   # as above
        elif name == PEERS:
            probed = probe_peers(host, peer_list, float(peer_timeout))
            results.append(check_peers(probed))
    if peer_list and PEERS not in chosen:
        # Peers given while the chosen checks leave the check out: tried and reported only.
        probed = probe_peers(host, peer_list, float(peer_timeout))
    return {
        "ok": all(r["status"] == OK for r in results),
        "checks": results,
        "docker": docker,
        "peers": probed,
    }


def peers_reached(probed: list[dict[str, Any]], wanted: Iterable[Any] | None,
                  self_name: str | None = None) -> bool:
    """Whether ``probed`` (a preflight's ``peers``) shows every peer of ``wanted`` but the one
    named ``self_name`` reached at its address and port: then a peers check of ``wanted``
    would pass now, and need not be made again. A peer not tried there, or tried elsewhere,
    counts as not reached."""
    reached = set((p.get("address"), p.get("port")) for p in probed or ()
                  if isinstance(p, dict) and p.get("reachable") is True)
    return all((peer["address"], peer["port"]) in reached
               for peer in normalize_peers(wanted, self_name))


def failure_message(result: dict[str, Any]) -> str | None:
    """The one-line message for a failed preflight, or None when every check passed."""
    failed = [r["message"] for r in result["checks"] if r["status"] == FAILED]
    if result["ok"] or not failed:
        return None
    return "preflight failed: " + "; ".join(failed)
