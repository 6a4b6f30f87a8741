"""The unit tests mirror the code tree, as docs/architecture.md ("Tests") says.

Every test file under tests/unit sits in a folder named after what it tests: a package of
plugins/module_utils (tests/unit/spec/, tests/unit/tasks/, ...), a folder of plugins/
(tests/unit/plugins/modules/, ...), the ``gpufleet`` command and API (tests/unit/cli/), or the
rules of the whole repository (tests/unit/repo/). A deeper folder is named after a subpackage of
the package above it. Every folder is a Python package, so same-named files never collide.

No test module imports another: the fixtures a package's tests share live in its conftest.py
(pytest finds them without an import), the plain helpers in a helper module of the package
(tests/unit/tasks/fakes.py, ...), imported from there by every user.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
UNIT = ROOT / "tests" / "unit"
MODULE_UTILS = ROOT / "plugins" / "module_utils"
PLUGINS = ROOT / "plugins"
# Test folders that stand for something other than a package of plugins/module_utils.
OTHER_FOLDERS = {
    "plugins": "the plugins: tests/unit/plugins/<folder of plugins/>/",
    "cli": "the gpufleet command and its Python API (gpufleet/)",
    "repo": "rules over the whole repository (layering, citations, reference docs, ...)",
}
# Data the tests read, not tests.
NOT_TESTS = {"fixtures"}


def _packages(folder):
    return {p.name for p in folder.iterdir() if p.is_dir() and (p / "__init__.py").is_file()}


def unit_test_files():
    return sorted(p for p in UNIT.rglob("test_*.py")
                  if not NOT_TESTS & set(p.relative_to(UNIT).parts))


def misplaced(path):
    """Why the test file at ``path`` (under tests/unit) is not where the tree says; None if it is."""
    parts = path.relative_to(UNIT).parts[:-1]
    if not parts:
        return "sits at the top of tests/unit; move it into the folder of the package it tests"
    top, rest = parts[0], parts[1:]
    packages = _packages(MODULE_UTILS)
    if top in packages:
        code = MODULE_UTILS / top
        for name in rest:
            if name not in _packages(code):
                return "%s is no subpackage of plugins/module_utils/%s" % (
                    name, code.relative_to(MODULE_UTILS).as_posix())
            code = code / name
        return None
    if top == "plugins":
        kinds = {p.name for p in PLUGINS.iterdir() if p.is_dir() and p.name != "module_utils"}
        if len(rest) != 1 or rest[0] not in kinds:
            return "tests of plugins go in tests/unit/plugins/<one of %s>/" % ", ".join(sorted(kinds))
        return None
    if top == "cli":
        code = ROOT / "gpufleet"
        for name in rest:
            if name not in _packages(code):
                return "%s is no subpackage of %s" % (name, code.relative_to(ROOT).as_posix())
            code = code / name
        return None
    if top == "repo":
        return None if not rest else "tests/unit/repo has no subfolders"
    return "%s is no package of plugins/module_utils nor one of %s" % (
        top, ", ".join(sorted(OTHER_FOLDERS)))


def test_the_walk_finds_the_test_files():
    found = {p.relative_to(UNIT).as_posix() for p in unit_test_files()}
    assert "repo/test_tests_tree.py" in found
    assert "plugins/modules/test_config_info.py" in found
    assert len(found) > 90


@pytest.mark.parametrize("path", unit_test_files(), ids=lambda p: p.relative_to(UNIT).as_posix())
def test_each_test_file_sits_in_the_folder_of_what_it_tests(path):
    why = misplaced(path)
    assert why is None, "%s: %s" % (path.relative_to(ROOT).as_posix(), why)


def test_every_test_folder_is_a_package():
    folders = {p.parent for p in UNIT.rglob("*.py")} | {UNIT}
    missing = sorted(f.relative_to(ROOT).as_posix() for f in folders
                     if not (f / "__init__.py").is_file())
    assert not missing, "test folders without __init__.py (same-named files would collide): %s" % (
        missing)


@pytest.mark.parametrize("place, why", [
    ("test_spec.py", "top of tests/unit"),
    ("spec/nope/test_x.py", "nope is no subpackage"),
    ("plugins/test_x.py", "tests of plugins go in"),
    ("plugins/nope/test_x.py", "tests of plugins go in"),
    ("cli/nope/test_x.py", "nope is no subpackage of gpufleet"),
    ("repo/deeper/test_x.py", "no subfolders"),
    ("utils/test_x.py", "utils is no package"),
])
def test_a_misplaced_file_is_named_with_the_reason(place, why):
    assert why in misplaced(UNIT / place)


@pytest.mark.parametrize("place", [
    "spec/test_x.py", "hosts/checks/test_x.py", "plugins/modules/test_x.py", "cli/test_x.py",
    "cli/cli/test_x.py", "repo/test_x.py",
])
def test_the_places_the_tree_allows(place):
    assert misplaced(UNIT / place) is None


def _module_file(folder, parts):
    """The file or package folder that the dotted ``parts`` name under ``folder``; None if none."""
    path = folder.joinpath(*parts)
    if path.with_suffix(".py").is_file():
        return path.with_suffix(".py")
    if (path / "__init__.py").is_file():
        return path
    return None


def imported_test_modules(path, source=None):
    """The test modules (test_*.py) that the Python file at ``path`` imports, as ``line: what``."""
    tree = ast.parse(source if source is not None else path.read_text(encoding="utf-8"))
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            base = path.parents[node.level - 1] if node.level else ROOT
            parts = node.module.split(".") if node.module else []
            targets = [parts] + [parts + [alias.name] for alias in node.names]
        elif isinstance(node, ast.Import):
            base = ROOT
            targets = [alias.name.split(".") for alias in node.names]
        else:
            continue
        for target in targets:
            for depth in range(1, len(target) + 1):
                found_file = _module_file(base, target[:depth])
                if found_file is not None and found_file.name.startswith("test_") and (
                        found_file.suffix == ".py"):
                    found.append("line %d: %s" % (node.lineno, ".".join(target[:depth])))
                    break
    return sorted(set(found))


def unit_python_files():
    return sorted(p for p in UNIT.rglob("*.py")
                  if not NOT_TESTS & set(p.relative_to(UNIT).parts))


@pytest.mark.parametrize("path", unit_python_files(),
                         ids=lambda p: p.relative_to(UNIT).as_posix())
def test_no_test_module_imports_another(path):
    found = imported_test_modules(path)
    assert not found, (
        "%s imports test modules (%s): move what they share into the package's conftest.py "
        "(fixtures) or a helper module such as fakes.py (plain helpers)" % (
            path.relative_to(ROOT).as_posix(), "; ".join(found)))


@pytest.mark.parametrize("line", [
    "from .test_runs import fleet_with_facts",
    "from . import test_runs as runs",
    "from ..tasks import test_nodeside",
    "from ..tasks.test_rankplan import RUN",
    "from tests.unit.tasks import test_runs",
    "from tests.unit.tasks.test_runs import Cluster",
    "import tests.unit.tasks.test_runs",
])
def test_an_import_of_a_test_module_is_found(line):
    assert imported_test_modules(UNIT / "tasks" / "test_x.py", source=line + "\n")


@pytest.mark.parametrize("line", [
    "from .fakes import fleet_with_facts",
    "from . import fakes",
    "from ..configs import task",
    "from ..hosts.samples import HEALTHY_JSON",
    "from tests.unit.tasks.fakes import inspect_entry",
    "from tests.doubles.playbooks import Stdin",
    "import pytest",
])
def test_an_import_of_a_helper_module_is_allowed(line):
    assert imported_test_modules(UNIT / "tasks" / "test_x.py", source=line + "\n") == []
