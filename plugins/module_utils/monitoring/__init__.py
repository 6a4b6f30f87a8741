# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Observing a fleet: the Prometheus file_sd target files made from the fleet's hosts
(targets). Pure Python; the prometheus_targets module writes what it computes.
"""
