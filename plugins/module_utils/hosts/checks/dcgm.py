# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""DCGM (NVIDIA Data Center GPU Manager): applies to hosts with an NVIDIA GPU; the check reads
the packages, their pin and hold, the ``nvidia-dcgm`` service and its health-watch drop-in
and, with ``probe_hardware``, asks ``dcgmi health -c -j`` for the GPUs' passive health.

The health is dstack's (docs/reference/dstack-runtime.md#health): ``healthy``, ``warning`` or
``failure`` (DCGM's PASS, WARN, FAIL), with one incident per entity (GPU, NvSwitch, ...) and watched
system (PCIe, memory, ...), and the first incident's message as the host's health message. Task
placement leaves ``failure`` hosts out.

``expect`` keys: ``version`` (upstream version every package must have, e.g. "4.2.3"),
``held`` (bool: the packages must be held / version-locked), ``service_active`` (bool).
``settings`` keys: ``packages`` (names; default: the installed ``datacenter-gpu-manager*``
ones), ``service`` (unit name, default ``nvidia-dcgm``), ``pin_file`` (apt preferences file
that must pin ``version``), ``dropin`` (the service drop-in that sets the health watches),
``health_watches`` (the ``dcgmi health -s`` letters it must set, e.g. "a"),
``fail_on_health`` ("none", "warning" or "failure": a health this bad or worse is a problem),
``group`` (the DCGM group ``dcgmi health`` checks; default: DCGM's default group).

PRIVATE to gpufleet.cluster.
"""

from __future__ import annotations

import json
import re
from typing import Any

from ..facts.probe import System
from . import CheckError, Detection, result
from ._packages import installed, unit_state, version_matches
from ._system import PCI_ROOT, VENDOR_NVIDIA, devices_of, pci_devices
from .nvidia import GPU_CLASSES
DRIVER_VERSION_FILE = "/proc/driver/nvidia/version"
SERVICE = "nvidia-dcgm"
PACKAGE_PATTERN = "datacenter-gpu-manager*"
HEALTH_LEVELS = {"healthy": 0, "warning": 1, "failure": 2}
# DCGM's words (dcgmi Health.cpp HelperHealthToString) for DCGM_HEALTH_RESULT_PASS/WARN/FAIL.
DCGM_WORDS = {"healthy": "healthy", "pass": "healthy", "warning": "warning", "warn": "warning",
              "failure": "failure", "fail": "failure"}
OVERALL = "Overall Health"
# The oldest driver branch of each CUDA major version (CUDA toolkit release notes, table 3):
# a driver supports CUDA up to the newest major whose minimum it meets.
CUDA_MINIMUM_BRANCH = ((13, 580), (12, 525), (11, 450))

_CUDA_VERSION = re.compile(r"CUDA Version\s*:\s*(\d+)\.(\d+)")
_SMI_DRIVER = re.compile(r"Driver Version\s*:\s*(\d+(?:\.\d+)+)")
_NVRM_VERSION = re.compile(r"NVRM version:.*?\s(\d{3,}\.\d+(?:\.\d+)?)\s")
_WATCHES = re.compile(r"dcgmi\s+health\s+(?:-g\s+\S+\s+)?-s\s+([a-z]+)")
_PIN = re.compile(r"^Pin:\s*version\s+(\S+)\s*$", re.MULTILINE)


# ---------------------------------------------------------------------------------------------
# Detection
# ---------------------------------------------------------------------------------------------


def cuda_major_for_driver(version: str | None) -> int | None:
    """The newest CUDA major version a driver version (``550.54.15``) supports, or None."""
    match = re.match(r"(\d+)", version or "")
    if not match:
        return None
    branch = int(match.group(1))
    for major, minimum in CUDA_MINIMUM_BRANCH:
        if branch >= minimum:
            return major
    return None


def parse_nvrm_version(text: str) -> str | None:
    """The driver version from ``/proc/driver/nvidia/version`` (proprietary and open kernel
    modules), or None."""
    match = _NVRM_VERSION.search(text or "")
    return match.group(1) if match else None


def parse_smi_header(text: str) -> tuple[str | None, int | None]:
    """(driver version, CUDA major) from ``nvidia-smi``'s header or ``nvidia-smi -q``;
    either is None when not shown."""
    driver = _SMI_DRIVER.search(text or "")
    cuda = _CUDA_VERSION.search(text or "")
    return (driver.group(1) if driver else None, int(cuda.group(1)) if cuda else None)


def driver_info(system: System) -> dict[str, Any]:
    """What the loaded NVIDIA driver says: {driver_loaded, driver_version, cuda_major,
    cuda_major_from}. Nothing is run when no driver is loaded."""
    info: dict[str, Any] = {"driver_loaded": False, "driver_version": None, "cuda_major": None,
                            "cuda_major_from": None}
    try:
        nvrm = system.read_text(DRIVER_VERSION_FILE)
    except (OSError, IOError):
        return info
    info["driver_loaded"] = True
    info["driver_version"] = parse_nvrm_version(nvrm)
    smi = system.which("nvidia-smi")
    if smi:
        status, out, _err = system.run([smi])
        if status == 0:
            driver, cuda = parse_smi_header(out)
            info["driver_version"] = driver or info["driver_version"]
            if cuda is not None:
                info["cuda_major"] = cuda
                info["cuda_major_from"] = "nvidia-smi"
    if info["cuda_major"] is None and info["driver_version"]:
        info["cuda_major"] = cuda_major_for_driver(info["driver_version"])
        if info["cuda_major"] is not None:
            info["cuda_major_from"] = "driver branch"
    return info


def detect(system: System, params: dict[str, Any]) -> Detection:
    devices = pci_devices(system, params.get("pci_root") or PCI_ROOT)
    gpus = devices_of(devices, VENDOR_NVIDIA, GPU_CLASSES)
    if not gpus:
        return Detection(
            False, "no NVIDIA GPU among the host's PCI devices, and DCGM only manages NVIDIA GPUs",
            {"gpu_count": 0})
    details = {"gpu_count": len(gpus), "addresses": [g["address"] for g in gpus]}
    details.update(driver_info(system))
    if details["driver_loaded"]:
        driver = "driver %s loaded" % (details["driver_version"] or "(version unknown)")
    else:
        driver = "no NVIDIA driver loaded yet"
    return Detection(True, "%d NVIDIA GPU(s), %s" % (len(gpus), driver), details)


# ---------------------------------------------------------------------------------------------
# dcgmi health
# ---------------------------------------------------------------------------------------------


def health_word(word: object) -> str | None:
    """healthy, warning or failure for DCGM's word ("Healthy", "Warning", "Failure"), or None."""
    return DCGM_WORDS.get(str(word or "").strip().lower())


def _incident(group, entity, system_name, health, parts):
    message = " ".join(p.strip() for p in parts if p and p.strip())
    return {
        "entity": ("%s %s" % (group, entity)).strip(),
        "group": group,
        "id": entity,
        "system": system_name,
        "health": health_word(health) or str(health or "").lower() or None,
        "message": message,
    }


def _entity_order(key):
    return (0, int(key), "") if key.isdigit() else (1, 0, key)


def _children(node):
    children = node.get("children") if isinstance(node, dict) else None
    return children if isinstance(children, dict) else {}


def parse_health_json(text: str) -> dict[str, Any]:
    """{overall, incidents} from ``dcgmi health -c -j``.

    dcgmi prints its report tree as JSON (dcgmi DcgmiOutput.cpp): ``{"header": [...], "body":
    {"Overall Health": {"value": "Warning"}, "GPU": {"children": {"0": {"value": "Warning",
    "children": {"Errors": {"children": {"PCIe system": {"value": "Warning", "overflow":
    [message parts]}}}}}}}}}``; a long message is cut into parts of at most 54 characters.
    """
    start = (text or "").find("{")
    if start < 0:
        raise CheckError("dcgmi health -c -j printed no JSON: %s" % (text or "").strip()[:200])
    try:
        data, _end = json.JSONDecoder().raw_decode(text[start:])
    except ValueError as exc:
        raise CheckError("dcgmi health -c -j printed JSON that cannot be read (%s): %s"
                         % (exc, text[start:start + 200])) from exc
    body = data.get("body") if isinstance(data, dict) else None
    if not isinstance(body, dict) or not isinstance(body.get(OVERALL), dict):
        raise CheckError("dcgmi health -c -j printed no %r in its body: %s"
                         % (OVERALL, text[start:start + 200]))
    incidents = []
    for group, group_node in body.items():
        if group == OVERALL:
            continue
        entities = _children(group_node)
        for entity in sorted(entities, key=_entity_order):
            node = entities[entity]
            systems = _children(_children(node).get("Errors"))
            if not systems:
                incidents.append(_incident(group, entity, None, node.get("value"), []))
            for system_name, system_node in systems.items():
                parts = system_node.get("overflow") or []
                if not isinstance(parts, list):
                    parts = [str(parts)]
                incidents.append(_incident(group, entity, system_name,
                                           system_node.get("value"), parts))
    return {"overall": body[OVERALL].get("value"), "incidents": incidents}


def _table_row(line):
    """(level, label, value) of a ``| left | right |`` row of dcgmi's tree table; level is None
    for a row that continues the previous row's message, and the row is None for borders and
    the header."""
    line = line.rstrip()
    if not line.startswith("|") or not line.endswith("|") or len(line) < 3:
        return None
    inner = line[1:-1]
    if "|" not in inner:
        return None  # the header: "| Health Monitor Report       |"
    left, right = inner.split("|", 1)
    left = left[1:] if left.startswith(" ") else left
    value = right.strip()
    if not left.strip():
        return (None, "", value)
    arrow = left.find("->")
    if arrow < 0:
        return (0, left.strip(), value)
    return (arrow // 3 + 1, left[arrow + 2:].strip(), value)


def parse_health_table(text: str) -> dict[str, Any]:
    """{overall, incidents} from ``dcgmi health -c`` (the plain-text tree table):

    ``| Overall Health | Warning |``, then per entity group ``| GPU | |``, ``| -> 0 | Warning |``,
    ``|    -> Errors | |``, ``|       -> PCIe system | Warning |`` and the message in the rows
    below with an empty left column.
    """
    overall = None
    group = entity = None
    incidents = []
    current = None
    for line in (text or "").splitlines():
        row = _table_row(line)
        if row is None:
            continue
        level, label, value = row
        if level is None:
            if current is not None and value:
                current["parts"].append(value)
            continue
        current = None
        if level == 0:
            if label == OVERALL:
                overall = value
            else:
                group, entity = label, None
        elif level == 1:
            entity = label
        elif level >= 3:
            current = {"group": group or "", "entity": entity or "", "system": label,
                       "health": value, "parts": []}
            incidents.append(current)
    if overall is None:
        raise CheckError("dcgmi health -c printed no %r row: %s"
                         % (OVERALL, (text or "").strip()[:200]))
    return {"overall": overall, "incidents": [
        _incident(i["group"], i["entity"], i["system"], i["health"], i["parts"])
        for i in incidents]}


def parse_health(text: str) -> dict[str, Any]:
    """{health, overall, incidents, message} from ``dcgmi health -c`` with or without ``-j``:
    JSON when the output has it, the plain-text table otherwise."""
    stripped = (text or "").lstrip()
    if "{" in stripped and not stripped.startswith("+") and not stripped.startswith("|"):
        parsed = parse_health_json(text)
    else:
        parsed = parse_health_table(text)
    parsed["health"] = health_word(parsed["overall"])
    parsed["message"] = worst_message(parsed["incidents"])
    return parsed


def worst_message(incidents: list[dict[str, Any]]) -> str | None:
    """The message of the first of the worst incidents (dstack shows one message per host;
    dcgmi's JSON orders incidents by name, so "first" alone would be arbitrary)."""
    said = [i for i in incidents if i["message"]]
    if not said:
        return None
    worst = max(HEALTH_LEVELS.get(i["health"], 0) for i in said)
    return next(i["message"] for i in said if HEALTH_LEVELS.get(i["health"], 0) == worst)


def _first_line(*texts):
    lines = [line.strip() for text in texts for line in (text or "").splitlines()]
    lines = [line for line in lines if line]
    errors = [line for line in lines if line.lower().startswith("error")]
    return (errors or lines or ["no output"])[0]


def check_health(system: System,
                 group: str | None = None) -> tuple[dict[str, Any] | None, str | None]:
    """(parsed health or None, problem or None) from ``dcgmi health -c -j``; dcgmi versions
    that do not take ``-j`` are asked again without it and their table is read."""
    dcgmi = system.which("dcgmi")
    if not dcgmi:
        return None, "dcgmi is not installed, so the GPUs' health cannot be checked"
    base = [dcgmi, "health"] + (["-g", str(group)] if group not in (None, "") else []) + ["-c"]
    status, out, err = system.run(base + ["-j"])
    if status == 0 and OVERALL in (out or ""):
        return parse_health(out), None
    # An error ("Error: Health watches not enabled", no host engine) or a dcgmi without -j.
    status2, out2, _err2 = system.run(base)
    if status2 == 0 and OVERALL in (out2 or ""):
        return parse_health(out2), None
    return None, "dcgmi health -c failed (exit status %d): %s" % (status, _first_line(out, err))


# ---------------------------------------------------------------------------------------------
# Verification
# ---------------------------------------------------------------------------------------------


def _installed_dcgm_packages(system):
    """Names of the installed datacenter-gpu-manager* packages (dpkg or rpm)."""
    if system.which("dpkg-query"):
        _rc, out, _err = system.run(["dpkg-query", "-W", "-f", "${Package}\\t${Status}\\n",
                                     PACKAGE_PATTERN])
        return [line.split("\t")[0] for line in out.splitlines()
                if line.endswith(" installed") and "\t" in line]
    if system.which("rpm"):
        _rc, out, _err = system.run(["rpm", "-qa", "--qf", "%{NAME}\\n", PACKAGE_PATTERN])
        return [line.strip() for line in out.splitlines() if line.strip()]
    return []


def versionlocked(system: System) -> list[str] | None:
    """The dnf versionlock list's lines, or None when there is no dnf versionlock."""
    if system.which("dpkg-query") or not system.which("dnf"):
        return None
    status, out, _err = system.run(["dnf", "versionlock", "list"])
    if status != 0:
        return None
    return [line.strip() for line in out.splitlines() if line.strip()]


def _locked(lines, name):
    pattern = re.compile(r"^(\d+:)?%s-(\d+:)?\d" % re.escape(name))
    return any(pattern.match(line) for line in lines)


def _read(system, path):
    try:
        return system.read_text(path)
    except (OSError, IOError):
        return None


def _software(system, settings, expect, problems):
    names = list(settings.get("packages") or []) or _installed_dcgm_packages(system)
    found = installed(system, names)
    if not names:
        problems.append("no DCGM package (%s) is installed" % PACKAGE_PATTERN)
    wanted = str(expect.get("version") or "")
    for name in names:
        package = found.get(name)
        if package is None:
            problems.append("the %s package is not installed" % name)
        elif wanted and not version_matches(package["version"], wanted):
            problems.append("%s is at %s, not %s" % (name, package["version"], wanted))
    locks = versionlocked(system)
    held = sorted(n for n, p in found.items()
                  if p["held"] or (locks is not None and _locked(locks, n)))
    if expect.get("held"):
        for name in names:
            if name in found and name not in held:
                problems.append("%s is not held at its version" % name)

    pin_version = None
    pin_file = settings.get("pin_file")
    if pin_file:
        text = _read(system, pin_file)
        match = _PIN.search(text or "")
        pin_version = match.group(1) if match else None
        if wanted and text is None:
            problems.append("the version pin %s is missing" % pin_file)
        elif wanted and not (pin_version and version_matches(pin_version.rstrip("*"), wanted)):
            problems.append("%s pins %s, not %s" % (pin_file, pin_version, wanted))

    service = settings.get("service") or SERVICE
    active, enabled = unit_state(system, service)
    if enabled != "enabled":
        problems.append("the %s service is %s, not enabled" % (service, enabled))
    if expect.get("service_active") and active != "active":
        problems.append("the %s service is %s, not active" % (service, active))

    watches = None
    dropin = settings.get("dropin")
    wanted_watches = str(settings.get("health_watches") or "")
    if dropin:
        text = _read(system, dropin)
        match = _WATCHES.search(text or "")
        watches = match.group(1) if match else None
        if wanted_watches and text is None:
            problems.append("the %s drop-in that sets the health watches is missing" % dropin)
        elif wanted_watches and watches != wanted_watches:
            problems.append("%s sets the health watches %r, not %r"
                            % (dropin, watches, wanted_watches))

    main = next((found[n]["version"] for n in names if n in found), None)
    return {
        "packages": dict((n, p["version"]) for n, p in found.items()),
        "version": main,
        "held": held,
        "pin_version": pin_version,
        "service": {"name": service, "active": active, "enabled": enabled},
        "health_watches": watches,
    }


def _health_problem(parsed, fail_on):
    limit = HEALTH_LEVELS.get(fail_on)
    health = parsed["health"]
    if limit is None or health is None or HEALTH_LEVELS[health] < limit:
        return None
    said = "; ".join("%s %s: %s" % (i["entity"], i["system"] or "", i["message"])
                     for i in parsed["incidents"] if i["health"] in HEALTH_LEVELS
                     and HEALTH_LEVELS[i["health"]] >= limit)
    return "DCGM reports the GPUs' health as %s%s" % (health, (": " + said) if said else "")


def verify(system: System, params: dict[str, Any]) -> dict[str, Any]:
    settings = params.get("settings") or {}
    expect = params.get("expect") or {}
    fail_on = str(settings.get("fail_on_health") or "none")
    if fail_on != "none" and fail_on not in HEALTH_LEVELS:
        raise CheckError("settings.fail_on_health must be none, warning or failure, not %r"
                         % fail_on)
    problems: list[Any] = []
    facts = _software(system, settings, expect, problems)
    facts.update({"health": None, "health_checked": False, "overall_health": None,
                  "incidents": [], "message": None})
    if params.get("probe_hardware", True):
        parsed, problem = check_health(system, settings.get("group"))
        if problem:
            problems.append(problem)
        elif parsed is not None:
            facts.update({"health": parsed["health"], "health_checked": True,
                          "overall_health": parsed["overall"],
                          "incidents": parsed["incidents"], "message": parsed["message"]})
            if parsed["health"] is None:
                problems.append("dcgmi reports an overall health of %r, which is none of "
                                "Healthy, Warning and Failure" % parsed["overall"])
            else:
                said = _health_problem(parsed, fail_on)
                if said:
                    problems.append(said)
    return result(problems=problems, **facts)
