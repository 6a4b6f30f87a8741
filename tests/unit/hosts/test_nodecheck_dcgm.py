# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The dcgm component of node_check on fake hosts: detection from PCI devices and the loaded
driver, verification of packages, pin, hold, service and health-watch drop-in, and the health
read from ``dcgmi health -c -j`` (JSON) or ``dcgmi health -c`` (the table)."""

from __future__ import annotations

import pytest
from ansible_collections.gpufleet.cluster.plugins.module_utils.hosts.checks import (
    COMPONENTS,
    CheckError,
    dcgm,
)
from ansible_collections.gpufleet.cluster.plugins.module_utils.hosts.checks._system import (
    NodeSystem,
)

ROOT = "/sys/bus/pci/devices"
DCGMI = "/usr/bin/dcgmi"
SMI = "/usr/bin/nvidia-smi"
PACKAGES = ["datacenter-gpu-manager-4-core", "datacenter-gpu-manager-4-cuda12"]
PIN = "/etc/apt/preferences.d/gpufleet-dcgm"
DROPIN = "/etc/systemd/system/nvidia-dcgm.service.d/gpufleet-health-watches.conf"
DPKG_ARGV = ("dpkg-query", "-W", "-f", "${Package}\\t${Version}\\t${Status}\\n")

# (address, vendor, device, class)
H100X2 = [
    ("0000:18:00.0", "0x10de", "0x2330", "0x030200"),  # H100 SXM5, 3D controller
    ("0000:2a:00.0", "0x10de", "0x2330", "0x030200"),
]
NOT_GPUS = [
    ("0000:00:00.0", "0x8086", "0x09a2", "0x060000"),  # Intel host bridge
    ("0000:03:00.0", "0x102b", "0x0522", "0x030000"),  # Matrox VGA (BMC): display, not NVIDIA
    ("0000:05:00.0", "0x10de", "0x22a3", "0x068000"),  # NVSwitch: NVIDIA, not display
    ("0000:41:00.0", "0x15b3", "0x1021", "0x020700"),  # ConnectX
]

NVRM_PROPRIETARY = (
    "NVRM version: NVIDIA UNIX x86_64 Kernel Module  535.129.03  Thu Oct 19 18:56:32 UTC 2023\n"
    "GCC version:  gcc version 12.2.0 (Debian 12.2.0-14)\n"
)
NVRM_OPEN = (
    "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  580.65.06  Release Build  "
    "(dvs-builder@U16-I3-B14-1-1)  Sun Jul 27 06:54:38 UTC 2025\n"
    "GCC version:  gcc version 13.3.0 (Ubuntu 13.3.0-6ubuntu2~24.04)\n"
)
SMI_HEADER = """\
Tue Mar 12 10:04:11 2024
+---------------------------------------------------------------------------------------+
| NVIDIA-SMI 550.54.15              Driver Version: 550.54.15    CUDA Version: 12.4     |
|-----------------------------------------+----------------------+----------------------+
| GPU  Name                 Persistence-M | Bus-Id        Disp.A | Volatile Uncorr. ECC |
"""

# `dcgmi health -c -j` as dcgmi prints it (jsoncpp's styled output of the report tree; keys in
# name order; long messages cut into parts of at most 54 characters).
HEALTHY_JSON = """\
{
   "body" : {
      "Overall Health" : {
         "value" : "Healthy"
      }
   },
   "header" : [ "Health Monitor Report" ]
}
"""
WARNING_JSON = """\
{
   "body" : {
      "GPU" : {
         "children" : {
            "0" : {
               "children" : {
                  "Errors" : {
                     "children" : {
                        "PCIe system" : {
                           "overflow" : [
                              "Detected more than 8 PCIe replays per minute for GPU 0",
                              ": 13"
                           ],
                           "value" : "Warning"
                        }
                     }
                  }
               },
               "value" : "Warning"
            }
         }
      },
      "Overall Health" : {
         "value" : "Warning"
      }
   },
   "header" : [ "Health Monitor Report" ]
}
"""
FAILURE_JSON = """\
{
   "body" : {
      "GPU" : {
         "children" : {
            "1" : {
               "children" : {
                  "Errors" : {
                     "children" : {
                        "InfoROM system" : {
                           "overflow" : [
                              "A corrupt InfoROM has been detected in GPU 1."
                           ],
                           "value" : "Warning"
                        },
                        "Memory system" : {
                           "overflow" : [
                              "Detected 2 volatile double-bit ECC error(s) in GPU 1."
                           ],
                           "value" : "Failure"
                        }
                     }
                  }
               },
               "value" : "Failure"
            },
            "10" : {
               "children" : {
                  "Errors" : {
                     "children" : {
                        "Thermal system" : {
                           "overflow" : [
                              "Clocks event: thermal violation detected for GPU 10 for",
                              "1200 ms. Check the cooling of the system."
                           ],
                           "value" : "Warning"
                        }
                     }
                  }
               },
               "value" : "Warning"
            },
            "2" : {
               "children" : {
                  "Errors" : {
                     "children" : {
                        "PCIe system" : {
                           "overflow" : [
                              "Detected more than 8 PCIe replays per minute for GPU 2",
                              ": 9"
                           ],
                           "value" : "Warning"
                        }
                     }
                  }
               },
               "value" : "Warning"
            }
         }
      },
      "NvSwitch" : {
         "children" : {
            "3" : {
               "children" : {
                  "Errors" : {
                     "children" : {
                        "NvSwitch F" : {
                           "overflow" : [
                              "Detected fatal errors on NvSwitch 3 link 17"
                           ],
                           "value" : "Failure"
                        }
                     }
                  }
               },
               "value" : "Failure"
            }
         }
      },
      "Overall Health" : {
         "value" : "Failure"
      }
   },
   "header" : [ "Health Monitor Report" ]
}
"""

# `dcgmi health -c`: the same reports as dcgmi's tree table (columns of 28 and 60 characters).
HEALTHY_TABLE = """\
+---------------------------+----------------------------------------------------------+
| Health Monitor Report                                                                |
+===========================+==========================================================+
| Overall Health            | Healthy                                                  |
+---------------------------+----------------------------------------------------------+
"""
WARNING_TABLE = """\
+---------------------------+----------------------------------------------------------+
| Health Monitor Report                                                                |
+===========================+==========================================================+
| Overall Health            | Warning                                                  |
| GPU                       |                                                          |
| -> 0                      | Warning                                                  |
|    -> Errors              |                                                          |
|       -> PCIe system      | Warning                                                  |
|                           | Detected more than 8 PCIe replays per minute for GPU 0   |
|                           | : 13                                                     |
+---------------------------+----------------------------------------------------------+
"""
FAILURE_TABLE = """\
+---------------------------+----------------------------------------------------------+
| Health Monitor Report                                                                |
+===========================+==========================================================+
| Overall Health            | Failure                                                  |
| GPU                       |                                                          |
| -> 1                      | Failure                                                  |
|    -> Errors              |                                                          |
|       -> Memory system    | Failure                                                  |
|                           | Detected 2 volatile double-bit ECC error(s) in GPU 1.    |
|       -> InfoROM system   | Warning                                                  |
|                           | A corrupt InfoROM has been detected in GPU 1.            |
| -> 2                      | Warning                                                  |
|    -> Errors              |                                                          |
|       -> PCIe system      | Warning                                                  |
|                           | Detected more than 8 PCIe replays per minute for GPU 2   |
|                           | : 9                                                      |
| -> 10                     | Warning                                                  |
|    -> Errors              |                                                          |
|       -> Thermal system   | Warning                                                  |
|                           | Clocks event: thermal violation detected for GPU 10 for  |
|                           | 1200 ms. Check the cooling of the system.                |
| NvSwitch                  |                                                          |
| -> 3                      | Failure                                                  |
|    -> Errors              |                                                          |
|       -> NvSwitch F       | Failure                                                  |
|                           | Detected fatal errors on NvSwitch 3 link 17              |
+---------------------------+----------------------------------------------------------+
"""
# An older dcgmi with narrower columns (34 + 44) prints the same tree.
OLD_WARNING_TABLE = """\
+---------------------------------+------------------------------------------+
| Health Monitor Report                                                      |
+=================================+==========================================+
| Overall Health                  | Warning                                  |
| GPU                             |                                          |
| -> 0                            | Warning                                  |
|    -> Errors                    |                                          |
|       -> Memory system          | Warning                                  |
|                                 | Detected 1 volatile double-bit ECC       |
|                                 | error(s) in GPU 0.                       |
+---------------------------------+------------------------------------------+
"""
NOT_WATCHED = "Error: Health watches not enabled. Please enable watches. \n"
NO_ENGINE = (
    "Error: unable to establish a connection to the specified host: localhost\n"
    "Error: Unable to connect to host engine. Host engine connection invalid/disconnected.\n"
)

HEALTH_ARGV = (DCGMI, "health", "-c", "-j")
TABLE_ARGV = (DCGMI, "health", "-c")


class FakeHost(NodeSystem):
    """A host made of dictionaries: files, commands and the programs on PATH."""

    def __init__(self, pci=(), files=None, commands=None, bins=None):
        self.files = {}
        for address, vendor, device, klass in pci:
            base = "%s/%s" % (ROOT, address)
            self.files[base + "/vendor"] = vendor + "\n"
            self.files[base + "/device"] = device + "\n"
            self.files[base + "/class"] = klass + "\n"
        self.files.update(files or {})
        self.commands = dict(commands or {})
        self.bins = {"dpkg-query": "/usr/bin/dpkg-query", "dcgmi": DCGMI}
        self.bins.update(bins or {})
        self.ran = []
        super().__init__(self.fake_run, self.fake_which, self.fake_fetch)

    def fake_run(self, argv):
        self.ran.append(tuple(argv))
        return self.commands.get(tuple(argv), (127, "", "%s: command not found" % argv[0]))

    def fake_which(self, name):
        return self.bins.get(name)

    @staticmethod
    def fake_fetch(url, method="GET", headers=None, timeout=2):
        return None, "no network in tests (%s %s %s %s)" % (method, url, headers, timeout)

    def exists(self, path):
        return path in self.files

    def read_text(self, path):
        if path not in self.files:
            raise OSError(2, "No such file or directory", path)
        return self.files[path]

    def listdir(self, path):
        prefix = path.rstrip("/") + "/"
        return sorted(set(p[len(prefix):].split("/")[0] for p in self.files
                          if p.startswith(prefix)))

    def resolve(self, link):
        return None


def params(**kwargs):
    base = {"pci_root": ROOT, "probe_hardware": False, "expect": {}, "settings": {}}
    base.update(kwargs)
    return base


def dpkg(*rows):
    out = "".join("%s\t%s\t%s\n" % row for row in rows)
    return {DPKG_ARGV + tuple(PACKAGES): (0 if len(rows) == len(PACKAGES) else 1, out, "")}


def unit(active="active", enabled="enabled"):
    return {("systemctl", "is-active", "nvidia-dcgm"): (0 if active == "active" else 3,
                                                        active + "\n", ""),
            ("systemctl", "is-enabled", "nvidia-dcgm"): (0 if enabled == "enabled" else 1,
                                                         enabled + "\n", "")}


PIN_TEXT = (
    "# Managed by gpufleet.cluster.dcgm: keep DCGM at 4.2.3.\n"
    "Package: datacenter-gpu-manager-4-core datacenter-gpu-manager-4-cuda12\n"
    "Pin: version 1:4.2.3-*\n"
    "Pin-Priority: 1001\n"
)
DROPIN_TEXT = (
    "[Service]\n"
    "ExecStartPost=/bin/sh -c 'i=0; while [ $$i -lt 30 ]; do /usr/bin/dcgmi health -s a "
    ">/dev/null 2>&1 && exit 0; i=$$((i+1)); sleep 1; done; exit 0'\n"
)
SETTINGS = {"packages": PACKAGES, "service": "nvidia-dcgm", "pin_file": PIN, "dropin": DROPIN,
            "health_watches": "a"}
EXPECT = {"version": "4.2.3", "held": True, "service_active": True}


def good_host(health=None, **overrides):
    commands = {}
    commands.update(overrides.pop("packages", dpkg(
        (PACKAGES[0], "1:4.2.3-1", "hold ok installed"),
        (PACKAGES[1], "1:4.2.3-1", "hold ok installed"))))
    commands.update(overrides.pop("unit", unit()))
    if health is not None:
        commands[HEALTH_ARGV] = (0, health, "")
    commands.update(overrides.pop("commands", {}))
    files = {PIN: PIN_TEXT, DROPIN: DROPIN_TEXT}
    files.update(overrides.pop("files", {}))
    for path in overrides.pop("missing", ()):
        files.pop(path)
    return FakeHost(files=files, commands=commands, **overrides)


# --- detection --------------------------------------------------------------------------------


def test_the_component_is_known_to_node_check():
    assert "dcgm" in COMPONENTS


def test_a_host_without_pci_devices_does_not_apply():
    found = dcgm.detect(FakeHost(), params())
    assert not found.applies
    assert "no NVIDIA GPU" in found.reason
    assert found.details == {"gpu_count": 0}


def test_nvidia_devices_that_are_not_gpus_and_other_vendors_gpus_do_not_apply():
    found = dcgm.detect(FakeHost(pci=NOT_GPUS), params())
    assert not found.applies
    assert found.details["gpu_count"] == 0


def test_nvidia_gpus_apply_and_say_no_driver_is_loaded_yet():
    host = FakeHost(pci=H100X2 + NOT_GPUS, bins={"nvidia-smi": SMI})
    found = dcgm.detect(host, params())
    assert found.applies
    assert found.reason == "2 NVIDIA GPU(s), no NVIDIA driver loaded yet"
    assert found.details["addresses"] == ["0000:18:00.0", "0000:2a:00.0"]
    assert found.details["driver_loaded"] is False
    assert found.details["cuda_major"] is None
    assert host.ran == []  # nvidia-smi is not run without a driver


def test_the_cuda_major_comes_from_nvidia_smi_when_the_driver_is_loaded():
    host = FakeHost(pci=H100X2, files={dcgm.DRIVER_VERSION_FILE: NVRM_PROPRIETARY},
                    commands={(SMI,): (0, SMI_HEADER, "")}, bins={"nvidia-smi": SMI})
    found = dcgm.detect(host, params())
    assert found.details["driver_loaded"] is True
    assert found.details["driver_version"] == "550.54.15"
    assert found.details["cuda_major"] == 12
    assert found.details["cuda_major_from"] == "nvidia-smi"
    assert found.reason == "2 NVIDIA GPU(s), driver 550.54.15 loaded"


def test_the_cuda_major_comes_from_the_driver_branch_without_nvidia_smi():
    host = FakeHost(pci=H100X2, files={dcgm.DRIVER_VERSION_FILE: NVRM_OPEN})
    found = dcgm.detect(host, params())
    assert found.details["driver_version"] == "580.65.06"
    assert found.details["cuda_major"] == 13
    assert found.details["cuda_major_from"] == "driver branch"


def test_a_failing_nvidia_smi_falls_back_to_the_driver_branch():
    host = FakeHost(pci=H100X2, files={dcgm.DRIVER_VERSION_FILE: NVRM_PROPRIETARY},
                    commands={(SMI,): (9, "", "NVIDIA-SMI has failed")},
                    bins={"nvidia-smi": SMI})
    found = dcgm.detect(host, params())
    assert found.details["driver_version"] == "535.129.03"
    assert found.details["cuda_major"] == 12


@pytest.mark.parametrize("version, major", [
    ("580.65.06", 13), ("590.44.01", 13), ("575.57.08", 12), ("525.60.13", 12),
    ("520.61.05", 11), ("450.36.06", 11), ("418.87.01", None), ("", None), (None, None),
])
def test_cuda_major_for_a_driver_version(version, major):
    assert dcgm.cuda_major_for_driver(version) == major


def test_nvidia_smi_q_spells_the_versions_with_colons_too():
    text = "Driver Version                            : 570.133.20\nCUDA Version : 12.8\n"
    assert dcgm.parse_smi_header(text) == ("570.133.20", 12)
    assert dcgm.parse_smi_header("nothing") == (None, None)


# --- health output ----------------------------------------------------------------------------


def test_a_healthy_json_report_has_no_incidents():
    parsed = dcgm.parse_health(HEALTHY_JSON)
    assert parsed["health"] == "healthy"
    assert parsed["incidents"] == []
    assert parsed["message"] is None


def test_a_warning_json_report_joins_the_message_parts():
    parsed = dcgm.parse_health(WARNING_JSON)
    assert parsed["health"] == "warning"
    assert parsed["overall"] == "Warning"
    assert parsed["incidents"] == [{
        "entity": "GPU 0", "group": "GPU", "id": "0", "system": "PCIe system",
        "health": "warning",
        "message": "Detected more than 8 PCIe replays per minute for GPU 0 : 13",
    }]
    assert parsed["message"] == "Detected more than 8 PCIe replays per minute for GPU 0 : 13"


def test_a_failure_json_report_lists_every_entity_and_system():
    parsed = dcgm.parse_health(FAILURE_JSON)
    assert parsed["health"] == "failure"
    shown = [(i["entity"], i["system"], i["health"]) for i in parsed["incidents"]]
    assert shown == [
        ("GPU 1", "InfoROM system", "warning"),
        ("GPU 1", "Memory system", "failure"),
        ("GPU 2", "PCIe system", "warning"),
        ("GPU 10", "Thermal system", "warning"),
        ("NvSwitch 3", "NvSwitch F", "failure"),
    ]
    assert parsed["incidents"][3]["message"] == (
        "Clocks event: thermal violation detected for GPU 10 for 1200 ms. "
        "Check the cooling of the system.")
    # The host's one message is the first failure's, not the first (warning) incident's.
    assert parsed["message"] == "Detected 2 volatile double-bit ECC error(s) in GPU 1."


@pytest.mark.parametrize("json_text, table_text", [
    (HEALTHY_JSON, HEALTHY_TABLE),
    (WARNING_JSON, WARNING_TABLE),
    (FAILURE_JSON, FAILURE_TABLE),
])
def test_the_table_says_what_the_json_says(json_text, table_text):
    from_json = dcgm.parse_health(json_text)
    from_table = dcgm.parse_health(table_text)
    assert from_table["health"] == from_json["health"]
    assert from_table["message"] == from_json["message"]

    def key(incident):
        return (incident["entity"], incident["system"])

    assert sorted(from_table["incidents"], key=key) == sorted(from_json["incidents"], key=key)


def test_the_table_keeps_dcgmis_incident_order():
    parsed = dcgm.parse_health(FAILURE_TABLE)
    assert [(i["entity"], i["system"]) for i in parsed["incidents"]][:2] == [
        ("GPU 1", "Memory system"), ("GPU 1", "InfoROM system")]


def test_an_older_dcgmis_narrower_table_reads_the_same():
    parsed = dcgm.parse_health(OLD_WARNING_TABLE)
    assert parsed["health"] == "warning"
    assert parsed["incidents"] == [{
        "entity": "GPU 0", "group": "GPU", "id": "0", "system": "Memory system",
        "health": "warning", "message": "Detected 1 volatile double-bit ECC error(s) in GPU 0.",
    }]


def test_json_after_a_line_of_text_is_read():
    parsed = dcgm.parse_health("Health monitor systems report\n" + WARNING_JSON)
    assert parsed["health"] == "warning"


@pytest.mark.parametrize("text, said", [
    ("", "no 'Overall Health' row"),
    (NOT_WATCHED, "no 'Overall Health' row"),
    ('{"body": {"GPU": {}}}', "no 'Overall Health' in its body"),
    ('{"body": {"Overall Health": {"value": "Warn', "cannot be read"),
    ('{"header": ["Health Monitor Report"]}', "no 'Overall Health' in its body"),
])
def test_unreadable_health_output_is_a_check_error(text, said):
    with pytest.raises(CheckError, match=said):
        dcgm.parse_health(text)


def test_an_unknown_overall_word_has_no_health():
    text = HEALTHY_JSON.replace('"Healthy"', '"Internal error"')
    assert dcgm.parse_health(text)["health"] is None


# --- dcgmi health -c -------------------------------------------------------------------------


def test_check_health_runs_dcgmi_with_json():
    host = FakeHost(commands={HEALTH_ARGV: (0, WARNING_JSON, "")})
    parsed, problem = dcgm.check_health(host)
    assert problem is None
    assert parsed["health"] == "warning"
    assert host.ran == [HEALTH_ARGV]


def test_check_health_asks_the_given_group():
    argv = (DCGMI, "health", "-g", "2", "-c", "-j")
    host = FakeHost(commands={argv: (0, HEALTHY_JSON, "")})
    parsed, problem = dcgm.check_health(host, group=2)
    assert (parsed["health"], problem) == ("healthy", None)


def test_a_dcgmi_without_json_is_asked_for_the_table():
    host = FakeHost(commands={
        HEALTH_ARGV: (255, "", "PARSE ERROR: Argument: -j (--json)\n"
                               "             Couldn't find match for argument\n"),
        TABLE_ARGV: (0, FAILURE_TABLE, ""),
    })
    parsed, problem = dcgm.check_health(host)
    assert problem is None
    assert parsed["health"] == "failure"
    assert host.ran == [HEALTH_ARGV, TABLE_ARGV]


@pytest.mark.parametrize("out, said", [
    (NOT_WATCHED, "Error: Health watches not enabled. Please enable watches."),
    (NO_ENGINE, "Error: unable to establish a connection to the specified host: localhost"),
])
def test_dcgmi_errors_are_problems(out, said):
    host = FakeHost(commands={HEALTH_ARGV: (253, out, ""), TABLE_ARGV: (253, out, "")})
    parsed, problem = dcgm.check_health(host)
    assert parsed is None
    assert problem == "dcgmi health -c failed (exit status 253): " + said


def test_no_dcgmi_is_a_problem():
    parsed, problem = dcgm.check_health(FakeHost(bins={"dcgmi": None}))
    assert parsed is None
    assert "dcgmi is not installed" in problem


# --- verification -----------------------------------------------------------------------------


def test_the_software_verification_of_a_good_host():
    host = good_host()
    check = dcgm.verify(host, params(settings=SETTINGS, expect=EXPECT))
    assert check["problems"] == []
    assert check["ok"] is True
    assert check["packages"] == {PACKAGES[0]: "1:4.2.3-1", PACKAGES[1]: "1:4.2.3-1"}
    assert check["version"] == "1:4.2.3-1"
    assert check["held"] == PACKAGES
    assert check["pin_version"] == "1:4.2.3-*"
    assert check["service"] == {"name": "nvidia-dcgm", "active": "active", "enabled": "enabled"}
    assert check["health_watches"] == "a"
    assert check["health"] is None
    assert check["health_checked"] is False
    assert not any(argv[0] == DCGMI for argv in host.ran)


def test_the_hardware_verification_records_the_health():
    host = good_host(health=WARNING_JSON)
    check = dcgm.verify(host, params(settings=SETTINGS, expect=EXPECT, probe_hardware=True))
    assert check["ok"] is True  # a warning host is still used, as in dstack
    assert check["health"] == "warning"
    assert check["health_checked"] is True
    assert check["overall_health"] == "Warning"
    assert check["message"] == "Detected more than 8 PCIe replays per minute for GPU 0 : 13"
    assert [i["entity"] for i in check["incidents"]] == ["GPU 0"]


def test_a_failure_is_recorded_but_is_no_problem_by_default():
    check = dcgm.verify(good_host(health=FAILURE_JSON),
                        params(settings=SETTINGS, expect=EXPECT, probe_hardware=True))
    assert check["health"] == "failure"
    assert check["ok"] is True


@pytest.mark.parametrize("fail_on, health, failing", [
    ("failure", FAILURE_JSON, True), ("failure", WARNING_JSON, False),
    ("warning", WARNING_JSON, True), ("warning", HEALTHY_JSON, False),
    ("none", FAILURE_JSON, False),
])
def test_fail_on_health_makes_bad_health_a_problem(fail_on, health, failing):
    settings = dict(SETTINGS, fail_on_health=fail_on)
    check = dcgm.verify(good_host(health=health),
                        params(settings=settings, expect=EXPECT, probe_hardware=True))
    assert check["ok"] is (not failing)
    if failing:
        assert check["problems"][0].startswith("DCGM reports the GPUs' health as ")


def test_a_failure_problem_names_the_failing_entities_only():
    settings = dict(SETTINGS, fail_on_health="failure")
    check = dcgm.verify(good_host(health=FAILURE_JSON),
                        params(settings=settings, expect=EXPECT, probe_hardware=True))
    assert check["problems"] == [
        "DCGM reports the GPUs' health as failure: GPU 1 Memory system: Detected 2 volatile "
        "double-bit ECC error(s) in GPU 1.; NvSwitch 3 NvSwitch F: Detected fatal errors on "
        "NvSwitch 3 link 17"]


def test_a_bad_fail_on_health_is_a_check_error():
    with pytest.raises(CheckError, match="fail_on_health"):
        dcgm.verify(good_host(), params(settings=dict(SETTINGS, fail_on_health="sometimes")))


def test_a_health_check_that_cannot_run_is_a_problem():
    host = good_host(commands={HEALTH_ARGV: (253, NOT_WATCHED, ""),
                               TABLE_ARGV: (253, NOT_WATCHED, "")})
    check = dcgm.verify(host, params(settings=SETTINGS, expect=EXPECT, probe_hardware=True))
    assert check["ok"] is False
    assert check["health"] is None
    assert check["problems"] == [
        "dcgmi health -c failed (exit status 253): Error: Health watches not enabled. "
        "Please enable watches."]


def test_an_unknown_overall_health_is_a_problem():
    host = good_host(health=HEALTHY_JSON.replace('"Healthy"', '"Internal error"'))
    check = dcgm.verify(host, params(settings=SETTINGS, expect=EXPECT, probe_hardware=True))
    assert check["problems"] == [
        "dcgmi reports an overall health of 'Internal error', which is none of Healthy, "
        "Warning and Failure"]


def test_missing_and_wrong_packages_are_problems():
    host = good_host(packages=dpkg((PACKAGES[0], "1:4.3.0-1", "install ok installed")))
    check = dcgm.verify(host, params(settings=SETTINGS, expect=EXPECT))
    assert check["problems"] == [
        "datacenter-gpu-manager-4-core is at 1:4.3.0-1, not 4.2.3",
        "the datacenter-gpu-manager-4-cuda12 package is not installed",
        "datacenter-gpu-manager-4-core is not held at its version",
    ]
    assert check["held"] == []


def test_a_removed_package_is_not_installed():
    host = good_host(packages=dpkg(
        (PACKAGES[0], "1:4.2.3-1", "hold ok installed"),
        (PACKAGES[1], "1:4.2.3-1", "deinstall ok config-files")))
    check = dcgm.verify(host, params(settings=SETTINGS, expect=EXPECT))
    assert check["problems"] == ["the datacenter-gpu-manager-4-cuda12 package is not installed"]


def test_a_missing_or_wrong_pin_is_a_problem():
    check = dcgm.verify(good_host(missing=[PIN]), params(settings=SETTINGS, expect=EXPECT))
    assert check["problems"] == ["the version pin %s is missing" % PIN]
    wrong = good_host(files={PIN: PIN_TEXT.replace("4.2.3-*", "4.3.0-*")})
    check = dcgm.verify(wrong, params(settings=SETTINGS, expect=EXPECT))
    assert check["problems"] == ["%s pins 1:4.3.0-*, not 4.2.3" % PIN]


def test_without_a_version_nothing_is_expected_of_pin_and_hold():
    host = good_host(missing=[PIN], packages=dpkg(
        (PACKAGES[0], "1:4.3.0-1", "install ok installed"),
        (PACKAGES[1], "1:4.3.0-1", "install ok installed")))
    check = dcgm.verify(host, params(settings=SETTINGS, expect={"service_active": True}))
    assert check["problems"] == []
    assert check["pin_version"] is None


def test_a_disabled_or_stopped_service_is_a_problem():
    host = good_host(unit=unit(active="inactive", enabled="disabled"))
    check = dcgm.verify(host, params(settings=SETTINGS, expect=EXPECT))
    assert check["problems"] == ["the nvidia-dcgm service is disabled, not enabled",
                                 "the nvidia-dcgm service is inactive, not active"]


def test_a_stopped_service_is_fine_when_it_is_not_expected_to_run():
    host = good_host(unit=unit(active="inactive"))
    expect = dict(EXPECT, service_active=False)
    assert dcgm.verify(host, params(settings=SETTINGS, expect=expect))["ok"] is True


def test_a_missing_or_different_watch_drop_in_is_a_problem():
    check = dcgm.verify(good_host(missing=[DROPIN]), params(settings=SETTINGS, expect=EXPECT))
    assert check["problems"] == [
        "the %s drop-in that sets the health watches is missing" % DROPIN]
    other = good_host(files={DROPIN: DROPIN_TEXT.replace("-s a", "-s pm")})
    check = dcgm.verify(other, params(settings=SETTINGS, expect=EXPECT))
    assert check["problems"] == ["%s sets the health watches 'pm', not 'a'" % DROPIN]
    assert check["health_watches"] == "pm"


def test_without_package_settings_the_installed_dcgm_packages_are_verified():
    listing = ("dpkg-query", "-W", "-f", "${Package}\\t${Status}\\n", "datacenter-gpu-manager*")
    names = ["datacenter-gpu-manager"]
    host = FakeHost(commands={
        **unit(),
        listing: (0, "datacenter-gpu-manager\tinstall ok installed\n"
                     "datacenter-gpu-manager-4-core\tunknown ok not-installed\n", ""),
        DPKG_ARGV + tuple(names): (0, "datacenter-gpu-manager\t1:3.3.9\tinstall ok installed\n",
                                   ""),
    })
    check = dcgm.verify(host, params())
    assert check["problems"] == []
    assert check["packages"] == {"datacenter-gpu-manager": "1:3.3.9"}
    assert check["version"] == "1:3.3.9"


def test_no_dcgm_package_at_all_is_a_problem():
    listing = ("dpkg-query", "-W", "-f", "${Package}\\t${Status}\\n", "datacenter-gpu-manager*")
    host = FakeHost(commands={**unit(), listing: (1, "", "no packages found")})
    check = dcgm.verify(host, params())
    assert "no DCGM package (datacenter-gpu-manager*) is installed" in check["problems"]


def test_rpm_hosts_read_versions_with_rpm_and_holds_from_versionlock():
    rpm_fmt = "%{NAME}\\t%{EPOCH}:%{VERSION}-%{RELEASE}\\n"
    commands = {
        **unit(),
        ("rpm", "-q", "--qf", rpm_fmt, PACKAGES[0]): (
            0, "datacenter-gpu-manager-4-core\t1:4.2.3-1\n", ""),
        ("rpm", "-q", "--qf", rpm_fmt, PACKAGES[1]): (
            0, "datacenter-gpu-manager-4-cuda12\t1:4.2.3-1\n", ""),
        ("dnf", "versionlock", "list"): (
            0, "Last metadata expiration check: 0:10:11 ago.\n"
               "datacenter-gpu-manager-4-core-1:4.2.3-1.*\n", ""),
    }
    host = FakeHost(commands=commands,
                    bins={"dpkg-query": None, "rpm": "/usr/bin/rpm", "dnf": "/usr/bin/dnf"},
                    files={DROPIN: DROPIN_TEXT})
    settings = dict(SETTINGS, pin_file=None)
    check = dcgm.verify(host, params(settings=settings, expect=EXPECT))
    assert check["held"] == [PACKAGES[0]]
    assert check["problems"] == ["datacenter-gpu-manager-4-cuda12 is not held at its version"]
