# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""A host as services/ reach it: a node whose host helper answers from a table."""

from __future__ import annotations

import contextlib

from ansible_collections.gpufleet.cluster.plugins.module_utils.tasks.ssh import NodeError

from ..tasks.fakes import fleet_of_instances


class FakeNode(object):
    """``call(op, payload)`` answers ``answers[op]`` (a value, or a function of the payload;
    a NodeError is raised), and records every call."""

    def __init__(self, name, **answers):
        self.name = name
        self.answers = answers
        self.calls = []

    def call(self, op, payload=None, timeout=120):
        self.calls.append((op, payload))
        answer = self.answers.get(op, {})
        if isinstance(answer, NodeError):
            raise answer
        return answer(payload) if callable(answer) else answer

    def ops(self):
        return [op for op, _payload in self.calls]


def replica_entry(num, host_port, state="running", submission=0, address="172.17.0.5",
                  port=8000):
    """A replica's entry in a host's ``status`` answer (tasks.hostside.nodeside)."""
    return {"name": "svc-0-%d" % num, "state": state, "address": address,
            "labels": {"gpufleet.run": "svc", "gpufleet.job": str(num),
                       "gpufleet.submission": str(submission)},
            "published": {"%d/tcp" % port: host_port} if host_port else {}}


class StoreFake(object):
    """The controller's secrets store as services.tokens uses it: read, write, locked."""

    def __init__(self):
        self.values = {}

    @contextlib.contextmanager
    def locked(self):
        yield

    def read(self):
        return dict(self.values)

    def write(self, values):
        self.values = dict(values)


# A normalized service config, and the fleets it runs on (b: two hosts, c: one).
SERVICE = {"type": "service", "name": "svc", "commands": ["python3 -m http.server 8000"],
           "port": 8000, "replicas": {"min": 2, "max": 2}, "groups": None, "scaling": None,
           "model": {"type": "chat", "name": "tiny", "format": "openai", "prefix": "/v1"},
           "auth": True, "https": None, "gateway": None, "strip_prefix": True,
           "rate_limits": [], "probes": [], "fleets": ["b"], "nodes": 1, "ports": []}


def fleets():
    """Fleet b's first host has no internal address (its hostname is used)."""
    found = [fleet_of_instances("b", 2, internal_ip=None, port=22, user="root"),
             fleet_of_instances("c", 1, internal_ip="10.9.0.2", port=22, user="root")]
    found[0]["instances"][1]["internal_ip"] = "10.1.0.3"
    return found
