# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""plugin_utils.run_output.event_text: what gpufleet apply shows of a runner event."""

from __future__ import annotations

from ansible_collections.gpufleet.cluster.plugins.plugin_utils.run_output import event_text


def test_a_published_service_is_shown_as_dstack_apply_shows_it():
    event = {"kind": "service", "run": "svc", "url": "http://h:3000/proxy/services/main/svc/",
             "model_url": "http://h:3000/proxy/models/main/", "model": "tiny"}
    assert event_text(event) == (
        "Service is published at:\n  http://h:3000/proxy/services/main/svc/\n"
        "Model tiny is published at:\n  http://h:3000/proxy/models/main/")
    assert event_text({"kind": "service", "run": "svc", "url": None}) is None
    assert event_text({"kind": "run", "run": "svc", "status": "running"}) == "svc: running"
