# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Backends that provision fleet nodes: one module per backend (local, aws, gcp), each a client
class keeping interface.py's contract; base.py registers them, picks a fleet's backend
(``select``) and makes clients (``client``); errors.py holds their errors."""
