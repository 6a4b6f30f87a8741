# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""A task's code (``repos``): what a local repo ships (repos.local), its id as dstack computes
it (repos.ids), and getting the archive onto the run's hosts (repos.ship)."""
