# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Running the collection's modules for real in tests: in-process through AnsibleModule, or
through the ansible command-line tools with this checkout as the collection."""

from __future__ import annotations

import contextlib
import io
import json
import os
import subprocess
import sys

from unittest import mock

import pytest
from ansible.module_utils import basic
from gpufleet._collection import collections_path

try:
    from ansible.module_utils.testing import patch_module_args
except ImportError:  # ansible-core < 2.19: hand the arguments over the way AnsiballZ does

    @contextlib.contextmanager
    def patch_module_args(args):
        args = dict({"_ansible_remote_tmp": "/tmp", "_ansible_keep_remote_files": False}, **args)
        payload = json.dumps({"ANSIBLE_MODULE_ARGS": args}).encode()
        with mock.patch.object(basic, "_ANSIBLE_ARGS", payload):
            yield


def _target_side():
    """Run as modules run on a target: once any test imports controller code (ansible.errors,
    plugins), ansible-core 2.19 sends module warnings to the controller's display instead of the
    module result, unless told it is not the controller."""
    try:
        from ansible.module_utils import _internal
    except ImportError:  # ansible-core < 2.19 has no such switch
        return contextlib.nullcontext()
    if not hasattr(_internal, "is_controller"):
        return contextlib.nullcontext()
    return mock.patch.object(_internal, "is_controller", False)


def run_module(main, args):
    """Run a module's ``main()`` with ``args``; return (exit code, result dict)."""
    out = io.StringIO()
    with _target_side(), patch_module_args(args), contextlib.redirect_stdout(out):
        with pytest.raises(SystemExit) as info:
            main()
    return info.value.code, json.loads(out.getvalue())


def ansible_env(tmp_path, **extra):
    """Environment for ansible / ansible-playbook runs that find this checkout's collection."""
    return dict(
        os.environ,
        ANSIBLE_COLLECTIONS_PATH=str(collections_path()),
        ANSIBLE_LOCAL_TEMP=str(tmp_path / "ansible-tmp"),
        ANSIBLE_NOCOLOR="1",
        ANSIBLE_LOCALHOST_WARNING="0",
        ANSIBLE_INVENTORY_UNPARSED_WARNING="0",
        **extra
    )


def run_adhoc(tmp_path, module, args, *extra):
    """``ansible localhost -c local -m MODULE -a ARGS [EXTRA...]`` with this Python and the
    minimal callback, as Ansible ships the module (AnsiballZ with its module_utils).

    Returns the finished process; ``adhoc_result`` reads its one result."""
    return subprocess.run(
        [
            sys.executable, "-m", "ansible.cli.adhoc", "localhost", "-c", "local",
            "-e", "ansible_python_interpreter=%s" % sys.executable,
            "-m", module, "-a", args,
        ] + list(extra),
        env=ansible_env(tmp_path, ANSIBLE_STDOUT_CALLBACK="ansible.builtin.minimal"),
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def adhoc_result(proc, status="SUCCESS"):
    """The result of a ``run_adhoc`` run, which the minimal callback prints as
    ``localhost | STATUS => {json}``; asserts the run ended with ``status``."""
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.startswith("localhost | %s => " % status), proc.stdout
    return json.loads(proc.stdout.split("=>", 1)[1])
