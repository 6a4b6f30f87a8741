# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The GPU health probe, on a fleet host: what the tools say, raw, for the controller to judge.

This file travels to the hosts after tasks.hostside.nodeside and tasks.hostside.booking
(tasks.ssh.host_source) and runs in their namespace, so it uses the standard library only and the
Python 3.6+ of any Ansible-managed host. It adds two operations:

- ``status`` with ``{"health": true}`` in its payload answers as before and adds ``health``,
  so a survey that already asks every host for its containers (reconcile, task placement) reads
  the GPUs' health in the same SSH round trip;
- ``health`` answers ``{"health": ...}`` alone (``gpufleet fleet``).

The probe asks DCGM first (``dcgmi health -c -j``, then the table of a dcgmi without ``-j``),
as dstack's shim does; when dcgmi or its host engine is not there, it reads nvidia-smi's error
counters (ECC, retired pages, remapped rows) and the NVIDIA XID lines of the kernel log. Nothing
is parsed or judged here: hosts.health does that on the controller, where it is tested.
"""

import os

try:  # imported as part of the collection (tests, the controller)
    from .booking import BOOK_OPS
except ImportError:  # on a host: nodeside's and booking's sources run first in this namespace
    pass

TOOL_TIMEOUT = 20
KEEP_OUT = 20000
KEEP_XID_LINES = 100
# nvidia-smi's counters that DCGM's memory health watch reads (hosts.health judges them).
GPU_FIELDS = ("index,pci.bus_id,ecc.errors.uncorrected.volatile.total,retired_pages.pending,"
              "retired_pages.single_bit_ecc.count,retired_pages.double_bit.count")
REMAP_FIELDS = "gpu_bus_id,remapped_rows.pending,remapped_rows.failure"
OVERALL = "Overall Health"
SEARCH_PATH = ("/usr/local/sbin", "/usr/local/bin", "/usr/sbin", "/usr/bin", "/sbin", "/bin")


def _which(name):
    folders = (os.environ.get("PATH") or "").split(os.pathsep) + list(SEARCH_PATH)
    for folder in folders:
        path = os.path.join(folder, name)
        if folder and os.path.isfile(path) and os.access(path, os.X_OK):
            return path
    return None


def _tool(argv):
    """``{"argv", "rc", "out", "err"}`` of a command; rc None when it did not finish."""
    import subprocess   # here, not at the top: the host helper runs that for every request

    found = {"argv": [os.path.basename(argv[0])] + list(argv[1:])}
    try:
        proc = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              timeout=TOOL_TIMEOUT, check=False)
    except subprocess.TimeoutExpired:
        found.update(rc=None, out="", err="no answer within %d s" % TOOL_TIMEOUT)
        return found
    except OSError as exc:
        found.update(rc=None, out="", err=str(exc))
        return found
    found.update(rc=proc.returncode, out=proc.stdout.decode("utf-8", "replace")[-KEEP_OUT:],
                 err=proc.stderr.decode("utf-8", "replace")[-2000:])
    return found


def _dcgm_answered(found):
    return found["rc"] == 0 and OVERALL in found["out"]


def _xid_lines():
    """The kernel log's ``NVRM: Xid`` lines of this boot (dmesg, else journalctl), the last
    ``KEEP_XID_LINES``; None when neither could be read."""
    for argv in (["dmesg"], ["journalctl", "-k", "-b", "-q", "--no-pager"]):
        path = _which(argv[0])
        if not path:
            continue
        found = _tool([path] + argv[1:])
        if found["rc"] == 0:
            lines = [line for line in found["out"].splitlines() if "NVRM: Xid" in line]
            return lines[-KEEP_XID_LINES:]
    return None


def probe_health():
    """What the host's tools say about its GPUs: ``{"dcgmi": {...}}`` when DCGM answered, else
    ``{"dcgmi": {...} or absent, "nvidia_smi": {...}, "remapped_rows": {...}, "xid": [lines]}``;
    ``{}`` on a host with neither dcgmi nor nvidia-smi."""
    found = {}
    dcgmi = _which("dcgmi")
    if dcgmi:
        answer = _tool([dcgmi, "health", "-c", "-j"])
        if not _dcgm_answered(answer):
            table = _tool([dcgmi, "health", "-c"])  # a dcgmi that does not take -j
            if _dcgm_answered(table):
                answer = table
        found["dcgmi"] = answer
        if _dcgm_answered(answer):
            return found
    nvidia_smi = _which("nvidia-smi")
    if nvidia_smi:
        found["nvidia_smi"] = _tool([nvidia_smi, "--query-gpu=" + GPU_FIELDS,
                                     "--format=csv,nounits"])
        found["remapped_rows"] = _tool([nvidia_smi, "--query-remapped-rows=" + REMAP_FIELDS,
                                        "--format=csv,nounits"])
        found["xid"] = _xid_lines()
    return found


def op_health(_payload):
    return {"health": probe_health()}


_STATUS_BEFORE_HEALTH = BOOK_OPS["status"]


def op_status_health(payload):
    answer = _STATUS_BEFORE_HEALTH(payload)
    if payload.get("health"):
        answer["health"] = probe_health()
    return answer


BOOK_OPS.update({
    "status": op_status_health,
    "health": op_health,
})
