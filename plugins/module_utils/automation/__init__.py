# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Automation without a server: what makes runs start, wait or end besides their own
configuration. ``dependencies``: a run that waits for others to end (``--after``, Slurm's
``--dependency``), judged from the run records and queue entries every pass over the queue
reads; the queue (tasks.queue) asks through the gate it is handed (``dependencies.gate``).
"""
