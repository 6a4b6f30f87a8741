# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""What the component checks read from a host: commands and files (the host facts' System),
HTTP for the cloud metadata services, and the PCI devices in sysfs.

PRIVATE to gpufleet.cluster.
"""

from __future__ import annotations

import os
from typing import Iterable

from ..facts.probe import System

PCI_ROOT = "/sys/bus/pci/devices"

# PCI vendor ids (the ``vendor`` file in sysfs, without 0x).
VENDOR_NVIDIA = "10de"
VENDOR_AMD = "1002"
VENDOR_AMAZON = "1d0f"
VENDOR_MELLANOX = "15b3"
VENDOR_GOOGLE = "1ae0"

AWS_IMDS_URL = "http://169.254.169.254"
GCP_METADATA_URL = "http://metadata.google.internal"


class NodeSystem(System):
    """``System`` plus ``fetch(url, method, headers, timeout) -> (status, text)``, which returns
    ``(None, reason)`` when nothing answers."""

    def __init__(self, run, which, fetch):
        System.__init__(self, run, which)
        self.fetch = fetch


def _read_id(system, path):
    try:
        value = system.read_text(path).strip().lower()
    except (OSError, IOError):
        return None
    return value[2:] if value.startswith("0x") else value


def pci_devices(system: System, root: str = PCI_ROOT) -> list[dict[str, str]]:
    """Every PCI function under ``root``: dicts with address, vendor, device, class (hex
    strings without 0x) and driver (the bound kernel driver's name, or None)."""
    devices = []
    for address in system.listdir(root):
        base = os.path.join(root, address)
        driver = system.resolve(os.path.join(base, "driver"))
        devices.append({
            "address": address,
            "vendor": _read_id(system, os.path.join(base, "vendor")),
            "device": _read_id(system, os.path.join(base, "device")),
            "class": _read_id(system, os.path.join(base, "class")),
            "driver": os.path.basename(driver) if driver else None,
        })
    return devices


def devices_of(devices: list[dict[str, str]], vendor: str,
               classes: Iterable[str] | None = None) -> list[dict[str, str]]:
    """The devices of ``vendor`` whose class starts with one of ``classes`` (e.g. "0302")."""
    found = []
    for device in devices:
        if device["vendor"] != vendor:
            continue
        if classes and not any((device["class"] or "").startswith(c) for c in classes):
            continue
        found.append(device)
    return found


def aws_instance_type(system: NodeSystem, base_url: str = AWS_IMDS_URL,
                      timeout: float = 2) -> tuple[str | None, str | None]:
    """The EC2 instance type from the instance metadata service (IMDSv2, then v1), or
    ``(None, why)`` when no metadata service answers (not on EC2)."""
    base = base_url.rstrip("/")
    status, token = system.fetch(
        base + "/latest/api/token", method="PUT",
        headers={"X-aws-ec2-metadata-token-ttl-seconds": "60"}, timeout=timeout)
    headers = {}
    if status == 200 and token:
        headers["X-aws-ec2-metadata-token"] = token.strip()
    elif status is None:
        return None, "no EC2 instance metadata service at %s (%s)" % (base, token)
    status, text = system.fetch(base + "/latest/meta-data/instance-type", headers=headers,
                                timeout=timeout)
    if status != 200 or not text:
        return None, "the EC2 metadata service at %s gave no instance type (HTTP %s)" % (
            base, status)
    return text.strip(), None


def gcp_machine_type(system: NodeSystem, base_url: str = GCP_METADATA_URL,
                     timeout: float = 2) -> tuple[str | None, str | None]:
    """The Compute Engine machine type (e.g. ``a3-highgpu-8g``) from the metadata server, or
    ``(None, why)`` when no metadata server answers (not on GCP)."""
    base = base_url.rstrip("/")
    status, text = system.fetch(
        base + "/computeMetadata/v1/instance/machine-type",
        headers={"Metadata-Flavor": "Google"}, timeout=timeout)
    if status is None:
        return None, "no Compute Engine metadata server at %s (%s)" % (base, text)
    if status != 200 or not text:
        return None, "the metadata server at %s gave no machine type (HTTP %s)" % (base, status)
    # projects/<number>/machineTypes/<type>
    return text.strip().rsplit("/", 1)[-1], None
