# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Action plugin for gpufleet.cluster.preflight: with ``connect_timeout``, the host is tried
until it answers (a host just made, whose sshd is not up yet) and then checked, in the same
request: what ansible.builtin.wait_for_connection followed by the module did in two. A host
still unreachable when the time is up *fails* with ``reached: false`` and the last connection
error, so that a play's ``rescue`` can report it (an unreachable host skips ``rescue``).
Without it the module runs once, as any module does.

With ``retry_definite: false`` (an SSH fleet's hosts, which exist already) only a try that got
no answer in time is made again: a definite answer (connection refused, no route to the host,
a name that does not resolve, the key refused, a changed host key) fails at once, with
``reached: false`` and that answer, instead of being asked again until the time is up. A host
being made (``retry_definite: true``, the default) may refuse until its sshd is up.

An SSH fleet host whose key is not the one recorded is not tried again either: it fails at
once with one line that says how to accept the new key (fleets/hostkeys.py)."""

from __future__ import annotations

import time

from ansible.errors import AnsibleConnectionFailure, AnsibleError
from ansible.plugins.action import ActionBase

from ansible_collections.gpufleet.cluster.plugins.module_utils.fleets import hostkeys

MODULE = "gpufleet.cluster.preflight"
RETRY_SLEEP = 1.0
# What OpenSSH (and Ansible's ssh connection) says when the host, or the way to it, answered
# no: trying again within seconds gets the same answer.
DEFINITE = (
    "connection refused", "no route to host", "network is unreachable",
    "name or service not known", "could not resolve hostname", "nodename nor servname",
    "temporary failure in name resolution", "permission denied (publickey",
    "host key verification failed", "too many authentication failures",
    # Through a jump host (ProxyCommand ssh -W, quiet): the jump host answered that it could
    # not open the connection to the host, and the proxy closed the stream at once.
    "stdio forwarding failed", "connection closed by unknown port 65535",
)


def is_definite(error):
    """Whether a connection error is a definite answer, not a silence (see DEFINITE)."""
    text = str(error).lower()
    return any(words in text for words in DEFINITE)


class ActionModule(ActionBase):
    TRANSFERS_FILES = False
    _supports_check_mode = True
    _supports_async = True

    # Seconds between tries; tests make it shorter.
    retry_sleep = RETRY_SLEEP

    def run(self, tmp=None, task_vars=None):
        result = super(ActionModule, self).run(tmp, task_vars)
        args = dict(self._task.args)
        timeout = args.pop("connect_timeout", None) or 0
        retry_definite = args.pop("retry_definite", True)
        retry_definite = retry_definite not in (False, "false", "False", "no", "0", 0)
        try:
            timeout = float(timeout)
        except (TypeError, ValueError):
            result.update(failed=True, msg="connect_timeout: %r is not a number of seconds "
                                           "(give e.g. 60, or 0 to try once)" % (timeout,))
            return result
        deadline = time.monotonic() + timeout
        while True:
            try:
                answer = self._execute_module(
                    module_name=MODULE, module_args=args, task_vars=task_vars,
                    wrap_async=self._task.async_val and not self._connection.has_native_async)
                break
            except AnsibleConnectionFailure as exc:
                changed = self._changed_key(exc, task_vars or {})
                if changed is not None:
                    result.update(failed=True, reached=False, msg=changed)
                    return result
                if timeout <= 0:
                    raise
                if not retry_definite and is_definite(exc):
                    result.update(failed=True, reached=False,
                                  msg="no answer over SSH: %s" % str(exc).strip())
                    return result
                if time.monotonic() + self.retry_sleep >= deadline:
                    result.update(failed=True, reached=False,
                                  msg="no answer over SSH within %g s: %s"
                                      % (timeout, str(exc).strip()))
                    return result
                self._retry_pause()
        result.update(answer)
        result["reached"] = True
        return result

    def _retry_pause(self):
        """Wait a moment and drop the connection (a stale multiplexed SSH master would fail
        the next try as it failed this one)."""
        time.sleep(self.retry_sleep)
        try:
            self._connection.reset()
        except (AttributeError, AnsibleConnectionFailure):
            pass

    def _changed_key(self, exc, task_vars):
        """The message for an SSH fleet host that presented another key than the recorded one
        (waiting would not change it), or None."""
        if task_vars.get("gpufleet_backend") != "ssh" or not hostkeys.refused(exc):
            return None
        instance = {
            "name": task_vars.get("gpufleet_instance") or task_vars.get("inventory_hostname"),
            "fleet": task_vars.get("gpufleet_fleet"),
            # As the connection resolved them (templated), else as the host's variables say.
            "hostname": self._option("host", task_vars.get("ansible_host")
                                     or task_vars.get("inventory_hostname")),
            "port": self._option("port", task_vars.get("ansible_port")) or 22,
            "user": self._option("remote_user", task_vars.get("ansible_user")),
        }
        common_args = self._option("ssh_common_args", task_vars.get("ansible_ssh_common_args"))
        return hostkeys.changed_message(instance, hostkeys.known_hosts_of(common_args))

    def _option(self, name, default):
        try:
            return self._connection.get_option(name) or default
        except (AttributeError, KeyError, AnsibleError):
            return default
