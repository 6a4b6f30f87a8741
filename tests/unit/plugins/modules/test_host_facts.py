# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""gpufleet.cluster.host_facts, run for real on the machine running the tests: in-process
through AnsibleModule, and through ``ansible`` (AnsiballZ) on localhost.

These machines have no accelerator, so the GPU part says none; what the module reads about
CPUs, memory, disk and addresses is checked against the machine itself.
"""

from __future__ import annotations

import ipaddress
import os

from . import module_runner
import pytest
from ansible_collections.gpufleet.cluster.plugins.module_utils.hosts.facts import detect_vendor
from ansible_collections.gpufleet.cluster.plugins.modules import host_facts

NO_GPU = detect_vendor(os.path.exists) == "none"
needs_no_gpu = pytest.mark.skipif(not NO_GPU, reason="this machine has an accelerator")


def run_module(args):
    """Run the module's main() with ``args``; return (exit code, result dict)."""
    return module_runner.run_module(host_facts.main, args)


def mem_total_bytes():
    with open("/proc/meminfo", encoding="utf-8") as handle:
        for line in handle:
            if line.startswith("MemTotal:"):
                return int(line.split()[1]) * 1024
    raise AssertionError("no MemTotal in /proc/meminfo")


def facts_of(result):
    assert result["changed"] is False
    assert set(result["ansible_facts"]) == {"gpufleet_host"}
    return result["ansible_facts"]["gpufleet_host"]


@needs_no_gpu
def test_facts_of_this_machine():
    code, result = run_module({})
    assert code == 0, result
    facts = facts_of(result)
    assert facts["gpu"]["vendor"] == "none"
    assert facts["gpu"]["detected_vendor"] == "none"
    assert facts["gpu"]["count"] == 0
    assert facts["gpu"]["devices"] == []
    assert facts["cpus"] == len(os.sched_getaffinity(0))
    assert facts["memory"]["bytes"] == mem_total_bytes()
    assert facts["memory"]["mib"] == facts["memory"]["bytes"] // 2**20
    assert facts["disk"]["available_bytes"] > 0
    assert facts["disk"]["source"] in ("docker", "default")
    assert os.path.isdir(facts["disk"]["measured_path"])
    for address in facts["addresses"]:
        assert not ipaddress.ip_interface(address).ip.is_loopback
    ipv4 = [
        str(ipaddress.ip_interface(a).ip)
        for a in facts["addresses"]
        if ipaddress.ip_interface(a).version == 4
    ]
    assert facts["internal_ip"] == (ipv4[0] if ipv4 else None)
    assert facts["internal_ip_source"] == "auto"
    assert facts["blocks"]["total"] == 1
    assert facts["host_info"]["cpus"] == facts["cpus"]
    assert facts["host_info"]["gpu_vendor"] == "none"


@needs_no_gpu
def test_check_mode_returns_the_same_facts():
    _code, normal = run_module({})
    code, checked = run_module({"_ansible_check_mode": True})
    assert code == 0
    normal, checked = facts_of(normal), facts_of(checked)
    # Free disk space moves while the tests run; everything else must be equal.
    for facts in (normal, checked):
        facts.pop("disk")
        facts["host_info"].pop("disk_size")
        facts["blocks"]["per_block"].pop("disk_mib")
    assert checked == normal


@needs_no_gpu
def test_blocks_auto_without_gpus_is_one_block_per_cpu():
    code, result = run_module({"blocks": "auto"})
    assert code == 0, result
    facts = facts_of(result)
    assert facts["blocks"]["requested"] == "auto"
    assert facts["blocks"]["total"] == facts["cpus"]
    assert facts["blocks"]["per_block"]["cpus"] == 1


def test_internal_ip_of_this_machine_is_accepted():
    _code, result = run_module({})
    chosen = facts_of(result)["internal_ip"]
    # Every machine these tests run on has an IPv4 address (it reaches the package index).
    assert chosen is not None, facts_of(result)["addresses"]
    code, result = run_module({"internal_ip": chosen, "network": "10.255.255.0/24"})
    assert code == 0, result
    assert facts_of(result)["internal_ip_source"] == "internal_ip"


@pytest.mark.parametrize(
    "args, message",
    [
        (
            {"internal_ip": "203.0.113.254"},
            "Specified internal IP not found among instance interfaces: 203.0.113.254",
        ),
        (
            {"network": "10.255.255.0/24"},
            "Failed to locate internal IP address on the given network 10.255.255.0/24",
        ),
        ({"blocks": "many"}, "blocks must be a whole number of at least 1 or auto, got 'many'"),
        ({"blocks": 0}, "blocks must be a whole number of at least 1 or auto, got 0"),
        ({"blocks": 1000003}, "Cannot split into blocks: 1000003 blocks"),
        ({"color": "red"}, "Unsupported parameters"),
    ],
)
def test_failures_are_clear(args, message):
    code, result = run_module(args)
    assert code == 1
    assert result["failed"] is True
    assert message in result["msg"]
    assert "exception" not in result
    assert "ansible_facts" not in result


def test_an_internal_error_is_reported_as_such(monkeypatch):
    def broken(*_args, **_kwargs):
        raise KeyError("gpu")

    monkeypatch.setattr(host_facts, "gather", broken)
    code, result = run_module({})
    assert code == 1
    assert result["msg"] == "internal error in gpufleet host facts (please report it): 'gpu'"


@pytest.mark.slow
@needs_no_gpu
def test_through_ansible_on_localhost(tmp_path):
    """The module as Ansible ships it (AnsiballZ, module_utils package included)."""
    proc = module_runner.run_adhoc(tmp_path, "gpufleet.cluster.host_facts", "blocks=auto")
    result = module_runner.adhoc_result(proc)
    facts = result["ansible_facts"]["gpufleet_host"]
    assert facts["gpu"]["vendor"] == "none"
    assert facts["memory"]["bytes"] == mem_total_bytes()
    assert facts["blocks"]["total"] == facts["cpus"]
