# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""One root error: every exception class plugins/module_utils defines derives from
core.errors.GpufleetError, so a module, plugin or the CLI catches that one class; and an error
made from another keeps it as its cause."""

from __future__ import annotations

import ast
import importlib
import inspect
from pathlib import Path

import pytest
from ansible_collections.gpufleet.cluster.plugins.module_utils.core.errors import GpufleetError
from ansible_collections.gpufleet.cluster.plugins.module_utils.hosts import jsonmerge, nccltests
from ansible_collections.gpufleet.cluster.plugins.module_utils.hosts.facts import (
    ToolOutputError,
    addresses_from_ip_json,
)
from ansible_collections.gpufleet.cluster.plugins.module_utils.hosts.firewall_rules import (
    FirewallParseError,
)
from ansible_collections.gpufleet.cluster.plugins.module_utils.spec import interpolation

ROOT = Path(__file__).resolve().parents[3]
MODULE_UTILS = ROOT / "plugins" / "module_utils"
PACKAGE = "ansible_collections.gpufleet.cluster.plugins.module_utils"
# Sent to the hosts as standalone source: they keep their own small error classes.
STANDALONE = ("tasks/hostside/engineside.py", "tasks/hostside/nodeside.py",
              "tasks/hostside/wrapper.py", "backends/localpool.py")
# Exception classes that are deliberately not user errors, with the reason.
NOT_USER_ERRORS = {
    # The config model's parsers signal a bad field with it; Ctx.run turns each into a
    # Problem of the one SpecError, so it never leaves spec/ (see spec/_errors.py).
    "spec._errors.Invalid",
}


def module_names():
    names = []
    for path in sorted(MODULE_UTILS.rglob("*.py")):
        rel = path.relative_to(MODULE_UTILS)
        if rel.as_posix() in STANDALONE:
            continue
        parts = list(rel.with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        if parts:
            names.append(".".join(parts))
    return names


def exception_classes():
    """(dotted name under module_utils, class) of every Exception subclass each module defines."""
    found = []
    for name in module_names():
        module = importlib.import_module("%s.%s" % (PACKAGE, name))
        for attr, value in sorted(vars(module).items()):
            if (inspect.isclass(value) and issubclass(value, Exception)
                    and value.__module__ == module.__name__):
                found.append(("%s.%s" % (name, attr), value))
    return found


CLASSES = exception_classes()


def test_the_walk_finds_the_packages_errors():
    names = [name for name, _cls in CLASSES]
    for expected in ("spec._errors.SpecError", "hosts.checks.CheckError",
                     "hosts.facts._errors.HostFactsError", "volumes.mounts.VolumeError"):
        assert expected in names


@pytest.mark.parametrize("name,cls", CLASSES, ids=[name for name, _cls in CLASSES])
def test_every_error_of_module_utils_derives_from_the_root(name, cls):
    if name in NOT_USER_ERRORS:
        assert not issubclass(cls, GpufleetError), "%s is listed as no user error" % name
        return
    assert issubclass(cls, GpufleetError), (
        "%s derives from %s, not from core.errors.GpufleetError"
        % (name, ", ".join(base.__name__ for base in cls.__mro__[1:])))


@pytest.mark.parametrize("cls", [interpolation.InterpolationError, FirewallParseError,
                                 nccltests.NcclTestsError])
def test_errors_that_were_value_errors_still_are(cls):
    assert issubclass(cls, GpufleetError) and issubclass(cls, ValueError)


def test_a_wrapped_error_keeps_its_cause():
    with pytest.raises(jsonmerge.JsonMergeError) as info:
        jsonmerge.parse("{not json", "/etc/docker/daemon.json")
    assert isinstance(info.value.__cause__, ValueError)


def test_a_tool_output_error_keeps_the_json_error_it_came_from():
    with pytest.raises(ToolOutputError) as info:
        addresses_from_ip_json("not json")
    assert isinstance(info.value.__cause__, ValueError)


# ---------------------------------------------------------------------------------------------
# raise ... from: an error raised while handling another names it as its cause


def raises_without_cause(path):
    """(line, statement) of every ``raise X`` inside an ``except`` block of ``path`` that has no
    ``from``: the cause (``from exc``) or a deliberate ``from None`` must be written out. A
    bare ``raise`` re-raises and is fine; a function defined inside the block is its own scope."""
    tree = ast.parse(path.read_text(), str(path))
    found = []
    for handler in ast.walk(tree):
        if not isinstance(handler, ast.ExceptHandler):
            continue
        todo = list(handler.body)
        while todo:
            node = todo.pop()
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef,
                                 ast.ExceptHandler)):
                continue
            if isinstance(node, ast.Raise) and node.exc is not None and node.cause is None:
                found.append((node.lineno, ast.unparse(node).splitlines()[0][:120]))
            todo.extend(ast.iter_child_nodes(node))
    return found


def test_the_raise_walk_finds_a_raise_without_from(tmp_path):
    sample = tmp_path / "sample.py"
    sample.write_text(
        "def f(x):\n"
        "    try:\n"
        "        return int(x)\n"
        "    except ValueError:\n"
        "        if x:\n"
        "            raise KeyError(x)\n"
        "        raise\n"
        "    except TypeError as exc:\n"
        "        raise KeyError(x) from exc\n"
        "    except OSError:\n"
        "        def later():\n"
        "            raise KeyError(x)\n"
        "        raise KeyError(x) from None\n")
    assert raises_without_cause(sample) == [(6, "raise KeyError(x)")]


def test_every_raise_inside_an_except_block_names_its_cause():
    """In plugins/ and gpufleet/, the standalone host-side files included (they run on the
    Python 3.6+ of the hosts, which has ``raise ... from``)."""
    missing = []
    for folder in ("plugins", "gpufleet"):
        for path in sorted((ROOT / folder).rglob("*.py")):
            for line, statement in raises_without_cause(path):
                missing.append("%s:%d: %s" % (path.relative_to(ROOT), line, statement))
    assert not missing, (
        "raise inside an except block without `from exc` (or a deliberate `from None`, with a "
        "comment saying why):\n" + "\n".join(missing))


# ---------------------------------------------------------------------------------------------
# gpufleet/ (the Python API and the command) shares the root


def test_the_api_error_is_the_root_error():
    from gpufleet import api, direct

    assert issubclass(api.GpufleetError, GpufleetError)
    assert issubclass(direct.CommandError, api.GpufleetError)
    error = api.GpufleetError("the Docker engine does not answer", host="gpus-1")
    assert isinstance(error, GpufleetError) and str(error) == "gpus-1: the Docker engine does not answer"


def test_a_module_error_reaching_the_command_in_process_is_an_api_error():
    from gpufleet import api, direct
    from ansible_collections.gpufleet.cluster.plugins.module_utils.fleets.state import StateError

    def fails():
        raise StateError("no run named x")

    with pytest.raises(api.GpufleetError) as caught:
        direct._call(fails)
    assert str(caught.value) == "no run named x"
