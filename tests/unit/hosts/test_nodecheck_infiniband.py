# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The infiniband component of node_check: detection from fake sysfs trees (ConnectX PCI
functions, /sys/class/infiniband devices, ports, RoCE GID tables), the ibstat / ibv_devinfo /
ofed_info parsers on output in the tools' formats, and verification of what the role set up."""

from __future__ import annotations

import posixpath

import pytest
from ansible_collections.gpufleet.cluster.plugins.module_utils.hosts.checks import (
    CheckError,
    _packages,
)
from ansible_collections.gpufleet.cluster.plugins.module_utils.hosts.checks import (
    infiniband as ib,
)
from ansible_collections.gpufleet.cluster.plugins.module_utils.hosts.checks import (
    infiniband_tools as ib_tools,
)
from .nodecheck_fakes import FakeNode as SharedFakeNode

PCI = "/sys/bus/pci/devices"
SYS_IB = "/sys/class/infiniband"


class FakeNode(SharedFakeNode):
    """The shared fake host, where a file's value may also be an exception, raised when the
    file is read (sysfs answers EINVAL for the type of an unused GID entry)."""

    def read_text(self, path):
        value = self.files.get(path)
        if isinstance(value, Exception):
            raise value
        return SharedFakeNode.read_text(self, path)


# --- fake sysfs trees -------------------------------------------------------------------------


def pci_function(node, address, vendor, device, klass, driver=None):
    base = posixpath.join(PCI, address)
    node.files[base + "/vendor"] = "0x%s\n" % vendor
    node.files[base + "/device"] = "0x%s\n" % device
    node.files[base + "/class"] = "0x%s\n" % klass
    if driver:
        node.links[base + "/driver"] = "/sys/bus/pci/drivers/%s" % driver


def rdma_device(node, name, address, ports, vendor="15b3", fw="28.39.1002"):
    """``ports``: dicts with link_layer, state, phys, rate and optional gids {index: (type,
    gid)} (type None makes reading the type fail with EINVAL, as for unused entries)."""
    base = posixpath.join(SYS_IB, name)
    if address:
        node.links[base + "/device"] = posixpath.join(PCI, address)
        node.files[base + "/device/vendor"] = "0x%s\n" % vendor
    node.files[base + "/fw_ver"] = fw + "\n"
    node.files[base + "/node_guid"] = "946d:ae03:00d2:a1b0\n"
    for number, port in enumerate(ports, 1):
        pdir = "%s/ports/%d" % (base, number)
        node.files[pdir + "/link_layer"] = port["link_layer"] + "\n"
        node.files[pdir + "/state"] = port["state"] + "\n"
        node.files[pdir + "/phys_state"] = port.get("phys", "5: LinkUp") + "\n"
        node.files[pdir + "/rate"] = port["rate"] + "\n"
        for index, (kind, gid) in sorted(port.get("gids", {}).items()):
            node.files["%s/gids/%d" % (pdir, index)] = gid + "\n"
            node.files["%s/gid_attrs/types/%d" % (pdir, index)] = (
                OSError(22, "Invalid argument") if kind is None else kind + "\n")


IB_PORT = {"link_layer": "InfiniBand", "state": "4: ACTIVE", "rate": "400 Gb/sec (4X NDR)"}
IB_DOWN = {"link_layer": "InfiniBand", "state": "1: DOWN", "phys": "3: Disabled",
           "rate": "10 Gb/sec (4X SDR)"}
ZERO_GID = "0000:0000:0000:0000:0000:0000:0000:0000"


def roce_port(v4_index=3, state="4: ACTIVE"):
    gids = {
        0: ("IB/RoCE v1", "fe80:0000:0000:0000:0e42:a1ff:feb5:c3d4"),
        1: ("RoCE v2", "fe80:0000:0000:0000:0e42:a1ff:feb5:c3d4"),
        2: ("IB/RoCE v1", "0000:0000:0000:0000:0000:ffff:0a00:0105"),
        3: ("RoCE v2", "0000:0000:0000:0000:0000:ffff:0a00:0105"),
        4: (None, ZERO_GID),
    }
    if v4_index != 3:
        gids[3] = ("RoCE v2", ZERO_GID)
        gids[v4_index] = ("RoCE v2", "0000:0000:0000:0000:0000:ffff:0a00:0106")
    return {"link_layer": "Ethernet", "state": state, "rate": "200 Gb/sec (4X HDR)",
            "gids": gids}


def h100_ib_node():
    """8 ConnectX-7 in InfiniBand mode, one ConnectX-6 Dx for the front-end Ethernet (no RDMA
    device of its own loaded here), 8 H100 GPUs, a virtio disk."""
    node = FakeNode()
    for i in range(8):
        address = "0000:%02x:00.0" % (0x18 + i)
        pci_function(node, address, "15b3", "1021", "020700", "mlx5_core")
        rdma_device(node, "mlx5_%d" % i, address, [IB_PORT])
        pci_function(node, "0000:%02x:00.0" % (0x40 + i), "10de", "2330", "030200", "nvidia")
    pci_function(node, "0000:a0:00.0", "15b3", "101d", "020000", "mlx5_core")
    rdma_device(node, "mlx5_8", "0000:a0:00.0", [{
        "link_layer": "Ethernet", "state": "4: ACTIVE", "rate": "100 Gb/sec (4X EDR)",
        "gids": {0: ("IB/RoCE v1", "fe80:0000:0000:0000:0e42:a1ff:feb5:c3d4")}}])
    pci_function(node, "0000:00:04.0", "1af4", "1001", "010000", "virtio-pci")
    return node


def detect(node, **params):
    params.setdefault("pci_root", PCI)
    return ib.detect(node, params)


# --- detection --------------------------------------------------------------------------------


def test_ib_node_applies_and_suggests_the_infiniband_ports_only():
    found = detect(h100_ib_node())
    assert found.applies is True
    assert "mlx5_0" in found.reason and "InfiniBand" in found.reason
    details = found.details
    assert len(details["connectx_pci"]) == 9
    assert [d["name"] for d in details["devices"]] == ["mlx5_%d" % i for i in range(9)]
    assert details["link_layers"] == ["Ethernet", "InfiniBand"]
    assert details["nvidia_gpus"] == 8
    assert details["roce"] is False
    assert details["nccl_ib_hca"] == "=" + ",".join("mlx5_%d:1" % i for i in range(8))
    assert details["ucx_net_devices"] == ",".join("mlx5_%d:1" % i for i in range(8))
    assert details["roce_gid_index"] is None
    port = details["devices"][0]["ports"][0]
    assert port == {"port": 1, "link_layer": "InfiniBand", "state": "ACTIVE",
                    "physical_state": "LinkUp", "rate": 400}
    assert details["devices"][0]["pci_address"] == "0000:18:00.0"
    assert details["devices"][0]["kind"] == "connectx"


def test_down_ports_are_left_out_when_others_are_active():
    node = FakeNode()
    pci_function(node, "0000:18:00.0", "15b3", "1021", "020700")
    rdma_device(node, "mlx5_0", "0000:18:00.0", [IB_PORT, IB_DOWN])
    rdma_device(node, "mlx5_1", "0000:18:00.0", [IB_DOWN])
    details = detect(node).details
    assert details["nccl_ib_hca"] == "=mlx5_0:1"
    assert details["devices"][0]["ports"][1]["state"] == "DOWN"
    assert details["devices"][0]["ports"][1]["physical_state"] == "Disabled"


def test_all_ports_are_suggested_when_none_is_active_yet():
    node = FakeNode()
    rdma_device(node, "mlx5_0", "0000:18:00.0", [IB_DOWN])
    rdma_device(node, "mlx5_1", "0000:19:00.0", [IB_DOWN])
    assert detect(node).details["nccl_ib_hca"] == "=mlx5_0:1,mlx5_1:1"


def test_roce_node_gets_the_roce_v2_ipv4_gid_index():
    node = FakeNode()
    for i in range(2):
        address = "0000:%02x:00.0" % (0x30 + i)
        pci_function(node, address, "15b3", "101d", "020000", "mlx5_core")
        rdma_device(node, "mlx5_%d" % i, address, [roce_port()])
    found = detect(node)
    assert found.applies is True
    details = found.details
    assert details["roce"] is True
    assert details["link_layers"] == ["Ethernet"]
    assert details["roce_gid_index"] == 3
    assert details["devices"][1]["ports"][0]["roce_v2_gid_index"] == 3
    assert details["nccl_ib_hca"] == "=mlx5_0:1,mlx5_1:1"
    assert details["nvidia_gpus"] == 0


def test_roce_gid_index_is_left_to_nccl_when_the_ports_disagree():
    node = FakeNode()
    rdma_device(node, "mlx5_0", "0000:30:00.0", [roce_port()])
    rdma_device(node, "mlx5_1", "0000:31:00.0", [roce_port(v4_index=5)])
    details = detect(node).details
    assert [d["ports"][0]["roce_v2_gid_index"] for d in details["devices"]] == [3, 5]
    assert details["roce_gid_index"] is None


def test_roce_v2_without_ipv4_address_falls_back_to_the_first_v2_gid():
    node = FakeNode()
    port = roce_port()
    port["gids"] = {0: ("IB/RoCE v1", "fe80:0000:0000:0000:0e42:a1ff:feb5:c3d4"),
                    1: ("RoCE v2", "fe80:0000:0000:0000:0e42:a1ff:feb5:c3d4")}
    rdma_device(node, "mlx5_0", "0000:30:00.0", [port])
    assert detect(node).details["roce_gid_index"] == 1


def test_connectx_without_driver_applies_and_says_so():
    node = FakeNode()
    pci_function(node, "0000:18:00.0", "15b3", "1021", "020700")
    found = detect(node)
    assert found.applies is True
    assert "0000:18:00.0" in found.reason and "not loaded" in found.reason
    assert found.details["devices"] == []
    assert found.details["nccl_ib_hca"] is None


def test_mellanox_function_of_another_class_does_not_count():
    node = FakeNode()
    pci_function(node, "0000:18:00.0", "15b3", "a2dc", "010800")   # a BlueField NVMe function
    assert detect(node).applies is False


def test_efa_and_software_rdma_devices_do_not_apply():
    node = FakeNode()
    pci_function(node, "0000:00:1f.0", "1d0f", "efa1", "020000", "efa")
    rdma_device(node, "rdmap0s31", "0000:00:1f.0", [{
        "link_layer": "Unspecified", "state": "4: ACTIVE", "rate": "100 Gb/sec"}],
        vendor="1d0f")
    rdma_device(node, "rxe0", None, [roce_port()])
    found = detect(node)
    assert found.applies is False
    assert "no ConnectX adapter" in found.reason
    assert "rdmap0s31 is EFA" in found.reason and "rxe0 is a software" in found.reason
    assert found.details["ignored_devices"] == [
        {"name": "rdmap0s31", "kind": "efa"}, {"name": "rxe0", "kind": "software"}]


def test_other_vendors_rdma_adapters_apply():
    node = FakeNode()
    rdma_device(node, "bnxt_re0", "0000:41:00.0", [roce_port()], vendor="14e4")
    found = detect(node)
    assert found.applies is True
    assert found.details["devices"][0]["kind"] == "other"


def test_plain_vm_does_not_apply():
    node = FakeNode()
    pci_function(node, "0000:00:04.0", "1af4", "1001", "010000", "virtio-pci")
    found = detect(node)
    assert found.applies is False
    assert found.reason == ("no ConnectX adapter (PCI vendor 15b3, class 0200/0207) and no "
                            "RDMA adapter in /sys/class/infiniband")
    assert found.details["devices"] == [] and found.details["connectx_pci"] == []


def test_sysfs_root_can_be_moved_by_settings():
    node = FakeNode()
    for path, value in list(h100_ib_node().files.items()):
        if path.startswith(SYS_IB):
            node.files["/fake" + path] = value
    found = detect(node, settings={"sys_class_infiniband": "/fake" + SYS_IB})
    assert found.applies is True and len(found.details["devices"]) == 9


# --- tool output ------------------------------------------------------------------------------

IBSTAT_IB = """\
CA 'mlx5_0'
\tCA type: MT4129
\tNumber of ports: 1
\tFirmware version: 28.39.1002
\tHardware version: 0
\tNode GUID: 0x946dae0300d2a1b0
\tSystem image GUID: 0x946dae0300d2a1b0
\tPort 1:
\t\tState: Active
\t\tPhysical state: LinkUp
\t\tRate: 400
\t\tBase lid: 105
\t\tLMC: 0
\t\tSM lid: 1
\t\tCapability mask: 0xa651e848
\t\tPort GUID: 0x946dae0300d2a1b0
\t\tLink layer: InfiniBand
CA 'mlx5_1'
\tCA type: MT4129
\tNumber of ports: 1
\tFirmware version: 28.39.1002
\tHardware version: 0
\tNode GUID: 0x946dae0300d2a1c8
\tSystem image GUID: 0x946dae0300d2a1c8
\tPort 1:
\t\tState: Down
\t\tPhysical state: Polling
\t\tRate: 10
\t\tBase lid: 65535
\t\tLMC: 0
\t\tSM lid: 0
\t\tCapability mask: 0xa651e848
\t\tPort GUID: 0x946dae0300d2a1c8
\t\tLink layer: InfiniBand
CA 'mlx5_2'
\tCA type: MT4125
\tNumber of ports: 1
\tFirmware version: 22.36.1010
\tHardware version: 0
\tNode GUID: 0x0c42a10300b5c3d4
\tSystem image GUID: 0x0c42a10300b5c3d4
\tPort 1:
\t\tState: Active
\t\tPhysical state: LinkUp
\t\tRate: 100
\t\tBase lid: 0
\t\tLMC: 0
\t\tSM lid: 0
\t\tCapability mask: 0x00010000
\t\tPort GUID: 0x0e42a1fffeb5c3d4
\t\tLink layer: Ethernet
"""

IBSTAT_OLD = """\
CA 'mlx4_0'
\tCA type: MT4099
\tNumber of ports: 2
\tFirmware version: 2.42.5000
\tHardware version: 1
\tNode GUID: 0x0002c90300a1b2c0
\tSystem image GUID: 0x0002c90300a1b2c3
\tPort 1:
\t\tState: Initializing
\t\tPhysical state: LinkUp
\t\tRate: 10 (FDR10)
\t\tBase lid: 0
\t\tLMC: 0
\t\tSM lid: 0
\t\tCapability mask: 0x02514868
\t\tPort GUID: 0x0002c90300a1b2c1
\t\tLink layer: InfiniBand
\tPort 2:
\t\tState: Armed
\t\tPhysical state: LinkUp
\t\tRate: 2.5
\t\tBase lid: 7
\t\tLMC: 0
\t\tSM lid: 1
\t\tCapability mask: 0x02514868
\t\tPort GUID: 0x0002c90300a1b2c2
\t\tLink layer: InfiniBand
"""

IBV_DEVINFO = """\
hca_id:\tmlx5_0
\ttransport:\t\t\tInfiniBand (0)
\tfw_ver:\t\t\t\t28.39.1002
\tnode_guid:\t\t\t946d:ae03:00d2:a1b0
\tsys_image_guid:\t\t\t946d:ae03:00d2:a1b0
\tvendor_id:\t\t\t0x02c9
\tvendor_part_id:\t\t\t4129
\thw_ver:\t\t\t\t0x0
\tboard_id:\t\t\tMT_0000000838
\tphys_port_cnt:\t\t\t1
\t\tport:\t1
\t\t\tstate:\t\t\tPORT_ACTIVE (4)
\t\t\tmax_mtu:\t\t4096 (5)
\t\t\tactive_mtu:\t\t4096 (5)
\t\t\tsm_lid:\t\t\t1
\t\t\tport_lid:\t\t105
\t\t\tport_lmc:\t\t0x00
\t\t\tlink_layer:\t\tInfiniBand

hca_id:\tmlx5_1
\ttransport:\t\t\tInfiniBand (0)
\tfw_ver:\t\t\t\t28.39.1002
\tnode_guid:\t\t\t946d:ae03:00d2:a1c8
\tsys_image_guid:\t\t\t946d:ae03:00d2:a1c8
\tvendor_id:\t\t\t0x02c9
\tvendor_part_id:\t\t\t4129
\thw_ver:\t\t\t\t0x0
\tboard_id:\t\t\tMT_0000000838
\tphys_port_cnt:\t\t\t1
\t\tport:\t1
\t\t\tstate:\t\t\tPORT_DOWN (1)
\t\t\tmax_mtu:\t\t4096 (5)
\t\t\tactive_mtu:\t\t4096 (5)
\t\t\tsm_lid:\t\t\t0
\t\t\tport_lid:\t\t65535
\t\t\tport_lmc:\t\t0x00
\t\t\tlink_layer:\t\tInfiniBand

hca_id:\tmlx5_2
\ttransport:\t\t\tInfiniBand (0)
\tfw_ver:\t\t\t\t22.36.1010
\tnode_guid:\t\t\t0c42:a103:00b5:c3d4
\tsys_image_guid:\t\t\t0c42:a103:00b5:c3d4
\tvendor_id:\t\t\t0x02c9
\tvendor_part_id:\t\t\t4125
\thw_ver:\t\t\t\t0x0
\tboard_id:\t\t\tMT_0000000359
\tphys_port_cnt:\t\t\t1
\t\tport:\t1
\t\t\tstate:\t\t\tPORT_ACTIVE (4)
\t\t\tmax_mtu:\t\t4096 (5)
\t\t\tactive_mtu:\t\t1024 (3)
\t\t\tsm_lid:\t\t\t0
\t\t\tport_lid:\t\t0
\t\t\tport_lmc:\t\t0x00
\t\t\tlink_layer:\t\tEthernet

"""

IBV_DEVINFO_VERBOSE = """\
hca_id:\tmlx5_2
\ttransport:\t\t\tInfiniBand (0)
\tfw_ver:\t\t\t\t22.36.1010
\tnode_guid:\t\t\t0c42:a103:00b5:c3d4
\tsys_image_guid:\t\t\t0c42:a103:00b5:c3d4
\tvendor_id:\t\t\t0x02c9
\tvendor_part_id:\t\t\t4125
\thw_ver:\t\t\t\t0x0
\tboard_id:\t\t\tMT_0000000359
\tphys_port_cnt:\t\t\t1
\tmax_mr_size:\t\t\t0xffffffffffffffff
\tdevice_cap_flags:\t\t0xed721c36
\t\t\t\t\tBAD_PKEY_CNTR
\t\t\t\t\tBAD_QKEY_CNTR
\tgeneral_odp_caps:
\t\t\t\t\tODP_SUPPORT
\tcompletion timestamp_mask:\t\t\t0x7fffffffffffffff
\ttag matching not supported
\t\tport:\t1
\t\t\tstate:\t\t\tPORT_ACTIVE (4)
\t\t\tmax_mtu:\t\t4096 (5)
\t\t\tactive_mtu:\t\t1024 (3)
\t\t\tsm_lid:\t\t\t0
\t\t\tport_lid:\t\t0
\t\t\tport_lmc:\t\t0x00
\t\t\tlink_layer:\t\tEthernet
\t\t\tmax_msg_sz:\t\t0x40000000
\t\t\tactive_width:\t\t4X (2)
\t\t\tactive_speed:\t\t50.0 Gbps (64)
\t\t\tphys_state:\t\tLINK_UP (5)
\t\t\tGID[  0]:\t\tfe80:0000:0000:0000:0e42:a1ff:feb5:c3d4, RoCE v1
\t\t\tGID[  3]:\t\t::ffff:10.0.1.5, RoCE v2

"""


def test_parse_ibstat():
    cas = ib_tools.parse_ibstat(IBSTAT_IB)
    assert [ca["name"] for ca in cas] == ["mlx5_0", "mlx5_1", "mlx5_2"]
    first = cas[0]
    assert first["node_type"] == "CA" and first["ca_type"] == "MT4129"
    assert first["ports_count"] == 1 and first["firmware"] == "28.39.1002"
    assert first["node_guid"] == "0x946dae0300d2a1b0"
    assert first["ports"] == [{
        "port": 1, "state": "ACTIVE", "physical_state": "LinkUp", "rate": 400,
        "base_lid": 105, "lmc": 0, "sm_lid": 1, "capability_mask": "0xa651e848",
        "port_guid": "0x946dae0300d2a1b0", "link_layer": "InfiniBand"}]
    assert cas[1]["ports"][0]["state"] == "DOWN"
    assert cas[1]["ports"][0]["physical_state"] == "Polling"
    assert cas[2]["ports"][0]["link_layer"] == "Ethernet"
    assert cas[2]["ports"][0]["rate"] == 100


def test_parse_ibstat_two_ports_fdr10_and_sdr():
    ports = ib_tools.parse_ibstat(IBSTAT_OLD)[0]["ports"]
    assert [p["port"] for p in ports] == [1, 2]
    assert [p["state"] for p in ports] == ["INIT", "ARMED"]
    assert [p["rate"] for p in ports] == [10, 2.5]


def test_parse_ibstat_empty_and_garbage():
    assert ib_tools.parse_ibstat("") == []
    with pytest.raises(CheckError, match="before any CA header"):
        ib_tools.parse_ibstat("\tState: Active\n")
    with pytest.raises(CheckError, match="not 'Key: value'"):
        ib_tools.parse_ibstat("CA 'mlx5_0'\n\tsomething odd\n")
    with pytest.raises(CheckError, match="base lid is not a number"):
        ib_tools.parse_ibstat("CA 'mlx5_0'\n\tPort 1:\n\t\tBase lid: many\n")


def test_parse_ibv_devinfo():
    devices = ib_tools.parse_ibv_devinfo(IBV_DEVINFO)
    assert [d["name"] for d in devices] == ["mlx5_0", "mlx5_1", "mlx5_2"]
    first = devices[0]
    assert first["transport"] == "InfiniBand"
    assert first["fw_ver"] == "28.39.1002" and first["board_id"] == "MT_0000000838"
    assert first["vendor_id"] == "0x02c9" and first["vendor_part_id"] == 4129
    assert first["phys_port_cnt"] == 1
    assert first["ports"] == [{
        "port": 1, "state": "ACTIVE", "max_mtu": 4096, "active_mtu": 4096, "sm_lid": 1,
        "port_lid": 105, "port_lmc": "0x00", "link_layer": "InfiniBand"}]
    assert devices[1]["ports"][0]["state"] == "DOWN"
    assert devices[2]["ports"][0]["active_mtu"] == 1024
    assert devices[2]["ports"][0]["link_layer"] == "Ethernet"


def test_parse_ibv_devinfo_verbose():
    device = ib_tools.parse_ibv_devinfo(IBV_DEVINFO_VERBOSE)[0]
    port = device["ports"][0]
    assert port["state"] == "ACTIVE" and port["phys_state"] == "LINK_UP"
    assert port["gids"] == {0: "fe80:0000:0000:0000:0e42:a1ff:feb5:c3d4, RoCE v1",
                            3: "::ffff:10.0.1.5, RoCE v2"}
    assert device["device_cap_flags"] == "0xed721c36"


def test_parse_ibv_devinfo_garbage():
    assert ib_tools.parse_ibv_devinfo("") == []
    with pytest.raises(CheckError, match="before any hca_id"):
        ib_tools.parse_ibv_devinfo("\tstate: PORT_ACTIVE (4)\n")
    with pytest.raises(CheckError, match="not 'key: value'"):
        ib_tools.parse_ibv_devinfo("Segmentation fault\n")
    with pytest.raises(CheckError, match="port is not a number"):
        ib_tools.parse_ibv_devinfo("hca_id:\tmlx5_0\n\t\tport:\tone\n")


def test_parse_small_files():
    assert ib_tools.parse_ofed_info("OFED-internal-25.07-0.9.7:\n") == "OFED-internal-25.07-0.9.7"
    ofed = ib_tools.parse_ofed_info("MLNX_OFED_LINUX-24.10-1.1.4.0:\n")
    assert ofed == "MLNX_OFED_LINUX-24.10-1.1.4.0"
    assert ib_tools.parse_ofed_info("\n") is None
    assert ib_tools.parse_limits_conf(
        "# comment\n*  soft memlock unlimited\n* hard memlock unlimited\n"
        "root - memlock unlimited\n@rdma hard nofile 4096\n") == {
        "*": {"soft": "unlimited", "hard": "unlimited"},
        "root": {"soft": "unlimited", "hard": "unlimited"}}
    assert ib_tools.parse_profile(
        "# managed\nexport NCCL_IB_HCA='=mlx5_0:1,mlx5_1:1'\nexport NCCL_DEBUG=WARN\n"
        "UNEXPORTED=1\nexport A='x y' B=2\n") == {
        "NCCL_IB_HCA": "=mlx5_0:1,mlx5_1:1", "NCCL_DEBUG": "WARN", "A": "x y", "B": "2"}
    limits = ("Limit                     Soft Limit           Hard Limit           Units\n"
              "Max locked memory         8388608              8388608              bytes\n")
    assert ib_tools.parse_proc_limits(limits) == {"soft": 8388608, "hard": 8388608}
    assert ib_tools.parse_proc_limits(
        "Max locked memory         unlimited            unlimited            bytes\n") == {
        "soft": "unlimited", "hard": "unlimited"}
    assert ib_tools.parse_proc_limits("") is None
    assert ib_tools.parse_proc_modules(
        "mlx5_ib 487424 0 - Live 0x0000000000000000\nib_uverbs 180224 2 rdma_ucm,mlx5_ib, Live 0"
        "\n") == {"mlx5_ib", "ib_uverbs"}


def test_parse_profile_bad_quoting():
    with pytest.raises(CheckError, match="cannot read the profile line"):
        ib_tools.parse_profile("export A='unterminated\n")


# --- verification -----------------------------------------------------------------------------

MODULES = ["ib_uverbs", "ib_umad", "mlx5_ib", "rdma_ucm"]
PACKAGES = ("rdma-core", "ibverbs-utils", "infiniband-diags")
DPKG_FORMAT = _packages.DPKG_FORMAT
LIMITS = ("* soft memlock unlimited\n* hard memlock unlimited\n"
          "root soft memlock unlimited\nroot hard memlock unlimited\n")
PROFILE = ("# Managed by gpufleet.cluster.infiniband\n"
           "export NCCL_IB_HCA='=mlx5_0:1'\nexport NCCL_DEBUG=WARN\n")
SETTINGS = {
    "stack": "inbox",
    "packages": list(PACKAGES),
    "modules": MODULES,
    "modules_load_file": "/etc/modules-load.d/gpufleet-rdma.conf",
    "limits_file": "/etc/security/limits.d/gpufleet-rdma.conf",
    "profile_file": "/etc/profile.d/gpufleet-infiniband.sh",
    "env": {"NCCL_IB_HCA": "=mlx5_0:1", "NCCL_DEBUG": "WARN", "NCCL_IB_GID_INDEX": None},
}
DPKG_OUT = ("ibverbs-utils\t44.0-2\tinstall ok installed\n"
            "infiniband-diags\t44.0-2\tinstall ok installed\n"
            "rdma-core\t44.0-2\tinstall ok installed\n")


def configured_node(dpkg_out=DPKG_OUT, packages=PACKAGES, **files):
    node = FakeNode(
        files={
            "/etc/modules-load.d/gpufleet-rdma.conf": "# gpufleet\n" + "\n".join(MODULES) + "\n",
            "/etc/security/limits.d/gpufleet-rdma.conf": LIMITS,
            "/etc/profile.d/gpufleet-infiniband.sh": PROFILE,
        },
        bins={"dpkg-query"},
    )
    node.commands[("dpkg-query", "-W", "-f", DPKG_FORMAT) + tuple(packages)] = (
        0, dpkg_out, "")
    for path, text in files.items():
        if text is None:
            node.files.pop(path, None)
        else:
            node.files[path] = text
    return node


def verify(node, settings=None, probe=False, expect=None):
    return ib.verify(node, {"settings": dict(SETTINGS, **(settings or {})),
                            "probe_hardware": probe, "expect": expect or {}})


def test_verify_software_ok():
    node = configured_node()
    check = verify(node)
    assert check["ok"] is True, check["problems"]
    assert check["stack"] == "inbox" and check["probe_hardware"] is False
    assert check["packages"]["rdma-core"] == {"version": "44.0-2", "held": False}
    assert check["modules_configured"] == MODULES
    assert check["memlock_configured"]["*"] == {"soft": "unlimited", "hard": "unlimited"}
    assert check["profile_env"] == {"NCCL_IB_HCA": "=mlx5_0:1", "NCCL_DEBUG": "WARN"}
    assert check["ofed_version"] is None
    assert "devices" not in check
    assert not any(call[0].endswith("ibstat") for call in node.calls)


def test_verify_software_problems():
    dpkg_out = ("ibverbs-utils\t44.0-2\tinstall ok installed\n"
                "infiniband-diags\t44.0-2\tdeinstall ok config-files\n")
    node = configured_node(
        dpkg_out=dpkg_out,
        **{"/etc/modules-load.d/gpufleet-rdma.conf": "ib_uverbs\n",
           "/etc/security/limits.d/gpufleet-rdma.conf": "* - memlock unlimited\n",
           "/etc/profile.d/gpufleet-infiniband.sh":
               "export NCCL_IB_HCA=mlx5\nexport NCCL_IB_GID_INDEX=3\n"})
    check = verify(node)
    assert check["ok"] is False
    problems = "\n".join(check["problems"])
    assert "package(s) not installed: rdma-core, infiniband-diags" in problems
    assert "does not list ib_umad, mlx5_ib, rdma_ucm" in problems
    assert "memlock unlimited (soft and hard) for root" in problems
    assert "for *" not in problems
    assert "exports NCCL_IB_HCA='mlx5', expected '=mlx5_0:1'" in problems
    assert "exports NCCL_DEBUG=None, expected 'WARN'" in problems
    assert "exports NCCL_IB_GID_INDEX, which should be unset" in problems


def test_verify_missing_files():
    node = configured_node(**{"/etc/profile.d/gpufleet-infiniband.sh": None})
    check = verify(node)
    assert check["problems"] == [
        "the environment profile /etc/profile.d/gpufleet-infiniband.sh cannot be read "
        "(no such file: /etc/profile.d/gpufleet-infiniband.sh)"]


def test_verify_doca_pin_and_hold():
    packages = ("doca-ofed",)
    settings = {"stack": "doca", "packages": list(packages),
                "package_versions": {"doca-ofed": "3.1.0-091000"}}
    held = configured_node(dpkg_out="doca-ofed\t3.1.0-091000\thold ok installed\n", packages=packages)
    held.bins.add("ofed_info")
    held.commands[("/usr/bin/ofed_info", "-s")] = (0, "OFED-internal-25.07-0.9.7:\n", "")
    check = verify(held, settings)
    assert check["ok"] is True, check["problems"]
    assert check["packages"]["doca-ofed"] == {"version": "3.1.0-091000", "held": True}
    assert check["ofed_version"] == "OFED-internal-25.07-0.9.7"

    loose = configured_node(dpkg_out="doca-ofed\t3.1.0-091500\tinstall ok installed\n",
                            packages=packages)
    problems = verify(loose, settings)["problems"]
    assert "doca-ofed 3.1.0-091500 is installed, not the pinned 3.1.0-091000" in problems
    assert "doca-ofed is pinned to 3.1.0-091000 but not held" in problems


def test_verify_rpm_hosts():
    node = configured_node()
    node.bins = {"rpm"}
    names = ["rdma-core", "libibverbs-utils"]
    node.commands[("rpm", "-q", "--qf", _packages.RPM_FORMAT, "rdma-core")] = (
        0, "rdma-core\t(none):51.0-1.el9\n", "")
    node.commands[("rpm", "-q", "--qf", _packages.RPM_FORMAT, "libibverbs-utils")] = (
        1, "package libibverbs-utils is not installed\n", "")
    check = verify(node, {"packages": names, "package_versions": {"rdma-core": "51.0-1"}})
    assert check["packages"] == {"rdma-core": {"version": "51.0-1.el9", "held": False}}
    # The version lock of dnf is not a dpkg hold: no "not held" problem on rpm hosts.
    assert check["problems"] == ["package(s) not installed: libibverbs-utils"]


def test_verify_without_package_tools_is_an_error():
    node = configured_node()
    node.bins = set()
    with pytest.raises(CheckError, match="neither dpkg-query nor rpm"):
        verify(node)


def test_verify_rejects_bad_settings_and_expectations():
    with pytest.raises(CheckError, match="unknown expectation"):
        verify(configured_node(), expect={"gpu_count": 8})
    with pytest.raises(CheckError, match="inbox or doca"):
        verify(configured_node(), {"stack": "mofed"})


PROC_MODULES = "".join("%s 100 0 - Live 0x0\n" % m for m in MODULES + ["mlx5_core", "ib_core"])
UNLIMITED = "Max locked memory         unlimited            unlimited            bytes\n"


def hardware_node(ibstat=(0, IBSTAT_IB, ""), devinfo=(0, IBV_DEVINFO, ""),
                  modules=PROC_MODULES, limits=UNLIMITED):
    node = configured_node(**{"/proc/modules": modules, "/proc/self/limits": limits})
    node.bins.update({"ibstat", "ibv_devinfo"})
    node.commands[("/usr/bin/ibstat",)] = ibstat
    node.commands[("/usr/bin/ibv_devinfo",)] = devinfo
    return node


def test_verify_hardware_merges_both_tools():
    check = verify(hardware_node(), probe=True)
    assert check["ok"] is True, check["problems"]
    assert check["tools"] == {"ibv_devinfo": "ok", "ibstat": "ok"}
    assert check["modules_loaded"] == {m: True for m in MODULES}
    assert check["memlock_limit"] == {"soft": "unlimited", "hard": "unlimited"}
    assert [d["name"] for d in check["devices"]] == ["mlx5_0", "mlx5_1", "mlx5_2"]
    first = check["devices"][0]
    assert first["ca_type"] == "MT4129" and first["firmware"] == "28.39.1002"
    assert first["board_id"] == "MT_0000000838" and first["transport"] == "InfiniBand"
    assert first["ports"] == [{
        "port": 1, "state": "ACTIVE", "physical_state": "LinkUp", "rate": 400,
        "link_layer": "InfiniBand", "active_mtu": 4096, "lid": 105, "sm_lid": 1}]
    assert check["active_ports"] == 2
    assert check["inactive_ports"] == ["mlx5_1:1"]
    assert check["link_layers"] == ["Ethernet", "InfiniBand"]


def test_verify_hardware_expectations():
    check = verify(hardware_node(), probe=True,
                   expect={"devices": 4, "active_ports": 3, "link_layer": "InfiniBand",
                           "rate": 200})
    assert check["ok"] is False
    assert check["problems"] == [
        "3 RDMA device(s) found, expected at least 4",
        "2 port(s) ACTIVE, expected at least 3",
        "active ports have link layer Ethernet, expected InfiniBand",
        "1 active port(s) run below 200 Gb/s (100)",
    ]
    met = verify(hardware_node(), probe=True,
                 expect={"devices": 3, "active_ports": 2, "rate": 100})
    assert met["ok"] is True, met["problems"]


def test_verify_hardware_modules_and_memlock():
    limited = "Max locked memory         65536                65536                bytes\n"
    check = verify(hardware_node(modules="mlx5_ib 1 0 - Live 0x0\n", limits=limited),
                   probe=True)
    assert check["modules_loaded"] == {"ib_uverbs": False, "ib_umad": False, "mlx5_ib": True,
                                       "rdma_ucm": False}
    assert "kernel module(s) not loaded: ib_uverbs, ib_umad, rdma_ucm" in check["problems"]
    assert ("the locked-memory limit is 65536 bytes, not unlimited (RDMA pins memory)"
            in check["problems"])


def test_verify_hardware_in_a_container_without_verbs():
    """What the Molecule containers show: ibv_devinfo cannot list devices (no uverbs in the
    kernel), ibstat lists none, /proc/modules is absent."""
    node = hardware_node(
        ibstat=(0, "", ""),
        devinfo=(255, "", "Failed to get IB devices list: Function not implemented\n"),
        modules=None)
    check = verify(node, probe=True)
    assert check["ok"] is False
    assert check["devices"] == [] and check["active_ports"] == 0
    assert check["tools"] == {
        "ibv_devinfo": "no verbs interface: Failed to get IB devices list: Function not "
                       "implemented",
        "ibstat": "ok"}
    assert "modules_loaded" not in check
    assert check["problems"][0].startswith("cannot read /proc/modules")
    assert check["problems"][-1] == (
        "no RDMA device found (ibv_devinfo: no verbs interface: Failed to get IB devices "
        "list: Function not implemented)")


def test_verify_hardware_no_devices_and_failing_tools():
    node = hardware_node(ibstat=(255, "", "ibpanic: [123] main: can't init UMAD library\n"),
                         devinfo=(255, "", "No IB devices found\n"))
    check = verify(node, probe=True)
    assert check["tools"]["ibv_devinfo"] == "no devices"
    assert check["tools"]["ibstat"] == (
        "failed (exit status 255): ibpanic: [123] main: can't init UMAD library")
    assert "ibstat failed with exit status 255: ibpanic: [123] main: can't init UMAD library" \
        in check["problems"]
    assert "no RDMA device found (ibv_devinfo: no devices)" in check["problems"]

    crashed = hardware_node(devinfo=(139, "", "Segmentation fault\n"))
    problems = verify(crashed, probe=True)["problems"]
    assert "ibv_devinfo failed with exit status 139: Segmentation fault" in problems


def test_verify_hardware_without_tools():
    node = hardware_node()
    node.bins -= {"ibstat", "ibv_devinfo"}
    check = verify(node, probe=True)
    assert "ibstat is not installed (package infiniband-diags)" in check["problems"]
    assert check["tools"] == {"ibv_devinfo": "not installed", "ibstat": "not installed"}


def test_verify_hardware_unreadable_tool_output_is_a_check_error():
    node = hardware_node(ibstat=(0, "garbage\n", ""))
    with pytest.raises(CheckError, match="ibstat line 1"):
        verify(node, probe=True)


def test_memlock_dropins():
    node = configured_node(**{
        "/etc/systemd/system/docker.service.d/gpufleet-rdma.conf":
            "[Service]\nLimitMEMLOCK=infinity\n",
        "/etc/systemd/system/containerd.service.d/gpufleet-rdma.conf": "[Service]\n"})
    paths = ["/etc/systemd/system/docker.service.d/gpufleet-rdma.conf",
             "/etc/systemd/system/containerd.service.d/gpufleet-rdma.conf"]
    check = verify(node, {"memlock_dropins": paths})
    assert check["memlock_dropins"] == {paths[0]: True, paths[1]: False}
    assert check["problems"] == ["%s does not set LimitMEMLOCK=infinity" % paths[1]]
