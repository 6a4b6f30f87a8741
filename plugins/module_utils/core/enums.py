# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The base of gpufleet's status enums: members that are their string.

A status enum (fleets.status.InstanceStatus, tasks.lifecycle.JobStatus and RunStatus) names the
words a record, a container label or a JSON answer holds, and carries the predicates on them
(``is_finished()``, ``is_available()``...). Its members compare equal to those words and hash
like them, so a record's plain string is tested with ``value in X.finished_statuses()`` and a
member with ``member.is_finished()``. Records keep plain strings: a producer writes
``X.MEMBER.value``, never the member, so what YAML, JSON and Ansible store does not change.
A member printed in a message reads as its word (``idle``), not as ``InstanceStatus.IDLE``.
"""

from __future__ import annotations

from enum import Enum


class StrEnum(str, Enum):
    """A ``str`` enum whose members print as their value."""

    def __str__(self):
        return str(self.value)

    def __format__(self, format_spec):
        return format(str(self.value), format_spec)
