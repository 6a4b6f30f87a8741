# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Fixtures shared by the tests of tasks (the plain helpers are in fakes.py; the fake docker on
PATH, ``docker``, ``absent`` and ``run_root``, is in tests/unit/conftest.py, for tests/unit/repos
uses it too)."""

from __future__ import annotations

import pytest
from ansible_collections.gpufleet.cluster.plugins.module_utils.tasks import (
    growth,
    run_preparation,
    runs,
    surveys,
)

from .fakes import Cluster, eight_cpu_fact


@pytest.fixture
def fake_hosts(monkeypatch, tmp_path):
    """Route runs.Runner to a Cluster's fake hosts; return a function that makes the Runner.
    The state dir is the test's own: the fleets this machine applied are not the test's."""
    monkeypatch.setenv("GPUFLEET_STATE_DIR", str(tmp_path / "state"))
    images = []

    def make(config, fleets, program=None):
        hosts = [i["name"] for f in fleets for i in f["instances"]]
        cluster = Cluster(hosts, program=program)
        monkeypatch.setattr(surveys, "Node", lambda instance, root=None, connect_timeout=20: (
            cluster.nodes[instance["name"]]))
        monkeypatch.setattr(run_preparation, "run_key", lambda: {"private": "PRIVATE", "public": "PUBLIC"})

        def ensure_image(image, nodes, hosts, **kwargs):
            images.append((image, sorted(hosts)))
            runner.known = kwargs.get("known")
            return {h: {"present": True, "entrypoint": None, "cmd": None, "working_dir": None}
                    for h in hosts}

        monkeypatch.setattr(run_preparation, "ensure_image", ensure_image)
        runner = runs.Runner(config, fleets, emit=cluster.emit, clock=cluster.clock,
                             sleep=cluster.sleep, poll=1.0, environ={})
        runner.images = images
        return runner, cluster

    return make


@pytest.fixture
def eight_cpu_local_machine(monkeypatch):
    """A new local node has this machine's resources: here, a fixed 8-CPU one. The modules that
    want it for every test say so with ``pytestmark``."""
    monkeypatch.setattr(growth, "local_machine_fact", lambda blocks=1: eight_cpu_fact(None))
