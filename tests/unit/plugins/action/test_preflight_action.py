# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""gpufleet.cluster.preflight's action plugin: with connect_timeout, a host that does not
answer yet is tried again (its SSH connection reset between tries) and checked in the same
request once it answers; one that never answers fails, named as unreachable, so that a play's
rescue runs. Without it, a connection failure is Ansible's usual unreachable host."""

from __future__ import annotations

import pytest
from ansible.errors import AnsibleAuthenticationFailure, AnsibleConnectionFailure

from ansible_collections.gpufleet.cluster.plugins.action import preflight as preflight_action

CHECKED = {"changed": False, "ok": True, "checks": [{"name": "sudo", "status": "ok"}],
           "docker": None, "peers": []}


@pytest.fixture(autouse=True)
def quick(monkeypatch):
    monkeypatch.setattr(preflight_action.ActionModule, "retry_sleep", 0.01)


def test_a_host_is_tried_until_it_answers_then_checked(make_action):
    def answers(number):
        if number == 1:
            return AnsibleConnectionFailure("ssh: connect to host 10.0.0.5 port 22: refused")
        if number == 2:   # sshd is up, the key not yet in place
            return AnsibleAuthenticationFailure("Permission denied (publickey)")
        return CHECKED

    action = make_action(preflight_action, {"connect_timeout": 30, "checks": ["sudo"]},
                         sent=answers)
    result = action.run(task_vars={})
    assert result == dict(CHECKED, reached=True)
    # The module never sees connect_timeout; each failed try dropped the connection.
    assert action.sent == [("gpufleet.cluster.preflight", {"checks": ["sudo"]})] * 3
    assert action._connection.resets == 2


def test_a_host_that_never_answers_fails_and_says_why(make_action):
    error = AnsibleConnectionFailure("ssh: connect to host 10.0.0.9 port 22: No route to host")
    action = make_action(preflight_action, {"connect_timeout": 0.05}, sent=error)
    result = action.run(task_vars={})
    assert result["failed"] is True and result["reached"] is False
    assert result["msg"] == ("no answer over SSH within 0.05 s: ssh: connect to host 10.0.0.9 "
                             "port 22: No route to host")
    assert len(action.sent) >= 1 and "unreachable" not in result


def test_a_changed_host_key_fails_at_once_and_says_how_to_accept_it(make_action):
    """Waiting does not change a host's key: the host fails on the first try, with one line."""
    error = AnsibleConnectionFailure(
        "Failed to connect to the host via ssh: @@@@@@@@@@@\r\n@    WARNING: REMOTE HOST "
        "IDENTIFICATION HAS CHANGED!     @\r\nHost key verification failed.")
    action = make_action(preflight_action, {"connect_timeout": 30}, sent=error)
    result = action.run(task_vars={
        "gpufleet_backend": "ssh", "gpufleet_instance": "lab-1", "gpufleet_fleet": "lab",
        "ansible_host": "10.0.0.5", "ansible_port": 22, "ansible_user": "gpufleet",
        "ansible_ssh_common_args": "-o StrictHostKeyChecking=accept-new "
                                   "-o UserKnownHostsFile=/st/fleets/lab/known_hosts"})
    assert result["failed"] is True and result["reached"] is False
    assert len(action.sent) == 1 and action._connection.resets == 0
    assert result["msg"].startswith("the SSH host key of gpufleet@10.0.0.5:22 (instance lab-1 "
                                    "of fleet lab) has changed")
    assert "ssh-keygen -R 10.0.0.5 -f /st/fleets/lab/known_hosts" in result["msg"]
    # A host gpufleet made (a fresh key each time, not recorded) is just tried again.
    action = make_action(preflight_action, {"connect_timeout": 0.05}, sent=error)
    result = action.run(task_vars={"gpufleet_backend": "local"})
    assert result["msg"].startswith("no answer over SSH within 0.05 s")


def test_without_connect_timeout_an_unreachable_host_is_unreachable(make_action):
    error = AnsibleConnectionFailure("refused")
    for args in ({}, {"connect_timeout": 0}):
        action = make_action(preflight_action, dict(args), sent=error)
        with pytest.raises(AnsibleConnectionFailure):
            action.run(task_vars={})
        assert len(action.sent) == 1


def test_a_failed_check_is_the_modules_failure(make_action):
    failed = dict(CHECKED, failed=True, ok=False, msg="preflight failed: sudo: ...")
    action = make_action(preflight_action, {"connect_timeout": 10}, sent=failed)
    result = action.run(task_vars={})
    assert result == dict(failed, reached=True) and len(action.sent) == 1


def test_a_connect_timeout_that_is_not_a_number_is_named(make_action):
    action = make_action(preflight_action, {"connect_timeout": "soon"}, sent=CHECKED)
    result = action.run(task_vars={})
    assert result["failed"] is True and action.sent == []
    assert result["msg"].startswith("connect_timeout: 'soon' is not a number of seconds")


@pytest.mark.parametrize("answer", [
    "Failed to connect to the host via ssh: ssh: connect to host 10.0.0.9 port 22: "
    "Connection refused",
    "ssh: connect to host 10.0.0.9 port 22: No route to host",
    "ssh: Could not resolve hostname nohost.invalid: Name or service not known",
    "ubuntu@10.0.0.9: Permission denied (publickey).",
    # Through a jump host that could not open the connection (its proxy ends at once).
    "Failed to connect to the host via ssh: kex_exchange_identification: Connection closed "
    "by remote host\r\nConnection closed by UNKNOWN port 65535",
])
def test_a_definite_answer_of_an_existing_host_is_not_asked_again(make_action, answer):
    """An SSH fleet's host (retry_definite false) that answers no fails at once: only a
    silence is waited for, so an unreachable host costs one try, not the whole window."""
    error = AnsibleConnectionFailure(answer)
    action = make_action(preflight_action, {"connect_timeout": 30, "retry_definite": False},
                         sent=error)
    result = action.run(task_vars={})
    assert result["failed"] is True and result["reached"] is False
    assert result["msg"] == "no answer over SSH: " + answer
    assert len(action.sent) == 1 and action._connection.resets == 0


def test_a_silent_existing_host_is_still_waited_for(make_action):
    def answers(number):
        if number == 1:
            return AnsibleConnectionFailure("ssh: connect to host 10.0.0.5 port 22: "
                                            "Connection timed out")
        return CHECKED

    action = make_action(preflight_action, {"connect_timeout": 30, "retry_definite": False,
                                            "checks": ["sudo"]}, sent=answers)
    assert action.run(task_vars={}) == dict(CHECKED, reached=True)
    assert action.sent == [("gpufleet.cluster.preflight", {"checks": ["sudo"]})] * 2
