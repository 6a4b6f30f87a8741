# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Host keys of SSH fleet hosts: trusted on first use, refused once they change.

gpufleet did not make an SSH fleet's hosts, so it cannot know their keys in advance. The first
connection to a host records its key in the fleet's own known_hosts file
(``<state dir>/fleets/<fleet>/known_hosts``, OpenSSH's ``StrictHostKeyChecking=accept-new``);
every later connection, whichever way it goes (the gpufleet command, gpufleet.api, a playbook
with the inventory plugin, the task runner's own SSH), must present that key. When a host
presents another key OpenSSH refuses it, and this module turns OpenSSH's refusal into one line
that names the host, its fleet and the command that accepts the new key deliberately.
"""

from __future__ import annotations

import shlex

# What OpenSSH prints when a recorded key no longer matches (with any log level but QUIET the
# banner; always the last line).
_REFUSALS = (
    "REMOTE HOST IDENTIFICATION HAS CHANGED",
    "has changed and you have requested strict checking",
    "Host key verification failed",
)

# How a message of this module starts: later layers (the fleet report) pass it on as it is.
LEAD = "the SSH host key of "


def refused(text: str) -> bool:
    """Whether OpenSSH's output ``text`` says it refused a host's key."""
    text = str(text or "")
    return any(marker in text for marker in _REFUSALS)


def is_message(text: object) -> bool:
    """Whether ``text`` holds a message made by ``changed_message``."""
    return LEAD in str(text or "") and "ssh-keygen -R" in str(text or "")


def known_hosts_entry(hostname: str, port: int) -> str:
    """How known_hosts names a host: ``host`` on port 22, ``[host]:port`` on another."""
    port = int(port or 22)
    return hostname if port == 22 else "[%s]:%d" % (hostname, port)


def accept_command(hostname: str, port: int, known_hosts: str | None) -> str:
    """The command that forgets a host's recorded key, so the next connection records the new
    one (what a user runs once they know why the key changed)."""
    argv = ["ssh-keygen", "-R", known_hosts_entry(hostname, port)]
    if known_hosts:
        argv += ["-f", known_hosts]
    return " ".join(shlex.quote(word) for word in argv)


def changed_message(instance, known_hosts):
    """One line for a host whose key is not the one recorded: which host of which fleet, that
    nothing was done on it, and how to accept its new key.

    ``instance`` is an instance record (``name``, ``fleet``, ``hostname``, ``port``, ``user``);
    ``known_hosts`` the fleet's known_hosts file."""
    hostname = instance.get("hostname")
    port = int(instance.get("port") or 22)
    where = "%s:%d" % (hostname, port)
    if instance.get("user"):
        where = "%s@%s" % (instance["user"], where)
    whose = "instance %s of fleet %s" % (instance.get("name"), instance.get("fleet"))
    return (
        "%s%s (%s) has changed since it was first recorded in %s, so gpufleet refuses to "
        "connect to it: it may not be the same machine. If you know why the key changed (the "
        "host was reinstalled or its keys regenerated), accept the new key with: %s (the next "
        "connection records the key the host has now)"
        % (LEAD, where, whose, known_hosts or "the fleet's known_hosts",
           accept_command(hostname, port, known_hosts)))


def known_hosts_of(common_args: str | None) -> str | None:
    """The ``UserKnownHostsFile`` that ``ansible_ssh_common_args`` (records.ssh_common_args)
    name for the host itself (not its jump host's ProxyCommand), or None."""
    try:
        words = shlex.split(str(common_args or ""))
    except ValueError:
        return None
    for index, word in enumerate(words):
        if word == "-o" and index + 1 < len(words):
            key, _sep, value = words[index + 1].partition("=")
            if key.lower() == "userknownhostsfile" and value:
                return value
    return None
