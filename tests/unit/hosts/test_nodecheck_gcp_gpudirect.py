# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The gcp_gpudirect component check on fake hosts: the machine type table, the metadata
server's answers, the env profile reader, and verification of what the role set up."""

from __future__ import annotations

import posixpath

import pytest
from ansible_collections.gpufleet.cluster.plugins.module_utils.hosts import checks as nodecheck
from ansible_collections.gpufleet.cluster.plugins.module_utils.hosts.checks import (
    gcp_gpudirect as gd,
)
from ansible_collections.gpufleet.cluster.plugins.module_utils.hosts.checks._system import (
    NodeSystem,
)

META = "http://10.79.6.1:8080"
MACHINE_TYPE_PATH = "/computeMetadata/v1/instance/machine-type"
SYSTEMCTL = "/usr/bin/systemctl"
DOCKER = "/usr/bin/docker"
READY_LOG = (
    "I0806 16:03:30.1 rxdm.cc:88] starting\n"
    "I0806 16:03:38.959646      88 fastrak_gpumem_manager.cu.cc:284] Buffer manager "
    "initialization completed.\n"
)


class FakeHost(NodeSystem):
    """A host made of dictionaries: files, paths, directories, commands, metadata answers."""

    def __init__(self, machine_type=None, metadata=None, files=None, paths=(), dirs=None,
                 commands=None, links=None, bins=None):
        self.files = dict(files or {})
        self.paths = set(paths) | set(self.files)
        self.dirs = {k: sorted(v) for k, v in (dirs or {}).items()}
        self.commands = dict(commands or {})
        self.links = dict(links or {})
        self.bins = {"systemctl": SYSTEMCTL, "docker": DOCKER}
        self.bins.update(bins or {})
        self.ran = []
        self.fetched = []
        if metadata is not None:
            self.metadata = metadata
        elif machine_type is not None:
            self.metadata = (200, "projects/1234567/machineTypes/%s" % machine_type)
        else:
            self.metadata = (None, "<urlopen error [Errno 111] Connection refused>")
        super().__init__(self.fake_run, self.bins.get, self.fake_fetch)

    def fake_run(self, argv):
        self.ran.append(list(argv))
        return self.commands.get(tuple(argv), (127, "", "%s: not found" % argv[0]))

    def fake_fetch(self, url, method="GET", headers=None, timeout=2):
        self.fetched.append((url, method, dict(headers or {})))
        return self.metadata

    def exists(self, path):
        return path in self.paths or path in self.dirs

    def read_text(self, path):
        if path not in self.files:
            raise IOError(2, "No such file or directory", path)
        return self.files[path]

    def listdir(self, path):
        return list(self.dirs.get(path, []))

    def resolve(self, link):
        return self.links.get(link)


def pci(*functions):
    """sysfs PCI entries: (address, vendor, device, class) per function."""
    files = {}
    dirs = {"/sys/bus/pci/devices": []}
    for address, vendor, device, klass in functions:
        base = posixpath.join("/sys/bus/pci/devices", address)
        dirs["/sys/bus/pci/devices"].append(address)
        files[base + "/vendor"] = "0x%s\n" % vendor
        files[base + "/device"] = "0x%s\n" % device
        files[base + "/class"] = "0x%s00\n" % klass
    return files, dirs


def gvnics(count):
    return [("0000:00:%02x.0" % (4 + n), "1ae0", "0042", "0200") for n in range(count)]


def gpus(count):
    return [("0000:%02x:00.0" % (0x10 + n), "10de", "2330", "0302") for n in range(count)]


def params(mode="tcpx", probe=False, settings=None, expect=None):
    base = {"mode": mode, "docker": DOCKER}
    base.update(settings or {})
    return {"gcp_metadata_url": META, "probe_hardware": probe, "settings": base,
            "expect": expect or {}, "pci_root": "/sys/bus/pci/devices"}


def profile(env):
    lines = ["# Managed by gpufleet (gcp_gpudirect role)"]
    lines += ['export %s="%s"' % (k, v) for k, v in env.items()]
    return "\n".join(lines) + "\n"


TCPX_ENV = {
    "NCCL_NET": "GPUDirectTCPX_v7",
    "NCCL_GPUDIRECTTCPX_UNIX_CLIENT_PREFIX": "/run/tcpx",
    "LD_LIBRARY_PATH": "/var/lib/tcpx/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}",
}


def ready_host(mode="tcpx", machine_type="a3-highgpu-8g", env=None, logs=READY_LOG,
               active="active", enabled="enabled", extra_files=None, extra_dirs=None,
               extra_paths=()):
    """A host where the role finished: plugin installed, unit running and ready, profile."""
    plugin_dir = gd.PLUGIN_DIRS[mode]
    env = TCPX_ENV if env is None else env
    files = {"/etc/profile.d/gpufleet-gpudirect.sh": profile(env)}
    files.update(extra_files or {})
    dirs = {plugin_dir: ["libnccl-net.so", "libnccl.so.2"]}
    dirs.update(extra_dirs or {})
    service = "gcp-gpudirect-rxdm.service"
    commands = {
        (SYSTEMCTL, "is-active", service): (0 if active == "active" else 3, active + "\n", ""),
        (SYSTEMCTL, "is-enabled", service): (0 if enabled == "enabled" else 1,
                                             enabled + "\n", ""),
        (DOCKER, "logs", "--tail", "2000", "receive-datapath-manager"): (0, "", logs),
    }
    paths = {DOCKER, "/opt/tcpdirect_benchmark/gpu_rxq_configuration.textproto"}
    paths |= set(extra_paths)
    return FakeHost(machine_type=machine_type, files=files, dirs=dirs, commands=commands,
                    paths=paths)


# -- the machine type table -------------------------------------------------------------------

@pytest.mark.parametrize("machine_type, mode, nics", [
    ("a3-highgpu-8g", "tcpx", 4),
    ("a3-edgegpu-8g", "tcpx", 4),
    ("a3-megagpu-8g", "tcpxo", 8),
    ("a3-ultragpu-8g", "roce", 8),
    ("a4-highgpu-8g", "roce", 8),
])
def test_machine_types_map_to_their_stack(machine_type, mode, nics):
    found = gd.detect(FakeHost(machine_type=machine_type), params())
    assert found.applies
    assert found.details["mode"] == mode
    assert found.details["expected_nic_count"] == nics
    assert found.details["machine_type"] == machine_type
    assert machine_type in found.reason and gd.MODES[mode]["stack"] in found.reason


@pytest.mark.parametrize("machine_type", [
    "n2-standard-8", "a3-highgpu-2g", "a3-highgpu-4g", "a2-highgpu-8g", "g2-standard-96",
])
def test_other_machine_types_do_not_apply_and_say_which(machine_type):
    found = gd.detect(FakeHost(machine_type=machine_type), params())
    assert not found.applies
    assert "machine type %s has no GPUDirect stack" % machine_type in found.reason
    assert "a3-megagpu-8g" in found.reason  # names the supported ones
    assert found.details == {"machine_type": machine_type}


def test_every_mode_of_the_table_is_described():
    assert set(gd.MACHINE_TYPES.values()) == set(gd.MODES)
    for info in gd.MODES.values():
        if info["nic_kind"] == "gvnic":
            assert len(info["data_interfaces"]) == info["nic_count"]
            assert info["gvnic_count"] == info["nic_count"] + 1


def test_tcpx_detection_details_carry_the_interfaces():
    found = gd.detect(FakeHost(machine_type="a3-highgpu-8g"), params())
    assert found.details["data_interfaces"] == ["enp6s0", "enp12s0", "enp134s0", "enp140s0"]
    assert found.details["ctrl_interfaces"] == ["enp0s12"]
    assert found.details["rxdm"] is True
    assert gd.detect(FakeHost(machine_type="a4-highgpu-8g"), params()).details["rxdm"] is False


# -- the metadata server ----------------------------------------------------------------------

def test_detection_asks_the_metadata_server_with_the_google_header():
    host = FakeHost(machine_type="a3-megagpu-8g")
    gd.detect(host, params())
    assert host.fetched == [(META + MACHINE_TYPE_PATH, "GET", {"Metadata-Flavor": "Google"})]


def test_detection_defaults_to_the_real_metadata_server():
    host = FakeHost(machine_type="a3-megagpu-8g")
    gd.detect(host, {"gcp_metadata_url": None})
    assert host.fetched[0][0] == "http://metadata.google.internal" + MACHINE_TYPE_PATH


def test_a_host_off_compute_engine_does_not_apply():
    found = gd.detect(FakeHost(), params())
    assert not found.applies
    assert "no Compute Engine metadata server at %s" % META in found.reason
    assert "Connection refused" in found.reason
    assert found.details == {"machine_type": None}


def test_a_metadata_server_that_does_not_know_the_host_does_not_apply():
    found = gd.detect(FakeHost(metadata=(404, "")), params())
    assert not found.applies
    assert "gave no machine type (HTTP 404)" in found.reason


def test_a_bare_machine_type_answer_is_read_too():
    found = gd.detect(FakeHost(metadata=(200, "a3-highgpu-8g\n")), params())
    assert found.applies and found.details["mode"] == "tcpx"


def test_the_component_is_known_to_node_check():
    assert "gcp_gpudirect" in nodecheck.COMPONENTS


# -- the env profile --------------------------------------------------------------------------

def test_env_profile_reader_unquotes_as_the_shell_would_write():
    text = (
        "# comment\n\n"
        'export A="x;y:z"\n'
        "export B='single $quoted'\n"
        "export C=bare\n"
        'export D="with \\"escaped\\" quote and \\$dollar"\n'
        'export LD_LIBRARY_PATH="/var/lib/tcpx/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"\n'
        "unset E\n"
        "F=not-exported\n"
    )
    assert gd.parse_env_profile(text) == {
        "A": "x;y:z",
        "B": "single $quoted",
        "C": "bare",
        "D": 'with "escaped" quote and $dollar',
        "LD_LIBRARY_PATH": "/var/lib/tcpx/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}",
    }


# -- verification, software only --------------------------------------------------------------

def test_a_finished_tcpx_host_verifies():
    host = ready_host()
    check = gd.verify(host, params(settings={
        "env": TCPX_ENV,
        "rxq_configuration": "/opt/tcpdirect_benchmark/gpu_rxq_configuration.textproto"}))
    assert check["problems"] == []
    assert check["ok"] is True
    assert check["mode"] == "tcpx"
    assert check["machine_type"] == "a3-highgpu-8g"
    assert check["plugin_dir"] == "/var/lib/tcpx/lib64"
    assert check["plugin_files"] == ["libnccl-net.so", "libnccl.so.2"]
    assert check["rxdm"] == {"service": "gcp-gpudirect-rxdm.service", "active": "active",
                             "enabled": "enabled", "container": "receive-datapath-manager",
                             "ready": True}
    assert check["env"] == TCPX_ENV
    assert "nic_count" not in check  # hardware not probed


def test_roce_has_no_rxdm_to_check():
    env = {"NCCL_NET": "gIB"}
    host = ready_host(mode="roce", machine_type="a4-highgpu-8g", env=env)
    check = gd.verify(host, params(mode="roce", settings={"env": env}))
    assert check["ok"], check["problems"]
    assert "rxdm" not in check
    assert not any(argv[0] == SYSTEMCTL for argv in host.ran)


def test_missing_plugin_files_are_problems():
    host = ready_host(extra_dirs={"/var/lib/tcpx/lib64": []})
    check = gd.verify(host, params())
    assert not check["ok"]
    assert ("the NCCL plugin directory /var/lib/tcpx/lib64 is missing or empty (the plugin "
            "installer has not run)") in check["problems"]
    host = ready_host(mode="tcpxo", machine_type="a3-megagpu-8g")
    check = gd.verify(host, params(mode="tcpxo", settings={
        "plugin_files": ["libnccl-net.so", "nccl-env-profile.sh"]}))
    assert check["plugin_missing"] == ["nccl-env-profile.sh"]
    assert "/var/lib/tcpxo/lib64 lacks nccl-env-profile.sh" in check["problems"]


def test_an_inactive_or_disabled_unit_is_a_problem():
    check = gd.verify(ready_host(active="failed", enabled="disabled"), params())
    assert ("the receive-datapath-manager unit gcp-gpudirect-rxdm.service is failed, "
            "not active") in check["problems"]
    assert ("the receive-datapath-manager unit gcp-gpudirect-rxdm.service is disabled, "
            "not enabled") in check["problems"]


def test_rxdm_that_has_not_logged_readiness_is_not_ready():
    check = gd.verify(ready_host(logs="I0806 starting\n"), params())
    assert check["rxdm"]["ready"] is False
    assert any("has not finished initializing" in p for p in check["problems"])


def test_unreadable_rxdm_logs_are_a_problem():
    host = ready_host()
    host.commands[(DOCKER, "logs", "--tail", "2000", "receive-datapath-manager")] = (
        1, "", "Error: No such container: receive-datapath-manager\n")
    check = gd.verify(host, params())
    assert check["rxdm"]["ready"] is False
    assert ("cannot read the logs of the receive-datapath-manager container: Error: No such "
            "container: receive-datapath-manager") in check["problems"]


def test_a_host_without_docker_says_so():
    host = ready_host()
    host.paths.discard(DOCKER)
    check = gd.verify(host, params())
    assert check["rxdm"]["log_error"] == "docker is not installed"


def test_env_profile_differences_are_problems():
    host = ready_host(env={"NCCL_NET": "Socket"})
    check = gd.verify(host, params(settings={"env": {"NCCL_NET": "GPUDirectTCPX_v7",
                                                     "NCCL_ALGO": "Ring"}}))
    path = "/etc/profile.d/gpufleet-gpudirect.sh"
    assert "%s exports NCCL_NET=Socket, not GPUDirectTCPX_v7" % path in check["problems"]
    assert "%s does not export NCCL_ALGO" % path in check["problems"]


def test_a_missing_env_profile_is_a_problem():
    host = ready_host()
    del host.files["/etc/profile.d/gpufleet-gpudirect.sh"]
    check = gd.verify(host, params())
    assert check["env"] == {}
    assert ("the NCCL environment profile /etc/profile.d/gpufleet-gpudirect.sh is missing"
            in check["problems"])


def test_a_machine_type_of_another_stack_is_a_problem():
    check = gd.verify(ready_host(machine_type="a3-megagpu-8g"), params())
    assert ("machine type a3-megagpu-8g uses GPUDirect-TCPXO, but the host is set up for "
            "GPUDirect-TCPX") in check["problems"]


def test_no_metadata_server_is_noted_not_a_problem():
    host = ready_host(machine_type=None)
    check = gd.verify(host, params())
    assert check["ok"], check["problems"]
    assert check["machine_type"] is None
    assert "no Compute Engine metadata server" in check["machine_type_note"]


def test_a_missing_tcpx_queue_topology_is_a_problem():
    host = ready_host()
    host.paths.discard("/opt/tcpdirect_benchmark/gpu_rxq_configuration.textproto")
    check = gd.verify(host, params(settings={
        "rxq_configuration": "/opt/tcpdirect_benchmark/gpu_rxq_configuration.textproto"}))
    assert ("the RxDM queue topology /opt/tcpdirect_benchmark/gpu_rxq_configuration.textproto "
            "is missing") in check["problems"]


@pytest.mark.parametrize("mode", [None, "", "rdma"])
def test_a_bad_mode_setting_is_a_check_error(mode):
    with pytest.raises(nodecheck.CheckError, match="settings.mode must be one of"):
        gd.verify(ready_host(), params(mode=mode))


def test_settings_override_the_defaults():
    host = ready_host(extra_dirs={"/opt/plugin": ["libnccl-net.so"]})
    host.commands[(SYSTEMCTL, "is-active", "rxdm.service")] = (0, "active\n", "")
    host.commands[(SYSTEMCTL, "is-enabled", "rxdm.service")] = (0, "enabled\n", "")
    host.commands[(DOCKER, "logs", "--tail", "2000", "rxdm")] = (0, "ready now\n", "")
    check = gd.verify(host, params(settings={
        "plugin_dir": "/opt/plugin", "rxdm_service": "rxdm.service", "rxdm_container": "rxdm",
        "rxdm_ready_line": "ready now", "plugin_dir_unused": None}))
    assert check["ok"], check["problems"]
    assert check["plugin_dir"] == "/opt/plugin"


# -- verification with the hardware -----------------------------------------------------------

def hardware_host(mode, machine_type, functions, interfaces, extra_paths=(), extra_dirs=None):
    files, dirs = pci(*functions)
    dirs.update(extra_dirs or {})
    paths = {"/sys/class/net/" + name for name in interfaces} | set(extra_paths)
    return ready_host(mode=mode, machine_type=machine_type, extra_files=files,
                      extra_dirs=dirs, extra_paths=paths)


TCPX_IFACES = ["enp0s12", "enp6s0", "enp12s0", "enp134s0", "enp140s0"]


def test_a_tcpx_host_with_its_nics_and_gpus_verifies():
    host = hardware_host("tcpx", "a3-highgpu-8g", gvnics(5) + gpus(8), TCPX_IFACES)
    check = gd.verify(host, params(probe=True))
    assert check["problems"] == []
    assert check["gvnic_count"] == 5
    assert check["nic_count"] == 4
    assert check["expected_nic_count"] == 4
    assert check["gpu_count"] == 8
    assert check["missing_interfaces"] == []


def test_too_few_gvnics_and_missing_interfaces_are_problems():
    host = hardware_host("tcpx", "a3-highgpu-8g", gvnics(3) + gpus(8), TCPX_IFACES[:3])
    check = gd.verify(host, params(probe=True))
    assert check["nic_count"] == 2
    assert ("found 2 gVNIC data NICs (gVNICs besides the primary one), expected 4 for "
            "GPUDirect-TCPX") in check["problems"]
    assert ("network interfaces enp134s0, enp140s0 are missing (the NCCL environment names "
            "them)") in check["problems"]


def test_gpu_count_and_expectations_can_be_overridden():
    host = hardware_host("tcpx", "a3-highgpu-8g", gvnics(3) + gpus(4), TCPX_IFACES)
    check = gd.verify(host, params(probe=True, expect={"nic_count": 2, "gpu_count": "4"}))
    assert check["ok"], check["problems"]
    check = gd.verify(host, params(probe=True))
    assert "found 4 NVIDIA GPUs, expected 8" in check["problems"]
    with pytest.raises(nodecheck.CheckError, match="expect.nic_count must be a number"):
        gd.verify(host, params(probe=True, expect={"nic_count": "four"}))


def test_roce_counts_the_connectx_functions():
    functions = gvnics(2) + gpus(8) + [
        ("0000:%02x:00.0" % (0x90 + n), "15b3", "1021", "0200") for n in range(8)]
    host = hardware_host("roce", "a3-ultragpu-8g", functions, ["enp0s19", "enp192s20"])
    check = gd.verify(host, params(mode="roce", probe=True))
    assert check["problems"] == []
    assert check["nic_count"] == 8 and check["rdma_nic_count"] == 8
    host = hardware_host("roce", "a3-ultragpu-8g", gvnics(2) + gpus(8), ["enp0s19", "enp192s20"])
    check = gd.verify(host, params(mode="roce", probe=True))
    assert ("found 0 RDMA NICs (Mellanox ConnectX functions), expected 8 for RoCE with the gIB "
            "NCCL plugin") in check["problems"]


TCPXO_IFACES = ["enp0s12"] + gd.MODES["tcpxo"]["data_interfaces"]
APERTURES = [("0000:%02x:00.1" % (0x06 + n), "1ae0", "0084", "0200") for n in range(8)]


def test_a_tcpxo_host_needs_the_dmabuf_device_and_the_apertures():
    mounted = {"/dev/aperture_devices": [a[0] for a in APERTURES]}
    host = hardware_host("tcpxo", "a3-megagpu-8g", gvnics(9) + gpus(8) + APERTURES,
                         TCPXO_IFACES, extra_paths={"/dev/dmabuf_import_helper"},
                         extra_dirs=mounted)
    check = gd.verify(host, params(mode="tcpxo", probe=True))
    assert check["problems"] == []
    assert check["dmabuf_import_helper"] is True
    assert check["aperture_devices"] == {"pci": 8, "mounted": 8}

    host = hardware_host("tcpxo", "a3-megagpu-8g", gvnics(9) + gpus(8) + APERTURES,
                         TCPXO_IFACES)
    check = gd.verify(host, params(mode="tcpxo", probe=True))
    assert ("/dev/dmabuf_import_helper is missing: the import-helper kernel module is not "
            "loaded") in check["problems"]
    assert ("/dev/aperture_devices holds 0 of the 8 aperture devices (udev rule "
            "00-a3-megagpu.rules)") in check["problems"]
