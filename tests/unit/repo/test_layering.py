"""The layering of plugins/module_utils, as docs/architecture.md states it.

The table "Which package may import which" in docs/architecture.md is the rule; these tests read
it and every import in plugins/module_utils (relative, absolute and lazy ones inside functions),
so a change that breaks the rule, or a package the table does not list, fails here.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
MODULE_UTILS = ROOT / "plugins" / "module_utils"
DOC = ROOT / "docs" / "architecture.md"
ABSOLUTE = "ansible_collections.gpufleet.cluster.plugins.module_utils"
# Sent to the hosts as standalone source: they may import nothing of the collection but the
# files sent with them (tasks.booking runs in tasks.nodeside's namespace on a host).
STANDALONE = ("tasks/nodeside.py", "tasks/wrapper.py", "tasks/booking.py", "backends/localpool.py",
              "tasks/healthside.py", "tasks/indexside.py")
SENT_WITH = {"tasks/booking.py": ["tasks.nodeside"], "tasks/healthside.py": ["tasks.booking"],
             "tasks/indexside.py": ["tasks.booking"]}


def rule_table(text):
    """{package: set of packages it may import} from the doc's table."""
    section = text.split("## Which package may import which", 1)[1].split("\n## ", 1)[0]
    rules = {}
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) != 2 or cells[0] in ("package", "") or set(cells[0]) <= set("-"):
            continue
        rules[cells[0]] = {p.strip() for p in cells[1].split(",") if p.strip()}
    return rules


RULES = rule_table(DOC.read_text())


def packages():
    return sorted(p.name for p in MODULE_UTILS.iterdir()
                  if p.is_dir() and (p / "__init__.py").exists())


def python_files():
    return sorted(MODULE_UTILS.rglob("*.py"))


def imported_modules(path, root=MODULE_UTILS):
    """(line, dotted module under module_utils) for each import of the collection's code."""
    rel = path.relative_to(root)
    here = list(rel.parts[:-1])  # the package a relative import starts from
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.ImportFrom):
            names = [alias.name for alias in node.names]
            if node.level:
                base = here[:len(here) - (node.level - 1)] if node.level > 1 else here
                target = base + (node.module.split(".") if node.module else [])
            elif node.module and (node.module + ".").startswith(ABSOLUTE + "."):
                target = [p for p in node.module[len(ABSOLUTE):].split(".") if p]
            else:
                continue
            # "from .. import fleets" names a package or module, not something inside one.
            dotted = target if target else [names[0]]
            found.append((node.lineno, ".".join(dotted)))
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if (alias.name + ".").startswith(ABSOLUTE + "."):
                    found.append((node.lineno, alias.name[len(ABSOLUTE) + 1:]))
    return found


def test_the_doc_lists_every_package_and_only_real_ones():
    assert sorted(RULES) == packages()
    for package, allowed in RULES.items():
        unknown = allowed - set(RULES)
        assert not unknown, "%s may import unknown packages %s" % (package, sorted(unknown))


def test_the_rule_has_no_cycles():
    # Depth-first: a package's allowed imports must not lead back to it.
    def reach(package, seen):
        for other in RULES[package]:
            if other in seen:
                continue
            seen.add(other)
            reach(other, seen)
        return seen

    for package in RULES:
        assert package not in reach(package, set()), "%s can reach itself" % package


def test_no_loose_modules_at_the_top_of_module_utils():
    loose = sorted(p.name for p in MODULE_UTILS.glob("*.py") if p.name != "__init__.py")
    assert loose == [], "put %s in the package of its concept" % loose


@pytest.mark.parametrize("path", python_files(), ids=lambda p: str(p.relative_to(MODULE_UTILS)))
def test_every_import_follows_the_layering(path):
    rel = path.relative_to(MODULE_UTILS)
    if len(rel.parts) == 1:  # module_utils/__init__.py, the only file allowed at the top
        assert path.name == "__init__.py" and path.read_text().strip() == ""
        return
    package = rel.parts[0]
    imports = imported_modules(path)
    if rel.as_posix() in STANDALONE:
        imports = [i for i in imports if i[1] not in SENT_WITH.get(rel.as_posix(), [])]
        assert imports == [], "%s is sent to hosts alone and may not import %s" % (rel, imports)
        return
    allowed = RULES[package] | {package}
    wrong = ["line %d: %s" % (line, module) for line, module in imports
             if module.split(".")[0] not in allowed]
    assert not wrong, "%s (package %s, may import %s) imports %s" % (
        rel, package, ", ".join(sorted(RULES[package])) or "nothing", "; ".join(wrong))


def test_the_checker_sees_relative_absolute_and_lazy_imports(tmp_path):
    # The checker itself: a planted file with each kind of import is read correctly.
    source = (
        "from ..render import fleets\n"
        "from . import lifecycle\n"
        "from %s.spec import parse_data\n"
        "def later():\n"
        "    from ..hosts.facts import probe\n" % ABSOLUTE
    )
    root = tmp_path / "module_utils"
    planted = root / "tasks" / "planted.py"
    planted.parent.mkdir(parents=True)
    planted.write_text(source)
    found = [module for _line, module in imported_modules(planted, root)]
    assert found == ["render", "tasks", "spec", "hosts.facts"]


def test_render_is_imported_only_at_the_edge():
    offenders = []
    for path in python_files():
        rel = path.relative_to(MODULE_UTILS)
        if rel.parts[0] == "render":
            continue
        offenders += ["%s line %d" % (rel, line) for line, module in imported_modules(path)
                      if module.split(".")[0] == "render"]
    assert offenders == []


def test_module_utils_imports_no_ansible():
    pattern = re.compile(r"^\s*(from|import)\s+ansible(\.|\s)", re.M)
    users = sorted(str(p.relative_to(MODULE_UTILS)) for p in python_files()
                   if pattern.search(p.read_text()))
    assert users == []
