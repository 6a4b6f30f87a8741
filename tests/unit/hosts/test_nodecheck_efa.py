# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The efa component of node_check on fake hosts: the instance type table, detection from EFA
PCI devices and the EC2 metadata service (IMDSv2 and its failures), and verification of the
installer's record, libfabric, the OFI NCCL plugin, the profile, the linker configuration, the
ptrace sysctl and, with the hardware, the devices, the kernel module and fi_info."""

from __future__ import annotations

import pytest
from ansible_collections.gpufleet.cluster.plugins.module_utils.hosts.checks import (
    COMPONENTS,
    CheckError,
    efa,
)
from ansible_collections.gpufleet.cluster.plugins.module_utils.hosts.checks._system import (
    NodeSystem,
)

ROOT = "/sys/bus/pci/devices"
IMDS = "http://169.254.169.254"
TOKEN = "imds-token-123"
FI_INFO = "/opt/amazon/efa/bin/fi_info"
RECORD = "/opt/amazon/efa_installed_packages"
PROFILE = "/etc/profile.d/gpufleet-efa.sh"
LD_CONF = "/etc/ld.so.conf.d/gpufleet-efa.conf"
SYSCTL = "/etc/sysctl.d/90-gpufleet-efa.conf"
PLUGIN = "/opt/amazon/ofi-nccl/lib/libnccl-net-ofi.so"

# (address, vendor, device, class, bound driver)
EFA_DEVICES = (
    ("0000:10:00.0", "0x1d0f", "0xefa1", "0x020000", "efa"),
    ("0000:11:00.0", "0x1d0f", "0xefa1", "0x020000", "efa"),
)
OTHERS = [
    ("0000:00:05.0", "0x1d0f", "0xec20", "0x020000", "ena"),  # ENA network adapter (1d0f too)
    ("0000:00:04.0", "0x1d0f", "0x8061", "0x010802", "nvme"),  # EBS NVMe controller
    ("0000:53:00.0", "0x10de", "0x2330", "0x030200", "nvidia"),
]

# The installer's record as efa_installer.sh writes it (write_package_file).
RECORD_TEXT = """\
# EFA installer version: 1.47.0
# Debug packages installed: no
# Packages installed:
ibacm_58.amzn0-1_amd64 ibverbs-providers_58.amzn0-1_amd64 libfabric-aws-bin_2.3.1amzn1.0_amd64 \
libfabric1-aws_2.3.1amzn1.0_amd64 openmpi50-aws_5.0.8-1_amd64 libnccl-ofi_1.17.1-1_amd64 \
efa-config_1.18-1_all efa-profile_1.7-1_all efa_2.17.2-1_amd64
"""
FI_VERSION = "fi_info: 2.3.1amzn1.0\nlibfabric: 2.3.1amzn1.0\nlibfabric api: 2.3\n"
PROFILE_TEXT = """\
# Managed by Ansible: gpufleet.cluster.efa
export FI_PROVIDER=efa
export FI_EFA_USE_DEVICE_RDMA=1
export NCCL_SOCKET_IFNAME='^docker,lo,veth'
export LD_LIBRARY_PATH="/opt/amazon/efa/lib:/opt/amazon/ofi-nccl/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
"""
ENV = {"FI_PROVIDER": "efa", "FI_EFA_USE_DEVICE_RDMA": "1", "NCCL_SOCKET_IFNAME": "^docker,lo,veth"}
# fi_info -p efa -t FI_EP_RDM on a host with two EFA interfaces (format: EC2 user guide, ADT).
FI_INFO_TWO = """\
provider: efa
    fabric: efa
    domain: rdmap16s27-rdm
    version: 122.0
    type: FI_EP_RDM
    protocol: FI_PROTO_EFA
provider: efa
    fabric: efa
    domain: rdmap17s27-rdm
    version: 122.0
    type: FI_EP_RDM
    protocol: FI_PROTO_EFA
"""
GOOD_FILES = {
    RECORD: RECORD_TEXT,
    PROFILE: PROFILE_TEXT,
    LD_CONF: "# Managed by Ansible\n/opt/amazon/ofi-nccl/lib\n",
    "/etc/ld.so.conf.d/efa.conf": "/opt/amazon/efa/lib\n",
    SYSCTL: "kernel.yama.ptrace_scope = 0\n",
}
GOOD_PATHS = {FI_INFO, PLUGIN, "/opt/amazon/openmpi/bin/mpirun"}
GOOD_EXPECT = {"installer_version": "1.47.0", "kernel_module": True, "libfabric": True,
               "ofi_nccl": True, "profile_env": ENV, "ptrace_scope": 0}


class FakeHost(NodeSystem):
    """A host made of dictionaries: files, paths that exist, symbolic links, commands, and an
    EC2 metadata service that knows ``instance_type`` (None: nothing answers)."""

    def __init__(self, pci=(), files=None, paths=(), links=None, commands=None,
                 instance_type=None, imds="v2"):
        self.files = {}
        self.links = dict(links or {})
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
        self.instance_type = instance_type
        self.imds = imds
        self.ran = []
        self.fetched = []
        super().__init__(self.fake_run, self.fake_which, self.fake_fetch)

    def fake_run(self, argv):
        self.ran.append(list(argv))
        return self.commands.get(tuple(argv), (127, "", "%s: command not found" % argv[0]))

    @staticmethod
    def fake_which(name):
        return None

    def fake_fetch(self, url, method="GET", headers=None, timeout=2):
        headers = headers or {}
        self.fetched.append((method, url, dict(headers)))
        if self.imds == "down":
            return None, "<urlopen error [Errno 113] No route to host>"
        if self.instance_type is None:
            return 404, ""
        if url.endswith("/latest/api/token"):
            if method != "PUT" or not headers.get("X-aws-ec2-metadata-token-ttl-seconds"):
                return 400, ""
            if self.imds == "v1":
                return 403, ""
            return 200, TOKEN + "\n"
        if url.endswith("/latest/meta-data/instance-type"):
            if self.imds == "v2" and headers.get("X-aws-ec2-metadata-token") != TOKEN:
                return 401, ""
            return 200, self.instance_type + "\n"
        return 404, ""

    def exists(self, path):
        return path in self.paths or path in self.files or any(
            p.startswith(path + "/") for p in list(self.paths) + list(self.files))

    def read_text(self, path):
        if path not in self.files:
            raise OSError(2, "No such file or directory", path)
        return self.files[path]

    def listdir(self, path):
        names = set()
        for known in list(self.files) + list(self.paths) + list(self.links):
            if known.startswith(path + "/"):
                names.add(known[len(path) + 1:].split("/")[0])
        return sorted(names)

    def resolve(self, link):
        return self.links.get(link)


def params(expect=None, settings=None, probe_hardware=False, pci_root=ROOT, imds=IMDS):
    return {"expect": expect or {}, "settings": settings or {}, "probe_hardware": probe_hardware,
            "pci_root": pci_root, "aws_imds_url": imds}


def software_host(files=None, paths=None, commands=None, drop=(), **kwargs):
    host_files = dict(GOOD_FILES)
    host_files.update(files or {})
    host_paths = set(GOOD_PATHS if paths is None else paths)
    for path in drop:
        host_files.pop(path, None)
        host_paths.discard(path)
    host_commands = {(FI_INFO, "--version"): (0, FI_VERSION, "")}
    host_commands.update(commands or {})
    return FakeHost(files=host_files, paths=host_paths, commands=host_commands, **kwargs)


def rdma_links(count):
    """/sys/class/infiniband entries as the efa driver registers them."""
    links = {}
    for index in range(count):
        links["/sys/class/infiniband/rdmap%ds27/device/driver" % (16 + index)] = \
            "/sys/bus/pci/drivers/efa"
    return links


def hardware_host(fi_info=(0, FI_INFO_TWO, ""), pci=EFA_DEVICES, rdma=2, module=True,
                  ptrace="0\n", **kwargs):
    files = dict(kwargs.pop("files", {}))
    paths = set(kwargs.pop("paths", GOOD_PATHS))
    if module:
        paths.add("/sys/module/efa")
    if ptrace is not None:
        files["/proc/sys/kernel/yama/ptrace_scope"] = ptrace
    commands = {(FI_INFO, "-p", "efa", "-t", "FI_EP_RDM"): fi_info}
    commands.update(kwargs.pop("commands", {}))
    return software_host(pci=list(pci) + OTHERS, files=files, paths=paths, commands=commands,
                         links=rdma_links(rdma), **kwargs)


# --- instance type table ---------------------------------------------------------------------


def test_component_is_known():
    assert "efa" in COMPONENTS


@pytest.mark.parametrize("instance_type, interfaces, rdma", [
    ("p5.48xlarge", 32, True),
    ("p5e.48xlarge", 32, True),
    ("p5en.48xlarge", 16, True),
    ("p4d.24xlarge", 4, True),
    ("p4de.24xlarge", 4, True),
    ("p6-b200.48xlarge", 8, True),
    ("p6e-gb200.36xlarge", 4, True),
    ("p5.4xlarge", 1, True),
    ("g5.48xlarge", 1, False),
    ("g6.8xlarge", 1, False),
    ("g4dn.metal", 1, False),
    ("p3dn.24xlarge", 1, False),
    ("P5.48XLARGE ", 32, True),
])
def test_table_gives_interface_count_and_rdma(instance_type, interfaces, rdma):
    assert efa.instance_type_efa(instance_type) == {"interfaces": interfaces, "device_rdma": rdma}


def test_table_knows_capable_types_whose_count_is_not_recorded():
    assert efa.instance_type_efa("p6-b300.48xlarge") == {"interfaces": None, "device_rdma": True}
    assert efa.instance_type_efa("g6e.48xlarge")["interfaces"] is None


@pytest.mark.parametrize("instance_type", [
    "t3.micro", "g5.xlarge", "g5.4xlarge", "g6.xlarge", "p5.24xlarge", "m5.large", "", None])
def test_table_rejects_types_without_efa(instance_type):
    assert efa.instance_type_efa(instance_type) is None


def test_every_table_entry_is_well_formed():
    for name, (interfaces, rdma) in efa.EFA_INSTANCE_TYPES.items():
        assert name == name.lower() and "." in name
        assert interfaces is None or (isinstance(interfaces, int) and interfaces >= 1)
        assert isinstance(rdma, bool)


# --- detect ----------------------------------------------------------------------------------


def test_detect_with_efa_devices_and_instance_type():
    host = FakeHost(pci=list(EFA_DEVICES) + OTHERS, instance_type="p4d.24xlarge")
    found = efa.detect(host, params())
    assert found.applies is True
    assert found.details["efa_devices"] == ["0000:10:00.0", "0000:11:00.0"]
    assert found.details["efa_device_count"] == 2
    assert found.details["instance_type"] == "p4d.24xlarge"
    assert found.details["expected_interfaces"] == 4
    assert found.details["device_rdma"] is True
    assert "2 EFA devices on the PCI bus" in found.reason
    assert "p4d.24xlarge" in found.reason and "4 interfaces" in found.reason


def test_detect_uses_imdsv2_token():
    host = FakeHost(instance_type="p5.48xlarge")
    efa.detect(host, params(imds="http://10.79.4.1:8080/"))
    assert host.fetched[0] == ("PUT", "http://10.79.4.1:8080/latest/api/token",
                               {"X-aws-ec2-metadata-token-ttl-seconds": "60"})
    assert host.fetched[1] == ("GET", "http://10.79.4.1:8080/latest/meta-data/instance-type",
                               {"X-aws-ec2-metadata-token": TOKEN})


def test_detect_capable_instance_type_without_devices_applies():
    found = efa.detect(FakeHost(pci=OTHERS, instance_type="p5.48xlarge"), params())
    assert found.applies is True
    assert found.reason == ("instance type p5.48xlarge supports EFA (32 interfaces); no EFA "
                            "device is attached yet")
    assert found.details["efa_device_count"] == 0
    assert found.details["expected_interfaces"] == 32
    assert found.details["efa_capable"] is True


def test_detect_capable_type_with_unrecorded_count():
    found = efa.detect(FakeHost(instance_type="p6-b300.48xlarge"), params())
    assert found.applies is True
    assert "interface count not recorded" in found.reason
    assert found.details["expected_interfaces"] is None


def test_detect_falls_back_to_imdsv1():
    found = efa.detect(FakeHost(instance_type="g5.12xlarge", imds="v1"), params())
    assert found.applies is True
    assert found.details["instance_type"] == "g5.12xlarge"
    assert found.details["device_rdma"] is False


def test_detect_instance_type_without_efa_does_not_apply():
    found = efa.detect(FakeHost(pci=OTHERS, instance_type="t3.micro"), params())
    assert found.applies is False
    assert found.reason == "instance type t3.micro does not support EFA and no EFA device is " \
        "attached"
    assert found.details["instance_type"] == "t3.micro"
    assert found.details["efa_capable"] is False


def test_detect_off_ec2_does_not_apply_and_says_why():
    found = efa.detect(FakeHost(pci=OTHERS, imds="down"), params())
    assert found.applies is False
    assert "not on EC2" in found.reason and "No route to host" in found.reason
    assert found.details["instance_type"] is None
    assert "imds_error" in found.details


def test_detect_when_metadata_answers_404():
    found = efa.detect(FakeHost(instance_type=None), params())
    assert found.applies is False
    assert "HTTP 404" in found.reason


def test_detect_devices_off_ec2_still_applies():
    found = efa.detect(FakeHost(pci=EFA_DEVICES, imds="down"), params())
    assert found.applies is True
    assert found.reason.startswith("2 EFA devices on the PCI bus (not on EC2")


def test_detect_unknown_type_with_a_device_applies():
    found = efa.detect(FakeHost(pci=EFA_DEVICES[:1], instance_type="trn1.32xlarge"), params())
    assert found.applies is True
    assert found.reason == "1 EFA device on the PCI bus (instance type trn1.32xlarge)"
    assert found.details["expected_interfaces"] is None


def test_detect_ignores_ena_and_other_amazon_functions():
    found = efa.detect(FakeHost(pci=OTHERS, instance_type="c5.large"), params())
    assert found.applies is False
    assert found.details["efa_devices"] == []


@pytest.mark.parametrize("device", ["0xefa0", "0xefa2", "0xefa3"])
def test_detect_knows_every_efa_generation(device):
    pci = [("0000:20:00.0", "0x1d0f", device, "0x020000", None)]
    assert efa.detect(FakeHost(pci=pci, imds="down"), params()).details["efa_device_count"] == 1


def test_detect_reads_the_given_pci_root():
    found = efa.detect(FakeHost(pci=EFA_DEVICES, imds="down"), params(pci_root="/elsewhere"))
    assert found.applies is False


# --- parsers ---------------------------------------------------------------------------------


def test_parse_installed_packages():
    parsed = efa.parse_installed_packages(RECORD_TEXT)
    assert parsed["installer_version"] == "1.47.0"
    assert parsed["debug_packages"] is False
    assert parsed["packages"][0] == "ibacm_58.amzn0-1_amd64"
    assert len(parsed["packages"]) == 9


def test_parse_installed_packages_needs_the_version_line():
    with pytest.raises(CheckError, match="EFA installer version"):
        efa.parse_installed_packages("# Packages installed:\nfoo_1_amd64\n")


@pytest.mark.parametrize("entry, name", [
    ("libfabric-aws-bin_1.22.0amzn4.0_amd64", "libfabric-aws-bin"),
    ("efa_2.13.0-1_amd64", "efa"),
    ("efa-config_1.17-1_all", "efa-config"),
    ("libfabric-aws-1.22.0amzn4.0-1.amzn2.x86_64", "libfabric-aws"),
    ("efa-2.13.0-1.el9.x86_64", "efa"),
    ("rdma-core-52.0-1.amzn1.x86_64", "rdma-core"),
])
def test_package_name(entry, name):
    assert efa.package_name(entry) == name


def test_parse_fi_info_blocks():
    blocks = efa.parse_fi_info(FI_INFO_TWO)
    assert [b["domain"] for b in blocks] == ["rdmap16s27-rdm", "rdmap17s27-rdm"]
    assert blocks[0]["type"] == "FI_EP_RDM" and blocks[0]["protocol"] == "FI_PROTO_EFA"


def test_parse_fi_info_old_style_fabric_names():
    text = ("provider: efa\n    fabric: EFA-fe80::4d3:11ff:fe6d:a0b4\n    domain: efa_0-rdm\n"
            "    version: 2.0\n    type: FI_EP_RDM\n    protocol: FI_PROTO_EFA\n")
    assert efa.parse_fi_info(text) == [{
        "provider": "efa", "fabric": "EFA-fe80::4d3:11ff:fe6d:a0b4", "domain": "efa_0-rdm",
        "version": "2.0", "type": "FI_EP_RDM", "protocol": "FI_PROTO_EFA"}]


def test_parse_fi_info_version():
    assert efa.parse_fi_info_version(FI_VERSION)["libfabric"] == "2.3.1amzn1.0"
    with pytest.raises(CheckError):
        efa.parse_fi_info_version("garbage\n")


def test_parse_profile_removes_quotes_and_keeps_expansions():
    env = efa.parse_profile(PROFILE_TEXT)
    assert env["NCCL_SOCKET_IFNAME"] == "^docker,lo,veth"
    assert env["LD_LIBRARY_PATH"] == \
        "/opt/amazon/efa/lib:/opt/amazon/ofi-nccl/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
    assert efa.path_entries(env["LD_LIBRARY_PATH"]) == [
        "/opt/amazon/efa/lib", "/opt/amazon/ofi-nccl/lib"]


def test_parse_profile_unbalanced_quote_is_a_check_error():
    with pytest.raises(CheckError, match="line 2"):
        efa.parse_profile("# x\nexport A='b\n")


def test_parse_ld_conf_and_sysctl():
    assert efa.parse_ld_conf("# c\n/a\n\ninclude /etc/x/*.conf\n/b # d\n") == ["/a", "/b"]
    assert efa.parse_sysctl("# c\n; d\nkernel.yama.ptrace_scope=0\n-net.x = 1\n") == {
        "kernel.yama.ptrace_scope": "0", "net.x": "1"}


# --- verify: software ------------------------------------------------------------------------


def test_verify_software_all_good():
    host = software_host()
    found = efa.verify(host, params(expect=dict(GOOD_EXPECT, efa_devices=32)))
    assert found["problems"] == []
    assert found["ok"] is True
    assert found["installed"] is True
    assert found["installer_version"] == "1.47.0"
    assert found["kernel_module_package"] is True
    assert found["libfabric"] is True and found["libfabric_version"] == "2.3.1amzn1.0"
    assert found["openmpi"] is True
    assert found["ofi_nccl"] is True
    assert found["ofi_nccl_library"] == PLUGIN
    assert found["ofi_nccl_lib_dir"] == "/opt/amazon/ofi-nccl/lib"
    assert found["profile_env"]["FI_PROVIDER"] == "efa"
    assert found["ptrace_scope_configured"] == 0
    assert found["expected_efa_devices"] == 32
    assert found["efa_pci_devices"] == 0
    assert found["hardware_probed"] is False
    # without the hardware, fi_info is only asked for its version
    assert host.ran == [[FI_INFO, "--version"]]


def test_verify_nothing_installed():
    host = FakeHost()
    found = efa.verify(host, params(expect=GOOD_EXPECT))
    assert found["ok"] is False
    assert found["installed"] is False and found["installer_version"] is None
    assert any("record %s is missing" % RECORD in p for p in found["problems"])
    assert any("libfabric is not installed" in p for p in found["problems"])
    assert any("OFI NCCL plugin" in p for p in found["problems"])
    assert any("profile %s is missing" % PROFILE in p for p in found["problems"])
    assert any("ptrace_scope to nothing, not 0" in p for p in found["problems"])


def test_verify_without_expectations_only_reports():
    found = efa.verify(FakeHost(), params())
    assert found["ok"] is True
    assert found["installed"] is False and found["ofi_nccl"] is False


def test_verify_other_installer_version():
    found = efa.verify(software_host(), params(expect={"installer_version": "1.48.0"}))
    assert found["problems"] == ["EFA installer 1.47.0 is installed, not 1.48.0"]


def test_verify_skip_kmod_install_lacks_the_kernel_module_package():
    record = RECORD_TEXT.replace(" efa_2.17.2-1_amd64", "")
    found = efa.verify(software_host(files={RECORD: record}), params(expect=GOOD_EXPECT))
    assert found["kernel_module_package"] is False
    assert found["problems"] == [
        "the EFA installer did not install its efa kernel module package (did it run with "
        "--skip-kmod?)"]
    ok = efa.verify(software_host(files={RECORD: record}),
                    params(expect=dict(GOOD_EXPECT, kernel_module=False)))
    assert ok["ok"] is True


def test_verify_plugin_of_older_installers_under_the_arch_directory():
    old = "/opt/amazon/ofi-nccl/lib/x86_64-linux-gnu/libnccl-net.so"
    host = software_host(paths=(GOOD_PATHS - {PLUGIN}) | {old},
                         files={LD_CONF: "/opt/amazon/ofi-nccl/lib/x86_64-linux-gnu\n"})
    found = efa.verify(host, params(expect=GOOD_EXPECT))
    assert found["ok"] is True, found["problems"]
    assert found["ofi_nccl_library"] == old


def test_verify_plugin_directory_unknown_to_the_linker():
    profile = PROFILE_TEXT.replace(":/opt/amazon/ofi-nccl/lib", "")
    host = software_host(files={PROFILE: profile}, drop=[LD_CONF])
    found = efa.verify(host, params(expect=GOOD_EXPECT))
    assert found["problems"] == [
        "the OFI NCCL plugin's directory /opt/amazon/ofi-nccl/lib is neither in "
        "/etc/ld.so.conf.d nor in the profile's LD_LIBRARY_PATH"]


def test_verify_plugin_directory_in_ld_library_path_is_enough():
    found = efa.verify(software_host(drop=[LD_CONF]), params(expect=GOOD_EXPECT))
    assert found["ok"] is True


def test_verify_libfabric_directory_unknown_to_the_linker():
    profile = PROFILE_TEXT.replace("/opt/amazon/efa/lib:", "")
    host = software_host(files={PROFILE: profile}, drop=["/etc/ld.so.conf.d/efa.conf"])
    found = efa.verify(host, params(expect=GOOD_EXPECT))
    assert found["problems"] == [
        "libfabric's directory /opt/amazon/efa/lib is neither in /etc/ld.so.conf.d nor in the "
        "profile's LD_LIBRARY_PATH"]


def test_verify_el_libfabric_in_lib64():
    host = software_host(paths=GOOD_PATHS | {"/opt/amazon/efa/lib64/libfabric.so.1"},
                         files={"/etc/ld.so.conf.d/efa.conf": "/opt/amazon/efa/lib64\n"})
    found = efa.verify(host, params(expect=GOOD_EXPECT))
    assert found["efa_lib_dir"] == "/opt/amazon/efa/lib64"
    assert found["ok"] is True, found["problems"]


def test_verify_profile_values():
    expect = {"profile_env": {"FI_PROVIDER": "efa", "FI_EFA_USE_DEVICE_RDMA": None,
                              "NCCL_DEBUG": "INFO"}}
    found = efa.verify(software_host(), params(expect=expect))
    assert found["problems"] == [
        "%s exports FI_EFA_USE_DEVICE_RDMA=1, which it should not" % PROFILE,
        "%s sets NCCL_DEBUG to nothing, not INFO" % PROFILE,
    ]


def test_verify_ptrace_scope_configured_otherwise():
    found = efa.verify(software_host(files={SYSCTL: "kernel.yama.ptrace_scope = 1\n"}),
                       params(expect={"ptrace_scope": 0}))
    assert found["ptrace_scope_configured"] == 1
    assert found["problems"] == ["%s sets kernel.yama.ptrace_scope to 1, not 0" % SYSCTL]


def test_verify_fi_info_version_failure_is_a_problem():
    host = software_host(commands={(FI_INFO, "--version"): (127, "", "libfabric.so.1: cannot "
                                                                     "open shared object")})
    found = efa.verify(host, params(expect=GOOD_EXPECT))
    assert found["libfabric_version"] is None
    assert found["problems"] == [
        "%s --version failed with exit status 127: libfabric.so.1: cannot open shared object"
        % FI_INFO]


def test_verify_unreadable_record_is_a_check_error():
    with pytest.raises(CheckError):
        efa.verify(software_host(files={RECORD: "garbage\n"}), params())


def test_verify_settings_move_the_files():
    host = software_host(files={"/etc/profile.d/other.sh": "export FI_PROVIDER=tcp\n"})
    found = efa.verify(host, params(expect={"profile_env": {"FI_PROVIDER": "efa"}},
                                    settings={"profile": "/etc/profile.d/other.sh"}))
    assert found["problems"] == ["/etc/profile.d/other.sh sets FI_PROVIDER to tcp, not efa"]


# --- verify: hardware ------------------------------------------------------------------------


def test_verify_hardware_all_good():
    host = hardware_host()
    found = efa.verify(host, params(expect=dict(GOOD_EXPECT, efa_devices=2),
                                    probe_hardware=True))
    assert found["problems"] == []
    assert found["efa_pci_devices"] == found["efa_devices"] == 2
    assert found["efa_rdma_devices"] == 2
    assert found["kernel_module_loaded"] is True
    assert found["ptrace_scope"] == 0
    assert found["efa_provider"] is True
    assert found["fi_info_domains"] == ["rdmap16s27-rdm", "rdmap17s27-rdm"]
    assert [FI_INFO, "-p", "efa", "-t", "FI_EP_RDM"] in host.ran


def test_verify_hardware_fewer_devices_than_the_instance_type_has():
    found = efa.verify(hardware_host(), params(expect={"efa_devices": 4}, probe_hardware=True))
    assert found["problems"] == [
        "2 EFA devices on the PCI bus, the instance type has 4",
        "fi_info -p efa lists 2 EFA domains, the instance type has 4 EFA interfaces",
    ]


def test_verify_hardware_without_provider():
    host = hardware_host(fi_info=(61, "", "fi_getinfo: -61 (No data available)\n"), pci=(),
                         rdma=0, module=False)
    found = efa.verify(host, params(expect=dict(GOOD_EXPECT, efa_devices=32),
                                    probe_hardware=True))
    assert found["efa_provider"] is False
    assert found["problems"] == [
        "the efa kernel module is not loaded",
        "0 EFA devices on the PCI bus, the instance type has 32",
        "fi_info -p efa found no EFA provider (exit status 61: fi_getinfo: -61 (No data "
        "available))",
    ]


def test_verify_hardware_device_not_bound():
    found = efa.verify(hardware_host(rdma=1), params(probe_hardware=True))
    assert found["problems"] == [
        "2 EFA devices on the PCI bus but 1 in /sys/class/infiniband (is the efa driver bound?)"]


def test_verify_hardware_live_ptrace_scope():
    found = efa.verify(hardware_host(ptrace="1\n"),
                       params(expect={"ptrace_scope": 0}, probe_hardware=True))
    assert found["ptrace_scope"] == 1
    assert found["problems"] == [
        "kernel.yama.ptrace_scope is 1, not 0 (the sysctl setting was not applied)"]


def test_verify_hardware_without_yama_does_not_complain():
    found = efa.verify(hardware_host(ptrace=None),
                       params(expect={"ptrace_scope": 0}, probe_hardware=True))
    assert found["ptrace_scope"] is None
    assert found["ok"] is True


def test_verify_hardware_fi_info_without_efa_blocks_is_a_check_error():
    host = hardware_host(fi_info=(0, "provider: tcp\n    fabric: TCP-IP\n", ""))
    with pytest.raises(CheckError, match="provider: efa"):
        efa.verify(host, params(probe_hardware=True))


def test_verify_hardware_without_fi_info():
    host = hardware_host(paths={PLUGIN})
    found = efa.verify(host, params(probe_hardware=True))
    assert found["problems"] == [
        "fi_info is not installed, so the EFA provider cannot be checked"]
