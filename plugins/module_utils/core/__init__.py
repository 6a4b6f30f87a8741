# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""What every other package stands on: the root error (errors), time parsing (times) and the one
runner that turns module_utils errors into a module's failure (module). Nothing here imports
another package of module_utils.
"""
