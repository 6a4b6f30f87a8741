# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Network volumes (``type: volume``): made, found and removed in the clouds (provision), and
at task time attached to the hosts a run is placed on (attach) and bound into each job's
container where the host mounts them (mounts).
"""
