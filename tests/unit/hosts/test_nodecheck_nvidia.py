# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The nvidia component of node_check on fake hosts: detection from sysfs PCI devices, software
verification (packages, holds, daemon.json, blacklist, units, reboot marker) and the hardware
checks from nvidia-smi's output."""

from __future__ import annotations

import json
import posixpath

import pytest
from ansible_collections.gpufleet.cluster.plugins.module_utils.hosts.checks import (
    COMPONENTS,
    CheckError,
)
from ansible_collections.gpufleet.cluster.plugins.module_utils.hosts.checks import (
    nvidia as nv,
)
from ansible_collections.gpufleet.cluster.plugins.module_utils.hosts.checks._system import (
    NodeSystem,
)

PCI = "/sys/bus/pci/devices"
DPKG_FORMAT = "${Package}\\t${Version}\\t${Status}\\n"
SMI = "/usr/bin/nvidia-smi"
SMI_LIST = (SMI, "--query-gpu=name,memory.total,uuid,driver_version",
            "--format=csv,noheader,nounits")
UUIDS = ["GPU-0a1b2c3d-0000-4000-8000-00000000000%d" % i for i in range(2)]
BUS_IDS = ["00000000:18:00.0", "00000000:2A:00.0"]


class FakeNode(NodeSystem):
    """A host made of dictionaries: files, PCI devices, programs on PATH and what commands
    print. Every command run is recorded."""

    def __init__(self, files=None, commands=None, bins=None, pci=None, links=None):
        self.files = dict(files or {})
        self.commands = dict(commands or {})
        self.bins = {"systemctl": "/usr/bin/systemctl", "dpkg-query": "/usr/bin/dpkg-query",
                     "modinfo": "/usr/sbin/modinfo"}
        self.bins.update(bins or {})
        self.links = dict(links or {})
        self.dirs = {}
        self.ran = []
        for address, (vendor, device, klass) in (pci or {}).items():
            base = posixpath.join(PCI, address)
            self.files[base + "/vendor"] = "0x%s\n" % vendor
            self.files[base + "/device"] = "0x%s\n" % device
            self.files[base + "/class"] = "0x%s\n" % klass
            self.dirs.setdefault(PCI, []).append(address)
        NodeSystem.__init__(self, self.fake_run, self.bins.get, self.fake_fetch)

    def fake_run(self, argv):
        self.ran.append(list(argv))
        key = tuple(argv)
        if key in self.commands:
            return self.commands[key]
        if argv[0] == "/usr/bin/systemctl":
            return (4, "not-found\n" if argv[1] == "is-active" else "", "no such unit")
        if argv[0] == "/usr/sbin/modinfo":
            return (1, "", "modinfo: ERROR: Module nvidia not found.\n")
        if argv[0] == "dpkg-query":
            return (1, "", "dpkg-query: no packages found matching %s\n" % argv[-1])
        return (127, "", "%s: command not found" % argv[0])

    def fake_fetch(self, url, method="GET", headers=None, timeout=2):
        return None, "no network in tests"

    def exists(self, path):
        return path in self.files or path in self.dirs or any(
            f.startswith(path.rstrip("/") + "/") for f in self.files)

    def read_text(self, path):
        if path not in self.files:
            raise IOError("no such file: %s" % path)
        return self.files[path]

    def listdir(self, path):
        return sorted(self.dirs.get(path, []))

    def resolve(self, link):
        return self.links.get(link)


def dpkg(*rows):
    """dpkg-query -W output for (package, version, status) rows."""
    return "".join("%s\t%s\t%s\n" % row for row in rows)


def dpkg_command(names, rows, status=0):
    return {("dpkg-query", "-W", "-f", DPKG_FORMAT) + tuple(names): (status, dpkg(*rows), "")}


def units(**states):
    """systemctl answers: name=(is-enabled word, is-active word)."""
    out = {}
    for name, (enabled, active) in states.items():
        name = name.replace("_", "-")
        out[("/usr/bin/systemctl", "is-enabled", name)] = (
            0 if enabled == "enabled" else 1, enabled + "\n", "")
        out[("/usr/bin/systemctl", "is-active", name)] = (
            0 if active == "active" else 3, active + "\n", "")
    return out


def params(settings=None, expect=None, probe_hardware=False, pci_root=PCI):
    return {"settings": settings or {}, "expect": expect or {},
            "probe_hardware": probe_hardware, "pci_root": pci_root}


# --- detect -------------------------------------------------------------------------------------

HGX = {
    "0000:18:00.0": ("10de", "2330", "030200"),
    "0000:2a:00.0": ("10de", "2330", "030200"),
    "0000:05:00.0": ("10de", "22a3", "068000"),
    "0000:06:00.0": ("10de", "22a3", "068000"),
    "0000:00:01.0": ("8086", "09a2", "060400"),
}


def test_component_is_known():
    assert "nvidia" in COMPONENTS


def test_detect_hgx_board_finds_gpus_and_nvswitches():
    found = nv.detect(FakeNode(pci=HGX), params())
    assert found.applies
    assert found.details["gpu_count"] == 2
    assert found.details["device_ids"] == ["2330"]
    assert found.details["nvswitch_count"] == 2
    assert found.details["nvswitch_device_ids"] == ["22a3"]
    assert found.details["fabricmanager"] is True
    assert [g["address"] for g in found.details["gpus"]] == ["0000:18:00.0", "0000:2a:00.0"]
    assert "2 NVIDIA GPU(s)" in found.reason and "fabric manager applies" in found.reason


def test_detect_pcie_cards_do_not_need_the_fabric_manager():
    pci = {"0000:3b:00.0": ("10de", "26b9", "030000"),  # L40S, VGA class
           "0000:3b:00.1": ("10de", "22ba", "040300")}  # its audio function
    found = nv.detect(FakeNode(pci=pci), params())
    assert found.applies
    assert found.details["gpu_count"] == 1
    assert found.details["fabricmanager"] is False
    assert "fabric manager" not in found.reason


def test_detect_without_nvidia_gpu_does_not_apply_and_says_why():
    pci = {"0000:00:02.0": ("1af4", "1000", "020000"),
           "0000:00:03.0": ("1002", "74a1", "120000")}  # an AMD accelerator is not ours
    found = nv.detect(FakeNode(pci=pci), params())
    assert not found.applies
    assert found.details["gpu_count"] == 0
    assert "no NVIDIA GPU among the host's 2 PCI devices" in found.reason


def test_detect_reads_the_given_pci_root():
    node = FakeNode(pci=HGX)
    found = nv.detect(node, params(pci_root="/tmp/elsewhere"))
    assert not found.applies
    assert "/tmp/elsewhere" in found.reason


def test_detect_reports_the_bound_driver():
    link = PCI + "/0000:18:00.0/driver"
    node = FakeNode(pci={"0000:18:00.0": ("10de", "2330", "030200")},
                    links={link: "/sys/bus/pci/drivers/nvidia"})
    assert nv.detect(node, params()).details["gpus"][0]["driver"] == "nvidia"


# --- packages -----------------------------------------------------------------------------------

DRIVER = ["cuda-drivers-570", "nvidia-fabricmanager-570"]
TOOLKIT = ["nvidia-container-toolkit", "nvidia-container-toolkit-base"]


def software_node(extra_files=None, extra_commands=None, bins=None):
    files = {
        "/etc/docker/daemon.json": json.dumps({
            "log-level": "warn", "default-runtime": "nvidia",
            "runtimes": {"nvidia": {"args": [], "path": "nvidia-container-runtime"}}}),
        nv.NOUVEAU_BLACKLIST: "# managed\nblacklist nouveau\noptions nouveau modeset=0\n",
    }
    files.update(extra_files or {})
    commands = {}
    commands.update(dpkg_command(["cuda-drivers-570"], [
        ("cuda-drivers-570", "570.124.06-1", "hold ok installed")]))
    commands.update(dpkg_command(["nvidia-fabricmanager-570"], [
        ("nvidia-fabricmanager-570", "570.124.06-1", "hold ok installed")]))
    commands.update(dpkg_command(TOOLKIT, [
        ("nvidia-container-toolkit", "1.17.7-1", "hold ok installed"),
        ("nvidia-container-toolkit-base", "1.17.7-1", "hold ok installed")]))
    commands.update(units(nvidia_persistenced=("enabled", "inactive"),
                          nvidia_fabricmanager=("enabled", "inactive")))
    commands.update(extra_commands or {})
    all_bins = {"dockerd": "/usr/sbin/dockerd", "nvidia-ctk": "/usr/bin/nvidia-ctk"}
    all_bins.update(bins or {})
    return FakeNode(files=files, commands=commands, bins=all_bins)


SETTINGS = {
    "package_manager": "apt", "driver_packages": ["cuda-drivers-570"],
    "fabricmanager_packages": ["nvidia-fabricmanager-570"], "driver_hold": True,
    "toolkit_packages": TOOLKIT, "toolkit_hold": True, "docker_wiring": True,
    "docker_default_runtime": True, "nouveau_blacklist": nv.NOUVEAU_BLACKLIST,
    "persistenced": True, "fabricmanager": True,
}
EXPECT = {"driver_branch": "570", "driver_version": "570.124.06", "toolkit_version": "1.17.7"}


def test_verify_software_state_that_is_complete():
    check = nv.verify(software_node(), params(SETTINGS, EXPECT))
    assert check["problems"] == []
    assert check["ok"] is True
    assert check["driver_packages"] == {
        "cuda-drivers-570": {"version": "570.124.06-1", "held": True}}
    assert check["toolkit_version"] == "1.17.7-1"
    assert check["docker"]["runtime_nvidia"] is True
    assert check["docker"]["default_runtime"] == "nvidia"
    assert check["nouveau"] == {"blacklist_file": nv.NOUVEAU_BLACKLIST, "blacklisted": True,
                                "loaded": False}
    assert check["persistenced"] == {"enabled": "enabled", "active": "inactive"}
    assert check["reboot_required"] is False
    assert check["hardware_probed"] is False
    assert "gpu_count" not in check
    assert not any(argv[0] == SMI for argv in software_node().ran)


def test_verify_reports_missing_unheld_and_wrong_versions():
    node = software_node(extra_commands=dict(
        list(dpkg_command(["cuda-drivers-570"], [
            ("cuda-drivers-570", "570.133.20-1", "install ok installed")]).items())
        + list(dpkg_command(TOOLKIT, [
            ("nvidia-container-toolkit", "1.17.8-1", "hold ok installed")], status=1).items())))
    check = nv.verify(node, params(SETTINGS, EXPECT))
    assert not check["ok"]
    assert "driver package cuda-drivers-570 is at 570.133.20-1, not at the pinned 570.124.06" \
        in check["problems"]
    assert "driver package cuda-drivers-570 is not held" in check["problems"]
    assert "container toolkit package nvidia-container-toolkit-base is not installed" \
        in check["problems"]
    assert "container toolkit package nvidia-container-toolkit is at 1.17.8-1, not at the " \
        "pinned 1.17.7" in check["problems"]


def test_verify_driver_branch_mismatch():
    check = nv.verify(software_node(), params(SETTINGS, {"driver_branch": "580"}))
    assert "driver package cuda-drivers-570 is at 570.124.06-1, not on branch 580" \
        in check["problems"]


def test_removed_package_keeping_its_config_counts_as_missing():
    node = software_node(extra_commands=dpkg_command(["cuda-drivers-570"], [
        ("cuda-drivers-570", "570.124.06-1", "deinstall ok config-files")]))
    check = nv.verify(node, params(SETTINGS))
    assert check["driver_packages"]["cuda-drivers-570"] == {"version": None, "held": False}
    assert "driver package cuda-drivers-570 is not installed" in check["problems"]


def test_unreadable_dpkg_query_output_is_a_check_error():
    node = software_node(extra_commands=dpkg_command(["cuda-drivers-570"], [
        ("cuda-drivers-570", "570.124.06-1", "installed")]))
    with pytest.raises(CheckError, match="three-word status"):
        nv.verify(node, params(SETTINGS))


def test_rpm_packages_and_versionlock():
    rpm = ("rpm", "-q", "--qf", "%{NAME}\\t%{EPOCHNUM}:%{VERSION}-%{RELEASE}\\n")
    node = FakeNode(
        files={nv.VERSIONLOCK_LIST: "# added by dnf versionlock\n"
                                    "nvidia-driver-3:570.124.06-1.el9.*\n"
                                    "!kmod-nvidia-open-dkms-3:570.133.20-1.el9.*\n"},
        commands={rpm + ("nvidia-driver", "kmod-nvidia-open-dkms"): (
            1, "nvidia-driver\t3:570.124.06-1.el9\npackage kmod-nvidia-open-dkms is not "
               "installed\n", ""),
            rpm + ("nvidia-container-toolkit",): (
                0, "nvidia-container-toolkit\t0:1.17.7-1\n", "")},
        bins={"dpkg-query": None})
    check = nv.verify(node, params({
        "driver_packages": ["nvidia-driver", "kmod-nvidia-open-dkms"], "driver_hold": True,
        "toolkit_packages": ["nvidia-container-toolkit"], "nouveau_blacklist": ""},
        {"driver_branch": "570"}))
    assert check["package_manager"] == "dnf"
    driver = check["driver_packages"]["nvidia-driver"]
    assert driver == {"version": "3:570.124.06-1.el9", "held": True}
    assert check["toolkit_version"] == "1.17.7-1"
    assert check["problems"] == ["driver package kmod-nvidia-open-dkms is not installed"]


# --- docker, blacklist, services, reboot --------------------------------------------------------


def test_docker_without_the_nvidia_runtime_is_a_problem():
    node = software_node(extra_files={"/etc/docker/daemon.json": '{"log-level": "warn"}'})
    check = nv.verify(node, params(SETTINGS))
    assert check["docker"]["runtime_nvidia"] is False
    assert check["docker"]["config_exists"] is True
    assert any("has no nvidia runtime (runtimes.nvidia.path missing)" in p
               for p in check["problems"])
    assert any("does not make nvidia the default runtime (it is unset, so runc)" in p
               for p in check["problems"])


def test_unwanted_default_runtime_is_a_problem():
    settings = dict(SETTINGS, docker_default_runtime=False)
    check = nv.verify(software_node(), params(settings))
    assert check["problems"] == [
        "/etc/docker/daemon.json makes nvidia the default runtime, which is not wanted"]


def test_docker_not_installed_is_not_a_problem():
    node = software_node(extra_files={"/etc/docker/daemon.json": "{}"}, bins={"dockerd": None})
    check = nv.verify(node, params(SETTINGS))
    assert check["docker"]["installed"] is False
    assert check["problems"] == []


def test_daemon_json_that_is_not_json_is_a_check_error():
    node = software_node(extra_files={"/etc/docker/daemon.json": "{log-level: warn"})
    with pytest.raises(CheckError, match="daemon.json is not JSON"):
        nv.verify(node, params(SETTINGS))


def test_blacklist_must_blacklist_nouveau():
    node = software_node(extra_files={
        nv.NOUVEAU_BLACKLIST: "# blacklist nouveau\noptions nouveau modeset=0\n"})
    check = nv.verify(node, params(SETTINGS))
    assert check["nouveau"]["blacklisted"] is False
    assert check["problems"] == [
        "/etc/modprobe.d/blacklist-nouveau.conf does not blacklist nouveau"]


def test_services_not_enabled_are_problems():
    node = software_node(extra_commands=units(nvidia_persistenced=("disabled", "inactive")))
    check = nv.verify(node, params(SETTINGS))
    assert check["persistenced"]["enabled"] == "disabled"
    assert check["fabricmanager"]["enabled"] == "enabled"
    assert check["problems"] == ["nvidia-persistenced is not enabled (disabled)"]


def test_missing_fabricmanager_unit_reads_not_found():
    node = software_node()
    del node.commands[("/usr/bin/systemctl", "is-enabled", "nvidia-fabricmanager")]
    check = nv.verify(node, params(SETTINGS))
    assert check["fabricmanager"]["enabled"] == "not-found"
    assert "nvidia-fabricmanager is not enabled (not-found)" in check["problems"]


def test_reboot_marker_and_loaded_nouveau_mean_a_reboot_is_due():
    node = software_node(extra_files={
        nv.REBOOT_MARKER: "the driver packages changed\n",
        "/sys/module/nouveau/refcnt": "1\n"})
    check = nv.verify(node, params(SETTINGS))
    assert check["reboot_required"] is True
    assert check["reboot_reasons"] == ["the driver packages changed",
                                       "the nouveau module is loaded"]
    assert check["ok"] is True  # a pending reboot is a fact, not a software problem


def test_module_versions():
    node = software_node(
        extra_files={nv.MODULE_VERSION: "570.124.06\n"},
        extra_commands={("/usr/sbin/modinfo", "-F", "version", "nvidia"): (
            0, "570.133.20\n", "")})
    check = nv.verify(node, params(SETTINGS))
    assert check["driver_module_version"] == "570.133.20"
    assert check["driver_loaded_version"] == "570.124.06"


# --- hardware: nvidia-smi -----------------------------------------------------------------------


def smi_q(persistence=("Enabled", "Enabled"), fabric=("Completed", "Success")):
    """nvidia-smi -q output (its layout, cut to the fields around those the check reads)."""
    parts = [
        "",
        "==============NVSMI LOG==============",
        "",
        "Timestamp                                 : Tue Mar  4 10:12:55 2025",
        "Driver Version                            : 570.124.06",
        "CUDA Version                              : 12.8",
        "",
        "Attached GPUs                             : 2",
    ]
    for i, bus in enumerate(BUS_IDS):
        parts += [
            "GPU %s" % bus,
            "    Product Name                          : NVIDIA H100 80GB HBM3",
            "    Product Brand                         : NVIDIA",
            "    Display Mode                          : Enabled",
            "    Persistence Mode                      : %s" % persistence[i],
            "    MIG Mode",
            "        Current                           : Disabled",
            "        Pending                           : Disabled",
            "    GPU UUID                              : %s" % UUIDS[i],
            "    PCI",
            "        Bus Id                            : %s" % bus,
            "        GPU Link Info",
            "            PCIe Generation",
            "                Max                       : 5",
            "    Voltage",
            "        Graphics                          : 670.000 mV",
            "    Fabric",
            "        State                             : %s" % fabric[0],
            "        Status                            : %s" % fabric[1],
            "        CliqueId                          : 0",
            "        Health",
            "            Bandwidth                     : Full",
            "    Processes                             : None",
            "",
        ]
    return "\n".join(parts)


SMI_CSV = "".join("NVIDIA H100 80GB HBM3, 81559, %s, 570.124.06\n" % u for u in UUIDS)


def hardware_node(csv=SMI_CSV, q=None, fm_active="active", extra=None):
    commands = {SMI_LIST: (0, csv, ""), (SMI, "-q"): (0, q if q is not None else smi_q(), "")}
    commands.update(units(nvidia_persistenced=("enabled", "active"),
                          nvidia_fabricmanager=("enabled", fm_active)))
    commands.update(extra or {})
    return software_node(extra_commands=commands, bins={"nvidia-smi": SMI})


def test_parse_nvidia_smi_q():
    parsed = nv.parse_nvidia_smi_q(smi_q())
    assert parsed["driver_version"] == "570.124.06"
    assert parsed["cuda_version"] == "12.8"
    assert parsed["attached_gpus"] == "2"
    assert parsed["gpus"][1] == {
        "bus_id": BUS_IDS[1], "name": "NVIDIA H100 80GB HBM3", "uuid": UUIDS[1],
        "persistence_mode": "Enabled", "fabric_state": "Completed", "fabric_status": "Success"}


def test_parse_nvidia_smi_q_rejects_other_text():
    with pytest.raises(nv.ToolOutputError, match="no NVSMI LOG header"):
        nv.parse_nvidia_smi_q("GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-1)\n")


def test_hardware_checks_pass_on_a_ready_hgx_node():
    check = nv.verify(hardware_node(), params(SETTINGS, dict(EXPECT, gpu_count=2),
                                              probe_hardware=True))
    assert check["problems"] == []
    assert check["gpu_count"] == 2
    assert check["driver_version"] == "570.124.06"
    assert check["cuda_version"] == "12.8"
    assert check["persistence_mode"] is True
    assert check["gpus"][0]["name"] == "H100"
    assert check["gpus"][0]["bus_id"] == BUS_IDS[0]
    assert check["gpus"][1]["fabric_state"] == "Completed"
    assert check["hardware_probed"] is True


def test_hardware_problems_are_listed():
    node = hardware_node(q=smi_q(persistence=("Enabled", "Disabled"),
                                 fabric=("In Progress", "N/A")), fm_active="failed")
    check = nv.verify(node, params(SETTINGS, {"gpu_count": 8, "driver_branch": "580"},
                                   probe_hardware=True))
    assert not check["ok"]
    assert "nvidia-smi lists 2 GPU(s), 8 expected" in check["problems"]
    assert "the loaded driver is 570.124.06, not on branch 580" in check["problems"]
    assert "persistence mode is off on GPU(s) %s" % BUS_IDS[1] in check["problems"]
    assert any(p.startswith("the fabric is not ready on GPU(s) %s (In Progress, N/A)"
                            % BUS_IDS[0]) for p in check["problems"])
    assert "nvidia-fabricmanager is not running (failed)" in check["problems"]


def test_nvidia_smi_that_cannot_reach_the_driver_is_a_problem_not_an_error():
    message = ("NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. "
               "Make sure that the latest NVIDIA driver is installed and running.\n")
    node = hardware_node(extra={SMI_LIST: (9, message, "")})
    check = nv.verify(node, params(SETTINGS, probe_hardware=True))
    assert check["gpu_count"] is None
    assert check["problems"] == [
        "nvidia-smi --query-gpu=name,memory.total,uuid,driver_version failed (exit status 9): "
        + message.strip()]


def test_nvidia_smi_missing_is_a_problem():
    node = software_node()
    check = nv.verify(node, params(SETTINGS, probe_hardware=True))
    assert "nvidia-smi is not installed, so the driver cannot be checked" in check["problems"]


def test_unreadable_nvidia_smi_output_is_a_check_error():
    node = hardware_node(csv="NVIDIA H100 80GB HBM3, 81559\n")
    with pytest.raises(CheckError, match="nvidia-smi output, line 1"):
        nv.verify(node, params(SETTINGS, probe_hardware=True))


def test_pending_reboot_is_a_hardware_problem():
    node = hardware_node(extra={})
    node.files[nv.REBOOT_MARKER] = "the driver packages changed\n"
    check = nv.verify(node, params(SETTINGS, probe_hardware=True))
    assert "a reboot is due: the driver packages changed" in check["problems"]
