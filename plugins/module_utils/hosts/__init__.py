# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Hosts becoming ready nodes: what a host has (facts/), whether each component is set up
right (checks/), what dstack needs of an adopted host (preflight), the firewall rules it reads
(firewall_rules), the JSON settings files roles merge into (jsonmerge) and the fabric tests'
results (nccltests parses them, nccltests_compare measures them against published figures).
Pure Python; the modules run it on the hosts.
"""
