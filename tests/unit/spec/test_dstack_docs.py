"""Every fleet, task, service and volume example in dstack's documentation is accepted with its
meaning; documentation examples that dstack itself rejects are rejected too
(tests/unit/fixtures)."""

from __future__ import annotations

from pathlib import Path

import pytest
from ansible_collections.gpufleet.cluster.plugins.module_utils import spec

FIXTURES = Path(__file__).parents[1] / "fixtures" / "dstack_docs"
VALID = sorted(FIXTURES.glob("*.dstack.yml"))
REJECTED = sorted((FIXTURES / "invalid").glob("*.yml")) + sorted((FIXTURES / "doc_bugs").glob("*.yml"))


def test_the_fixture_set_is_broad():
    kinds = {p.name.split("-")[0] for p in VALID}
    assert kinds == {"fleet", "service", "task", "volume"}
    assert len(VALID) >= 100 and len(REJECTED) >= 10


@pytest.mark.parametrize("path", VALID, ids=[p.name for p in VALID])
def test_documented_example_is_accepted(path):
    result = spec.validate_file(str(path))
    assert result["ok"], result["errors"]
    assert path.name.startswith(result["config"]["type"] + "-")


@pytest.mark.parametrize("path", REJECTED, ids=[p.name for p in REJECTED])
def test_example_dstack_rejects_is_rejected(path):
    result = spec.validate_file(str(path))
    assert not result["ok"]
    assert all(e["message"] for e in result["errors"])


def _load(name):
    return spec.parse_file(str(FIXTURES / name))[0]


def test_meaning_of_a_few_documented_examples():
    # The canonical NCCL test task: two nodes, MPI ordering, master-done.
    nccl = [p for p in VALID if "nccl" in p.name and p.name.startswith("task-")]
    assert nccl, "an NCCL tests example is expected among the fixtures"
    config = spec.parse_file(str(nccl[0]))[0]
    assert config["nodes"] >= 2
    assert config["startup_order"] == "workers-first"
    assert config["stop_criteria"] == "master-done"

    hotaisle = _load("fleet-ssh-per-host-port-blocks-auto.dstack.yml")
    assert hotaisle["placement"] == "cluster"
    assert [h["blocks"] for h in hotaisle["ssh_config"]["hosts"]] == ["auto", "auto"]
    assert all(h["user"] == "ubuntu" for h in hotaisle["ssh_config"]["hosts"])


def test_meaning_of_a_few_documented_services():
    http = _load("service-misc-http-server.dstack.yml")
    assert (http["port"], http["auth"], http["python"]) == (8000, False, "3.11")
    dash = _load("service-services-12.dstack.yml")
    assert (dash["gateway"], dash["auth"], dash["strip_prefix"], dash["port"]) == (False, False, False, 8050)
    limits = _load("service-services-13.dstack.yml")["rate_limits"]
    assert [(r["prefix"], r["rps"], r["burst"]) for r in limits] == [("/api/auth/", 1.0, 0), ("/", 4.0, 9)]
    by_header = _load("service-services-14.dstack.yml")["rate_limits"][0]["key"]
    assert by_header == {"type": "header", "header": "Authorization"}
    probe = _load("service-services-11.dstack.yml")["probes"][0]
    assert (probe["method"], probe["url"], probe["timeout"], probe["interval"]) == ("post", "/check-health", 20, 15)
    groups = _load("service-services-5.dstack.yml")["groups"]
    assert [g["replicas"] for g in groups] == [{"min": 1, "max": 2}, {"min": 1, "max": 4}]
    model = _load("service-amd-1.dstack.yml")
    assert model["model"]["name"] == "Qwen/Qwen3.6-27B" and model["probes"][0]["url"] == "/v1/chat/completions"
