"""The pages generated from the code (scripts/gendocs.py) are current, and complete.

* docs/reference/configuration.md: every field of every field table of the config model has a
  description in plugins/module_utils/spec/reference.py and every description names a field of
  the model; the defaults and "required" marks are what the parser does; the page is current.
* docs/roles/<role>.md: every role has a page whose Variables block is what its
  meta/argument_specs.yml renders to now.
* docs/reference/cli.md: what the gpufleet command's parser renders to now.

When one of these fails after a change to the code, run ``.venv/bin/python scripts/gendocs.py``
and check the pages in; when a field is new, describe it in reference.py first.
"""

from __future__ import annotations

import copy
import importlib.util
import json
import pkgutil
import re
from pathlib import Path

import pytest
import yaml
from ansible_collections.gpufleet.cluster.plugins.module_utils import spec
from ansible_collections.gpufleet.cluster.plugins.module_utils.spec import reference

ROOT = Path(__file__).resolve().parents[3]
REGENERATE = "run `.venv/bin/python scripts/gendocs.py` and check the pages in"

_loader = importlib.util.spec_from_file_location("gendocs", ROOT / "scripts" / "gendocs.py")
gendocs = importlib.util.module_from_spec(_loader)
_loader.loader.exec_module(gendocs)

SECTIONS = gendocs.all_sections()
SECTION_IDS = [s.get("anchor") or s["key"] for s in SECTIONS]


def _page(path):
    return (ROOT / path).read_text()


def _differs(path, expected):
    """A short account of where a checked-in page differs from what the generator makes."""
    actual = (ROOT / path).read_text().splitlines() if (ROOT / path).is_file() else []
    wanted = expected.splitlines()
    for number, (have, want) in enumerate(zip(actual, wanted), 1):
        if have != want:
            return "%s is stale (line %d):\n  checked in: %s\n  generated:  %s\n%s" % (
                path, number, have[:200], want[:200], REGENERATE)
    return "%s is stale (%d lines checked in, %d generated): %s" % (
        path, len(actual), len(wanted), REGENERATE)


# ---------------------------------------------------------------------------------------------
# (a) The descriptions cover the model, and only the model


@pytest.mark.parametrize("section", SECTIONS, ids=SECTION_IDS)
def test_every_field_of_the_model_is_described_and_every_description_is_a_field(section):
    key = section["key"]
    model = set(gendocs.model_fields(section))
    described = gendocs.entries(key)
    own = set(reference.SECTIONS[key]["fields"])
    missing = sorted(model - set(described))
    assert not missing, (
        "%s: fields of the parser with no description in plugins/module_utils/spec/reference.py: %s"
        % (key, ", ".join(missing)))
    if reference.SECTIONS[key].get("base"):
        unknown = sorted(own - model)
    else:
        unknown = sorted(set(described) - model)
    assert not unknown, (
        "%s: reference.py describes fields the parser does not accept here: %s" % (key, ", ".join(unknown)))


def _field_tables(module):
    """The module-level field tables of one module of the model: dicts named *FIELDS* or *OPTIONS*
    whose values are parsers (or such dicts, as volume.FIELDS_BY_BACKEND)."""
    tables = []
    for name, value in vars(module).items():
        if not re.search(r"FIELDS|OPTIONS", name) or not isinstance(value, dict) or not value:
            continue
        if all(callable(v) for v in value.values()):
            tables.append(("%s.%s" % (module.__name__.rsplit(".", 1)[-1], name), value))
        elif all(isinstance(v, dict) and all(callable(p) for p in v.values()) for v in value.values()):
            for key, table in value.items():
                tables.append(("%s.%s[%r]" % (module.__name__.rsplit(".", 1)[-1], name, key), table))
    return tables


def test_every_field_table_of_the_model_has_a_section():
    walked = [s["table"] for s in SECTIONS if s["table"] is not None]
    modules = []
    for info in pkgutil.iter_modules(spec.__path__):
        if info.name != "reference":
            modules.append(importlib.import_module(spec.__name__ + "." + info.name))
    tables = [t for module in modules for t in _field_tables(module)]
    assert len(tables) >= 10
    for name, table in tables:
        assert any(table is w for w in walked), (
            "%s is a field table of the config model that scripts/gendocs.py does not document: add a "
            "section for it to sections() and its fields to plugins/module_utils/spec/reference.py" % name)


def test_every_description_section_is_used_and_its_words_are_known():
    used = set(s["key"] for s in SECTIONS)
    used |= set(reference.SECTIONS[k]["base"] for k in used if reference.SECTIONS[k].get("base"))
    assert used == set(reference.SECTIONS), "sections of reference.py no page shows: %s" % (
        sorted(set(reference.SECTIONS) - used))
    for key, data in reference.SECTIONS.items():
        assert data["title"] and data["intro"], key
        for name, entry in data["fields"].items():
            assert set(entry) <= {"values", "text", "required", "status", "kind", "see"}, (key, name)
            assert entry["values"] and entry["text"], (key, name)
            assert entry.get("status") is None or entry["status"] in reference.NOTES, (key, name)
            assert entry.get("see") is None or entry["see"] in reference.SECTIONS, (key, name)
            assert entry.get("kind") in (None, "duration"), (key, name)
            assert "required" not in entry or "see" not in entry, (key, name)


# ---------------------------------------------------------------------------------------------
# The "required" marks and the defaults are the parser's


def _fails(config):
    try:
        spec.parse_data(copy.deepcopy(config))
    except spec.SpecError:
        return True
    return False


@pytest.mark.parametrize("section", SECTIONS, ids=SECTION_IDS)
def test_required_marks_are_what_the_parser_requires(section):
    """A field of the minimal file is marked required exactly when leaving it out is an error;
    a field marked required elsewhere is given in another variant and needed there."""
    described = gendocs.entries(section["key"])
    first = section["variants"][0]
    assert not _fails(first.config), "the minimal file of %s does not parse" % section["key"]
    for name in first.given():
        without = copy.deepcopy(first.config)
        del gendocs.at(without, first.path)[name]
        assert _fails(without) == ("required" in described[name]), (
            "%s.%s: the parser %s it, reference.py %s" % (
                section["key"], name, "requires" if _fails(without) else "does not require",
                "marks it required" if "required" in described[name] else "does not"))
    for name in gendocs.model_fields(section):
        if "required" not in described[name] or name in first.given():
            continue
        needed = []
        for variant in section["variants"][1:]:
            if name in variant.given():
                without = copy.deepcopy(variant.config)
                del gendocs.at(without, variant.path)[name]
                needed.append(_fails(without))
        assert needed and all(needed), "%s.%s is marked required, but no minimal file needs it" % (
            section["key"], name)


def _row(page, anchor, field):
    """The cells of a field's row in the section with that anchor."""
    start = page.index('<a id="%s"></a>' % anchor)
    end = page.find("<a id=", start + 1)
    for line in page[start:end if end > 0 else None].splitlines():
        if line.startswith("| `%s` |" % field):
            return [c.strip() for c in re.split(r"(?<!\\)\|", line)[1:-1]]
    raise AssertionError("no row for %s in section %s" % (field, anchor))


def _shown(value):
    return "`%s`" % json.dumps(value)


def _parse(config):
    return spec.parse_data(config)[0]


@pytest.mark.parametrize("anchor, field, config, path", [
    ("fleet", "idle_duration", {"type": "fleet", "nodes": 3}, ("idle_duration",)),
    ("fleet", "spot_policy", {"type": "fleet", "nodes": 3}, ("spot_policy",)),
    ("fleet", "placement", {"type": "fleet", "nodes": 3}, ("placement",)),
    ("fleet-nodes", "max", {"type": "fleet", "nodes": {"min": 1}}, ("nodes", "max")),
    ("ssh-config-hosts", "port",
     {"type": "fleet", "ssh_config": {"user": "u", "identity_file": "k", "hosts": ["h"]}},
     ("ssh_config", "hosts", 0, "port")),
    ("task", "stop_duration", {"type": "task", "commands": ["true"]}, ("stop_duration",)),
    ("task", "max_duration", {"type": "task", "commands": ["true"]}, ("max_duration",)),
    ("task", "idle_duration", {"type": "task", "commands": ["true"]}, ("idle_duration",)),
    ("task", "creation_policy", {"type": "task", "commands": ["true"]}, ("creation_policy",)),
    ("task", "shell", {"type": "task", "commands": ["true"]}, ("shell",)),
    ("task", "shell", {"type": "task", "image": "alpine"}, ("shell",)),
    ("task", "nodes", {"type": "task", "commands": ["true"]}, ("nodes",)),
    ("resources", "memory", {"type": "task", "commands": ["true"]}, ("resources", "memory")),
    ("resources", "disk", {"type": "task", "commands": ["true"]}, ("resources", "disk")),
    ("resources", "cpu", {"type": "fleet", "nodes": 1}, ("resources", "cpu")),
    ("resources-gpu", "count", {"type": "task", "commands": ["true"], "resources": {"gpu": "H100"}},
     ("resources", "gpu", "count")),
    ("retry", "duration", {"type": "task", "commands": ["true"], "retry": True}, ("retry", "duration")),
    ("retry", "on_events", {"type": "fleet", "nodes": 1, "retry": {"duration": "1h"}}, ("retry", "on_events")),
    ("volume-kubernetes", "access_modes", {"type": "volume", "backend": "kubernetes", "size": 1},
     ("access_modes",)),
    ("volume-aws-gcp-runpod", "auto_cleanup_duration",
     {"type": "volume", "backend": "gcp", "region": "r", "size": 1}, ("auto_cleanup_duration",)),
])
def test_the_defaults_shown_are_those_the_parser_gives(anchor, field, config, path):
    page = _page("docs/reference/configuration.md")
    value = gendocs.at(_parse(config), path)
    default = _row(page, anchor, field)[2]
    assert _shown(value) in default, "%s.%s: the parser gives %s, the page shows %s (%s)" % (
        anchor, field, _shown(value), default, REGENERATE)


def test_a_field_the_parser_requires_is_shown_as_required():
    page = _page("docs/reference/configuration.md")
    assert _row(page, "ssh-config", "hosts")[2].startswith("required")
    assert _row(page, "task", "commands")[2].startswith("required")
    assert _row(page, "volume-aws-gcp-runpod", "region")[2] == "required"
    assert not _row(page, "volume-kubernetes", "region")[2].startswith("required")


# ---------------------------------------------------------------------------------------------
# (b) The checked-in pages are what the generator makes now


def test_the_configuration_reference_is_current():
    for path, text in gendocs.configuration_page().items():
        assert _page(path) == text, _differs(path, text)


def test_the_cli_reference_is_current():
    for path, text in gendocs.cli_page().items():
        assert (ROOT / path).is_file() and _page(path) == text, _differs(path, text)


def test_the_cli_reference_shows_every_command_and_option():
    from gpufleet import cli

    page = _page("docs/reference/cli.md")

    def walk(parser):
        assert "`%s`" % parser.prog in page, parser.prog
        for action in parser._actions:
            for option in action.option_strings:
                assert option in page, "%s %s" % (parser.prog, option)
        for _name, sub, _help in gendocs._subcommands(parser):
            walk(sub)

    walk(cli._build_parser())


def test_every_role_has_a_page_with_a_generated_variables_block():
    roles = gendocs.roles()
    assert {"docker", "nvidia", "amd", "efa", "infiniband", "gcp_gpudirect", "firewall", "dcgm",
            "nccl_tests"} <= set(roles)
    for role in roles:
        page = ROOT / "docs" / "roles" / ("%s.md" % role)
        assert page.is_file(), "roles/%s has no docs/roles/%s.md: %s" % (role, role, REGENERATE)
        text = page.read_text()
        assert text.count(gendocs.ROLE_BEGIN % role) == 1, "%s: no generated block (%s)" % (page, REGENERATE)
        assert text.count(gendocs.ROLE_END) == 1, page


@pytest.mark.parametrize("role", gendocs.roles())
def test_the_role_pages_are_current(role):
    path = "docs/roles/%s.md" % role
    text = gendocs.role_pages()[path]
    assert _page(path) == text, _differs(path, text)
    specs = yaml.safe_load((ROOT / "roles" / role / "meta" / "argument_specs.yml").read_text())
    for entry in specs["argument_specs"].values():
        for option in entry.get("options") or {}:
            assert "| `%s` |" % option in text, (role, option)


# ---------------------------------------------------------------------------------------------
# The pages hold together


@pytest.mark.parametrize("path", ["docs/reference/configuration.md", "docs/reference/cli.md"])
def test_every_link_within_a_page_has_its_anchor(path):
    page = _page(path)
    anchors = set(re.findall(r'<a id="([^"]+)"></a>', page))
    for target in re.findall(r"\]\(#([^)]+)\)", page):
        assert target in anchors, "%s links to #%s, which it does not have" % (path, target)


def test_the_reference_readme_lists_the_generated_pages():
    readme = _page("docs/reference/README.md")
    for path in sorted(gendocs.generate()):
        name = path[len("docs/reference/"):] if path.startswith("docs/reference/") else "../roles/"
        assert name in readme, "docs/reference/README.md does not mention %s" % path
    assert "scripts/gendocs.py" in readme and "--check" in readme


def test_check_names_the_stale_pages():
    assert gendocs.stale({"docs/reference/cli.md": "not the page\n"}) == ["docs/reference/cli.md"]
    assert gendocs.stale({"docs/reference/never-written.md": ""}) == ["docs/reference/never-written.md"]
