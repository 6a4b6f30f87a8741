"""Property tests: whatever it is given, the config model returns a JSON-ready config or raises
SpecError -- never any other exception -- and it does so deterministically.

Deterministic by construction (derandomize, no example database), so CI sees the same examples
on every run; `slow` marks the tests with many examples (deselect with -m "not slow").
"""

from __future__ import annotations

import copy
import datetime
import json
import math
import re

import pytest
import yaml
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from ansible_collections.gpufleet.cluster.plugins.module_utils import spec

SETTINGS = dict(
    deadline=None,
    derandomize=True,
    database=None,
    print_blob=False,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                           HealthCheck.filter_too_much],
)
FAST = settings(max_examples=250, **SETTINGS)
BIG = settings(max_examples=700, **SETTINGS)

SOURCE = "prop.dstack.yml"

# ---------------------------------------------------------------------------------------------
# Valid starting points: one of each shape, using as many fields as possible.

BASES = {
    "fleet-backend": {
        "type": "fleet",
        "name": "gpu-fleet",
        "nodes": "1..4",
        "placement": "cluster",
        "blocks": 2,
        "reservation": "r-123",
        "resources": {
            "cpu": "x86:32..",
            "memory": "256GB..",
            "gpu": "nvidia:H100:80GB:8",
            "disk": {"size": "500GB.."},
            "shm_size": "16GB",
        },
        "backends": ["aws", "gcp"],
        "regions": ["us-east-1"],
        "availability_zones": ["us-east-1a"],
        "instance_types": ["p5.48xlarge"],
        "spot_policy": "auto",
        "retry": {"on_events": ["no-capacity", "interruption"], "duration": "2h"},
        "max_price": 40.5,
        "idle_duration": "1h",
        "tags": {"team": "ml", "cost-center": "42"},
        "backend_options": [{"type": "vastai", "offer_order": "price", "min_reliability": 0.9,
                             "min_score": 3}],
    },
    "fleet-ssh": {
        "type": "fleet",
        "name": "on-prem",
        "placement": "cluster",
        "blocks": "auto",
        "env": {"NCCL_DEBUG": "INFO", "OMP_NUM_THREADS": 8},
        "ssh_config": {
            "user": "ubuntu",
            "port": 22,
            "identity_file": "~/.ssh/id_rsa",
            "proxy_jump": {"hostname": "bastion.example.com", "port": 2222, "user": "jump",
                           "identity_file": "~/.ssh/jump"},
            "network": "10.0.0.0/24",
            "hosts": [
                "10.0.0.1",
                {"hostname": "10.0.0.2", "port": 2222, "user": "root",
                 "identity_file": "~/.ssh/other", "blocks": 4},
            ],
        },
    },
    "fleet-ssh-internal-ip": {
        "type": "fleet",
        "ssh_config": {
            "user": "ubuntu",
            "identity_file": "~/.ssh/id_rsa",
            "hosts": [
                {"hostname": "203.0.113.1", "internal_ip": "10.1.0.1"},
                {"hostname": "203.0.113.2", "internal_ip": "10.1.0.2"},
            ],
        },
    },
    "task-full": {
        "type": "task",
        "name": "train",
        "python": "3.12",
        "nvcc": True,
        "commands": ["pip install -r requirements.txt", "python train.py ${{ run.args }}"],
        "shell": "bash",
        "working_dir": "/workflow",
        "user": "1000:1000",
        "privileged": False,
        "env": ["HF_TOKEN", "WANDB_MODE=offline", "KEY=${{ secrets.key }}"],
        "resources": {"gpu": {"name": ["A100", "H100"], "memory": "40GB..", "count": "1..8",
                              "compute_capability": "8.0"},
                      "cpu": {"arch": "x86", "count": "4.."},
                      "memory": "32GB..", "disk": "200GB", "shm_size": "8GB"},
        "nodes": 2,
        "ports": [8080, "80:8081", "*:8082", {"local_port": 8083, "container_port": 8084}],
        "volumes": ["my-volume:/data", "/mnt/cache:/cache",
                    {"instance_path": "/mnt/x", "path": "/x", "optional": True},
                    {"name": ["vol-a", "vol-b-${{ dstack.node_rank }}"], "path": "/y"}],
        "files": ["./config.yml:/app/config.yml", "data", {"local_path": "a", "path": "/b"}],
        "repos": [{"url": "https://github.com/org/repo", "branch": "main", "path": "/repo"}],
        "single_branch": False,
        "retry": True,
        "max_duration": "2h",
        "stop_duration": "5m",
        "idle_duration": "off",
        "spot_policy": "spot",
        "max_price": 3,
        "creation_policy": "reuse",
        "backends": ["aws"],
        "regions": ["eu-west-1"],
        "availability_zones": ["eu-west-1a"],
        "instance_types": ["g5.xlarge"],
        "fleets": ["gpu-fleet", "proj/other", {"project": "p", "name": "f"}],
        "instances": ["i-1", {"hostname": "h1"}, {"fleet": "gpu-fleet", "instance": 0}],
        "tags": {"a": "b"},
        "schedule": {"cron": ["0 * * * *", "*/15 9-17 * * mon-fri"]},
        "utilization_policy": {"min_gpu_utilization": 10, "time_window": "30m"},
        "priority": 50,
        "startup_order": "master-first",
        "stop_criteria": "master-done",
        "dstack": False,
        "reservation": "r",
    },
    "task-image": {
        "type": "task",
        "image": "ghcr.io/org/image:1.0",
        "entrypoint": "/bin/sh -c",
        "env": {"REG_USER": "me", "X": 1.5},
        "registry_auth": {"username": "${{ env.REG_USER }}", "password": "${{ secrets.reg }}"},
        "resources": {"gpu": "amd:MI300X:8", "cpu": "arm:64"},
        "backend_options": [{"type": "vastai"}],
    },
    "task-groups": {
        "type": "task",
        "name": "distributed",
        "image": "nvcr.io/nvidia/pytorch:24.01-py3",
        "groups": [
            {"name": "master", "nodes": 1, "commands": ["torchrun --master"],
             "resources": {"gpu": "H100:8"}, "ports": [29500]},
            {"name": "workers", "nodes": 3,
             "commands": ["torchrun --addr ${{ groups[0].nodes[0].IP_ADDRESS }}"]},
        ],
    },
    "task-docker": {"type": "task", "docker": True, "commands": ["docker run hello-world"]},
    "fleet-minimal": {"type": "fleet", "nodes": 1},
    "volume-aws": {
        "type": "volume",
        "backend": "aws",
        "name": "my-volume",
        "region": "us-east-1",
        "availability_zone": "us-east-1a",
        "size": "100GB",
        "auto_cleanup_duration": "1d",
        "tags": {"owner": "ml"},
    },
    "volume-kubernetes": {
        "type": "volume",
        "backend": "kubernetes",
        "name": "k8s-volume",
        "claim_name": "pvc-1",
        "storage_class_name": "fast",
        "access_modes": ["ReadWriteMany"],
    },
}

# Every field name the model knows, at any level: used as random keys, so random values land on
# real parsers rather than being dismissed as unknown fields.
FIELD_NAMES = sorted({
    "type", "name", "nodes", "placement", "blocks", "reservation", "resources", "backends",
    "regions", "availability_zones", "instance_types", "spot_policy", "retry", "max_price",
    "idle_duration", "tags", "backend_options", "env", "ssh_config", "cpu", "memory", "gpu",
    "disk", "shm_size", "size", "arch", "count", "vendor", "total_memory", "compute_capability",
    "min", "max", "target", "on_events", "duration", "offer_order", "min_reliability",
    "min_score", "user", "port", "identity_file", "proxy_jump", "network", "hosts", "hostname",
    "internal_ip", "ssh_key", "image", "python", "nvcc", "docker", "entrypoint", "commands",
    "shell", "working_dir", "privileged", "registry_auth", "username", "password", "groups",
    "ports", "local_port", "container_port", "volumes", "path", "instance_path", "optional",
    "files", "local_path", "repos", "url", "branch", "hash", "if_exists", "single_branch",
    "dstack", "priority", "startup_order", "stop_criteria", "max_duration", "stop_duration",
    "creation_policy", "fleets", "project", "instances", "fleet", "instance", "schedule", "cron",
    "utilization_policy", "min_gpu_utilization", "time_window", "home_dir", "setup", "backend",
    "region", "availability_zone", "volume_id", "auto_cleanup_duration", "claim_name",
    "storage_class_name", "access_modes", "termination_idle_time", "termination_policy",
    "pool_name", "instance_name",
})

# ---------------------------------------------------------------------------------------------
# Random values, shaped like what YAML (or Ansible, or JSON) can hand the model.

INTERESTING_STRINGS = [
    "", " ", "..", "...", "1..", "..2", "2..1", "0..0", "1..2..3", ":", "::", "a:b:c", "x86:",
    ":8", "${{", "}}", "${{ }}", "${{ secrets.x }}", "${{ env.X }}", "${{ run.args }}",
    "${{ dstack.node_rank }}", "${{ groups[0].nodes[0].IP_ADDRESS }}", "${{ groups[x] }}",
    "$$", "$", "$${{ x }}", "H100", "H100:8", "h100:80GB:2..", "A10G,A100", "nvidia", "tpu",
    "tpu-v5p-8", "amd:MI300X", "24GB", "24GB..", "512MB", "1TB", "1.5", "1e3", "1e400", "-1",
    "0", "1", "65535", "65536", "+5", "0x10", "1_000", "nan", "inf", "off", "on", "true", "yes",
    "auto", "any", "cluster", "spot", "on-demand", "reuse", "x86:4", "arm:2..", "4..8", "1h",
    "90m", "30s", "1d", "1w", "1h30m", "1.5h", "/abs/path", "rel/path", "~", "~user/x", "a:/b",
    "/a:/b", "C:\\x:/y", "c:/x", "//x", "/x/../y", "https://github.com/a/b", "git@github.com:a/b",
    "10.0.0.1", "8.8.8.8", "::1", "10.0.0.0/8", "300.1.1.1", "* * * * *", "0 0 31 2 *",
    "61 * * * *", "*/5 * * * mon", "1000:1000", "root", "-1:0", "a:b:c", "NAME=value", "=x",
    "A B", "ReadWriteOnce", "vastai", "score", "master-first", "all-done", "\u00b2", "\u0661",
    "--1", "1:--2", "\u00e9", "\u2603", "\U0001f600", "\x00", "\n", "\t", "\r\n", "\ufeff",
    "a" * 300,
]

# Kept under Python's 4300-digit str/int conversion limit so that Hypothesis can print a failing
# example; test_every_field_with_nasty_values covers integers beyond it.
huge_ints = st.sampled_from([
    (1, 2, 63, -1), (1, 2, 63, 0), (-1, 2, 63, 0), (-1, 2, 63, 1), (1, 2, 64, 0), (1, 10, 19, 0),
    (1, 10, 20, 0), (1, 10, 400, 0), (-1, 10, 400, 0), (1, 2, 13000, 0), (-1, 10, 4000, 0),
]).map(lambda p: p[0] * (p[1] ** p[2]) + p[3])
integers = st.one_of(st.integers(), st.integers(-3, 70000), huge_ints)
floats = st.one_of(
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from([0.5, 1.0, 3.1, 3.10, 3.12, 8.0, 1e308, -0.0, 1e-300, 2.0**63,
                     float("nan"), float("inf"), float("-inf")]),
)
strings = st.one_of(
    st.sampled_from(INTERESTING_STRINGS),
    st.text(max_size=20),
    st.text(alphabet="0123456789.:,-+*/ $%{}[]abcdeghmstwxyzGBMTkKB=@~\\", max_size=16),
    st.builds(lambda a, b: a + b, st.sampled_from(INTERESTING_STRINGS),
              st.sampled_from(INTERESTING_STRINGS)),
)
# Other things a YAML safe load can produce: dates (2024-01-01), bytes (!!binary), sets (!!set).
yaml_oddities = st.one_of(
    st.dates(),
    st.datetimes(),
    st.binary(max_size=8),
    st.sets(st.sampled_from(["a", "fleet", "task", 1]), max_size=3),
)
scalars = st.one_of(st.none(), st.booleans(), integers, floats, strings, yaml_oddities)
hashable_keys = st.one_of(
    st.sampled_from(FIELD_NAMES), strings, st.integers(), st.none(), st.booleans(),
    st.floats(allow_nan=False), st.dates(),
)
values = st.recursive(
    scalars,
    lambda children: st.one_of(
        st.lists(children, max_size=4),
        st.dictionaries(st.sampled_from(FIELD_NAMES), children, max_size=4),
        st.dictionaries(hashable_keys, children, max_size=3),
    ),
    max_leaves=12,
)


# ---------------------------------------------------------------------------------------------
# Helpers


def paths_in(data, prefix=()):
    """Every path (tuple of keys/indices) to a value inside ``data``, containers included."""
    out = [prefix] if prefix else []
    if isinstance(data, dict):
        for key, value in data.items():
            out.extend(paths_in(value, prefix + (key,)))
    elif isinstance(data, list):
        for index, value in enumerate(data):
            out.extend(paths_in(value, prefix + (index,)))
    return out


def container_paths(data, prefix=()):
    """Paths to every mapping inside ``data`` (the root is ``()``)."""
    out = [prefix] if isinstance(data, dict) else []
    if isinstance(data, dict):
        for key, value in data.items():
            out.extend(container_paths(value, prefix + (key,)))
    elif isinstance(data, list):
        for index, value in enumerate(data):
            out.extend(container_paths(value, prefix + (index,)))
    return out


def set_path(data, path, value):
    target = data
    for part in path[:-1]:
        target = target[part]
    target[path[-1]] = value


def get_path(data, path):
    for part in path:
        data = data[part]
    return data


@st.composite
def mutated_configs(draw):
    """A valid base with one value replaced, or one known field added, somewhere inside it."""
    base = copy.deepcopy(BASES[draw(st.sampled_from(sorted(BASES)))])
    if draw(st.booleans()):
        path = draw(st.sampled_from(paths_in(base)))
        set_path(base, path, draw(values))
    else:
        where = draw(st.sampled_from(container_paths(base)))
        get_path(base, where)[draw(st.sampled_from(FIELD_NAMES))] = draw(values)
    if draw(st.integers(0, 3)) == 0:  # sometimes a second change
        path = draw(st.sampled_from(paths_in(base) or [("type",)]))
        try:
            set_path(base, path, draw(values))
        except (KeyError, IndexError, TypeError):
            pass
    return base


random_configs = st.builds(
    lambda kind, fields: dict(fields, type=kind),
    st.one_of(st.sampled_from(["fleet", "task", "volume"]), scalars),
    st.dictionaries(st.sampled_from(FIELD_NAMES), values, max_size=6),
)


def check_problem_list(exc, source):
    assert type(exc) is spec.SpecError  # pylint: disable=unidiomatic-typecheck
    assert exc.source == source
    assert exc.problems
    for problem in exc.problems:
        assert isinstance(problem.where, str)
        assert isinstance(problem.message, str) and problem.message
    json.dumps(exc.as_dicts(), allow_nan=False)
    str(exc)


NAME_RE = re.compile(r"[a-z][a-z0-9-]{1,40}")
GROUP_NAME_RE = re.compile(r"[a-z0-9][a-z0-9-]{0,39}")
TAG_KEY_RE = re.compile(r"[_\-a-zA-Z0-9]{1,60}")
TAG_VALUE_RE = re.compile(r"[a-zA-Z0-9 .:/=_\-+@]{0,256}")


def check_config(config, warnings):
    """An accepted configuration is plain JSON data with consistent ranges, and the names and
    tags in it match their documented patterns in full."""
    assert isinstance(config, dict) and config["type"] in ("fleet", "task", "volume")
    json.dumps(config, allow_nan=False)
    for warning in warnings:
        json.dumps(warning.as_dict())
    for node in walk(config):
        if isinstance(node, dict) and set(node) == {"min", "max"}:
            low, high = node["min"], node["max"]
            assert low is not None or high is not None, node
            if low is not None and high is not None:
                assert low <= high, node
        if isinstance(node, float):
            assert math.isfinite(node)
    if config["type"] == "fleet" and config["nodes"] is not None:
        nodes = config["nodes"]
        assert 0 <= nodes["min"] <= nodes["target"]
        assert nodes["max"] is None or nodes["target"] <= nodes["max"]
    if config["type"] == "task":
        assert isinstance(config["nodes"], int) and not isinstance(config["nodes"], bool)
        assert config["nodes"] >= 1
        for group in config["groups"] or []:
            assert GROUP_NAME_RE.fullmatch(group["name"]), group["name"]
    if config.get("name") is not None:
        assert NAME_RE.fullmatch(config["name"]), config["name"]
    for key, value in (config.get("tags") or {}).items():
        assert TAG_KEY_RE.fullmatch(key) and TAG_VALUE_RE.fullmatch(value), (key, value)


def walk_with_paths(data, prefix=()):
    yield prefix, data
    if isinstance(data, dict):
        for key, value in data.items():
            yield from walk_with_paths(value, prefix + (key,))
    elif isinstance(data, list):
        for index, value in enumerate(data):
            yield from walk_with_paths(value, prefix + (index,))


def walk(data):
    stack = [data]
    while stack:
        item = stack.pop()
        yield item
        if isinstance(item, dict):
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)


def parse_data_or_spec_error(data):
    """parse_data must return or raise SpecError; also checks determinism and no mutation."""
    before = copy.deepcopy(data)
    try:
        config, warnings = spec.parse_data(data, source=SOURCE)
    except spec.SpecError as exc:
        check_problem_list(exc, SOURCE)
        again = None
        try:
            spec.parse_data(copy.deepcopy(before), source=SOURCE)
        except spec.SpecError as exc2:
            again = exc2
        assert again is not None and again.as_dicts() == exc.as_dicts()
        assert data == before, "parse_data modified its input"
        return None
    check_config(config, warnings)
    assert data == before, "parse_data modified its input"
    config2, warnings2 = spec.parse_data(copy.deepcopy(before), source=SOURCE)
    assert config2 == config
    assert [w.as_dict() for w in warnings2] == [w.as_dict() for w in warnings]
    return config


def parse_text_or_spec_error(text):
    try:
        config, warnings = spec.parse_text(text, source=SOURCE)
    except spec.SpecError as exc:
        check_problem_list(exc, SOURCE)
        with pytest.raises(spec.SpecError) as again:
            spec.parse_text(text, source=SOURCE)
        assert again.value.as_dicts() == exc.as_dicts()
        return None
    check_config(config, warnings)
    config2, warnings2 = spec.parse_text(text, source=SOURCE)
    assert config2 == config
    assert [w.as_dict() for w in warnings2] == [w.as_dict() for w in warnings]
    return config


def dump_yaml(data):
    try:
        return yaml.safe_dump(data, allow_unicode=True, sort_keys=False)
    except (yaml.YAMLError, ValueError, TypeError):
        return None


# ---------------------------------------------------------------------------------------------
# The bases themselves


@pytest.mark.parametrize("name", sorted(BASES))
def test_bases_are_valid(name):
    config = parse_data_or_spec_error(copy.deepcopy(BASES[name]))
    assert config is not None, "base %s should be accepted" % name
    assert parse_text_or_spec_error(dump_yaml(BASES[name])) == config


@pytest.mark.parametrize("name", sorted(BASES))
def test_results_share_no_state(name):
    """Two parses must not return the same dict or list objects: a caller that edits one
    result (an Ansible module filling in defaults, say) would otherwise change the next result,
    or the model's own defaults. Checked by identity, so this test itself modifies nothing."""
    first, _warnings = spec.parse_data(copy.deepcopy(BASES[name]))
    second, _warnings = spec.parse_data(copy.deepcopy(BASES[name]))
    assert first == second
    mine = {id(node): node for node in walk(first) if isinstance(node, (dict, list))}
    shared = []
    for path, node in walk_with_paths(second):
        if isinstance(node, (dict, list)) and id(node) in mine:
            shared.append(spec.format_path(path) or "(root)")
    assert shared == [], "objects shared between two parse results at: %s" % ", ".join(shared)


# ---------------------------------------------------------------------------------------------
# (a) Python data

NASTY_VALUES = {
    "null": None,
    "true": True,
    "false": False,
    "-1": -1,
    "int64+1": 2**63,
    "10**5000": 10**5000,
    "-10**5000": -(10**5000),
    "5000 digits": "1" * 5000,
    "nan": float("nan"),
    "inf": float("inf"),
    "1e308": 1e308,
    "empty string": "",
    "superscript two": "\u00b2",
    "double dash": "--1",
    "open interpolation": "${{ x",
    "empty list": [],
    "empty mapping": {},
    "list of null": [None],
    "mapping with int key": {1: 2},
    "date": datetime.date(2024, 1, 1),
    "bytes": b"\xff",
    "set": {"task"},
}


@pytest.mark.slow
def test_every_field_with_nasty_values():
    """Each path of each base (resources.gpu, ssh_config.hosts[1].port, ...) set to each nasty
    value in turn; every failure is listed, not just the first."""
    failures = []
    for name in sorted(BASES):
        for path in paths_in(BASES[name]):
            for label, value in NASTY_VALUES.items():
                data = copy.deepcopy(BASES[name])
                set_path(data, path, copy.deepcopy(value))
                try:
                    parse_data_or_spec_error(data)
                except Exception as exc:  # noqa: BLE001 - reporting every kind of failure
                    failures.append("%s %s = %s: %s: %s" % (
                        name, spec.format_path(path), label, type(exc).__name__,
                        str(exc).splitlines()[0][:120] if str(exc) else ""))
    assert not failures, "%d failures:\n%s" % (len(failures), "\n".join(failures))


@pytest.mark.slow
@FAST
@given(values)
def test_any_value_parse_data(data):
    parse_data_or_spec_error(data)


@pytest.mark.slow
@BIG
@given(random_configs)
def test_random_fields_parse_data(data):
    parse_data_or_spec_error(data)


@pytest.mark.slow
@BIG
@given(mutated_configs())
def test_mutated_valid_configs_parse_data(data):
    parse_data_or_spec_error(data)


@pytest.mark.slow
@FAST
@given(st.data())
def test_each_field_of_each_base_with_a_random_value(draw):
    """Walk every path of a base in turn, so each known field (nested ones too, such as
    resources.gpu or ssh_config.hosts[1].port) sees random values."""
    name = draw.draw(st.sampled_from(sorted(BASES)))
    paths = paths_in(BASES[name])
    path = draw.draw(st.sampled_from(paths))
    data = copy.deepcopy(BASES[name])
    set_path(data, path, draw.draw(values))
    parse_data_or_spec_error(data)


# ---------------------------------------------------------------------------------------------
# (b) Text and bytes

yaml_alphabet = st.sampled_from(list(
    "abcdefghijklmnopqrstuvwxyz0123456789 \n\t:-[]{},&*!|>'\"#%@`?.$~=/\\"
) + ["type: ", "type: task\n", "type: fleet\n", "type: volume\n", "commands:", "\n  - ",
     "resources:\n  ", "gpu: ", "nodes: ", "&a ", "*a", "<<: ", "!!", "---\n", "...\n",
     "\ufeff", "\u00e9", "\x00", "\x85", "\u2028"])
yaml_like_text = st.lists(yaml_alphabet, max_size=40).map("".join)


@FAST
@given(st.text(max_size=200))
def test_random_text(text):
    parse_text_or_spec_error(text)


@FAST
@given(yaml_like_text)
def test_random_yaml_like_text(text):
    parse_text_or_spec_error(text)
    parse_text_or_spec_error(text.encode("utf-8", "surrogatepass"))


@FAST
@given(st.binary(max_size=300))
def test_random_bytes(data):
    parse_text_or_spec_error(data)


@pytest.mark.slow
@BIG
@given(mutated_configs())
def test_mutated_valid_configs_as_yaml_text(data):
    text = dump_yaml(data)
    assume(text is not None)
    parse_text_or_spec_error(text)
    parse_text_or_spec_error(text.encode("utf-8", "surrogatepass"))


@pytest.mark.slow
@FAST
@given(st.sampled_from(sorted(BASES)), st.data())
def test_corrupted_valid_yaml_bytes(name, draw):
    """Valid YAML with a few bytes flipped, inserted or deleted."""
    data = bytearray(dump_yaml(BASES[name]).encode())
    for _step in range(draw.draw(st.integers(1, 4))):
        position = draw.draw(st.integers(0, len(data) - 1))
        action = draw.draw(st.sampled_from(["flip", "insert", "delete"]))
        byte = draw.draw(st.integers(0, 255))
        if action == "flip":
            data[position] = byte
        elif action == "insert":
            data.insert(position, byte)
        elif len(data) > 1:
            del data[position]
    parse_text_or_spec_error(bytes(data))


# ---------------------------------------------------------------------------------------------
# (c) Accepted configs: JSON, determinism


@FAST
@given(st.sampled_from(sorted(BASES)), st.sampled_from(["fleet", "task", "volume", None]))
def test_expect_is_consistent(name, expect):
    data = BASES[name]
    try:
        config, _warnings = spec.parse_data(copy.deepcopy(data), expect=expect)
    except spec.SpecError as exc:
        assert expect is not None and data["type"] != expect
        assert [p.where for p in exc.problems] == ["type"]
    else:
        assert expect is None or config["type"] == expect


def test_properties_can_fail():
    """The checkers are not vacuous: they reject a non-SpecError and a non-JSON config."""
    with pytest.raises((AssertionError, ValueError)):
        check_config({"type": "task", "nodes": 1, "x": float("nan")}, [])
    with pytest.raises(AssertionError):
        check_config({"type": "fleet", "nodes": {"min": 3, "target": 1, "max": None}}, [])
    with pytest.raises(AssertionError):
        check_config({"type": "task", "nodes": 1, "r": {"min": 2, "max": 1}}, [])
    with pytest.raises(AssertionError):
        check_config({"type": "volume", "name": "my-volume\n"}, [])
    assert dump_yaml({"a": datetime.date(2024, 1, 1)}) is not None
