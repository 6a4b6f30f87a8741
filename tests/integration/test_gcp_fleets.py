"""A gcp fleet through the gpufleet.cluster.fleet module, as ansible runs it (AnsiballZ in a
subprocess, google-auth with a service-account key), against the local Compute Engine double:
the plan in check mode, the instances, their hosts in the inventory plugin, and delete."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from ansible_collections.gpufleet.cluster.plugins.module_utils.offers import catalog
from .fleet_module import run_fleet_module

from gpufleet._collection import collections_path
from tests.doubles.catalogs import catalog as make_catalog
from tests.doubles.catalogs import machine
from tests.doubles.gce import GceDouble

BIN = Path(sys.executable).parent
REGION = "us-central1"
CATALOG = make_catalog("gcp", machine(
    "g2-standard-4", 4, 16384, ("L4", 24576, 1), REGION, ["us-central1-b"], 0.71, 0.28))


@pytest.fixture(scope="module")
def gcp(tmp_path_factory):
    double = GceDouble()
    base = tmp_path_factory.mktemp("gcp")
    env = dict(os.environ, GOOGLE_APPLICATION_CREDENTIALS=double.credentials_file(
        str(base / "sa.json")), GPUFLEET_GCP_ENDPOINT=double.endpoint,
        GPUFLEET_STATE_DIR=str(base / "state"), ANSIBLE_NOCOLOR="1",
        ANSIBLE_COLLECTIONS_PATH=str(collections_path()), ANSIBLE_LOCALHOST_WARNING="0",
        ANSIBLE_INVENTORY_UNPARSED_WARNING="0",
        ANSIBLE_INVENTORY_ENABLED="gpufleet.cluster.fleet")
    catalog.write(CATALOG, str(base / "state" / "catalog" / "gcp.json"))
    (base / "state" / "backends.yml").write_text(yaml.safe_dump({"gcp": {"regions": [REGION]}}))
    (base / "l4.dstack.yml").write_text(
        "type: fleet\nname: l4\nnodes: 3\nplacement: cluster\nbackends: [gcp]\n"
        "resources:\n  gpu: L4\n")
    yield {"base": base, "env": env, "double": double}
    double.stop()


def module(gcp, *args, check=False):
    return run_fleet_module(gcp["env"], *args, check=check)[0]


def test_a_gcp_fleet_through_the_module_and_the_inventory_plugin(gcp):
    path = "path=" + str(gcp["base"] / "l4.dstack.yml")
    planned = module(gcp, path, check=True)
    assert planned["fleet"]["plan"]["create"] == ["l4-0", "l4-1", "l4-2"]
    assert gcp["double"].mutating() == []

    result = module(gcp, path)
    assert result.get("failed") is not True, result
    assert [(i["name"], i["backend"], i["zone"], i["status"])
            for i in result["fleet"]["instances"]] == [
        ("l4-%d" % n, "gcp", "us-central1-b", "idle") for n in range(3)]
    assert len(gcp["double"].calls("POST", r"/bulkInsert$")) == 1

    proc = subprocess.run([str(BIN / "ansible-inventory"), "-i",
                           str(gcp["base"] / "l4.dstack.yml"), "--graph"],
                          capture_output=True, text=True, env=gcp["env"], check=True)
    assert "@backend_gcp:" in proc.stdout and "--l4-2" in proc.stdout

    removed = module(gcp, path, "state=absent")
    assert removed["changed"] and removed["removed"]["instances"] == ["l4-0", "l4-1", "l4-2"]
    assert gcp["double"].instances == {}
