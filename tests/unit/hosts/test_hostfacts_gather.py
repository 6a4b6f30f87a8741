# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Host facts gathered from fake hosts: which tool runs for which devices, the fallbacks when
a tool or Docker is missing, and how options and failures come out."""

from __future__ import annotations

import json
import posixpath
from pathlib import Path

import pytest
from ansible_collections.gpufleet.cluster.plugins.module_utils.hosts import facts as hf

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "hostfacts"
MEMINFO = "MemTotal:       263771480 kB\nMemFree:        1 kB\n"


def INET(ip, prefixlen, family="inet"):  # noqa: N802 - reads like the JSON it builds
    return {"family": family, "local": ip, "prefixlen": prefixlen}


def INET6(ip, prefixlen):  # noqa: N802
    return INET(ip, prefixlen, "inet6")


ADDRESSES = ["10.0.0.5/24", "fe80::1/64", "172.17.0.1/16"]
IP_JSON = json.dumps(
    [
        {"ifindex": 1, "ifname": "lo", "addr_info": [INET("127.0.0.1", 8)]},
        {"ifindex": 2, "ifname": "eth0", "addr_info": [INET("10.0.0.5", 24), INET6("fe80::1", 64)]},
        {"ifindex": 3, "ifname": "docker0", "addr_info": [INET("172.17.0.1", 16)]},
    ]
)
NVIDIA_SMI = [
    "/usr/bin/nvidia-smi",
    "--query-gpu=name,memory.total,uuid,driver_version",
    "--format=csv,noheader,nounits",
]
AMD_SMI = ["/opt/rocm/bin/amd-smi", "static", "--json", "--asic", "--vram", "--bus"]


def sample(name):
    return (FIXTURES / name).read_text(encoding="utf-8")


class FakeHost(hf.System):
    """A host made of dictionaries; every command it is asked to run is recorded."""

    def __init__(
        self,
        paths=(),
        files=None,
        commands=None,
        bins=None,
        links=None,
        cpus=16,
        available=10 * 1024**3,
    ):
        self.paths = set(paths)
        self.files = {"/proc/meminfo": MEMINFO}
        self.files.update(files or {})
        self.commands = {
            ("/usr/bin/ip", "-j", "addr"): (0, IP_JSON, ""),
            ("/usr/bin/docker", "info", "-f", "{{.DockerRootDir}}"): (0, "/data/docker\n", ""),
        }
        self.commands.update(commands or {})
        self.bins = {"ip": "/usr/bin/ip", "docker": "/usr/bin/docker"}
        self.bins.update(bins or {})
        self.links = links or {}
        self.cpus = cpus
        self.available = available
        self.ran = []
        self.measured = []
        super().__init__(self.fake_run, self.fake_which)

    def fake_run(self, argv):
        self.ran.append(argv)
        return self.commands.get(tuple(argv), (127, "", "%s: command not found" % argv[0]))

    def fake_which(self, name):
        return self.bins.get(name)

    def exists(self, path):
        return (
            path in self.paths
            or path in self.files
            or any(p.startswith(path + "/") for p in self.paths)
        )

    def read_text(self, path):
        if path not in self.files:
            raise OSError(2, "No such file or directory", path)
        return self.files[path]

    def listdir(self, path):
        return sorted(
            set(p[len(path) + 1 :].split("/")[0] for p in self.paths if p.startswith(path + "/"))
        )

    def resolve(self, link):
        return self.links.get(link)

    def cpu_count(self):
        return self.cpus

    def available_bytes(self, path):
        self.measured.append(path)
        return self.available

    def interfaces(self):
        return [(1, "lo"), (2, "eth0")]

    def ipv4_address(self, name):
        return {"lo": ("127.0.0.1", 8), "eth0": ("10.0.0.5", 24)}.get(name)


def nvidia_host(output=None, status=0, **kwargs):
    output = sample("nvidia-smi/synthetic.h100-x2.csv") if output is None else output
    kwargs.setdefault("paths", ["/dev/nvidiactl", "/data/docker"])
    return FakeHost(
        bins={"nvidia-smi": "/usr/bin/nvidia-smi"},
        commands={tuple(NVIDIA_SMI): (status, output, "")},
        **kwargs,
    )


def gather(host, **options):
    facts, warnings = hf.gather(host, **options)
    return facts, warnings


def failure(host, **options):
    with pytest.raises(hf.HostFactsError) as info:
        hf.gather(host, **options)
    return str(info.value)


# --- a whole host -----------------------------------------------------------------------------


def test_nvidia_host_facts():
    host = nvidia_host()
    facts, warnings = gather(host)
    assert warnings == []
    assert NVIDIA_SMI in host.ran
    assert facts["cpus"] == 16
    assert facts["memory"] == {"bytes": 263771480 * 1024, "mib": 257589}
    assert facts["disk"] == {
        "available_bytes": 10 * 1024**3,
        "available_mib": 10240,
        "path": "/data/docker",
        "measured_path": "/data/docker",
        "source": "docker",
    }
    assert facts["addresses"] == ADDRESSES
    assert facts["addresses_source"] == "ip"
    assert (facts["internal_ip"], facts["internal_ip_source"]) == ("10.0.0.5", "auto")
    gpu = facts["gpu"]
    assert {
        key: gpu[key]
        for key in (
            "vendor",
            "count",
            "name",
            "memory_mib",
            "reported_name",
            "reported_memory_mib",
            "driver_version",
            "detected_vendor",
            "detected_by",
            "source",
        )
    } == {
        "vendor": "nvidia",
        "count": 2,
        "name": "H100",
        "memory_mib": 81920,
        "reported_name": "NVIDIA H100 80GB HBM3",
        "reported_memory_mib": 81559,
        "driver_version": "570.86.15",
        "detected_vendor": "nvidia",
        "detected_by": ["/dev/nvidiactl"],
        "source": "nvidia-smi",
    }
    assert [device["id"] for device in gpu["devices"]] == [
        "GPU-00000000-0000-0000-0000-000000000000",
        "GPU-00000000-0000-0000-0000-000000000001",
    ]
    assert facts["blocks"] == {
        "requested": 1,
        "total": 1,
        "per_block": {"cpus": 16, "memory_mib": 257589, "gpus": 2, "disk_mib": 10240},
    }
    assert facts["host_info"] == {
        "gpu_vendor": "nvidia",
        "gpu_name": "NVIDIA H100 80GB HBM3",
        "gpu_memory": 81559,
        "gpu_count": 2,
        "addresses": ADDRESSES,
        "disk_size": 10 * 1024**3,
        "cpus": 16,
        "memory": 263771480 * 1024,
    }


def test_host_without_gpus_runs_no_gpu_tool():
    host = FakeHost(paths=["/data/docker"])
    facts, warnings = gather(host, blocks="auto")
    assert warnings == []
    assert [argv[0] for argv in host.ran] == ["/usr/bin/docker", "/usr/bin/ip"]
    assert (facts["gpu"]["vendor"], facts["gpu"]["count"], facts["gpu"]["source"]) == (
        "none",
        0,
        "none",
    )
    assert facts["gpu"]["devices"] == []
    assert facts["blocks"]["total"] == 16  # one block per CPU
    assert facts["host_info"]["gpu_name"] == ""


# --- GPU tools and their fallbacks ------------------------------------------------------------


def test_nvidia_smi_under_wsl2():
    host = FakeHost(
        paths=["/dev/dxg", "/usr/lib/wsl/lib/nvidia-smi", "/data/docker"],
        commands={
            ("/usr/lib/wsl/lib/nvidia-smi",)
            + tuple(NVIDIA_SMI[1:]): (0, sample("nvidia-smi/synthetic.h100-x2.csv"), "")
        },
    )
    facts, _warnings = gather(host)
    assert facts["gpu"]["detected_by"] == ["/dev/dxg", "/usr/lib/wsl/lib/nvidia-smi"]
    assert facts["gpu"]["count"] == 2


def test_nvidia_without_nvidia_smi_counts_device_nodes():
    host = FakeHost(
        paths=["/dev/nvidiactl", "/dev/nvidia0", "/dev/nvidia1", "/dev/nvidia-uvm", "/data/docker"]
    )
    facts, warnings = gather(host)
    assert facts["gpu"]["count"] == 2
    assert facts["gpu"]["source"] == "device-nodes"
    assert [d["id"] for d in facts["gpu"]["devices"]] == ["/dev/nvidia0", "/dev/nvidia1"]
    assert facts["gpu"]["name"] is None
    assert warnings == [
        (
            "nvidia-smi is not on PATH; counted 2 GPU(s) from the device nodes /dev/nvidiaN, "
            "without name or memory"
        )
    ]


def test_failing_nvidia_smi_fails_with_its_message():
    host = nvidia_host(output=sample("nvidia-smi/driver-not-loaded.txt"), status=9)
    assert failure(host) == (
        "nvidia-smi failed with exit status 9: NVIDIA-SMI has failed because it couldn't "
        "communicate with the NVIDIA driver. Make sure that the latest NVIDIA driver is "
        "installed and running."
    )


def test_unreadable_nvidia_smi_output_fails():
    assert failure(nvidia_host(output="NVIDIA H100 80GB HBM3, 81559\n")).startswith(
        "nvidia-smi output, line 1: expected 4 comma-separated fields"
    )


def amd_host(driver_status=0, **kwargs):
    output = sample("amd-smi/synthetic.mi300x-x2.rocm7.json")
    commands = {
        tuple(AMD_SMI + ["--driver"]): (
            driver_status,
            output if driver_status == 0 else "",
            "bad option",
        ),
        tuple(AMD_SMI): (0, output.replace("6.10.5", "N/A"), ""),
    }
    links = {
        "/dev/dri/by-path/pci-0000:05:00.0-render": "/dev/dri/renderD128",
        "/dev/dri/by-path/pci-0000:26:00.0-render": "/dev/dri/renderD136",
    }
    links.update(kwargs.pop("links", {}))
    return FakeHost(
        paths=["/dev/kfd", "/data/docker"],
        bins={"amd-smi": AMD_SMI[0]},
        commands=commands,
        links=links,
        **kwargs,
    )


def test_amd_smi_with_driver_and_render_nodes():
    host = amd_host()
    facts, warnings = gather(host)
    assert warnings == []
    assert host.ran[0] == AMD_SMI + ["--driver"]
    assert (facts["gpu"]["name"], facts["gpu"]["count"], facts["gpu"]["memory_mib"]) == (
        "MI300X",
        2,
        192 * 1024,
    )
    assert facts["gpu"]["driver_version"] == "6.10.5"
    assert [d["id"] for d in facts["gpu"]["devices"]] == [
        "/dev/dri/renderD128",
        "/dev/dri/renderD136",
    ]


def test_amd_smi_without_the_driver_option_is_asked_again():
    host = amd_host(driver_status=2)
    facts, _warnings = gather(host)
    assert host.ran[:2] == [AMD_SMI + ["--driver"], AMD_SMI]
    assert facts["gpu"]["count"] == 2
    assert facts["gpu"]["driver_version"] is None


def test_amd_gpu_without_render_node_is_left_out():
    host = amd_host(links={"/dev/dri/by-path/pci-0000:26:00.0-render": None})
    facts, warnings = gather(host)
    assert facts["gpu"]["count"] == 1
    assert warnings == [
        (
            "amd-smi reports AMD Instinct MI300X at 0000:26:00.0, but it has no render node under "
            "/dev/dri/by-path; it is left out"
        )
    ]


def test_amd_without_amd_smi_counts_render_nodes():
    host = FakeHost(
        paths=[
            "/dev/kfd",
            "/dev/dri/card0",
            "/dev/dri/renderD128",
            "/dev/dri/renderD129",
            "/dev/dri/by-path/x",
            "/data/docker",
        ]
    )
    facts, warnings = gather(host)
    assert [d["id"] for d in facts["gpu"]["devices"]] == [
        "/dev/dri/renderD128",
        "/dev/dri/renderD129",
    ]
    assert facts["gpu"]["source"] == "device-nodes"
    assert warnings[0].startswith(
        "amd-smi is not on PATH (dstack runs it from its own container image; "
        "gpufleet pulls no images); counted 2 GPU(s)"
    )


def test_amd_smi_failing_both_ways_fails():
    host = FakeHost(
        paths=["/dev/kfd", "/data/docker"],
        bins={"amd-smi": AMD_SMI[0]},
        commands={tuple(AMD_SMI): (1, "", "ERROR: no GPUs\n")},
    )
    assert failure(host) == "amd-smi failed with exit status 1: ERROR: no GPUs"


def test_tenstorrent_with_tt_smi_and_driver_version():
    host = FakeHost(
        paths=["/dev/tenstorrent", "/data/docker"],
        bins={"tt-smi": "/usr/local/bin/tt-smi"},
        commands={
            ("/usr/local/bin/tt-smi", "-s"): (
                0,
                sample("tt-smi/quietbox-4xn300.board-info.json"),
                "",
            )
        },
        files={"/sys/module/tenstorrent/version": "2.0.0\n"},
    )
    facts, warnings = gather(host, blocks="auto")
    assert warnings == []
    assert (facts["gpu"]["name"], facts["gpu"]["count"], facts["gpu"]["memory_mib"]) == (
        "n300",
        4,
        24 * 1024,
    )
    assert set(d["driver_version"] for d in facts["gpu"]["devices"]) == {"2.0.0"}
    assert facts["gpu"]["driver_version"] == "2.0.0"
    assert facts["blocks"]["total"] == 4


def test_tenstorrent_without_tt_smi_counts_device_nodes():
    host = FakeHost(
        paths=[
            "/dev/tenstorrent/0",
            "/dev/tenstorrent/1",
            "/dev/tenstorrent/by-id/x",
            "/data/docker",
        ]
    )
    facts, warnings = gather(host)
    assert [d["id"] for d in facts["gpu"]["devices"]] == [
        "/dev/tenstorrent/0",
        "/dev/tenstorrent/1",
    ]
    assert facts["gpu"]["driver_version"] is None
    assert warnings[0].startswith(
        "tt-smi is not on PATH (dstack runs it from its own container image"
    )


def test_gaudi_with_hl_smi():
    host = FakeHost(
        paths=["/dev/accel", "/data/docker"],
        bins={"hl-smi": "/usr/bin/hl-smi"},
        commands={
            (
                "/usr/bin/hl-smi",
                "--query-aip=name,memory.total,index",
                "--format=csv,noheader,nounits",
            ): (0, sample("hl-smi/synthetic.gaudi2-x8.csv"), "")
        },
    )
    facts, _warnings = gather(host, blocks=8)
    assert (facts["gpu"]["vendor"], facts["gpu"]["name"], facts["gpu"]["count"]) == (
        "intel",
        "Gaudi2",
        8,
    )
    assert facts["gpu"]["memory_mib"] == 96 * 1024
    assert facts["blocks"]["per_block"] == {
        "cpus": 2,
        "memory_mib": 32198,
        "gpus": 1,
        "disk_mib": 10240,
    }


def test_gaudi_without_hl_smi_counts_device_nodes():
    host = FakeHost(paths=["/dev/accel/accel0", "/data/docker"])
    facts, warnings = gather(host)
    assert facts["gpu"]["count"] == 1
    assert "hl-smi is not on PATH; counted 1 GPU(s)" in warnings[0]


# --- disk and addresses -----------------------------------------------------------------------


def test_without_docker_the_default_root_is_measured():
    host = FakeHost(paths=["/var/lib/docker"], bins={"docker": None})
    facts, warnings = gather(host)
    assert (facts["disk"]["path"], facts["disk"]["source"]) == ("/var/lib/docker", "default")
    assert warnings == ["docker is not on PATH; the disk is measured on /var/lib/docker"]


def test_docker_info_failing_falls_back_and_says_why():
    host = FakeHost(
        paths=["/var/lib/docker"],
        commands={
            ("/usr/bin/docker", "info", "-f", "{{.DockerRootDir}}"): (
                1,
                "",
                "Cannot connect to the Docker daemon at unix:///var/run/docker.sock.\n",
            )
        },
    )
    facts, warnings = gather(host)
    assert facts["disk"]["source"] == "default"
    assert warnings == [
        (
            "docker info did not name Docker's root directory (exit status 1: Cannot connect to "
            "the Docker daemon at unix:///var/run/docker.sock.); the disk is measured on "
            "/var/lib/docker"
        )
    ]


def test_missing_docker_root_is_measured_on_its_parent():
    host = FakeHost(paths=["/var/lib"], bins={"docker": None})
    facts, warnings = gather(host)
    assert (facts["disk"]["path"], facts["disk"]["measured_path"]) == (
        "/var/lib/docker",
        "/var/lib",
    )
    assert host.measured == ["/var/lib"]
    assert warnings[-1] == "/var/lib/docker does not exist; the disk is measured on /var/lib"


def test_disk_that_cannot_be_measured_fails():
    class Unmeasurable(FakeHost):
        def available_bytes(self, path):
            raise OSError(13, "Permission denied")

    assert failure(Unmeasurable(paths=["/data/docker"])).startswith(
        "cannot measure the disk at /data/docker: "
    )


def test_addresses_from_the_kernel_without_ip():
    facts, warnings = gather(
        FakeHost(
            paths=["/data/docker"],
            bins={"ip": None},
            files={"/proc/net/if_inet6": sample("host/proc-net-if_inet6.this-machine.txt")},
        )
    )
    assert warnings == []
    assert facts["addresses_source"] == "kernel"
    assert facts["addresses"] == [
        "10.0.0.5/24"
    ]  # if_inet6 names interface index 4, not one of these


def test_addresses_from_the_kernel_when_ip_fails():
    host = FakeHost(
        paths=["/data/docker"],
        commands={("/usr/bin/ip", "-j", "addr"): (255, "", "Option -j is unknown")},
    )
    facts, warnings = gather(host)
    assert facts["addresses"] == ["10.0.0.5/24"]
    assert warnings == ["ip -j addr failed (exit status 255); addresses are read from the kernel"]


def test_missing_meminfo_fails():
    class NoProc(FakeHost):
        def read_text(self, path):
            raise OSError(2, "No such file or directory")

    assert failure(NoProc(paths=["/data/docker"])).startswith("cannot read /proc/meminfo: ")


# --- options ----------------------------------------------------------------------------------


def test_internal_ip_and_network_options():
    facts, _warnings = gather(nvidia_host(), network="172.16.0.0/12")
    assert (facts["internal_ip"], facts["internal_ip_source"]) == ("172.17.0.1", "network")
    facts, _warnings = gather(nvidia_host(), internal_ip="10.0.0.5", network="172.16.0.0/12")
    assert (facts["internal_ip"], facts["internal_ip_source"]) == ("10.0.0.5", "internal_ip")
    assert failure(nvidia_host(), internal_ip="10.0.0.6").startswith(
        "Specified internal IP not found among instance interfaces"
    )
    assert failure(nvidia_host(), network="192.168.0.0/16").startswith(
        "Failed to locate internal IP address on the given network 192.168.0.0/16"
    )


def test_blocks_options():
    facts, _warnings = gather(nvidia_host(), blocks="auto")
    assert facts["blocks"] == {
        "requested": "auto",
        "total": 2,
        "per_block": {"cpus": 8, "memory_mib": 128794, "gpus": 1, "disk_mib": 10240},
    }
    assert failure(nvidia_host(cpus=3), blocks="auto") == (
        "Cannot split into blocks: auto blocks do not divide 3 CPUs and 2 GPUs evenly"
    )
    assert failure(nvidia_host(), blocks=0).startswith(
        "blocks must be a whole number of at least 1 or auto"
    )


def test_a_bad_blocks_value_fails_before_any_command_runs():
    host = nvidia_host()
    failure(host, blocks="many")
    assert host.ran == []


def test_real_system_reads_this_machine():
    """The default System, unfaked, on the machine running the tests (no GPU tool is run here:
    ``which`` finds none)."""
    system = hf.System(run=lambda argv: (127, "", ""), which=lambda name: None)
    assert system.cpu_count() >= 1
    assert system.available_bytes("/") > 0
    assert system.exists("/") and not system.exists("/no/such/path")
    assert system.resolve("/no/such/link") is None
    assert system.listdir("/no/such/dir") == []
    assert any(name == "lo" for _index, name in system.interfaces())
    assert system.ipv4_address("lo") == ("127.0.0.1", 8)
    assert system.ipv4_address("no-such-interface") is None
    assert posixpath.isabs(system.resolve("/proc/self"))
