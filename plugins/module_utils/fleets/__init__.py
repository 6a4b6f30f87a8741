# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Fleets as hosts: names, instance plans, instance records and their Ansible host variables.

Pure Python shared by the ``fleet`` module, the ``fleet`` inventory plugin and the playbooks,
so that a fleet becomes the same hosts with the same variables whichever way it is read.
"""
