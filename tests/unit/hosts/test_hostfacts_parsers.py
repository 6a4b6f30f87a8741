# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Host facts: the readers of nvidia-smi, amd-smi, hl-smi and tt-smi output.

Samples under fixtures/hostfacts are real tool output unless their name starts with
``synthetic.``; fixtures/hostfacts/README.md says where each comes from.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from ansible_collections.gpufleet.cluster.plugins.module_utils.hosts import facts as hf

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "hostfacts"


def sample(name):
    return (FIXTURES / name).read_text(encoding="utf-8")


def tool_error(parse, text, *args):
    with pytest.raises(hf.ToolOutputError) as info:
        parse(text, *args)
    assert isinstance(info.value, hf.HostFactsError)
    return str(info.value)


def keyed(gpus, *keys):
    return [tuple(item[key] for key in keys) for item in gpus]


# --- nvidia-smi -------------------------------------------------------------------------------

GPUSTAT_FIELDS = (
    "index",
    "uuid",
    "name",
    "temperature.gpu",
    "utilization.gpu",
    "memory.used",
    "memory.total",
)
GPU_UTILS_FIELDS = (
    "power.limit",
    "power.min_limit",
    "power.max_limit",
    "memory.total",
    "vbios_version",
    "driver_version",
    "name",
    "gpu_uuid",
    "power.draw",
    "temperature.gpu",
    "temperature.memory",
    "clocks.current.graphics",
    "clocks.sm",
    "clocks.mem",
    "utilization.gpu",
    "utilization.memory",
    "fan.speed",
    "pcie.link.width.current",
    "pstate",
)


def test_nvidia_smi_real_eight_gpu_host():
    gpus = hf.parse_nvidia_smi(sample("nvidia-smi/gpustat-issue-5.titanx-x8.csv"), GPUSTAT_FIELDS)
    assert len(gpus) == 8
    assert gpus[0] == {
        "vendor": "nvidia",
        "name": "GTXTITANX",
        "reported_name": "GeForce GTX TITAN X",
        "memory_mib": 12206,
        "index": 0,
        "id": "GPU-004f693d-767b-b215-b4a9-a18af0ffd643",
        "bus_id": None,
        "driver_version": None,
    }
    assert [item["index"] for item in gpus] == list(range(8))
    assert gpus[7]["id"] == "GPU-f199c9ea-65d8-5382-aefe-a9e8fb48057b"
    assert set(item["memory_mib"] for item in gpus) == {12206}


def test_nvidia_smi_real_line_with_driver_and_gpu_uuid_alias():
    (found,) = hf.parse_nvidia_smi(
        sample("nvidia-smi/gpu-utils-issue-83.rtx2080.csv"), GPU_UTILS_FIELDS
    )
    assert keyed([found], "name", "reported_name", "memory_mib", "id", "driver_version") == [
        ("RTX2080", "GeForce RTX 2080", 7979, "GPU-22b2c6ac-2d49-4863-197c-9c469071178a", "440.64")
    ]


def test_nvidia_smi_dstack_query():
    assert hf.NVIDIA_SMI_ARGS == (
        "--query-gpu=name,memory.total,uuid,driver_version",
        "--format=csv,noheader,nounits",
    )
    gpus = hf.parse_nvidia_smi(sample("nvidia-smi/synthetic.h100-x2.csv"))
    assert keyed(gpus, "name", "memory_mib", "id", "driver_version", "index") == [
        ("H100", 81559, "GPU-00000000-0000-0000-0000-000000000000", "570.86.15", 0),
        ("H100", 81559, "GPU-00000000-0000-0000-0000-000000000001", "570.86.15", 1),
    ]


def test_nvidia_smi_output_of_another_query_is_refused():
    message = tool_error(hf.parse_nvidia_smi, sample("nvidia-smi/gpustat-issue-5.titanx-x8.csv"))
    assert message.startswith(
        "nvidia-smi output, line 1: expected 4 comma-separated fields "
        "(name, memory.total, uuid, driver_version), got 7: "
    )
    assert "got 19" in tool_error(
        hf.parse_nvidia_smi, sample("nvidia-smi/gpu-utils-issue-83.rtx2080.csv")
    )


def test_nvidia_smi_driver_message_is_not_gpus():
    message = tool_error(hf.parse_nvidia_smi, sample("nvidia-smi/driver-not-loaded.txt"))
    assert "got 1" in message
    assert "NVIDIA-SMI has failed" in message


NVIDIA_EDGE_CASES = [
    # Synthetic lines for the corners of the format.
    ("", []),
    ("\n\n", []),
    ("NVIDIA L4, 23034, GPU-a, 550.54.15\n\n", [("L4", 23034, "GPU-a", "550.54.15")]),
    ("NVIDIA L4, [N/A], GPU-a, [N/A]", [("L4", 0, "GPU-a", None)]),
    ("NVIDIA L4, 23034, [N/A], N/A", [("L4", 23034, None, None)]),
    ('"NVIDIA Weird, Card", 1024, GPU-a, 1', [("Weird,Card", 1024, "GPU-a", "1")]),
    ("  NVIDIA L4 ,  23034 , GPU-a ,  550.54.15  ", [("L4", 23034, "GPU-a", "550.54.15")]),
]


@pytest.mark.parametrize("text, expected", NVIDIA_EDGE_CASES)
def test_nvidia_smi_edge_cases(text, expected):
    gpus = hf.parse_nvidia_smi(text)
    assert keyed(gpus, "name", "memory_mib", "id", "driver_version") == expected


NVIDIA_BAD = [
    ("NVIDIA L4, 23034, GPU-a", "line 1: expected 4 comma-separated fields"),
    ("NVIDIA L4, 23034, GPU-a, 1, extra", "got 5"),
    ("NVIDIA L4, 23034, GPU-a, 1\nNVIDIA L4, 1", "line 2: expected 4"),
    ("NVIDIA L4, 22.5, GPU-a, 1", 'memory.total must be a whole number of MiB, got "22.5"'),
    ("NVIDIA L4, 23034 MiB, GPU-a, 1", 'got "23034 MiB"'),
    ("NVIDIA L4, -1, GPU-a, 1", 'got "-1"'),
    (", 23034, GPU-a, 1", "line 1: no name reported"),
    ("[N/A], 23034, GPU-a, 1", "no name reported"),
    ("NVIDIA L4\x00, 23034, GPU-a, 1", "not text, it holds control characters"),
    ('"NVIDIA L4, 23034, GPU-a, 1', "not CSV"),
]


@pytest.mark.parametrize("text, fragment", NVIDIA_BAD)
def test_nvidia_smi_malformed_output(text, fragment):
    message = tool_error(hf.parse_nvidia_smi, text)
    assert message.startswith("nvidia-smi output")
    assert fragment in message
    assert "\n" not in message


# --- amd-smi ----------------------------------------------------------------------------------


def test_amd_smi_rocm6_flat_array():
    gpus = hf.parse_amd_smi(sample("amd-smi/synthetic.mi300x-x2.rocm6.json"))
    assert keyed(gpus, "name", "reported_name", "memory_mib", "bus_id", "driver_version", "id") == [
        ("MI300X", "MI300X-O", 196592, "0000:05:00.0", "6.10.5", None),
        ("MI300X", "MI300X-O", 196592, "0000:26:00.0", "6.10.5", None),
    ]
    assert set(item["vendor"] for item in gpus) == {"amd"}


def test_amd_smi_rocm7_gpu_data_object():
    rocm7 = hf.parse_amd_smi(sample("amd-smi/synthetic.mi300x-x2.rocm7.json"))
    rocm6 = hf.parse_amd_smi(sample("amd-smi/synthetic.mi300x-x2.rocm6.json"))
    assert [dict(item, reported_name=None) for item in rocm7] == [
        dict(item, reported_name=None) for item in rocm6
    ]
    assert rocm7[0]["reported_name"] == "AMD Instinct MI300X"


@pytest.mark.parametrize(
    "name",
    [
        "amd-smi/dstack-issue-2900.mi300x-vf.rocm6.truncated.txt",
        "amd-smi/ajean-issue-39.rx7800xt.rocm7.truncated.txt",
    ],
)
def test_amd_smi_cut_off_output_is_a_clear_error(name):
    message = tool_error(hf.parse_amd_smi, sample(name))
    assert message.startswith("amd-smi output: not valid JSON (")
    assert "the output starts" in message


def test_amd_smi_real_vram_section():
    # The vram section is real amd-smi output (ROCm blog, MI300X); the market name and PCI
    # address are the same GPU's, from the blog's `amd-smi static` text output.
    record = {
        "gpu": 0,
        "asic": {"market_name": "MI300X-O"},
        "bus": {"bdf": "0000:05:00.0"},
        "vram": json.loads(sample("amd-smi/rocm-blog.mi300x.vram.json")),
    }
    (found,) = hf.parse_amd_smi(json.dumps([record]))
    assert keyed([found], "name", "memory_mib", "bus_id", "driver_version") == [
        ("MI300X", 196592, "0000:05:00.0", None)
    ]


def amd_record(**sections):
    record = {
        "gpu": 0,
        "asic": {"market_name": "MI300X"},
        "vram": {"size": {"value": 196592, "unit": "MB"}},
        "bus": {"bdf": "0000:05:00.0"},
    }
    record.update(sections)
    return record


DRIVER_CASES = [
    # The driver section shapes dstack's shim accepts (its test-suite lists them).
    ({"name": "amdgpu", "version": "6.10.5"}, "6.10.5"),
    ({"version": "6.10.5", "driver_version": "6.8.5"}, "6.10.5"),
    ({"NAME": "amdgpu", "VERSION": "6.12.12"}, "6.12.12"),
    ({"driver_name": "amdgpu", "driver_version": "6.8.5"}, "6.8.5"),
    ({"name": "N/A", "version": "N/A"}, None),
    ({"version": "N/A", "driver_version": "6.8.5"}, "6.8.5"),
    ("amdgpu 6.8.5", None),
    (None, None),
]


@pytest.mark.parametrize("driver, version", DRIVER_CASES)
def test_amd_smi_driver_section(driver, version):
    record = amd_record() if driver is None else amd_record(driver=driver)
    (found,) = hf.parse_amd_smi(json.dumps([record]))
    assert found["driver_version"] == version


VRAM_CASES = [
    ({"size": {"value": 196592, "unit": "MB"}}, 196592),
    ({"size": {"value": 64, "unit": "GB"}}, 65536),
    ({"size": {"value": 1024}}, 1024),
    ({"size": {"value": "N/A", "unit": "MB"}}, 0),
    ({"size": "N/A"}, 0),
    ({}, 0),
    ("N/A", 0),
]


@pytest.mark.parametrize("vram, mib", VRAM_CASES)
def test_amd_smi_vram_sizes(vram, mib):
    (found,) = hf.parse_amd_smi(json.dumps([amd_record(vram=vram)]))
    assert found["memory_mib"] == mib


AMD_BAD = [
    ("", "not valid JSON"),
    ("{}", "expected a JSON array of GPUs (ROCm 6) or an object with a gpu_data array (ROCm 7)"),
    ('{"gpu_data": {}}', "expected a JSON array"),
    ('"text"', "expected a JSON array"),
    ("[1]", "GPU 0 is not a JSON object"),
    (json.dumps([amd_record(asic={})]), "GPU 0: no asic.market_name"),
    (
        json.dumps([amd_record(), amd_record(asic={"market_name": ""})]),
        "GPU 1: no asic.market_name",
    ),
    (json.dumps([amd_record(vram={"size": {"value": "lots"}})]), 'not a number: "lots"'),
    (json.dumps([amd_record(vram={"size": {"value": True}})]), "not a number"),
    (
        json.dumps([amd_record(vram={"size": {"value": 1, "unit": "TB"}})]),
        'unknown vram.size.unit "TB"',
    ),
    (json.dumps([amd_record(vram={"size": {"value": -1, "unit": "MB"}})]), "negative"),
]


@pytest.mark.parametrize("text, fragment", AMD_BAD)
def test_amd_smi_malformed_output(text, fragment):
    message = tool_error(hf.parse_amd_smi, text)
    assert message.startswith("amd-smi output: ")
    assert fragment in message


def test_amd_smi_empty_lists():
    assert hf.parse_amd_smi("[]") == []
    assert hf.parse_amd_smi('{"gpu_data": []}') == []


def test_render_nodes_are_assigned_and_unknown_ones_left_out():
    gpus = hf.parse_amd_smi(sample("amd-smi/synthetic.mi300x-x2.rocm7.json"))
    gpus.append(dict(gpus[0], bus_id=None))
    links = {
        "/dev/dri/by-path/pci-0000:26:00.0-render": "/dev/dri/renderD136",
    }
    kept, dropped = hf.assign_render_nodes(gpus, links.get)
    assert keyed(kept, "id", "index", "bus_id") == [("/dev/dri/renderD136", 0, "0000:26:00.0")]
    assert [item["bus_id"] for item in dropped] == ["0000:05:00.0", None]
    kept, _dropped = hf.assign_render_nodes(gpus[:1], lambda link: "/dev/dri/card0")
    assert kept == []  # a card node is not a render node


# --- hl-smi -----------------------------------------------------------------------------------


def test_hl_smi_real_line():
    (found,) = hf.parse_hl_smi(
        sample("hl-smi/slurm-monitor-comment.hl205.csv"), ("name", "memory.total")
    )
    assert keyed([found], "vendor", "name", "reported_name", "memory_mib", "index", "id") == [
        ("intel", "Gaudi", "HL-205", 32768, 0, None)
    ]


def test_hl_smi_dstack_query():
    assert hf.HL_SMI_ARGS == (
        "--query-aip=name,memory.total,index",
        "--format=csv,noheader,nounits",
    )
    gpus = hf.parse_hl_smi(sample("hl-smi/synthetic.gaudi2-x8.csv"))
    assert len(gpus) == 8
    assert keyed(gpus[:2], "name", "memory_mib", "id", "index") == [
        ("Gaudi2", 98304, "0", 0),
        ("Gaudi2", 98304, "1", 1),
    ]


@pytest.mark.parametrize(
    "text, fragment",
    [
        ("HL-225, 98304", "expected 3 comma-separated fields (name, memory.total, index), got 2"),
        ("HL-225, 98304, zero", 'index must be a whole number, got "zero"'),
        ("HL-225, 96GB, 0", 'memory.total must be a whole number of MiB, got "96GB"'),
        ("N/A, 98304, 0", "no name reported"),
    ],
)
def test_hl_smi_malformed_output(text, fragment):
    message = tool_error(hf.parse_hl_smi, text)
    assert message.startswith("hl-smi output, line 1: ")
    assert fragment in message


# --- tt-smi -----------------------------------------------------------------------------------


def test_tt_smi_single_n150():
    (found,) = hf.parse_tt_smi(sample("tt-smi/n150-single.json"))
    assert found == {
        "vendor": "tenstorrent",
        "name": "n150",
        "reported_name": "n150",
        "memory_mib": 12 * 1024,
        "index": 0,
        "id": "100018611902010",
        "bus_id": "0000:01:00.0",
        "driver_version": None,
    }


def test_tt_smi_n300_halves_are_one_board():
    gpus = hf.parse_tt_smi(sample("tt-smi/quietbox-4xn300.board-info.json"))
    assert keyed(gpus, "name", "memory_mib", "id", "index") == [
        ("n300", 24 * 1024, "10001451172208f", 0),
        ("n300", 24 * 1024, "100014511722053", 1),
        ("n300", 24 * 1024, "10001451172209c", 2),
        ("n300", 24 * 1024, "100014511722058", 3),
    ]


def test_tt_smi_wormhole_galaxy_is_32_accelerators():
    gpus = hf.parse_tt_smi(sample("tt-smi/galaxy-wormhole.board-info.json"))
    assert len(gpus) == 32
    assert set(keyed(gpus, "name", "memory_mib", "id")) == {
        ("tt-galaxy-wh", 12 * 1024, "100035100000000")
    }
    assert [item["index"] for item in gpus] == list(range(32))
    assert [item["bus_id"] for item in gpus[:2]] == ["0000:c1:00.0", "0000:c2:00.0"]


def test_tt_smi_blackhole_galaxy_is_32_accelerators():
    gpus = hf.parse_tt_smi(sample("tt-smi/galaxy-blackhole.json"))
    assert len(gpus) == 32
    assert set(keyed(gpus, "name", "memory_mib")) == {("tt-galaxy-bh", 32 * 1024)}


def tt(*chips):
    """A tt-smi snapshot holding ``chips`` as (board_type, board_id[, bus_id])."""
    devices = []
    for chip in chips:
        info = {"board_type": chip[0], "board_id": chip[1]}
        if len(chip) > 2:
            info["bus_id"] = chip[2]
        devices.append({"board_info": info})
    return json.dumps({"device_info": devices})


TT_CASES = [
    # Synthetic snapshots for the board layouts dstack's shim handles (its test-suite covers
    # the same layouts).
    (
        tt(
            ("bh-scrappy", "36"),
            ("p100", "43"),
            ("p100a", "43"),
            ("p150a", "40"),
            ("p150b", "41"),
            ("p150c", "42"),
            ("p300b", "44"),
            ("p300a", "45"),
            ("p300c", "46"),
        ),
        [
            ("p100a", 28),
            ("p100a", 28),
            ("p100a", 28),
            ("p150", 32),
            ("p150", 32),
            ("p150", 32),
            ("p300", 32),
            ("p300", 32),
            ("p300", 32),
        ],
    ),
    # Both chips of a p300 with their own PCI address: two accelerators.
    (
        tt(("p300a", "45", "0000:01:00.0"), ("p300a", "45", "0000:02:00.0")),
        [("p300", 32), ("p300", 32)],
    ),
    # The second chip reached through the first (no PCI address): one accelerator, 64 GiB.
    (tt(("p300a", "45", "0000:01:00.0"), ("p300a", "45", "N/A")), [("p300", 64)]),
    (tt(("p300a", "45", "N/A")), []),
    (
        tt(
            ("n150-custom L", "1"),
            ("n300-custom L", "2"),
            ("n300-custom R", "2"),
            ("tt-galaxy-wh-custom L", "3"),
        ),
        [("n150-custom", 12), ("n300-custom", 24), ("tt-galaxy-wh-custom", 12)],
    ),
    (tt(("n300 R", "9")), []),  # a right half without its left half is not counted
    (tt(("n300 R", "9"), ("n300 L", "9")), [("n300", 24)]),  # order of the halves does not matter
    (tt(("n300", "9"), ("n300", "9")), [("n300", 24)]),  # older tt-smi: no L/R marks
    (tt(("n150 L", "1"), ("n150 L", "1")), [("n150", 12), ("n150", 12)]),
    (tt(("p150a L", "7"), ("p300a R", "7")), [("p150", 32)]),  # a Blackhole half joins its own kind
    (tt(("mystery L", "1")), [("mystery", 0)]),
    (json.dumps({"device_info": []}), []),
    (json.dumps({"device_info": None}), []),
    ("{}", []),
]


@pytest.mark.parametrize("text, expected", TT_CASES)
def test_tt_smi_board_layouts(text, expected):
    gpus = hf.parse_tt_smi(text)
    assert [(item["name"], item["memory_mib"] // 1024) for item in gpus] == expected
    assert [item["index"] for item in gpus] == list(range(len(expected)))


@pytest.mark.parametrize(
    "text, fragment",
    [
        ("{", "not valid JSON"),
        ("[]", "expected a JSON object with device_info"),
        ('{"device_info": {}}', "device_info is not a list"),
        ('{"device_info": [{}]}', "device_info[0]: no board_info.board_type and board_id"),
        ('{"device_info": [{"board_info": {"board_type": "n150 L"}}]}', "device_info[0]"),
        ('{"device_info": [{"board_info": {"board_type": 1, "board_id": "1"}}]}', "device_info[0]"),
    ],
)
def test_tt_smi_malformed_output(text, fragment):
    message = tool_error(hf.parse_tt_smi, text)
    assert message.startswith("tt-smi output: ")
    assert fragment in message


@pytest.mark.parametrize(
    "text, version",
    [
        ("2.0.0\n", "2.0.0"),
        (" 1.33 ", "1.33"),
        ("", None),
        ("N/A\n", None),
        ("[Not Supported]", None),
    ],
)
def test_tt_driver_version(text, version):
    assert hf.parse_tt_driver_version(text) == version


def test_driver_version_placeholders():
    assert hf.normalize_driver_version(" 570.86.15 ") == "570.86.15"
    for placeholder in (
        "N/A",
        "[N/A]",
        "Unknown",
        "[Unknown]",
        "[Not Supported]",
        "[Not Available]",
    ):
        assert hf.normalize_driver_version(placeholder) is None
    assert hf.normalize_driver_version(None) is None
    assert hf.normalize_driver_version(6) is None
