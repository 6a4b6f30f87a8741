# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Services (``type: service``): replicas the task runner places, published behind a proxy
that Ansible configures on a host, with no server. What a route is and where it is published
(``records``), the users' tokens (``tokens``), and the service runs' own steps on top of the
runner. The proxy's host side (its configuration, rendered and reloaded under the host's lock)
is ``tasks/hostside/proxyside.py``, sent with the host helper.
"""
