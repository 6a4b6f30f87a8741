# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Does a host role apply to this host, and what state did it leave the host in?

Every host role of gpufleet.cluster (docker, nvidia, amd, efa, infiniband, gcp_gpudirect,
firewall, dcgm) starts by asking ``detect`` whether it applies (so a playbook can apply them all
to a mixed fleet) and ends by asking ``verify`` for structured facts about what it set up. The
gpufleet.cluster.node_check module is the Ansible side; the logic is here, one file per
component, each with two functions:

``detect(system, options) -> Detection``
    whether the component applies to the host, and why (or why not), read without changing it.
``verify(system, options) -> dict``
    the component's facts, with ``ok`` (bool) and ``problems`` (list of sentences) among them.

``system`` is a ``NodeSystem`` (commands, files, HTTP); tests give them a fake one. The
module imports each component by name (Ansible ships a module only the code it imports by
name), so a new component is added there too.

PRIVATE to gpufleet.cluster.
"""

from __future__ import annotations

# Absolute: ansible-test's pylint does not follow a relative import three levels up.
from ansible_collections.gpufleet.cluster.plugins.module_utils.core.errors import GpufleetError
from typing import Any, Iterable

COMPONENTS = (
    "docker", "nvidia", "amd", "efa", "infiniband", "gcp_gpudirect", "firewall", "dcgm",
)


class CheckError(GpufleetError):
    """The check itself could not be made (a tool's output was unreadable, bad options)."""


class Detection:
    """Whether a component applies to a host: ``applies`` (bool), ``reason`` (one sentence,
    for the log and the fleet summary) and ``details`` (what detection found, a dict)."""

    def __init__(self, applies, reason, details=None):
        self.applies = bool(applies)
        self.reason = reason
        self.details = details or {}

    def as_dict(self) -> dict[str, Any]:
        return {"applies": self.applies, "reason": self.reason, "details": self.details}


def result(ok: bool | None = None, problems: Iterable[str] | None = None,
           **facts: Any) -> dict[str, Any]:
    """A verification result: the facts plus ``ok`` and ``problems``.

    ``ok`` defaults to "no problems"."""
    problems = list(problems or [])
    facts["problems"] = problems
    facts["ok"] = (not problems) if ok is None else bool(ok)
    return facts
