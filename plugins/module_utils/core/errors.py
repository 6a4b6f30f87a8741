# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The root of every error module_utils raises on purpose.

Each package keeps its own error classes (SpecError, StateError, BackendError, ...), so a caller
can still tell them apart; all of them derive from ``GpufleetError``, so a module, plugin or the
``gpufleet`` command catches one class instead of a tuple of every package's errors. An error
made from another keeps it as ``__cause__`` (``raise X(...) from exc``).

Pure Python, no Ansible imports. The files sent to the hosts alone (tasks/hostside/, whose error
class is engineside's ``Failure``) and tasks/hostside/wrapper.py are the exception.
"""

from __future__ import annotations


class GpufleetError(Exception):
    """An error whose message is meant for the user: it names what is wrong and what to do."""
