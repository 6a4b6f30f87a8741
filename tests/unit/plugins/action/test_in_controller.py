# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""When an action plugin may do its module's work in the controller's process
(plugin_utils.in_controller): only where the module would have run there, as the same user,
with the same Python and environment."""

from __future__ import annotations

import os
import sys

from ansible_collections.gpufleet.cluster.plugins.action import fleet as fleet_action
from ansible_collections.gpufleet.cluster.plugins.plugin_utils.in_controller import why_not

OWN = {"ansible_python_interpreter": sys.executable}


def test_a_local_task_as_the_controller_with_its_python_runs_in_process(make_action, tmp_path):
    action = make_action(fleet_action, {})
    assert why_not(action, OWN) is None
    # AWX's localhost names the playbook's Python by a template; a link to it is the same.
    assert why_not(action, {"ansible_python_interpreter": "{{ ansible_playbook_python }}"}) \
        is None


def test_another_path_to_the_same_binary_is_another_python(make_action, tmp_path):
    """A virtualenv's python is a link to the system's, which lacks the virtualenv's
    libraries: the path counts, not the binary."""
    link = tmp_path / "python"
    os.symlink(sys.executable, str(link))
    reason = why_not(make_action(fleet_action, {}), {"ansible_python_interpreter": str(link)})
    assert "is not the controller's" in reason


def test_anything_else_sends_the_module(make_action):
    assert "another host" in why_not(make_action(fleet_action, {}, transport="ssh"), OWN)
    assert "become" in why_not(make_action(fleet_action, {}, become=True), OWN)
    assert "asynchronously" in why_not(make_action(fleet_action, {}, async_val=60), OWN)
    assert "environment" in why_not(
        make_action(fleet_action, {}, environment=[{"AWS_PROFILE": "lab"}]), OWN)
    # An empty environment list (what a play without the keyword gives) is no environment.
    assert why_not(make_action(fleet_action, {}, environment=[{}]), OWN) is None
    other = why_not(make_action(fleet_action, {}),
                    {"ansible_python_interpreter": "/usr/bin/python3.6"})
    assert "/usr/bin/python3.6" in other and sys.executable in other
    # Left to interpreter discovery, the module may get a Python with other libraries.
    assert "None" in why_not(make_action(fleet_action, {}), {})


def test_a_delegated_task_goes_by_the_delegated_hosts_python(make_action):
    """Delegated, the connection and the interpreter are the delegated host's."""
    own = {"ansible_python_interpreter": "/usr/bin/python3.6",
           "ansible_delegated_vars": {"localhost": OWN}}
    assert why_not(make_action(fleet_action, {}, delegate_to="localhost"), own) is None
    other = dict(OWN, ansible_delegated_vars={"localhost": {
        "ansible_python_interpreter": "/opt/py/bin/python"}})
    assert "/opt/py/bin/python" in why_not(
        make_action(fleet_action, {}, delegate_to="localhost"), other)


def test_an_answer_made_here_is_what_the_module_would_have_returned():
    from ansible_collections.gpufleet.cluster.plugins.module_utils.core.errors import (
        GpufleetError,
    )
    from ansible_collections.gpufleet.cluster.plugins.plugin_utils.in_controller import answer

    assert answer({"seen": 1}, lambda: {"changed": True, "hosts": ("a", "b")}) == {
        "seen": 1, "changed": True, "hosts": ["a", "b"]}   # JSON types, as a module's

    def refused():
        raise GpufleetError("fleet: no name")

    assert answer({}, refused) == {"failed": True, "msg": "fleet: no name"}

    def broken():
        raise KeyError("hosts")

    result = answer({}, broken, what="gpufleet facts cache")
    assert result["failed"] is True
    assert result["msg"] == "internal error in gpufleet facts cache (please report it): 'hosts'"
    assert "KeyError" in result["exception"]
