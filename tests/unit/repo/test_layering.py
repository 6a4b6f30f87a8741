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
# files sent with them (tasks.ssh.host_source sends tasks.hostside.nodeside, then the parts that
# run in its namespace on a host), and the job wrapper is assembled from its own parts.
# tasks.hostside.bootstrap is the command line that starts them.
STANDALONE = ("tasks/hostside/nodeside.py", "tasks/hostside/volumeside.py",
              "tasks/hostside/metricside.py", "tasks/hostside/booking.py",
              "tasks/hostside/mirrorside.py", "tasks/hostside/replicaside.py",
              "tasks/hostside/healthside.py", "tasks/hostside/logside.py",
              "tasks/hostside/indexside.py", "tasks/hostside/usageside.py",
              "tasks/hostside/admitside.py", "tasks/hostside/memberside.py",
              "tasks/hostside/eventside.py", "tasks/hostside/notifyside.py",
              "tasks/hostside/runendside.py", "tasks/hostside/engineside.py",
              "tasks/hostside/scheduleside.py", "tasks/hostside/proxyconf.py", "tasks/hostside/acmeside.py",
              "tasks/hostside/proxyside.py", "tasks/hostside/bootstrap.py",
              "tasks/hostside/wrapper.py", "tasks/hostside/wrapper_output.py",
              "tasks/hostside/wrapper_metrics.py", "tasks/hostside/wrapper_peers.py",
              "tasks/hostside/wrapper_ssh.py", "tasks/hostside/__init__.py",
              "backends/localpool.py")
SENT_WITH = {"tasks/hostside/nodeside.py": ["tasks.hostside.engineside"],
             "tasks/hostside/volumeside.py": ["tasks.hostside.nodeside"],
             "tasks/hostside/metricside.py": ["tasks.hostside.nodeside"],
             "tasks/hostside/booking.py": ["tasks.hostside.nodeside"],
             "tasks/hostside/mirrorside.py": ["tasks.hostside.booking",
                                              "tasks.hostside.nodeside"],
             "tasks/hostside/replicaside.py": ["tasks.hostside.booking",
                                               "tasks.hostside.nodeside"],
             "tasks/hostside/healthside.py": ["tasks.hostside.booking"],
             "tasks/hostside/logside.py": ["tasks.hostside.booking", "tasks.hostside.nodeside"],
             "tasks/hostside/indexside.py": ["tasks.hostside.booking"],
             "tasks/hostside/admitside.py": ["tasks.hostside.booking"],
             "tasks/hostside/usageside.py": ["tasks.hostside.booking", "tasks.hostside.nodeside"],
             "tasks/hostside/memberside.py": ["tasks.hostside.booking", "tasks.hostside.nodeside"],
             "tasks/hostside/runendside.py": ["tasks.hostside.nodeside"],
             "tasks/hostside/eventside.py": ["tasks.hostside.admitside",
                                             "tasks.hostside.booking",
                                             "tasks.hostside.indexside",
                                             "tasks.hostside.memberside",
                                             "tasks.hostside.nodeside",
                                             "tasks.hostside.replicaside",
                                             "tasks.hostside.runendside",
                                             "tasks.hostside.usageside"],
             "tasks/hostside/notifyside.py": ["tasks.hostside.booking",
                                              "tasks.hostside.eventside",
                                              "tasks.hostside.nodeside",
                                              "tasks.hostside.runendside"],
             "tasks/hostside/scheduleside.py": ["tasks.hostside.booking",
                                                "tasks.hostside.eventside",
                                                "tasks.hostside.nodeside",
                                                "tasks.hostside.notifyside",
                                                "tasks.hostside.usageside"],
             "tasks/hostside/proxyconf.py": ["tasks.hostside.nodeside"],
             "tasks/hostside/acmeside.py": ["tasks.hostside.proxyconf"],
             "tasks/hostside/proxyside.py": ["tasks.hostside.acmeside",
                                             "tasks.hostside.booking",
                                             "tasks.hostside.memberside",
                                             "tasks.hostside.nodeside",
                                             "tasks.hostside.proxyconf"],
             "tasks/hostside/wrapper.py": ["tasks.hostside.wrapper_metrics",
                                           "tasks.hostside.wrapper_output",
                                           "tasks.hostside.wrapper_peers",
                                           "tasks.hostside.wrapper_ssh"]}


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


def module_name(path, root=MODULE_UTILS):
    """The dotted name of a file under module_utils ("tasks.runs"; a package's __init__.py
    is the package, "tasks")."""
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def module_graph(root=MODULE_UTILS):
    """{module: set of modules it imports} between the files of module_utils, lazy imports
    inside functions included. "from . import queue" is an edge to the module tasks.queue;
    "from .queue import WAITING" to the same; "from ..spec import parse_file" to spec's
    __init__.py."""
    files = dict((module_name(p, root), p) for p in sorted(root.rglob("*.py")))
    graph = {}
    for name, path in files.items():
        package = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
        edges = set()
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.ImportFrom):
                if node.level:
                    base = package[:len(package) - (node.level - 1)]
                    target = base + (node.module.split(".") if node.module else [])
                elif node.module and (node.module + ".").startswith(ABSOLUTE + "."):
                    target = [p for p in node.module[len(ABSOLUTE):].split(".") if p]
                else:
                    continue
                dotted = ".".join(target)
                for alias in node.names:
                    inner = "%s.%s" % (dotted, alias.name) if dotted else alias.name
                    if inner in files:
                        edges.add(inner)
                    elif dotted in files:
                        edges.add(dotted)
            elif isinstance(node, ast.Import):
                for alias in node.names:
                    dotted = alias.name[len(ABSOLUTE) + 1:]
                    if (alias.name + ".").startswith(ABSOLUTE + ".") and dotted in files:
                        edges.add(dotted)
        edges.discard(name)
        graph[name] = edges
    return graph


def cycles(graph):
    """Each import cycle of ``graph`` as a list of modules that leads back to its first one,
    one per group of modules that reach each other (Tarjan's strongly connected components,
    without recursion)."""
    index, low, stack, on_stack, groups = {}, {}, [], set(), []
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, edges = work[-1]
            for other in edges:
                if other not in index:
                    index[other] = low[other] = len(index)
                    stack.append(other)
                    on_stack.add(other)
                    work.append((other, iter(sorted(graph[other]))))
                    break
                if other in on_stack:
                    low[node] = min(low[node], index[other])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    group = set()
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        group.add(member)
                        if member == node:
                            break
                    if len(group) > 1:
                        groups.append(group)
    return [_one_cycle(graph, group) for group in groups]


def _one_cycle(graph, group):
    """A path through ``group`` (modules that reach each other) back to where it started."""
    first = min(group)
    paths = {first: [first]}
    queue = [first]
    while queue:
        node = queue.pop(0)
        for other in sorted(graph[node] & group):
            if other == first:
                return paths[node] + [first]
            if other not in paths:
                paths[other] = paths[node] + [other]
                queue.append(other)
    return sorted(group)


def test_no_import_cycles_between_modules():
    # A module that needs one above it gets the shared record or constant moved below both,
    # or the function passed in, not a lazy import that hides the cycle.
    found = cycles(module_graph())
    assert found == [], "import cycles between modules: %s" % "; ".join(
        " -> ".join(cycle) for cycle in found)


def test_the_cycle_finder_names_a_planted_cycle(tmp_path):
    root = tmp_path / "module_utils"
    (root / "tasks").mkdir(parents=True)
    (root / "__init__.py").write_text("")
    (root / "tasks" / "__init__.py").write_text("")
    (root / "tasks" / "low.py").write_text("def f():\n    from . import high\n")
    (root / "tasks" / "high.py").write_text("from .mid import x\n")
    (root / "tasks" / "mid.py").write_text("from %s.tasks.low import f\n" % ABSOLUTE)
    (root / "tasks" / "alone.py").write_text("from ..tasks import mid\n")
    graph = module_graph(root)
    assert graph["tasks.alone"] == {"tasks.mid"}
    assert cycles(graph) == [["tasks.high", "tasks.mid", "tasks.low", "tasks.high"]]


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


def test_every_file_of_the_host_side_is_standalone():
    # What runs on the hosts imports nothing of the controller's code (see STANDALONE).
    host = sorted(p.relative_to(MODULE_UTILS).as_posix()
                  for p in (MODULE_UTILS / "tasks" / "hostside").glob("*.py"))
    assert [p for p in host if p not in STANDALONE] == []


OUTSIDE = ("plugins/modules", "plugins/inventory", "plugins/action", "plugins/plugin_utils",
           "plugins/filter", "plugins/doc_fragments", "gpufleet", "gpufleet/cli")


def outside_table(text):
    """{path or folder (ending in /): set of module_utils packages} from the doc's table
    "Outside plugins/module_utils"."""
    section = text.split("## Outside plugins/module_utils", 1)[1].split("\n## ", 1)[0]
    rows = {}
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) != 3 or cells[0] in ("where", "") or set(cells[0]) <= set("-"):
            continue
        packages = {p.strip() for p in cells[2].split(",") if p.strip()}
        for where in re.findall(r"`([^`]+)`", cells[0]):
            rows[where] = packages
    return rows


def row_of(rel, rows):
    """The doc's row for a file: its own path, else its folder's."""
    if rel in rows:
        return rows[rel]
    folder = rel.rsplit("/", 1)[0] + "/"
    return rows.get(folder)


def outside_files():
    return sorted(p for folder in OUTSIDE for p in (ROOT / folder).glob("*.py"))


def test_the_outside_table_names_real_packages():
    rows = outside_table(DOC.read_text())
    for where, allowed in rows.items():
        assert allowed <= set(RULES), "%s depends on unknown packages %s" % (
            where, sorted(allowed - set(RULES)))


@pytest.mark.parametrize("path", outside_files(), ids=lambda p: str(p.relative_to(ROOT)))
def test_outside_files_import_only_their_rows_packages(path):
    rel = path.relative_to(ROOT).as_posix()
    allowed = row_of(rel, outside_table(DOC.read_text()))
    assert allowed is not None, "%s has no row in docs/architecture.md's table" % rel
    used = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names = ([node.module + "." + a.name for a in node.names]
                     if node.module == ABSOLUTE else [node.module])
        elif isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        else:
            continue
        used.update(n[len(ABSOLUTE) + 1:].split(".")[0] for n in names
                    if (n + ".").startswith(ABSOLUTE + "."))
    assert used <= allowed, "%s imports %s, which its row of the table does not name" % (
        rel, ", ".join(sorted(used - allowed)))


def test_no_file_of_module_utils_passes_700_lines():
    # docs/architecture.md: a module that would is split along its seams; the generated
    # catalogs are data.
    long = ["%s (%d lines)" % (p.relative_to(MODULE_UTILS), n) for p in python_files()
            for n in [len(p.read_text().splitlines())]
            if n > 700 and not p.name.startswith("_catalog_")]
    assert long == []
