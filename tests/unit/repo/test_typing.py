"""Typed boundaries: mypy is clean on plugins/module_utils and gpufleet/, and the share of public
functions with full hints stays where it is (all of them in the packages whose records and
values cross into every other one)."""

from __future__ import annotations

import ast
import os
import re
import subprocess
import sys
from pathlib import Path

from gpufleet._collection import collections_path

ROOT = Path(__file__).resolve().parents[3]
MODULE_UTILS = ROOT / "plugins" / "module_utils"

# The least share of public functions with full hints, over plugins/module_utils.
MIN_SHARE = 0.60
# Packages (folders, walked whole) and files where every public function carries full hints.
FULLY_TYPED = (
    MODULE_UTILS / "spec",
    MODULE_UTILS / "core",
    MODULE_UTILS / "fleets" / "records.py",
    MODULE_UTILS / "tasks" / "records.py",
)


def _first_is_bound(func: ast.FunctionDef | ast.AsyncFunctionDef, in_class: bool) -> bool:
    """Whether the first parameter is self or cls (it needs no hint)."""
    if not in_class:
        return False
    names = {d.id for d in func.decorator_list if isinstance(d, ast.Name)}
    return "staticmethod" not in names


# A function's type comment, on the line after its signature: # type: (int, str) -> bool
TYPE_COMMENT = re.compile(r"^\s*# type: \(.*\) -> \S")


def _fully_hinted(func: ast.FunctionDef | ast.AsyncFunctionDef, in_class: bool,
                  lines: list[str]) -> bool:
    """Every parameter (but self/cls) and the return carry a hint, as annotations or as a
    type comment (the files sent to hosts run on Pythons without lazy annotations)."""
    signature_end = func.body[0].lineno - 1
    if any(TYPE_COMMENT.match(line) for line in lines[func.lineno:signature_end + 1]):
        return True
    args = func.args
    params = args.posonlyargs + args.args + args.kwonlyargs
    if _first_is_bound(func, in_class):
        params = params[1:]
    params += [a for a in (args.vararg, args.kwarg) if a is not None]
    return func.returns is not None and all(p.annotation is not None for p in params)


def public_functions(path: Path) -> list[tuple[str, bool]]:
    """(qualified name, fully hinted) of each public function and method in a file: those at
    the top of the file or in a class body whose name and class names do not start with '_'
    (functions nested in functions are not counted)."""
    source = path.read_text(encoding="utf-8")
    tree, lines = ast.parse(source), source.splitlines()
    found: list[tuple[str, bool]] = []

    def visit(body: list[ast.stmt], prefix: str, in_class: bool) -> None:
        for node in body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                if not node.name.startswith("_"):
                    found.append((prefix + node.name, _fully_hinted(node, in_class, lines)))
            elif isinstance(node, ast.ClassDef):
                if not node.name.startswith("_"):
                    visit(node.body, f"{prefix}{node.name}.", True)
            elif isinstance(node, (ast.If, ast.Try)):
                visit(node.body, prefix, in_class)
                visit(node.orelse, prefix, in_class)
                for handler in getattr(node, "handlers", []):
                    visit(handler.body, prefix, in_class)
                visit(getattr(node, "finalbody", []), prefix, in_class)

    visit(tree.body, "", False)
    return found


def survey(paths: list[Path]) -> tuple[int, list[str]]:
    """(count of public functions, 'file: name' of those without full hints)."""
    total, missing = 0, []
    for path in paths:
        for name, hinted in public_functions(path):
            total += 1
            if not hinted:
                missing.append(f"{path.relative_to(ROOT)}: {name}")
    return total, missing


def python_files(where: Path) -> list[Path]:
    return [where] if where.is_file() else sorted(where.rglob("*.py"))


def test_the_counter_sees_hints_comments_and_methods(tmp_path):
    source = tmp_path / "sample.py"
    source.write_text(
        "def typed(a: int, *rest: str, flag: bool = False, **more: int) -> None: ...\n"
        "def half(a: int, b) -> int: ...\n"
        "def no_return(a: int): ...\n"
        "def commented(a, b):\n    # type: (int, str) -> None\n    pass\n"
        "def _private(a): ...\n"
        "class Thing:\n"
        "    def method(self, a: int) -> int: ...\n"
        "    @staticmethod\n    def static(a) -> int: ...\n"
        "    @classmethod\n    def made(cls) -> 'Thing': ...\n"
        "    def __init__(self, a): ...\n"
        "class _Hidden:\n    def method(self, a): ...\n"
        "def outer() -> None:\n    def inner(a): ...\n"
    )
    assert public_functions(source) == [
        ("typed", True), ("half", False), ("no_return", False), ("commented", True),
        ("Thing.method", True), ("Thing.static", False), ("Thing.made", True),
        ("outer", True),
    ]


def test_most_public_functions_carry_hints():
    total, missing = survey(python_files(MODULE_UTILS))
    share = (total - len(missing)) / total
    assert share >= MIN_SHARE, (
        f"{share:.0%} of {total} public functions in plugins/module_utils carry full hints, "
        f"below {MIN_SHARE:.0%}; without them:\n" + "\n".join(missing)
    )


def test_every_public_function_of_the_typed_packages_carries_hints():
    for where in FULLY_TYPED:
        assert where.exists(), f"{where.relative_to(ROOT)} is named in FULLY_TYPED but missing"
    paths = [path for where in FULLY_TYPED for path in python_files(where)]
    total, missing = survey(paths)
    assert total and not missing, "public functions without full hints:\n" + "\n".join(missing)


def test_mypy_is_clean():
    """mypy checks plugins/module_utils and gpufleet/ as pyproject.toml's [tool.mypy] says; the
    collection is found as ansible_collections.gpufleet.cluster under its collections path."""
    env = dict(os.environ, MYPYPATH=str(collections_path()))
    result = subprocess.run(
        [sys.executable, "-m", "mypy", "--config-file", str(ROOT / "pyproject.toml")],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=600, check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
