# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Shared options of the task runner's modules: where the fleets come from. Their O(state_dir)
is documented by the ``gpufleet.cluster.state`` fragment, which they extend too."""

from __future__ import annotations


class ModuleDocFragment:

    DOCUMENTATION = r"""
options:
  fleets:
    description:
      - dstack fleet files whose hosts the runs may use or live on (SSH fleets are known only
        through their files).
      - Fleets the backends hold (the C(local) backend's labelled node containers) are always
        found as well, without their files, and so are the fleets this controller applied,
        whose files it remembers in O(state_dir).
    type: list
    elements: path
    default: []
notes:
  - Host facts cached in O(state_dir) by C(playbooks/fleet.yml) are what task placement matches
    resources against.
  - "Runs on the controller (C(delegate_to: localhost), or a play on C(localhost)) and reaches
    the fleets' hosts over SSH with the connection settings the inventory plugin gives them,
    keeping one shared connection per host (OpenSSH C(ControlMaster))."
  - A run's only record is its containers' labels and each job's state folder on its host
    (C(/var/lib/gpufleet/runs)); nothing is kept on the controller.
"""
