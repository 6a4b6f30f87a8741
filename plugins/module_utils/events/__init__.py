# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Events: what happened to runs, jobs, fleets, instances and members, as the hosts record it.

There is no server to write an audit table, so each host keeps an append-only record of what
happened on it (tasks.hostside.eventside): the facts its jobs' folders and queue already hold,
turned into events with the moment each happened, and the changes controllers send it (a
fleet applied, a member granted). ``records`` holds the shape of one event, its kinds and the
words dstack's messages use; ``query`` the filters of ``gpufleet event`` (dstack's
``--within-*``, ``--target-*``, ``--since``). Reading the hosts and the run statuses derived
from the jobs' events are the task runner's (tasks.eventlog), which asks the hosts.
"""
