"""Pathological inputs to the config loader: every one must end in a SpecError that names the
source and says what is wrong, quickly, and never in any other exception.

The inputs are in pathological.py, which cli/test_cli.py shares: it writes them to files and runs
``gpufleet validate`` over them.
"""

from __future__ import annotations

import json

import pytest

from ansible_collections.gpufleet.cluster.plugins.module_utils import spec

from .pathological import (
    CRASHERS,
    HUGE_HEX,
    PATHOLOGICAL,
    TIME_LIMIT_S,
    large_task,
    time_limit,
)

SOURCE = "bad.dstack.yml"
VALID_TASK = b"type: task\ncommands: [nvidia-smi]\n"


def refuse(data, source=SOURCE, seconds=TIME_LIMIT_S, **kwargs):
    """parse_text must raise SpecError (and only that, and in time); return it."""
    with time_limit(seconds):
        with pytest.raises(spec.SpecError) as info:
            spec.parse_text(data, source=source, **kwargs)
    exc = info.value
    assert exc.source == source
    assert exc.problems, "a SpecError must list at least one problem"
    for problem in exc.problems:
        assert isinstance(problem.where, str)
        assert isinstance(problem.message, str) and problem.message.strip()
    if source:
        # The rendered error names the file on every line.
        for line in str(exc).splitlines():
            assert line.startswith(source + ": "), line
    json.dumps(exc.as_dicts())
    return exc


def message_of(exc):
    return "\n".join(p.message for p in exc.problems)


def wheres(exc):
    return [p.where for p in exc.problems]


@pytest.mark.parametrize("case", sorted(PATHOLOGICAL))
def test_pathological_input_is_refused_with_a_clear_message(case):
    data, expected = PATHOLOGICAL[case]
    exc = refuse(data)
    rendered = str(exc).lower()
    assert SOURCE in str(exc)
    for needle in expected:
        assert needle.lower() in rendered, (needle, str(exc))


@pytest.mark.parametrize("text,expected", [
    ("", "empty"),
    (" \n\t\n", "empty"),
    ("- a\n- b\n", "mapping at the top level"),
    ("type: task\x00\ncommands: [x]\n", "NUL characters"),
    ("type: task\ncommands: " + "[" * 100 + "]" * 100 + "\n", "nested more than 64 levels"),
    ("[" * 100000, "nested more than 64 levels"),
    ("#" * (4 * 1024 * 1024 + 1), "larger than 4 MiB"),
])
def test_pathological_str_input_is_refused_too(text, expected):
    exc = refuse(text)
    assert expected in message_of(exc)


def test_without_source_the_message_has_no_prefix():
    with pytest.raises(spec.SpecError) as info:
        spec.parse_text(b"")
    assert info.value.source is None
    assert str(info.value).startswith("the file is empty")


def test_not_text_at_all():
    for value in (123, None, ["type: task"], bytearray(b"type: task\n")):
        exc = refuse(value)
        assert "expected YAML text" in message_of(exc)


# ---------------------------------------------------------------------------------------------
# Kinds gpufleet does not run


@pytest.mark.parametrize("kind", ["preset"])
def test_unsupported_kinds_say_so_rather_than_a_schema_error(kind):
    exc = refuse(("type: %s\nname: my-thing\ncommands: [x]\n" % kind).encode())
    assert wheres(exc) == ["type"]
    message = message_of(exc)
    assert "not supported by gpufleet" in message
    assert "unknown" not in message
    # The type's own (unsupported) fields are not reported one by one.
    assert len(exc.problems) == 1


# ---------------------------------------------------------------------------------------------
# Encodings


def test_utf8_bom_is_accepted():
    config, warnings = spec.parse_text(b"\xef\xbb\xbf" + VALID_TASK, source=SOURCE)
    assert config["type"] == "task"
    assert config["commands"] == ["nvidia-smi"]
    assert warnings == []


def test_utf8_bom_in_text_is_accepted():
    config, _warnings = spec.parse_text("\ufeff" + VALID_TASK.decode(), source=SOURCE)
    assert config["commands"] == ["nvidia-smi"]


def test_utf8_non_ascii_is_fine():
    text = "type: task\ncommands: ['echo café ☃']\n"
    config, _warnings = spec.parse_text(text.encode(), source=SOURCE)
    assert config["commands"] == ["echo café ☃"]


def test_lone_surrogate_in_text_is_a_spec_error():
    exc = refuse("type: task\ncommands: ['\ud800']\n")
    assert "surrogate" in message_of(exc) or "UTF-8" in message_of(exc)


# ---------------------------------------------------------------------------------------------
# Size limits


def test_ten_megabyte_bytes_are_refused_naming_the_limit():
    exc = refuse(b"#" * (10 * 1024 * 1024))
    message = message_of(exc)
    assert "10.0 MiB" in message
    assert "limited to 4 MiB" in message


def test_ten_megabyte_text_is_refused_naming_the_limit():
    exc = refuse("#" * (10 * 1024 * 1024))
    assert "4 MiB" in message_of(exc)


def test_ten_megabyte_file_is_refused_naming_the_limit(tmp_path):
    path = tmp_path / "huge.dstack.yml"
    with open(path, "wb") as handle:
        handle.write(VALID_TASK)
        handle.write(b"# padding\n" * (1024 * 1024))
    with time_limit():
        with pytest.raises(spec.SpecError) as info:
            spec.parse_file(str(path))
    assert info.value.source == str(path)
    assert "limited to 4 MiB" in str(info.value)
    assert str(path) in str(info.value)
    result = spec.validate_file(str(path))
    assert result["ok"] is False and result["config"] is None
    assert "4 MiB" in result["errors"][0]["message"]


@pytest.mark.slow
def test_three_megabyte_valid_file_parses(tmp_path):
    data, count = large_task()
    assert 3 * 1000 * 1000 < len(data) < 4 * 1024 * 1024
    path = tmp_path / "big.dstack.yml"
    path.write_bytes(data)
    with time_limit():
        config, warnings = spec.parse_file(str(path))
    assert warnings == []
    assert config["name"] == "big-task"
    assert len(config["commands"]) == count
    assert config["commands"][-1] == (
        "echo 'step %07d - a long enough command line to make this file big'" % (count - 1)
    )
    with time_limit():
        assert spec.parse_text(data)[0] == config


@pytest.mark.slow
def test_more_events_than_the_limit_are_refused():
    data = b"[" + b"1," * 2000001 + b"1]"
    assert len(data) < 4 * 1024 * 1024 + 1
    exc = refuse(data)
    assert "more than 1000000 values" in message_of(exc)


# ---------------------------------------------------------------------------------------------
# Nesting (time-guarded: PyYAML construction is quadratic in depth)


@pytest.mark.parametrize("depth", [65, 100, 1000, 100000])
def test_deep_nesting_is_refused_fast(depth):
    exc = refuse(b"type: task\ncommands: " + b"[" * depth + b"]" * depth + b"\n")
    assert "nested more than 64 levels deep" in message_of(exc)
    assert "line 2" in message_of(exc)


def test_nesting_at_the_limit_is_a_normal_schema_error():
    depth = 63  # plus the top-level mapping: 64 levels
    exc = refuse(b"type: task\ncommands: " + b"[" * depth + b"]" * depth + b"\n")
    assert "nested" not in message_of(exc)
    assert any(w.startswith("commands") for w in wheres(exc))


def test_deep_nesting_through_aliases_is_harmless():
    # Each level is a new anchor: textual depth stays 2 while the data is 900 deep (and, counting
    # every alias expanded, ~400k values: under the expansion limit).
    lines = ["type: task", "anchors:", "  - &l0 [x]"]
    lines += ["  - &l%d [*l%d]" % (i, i - 1) for i in range(1, 900)]
    lines.append("commands: *l899")
    exc = refuse("\n".join(lines).encode())
    assert sorted(wheres(exc)) == ["anchors", "commands[0]"]


# ---------------------------------------------------------------------------------------------
# YAML features


def test_duplicate_keys_warn_and_the_last_wins():
    config, warnings = spec.parse_text(
        b"type: task\ncommands: [first]\nname: my-task\ncommands: [second]\n", source=SOURCE
    )
    assert config["commands"] == ["second"]
    assert len(warnings) == 1
    message = warnings[0].message
    assert "'commands'" in message and "twice" in message and "line 4" in message


def test_duplicate_nested_keys_warn_and_the_last_wins():
    config, warnings = spec.parse_text(
        b"type: task\ncommands: [x]\nresources:\n  gpu: A100\n  gpu: H100:8\n", source=SOURCE
    )
    assert config["resources"]["gpu"]["name"] == ["H100"]
    assert config["resources"]["gpu"]["count"] == {"min": 8, "max": 8}
    assert ["gpu" in w.message and "line 5" in w.message for w in warnings] == [True]


def test_merge_keys_work_and_are_not_duplicates():
    config, warnings = spec.parse_text(
        b"type: task\ncommands: [x]\nresources:\n  <<: {gpu: A100, memory: 16GB}\n"
        b"  gpu: H100\n",
        source=SOURCE,
    )
    assert config["resources"]["gpu"]["name"] == ["H100"]
    assert config["resources"]["memory"] == {"min": 16, "max": 16}
    assert warnings == []


def test_date_where_a_string_is_expected():
    exc = refuse(b"type: task\ncommands: [x]\nname: 2024-01-01\n")
    assert wheres(exc) == ["name"]
    assert "date" in message_of(exc) and "quote it" in message_of(exc)


def test_quoted_date_is_a_string():
    exc = refuse(b"type: task\ncommands: [x]\nname: '2024-01-01'\n")
    # A string now, just not a valid name: the message is about the name, not the type.
    assert "invalid name '2024-01-01'" in message_of(exc)


def test_python_tags_never_execute(tmp_path):
    marker = tmp_path / "pwned"
    exc = refuse(
        ("type: task\ncommands: [x]\nname: !!python/object/apply:os.system ['touch %s']\n"
         % marker).encode()
    )
    assert "python/object/apply" in message_of(exc)
    assert not marker.exists()


# ---------------------------------------------------------------------------------------------
# Files


def test_directory_path(tmp_path):
    with pytest.raises(spec.SpecError) as info:
        spec.parse_file(str(tmp_path))
    assert info.value.source == str(tmp_path)
    assert "is a directory" in str(info.value)
    assert str(info.value).startswith(str(tmp_path) + ": ")
    result = spec.validate_file(str(tmp_path))
    assert result == {
        "file": str(tmp_path),
        "ok": False,
        "runnable": False,
        "config": None,
        "errors": [{"path": "", "message": result["errors"][0]["message"]}],
        "unsupported": [],
        "warnings": [],
    }
    assert "directory" in result["errors"][0]["message"]


def test_missing_file(tmp_path):
    path = str(tmp_path / "nope.dstack.yml")
    with pytest.raises(spec.SpecError) as info:
        spec.parse_file(path)
    assert info.value.source == path
    assert "no such file" in str(info.value)
    result = spec.validate_file(path)
    assert result["ok"] is False and result["config"] is None
    assert result["file"] == path
    assert "no such file" in result["errors"][0]["message"]


def test_empty_file(tmp_path):
    path = tmp_path / "empty.dstack.yml"
    path.write_bytes(b"")
    with pytest.raises(spec.SpecError) as info:
        spec.parse_file(str(path))
    assert "empty" in str(info.value) and str(path) in str(info.value)


def test_unreadable_file(tmp_path, monkeypatch):
    """A file the user may not read is reported, not raised. Root reads any file, so the denial
    is injected where the loader opens files; the code path is the same."""
    from ansible_collections.gpufleet.cluster.plugins.module_utils.spec import loader

    path = tmp_path / "secret.dstack.yml"
    path.write_bytes(VALID_TASK)

    def denied(name, *args, **kwargs):
        raise PermissionError(13, "Permission denied", name)

    monkeypatch.setattr(loader, "open", denied, raising=False)
    with pytest.raises(spec.SpecError) as info:
        spec.parse_file(str(path))
    assert "permission denied" in str(info.value) and str(path) in str(info.value)


def test_validate_file_ok(tmp_path):
    path = tmp_path / "ok.dstack.yml"
    path.write_bytes(b"type: task\ncommands: [a]\ncommands: [b]\n")
    result = spec.validate_file(str(path))
    assert set(result) == {"file", "ok", "runnable", "config", "errors", "unsupported",
                           "warnings"}
    assert result["ok"] is True and result["errors"] == []
    assert result["config"]["commands"] == ["b"]
    assert len(result["warnings"]) == 1 and "twice" in result["warnings"][0]["message"]
    json.dumps(result, allow_nan=False)


# ---------------------------------------------------------------------------------------------
# expect=


def test_expect_mismatch_text():
    exc = refuse(VALID_TASK, expect="fleet")
    assert wheres(exc) == ["type"]
    assert message_of(exc) == "expected a fleet configuration here, got type: task"


def test_expect_mismatch_tuple():
    exc = refuse(VALID_TASK, expect=("fleet", "volume"))
    assert "fleet or volume" in message_of(exc) and "got type: task" in message_of(exc)


def test_expect_mismatch_data():
    with pytest.raises(spec.SpecError) as info:
        spec.parse_data({"type": "fleet", "nodes": 1}, source="inline", expect="task")
    assert info.value.source == "inline"
    assert "expected a task configuration here, got type: fleet" in str(info.value)


def test_expect_mismatch_file(tmp_path):
    path = tmp_path / "task.dstack.yml"
    path.write_bytes(VALID_TASK)
    with pytest.raises(spec.SpecError) as info:
        spec.parse_file(str(path), expect="volume")
    assert str(path) in str(info.value) and "expected a volume configuration" in str(info.value)


def test_expect_match():
    assert spec.parse_text(VALID_TASK, expect="task")[0]["type"] == "task"
    assert spec.parse_text(VALID_TASK, expect=("fleet", "task"))[0]["type"] == "task"
    assert spec.parse_data({"type": "fleet", "nodes": 2}, expect="fleet")[0]["nodes"] == {
        "min": 2, "target": 2, "max": 2}


def test_expect_does_not_hide_an_unsupported_kind():
    exc = refuse(b"type: preset\nname: p\n", expect="task")
    assert "not supported by gpufleet" in message_of(exc)


def test_a_service_is_a_configuration_of_its_own_now():
    config = spec.parse_text(b"type: service\nport: 80\ncommands: [x]\n")[0]
    assert (config["type"], config["port"]) == ("service", 80)
    exc = refuse(b"type: service\nport: 80\ncommands: [x]\n", expect="task")
    assert "expected a task configuration here, got type: service" in message_of(exc)


@pytest.mark.parametrize("user", ["²", "me:³", "--1"])
def test_unusual_user_names_are_names_as_in_dstack(user):
    """dstack reads ``user`` as an id when int() accepts it and as a name otherwise, so these
    are names (they once crashed the parser with ValueError)."""
    text = "type: task\ncommands: [x]\nuser: '%s'\n" % user
    config, _warnings = spec.parse_text(text.encode(), source=SOURCE)
    assert config["user"] == user


@pytest.mark.parametrize("case", sorted(CRASHERS))
def test_bad_values_are_spec_errors_naming_the_field(case):
    data, field = CRASHERS[case]
    exc = refuse(data)
    assert any(w == field or w.startswith(field + ".") or w.startswith(field + "[")
               for w in wheres(exc)), (field, exc.as_dicts())


@pytest.mark.parametrize("field,value", [
    ("nodes", HUGE_HEX),
    ("max_duration", HUGE_HEX),
    ("env", "{A: '1', B: 2}"),
])
def test_accepted_configs_are_json_serializable(field, value):
    """Whatever is accepted must serialize (gpufleet validate --json dumps it)."""
    text = "type: task\ncommands: [x]\n%s: %s\n" % (field, value)
    try:
        config, _warnings = spec.parse_text(text, source=SOURCE)
    except spec.SpecError as exc:
        assert any(w.startswith(field) for w in wheres(exc))
    else:
        json.dumps(config, allow_nan=False)


@pytest.mark.parametrize("field,template", [
    ("max_price", "max_price: '%s'"),
    ("resources.memory", "resources: {memory: '%s'}"),
], ids=["max_price", "memory"])
def test_long_numeric_strings_are_refused_in_linear_time(field, template):
    """One million digits then a letter: a backtracking number regex takes hours on this."""
    value = "1" * 1000000 + "x"
    text = "type: task\ncommands: [x]\n" + template % value + "\n"
    with time_limit(10):
        with pytest.raises(spec.SpecError) as info:
            spec.parse_text(text, source=SOURCE)
    assert any(w.startswith(field) for w in wheres(info.value))


# ---------------------------------------------------------------------------------------------
# Work that grows faster than the input, or is wasted: big-but-legal files must still be quick.
# Each guard is several times what the input needs once the work is linear and bounded.


@pytest.mark.slow
def test_many_node_groups_are_checked_in_linear_time():
    """40k uniquely named groups (~1 MB): the duplicate-name check must not be quadratic."""
    groups = "".join("  - {name: g%d, nodes: 1}\n" % i for i in range(40000))
    text = "type: task\nimage: ubuntu\ngroups:\n" + groups
    with time_limit(10):
        config, _warnings = spec.parse_text(text, source=SOURCE)
    assert len(config["groups"]) == 40000
    assert config["nodes"] == 40000


@pytest.mark.slow
def test_many_unknown_fields_are_reported_without_wasted_work():
    """250k misspelt keys (~2.6 MB): only 100 problems are kept, so the did-you-mean search
    must not run for the other 249,900."""
    text = "type: task\ncommands: [x]\n" + "".join("k%d: 1\n" % i for i in range(250000))
    exc = refuse(text.encode(), seconds=20)
    assert len(exc.problems) == 101
    assert "249900 more problem(s)" in exc.problems[-1].message


@pytest.mark.slow
def test_too_many_plain_values_are_refused_while_streaming():
    """Two million list items and no anchors at all: over the 1M-value limit, so the file must
    be refused from the event stream, not after constructing it, and without blaming aliases."""
    data = b"type: task\ncommands: [" + b"a," * 1999980 + b"a]\n"
    assert len(data) <= 4 * 1024 * 1024
    exc = refuse(data, seconds=10)
    assert "values" in message_of(exc)
    assert "alias" not in message_of(exc)


# ---------------------------------------------------------------------------------------------
# Names and tags are matched whole: a trailing newline (e.g. from a YAML block scalar) is not
# part of a valid name.


@pytest.mark.parametrize("text,field", [
    ("type: task\ncommands: [x]\nname: |\n  my-task\n", "name"),
    ("type: fleet\nnodes: 1\nname: |\n  my-fleet\n", "name"),
    ("type: volume\nbackend: aws\nregion: r\nsize: 1\nname: |\n  my-vol\n", "name"),
    ("type: task\ncommands: [x]\ntags:\n  team: |\n    ml\n", "tags.team"),
    ("type: task\ncommands: [x]\ntags: {\"team\\n\": ml}\n", "tags"),
    ("type: task\nimage: x\ngroups:\n  - name: |\n      master\n    nodes: 1\n", "groups[0].name"),
], ids=["task-name", "fleet-name", "volume-name", "tag-value", "tag-key", "group-name"])
def test_trailing_newline_is_not_part_of_a_valid_name(text, field):
    exc = refuse(text.encode())
    assert any(w.startswith(field) for w in wheres(exc)), exc.as_dicts()
