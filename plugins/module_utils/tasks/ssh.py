# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Commands on fleet hosts over OpenSSH, with the connection settings of their instance records.

The task runner talks to every node of a run many times (start, then a status poll each second,
logs, stop), so it keeps one multiplexed OpenSSH connection per host (``ControlMaster``) instead
of paying a new handshake each time, the way ansible.posix.synchronize drives rsync over the
host's own SSH settings. Host keys, the jump host and the key are exactly those the inventory
gives Ansible (``fleets.records.ssh_common_args``).
"""

from __future__ import annotations

import hashlib
import json
import os
import shlex
import subprocess
import tempfile
from concurrent.futures import ThreadPoolExecutor

from ..core.errors import GpufleetError
from ..core.files import module_source
from ..fleets import hostkeys, records, state

# A node's socket path must fit a Unix socket name (about 100 bytes): a short per-user folder
# and OpenSSH's hash of the connection (%C).
_CONTROL_DIR = os.path.join(tempfile.gettempdir(), "gpufleet-ssh-%d" % os.getuid())
CONTROL_PERSIST = 120


class NodeError(GpufleetError):
    """A host could not be reached, or a command on it failed. ``host`` names it; ``silent``
    says that nothing was heard from it (SSH could not reach it, or no answer came in time),
    as opposed to a host that answered with an error."""

    def __init__(self, host, message, silent=False):
        super(NodeError, self).__init__("%s: %s" % (host, message))
        self.host = host
        self.detail = message
        self.silent = silent


def parallel(items, function, workers=32):
    """``{item: (result, error)}`` of ``function(item)`` for every item, all at once."""
    items = list(items)
    results = {}
    if not items:
        return results

    def one(item):
        try:
            return item, function(item), None
        except NodeError as exc:
            return item, None, exc

    with ThreadPoolExecutor(max_workers=min(workers, len(items))) as pool:
        for item, value, error in pool.map(one, items):
            results[item] = (value, error)
    return results


class Background(object):
    """``function(*args)`` in a thread of its own, started at once; ``result()`` waits for it
    (and raises what it raised)."""

    def __init__(self, function, *args):
        pool = ThreadPoolExecutor(max_workers=1)
        self._future = pool.submit(function, *args)
        pool.shutdown(wait=False)

    def result(self):
        return self._future.result()


def control_dir():
    if not os.path.isdir(_CONTROL_DIR):
        os.makedirs(_CONTROL_DIR, mode=0o700, exist_ok=True)
    return _CONTROL_DIR


# Computed once per process; threads may race to fill it, each with the same value (a dict
# entry is set whole, so a reader never sees a half-made one).
_HOST_SOURCE: dict = {}


def host_source():
    """What runs on a host for each request, from tasks.hostside: engineside (the Docker engine
    and the helper's error), nodeside, then its parts
    volumeside (network volumes) and metricside (a run's metrics), then booking (claims and the
    queue), mirrorside (copies of another host's queue entries), replicaside (a service's
    replicas after their start), healthside (the GPU health probe), logside (the kept output), indexside (the run index), usageside (the usage
    records), admitside (per-user limits), memberside (the fleet's members), runendside (a
    run's end judged from its jobs'), eventside (the event record), notifyside (webhooks and the host's tick), scheduleside (schedules),
    proxyconf, acmeside and proxyside (the proxy of services: in a fleet or on a gateway, whose
    certificates acmeside obtains), in one namespace. Their own sources are sent, so nothing is
    installed on the host and a new controller version never meets an old helper."""
    if "source" not in _HOST_SOURCE:
        from .hostside import (acmeside, admitside, booking, engineside, eventside, healthside,
                               indexside, logside, memberside, metricside, mirrorside, nodeside,
                               notifyside, proxyconf, proxyside, replicaside, runendside,
                               scheduleside, usageside, volumeside)

        _HOST_SOURCE["source"] = b"\n".join((module_source(vars(engineside)),
                                             module_source(vars(nodeside)),
                                             module_source(vars(volumeside)),
                                             module_source(vars(metricside)),
                                             module_source(vars(booking)),
                                             module_source(vars(mirrorside)),
                                             module_source(vars(replicaside)),
                                             module_source(vars(healthside)),
                                             module_source(vars(logside)),
                                             module_source(vars(indexside)),
                                             module_source(vars(usageside)),
                                             module_source(vars(admitside)),
                                             module_source(vars(memberside)),
                                             module_source(vars(runendside)),
                                             module_source(vars(eventside)),
                                             module_source(vars(notifyside)),
                                             module_source(vars(scheduleside)),
                                             module_source(vars(proxyconf)),
                                             module_source(vars(acmeside)),
                                             module_source(vars(proxyside))))
    return _HOST_SOURCE["source"]


def host_source_digest():
    """What the host keeps the compiled helper under (tasks.hostside.bootstrap): 24 hex
    digits of the source's SHA-256."""
    if "digest" not in _HOST_SOURCE:
        _HOST_SOURCE["digest"] = hashlib.sha256(host_source()).hexdigest()[:24]
    return _HOST_SOURCE["digest"]


def helper_command(sudo=""):
    """The command line a request runs on a host: the bootstrap under ``python3 -S`` (the
    helper needs the standard library only, so site's start-up work is skipped), with the
    source's digest as its argument."""
    from .hostside import bootstrap

    return "%spython3 -S -c %s %s" % (sudo, shlex.quote(bootstrap.BOOTSTRAP),
                                      host_source_digest())


def missing_key(instance, root=None):
    """Why the host of ``instance`` (an instance record) cannot be asked for want of its key,
    or None. A backend fleet's key lives in the state dir (fleets.state.key_path), so a state
    dir that was moved or removed, or another one named by $GPUFLEET_STATE_DIR, leaves its
    hosts out of reach: the message names the key, the state dir and the variable."""
    key = instance.get("identity_file")
    if not key or os.path.isfile(key):
        return None
    fleet = instance.get("fleet")
    if fleet and root and os.path.abspath(key) == os.path.abspath(state.key_path(root, fleet)):
        if not os.path.isdir(root):
            where = "the state dir %s does not exist" % root
        else:
            where = "the state dir %s has no key for fleet %s" % (root, fleet)
        return ("cannot be checked: its SSH key %s is missing (%s; it was moved or removed, "
                "or $%s names another one: point $%s at the state dir this fleet was made "
                "from)" % (key, where, state.ENV, state.ENV))
    if fleet and os.path.basename(key) == "id_ed25519" and os.path.basename(
            os.path.dirname(os.path.dirname(key))) == "fleets":
        state_root = os.path.dirname(os.path.dirname(os.path.dirname(key)))
        return ("cannot be checked: its SSH key %s is missing (the state dir %s that holds "
                "it was moved or removed; $%s must name the state dir this fleet was made "
                "from)" % (key, state_root, state.ENV))
    return "cannot be checked: its SSH key %s does not exist on this controller" % key


class Node(object):
    """One host of a fleet, reached as its instance record says.

    ``instance`` is an instance record (fleets.records); ``root`` the state dir (for the SSH
    fleet's known_hosts). Commands that need root go through ``sudo -n`` unless the login user
    is root.
    """

    def __init__(self, instance, root=None, connect_timeout=20, runner=None):
        self.instance = instance
        self.name = instance["name"]
        self.root = root
        self.connect_timeout = connect_timeout
        self._runner = runner or subprocess.run
        self._known_hosts = None
        # A stand-in runner (tests) is not OpenSSH and needs no key file.
        self._needs_key = runner is None

    @property
    def sudo(self):
        return "" if self.instance.get("user") in ("root", None) else "sudo -n "

    def known_hosts(self):
        """The fleet's known_hosts of an SSH fleet host (its folder made, so that the first
        contact records the host's key), or None."""
        inst = self.instance
        if inst.get("backend") != "ssh" or not self.root:
            return None
        if self._known_hosts is None:
            self._known_hosts = state.ensure_known_hosts_dir(self.root, inst["fleet"])
        return self._known_hosts

    def base_argv(self):
        inst = self.instance
        known_hosts = self.known_hosts()
        argv = ["ssh", "-T", "-o", "BatchMode=yes",
                "-o", "ConnectTimeout=%d" % self.connect_timeout,
                "-o", "ServerAliveInterval=15", "-o", "ServerAliveCountMax=4",
                "-o", "ControlMaster=auto",
                # %C hashes user, host and port only: hosts behind different jump hosts may
                # share those, so the path also carries a hash of the connection settings.
                "-o", "ControlPath=%s/%s-%%C" % (control_dir(), self._settings_hash()),
                "-o", "ControlPersist=%d" % CONTROL_PERSIST,
                "-o", "LogLevel=ERROR"]
        argv += shlex.split(records.ssh_common_args(inst, known_hosts))
        if inst.get("identity_file"):
            argv += ["-i", inst["identity_file"]]
        argv += ["-p", str(inst.get("port") or 22)]
        target = inst["hostname"]
        if inst.get("user"):
            target = "%s@%s" % (inst["user"], target)
        return argv + [target]

    def missing_key(self):
        """Why this host cannot be asked at all, or None: its key file is not on this
        controller (no command tries a host it holds no key for)."""
        return missing_key(self.instance, self.root) if self._needs_key else None

    def _settings_hash(self):
        inst = self.instance
        text = "%s|%s|%s" % (inst.get("identity_file"), inst.get("proxy_jump"),
                             inst.get("fleet"))
        return hashlib.sha1(text.encode("utf-8")).hexdigest()[:8]

    def argv(self, command):
        return self.base_argv() + ["--", command]

    def run(self, command, data=None, timeout=None, what=None):
        """Run ``command`` (a shell line on the host); return ``(rc, stdout, stderr)`` as text.
        ``what`` names it in the message of a timeout (the command's start by default).

        rc 255 is OpenSSH's own failure (host unreachable, key refused...). A host whose key is
        not on this controller is not tried: NodeError says which file is missing.
        """
        missing = self.missing_key()
        if missing:
            # Not the host's silence (it was not tried): a run on it is not judged lost for it.
            raise NodeError(self.name, missing)
        try:
            proc = self._runner(
                self.argv(command), input=data, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                timeout=timeout, check=False,
            )
        except subprocess.TimeoutExpired as exc:
            raise NodeError(self.name, "no answer within %s s to: %s"
                            % (timeout, what or command[:200]), silent=True) from exc
        except OSError as exc:
            raise NodeError(self.name, "cannot run ssh on the controller: %s" % exc) from exc
        out = proc.stdout.decode("utf-8", "replace") if isinstance(proc.stdout, bytes) else (
            proc.stdout or "")
        err = proc.stderr.decode("utf-8", "replace") if isinstance(proc.stderr, bytes) else (
            proc.stderr or "")
        return proc.returncode, out, err

    def check(self, command, data=None, timeout=None):
        rc, out, err = self.run(command, data=data, timeout=timeout)
        if rc == 255:
            raise self._unreachable(err)
        if rc != 0:
            raise NodeError(self.name, "%s failed (exit %d): %s"
                            % (" ".join(command.split()[:3]), rc, (err or out).strip()[-1500:]))
        return out

    def _unreachable(self, err):
        """The error of OpenSSH's own failure (rc 255): nothing was heard from the host, or an
        SSH fleet host presented another key than the one recorded (refused, and said so)."""
        if self.instance.get("backend") == "ssh" and hostkeys.refused(err):
            return NodeError(self.name, hostkeys.changed_message(self.instance,
                                                                 self.known_hosts()))
        return NodeError(self.name, "unreachable over SSH: %s" % (err.strip() or "no answer"),
                         silent=True)

    def popen(self, command, **kwargs):
        """Start ``command`` on the host and return the Popen (for streams such as logs)."""
        missing = self.missing_key()
        if missing:
            raise NodeError(self.name, missing)
        return subprocess.Popen(self.argv(command), **kwargs)

    def call(self, op, payload=None, timeout=120):
        """Run one operation of the host helper (tasks.hostside) as root; return its answer.

        The helper's source travels on stdin with the request, so nothing is installed on the
        host and a new controller version never meets an old helper.
        """
        from .hostside import bootstrap

        request = json.dumps({"op": op, "payload": payload or {}}).encode("utf-8")
        data = host_source() + b"\n" + bootstrap.SEPARATOR + b"\n" + request
        rc, out, err = self.run(helper_command(self.sudo), data=data, timeout=timeout,
                                what="the %s request" % op)
        if rc == 255:
            raise self._unreachable(err)
        try:
            answer = json.loads(out.strip().splitlines()[-1]) if out.strip() else None
        except ValueError:
            answer = None
        if rc != 0 or not isinstance(answer, dict):
            detail = (err or out).strip()[-1500:]
            if "a password is required" in detail or "a terminal is required" in detail:
                detail = ("sudo asks for a password; gpufleet needs passwordless sudo on fleet "
                          "hosts (see docs/preflight.md)")
            elif "python3" in detail and "not found" in detail:
                detail = "python3 is not installed on the host; install it"
            raise NodeError(self.name, "%s failed: %s" % (op, detail or "no answer"))
        if answer.get("error"):
            raise NodeError(self.name, answer["error"])
        return answer

    def close(self):
        """End the shared connection (``ssh -O exit``); nothing happens when there is none."""
        argv = self.base_argv()
        argv = argv[:-1] + ["-O", "exit", argv[-1]]
        try:
            subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                           timeout=10, check=False)
        except (OSError, subprocess.TimeoutExpired):
            pass
