# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The errors shared by several modules of the task runner.

The rank plan is made by tasks.rankplan from its parts (tasks.environment, tasks.command,
tasks.container), and a run is carried by tasks.runs with tasks.images and tasks.listing; each
group raises one error class, defined here so that no part has to import the module that
composes it. Errors of a single module (NodeError, PlacementError, ActionError) stay in it.
"""

from __future__ import annotations

from ..core.errors import GpufleetError


class PlanError(GpufleetError):
    """The run cannot be planned; the message names the field, the value and what to do."""


class RunError(GpufleetError):
    """The run cannot be submitted or acted on; the message says why and what to do."""


class NeedsInstances(RunError):
    """The run fits only once a backend fleet grows (tasks.growth): ``create`` says which fleet,
    by how many instances, and ``plan`` is the placement on the grown fleet."""

    def __init__(self, create, plan):
        super(NeedsInstances, self).__init__(
            "fleet %s needs %d more instance%s for this run" % (
                create["fleet"], create["instances"], "" if create["instances"] == 1 else "s"))
        self.create = create
        self.plan = plan
