"""Write the documentation pages that are generated from the code, so that they cannot drift.

    .venv/bin/python scripts/gendocs.py           # write every page
    .venv/bin/python scripts/gendocs.py --check   # write nothing; exit 1 naming the stale pages

One function per page (or family of pages) returns ``{path relative to the checkout: text}``;
PAGES lists them and main() writes them all. tests/unit/repo/test_reference_docs.py calls the same
functions and fails when a checked-in page differs from what they return now.

* configuration_page: docs/reference/configuration.md, from the config model's field tables
  (plugins/module_utils/spec), its defaults (what the parser fills in for a minimal file) and
  the descriptions in plugins/module_utils/spec/reference.py;
* role_pages: the ``## Variables`` block of every docs/roles/<role>.md, from
  roles/<role>/meta/argument_specs.yml;
* cli_page: docs/reference/cli.md, from the ``gpufleet`` command's argparse parser.
"""

from __future__ import annotations

import argparse
import copy
import json
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from gpufleet._collection import ensure_importable  # noqa: E402

ensure_importable()

import yaml  # noqa: E402
from ansible_collections.gpufleet.cluster.plugins.module_utils import spec  # noqa: E402
from ansible_collections.gpufleet.cluster.plugins.module_utils.spec import (  # noqa: E402
    common,
    dev_environment,
    fleet,
    gateway,
    gpus,
    grammar,
    loader,
    reference,
    service,
    service_fields,
    task,
    volume,
)

REGENERATE = ".venv/bin/python scripts/gendocs.py"
MODULES = {
    "common": common,
    "dev_environment": dev_environment,
    "fleet": fleet,
    "gateway": gateway,
    "gpus": gpus,
    "grammar": grammar,
    "loader": loader,
    "service": service,
    "service_fields": service_fields,
    "task": task,
    "volume": volume,
}


# ---------------------------------------------------------------------------------------------
# Configuration reference: where each section's fields and defaults come from


class Variant(object):
    """A minimal valid file and the path of the object a section describes, in it and in the
    normalized result. ``label`` names the variant in the default column (None: the plain case);
    fields in ``exclude`` do not apply to it."""

    def __init__(self, config, path=(), label=None, exclude=()):
        self.config = config
        self.path = tuple(path)
        self.label = label
        self.exclude = frozenset(exclude)

    def given(self):
        """The object at ``path`` in the input (what the file sets), or {} when it has none."""
        try:
            found = at(self.config, self.path)
        except (KeyError, IndexError, TypeError):
            return {}
        return found if isinstance(found, dict) else {}

    def result(self):
        """The object at ``path`` in the normalized configuration, or None."""
        config, _warnings = spec.parse_data(copy.deepcopy(self.config))
        try:
            return at(config, self.path)
        except (KeyError, IndexError, TypeError):
            return None


def at(data, path):
    for part in path:
        data = data[part]
    return data


def with_value(config, path, value):
    """A deep copy of ``config`` with ``value`` at ``path`` (which must lead to a mapping)."""
    out = copy.deepcopy(config)
    at(out, path[:-1])[path[-1]] = value
    return out


FLEET = {"type": "fleet", "nodes": 1}
SSH_FLEET = {
    "type": "fleet",
    "ssh_config": {"hosts": [{"hostname": "gpu-1", "user": "ubuntu", "identity_file": "~/.ssh/id_ed25519"}]},
}
TASK = {"type": "task", "commands": ["nvidia-smi"]}
IMAGE_TASK = {"type": "task", "image": "ubuntu:24.04"}
# One minimal volume per distinct field table of volume.FIELDS_BY_BACKEND, by its first backend.
VOLUMES = {
    "aws": {"type": "volume", "backend": "aws", "region": "us-east-1", "size": 100},
    "kubernetes": {"type": "volume", "backend": "kubernetes", "size": 100},
    "local": {"type": "volume", "backend": "local", "size": 10},
}


SERVICE = {"type": "service", "port": 8000, "commands": ["python -m http.server 8000"]}


def service_with(key, value):
    """The minimal service with one more field."""
    return dict(SERVICE, **{key: value})


def task_with(key, value):
    """The minimal task with one more field."""
    return dict(TASK, **{key: value})


def _ssh_only():
    fields = reference.SECTIONS["fleet"]["fields"]
    return [name for name, entry in fields.items() if entry.get("status") == "ssh-only"]


def _volume_sections():
    """A section per distinct field table of volume.FIELDS_BY_BACKEND (aws, gcp and runpod share one)."""
    groups = []
    for backend, table in volume.FIELDS_BY_BACKEND.items():
        for group in groups:
            if group["table"] is table:
                group["backends"].append(backend)
                break
        else:
            groups.append({"table": table, "backends": [backend]})
    sections = []
    for group in groups:
        first = group["backends"][0]
        if first not in VOLUMES:
            raise SystemExit("scripts/gendocs.py: add a minimal %s volume to VOLUMES" % first)
        key = "volume.%s" % first if "volume.%s" % first in reference.SECTIONS else "volume"
        sections.append({
            "key": key,
            "anchor": "volume-" + "-".join(group["backends"]),
            "suffix": " (%s)" % ", ".join(group["backends"]),
            "table": group["table"],
            "variants": [Variant(VOLUMES[first])],
        })
    return sections


def sections():
    """Every section of the page, grouped: [(group title, [section, ...]), ...].

    A section has ``key`` (its entry in reference.SECTIONS), ``table`` (the parser's field table)
    or None (the fields are read from the parser's own message for an unknown key, see probe()),
    ``variants`` (minimal files the defaults are read from; the first is also the one probed)
    and optionally ``derived`` ({status: fields} notes taken from the model).
    """
    proxy = with_value(SSH_FLEET, ("ssh_config", "proxy_jump"),
                       {"hostname": "bastion", "user": "ubuntu", "identity_file": "~/.ssh/bastion"})
    return [
        ("Fleets", [
            {"key": "fleet", "table": fleet.FIELDS,
             "variants": [Variant(FLEET, exclude=_ssh_only()),
                          Variant(SSH_FLEET, label="SSH fleet", exclude=fleet.BACKEND_ONLY)],
             "derived": {"backend-only": fleet.BACKEND_ONLY}},
            {"key": "fleet.nodes", "table": None, "variants": [Variant(dict(FLEET, nodes={}), ("nodes",))]},
            {"key": "ssh_config", "table": fleet.SSH_FIELDS, "variants": [Variant(SSH_FLEET, ("ssh_config",))]},
            {"key": "ssh_config.hosts", "table": fleet.HOST_FIELDS,
             "variants": [Variant(SSH_FLEET, ("ssh_config", "hosts", 0))]},
            {"key": "proxy_jump", "table": None, "variants": [Variant(proxy, ("ssh_config", "proxy_jump"))]},
        ]),
        ("Tasks", [
            {"key": "task", "table": task.FIELDS,
             "variants": [Variant(TASK), Variant(IMAGE_TASK, label="with `image`"),
                          Variant({"type": "task", "docker": True, "commands": ["docker ps"]},
                                  label="with `docker: true`")]},
            {"key": "task.groups", "table": None,
             "variants": [Variant({"type": "task", "groups": [{"commands": ["hostname"]}]}, ("groups", 0))]},
            {"key": "task.registry_auth", "table": None,
             "variants": [Variant(dict(IMAGE_TASK, registry_auth={"username": "ci", "password": "${{ secrets.TOKEN }}"}),
                                  ("registry_auth",))]},
            {"key": "task.ports", "table": None,
             "variants": [Variant(task_with("ports", [{"container_port": 8080}]), ("ports", 0))]},
            {"key": "task.volumes.network", "table": volume._NETWORK_FIELDS,
             "variants": [Variant(task_with("volumes", [{"name": "data", "path": "/data"}]), ("volumes", 0))]},
            {"key": "task.volumes.instance", "table": volume._INSTANCE_FIELDS,
             "variants": [Variant(task_with("volumes", [{"instance_path": "/mnt/cache", "path": "/cache"}]),
                                  ("volumes", 0))]},
            {"key": "task.files", "table": None,
             "variants": [Variant(task_with("files", [{"local_path": "train.py", "path": "train.py"}]), ("files", 0))]},
            {"key": "task.repos", "table": task._REPO_FIELDS,
             "variants": [Variant(task_with("repos", [{"local_path": "."}]), ("repos", 0))]},
            {"key": "task.fleets", "table": None,
             "variants": [Variant(task_with("fleets", [{"name": "my-fleet"}]), ("fleets", 0))]},
            {"key": "task.schedule", "table": None,
             "variants": [Variant(task_with("schedule", {"cron": "0 2 * * *"}), ("schedule",))]},
            {"key": "task.utilization_policy", "table": None,
             "variants": [Variant(task_with("utilization_policy", {"min_gpu_utilization": 10, "time_window": "30m"}),
                                  ("utilization_policy",))]},
        ]),
        ("Dev environments", [
            {"key": "dev-environment",
             "table": dict((k, None) for k in ("type",) + dev_environment.DEV_FIELDS),
             "variants": [Variant({"type": "dev-environment"})]},
        ]),
        ("Services", [
            {"key": "service", "table": dict((k, None) for k in ("type",) + service.SERVICE_FIELDS),
             "variants": [Variant(SERVICE)]},
            {"key": "service.model", "table": None,
             "variants": [Variant(service_with("model", {"format": "openai", "name": "llama"}), ("model",))]},
            {"key": "service.model.tgi", "table": None,
             "variants": [Variant(service_with("model", {"format": "tgi", "name": "llama"}), ("model",))]},
            {"key": "service.scaling", "table": None,
             "variants": [Variant(dict(SERVICE, replicas="1..4", scaling={"metric": "rps", "target": 10}),
                                  ("scaling",))]},
            {"key": "service.rate_limits", "table": None,
             "variants": [Variant(service_with("rate_limits", [{"rps": 10}]), ("rate_limits", 0))]},
            {"key": "service.rate_limits.key", "table": None,
             "variants": [Variant(service_with("rate_limits", [{"rps": 10, "key": {"type": "header", "header": "X-Api-Key"}}]),
                                  ("rate_limits", 0, "key"))]},
            {"key": "service.probes", "table": service_fields.PROBE_FIELDS,
             "variants": [Variant(service_with("probes", [{"type": "http"}]), ("probes", 0))]},
            {"key": "service.probes.headers", "table": None,
             "variants": [Variant(service_with("probes", [{"type": "http", "headers": [{"name": "X-A", "value": "1"}]}]),
                                  ("probes", 0, "headers", 0))]},
            {"key": "service.groups", "table": service.GROUP_FIELDS,
             "variants": [Variant({"type": "service", "port": 8000, "groups": [{"replicas": 1, "commands": ["serve"]}]},
                                  ("groups", 0))]},
        ]),
        ("Volumes", _volume_sections()),
        ("Gateways", [
            {"key": "gateway", "table": gateway.FIELDS,
             "variants": [Variant({"type": "gateway", "backend": "aws", "region": "us-east-1",
                                   "domain": "example.com"}),
                          Variant({"type": "gateway", "backend": "local", "domain": "example.com"},
                                  label="`backend: local`")]},
        ]),
        ("Shared objects", [
            {"key": "resources", "table": grammar.RESOURCE_FIELDS,
             "variants": [Variant(TASK, ("resources",)),
                          Variant(FLEET, ("resources",), label="backend fleet without `resources`")]},
            {"key": "resources.cpu", "table": None,
             "variants": [Variant(task_with("resources", {"cpu": {}}), ("resources", "cpu"))]},
            {"key": "resources.gpu", "table": None,
             "variants": [Variant(dict(IMAGE_TASK, resources={"gpu": {}}), ("resources", "gpu")),
                          Variant(task_with("resources", {"gpu": {}}), ("resources", "gpu"),
                                  label="on the default image")]},
            {"key": "resources.disk", "table": None,
             "variants": [Variant(task_with("resources", {"disk": {"size": "100GB.."}}), ("resources", "disk"))]},
            {"key": "retry", "table": None,
             "variants": [Variant(task_with("retry", {}), ("retry",))]},
            {"key": "backend_options", "table": common.VASTAI_OPTIONS,
             "variants": [Variant(dict(FLEET, backend_options=[{}]), ("backend_options", 0))]},
        ]),
    ]


def all_sections():
    return [section for _title, group in sections() for section in group]


PROBE = "zz_gendocs_probe"
_ALLOWED = re.compile(r"Allowed here: (.*)\.$")


def probe(variant):
    """The keys the parser accepts in the mapping at ``variant.path``: it is given an unknown key,
    and the parser's message for it lists the keys allowed there."""
    config = copy.deepcopy(variant.config)
    target = at(config, variant.path)
    target[PROBE] = 1
    try:
        spec.parse_data(config)
    except spec.SpecError as exc:
        where = spec.format_path(variant.path + (PROBE,))
        for problem in exc.problems:
            match = _ALLOWED.search(problem.message)
            if problem.where == where and match:
                return [key.strip() for key in match.group(1).split(",")]
    raise RuntimeError("the parser did not list the keys allowed at %s" % spec.format_path(variant.path))


def entries(key):
    """The described fields of a section: its own, over those of its ``base`` section."""
    data = reference.SECTIONS[key]
    merged = dict(reference.SECTIONS[data["base"]]["fields"]) if data.get("base") else {}
    merged.update(data["fields"])
    return merged


def model_fields(section):
    """The field names of a section, in the model's order (or the description's, for probed ones)."""
    if section["table"] is not None:
        return list(section["table"])
    accepted = probe(section["variants"][0])
    described = [name for name in entries(section["key"]) if name in accepted]
    return described + sorted(name for name in accepted if name not in described)


def derived_defaults(section, name):
    """[(label, value)]: the value each variant's normalized config has for a field it leaves out,
    one entry per distinct value."""
    found = []
    for variant in section["variants"]:
        if name in variant.exclude or name in variant.given():
            continue
        result = variant.result()
        if not isinstance(result, dict) or name not in result:
            continue
        value = result[name]
        if any(_json(value) == _json(seen) for _label, seen in found):
            continue
        found.append((variant.label, value))
    return found


# ---------------------------------------------------------------------------------------------
# Configuration reference: rendering


def _json(value):
    return json.dumps(value, sort_keys=False)


def human_duration(seconds):
    for unit, size in (("w", 604800), ("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size and seconds % size == 0:
            return "%d%s" % (seconds // size, unit)
    return "%ds" % seconds


def anchor(key):
    return key.replace(".", "-").replace("_", "-")


def _titles():
    out = {}
    for section in all_sections():
        key = section["key"]
        if key not in out:
            out[key] = (section.get("anchor") or anchor(key),
                        reference.SECTIONS[key]["title"] + section.get("suffix", ""))
    return out


def expand(text, titles):
    """Fill in ``{choices:module.NAME}`` and ``{see:section}``."""

    def choices(match):
        values = getattr(MODULES[match.group(1)], match.group(2))
        return ", ".join("`%s`" % value for value in values)

    def see(match):
        target, title = titles[match.group(1)]
        return "[%s](#%s)" % (title, target)

    text = re.sub(r"\{choices:(\w+)\.(\w+)\}", choices, text)
    return re.sub(r"\{see:([\w.]+)\}", see, text)


def prose(text):
    """Markdown-safe text: ``<`` and ``>`` outside code spans would be read as HTML."""
    parts = text.split("`")
    for index in range(0, len(parts), 2):
        parts[index] = parts[index].replace("<", "&lt;").replace(">", "&gt;")
    return "`".join(parts)


def cell(text):
    return prose(text).replace("|", "\\|").replace("\n", " ")


def default_cell(section, name, entry, titles):
    if "required" in entry:
        return ("required " + entry["required"]).strip()
    if "see" in entry:
        return "see " + expand("{see:%s}" % entry["see"], titles)
    parts = []
    for label, value in derived_defaults(section, name):
        shown = "`%s`" % _json(value)
        if entry.get("kind") == "duration" and isinstance(value, int) and not isinstance(value, bool):
            shown += " (%s)" % human_duration(value)
        parts.append("%s: %s" % (label, shown) if label else shown)
    return "; ".join(parts) or "—"


def meaning_cell(section, name, entry, titles):
    notes = [reference.NOTES[status] for status, names in sorted(section.get("derived", {}).items())
             if name in names]
    if entry.get("status"):
        notes.append(reference.NOTES[entry["status"]])
    return " ".join(notes + [expand(entry["text"], titles)])


def render_section(section, titles):
    key = section["key"]
    data = reference.SECTIONS[key]
    target, title = titles[key]
    described = entries(key)
    lines = ['<a id="%s"></a>' % target, "", "### %s" % title, "", expand(data["intro"], titles), "",
             "| field | accepted values | default | meaning |", "|---|---|---|---|"]
    for name in model_fields(section):
        entry = described.get(name)
        if entry is None:
            raise KeyError("%s.%s has no description in plugins/module_utils/spec/reference.py" % (key, name))
        lines.append("| `%s` | %s | %s | %s |" % (
            name,
            cell(expand(entry["values"], titles)),
            cell(default_cell(section, name, entry, titles)),
            cell(meaning_cell(section, name, entry, titles)),
        ))
    return lines + [""]


def configuration_page():
    """docs/reference/configuration.md."""
    titles = _titles()
    lines = [
        "# Configuration reference",
        "",
        "<!-- Generated by scripts/gendocs.py from the config model (plugins/module_utils/spec) and the",
        "     descriptions in plugins/module_utils/spec/reference.py. Do not edit: run %s -->" % REGENERATE,
        "",
        reference.INTRO,
        "",
    ]
    groups = sections()
    for title, group in groups:
        lines.append("- %s: %s" % (title, ", ".join(
            "[%s](#%s)" % titles[s["key"]][::-1] for s in group)))
    lines.append("- [Removed fields](#removed-fields), [refused types](#refused-types)")
    lines.append("")
    for title, group in groups:
        lines += ["## %s" % title, ""]
        for section in group:
            lines += render_section(section, titles)
    lines += ['<a id="removed-fields"></a>', "", "## Removed fields", "", expand(reference.REMOVED_INTRO, titles), "",
              "| field | message |", "|---|---|"]
    for name, message in common.REMOVED_FIELDS.items():
        lines.append("| `%s` | %s %s |" % (name, name, cell(message)))
    lines += ["", '<a id="refused-types"></a>', "", "## Refused types", "", reference.NOT_SUPPORTED_INTRO, "",
              "| type | message |", "|---|---|"]
    for name, message in loader.NOT_SUPPORTED.items():
        lines.append("| `%s` | %s |" % (name, cell(message)))
    return {"docs/reference/configuration.md": "\n".join(lines) + "\n"}


# ---------------------------------------------------------------------------------------------
# Role pages: the Variables block of docs/roles/<role>.md from meta/argument_specs.yml

ROLE_BEGIN = "<!-- BEGIN generated from roles/%s/meta/argument_specs.yml by scripts/gendocs.py: do not edit -->"
ROLE_END = "<!-- END generated -->"
_MARKUP_2 = re.compile(r"\b([LR])\(([^,()]*),\s*([^()]*)\)")
_MARKUP_1 = re.compile(r"\b(RV|[IBMUCEVOP])\(([^()]*)\)")


def roles():
    return sorted(p.name for p in (ROOT / "roles").iterdir() if (p / "meta" / "argument_specs.yml").is_file())


def markup(text):
    """Ansible's documentation markup (C(), V(), O(), I(), L()...) as Markdown."""

    def two(match):
        kind, label, target = match.groups()
        return "[%s](%s)" % (label.strip(), target.strip()) if kind == "L" else label.strip()

    def one(match):
        kind, body = match.groups()
        if kind == "I":
            return "*%s*" % body
        if kind == "B":
            return "**%s**" % body
        if kind == "U":
            return "[%s](%s)" % (body, body)
        return "`%s`" % body

    return _MARKUP_1.sub(one, _MARKUP_2.sub(two, text)).replace("HORIZONTALLINE", "")


def paragraphs(value):
    if value is None:
        return []
    return [value] if isinstance(value, str) else [str(v) for v in value]


def yaml_value(value):
    if isinstance(value, str):
        if value == "":
            return '""'
        try:
            loaded = value if value.startswith("{{") else yaml.safe_load(value)
        except yaml.YAMLError:
            loaded = None
        return value if loaded == value and value.strip() == value else json.dumps(value)
    if isinstance(value, (list, dict)):
        return yaml.safe_dump(value, default_flow_style=True, width=10 ** 6).strip()
    return yaml.safe_dump(value).replace("\n...", "").strip()


def _type_text(option):
    text = option.get("type", "str")
    if option.get("elements"):
        text += " of %s" % option["elements"]
    if option.get("choices"):
        text += ": " + ", ".join("`%s`" % yaml_value(choice) for choice in option["choices"])
    return text


def _option_rows(options, prefix=""):
    rows = []
    for name, option in options.items():
        if option.get("required"):
            default = "**required**"
        elif "default" in option:
            default = "`%s`" % yaml_value(option["default"])
        else:
            default = "—"
        text = " ".join(markup(p) for p in paragraphs(option.get("description")))
        rows.append("| `%s%s` | %s | %s | %s |" % (prefix, name, cell(_type_text(option)), cell(default), cell(text)))
        if option.get("options"):
            sub = "%s%s%s." % (prefix, name, "[]" if option.get("type") == "list" else "")
            rows += _option_rows(option["options"], sub)
    return rows


def role_block(role):
    """The generated Variables block of one role's page, markers included."""
    specs = yaml.safe_load((ROOT / "roles" / role / "meta" / "argument_specs.yml").read_text())["argument_specs"]
    lines = [ROLE_BEGIN % role]
    for entry_point, entry in specs.items():
        lines.append("")
        if len(specs) > 1:
            lines += ["### Entry point `%s`" % entry_point, ""]
            summary = [markup(entry.get("short_description", "")).rstrip(".") + "."]
            if entry_point != "main":
                summary += [markup(p) for p in paragraphs(entry.get("description"))]
            lines += [prose(" ".join(summary)), ""]
        lines += ["| variable | type | default | description |", "|---|---|---|---|"]
        lines += _option_rows(entry.get("options") or {})
    return "\n".join(lines + ["", ROLE_END])


def _with_block(text, role, block):
    begin = ROLE_BEGIN % role
    if begin in text and ROLE_END in text:
        head, rest = text.split(begin, 1)
        _old, tail = rest.split(ROLE_END, 1)
        return head + block + tail
    lines = text.split("\n")
    if "## Variables" not in lines:
        return text.rstrip("\n") + "\n\n## Variables\n\n" + block + "\n"
    start = lines.index("## Variables") + 1
    while start < len(lines) and not lines[start].startswith("|") and not lines[start].startswith("#"):
        start += 1
    end = start
    while end < len(lines) and lines[end].startswith("|"):
        end += 1
    if start == end:  # no table under the heading: the block goes right below it
        start = end = lines.index("## Variables") + 2
    return "\n".join(lines[:start] + block.split("\n") + lines[end:])


def role_pages():
    """The Variables block of every docs/roles/<role>.md (the prose around it is kept)."""
    pages = {}
    for role in roles():
        path = "docs/roles/%s.md" % role
        page = ROOT / path
        if page.is_file():
            text = page.read_text()
        else:
            text = "# gpufleet.cluster.%s\n" % role
        pages[path] = _with_block(text, role, role_block(role))
    return pages


# ---------------------------------------------------------------------------------------------
# The gpufleet command: docs/reference/cli.md from its argparse parser


def _formatter(parser):
    return parser.formatter_class(prog=parser.prog, width=100)


def _usage(parser):
    formatter = _formatter(parser)
    formatter.add_usage(parser.usage, parser._actions, parser._mutually_exclusive_groups, prefix="")
    return formatter.format_help().strip()


def _subcommands(parser):
    """[(name, parser, short help)] of the parser's subcommands, in order."""
    out = []
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            helps = {choice.dest: choice.help for choice in action._choices_actions}
            for name, sub in action.choices.items():
                out.append((name, sub, helps.get(name) or ""))
    return out


_FLAGS = (argparse._StoreTrueAction, argparse._StoreFalseAction, argparse._HelpAction,
          argparse._VersionAction, argparse._CountAction, argparse._StoreConstAction)


def _argument_rows(parser):
    formatter = _formatter(parser)
    rows = []
    for action in parser._actions:
        if action.help == argparse.SUPPRESS or isinstance(action, argparse._SubParsersAction):
            continue
        invocation = formatter._format_action_invocation(action)
        helptext = formatter._expand_help(action) if action.help else ""
        if action.required:
            default = "required"
        elif isinstance(action, _FLAGS) or action.default in (None, argparse.SUPPRESS, [], ()):
            default = "—"
        else:
            default = "`%s`" % action.default
        rows.append("| `%s` | %s | %s |" % (invocation, default, cell(helptext)))
    return rows


def _command_sections(parser, level):
    lines = ["%s `%s`" % ("#" * level, parser.prog), ""]
    if parser.description:
        lines += [prose(parser.description), ""]
    lines += ["```", _usage(parser), "```", ""]
    subcommands = _subcommands(parser)
    if subcommands:
        lines += ["| command | what it does |", "|---|---|"]
        lines += ["| [`%s`](#%s) | %s |" % (name, _cli_anchor(sub.prog), cell(text)) for name, sub, text in subcommands]
        lines.append("")
    rows = _argument_rows(parser)
    if rows:
        lines += ["| argument | default | meaning |", "|---|---|---|"] + rows + [""]
    for _name, sub, _text in subcommands:
        lines += _command_sections(sub, level + 1)
    return lines


def _cli_anchor(prog):
    return prog.replace(" ", "-")


def cli_page():
    """docs/reference/cli.md, from gpufleet.cli._build_parser() as it is now."""
    from gpufleet import cli

    parser = cli._build_parser()
    lines = [
        "# The `gpufleet` command",
        "",
        "<!-- Generated by scripts/gendocs.py from the command's argparse parser (gpufleet/cli/).",
        "     Do not edit: run %s -->" % REGENERATE,
        "",
        "Every command, subcommand and option of `gpufleet`, as its own `--help` describes them. "
        "See [tasks.md](../tasks.md), [fleets.md](../fleets.md) and [offers.md](../offers.md) for what "
        "the commands do in depth.",
        "",
    ]
    body = _command_sections(parser, 2)
    # Anchors of the form the command table links to.
    out = []
    for line in body:
        match = re.match(r"^(#+) `(.*)`$", line)
        if match:
            out += ['<a id="%s"></a>' % _cli_anchor(match.group(2)), ""]
        out.append(line)
    return {"docs/reference/cli.md": "\n".join(lines + out).rstrip("\n") + "\n"}


# ---------------------------------------------------------------------------------------------

PAGES = [configuration_page, role_pages, cli_page]


def generate():
    """{path: text} of every generated page."""
    pages = {}
    for page in PAGES:
        pages.update(page())
    return pages


def stale(pages=None):
    """The paths whose checked-in text differs from what the generator makes now."""
    pages = generate() if pages is None else pages
    out = []
    for path, text in sorted(pages.items()):
        target = ROOT / path
        if not target.is_file() or target.read_text() != text:
            out.append(path)
    return out


def main(argv=None):
    parser = argparse.ArgumentParser(description="Write the documentation pages generated from the code.")
    parser.add_argument("--check", action="store_true", help="write nothing; exit 1 naming the stale pages")
    args = parser.parse_args(argv)
    pages = generate()
    outdated = stale(pages)
    if args.check:
        for path in outdated:
            print("stale: %s (run %s)" % (path, REGENERATE))
        return 1 if outdated else 0
    for path in outdated:
        target = ROOT / path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(pages[path])
        print("wrote %s" % path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
