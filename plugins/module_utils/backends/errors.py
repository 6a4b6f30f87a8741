# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The errors the backends raise, so that the fleets, volumes and tasks that call them handle
every backend alike. Each derives from core.errors.GpufleetError.

The local backend's own errors (DockerError in docker_cli.py, BuildError and FleetError in
local.py) stay beside the code that raises them; the helpers the cloud backends share are in
cloud_common.py.
"""

from __future__ import annotations

from ..core.errors import GpufleetError


class BackendError(GpufleetError):
    """A cloud call or a setting that failed; the message says what and what to do."""


class UnsupportedBackend(BackendError):
    """No backend that gpufleet provisions is named in a fleet's ``backends``
    (backends.base.select), or a client was asked for a backend that has none."""


class NoCapacity(BackendError):
    """No offer had capacity; ``attempts`` lists each (offer, zone, error code) tried."""

    def __init__(self, message, attempts):
        super().__init__(message)
        self.attempts = attempts


class CapacityError(GpufleetError):
    """One launch found no capacity (or quota) in its zone; ``code`` is the cloud's word."""

    def __init__(self, code):
        super().__init__(code)
        self.code = code


class LayoutError(GpufleetError):
    """A launch that cannot be laid out as asked (say, EFA without a subnet, or too few RoCE
    subnets); the message says what to set. Raised by aws_layout.py and gcp_layout.py."""
