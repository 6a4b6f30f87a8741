# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""What runs on the fleet hosts, not on the controller: the helper's parts (nodeside first, then
the parts sent with it, in tasks.ssh.host_source's order), each the standard library only, and
the job wrapper each task container runs. Nothing here imports the rest of the collection."""
