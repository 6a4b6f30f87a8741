"""The unit tests mirror the code tree, as docs/architecture.md ("Tests") says.

Every test file under tests/unit sits in a folder named after what it tests: a package of
plugins/module_utils (tests/unit/spec/, tests/unit/tasks/, ...), a folder of plugins/
(tests/unit/plugins/modules/, ...), the ``gpufleet`` command and API (tests/unit/cli/), or the
rules of the whole repository (tests/unit/repo/). A deeper folder is named after a subpackage of
the package above it. Every folder is a Python package, so same-named files never collide.
"""

from __future__ import annotations

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
