# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The text form of records: the fleet, run and offer tables and plan lines that the gpufleet
command, the filter plugins and the playbook summaries print. The only package that makes text
for people; pure logic elsewhere never imports it.
"""
