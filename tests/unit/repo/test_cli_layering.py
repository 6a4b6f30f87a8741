"""The ``gpufleet`` command reaches the collection through gpufleet.api only, and prints tables
with the collection's render package (the edge): docs/architecture.md, "Outside
plugins/module_utils". Every import in gpufleet/cli is read, those inside functions too."""

from __future__ import annotations

import ast
from pathlib import Path

CLI = Path(__file__).resolve().parents[3] / "gpufleet" / "cli"
RENDER = "ansible_collections.gpufleet.cluster.plugins.module_utils.render"


def imports(path):
    """``(line, what)`` for each import of gpufleet or the collection in ``path``:
    ``..api``, ``.common``, ``gpufleet.direct``, ``ansible_collections...``."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.ImportFrom):
            base = "." * node.level + (node.module or "")
            if node.level == 2 and not node.module:   # from .. import api
                found += [(node.lineno, ".." + a.name) for a in node.names]
            elif node.level or base.startswith(("gpufleet", "ansible_collections")):
                found.append((node.lineno, base))
        elif isinstance(node, ast.Import):
            found += [(node.lineno, a.name) for a in node.names
                      if a.name.startswith(("gpufleet", "ansible_collections"))]
    return found


def allowed(what):
    return (what in ("..api", "gpufleet.api", "..__version__")
            or (what.startswith(".") and not what.startswith(".."))   # this package
            or what == RENDER or what.startswith(RENDER + "."))


def test_the_command_imports_the_api_and_the_render_package_only():
    wrong = ["%s:%d: %s" % (path.name, line, what) for path in sorted(CLI.glob("*.py"))
             for line, what in imports(path) if not allowed(what)]
    assert wrong == []


def test_the_check_sees_what_it_must_refuse(tmp_path):
    path = tmp_path / "bad.py"
    path.write_text("from .. import direct\nfrom ..runner import x\n"
                    "def f():\n    from ansible_collections.gpufleet.cluster.plugins."
                    "module_utils.tasks import entry\n    import gpufleet.direct\n"
                    "from ..api import GpufleetError\nfrom . import common\n")
    assert [what for _line, what in imports(path) if not allowed(what)] == [
        "..direct", "..runner", "ansible_collections.gpufleet.cluster.plugins.module_utils."
        "tasks", "gpufleet.direct"]
