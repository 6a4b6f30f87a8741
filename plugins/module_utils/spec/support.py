# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""What gpufleet does with a valid dstack configuration: the one verdict ``gpufleet validate``,
``config_info`` and ``apply`` share.

A file dstack accepts parses (spec.loader); some of what it asks for gpufleet cannot do. Those
are *refusals*: ``validate`` reports them as the file's problems and ``apply`` stops on the same
message before anything runs (tasks.runs raises them). Fields gpufleet accepts without acting
on them get a *note*, a warning naming the field and why. Pure functions over a normalized
configuration.
"""

from __future__ import annotations

from ._errors import Problem

SCHEDULE = ("gpufleet has no server to start runs on a schedule; remove it and run gpufleet "
            "apply (or playbooks/task.yml) from cron or an AWX schedule")


def refusals(config):
    """Problems that stop ``apply`` of this configuration (an empty list when it can run)."""
    out = []
    if config.get("type") not in ("task", "dev-environment"):
        return out
    if config.get("schedule"):
        out.append(Problem(("schedule",), SCHEDULE))
    return out


def notes(config):
    """Warnings for fields gpufleet accepts but does not act on."""
    out = []
    if config.get("type") not in ("task", "dev-environment"):
        return out
    if config.get("utilization_policy"):
        out.append(Problem(("utilization_policy",), "not enforced by gpufleet"))
    if config.get("dstack"):
        out.append(Problem(("dstack",), "there is no dstack server socket to expose"))
    return out
