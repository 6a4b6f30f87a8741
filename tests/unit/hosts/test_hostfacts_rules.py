# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Host facts: the GPU summary, blocks
(docs/reference/dstack-runtime.md#blocks), addresses and the internal IP
(docs/reference/dstack-runtime.md#internal-ip)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from ansible_collections.gpufleet.cluster.plugins.module_utils.hosts import facts as hf
from ansible_collections.gpufleet.cluster.plugins.module_utils.hosts.facts import parsers

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "hostfacts"


def sample(name):
    return (FIXTURES / name).read_text(encoding="utf-8")


def raises(call, *args, **kwargs):
    with pytest.raises(hf.HostFactsError) as info:
        call(*args, **kwargs)
    return str(info.value)


def h100(index, driver="570.86.15"):
    return parsers.gpu(
        "nvidia",
        "H100",
        "NVIDIA H100 80GB HBM3",
        81559,
        index,
        gpu_id="GPU-%d" % index,
        driver_version=driver,
    )


# --- GPU summary ------------------------------------------------------------------------------


def test_summary_of_no_gpus():
    assert hf.summarize_gpus([]) == {
        "vendor": "none",
        "count": 0,
        "name": None,
        "memory_mib": 0,
        "reported_name": None,
        "reported_memory_mib": 0,
        "driver_version": None,
    }


def test_summary_takes_the_first_gpu_and_the_catalog_size():
    assert hf.summarize_gpus([h100(i) for i in range(8)]) == {
        "vendor": "nvidia",
        "count": 8,
        "name": "H100",
        "memory_mib": 80 * 1024,
        "reported_name": "NVIDIA H100 80GB HBM3",
        "reported_memory_mib": 81559,
        "driver_version": "570.86.15",
    }


def test_summary_of_real_tool_output():
    tt_summary = hf.summarize_gpus(
        hf.parse_tt_smi(sample("tt-smi/quietbox-4xn300.board-info.json"))
    )
    assert (
        tt_summary["vendor"],
        tt_summary["count"],
        tt_summary["name"],
        tt_summary["memory_mib"],
    ) == (
        "tenstorrent",
        4,
        "n300",
        24 * 1024,
    )
    fields = (
        "index",
        "uuid",
        "name",
        "temperature.gpu",
        "utilization.gpu",
        "memory.used",
        "memory.total",
    )
    nv = hf.summarize_gpus(
        hf.parse_nvidia_smi(sample("nvidia-smi/gpustat-issue-5.titanx-x8.csv"), fields)
    )
    assert (nv["count"], nv["name"], nv["memory_mib"], nv["reported_memory_mib"]) == (
        8,
        "GTXTITANX",
        12 * 1024,
        12206,
    )


def test_summary_assumes_identical_gpus():
    mixed = [h100(0), parsers.gpu("nvidia", "L4", "NVIDIA L4", 23034, 1)]
    summary = hf.summarize_gpus(mixed)
    assert (summary["count"], summary["name"], summary["memory_mib"]) == (2, "H100", 80 * 1024)


def test_summary_driver_version_is_the_first_known_one():
    assert hf.summarize_gpus([h100(0, None), h100(1, "550.1")])["driver_version"] == "550.1"


def test_summary_of_gpus_known_only_by_device_node():
    counted = [
        parsers.gpu("amd", None, None, 0, i, gpu_id="/dev/dri/renderD%d" % (128 + i))
        for i in range(2)
    ]
    summary = hf.summarize_gpus(counted)
    assert (summary["vendor"], summary["count"], summary["name"], summary["memory_mib"]) == (
        "amd",
        2,
        None,
        0,
    )


def test_two_vendors_are_an_error():
    amd = parsers.gpu("amd", "MI300X", "MI300X-O", 196592, 1)
    assert raises(hf.summarize_gpus, [h100(0), amd]) == "multiple GPU vendors detected: amd, nvidia"


def test_host_resources():
    resources = hf.host_resources([h100(0)], 16, 270099996672, 1870199922688)
    assert resources["cpus"] == 16
    assert resources["memory"] == {"bytes": 270099996672, "mib": 257587}
    assert resources["disk"] == {"available_bytes": 1870199922688, "available_mib": 1783561}
    assert resources["gpu"]["count"] == 1


def test_meminfo_total():
    # /proc/meminfo of the machine these tests were written on: MemTotal 24684096 kB.
    assert hf.parse_meminfo(sample("host/proc-meminfo.this-machine.txt")) == 24684096 * 1024
    assert hf.parse_meminfo("MemFree: 1 kB\nMemTotal:   2048 kB\n") == 2048 * 1024
    for text in ("", "MemFree: 1 kB\n", "MemTotal: lots kB\n", "MemTotal: 10 MB\n"):
        assert raises(hf.parse_meminfo, text) == "/proc/meminfo has no readable MemTotal line"


# --- blocks -----------------------------------------------------------------------------------

BLOCK_CASES = [
    # cpus, gpus, requested, total
    (16, 8, 1, 1),
    (16, 8, "auto", 8),
    (16, 0, "auto", 16),  # a CPU-only host gets one block per CPU
    (4, 8, "auto", 4),  # at most one block per CPU
    (16, 8, 2, 2),
    (16, 8, 8, 8),
    (16, 0, 4, 4),
    (16, 8, "4", 4),
    (2, 0, "auto", 2),
]


@pytest.mark.parametrize("cpus, gpus, requested, total", BLOCK_CASES)
def test_blocks(cpus, gpus, requested, total):
    assert hf.resolve_blocks(cpus, gpus, requested) == total


BLOCK_ERRORS = [
    (16, 8, 3, "Cannot split into blocks: 3 blocks do not divide 16 CPUs and 8 GPUs evenly"),
    (16, 8, 16, "Cannot split into blocks: 16 blocks"),
    (6, 4, "auto", "Cannot split into blocks: auto blocks do not divide 6 CPUs and 4 GPUs evenly"),
    (0, 0, "auto", "Cannot split into blocks"),
    (15, 0, 2, "Cannot split into blocks"),
]


@pytest.mark.parametrize("cpus, gpus, requested, message", BLOCK_ERRORS)
def test_blocks_that_do_not_divide(cpus, gpus, requested, message):
    assert raises(hf.resolve_blocks, cpus, gpus, requested).startswith(message)


def test_tpus_are_never_split():
    assert hf.resolve_blocks(96, 4, 1, tpu=True) == 1
    assert hf.resolve_blocks(96, 4, "auto", tpu=True) == 1
    assert raises(hf.resolve_blocks, 96, 4, 2, tpu=True).startswith("Cannot split into blocks")
    assert hf.resolve_blocks(96, 0, "auto", tpu=True) == 96


@pytest.mark.parametrize(
    "value, parsed", [(1, 1), (8, 8), ("auto", "auto"), ("AUTO", "auto"), (" 4 ", 4)]
)
def test_parse_blocks(value, parsed):
    assert hf.parse_blocks(value) == parsed


@pytest.mark.parametrize("value", [0, -1, True, 1.5, "x", "", None, "-2", [2]])
def test_parse_blocks_rejects(value):
    assert raises(hf.parse_blocks, value).startswith(
        "blocks must be a whole number of at least 1 or auto, got "
    )


SHARED = {"cpus": 16, "memory_mib": 100, "gpus": list("abcdefgh"), "disk_mib": 500}


@pytest.mark.parametrize(
    "blocks, total, cpus, memory_mib, gpus",
    [
        (1, 8, 2, 12, "a"),
        (3, 8, 6, 36, "abc"),
        (8, 8, 16, 96, "abcdefgh"),
        (1, 3, 5, 33, "ab"),
        (2, 3, 10, 66, "abcd"),
        (1, 1, 16, 100, "abcdefgh"),
    ],
)
def test_shared_offer(blocks, total, cpus, memory_mib, gpus):
    offer = hf.shared_offer(SHARED, blocks, total)
    assert offer == {"cpus": cpus, "memory_mib": memory_mib, "gpus": list(gpus), "disk_mib": 500}


def test_shared_offer_needs_1_to_total_blocks():
    assert raises(hf.shared_offer, SHARED, 0, 8) == "a shared offer takes 1 to 8 blocks, not 0"
    assert raises(hf.shared_offer, SHARED, 9, 8) == "a shared offer takes 1 to 8 blocks, not 9"


def INET(ip, prefixlen):  # noqa: N802 - reads like the JSON it builds
    return {"family": "inet", "local": ip, "prefixlen": prefixlen}


# --- addresses --------------------------------------------------------------------------------

# `ip -j addr` and /proc/net/if_inet6 of the machine these tests were written on.
THIS_MACHINE = ["192.0.2.2/24", "fd00::2/64", "fe80::fc:ff:fe00:1/64", "172.17.0.1/16"]


def test_addresses_from_real_ip_json():
    assert hf.addresses_from_ip_json(sample("host/ip-j-addr.this-machine.json")) == THIS_MACHINE


def test_addresses_from_real_if_inet6():
    assert hf.parse_if_inet6(sample("host/proc-net-if_inet6.this-machine.txt")) == [
        (1, "lo", "::1/128"),
        (4, "eth0", "fd00::2/64"),
        (4, "eth0", "fe80::fc:ff:fe00:1/64"),
    ]


def test_addresses_gathered_from_the_kernel_match_ip():
    interfaces = [(5, "docker0"), (1, "lo"), (2, "ifb0"), (3, "ifb1"), (4, "eth0")]
    ipv4 = {"lo": ("127.0.0.1", 8), "eth0": ("192.0.2.2", 24), "docker0": ("172.17.0.1", 16)}
    inet6 = hf.parse_if_inet6(sample("host/proc-net-if_inet6.this-machine.txt"))
    assert hf.addresses_from_interfaces(interfaces, ipv4, inet6) == THIS_MACHINE


@pytest.mark.parametrize(
    "text, fragment",
    [
        ("", "not valid JSON"),
        ("{}", "expected a JSON array of interfaces"),
        ("[1]", "an interface is not a JSON object"),
        (
            json.dumps([{"ifname": "eth0", "addr_info": [INET("10.0.0.1", "x")]}]),
            "interface eth0: bad address",
        ),
        (
            json.dumps([{"ifname": "eth0", "addr_info": [INET("10.0.0.300", 24)]}]),
            "10.0.0.300",
        ),
    ],
)
def test_ip_json_malformed(text, fragment):
    with pytest.raises(hf.ToolOutputError) as info:
        hf.addresses_from_ip_json(text)
    assert str(info.value).startswith("ip -j addr output: ")
    assert fragment in str(info.value)


def test_ip_json_skips_what_is_not_an_address():
    text = (
        '[{"ifname": "eth0", "addr_info": [{"family": "link"}, {"family": "inet"},'
        ' {"family": "inet", "local": "10.0.0.1", "prefixlen": 8}]}, {"ifname": "x"}]'
    )
    assert hf.addresses_from_ip_json(text) == ["10.0.0.1/8"]


@pytest.mark.parametrize(
    "line", ["zz", "0000 01 40 20 80 eth0", "%s 01 40 20 80 eth0" % ("g" * 32)]
)
def test_if_inet6_malformed(line):
    with pytest.raises(hf.ToolOutputError) as info:
        hf.parse_if_inet6(line)
    assert str(info.value).startswith("/proc/net/if_inet6 output, line 1: unexpected line")


# --- internal IP ------------------------------------------------------------------------------

# Addresses from host_info.json files dstack's agent wrote on real hosts (dstack issues #2900
# and #1947).
HOTAISLE = [
    "23.183.40.86/26",
    "fe80::5054:ff:fe54:bfcd/64",
    "172.17.0.1/16",
    "fe80::1c6c:22ff:fee5:2656/64",
]
ON_PREM = ["10.0.160.57/16", "fe80::17ff:fe09:d261/64", "172.17.0.1/16"]

INTERNAL_IP_CASES = [
    (HOTAISLE, None, None, ("23.183.40.86", "auto")),
    (ON_PREM, None, None, ("10.0.160.57", "auto")),
    (THIS_MACHINE, None, None, ("192.0.2.2", "auto")),
    (HOTAISLE, None, "172.17.0.0/16", ("172.17.0.1", "network")),
    (ON_PREM, None, "10.0.0.0/8", ("10.0.160.57", "network")),
    (ON_PREM, None, "172.16.0.0/12", ("172.17.0.1", "network")),
    (HOTAISLE, "172.17.0.1", None, ("172.17.0.1", "internal_ip")),
    (
        HOTAISLE,
        "23.183.40.86",
        "172.17.0.0/16",
        ("23.183.40.86", "internal_ip"),
    ),  # internal_ip wins
    (["fe80::1/64"], None, None, (None, "auto")),  # IPv6 is never chosen
    ([], None, None, (None, "auto")),
]


@pytest.mark.parametrize("addresses, internal_ip, network, chosen", INTERNAL_IP_CASES)
def test_internal_ip(addresses, internal_ip, network, chosen):
    assert hf.select_internal_ip(addresses, internal_ip, network) == chosen


INTERNAL_IP_ERRORS = [
    (
        HOTAISLE,
        "10.9.9.9",
        None,
        (
            "Specified internal IP not found among instance interfaces: "
            "10.9.9.9 is not one of 23.183.40.86, 172.17.0.1"
        ),
    ),
    (HOTAISLE, "fe80::5054:ff:fe54:bfcd", None, "Specified internal IP not found"),
    ([], "10.0.0.1", None, "10.0.0.1 is not one of (no IPv4 address)"),
    (
        HOTAISLE,
        None,
        "10.0.0.0/24",
        (
            "Failed to locate internal IP address on the given network "
            "10.0.0.0/24: the host has 23.183.40.86, 172.17.0.1"
        ),
    ),
    (HOTAISLE, None, "23.183.40.64/26", "Failed to locate"),  # not a private network
    (ON_PREM, None, "10.0.160.57/16", "Failed to locate"),  # host bits set
    (HOTAISLE, None, "fe80::/64", "Failed to locate"),
    (HOTAISLE, None, "not a network", "Failed to locate"),
    (["fe80::1/64"], None, "10.0.0.0/8", "the host has no IPv4 address"),
]


@pytest.mark.parametrize("addresses, internal_ip, network, message", INTERNAL_IP_ERRORS)
def test_internal_ip_errors(addresses, internal_ip, network, message):
    found = raises(hf.select_internal_ip, addresses, internal_ip, network)
    assert found.startswith(
        (
            "Specified internal IP not found among instance interfaces: ",
            "Failed to locate internal IP address on the given network ",
        )
    )
    assert message in found
