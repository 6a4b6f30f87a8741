# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The SSH aliases of a run: which ``Host`` entries ``gpufleet attach`` writes.

As dstack does, a job is reached in two hops: ``<alias>-host`` is the instance, logged in to as
the fleet logs in (its user, key and host key policy, through ``<alias>-jump-host`` when the
fleet has a ``proxy_jump``); the job's alias is the container's sshd on port 10022, reached from
the instance (``localhost`` for a container on the host's network, else its bridge address),
as the run's user with the run's own key. ``RUN`` is the attached job (job 0 by default);
every job N also answers to ``RUN-N`` and to dstack's job name ``RUN-N-0``.

Pure Python: ``entries(run, jobs, key_file, known_hosts)`` returns the host blocks' aliases
and options.
"""

from __future__ import annotations

from typing import Any

from ..fleets.records import OWN_HOST_KEYS, host_key_options

CONTAINER_SSH_PORT = 10022


def login_user(user: str | None) -> str:
    """The user an SSH session logs in as: the name of the task's ``user`` (``name`` or
    ``name:group``), root for none or a numeric id (sshd needs a name)."""
    name = str(user or "").split(":", 1)[0]
    return "root" if not name or name.isdigit() else name


def _key(path):
    return [("IdentityFile", path), ("IdentitiesOnly", "yes")] if path else []


def _instance_entries(alias, instance, known_hosts):
    entries = []
    options = [("HostName", instance["hostname"]), ("Port", instance.get("port") or 22),
               ("User", instance.get("user") or "root")]
    options += _key(instance.get("identity_file"))
    options += host_key_options(instance.get("backend"), known_hosts)
    jump = instance.get("proxy_jump")
    if jump:
        entries.append(([alias + "-jump-host"], [
            ("HostName", jump["hostname"]), ("Port", jump.get("port") or 22),
            ("User", jump.get("user") or "root")] + _key(jump.get("identity_file")) +
            host_key_options("ssh", known_hosts)))
        options.append(("ProxyJump", alias + "-jump-host"))
    options.append(("LogLevel", "ERROR"))
    entries.append(([alias + "-host"], options))
    return entries


def entries(run: str, jobs: list[dict[str, Any]], key_file: str, known_hosts: str | None = None,
            attached: int = 0) -> list[tuple[list[str], list[tuple[str, str]]]]:
    """``[(aliases, options)]`` for every job of a run.

    ``jobs``: ``[{"job_num", "instance" (its instance record), "address" (the container seen
    from the instance), "user" (the task's user)}]``; ``key_file`` the run's private key on
    this controller; ``known_hosts`` an SSH fleet's known_hosts file; ``attached`` the job
    ``RUN`` names.
    """
    found = []
    for job in sorted(jobs, key=lambda j: j["job_num"]):
        num = job["job_num"]
        names = ["%s-%d" % (run, num), "%s-%d-0" % (run, num)]
        if num == attached:
            names.insert(0, run)
        primary = names[0]
        found += _instance_entries(primary, job["instance"], known_hosts)
        found.append((names, [
            ("HostName", job.get("address") or "localhost"),
            ("Port", CONTAINER_SSH_PORT),
            ("User", login_user(job.get("user"))),
        ] + _key(key_file) + list(OWN_HOST_KEYS) + [
            ("ProxyJump", primary + "-host"),
            ("LogLevel", "ERROR"),
        ]))
    return found
