# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Errors every cloud backend raises, so that fleets/cloud.py handles them alike."""

from __future__ import annotations


class BackendError(Exception):
    """A cloud call or a setting that failed; the message says what and what to do."""


class NoCapacity(BackendError):
    """No offer had capacity; ``attempts`` lists each (offer, zone, error code) tried."""

    def __init__(self, message, attempts):
        super().__init__(message)
        self.attempts = attempts


def no_capacity(fleet, missing, attempts):
    """The NoCapacity of a launch that left ``missing`` instances, naming the attempts."""
    return NoCapacity(
        "fleet %s: no capacity for %d instance(s) in %d offer(s) tried: %s"
        % (fleet, missing, len(attempts), "; ".join(
            "%s %s%s in %s (%s)" % (a["instance_type"], "spot " if a["spot"] else "",
                                    a["region"], a["zone"], a["error"])
            for a in attempts[:10]) or "none matched"), attempts)
