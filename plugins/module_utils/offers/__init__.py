# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Offers: what a host or a cloud instance type gives a job, and which of them a config takes.

match.py is the matcher (resources spec against an offer); catalog.py reads the shipped
catalogs of cloud GPU instance types; select.py turns a fleet or task config into the offers it
would take, cheapest first; refresh.py rebuilds a catalog from the cloud's APIs.
"""
