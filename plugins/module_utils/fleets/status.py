# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""An instance's status (the ``status`` of an instance record, docs/fleets.md) and what each
status means to the code that reads it.

The backends map their own states onto these words (backends/*_layout.py, backends/local.py),
an SSH fleet's hosts get theirs from the fleet's checks (fleets/report.py), and ``busy`` is set
where a task holds an idle instance. Every question about a status is one predicate here, so no
module keeps its own list of words. A record holds the plain string; ``value in
InstanceStatus.X_statuses()`` is false for a missing or unknown status, as it was for the
tuples these replace.
"""

from __future__ import annotations

from ..core.enums import StrEnum


class InstanceStatus(StrEnum):
    PENDING = "pending"
    PROVISIONING = "provisioning"
    IDLE = "idle"
    BUSY = "busy"
    STOPPED = "stopped"
    UNREACHABLE = "unreachable"
    FAILED = "failed"
    TERMINATING = "terminating"
    TERMINATED = "terminated"

    @classmethod
    def available_statuses(cls):
        """Idle or busy: it can take a job (dstack schedules only these)."""
        return (cls.IDLE, cls.BUSY)

    @classmethod
    def unavailable_statuses(cls):
        """Every other known status: placement rules the instance out."""
        return tuple(s for s in cls if s not in cls.available_statuses())

    @classmethod
    def starting_statuses(cls):
        """Pending or provisioning: made, not yet checked and measured."""
        return (cls.PENDING, cls.PROVISIONING)

    @classmethod
    def finished_statuses(cls):
        """Terminating or terminated: removed, or on its way out."""
        return (cls.TERMINATING, cls.TERMINATED)

    @classmethod
    def lost_statuses(cls):
        """Finished or failed: it no longer counts toward the fleet's ``nodes`` (an apply
        replaces it)."""
        return cls.finished_statuses() + (cls.FAILED,)

    @classmethod
    def gone_statuses(cls):
        """Lost or stopped: the backend says its host will not answer again on its own, so a
        job on a host that does not answer is not waited for."""
        return (cls.STOPPED,) + cls.lost_statuses()

    @classmethod
    def absent_statuses(cls):
        """Every known status but idle, busy and unreachable: the backend says its machine is
        not there (yet, or any more), the same for every controller."""
        return cls.starting_statuses() + cls.gone_statuses()

    @classmethod
    def hostless_statuses(cls):
        """Provisioning, stopped, terminating or terminated: it has no host to ask, yet or any
        more."""
        return (cls.PROVISIONING, cls.STOPPED) + cls.finished_statuses()

    @classmethod
    def broken_statuses(cls):
        """Unreachable or failed: it was meant to be ready and is not."""
        return (cls.UNREACHABLE, cls.FAILED)

    @classmethod
    def active_statuses(cls):
        """Available or starting: it keeps its fleet ``active``."""
        return cls.available_statuses() + cls.starting_statuses()

    def is_available(self):
        return self in self.available_statuses()

    def is_unavailable(self):
        return self in self.unavailable_statuses()

    def is_starting(self):
        return self in self.starting_statuses()

    def is_finished(self):
        return self in self.finished_statuses()

    def is_lost(self):
        return self in self.lost_statuses()

    def is_gone(self):
        return self in self.gone_statuses()

    def is_absent(self):
        return self in self.absent_statuses()

    def is_hostless(self):
        return self in self.hostless_statuses()

    def is_broken(self):
        return self in self.broken_statuses()

    def is_active(self):
        return self in self.active_statuses()
