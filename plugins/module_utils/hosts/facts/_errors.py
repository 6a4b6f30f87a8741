# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The one exception family of the host facts code.

PRIVATE to gpufleet.cluster: the public surface is the ``hostfacts`` package.
"""

from __future__ import annotations

import json

# Absolute: ansible-test's pylint does not follow a relative import three levels up.
from ansible_collections.gpufleet.cluster.plugins.module_utils.core.errors import GpufleetError

# How much of an offending piece of tool output a message quotes.
EXCERPT_LIMIT = 120


def excerpt(text: object, limit: int = EXCERPT_LIMIT) -> str:
    """Quote ``text`` on one line, cut to ``limit`` characters, for use inside a message."""
    text = str(text)
    if len(text) > limit:
        text = text[:limit] + "..."
    return json.dumps(text)


class HostFactsError(GpufleetError):
    """A host whose facts cannot be stated: bad tool output, an option that does not fit the
    host, or a host that breaks a rule dstack enforces (one GPU vendor, divisible blocks...).

    The message is complete and fit to show to a user as it is.
    """


class ToolOutputError(HostFactsError):
    """Output of a GPU tool (nvidia-smi, amd-smi, hl-smi, tt-smi) that cannot be read."""

    def __init__(self, tool, problem, line=None):
        self.tool = tool
        self.problem = problem
        self.line = line
        where = "%s output" % tool if line is None else "%s output, line %d" % (tool, line)
        super().__init__("%s: %s" % (where, problem))
