# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Installed packages and systemd units, as the component checks read them.

PRIVATE to gpufleet.cluster.
"""

from __future__ import annotations

import re
from typing import Any, Iterable

from ..facts.probe import System

DPKG_FORMAT = "${Package}\\t${Version}\\t${Status}\\n"
RPM_FORMAT = "%{NAME}\\t%{EPOCH}:%{VERSION}-%{RELEASE}\\n"


def installed(system: System, names: Iterable[str]) -> dict[str, dict[str, Any]]:
    """{name: {"version": str, "held": bool}} for the installed ones among ``names``
    (dpkg on Debian and Ubuntu, rpm elsewhere); missing packages are left out."""
    names = list(names)
    if not names:
        return {}
    if system.which("dpkg-query"):
        _rc, out, _err = system.run(["dpkg-query", "-W", "-f", DPKG_FORMAT] + names)
        found = {}
        for line in out.splitlines():
            parts = line.split("\t")
            if len(parts) != 3:
                continue
            name, version, status = parts
            words = status.split()
            if len(words) == 3 and words[2] == "installed":
                found[name] = {"version": version, "held": words[0] == "hold"}
        return found
    if system.which("rpm"):
        found = {}
        for name in names:
            rc, out, _err = system.run(["rpm", "-q", "--qf", RPM_FORMAT, name])
            if rc == 0 and "\t" in out:
                pkg, version = out.splitlines()[0].split("\t", 1)
                found[pkg] = {"version": version.replace("(none):", ""), "held": False}
        return found
    return {}


def version_matches(package_version: str, wanted: str) -> bool:
    """Whether a package version (``5:27.3.1-1~debian.12~bookworm``, ``27.3.1-1.el9``) is the
    upstream version ``wanted`` (``27.3.1``) or one starting with it (``27.3``)."""
    upstream = re.sub(r"^\d+:", "", package_version)
    return upstream == wanted or re.match(re.escape(wanted) + r"[-.~+]", upstream) is not None


def unit_state(system: System, unit: str) -> tuple[str, str]:
    """(active, enabled): systemctl's answers for ``unit`` ("active", "enabled", ...)."""
    _rc, active, _err = system.run(["systemctl", "is-active", unit])
    _rc, enabled, _err = system.run(["systemctl", "is-enabled", unit])
    return active.strip() or "unknown", enabled.strip() or "unknown"
