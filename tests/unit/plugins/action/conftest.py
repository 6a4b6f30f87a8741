# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Action plugins run in tests as Ansible runs them for a task, with Ansible's own argument
validator; what Ansible hands them (the task, its connection and play context) is a plain
namespace, and ``_execute_module`` (the module sent to the host) is recorded."""

from __future__ import annotations

import sys
from types import SimpleNamespace

import pytest
from ansible.module_utils.common.arg_spec import ArgumentSpecValidator
from ansible.plugins.action import ActionBase


class Templar:
    """Ansible's templar as far as these plugins use it: the interpreter variable."""

    def template(self, value):
        return value.replace("{{ ansible_playbook_python }}", sys.executable)


@pytest.fixture
def make_action(monkeypatch):
    def validate(self, argument_spec=None, **kwargs):
        checked = ArgumentSpecValidator(argument_spec, **kwargs).validate(self._task.args)
        assert checked.error_messages == []
        return checked, checked.validated_parameters

    monkeypatch.setattr(ActionBase, "run", lambda self, tmp=None, task_vars=None: {})

    def make(plugin, args, transport="local", become=False, check_mode=False, environment=(),
             async_val=0, sent=None, delegate_to=None):
        monkeypatch.setattr(plugin.ActionModule, "validate_argument_spec", validate)
        action = plugin.ActionModule.__new__(plugin.ActionModule)
        action._task = SimpleNamespace(check_mode=check_mode, args=args, async_val=async_val,
                                       environment=list(environment), delegate_to=delegate_to)
        action._connection = SimpleNamespace(transport=transport, resets=0,
                                             has_native_async=False)

        def reset():
            action._connection.resets += 1
        action._connection.reset = reset
        action._play_context = SimpleNamespace(become=become)
        action._templar = Templar()
        action.sent = []

        def execute_module(module_name=None, module_args=None, task_vars=None,
                           wrap_async=False):
            action.sent.append((module_name, dict(module_args)))
            action.wrapped = wrap_async
            answer = sent(len(action.sent)) if callable(sent) else sent
            if isinstance(answer, Exception):
                raise answer
            return dict(answer or {})
        action._execute_module = execute_module
        return action
    return make
