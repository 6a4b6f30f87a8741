"""dstack's resource grammar and durations, case by case (docs/reference/dstack-files.md#durations,
docs/reference/dstack-files.md#resource-grammar)."""

from __future__ import annotations

import pytest
from .helpers import assert_rejected, parse, resources, rng, task_with

ANY = object()


def gpu_of(block):
    return parse(resources(block))["resources"]["gpu"]


# (resources YAML, expected gpu fields; keys left out are not checked)
GPU_CASES = [
    ("gpu: H100:8", {"name": ["H100"], "count": rng(8, 8), "vendor": "nvidia"}),
    ("gpu: 0..8", {"count": rng(0, 8), "name": None}),
    ("gpu: 8", {"count": rng(8, 8)}),
    ('gpu: "8"', {"count": rng(8, 8)}),
    ("gpu: 0", {"count": rng(0, 0), "vendor": None}),
    ("gpu: 24GB", {"memory": rng(24, 24), "count": rng(1, None)}),
    ("gpu: 40GB..80GB:1..8", {"memory": rng(40, 80), "count": rng(1, 8)}),
    ("gpu: A100:80GB:8", {"name": ["A100"], "memory": rng(80, 80), "count": rng(8, 8)}),
    ("gpu: nvidia:1..8", {"vendor": "nvidia", "count": rng(1, 8)}),
    ("gpu: nvidia", {"vendor": "nvidia", "count": rng(1, None)}),
    ("gpu: Nvidia", {"vendor": "nvidia", "count": rng(1, None)}),
    ("gpu: NVIDIA:80GB:8", {"vendor": "nvidia", "memory": rng(80, 80), "count": rng(8, 8)}),
    ("gpu: A10G,A100", {"name": ["A10G", "A100"], "count": rng(1, None)}),
    ("gpu: A10,A10G:2", {"name": ["A10", "A10G"], "count": rng(2, 2)}),
    ("gpu: MI300X:AMD", {"vendor": "amd", "name": ["MI300X"]}),
    ("gpu: MI300X:8", {"vendor": "amd", "name": ["MI300X"], "count": rng(8, 8)}),
    ("gpu: tpu:v5p-1024", {"vendor": "google", "name": ["v5p-1024"]}),
    ("gpu: tt:n150:2", {"vendor": "tenstorrent", "name": ["n150"], "count": rng(2, 2)}),
    ("gpu: intel:Gaudi2:8", {"vendor": "intel", "name": ["Gaudi2"]}),
    ("gpu: 8:b200", {"count": rng(8, 8), "name": ["b200"], "vendor": "nvidia"}),
    ("gpu: 16GB..32", {"memory": rng(16, 32)}),
    ("gpu: ..80GB", {"memory": rng(None, 80)}),
    ("gpu: 24GB..", {"memory": rng(24, None)}),
    ("gpu: 512MB", {"memory": rng(0.5, 0.5)}),
    ("gpu: H100,MI300X", {"name": ["H100", "MI300X"], "vendor": None}),
    ("gpu: Foo9000", {"name": ["Foo9000"], "vendor": None}),
    ("gpu: tpu-v5p-8", {"name": ["v5p-8"], "vendor": "google"}),
    ("gpu: ' H100 : 8 '", {"name": ["H100"], "count": rng(8, 8)}),
    (
        "gpu: {name: [H100], count: {min: 2}, total_memory: 160GB..}",
        {"name": ["H100"], "count": rng(2, None), "total_memory": rng(160, None)},
    ),
    ("gpu: {name: H100}", {"name": ["H100"], "count": rng(1, None)}),
    ("gpu: {memory: 24GB.., count: 2..}", {"memory": rng(24, None), "count": rng(2, None)}),
    ("gpu: {vendor: amd, count: 4}", {"vendor": "amd", "count": rng(4, 4)}),
    ("gpu: {compute_capability: 7.5}", {"compute_capability": "7.5"}),
    ('gpu: {compute_capability: "8.0"}', {"compute_capability": "8.0"}),
    ("gpu: {compute_capability: [9, 0]}", {"compute_capability": "9.0"}),
    ("gpu: {count: 0..2}", {"count": rng(0, 2)}),
    # YAML 1.1 reads 2:8 as the base-60 integer 128, exactly as dstack's loader does.
    ("gpu: 2:8", {"count": rng(128, 128)}),
]


@pytest.mark.parametrize("block,expected", GPU_CASES, ids=[c[0] for c in GPU_CASES])
def test_gpu_spec(block, expected):
    gpu = gpu_of(block)
    for key, value in expected.items():
        assert gpu[key] == value, key


def test_gpu_defaults_to_any_count_including_none():
    gpu = parse(task_with(""))["resources"]["gpu"]
    assert gpu == {
        "vendor": None, "name": None, "count": rng(0, None), "memory": None,
        "total_memory": None, "compute_capability": None,
    }


def test_vendor_inferred_as_nvidia_only_on_the_default_image():
    assert gpu_of("gpu: 24GB")["vendor"] == "nvidia"
    custom = parse(task_with("image: rocm/pytorch\nresources:\n  gpu: 24GB\n"))
    assert custom["resources"]["gpu"]["vendor"] is None


def test_tpu_prefix_is_deprecated_with_a_warning():
    from ansible_collections.gpufleet.cluster.plugins.module_utils import spec

    _config, warnings = spec.parse_text(resources("gpu: tpu-v3-8"))
    assert any("tpu- prefix" in w.message for w in warnings)


GPU_INVALID = [
    ("gpu: 'A100:'", "empty token"),
    ("gpu: A100,:2", "can not be empty"),
    ("gpu: A100:2:3", "count conflict"),
    ("gpu: A100:H100", "name conflict"),
    ("gpu: 24GB:40GB", "memory conflict"),
    ("gpu: Nvidia:A100:2:AMD", "vendor conflict"),
    ("gpu: 2..1", "range order"),
    ("gpu: 80GB..40GB", "range order"),
    ("gpu: ..", "empty range"),
    ("gpu: 16GiB", "MB, GB or TB"),
    ("gpu: 1..2..3", "invalid range"),
    ("gpu: true", "GPU spec"),
    ("gpu: 1.5", "GPU spec"),
    ("gpu: [H100]", "GPU spec"),
    ("gpu: {name: []}", "must not be empty"),
    ("gpu: {vendor: nvidea}", "unknown GPU vendor"),
    ("gpu: {compute_capability: 7}", "compute capability"),
    ("gpu: {compute_capability: [7, 5, 1]}", "compute capability"),
    ("gpu: {compute_capability: abc}", "compute capability"),
    ("gpu: -1", "negative"),
]


@pytest.mark.parametrize("block,fragment", GPU_INVALID, ids=[c[0] for c in GPU_INVALID])
def test_gpu_spec_invalid(block, fragment):
    path = "resources.gpu"
    if block.startswith("gpu: {"):
        key = block[6:].split(":")[0]
        path = "resources.gpu." + key
    assert_rejected(resources(block), path, fragment)


def test_unknown_key_in_gpu_object_names_it():
    assert_rejected(resources("gpu: {nmae: H100}"), "resources.gpu.nmae", "did you mean 'name'")


CPU_CASES = [
    ("cpu: 32", {"arch": None, "count": rng(32, 32)}),
    ("cpu: 16..", {"arch": None, "count": rng(16, None)}),
    ("cpu: ..8", {"arch": None, "count": rng(None, 8)}),
    ("cpu: x86:2", {"arch": "x86", "count": rng(2, 2)}),
    ("cpu: 2..:ARM", {"arch": "arm", "count": rng(2, None)}),
    ("cpu: X86", {"arch": "x86", "count": rng(2, None)}),
    ("cpu: arm", {"arch": "arm", "count": rng(2, None)}),
    ("cpu: {min: 1}", {"arch": None, "count": rng(1, None)}),
    ("cpu: {min: 2, max: 4}", {"arch": None, "count": rng(2, 4)}),
    ("cpu: {arch: arm, count: 4..}", {"arch": "arm", "count": rng(4, None)}),
    ("cpu: {arch: x86}", {"arch": "x86", "count": rng(2, None)}),
    ('cpu: "8"', {"arch": None, "count": rng(8, 8)}),
]


@pytest.mark.parametrize("block,expected", CPU_CASES, ids=[c[0] for c in CPU_CASES])
def test_cpu_spec(block, expected):
    assert parse(resources(block))["resources"]["cpu"] == expected


CPU_INVALID = [
    ("cpu: 'arm:'", "resources.cpu", "empty token"),
    ("cpu: 2:foo", "resources.cpu", "architecture"),
    ("cpu: arm:x86", "resources.cpu", "arch conflict"),
    ("cpu: 2:arm:2", "resources.cpu", "count conflict"),
    ("cpu: 4..2", "resources.cpu", "range order"),
    ("cpu: 2.5", "resources.cpu", "whole number"),
    ("cpu: true", "resources.cpu", "CPU spec"),
    ("cpu: null", "resources.cpu", "must not be empty"),
    ("cpu: {arch: riscv}", "resources.cpu.arch", "architecture"),
    ("cpu: {cores: 4}", "resources.cpu.cores", "unknown field"),
]


@pytest.mark.parametrize("block,path,fragment", CPU_INVALID, ids=[c[0] for c in CPU_INVALID])
def test_cpu_spec_invalid(block, path, fragment):
    assert_rejected(resources(block), path, fragment)


MEMORY_CASES = [
    ("memory: 200GB..", rng(200, None)),
    ("memory: ..1 TB", rng(None, 1024)),
    ("memory: 512MB", rng(0.5, 0.5)),
    ("memory: 16 Gb", rng(16, 16)),
    ("memory: '1 TB '", rng(1024, 1024)),
    ("memory: 1.5", rng(1.5, 1.5)),
    ("memory: 64", rng(64, 64)),
    ("memory: 8GB..64GB", rng(8, 64)),
    ("memory: {min: 8GB, max: 16GB}", rng(8, 16)),
    ("memory: {min: 8GB}", rng(8, None)),
    ("memory: 2048MB..", rng(2, None)),
]


@pytest.mark.parametrize("block,expected", MEMORY_CASES, ids=[c[0] for c in MEMORY_CASES])
def test_memory(block, expected):
    assert parse(resources(block))["resources"]["memory"] == expected


MEMORY_INVALID = [
    ("memory: ..", "empty range"),
    ("memory: 3GB..1GB", "range order"),
    ("memory: 16GiB", "MB, GB or TB"),
    ("memory: 1.5xb", "MB, GB or TB"),
    ("memory: 1KB", "MB, GB or TB"),
    ("memory: 16G", "MB, GB or TB"),
    ("memory: -8GB", "MB, GB or TB"),
    ("memory: .nan", "finite"),
    ("memory: 1e400GB", "finite"),
    ("memory: null", "must not be empty"),
    ("memory: [8GB]", "range"),
    ("memory: {min: 1GB, avg: 2GB}", "unknown field"),
]


@pytest.mark.parametrize("block,fragment", MEMORY_INVALID, ids=[c[0] for c in MEMORY_INVALID])
def test_memory_invalid(block, fragment):
    path = "resources.memory.avg" if "avg" in block else "resources.memory"
    assert_rejected(resources(block), path, fragment)


def test_disk_and_shm():
    config = parse(resources("disk: 500GB\nshm_size: 24GB"))["resources"]
    assert config["disk"] == {"size": rng(500, 500)}
    assert config["shm_size"] == 24
    assert parse(resources("disk: 100GB.."))["resources"]["disk"] == {"size": rng(100, None)}
    assert parse(resources("disk: {size: 1TB..}"))["resources"]["disk"] == {"size": rng(1024, None)}
    assert parse(resources("disk: null"))["resources"]["disk"] is None
    assert parse(resources("shm_size: 512MB"))["resources"]["shm_size"] == 0.5


@pytest.mark.parametrize(
    "block,path,fragment",
    [
        ("shm_size: 1GB..2GB", "resources.shm_size", "not a range"),
        ("shm_size: big", "resources.shm_size", "MB, GB or TB"),
        ("disk: {}", "resources.disk", "disk needs size"),
        ("disk: {size: 1TB, type: ssd}", "resources.disk.type", "unknown field"),
        ("disk: 10GB..5GB", "resources.disk", "range order"),
        ("gpus: 8", "resources.gpus", "did you mean 'gpu'"),
    ],
)
def test_disk_shm_invalid(block, path, fragment):
    assert_rejected(resources(block), path, fragment)


def test_task_resource_defaults_are_dstacks_run_defaults():
    config = parse(task_with(""))["resources"]
    assert config["cpu"] == {"arch": None, "count": rng(2, None)}
    assert config["memory"] == rng(8, None)
    assert config["disk"] == {"size": rng(100, None)}
    assert config["shm_size"] is None


def test_exact_values_are_exact_not_minimums():
    config = parse(resources("memory: 200GB\ndisk: 100GB\ncpu: 8"))["resources"]
    assert config["memory"] == rng(200, 200)
    assert config["disk"]["size"] == rng(100, 100)
    assert config["cpu"]["count"] == rng(8, 8)


# Durations (max_duration, stop_duration, idle_duration, retry.duration)
DURATION_CASES = [
    ("max_duration: 2h", "max_duration", 7200),
    ("max_duration: 90", "max_duration", 90),
    ("max_duration: '90'", "max_duration", 90),
    ("max_duration: 30s", "max_duration", 30),
    ("max_duration: 15m", "max_duration", 900),
    ("max_duration: 1d", "max_duration", 86400),
    ("max_duration: 1w", "max_duration", 604800),
    ("max_duration: 2 h", "max_duration", 7200),
    ("max_duration: off", "max_duration", "off"),
    ("max_duration: 'off'", "max_duration", "off"),
    ("max_duration: false", "max_duration", "off"),
    ("max_duration: true", "max_duration", "off"),
    ("stop_duration: 10m", "stop_duration", 600),
    ("stop_duration: off", "stop_duration", "off"),
    ("stop_duration: true", "stop_duration", 300),
    ("idle_duration: 1h", "idle_duration", 3600),
    ("idle_duration: off", "idle_duration", "off"),
    ("idle_duration: -1", "idle_duration", "off"),
    ("idle_duration: -50", "idle_duration", "off"),
    ("idle_duration: 0s", "idle_duration", 0),
    # true is the default, which is "unset" until an instance is made (fleets/idle.py).
    ("idle_duration: true", "idle_duration", None),
]


@pytest.mark.parametrize("block,key,expected", DURATION_CASES, ids=[c[0] for c in DURATION_CASES])
def test_durations(block, key, expected):
    assert parse(task_with(block))[key] == expected


def test_duration_defaults():
    config = parse(task_with(""))
    assert (config["max_duration"], config["stop_duration"], config["idle_duration"]) == (
        "off", 300, None,
    )


DURATION_INVALID = [
    ("max_duration: 1h30m", "max_duration", "1h30m"),
    ("max_duration: 1.5h", "max_duration", "whole number"),
    ("max_duration: 2.5", "max_duration", "whole numbers"),
    ("max_duration: 2H", "max_duration", "unit"),
    ("max_duration: 3y", "max_duration", "unit"),
    ("max_duration: -5", "max_duration", "negative"),
    ("stop_duration: -1m", "stop_duration", "cannot parse"),
    ("idle_duration: soon", "idle_duration", "cannot parse"),
    ("max_duration: [1h]", "max_duration", "duration"),
    ("retry: {duration: off}", "retry.duration", "duration"),
    ("retry: {duration: 1h30m}", "retry.duration", "1h30m"),
]


@pytest.mark.parametrize("block,path,fragment", DURATION_INVALID, ids=[c[0] for c in DURATION_INVALID])
def test_durations_invalid(block, path, fragment):
    assert_rejected(task_with(block), path, fragment)


RETRY_CASES = [
    ("retry: true", {"on_events": ["no-capacity", "interruption", "error"], "duration": 3600}),
    ("retry: false", None),
    ("retry: {duration: 4h}", {"on_events": ["no-capacity", "interruption", "error"], "duration": 14400}),
    ("retry: {on_events: [no-capacity]}", {"on_events": ["no-capacity"], "duration": 3600}),
    (
        "retry: {on_events: [no-capacity, error], duration: 1d}",
        {"on_events": ["no-capacity", "error"], "duration": 86400},
    ),
    ("retry: {}", {"on_events": ["no-capacity", "interruption", "error"], "duration": 3600}),
]


@pytest.mark.parametrize("block,expected", RETRY_CASES, ids=[c[0] for c in RETRY_CASES])
def test_retry(block, expected):
    assert parse(task_with(block))["retry"] == expected


@pytest.mark.parametrize(
    "block,path,fragment",
    [
        ("retry: {on_events: []}", "retry.on_events", "cannot be empty"),
        ("retry: {on_events: [boom]}", "retry.on_events[0]", "must be one of"),
        ("retry: {on_events: no-capacity}", "retry.on_events", "list"),
        ("retry: {attempts: 3}", "retry.attempts", "unknown field"),
        ("retry: 3", "retry", "expected true, false"),
    ],
)
def test_retry_invalid(block, path, fragment):
    assert_rejected(task_with(block), path, fragment)
