# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Network volumes (``type: volume``): made, found and removed in the clouds (cloud), and at
task time attached to the hosts a run is placed on and mounted there (attach).
"""
