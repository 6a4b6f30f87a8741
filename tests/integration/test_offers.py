"""``gpufleet offer`` end to end: the console script runs playbooks/offer.yml through
ansible-runner, the module reads the catalogs (a refreshed one in the state dir replaces the
shipped one) and the table comes back. No cloud API and no Docker engine are involved."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from ansible_collections.gpufleet.cluster.plugins.module_utils.offers import catalog

BIN = Path(sys.executable).parent
AWS = {
    "backend": "aws", "as_of": "2026-01-02", "currency": "USD", "source": "test", "notes": [],
    "instance_types": [
        {"name": "g5.xlarge", "cpus": 4, "memory_mib": 16384, "arch": "x86",
         "gpu": {"vendor": "nvidia", "name": "A10G", "memory_mib": 24576, "count": 1},
         "offers": [{"region": "us-east-1", "zones": ["us-east-1a"], "price": 1.006,
                     "spot_price": 0.4}]},
        {"name": "p5.48xlarge", "cpus": 192, "memory_mib": 2097152, "arch": "x86",
         "gpu": {"vendor": "nvidia", "name": "H100", "memory_mib": 81920, "count": 8},
         "offers": [{"region": "us-east-1", "zones": ["us-east-1a"], "price": 55.04,
                     "spot_price": None}]},
    ],
}


@pytest.fixture
def state(tmp_path, monkeypatch):
    monkeypatch.setenv("GPUFLEET_STATE_DIR", str(tmp_path / "state"))
    catalog.write(AWS, str(tmp_path / "state" / "catalog" / "aws.json"))
    return tmp_path


def gpufleet(*args, cwd):
    return subprocess.run([str(BIN / "gpufleet"), *args], capture_output=True, text=True,
                          cwd=cwd, env=dict(os.environ), check=False, timeout=300)


def test_offer_prints_the_table_of_a_fleet_from_the_refreshed_catalog(state):
    (state / "a10g.dstack.yml").write_text(
        "type: fleet\nname: a10g\nnodes: 1\nbackends: [aws]\nspot_policy: auto\n"
        "resources:\n  gpu: A10G\n")
    proc = gpufleet("offer", "-f", "a10g.dstack.yml", cwd=state)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0].split() == ["#", "BACKEND", "REGION", "INSTANCE", "RESOURCES", "SPOT", "PRICE"]
    assert lines[1].split() == ["1", "aws", "us-east-1", "g5.xlarge", "cpu=4", "mem=16GB",
                                "disk=100GB", "gpu=A10G:24GB:1", "yes", "$0.4"]
    assert lines[2].split()[-2:] == ["no", "$1.006"]
    assert lines[-1] == "Shown 2 of 2 offers, $1.006 max"


def test_offer_json_says_where_the_catalogs_came_from_and_a_task_works_too(state):
    (state / "train.dstack.yml").write_text(
        "type: task\nnodes: 2\ncommands: [nvidia-smi]\nresources:\n  gpu: H100:8\n")
    # Without backends, a file goes where a fleet without backends would: with no cloud
    # backend configured, the local backend, which has no offers.
    proc = gpufleet("offer", "-f", "train.dstack.yml", cwd=state)
    assert proc.returncode == 1
    assert "no cloud backend is configured" in proc.stdout + proc.stderr
    # Configured backends are the ones offered, as dstack offers its project's backends.
    (state / "state" / "backends.yml").write_text(
        "aws:\n  regions: [us-east-1]\ngcp:\n  project_id: demo\n")
    proc = gpufleet("offer", "-f", "train.dstack.yml", "--json", cwd=state)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    found = json.loads(proc.stdout)
    assert [o["instance_type"] for o in found["offers"]][0] == "p5.48xlarge"
    assert found["catalogs"]["aws"] == {"source": str(state / "state" / "catalog" / "aws.json"),
                                        "as_of": "2026-01-02"}
    assert found["catalogs"]["gcp"]["source"] == "shipped"
    assert found["total"] == len(found["offers"]) and found["max_price"] >= 55.04


def test_no_offers_exits_1_saying_what_ruled_them_out(state):
    (state / "cheap.dstack.yml").write_text(
        "type: fleet\nname: cheap\nnodes: 1\nbackends: [aws]\nmax_price: 1\n"
        "resources:\n  gpu: H100:8\n")
    proc = gpufleet("offer", "-f", "cheap.dstack.yml", cwd=state)
    assert proc.returncode == 1
    assert proc.stdout.startswith("cheap: no offers; of the catalog's instance types and "
                                  "regions, 1 do not have the resources, 1 cost more than "
                                  "max_price."), proc.stdout


def test_offer_refuses_what_has_no_offers_with_a_clear_message(state):
    (state / "ssh.dstack.yml").write_text(
        "type: fleet\nname: lab\nssh_config:\n  user: ubuntu\n  identity_file: id\n"
        "  hosts: [10.0.0.1]\n")
    (state / "id").write_text("not a real key\n")
    proc = gpufleet("offer", "-f", "ssh.dstack.yml", cwd=state)
    assert proc.returncode == 1
    assert "fleet lab is an SSH fleet (ssh_config): its hosts exist already" in proc.stderr
    assert "Traceback" not in proc.stdout + proc.stderr
    (state / "state" / "catalog" / "aws.json").write_text('{"backend": "aws"}')
    (state / "a.dstack.yml").write_text("type: fleet\nname: aa\nnodes: 1\nbackends: [aws]\n")
    proc = gpufleet("offer", "-f", "a.dstack.yml", cwd=state)
    assert proc.returncode == 1
    assert "aws.json: instance_types: must be a non-empty list" in proc.stderr


def test_offer_keeps_to_the_regions_of_backends_yml(state):
    """As fleet apply launches only in the regions of the backend settings, offer lists only
    the offers there."""
    data = dict(AWS, instance_types=[dict(AWS["instance_types"][0], offers=[
        {"region": "us-east-1", "zones": ["us-east-1a"], "price": 1.006, "spot_price": None},
        {"region": "eu-west-1", "zones": ["eu-west-1a"], "price": 1.2, "spot_price": None}])])
    catalog.write(data, str(state / "state" / "catalog" / "aws.json"))
    (state / "state" / "backends.yml").write_text("aws:\n  regions: [eu-west-1]\n")
    (state / "a10g.dstack.yml").write_text(
        "type: fleet\nname: a10g\nnodes: 1\nbackends: [aws]\nresources:\n  gpu: A10G\n")
    proc = gpufleet("offer", "-f", "a10g.dstack.yml", "--json", cwd=state)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    found = json.loads(proc.stdout)
    assert [o["region"] for o in found["offers"]] == ["eu-west-1"]
    assert found["rejected"] == {"region": 1}
