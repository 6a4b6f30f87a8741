# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The gpufleet.cluster.peers_reached filter: a thin wrapper over
plugins/module_utils/hosts/preflight.py, documented in peers_reached.yml beside this file."""

from __future__ import annotations

from ansible.errors import AnsibleFilterError

from ansible_collections.gpufleet.cluster.plugins.module_utils.hosts import preflight


def peers_reached(probed, wanted, self_name=None):
    """Whether a preflight's ``peers`` show every peer of ``wanted`` reached."""
    if not isinstance(probed, list) or not isinstance(wanted, list):
        kinds = (type(probed).__name__, type(wanted).__name__)
        raise AnsibleFilterError(
            "peers_reached: expects the peers a preflight returned and a list of peers "
            "({name, address, port}), got %s and %s" % kinds)
    try:
        return preflight.peers_reached(probed, wanted, self_name)
    except preflight.PreflightError as exc:
        raise AnsibleFilterError("peers_reached: %s" % exc) from exc


class FilterModule:
    """gpufleet.cluster filters over preflight results."""

    def filters(self):
        return {"peers_reached": peers_reached}
