# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Shared ``attributes`` documentation for gpufleet.cluster modules.

Modules extend ``gpufleet.cluster.attributes`` (what each attribute means) and then one of the
variants below (how the module supports it).
"""

from __future__ import annotations


class ModuleDocFragment:

    # What the attributes mean; every module extends this one.
    DOCUMENTATION = r"""
options: {}
attributes:
  check_mode:
    description:
      - Can run in check mode, reporting what would change without changing anything.
  diff_mode:
    description:
      - Can show what changed (or, in check mode, what would change) when run with C(--diff).
  idempotent:
    description:
      - Running it again with the same arguments, right after a run outside check mode,
        reports no change and changes nothing.
"""

    # For modules that only read (the *_info modules).
    INFO_MODULE = r"""
options: {}
attributes:
  check_mode:
    support: full
    details:
      - The module only reads, so check mode changes nothing about what it does or returns.
  diff_mode:
    support: none
    details:
      - There is nothing to show a difference for; the module never changes anything.
  idempotent:
    support: full
"""

    # For modules in the gpufleet action group (meta/runtime.yml).
    ACTION_GROUP = r"""
options: {}
attributes:
  action_group:
    description:
      - Part of the C(gpufleet.cluster.gpufleet) action group, so defaults for it can be set with
        C(module_defaults) under C(group/gpufleet.cluster.gpufleet).
    support: full
    membership:
      - gpufleet.cluster.gpufleet
"""

    # For modules that have an action plugin (plugins/action/).
    ACTION_PLUGIN = r"""
options: {}
attributes:
  action:
    description:
      - Has an action plugin, which runs on the controller before (or, where the module says
        so, instead of) the module.
    support: full
"""
