# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Reaching a run from the controller, as ``dstack attach`` does: SSH aliases for its jobs
(sshconfig, hosts), its ``ports`` forwarded to localhost (ports, tunnel), and the module entry
that puts them together (session)."""
