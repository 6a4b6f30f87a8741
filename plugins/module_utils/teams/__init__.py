# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Teams: who a controller is (identity), who may use a fleet (members, roles and limits).

A fleet is shared by the people whose keys its hosts hold. There is no server: a fleet's
membership lives on its hosts (tasks/hostside/memberside.py keeps it there), and the backend's
labels or tags carry each member's key fingerprint so that a controller can tell, without
trying SSH, whether it may reach a fleet (fleets/access.py).
"""
