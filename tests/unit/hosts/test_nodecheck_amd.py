# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The amd component of node_check on fake hosts: detection from PCI devices, verification of
packages, holds, groups, profile, ROCm version and, with the hardware, amd-smi."""

from __future__ import annotations

from pathlib import Path

import pytest
from ansible_collections.gpufleet.cluster.plugins.module_utils.hosts.checks import CheckError, amd
from ansible_collections.gpufleet.cluster.plugins.module_utils.hosts.checks._system import (
    NodeSystem,
)
from ansible_collections.gpufleet.cluster.plugins.modules import node_check

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "hostfacts" / "amd-smi"
ROOT = "/sys/bus/pci/devices"
DPKG = "/usr/bin/dpkg-query"
RPM = "/usr/bin/rpm"
ID = "/usr/bin/id"
SMI = "/opt/rocm/bin/amd-smi"
SMI_ARGS = [SMI, "static", "--json", "--asic", "--vram", "--bus"]

# (address, vendor, device, class, bound driver)
MI300X = [
    ("0000:05:00.0", "0x1002", "0x74a1", "0x120000", "amdgpu"),
    ("0000:26:00.0", "0x1002", "0x74a1", "0x120000", "amdgpu"),
]
OTHERS = [
    ("0000:00:00.0", "0x1022", "0x14a4", "0x060000", None),  # AMD CPU host bridge (1022)
    ("0000:05:00.1", "0x1002", "0xab38", "0x040300", "snd_hda_intel"),  # AMD HDMI audio
    ("0000:c1:00.0", "0x1a03", "0x2000", "0x030000", "ast"),  # ASPEED BMC VGA
    ("0000:41:00.0", "0x15b3", "0x1021", "0x020700", "mlx5_core"),  # ConnectX
]


def sample(name):
    return (FIXTURES / name).read_text(encoding="utf-8")


class FakeHost(NodeSystem):
    """A host made of dictionaries: files, paths that exist, symbolic links, commands."""

    def __init__(self, pci=(), files=None, paths=(), commands=None, bins=None):
        self.files = {}
        self.links = {}
        for address, vendor, device, klass, driver in pci:
            base = "%s/%s" % (ROOT, address)
            self.files[base + "/vendor"] = vendor + "\n"
            self.files[base + "/device"] = device + "\n"
            self.files[base + "/class"] = klass + "\n"
            if driver:
                self.links[base + "/driver"] = "/sys/bus/pci/drivers/" + driver
        self.files.update(files or {})
        self.paths = set(paths)
        self.commands = dict(commands or {})
        self.bins = {"dpkg-query": DPKG, "id": ID}
        self.bins.update(bins or {})
        self.ran = []
        super().__init__(self.fake_run, self.fake_which, self.fake_fetch)

    def fake_run(self, argv):
        self.ran.append(list(argv))
        return self.commands.get(tuple(argv), (127, "", "%s: command not found" % argv[0]))

    def fake_which(self, name):
        return self.bins.get(name)

    @staticmethod
    def fake_fetch(url, method="GET", headers=None, timeout=2):
        return None, "no network in tests (%s %s %s %s)" % (method, url, headers, timeout)

    def exists(self, path):
        return path in self.paths or path in self.files or any(
            p.startswith(path + "/") for p in list(self.paths) + list(self.files))

    def read_text(self, path):
        if path not in self.files:
            raise OSError(2, "No such file or directory", path)
        return self.files[path]

    def listdir(self, path):
        names = set()
        for known in list(self.files) + list(self.paths):
            if known.startswith(path + "/"):
                names.add(known[len(path) + 1:].split("/")[0])
        return sorted(names)

    def resolve(self, link):
        return self.links.get(link)


def params(expect=None, settings=None, probe_hardware=False, pci_root=ROOT):
    return {"expect": expect or {}, "settings": settings or {}, "probe_hardware": probe_hardware,
            "pci_root": pci_root}


def dpkg_lines(*rows):
    return "".join("%s\t%s\t%s\n" % row for row in rows)


def dpkg_cmd(*names):
    return (DPKG, "-W", "-f=${Package}\t${Status}\t${Version}\n") + tuple(names)


PACKAGES = {"amdgpu-dkms": "1:6.12.12.60401-2164967*", "rocm": "*.60401-*"}
HELD = ["amdgpu-dkms", "rocm"]
GOOD_DPKG = dpkg_lines(
    ("amdgpu-dkms", "hold ok installed", "1:6.12.12.60401-2164967.22.04"),
    ("rocm", "hold ok installed", "6.4.1.60401-83~22.04"),
)
GOOD_FILES = {
    "/opt/rocm/.info/version": "6.4.1-83\n",
    "/etc/profile.d/gpufleet-rocm.sh": 'PATH="${PATH}:/opt/rocm/bin"\nexport PATH\n',
    "/etc/ld.so.conf.d/gpufleet-rocm.conf": "/opt/rocm/lib\n/opt/rocm/lib64\n",
}
GOOD_EXPECT = {"packages": PACKAGES, "held": HELD, "users": ["alice"], "rocm_version": "6.4.1"}


def software_host(dpkg_out=GOOD_DPKG, dpkg_status=0, files=None, id_out="alice video render\n",
                  **kwargs):
    host_files = dict(GOOD_FILES)
    host_files.update(files or {})
    commands = {
        dpkg_cmd("amdgpu-dkms", "rocm"): (dpkg_status, dpkg_out, ""),
        (ID, "-nG", "alice"): (0, id_out, ""),
    }
    commands.update(kwargs.pop("commands", {}))
    return FakeHost(files=host_files, commands=commands, **kwargs)


def hardware_host(smi_out=None, smi_status=0, pci=None, module=True, kfd=True, **kwargs):
    pci = MI300X if pci is None else pci
    smi_out = sample("synthetic.mi300x-x2.rocm7.json") if smi_out is None else smi_out
    files = dict(kwargs.pop("files", {}))
    paths = set(kwargs.pop("paths", ()))
    if module:
        files["/sys/module/amdgpu/version"] = "6.12.12\n"
    if kfd:
        paths.add("/dev/kfd")
    commands = {tuple(SMI_ARGS + ["--driver"]): (smi_status, smi_out, "")}
    commands.update(kwargs.pop("commands", {}))
    bins = {"amd-smi": SMI}
    bins.update(kwargs.pop("bins", {}))
    return software_host(pci=pci + OTHERS, files=files, paths=paths, commands=commands,
                         bins=bins, **kwargs)


# --- detect ----------------------------------------------------------------------------------


def test_node_check_runs_this_module_for_amd():
    assert node_check.IMPLEMENTATIONS["amd"] is amd


def test_detect_counts_instinct_accelerators_and_ignores_other_functions():
    found = amd.detect(FakeHost(pci=MI300X + OTHERS), params())
    assert found.applies is True
    assert found.details["gpu_count"] == 2
    assert found.details["device_ids"] == ["74a1"]
    assert [d["address"] for d in found.details["devices"]] == ["0000:05:00.0", "0000:26:00.0"]
    assert found.details["devices"][0] == {
        "address": "0000:05:00.0", "device": "74a1", "class": "120000", "driver": "amdgpu"}
    assert "2 AMD GPU(s)" in found.reason and "74a1" in found.reason


@pytest.mark.parametrize("klass", ["0x030000", "0x030200", "0x038000", "0x120000"])
def test_detect_accepts_every_gpu_class(klass):
    found = amd.detect(FakeHost(pci=[("0000:03:00.0", "0x1002", "0x740c", klass, None)]),
                       params())
    assert found.applies is True
    assert found.details["devices"][0]["driver"] is None


def test_detect_without_amd_gpu_says_what_it_looked_at():
    found = amd.detect(FakeHost(pci=OTHERS), params())
    assert found.applies is False
    assert found.details == {"gpu_count": 0, "device_ids": [], "devices": []}
    assert "no AMD GPU" in found.reason
    assert "among the 4 PCI devices under %s" % ROOT in found.reason


def test_detect_reads_the_given_pci_root():
    host = FakeHost(pci=MI300X)
    found = amd.detect(host, params(pci_root="/elsewhere"))
    assert found.applies is False
    assert "under /elsewhere" in found.reason


def test_detect_of_nvidia_host_does_not_apply():
    nvidia = [("0000:18:00.0", "0x10de", "0x2330", "0x030200", "nvidia")]
    assert amd.detect(FakeHost(pci=nvidia), params()).applies is False


# --- verify: software ------------------------------------------------------------------------


def test_verify_software_all_good():
    host = software_host()
    check = amd.verify(host, params(GOOD_EXPECT))
    assert check["problems"] == []
    assert check["ok"] is True
    assert check["package_manager"] == "dpkg"
    assert check["packages"] == {"amdgpu-dkms": "1:6.12.12.60401-2164967.22.04",
                                 "rocm": "6.4.1.60401-83~22.04"}
    assert check["held"] == ["amdgpu-dkms", "rocm"]
    assert check["users"] == {"alice": ["video", "render"]}
    assert check["rocm_version"] == "6.4.1"
    assert check["rocm_build"] == "83"
    assert check["profile"] == {"path": "/etc/profile.d/gpufleet-rocm.sh", "present": True,
                                "mentions": "/opt/rocm/bin", "found": True}
    assert check["ld_conf"]["found"] is True
    assert check["hardware_probed"] is False
    assert "gpu_count" not in check
    # Nothing of the hardware was asked for.
    assert all(argv[0] != SMI for argv in host.ran)


def test_verify_accepts_a_list_of_packages_and_no_expectations():
    check = amd.verify(software_host(), params({"packages": ["amdgpu-dkms", "rocm"]}))
    assert check["ok"] is True
    assert check["held"] == ["amdgpu-dkms", "rocm"]
    assert amd.verify(software_host(), params())["ok"] is True


def test_verify_reports_a_package_that_is_missing_or_at_another_version():
    out = dpkg_lines(("amdgpu-dkms", "install ok installed", "1:6.12.12.60401-2170001.22.04"))
    check = amd.verify(software_host(dpkg_out=out, dpkg_status=1), params(GOOD_EXPECT))
    assert check["ok"] is False
    assert check["packages"]["rocm"] is None
    assert "package rocm is not installed" in check["problems"]
    assert ("package amdgpu-dkms is at version 1:6.12.12.60401-2170001.22.04, not "
            "1:6.12.12.60401-2164967*") in check["problems"]
    assert "package amdgpu-dkms is not held at its version" in check["problems"]
    # rocm is missing: that is said once, not again as "not held".
    assert not any("rocm is not held" in p for p in check["problems"])


def test_verify_reports_removed_and_half_installed_packages():
    out = dpkg_lines(
        ("amdgpu-dkms", "deinstall ok config-files", "1:6.12.12.60401-2164967.22.04"),
        ("rocm", "install ok half-configured", "6.4.1.60401-83~22.04"),
    )
    check = amd.verify(software_host(dpkg_out=out), params({"packages": ["amdgpu-dkms", "rocm"]}))
    assert check["packages"] == {"amdgpu-dkms": None, "rocm": None}
    assert "package amdgpu-dkms is config-files, not installed" in check["problems"]
    assert "package rocm is half-configured, not installed" in check["problems"]
    assert "package rocm is not installed" in check["problems"]


def test_verify_fails_clearly_on_unreadable_dpkg_output():
    with pytest.raises(CheckError, match="dpkg-query output, line 1"):
        amd.verify(software_host(dpkg_out="amdgpu-dkms installed\n"), params(GOOD_EXPECT))
    with pytest.raises(CheckError, match="exit status 2"):
        amd.verify(software_host(dpkg_status=2), params(GOOD_EXPECT))


def test_verify_reads_rpm_and_the_versionlock_list():
    rpm_out = ("amdgpu-dkms\t1:6.12.12.60401-2164967.el9\n"
               "package rocm is not installed\n")
    host = software_host(
        bins={"dpkg-query": None, "rpm": RPM},
        commands={(RPM, "-q", "--qf", amd.RPM_FORMAT, "amdgpu-dkms", "rocm"): (1, rpm_out, "")},
        files={"/etc/dnf/plugins/versionlock.list":
               "# locked by gpufleet\nrocm-core-0:6.4.1.60401-83.el9.*\n"
               "amdgpu-dkms-1:6.12.12.60401-2164967.el9.*\n"},
    )
    check = amd.verify(host, params({"packages": {"amdgpu-dkms": "1:6.12.12.60401-*", "rocm": ""},
                                     "held": ["amdgpu-dkms", "rocm"]}))
    assert check["package_manager"] == "rpm"
    assert check["packages"] == {"amdgpu-dkms": "1:6.12.12.60401-2164967.el9", "rocm": None}
    assert check["held"] == ["amdgpu-dkms"]
    assert check["problems"] == ["package rocm is not installed"]


def test_versionlock_entries_match_whole_names():
    locks = "rocm-core-0:6.4.1.60401-83.el9.*\n!rocm-0:6.4.1.60401-83.el9.*\n"
    assert amd.versionlocked(locks, "rocm-core") is True
    assert amd.versionlocked(locks, "rocm") is False  # an exclude, and rocm-core is not rocm
    assert amd.versionlocked("rocm-6.4.1.60401-83.el9.*\n", "rocm") is True


def test_verify_without_package_manager_is_an_error():
    host = software_host(bins={"dpkg-query": None})
    with pytest.raises(CheckError, match="neither dpkg-query nor rpm"):
        amd.verify(host, params(GOOD_EXPECT))


def test_verify_reports_users_outside_the_groups():
    host = software_host(id_out="alice video\n", commands={
        (ID, "-nG", "bob"): (1, "", "id: 'bob': no such user\n")})
    check = amd.verify(host, params({"users": ["alice", "bob"]}))
    assert check["users"] == {"alice": ["video"], "bob": []}
    assert "user alice is not in the group(s) render" in check["problems"]
    assert "user bob does not exist (id: 'bob': no such user)" in check["problems"]


def test_verify_checks_the_groups_it_is_given():
    check = amd.verify(software_host(id_out="alice render\n"),
                       params({"users": ["alice"]}, {"groups": ["render"]}))
    assert check["ok"] is True
    assert check["groups"] == ["render"]
    with pytest.raises(CheckError, match="settings.groups"):
        amd.verify(software_host(), params({}, {"groups": "render"}))


def test_verify_reports_missing_or_wrong_profile_and_linker_configuration():
    host = software_host(files={"/etc/profile.d/gpufleet-rocm.sh": "export FOO=1\n"})
    del host.files["/etc/ld.so.conf.d/gpufleet-rocm.conf"]
    check = amd.verify(host, params())
    assert check["profile"]["present"] is True and check["profile"]["found"] is False
    assert check["ld_conf"]["present"] is False
    assert ("the environment profile /etc/profile.d/gpufleet-rocm.sh does not mention "
            "/opt/rocm/bin") in check["problems"]
    assert ("the dynamic linker configuration /etc/ld.so.conf.d/gpufleet-rocm.conf is "
            "missing") in check["problems"]


def test_verify_follows_the_settings_paths():
    files = {"/usr/rocm/.info/version": "6.4.0-47\n", "/p.sh": "PATH=$PATH:/usr/rocm/bin\n",
             "/l.conf": "/usr/rocm/lib\n"}
    check = amd.verify(software_host(files=files),
                       params({"rocm_version": "6.4"},
                              {"rocm_path": "/usr/rocm/", "profile": "/p.sh", "ld_conf": "/l.conf"}))
    assert check["problems"] == []
    assert check["rocm_path"] == "/usr/rocm"
    assert check["rocm_version"] == "6.4.0"


@pytest.mark.parametrize("found, wanted, same", [
    ("6.4.1", "6.4.1", True), ("6.4.1", "6.4", True), ("6.4.10", "6.4.1", False),
    ("6.4.0", "6.4.1", False), ("7.0.0", "7.0", True), ("6.4.1", "6", True),
])
def test_rocm_release_comparison(found, wanted, same):
    assert amd._same_release(found, wanted) is same  # pylint: disable=protected-access


def test_verify_reports_rocm_missing_or_another_release():
    host = software_host()
    del host.files["/opt/rocm/.info/version"]
    check = amd.verify(host, params({"rocm_version": "6.4.1"}))
    assert check["rocm_version"] is None
    assert check["problems"] == ["ROCm is not installed: /opt/rocm/.info/version is missing"]
    check = amd.verify(software_host(files={"/opt/rocm/.info/version": "6.3.3-74\n"}),
                       params({"rocm_version": "6.4.1"}))
    assert check["problems"] == ["ROCm 6.3.3 is installed, not 6.4.1"]


def test_rocm_version_file_must_hold_a_version():
    assert amd.parse_rocm_version("6.4.1-83\n") == ("6.4.1", "83")
    assert amd.parse_rocm_version("7.0.0") == ("7.0.0", None)
    with pytest.raises(CheckError, match="not a version"):
        amd.verify(software_host(files={"/opt/rocm/.info/version": "<html>\n"}), params())


def test_dpkg_query_parser_keeps_every_line():
    parsed = amd.parse_dpkg_query(dpkg_lines(
        ("rocm", "hold ok installed", "6.4.1.60401-83~22.04"),
        ("rocminfo", "unknown ok not-installed", "")))
    assert parsed == {"rocm": ("hold", "installed", "6.4.1.60401-83~22.04"),
                      "rocminfo": ("unknown", "not-installed", "")}


# --- verify: hardware ------------------------------------------------------------------------


def test_verify_hardware_all_good():
    host = hardware_host()
    check = amd.verify(host, params(dict(GOOD_EXPECT, gpu_count=2), probe_hardware=True))
    assert check["problems"] == []
    assert check["hardware_probed"] is True
    assert check["gpu_count"] == 2
    assert check["pci_gpu_count"] == 2
    assert check["pci_device_ids"] == ["74a1"]
    assert check["gpu_names"] == ["AMD Instinct MI300X"]
    assert check["gpus"][1] == {"name": "MI300X", "reported_name": "AMD Instinct MI300X",
                                "memory_mib": 196592, "bus_id": "0000:26:00.0",
                                "driver_version": "6.10.5"}
    assert check["driver_version"] == "6.10.5"
    assert check["kernel_module_loaded"] is True
    assert check["kernel_module_version"] == "6.12.12"
    assert check["kfd"] is True
    assert check["amd_smi"] == SMI
    assert SMI_ARGS + ["--driver"] in host.ran


def test_verify_hardware_with_old_amd_smi_and_flat_array():
    host = hardware_host(smi_status=2, commands={
        tuple(SMI_ARGS): (0, sample("synthetic.mi300x-x2.rocm6.json"), "")})
    check = amd.verify(host, params(probe_hardware=True))
    assert check["problems"] == []
    assert check["gpu_count"] == 2
    assert SMI_ARGS in host.ran


def test_verify_hardware_without_driver_version_uses_the_kernel_module():
    out = ('[{"gpu": 0, "asic": {"market_name": "MI300X-O"}, "bus": {"bdf": "0000:05:00.0"}, '
           '"vram": {"size": {"value": 196592, "unit": "MB"}}}]')
    check = amd.verify(hardware_host(smi_out=out, pci=MI300X[:1]), params(probe_hardware=True))
    assert check["problems"] == []
    assert check["driver_version"] == "6.12.12"


def test_verify_hardware_reports_amd_smi_failure():
    host = hardware_host(smi_status=1, smi_out="", commands={tuple(SMI_ARGS): (
        1, "", "ERROR:root:Unable to detect any GPU devices, check amdgpu version and module "
               "status (sudo modprobe amdgpu)\n")}, module=False, kfd=False)
    check = amd.verify(host, params(probe_hardware=True))
    assert check["gpu_count"] == 0
    assert check["driver_version"] is None
    assert "the amdgpu kernel module is not loaded" in check["problems"]
    assert "/dev/kfd is missing: the ROCm compute interface is not available" in check["problems"]
    assert ("amd-smi failed with exit status 1: ERROR:root:Unable to detect any GPU devices, "
            "check amdgpu version and module status (sudo modprobe amdgpu)") in check["problems"]


def test_verify_hardware_unreadable_amd_smi_output_is_an_error():
    host = hardware_host(smi_out=sample("dstack-issue-2900.mi300x-vf.rocm6.truncated.txt"))
    with pytest.raises(CheckError, match="amd-smi output: not valid JSON"):
        amd.verify(host, params(probe_hardware=True))


def test_verify_hardware_reports_fewer_gpus_than_on_pci_and_count_expectation():
    pci = MI300X + [("0000:65:00.0", "0x1002", "0x74a1", "0x120000", "amdgpu")]
    check = amd.verify(hardware_host(pci=pci), params({"gpu_count": 8}, probe_hardware=True))
    assert check["problems"] == [
        "amd-smi lists 2 GPU(s) but the host has 3 AMD GPU(s) on PCI",
        "amd-smi lists 2 GPU(s), expected 8",
    ]


def test_verify_hardware_reports_an_empty_list_and_gpus_on_other_drivers():
    pci = [MI300X[0], ("0000:26:00.0", "0x1002", "0x74a1", "0x120000", "vfio-pci"),
           ("0000:65:00.0", "0x1002", "0x74a1", "0x120000", None)]
    check = amd.verify(hardware_host(smi_out='{"gpu_data": []}', pci=pci),
                       params({"gpu_count": 3}, probe_hardware=True))
    assert check["pci_not_amdgpu"] == ["0000:26:00.0 (vfio-pci)", "0000:65:00.0 (no driver)"]
    assert check["problems"] == [
        "2 AMD GPU(s) on PCI are not bound to the amdgpu driver: 0000:26:00.0 (vfio-pci), "
        "0000:65:00.0 (no driver)",
        "amd-smi lists no GPU",
    ]


def test_verify_hardware_finds_amd_smi_in_rocm_bin_or_says_it_is_missing():
    host = hardware_host(bins={"amd-smi": None}, paths={SMI})
    check = amd.verify(host, params(probe_hardware=True))
    assert check["amd_smi"] == SMI and check["problems"] == []
    check = amd.verify(hardware_host(bins={"amd-smi": None}), params(probe_hardware=True))
    assert check["amd_smi"] is None
    assert check["gpu_count"] == 0
    assert check["problems"] == ["amd-smi is neither on PATH nor in /opt/rocm/bin"]
