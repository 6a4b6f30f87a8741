"""An aws fleet through the gpufleet.cluster.fleet module, as ansible runs it (AnsiballZ in a
subprocess), against the local EC2 double: backend settings from backends.yml in the state
dir, a refreshed catalog there, the plan in check mode, instances launched with one
RunInstances, the fleet record and its hosts, a re-apply that changes nothing, and delete."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import boto3
import pytest
import yaml
from ansible_collections.gpufleet.cluster.plugins.module_utils.offers import catalog
from .fleet_module import run_fleet_module

from gpufleet._collection import collections_path
from tests.doubles.catalogs import catalog as make_catalog
from tests.doubles.catalogs import machine
from tests.doubles.ec2 import Ec2Double

BIN = Path(sys.executable).parent
REGION = "us-east-1"
CATALOG = make_catalog("aws", machine(
    "p4d.24xlarge", 96, 1179648, ("A100", 40960, 8), REGION, ["us-east-1b"], 21.96, 9.1))


@pytest.fixture(scope="module")
def aws(tmp_path_factory):
    double = Ec2Double()
    base = tmp_path_factory.mktemp("aws")
    env = dict(os.environ, **double.env())
    env.update(GPUFLEET_STATE_DIR=str(base / "state"), ANSIBLE_NOCOLOR="1",
               ANSIBLE_COLLECTIONS_PATH=str(collections_path()),
               ANSIBLE_LOCALHOST_WARNING="0", ANSIBLE_INVENTORY_UNPARSED_WARNING="0")
    catalog.write(CATALOG, str(base / "state" / "catalog" / "aws.json"))
    with pytest.MonkeyPatch.context() as patch:
        for key, value in double.env().items():
            patch.setenv(key, value)
        image = boto3.client("ec2", region_name=REGION).describe_images(
            Owners=["amazon"], Filters=[{"Name": "architecture", "Values": ["x86_64"]}]
        )["Images"][0]["ImageId"]
    (base / "state" / "backends.yml").write_text(yaml.safe_dump(
        {"aws": {"regions": [REGION], "image_id": image}}))
    (base / "a100.dstack.yml").write_text(
        "type: fleet\nname: a100\nnodes: 2\nplacement: cluster\nbackends: [aws]\n"
        "resources:\n  gpu: A100:8\ntags:\n  team: ml\n")
    yield {"base": base, "env": env, "double": double}
    double.stop()


def module(aws, *args, check=False):
    return run_fleet_module(aws["env"], *args, check=check)


def inventory(aws, config):
    proc = subprocess.run([str(BIN / "ansible-inventory"), "-i", str(config), "--list"],
                          capture_output=True, text=True, check=False, timeout=300,
                          env=dict(aws["env"], ANSIBLE_INVENTORY_ENABLED="gpufleet.cluster.fleet"))
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout, object_hook=_plain)


def _plain(value):
    """ansible-inventory --list writes plugin values as {"__ansible_unsafe": value}."""
    return value["__ansible_unsafe"] if set(value) == {"__ansible_unsafe"} else value


def test_an_aws_fleet_is_planned_launched_kept_and_deleted_by_the_module(aws):
    path = "path=" + str(aws["base"] / "a100.dstack.yml")
    result, _proc = module(aws, path, check=True)
    assert result["changed"] and result["fleet"]["plan"]["create"] == ["a100-0", "a100-1"]
    assert aws["double"].mutating() == []

    result, proc = module(aws, path)
    assert result.get("failed") is not True, proc.stdout
    instances = result["fleet"]["instances"]
    assert [(i["name"], i["backend"], i["instance_type"], i["zone"], i["status"])
            for i in instances] == [("a100-0", "aws", "p4d.24xlarge", "us-east-1b", "idle"),
                                    ("a100-1", "aws", "p4d.24xlarge", "us-east-1b", "idle")]
    actions = [c["action"] for c in aws["double"].mutating()]
    assert actions.count("RunInstances") == 1 and actions.count("AllocateAddress") == 2
    run = aws["double"].calls("RunInstances")[0]["params"]
    assert run["Placement.GroupName"] == "gpufleet-a100"
    assert run["NetworkInterface.1.InterfaceType"] == "efa"
    hosts = dict((h["name"], h) for h in result["hosts"])
    assert hosts["a100-0"]["vars"]["ansible_user"] == "ubuntu"
    assert "backend_aws" in hosts["a100-0"]["groups"]

    aws["double"].clear()
    result, _proc = module(aws, path)
    assert not result["changed"] and result["fleet"]["plan"]["keep"] == ["a100-0", "a100-1"]
    assert aws["double"].mutating() == []

    # The inventory plugin finds the instances by their tags; a warm cache asks EC2 nothing.
    config = aws["base"] / "fleets.gpufleet.yml"
    config.write_text("plugin: gpufleet.cluster.fleet\nfleets: [a100.dstack.yml]\ncache: true\n"
                      "cache_plugin: ansible.builtin.jsonfile\ncache_connection: %s\n"
                      % (aws["base"] / "inventory-cache"))
    listed = inventory(aws, config)
    assert sorted(listed["backend_aws"]["hosts"]) == ["a100-0", "a100-1"]
    assert sorted(listed["cluster"]["hosts"]) == ["a100-0", "a100-1"]
    hostvars = listed["_meta"]["hostvars"]["a100-1"]
    assert hostvars["ansible_user"] == "ubuntu" and hostvars["gpufleet_region"] == REGION
    assert hostvars["gpufleet_instance_type"] == "p4d.24xlarge"
    aws["double"].clear()
    assert inventory(aws, config)["_meta"]["hostvars"]["a100-1"] == hostvars
    assert aws["double"].calls("DescribeInstances") == []

    result, _proc = module(aws, path, "state=absent")
    assert result["changed"] and len(result["removed"]["instances"]) == 2
    assert result["removed"]["placement_groups"] == ["gpufleet-a100"]
    result, _proc = module(aws, path, "state=absent")
    assert not result["changed"]


def test_a_volume_through_the_gpufleet_command(aws):
    path = aws["base"] / "datasets.dstack.yml"
    path.write_text("type: volume\nname: datasets\nbackend: aws\nregion: us-east-1\n"
                    "availability_zone: us-east-1c\nsize: 50GB\n")

    def gpufleet(*args):
        return subprocess.run([str(BIN / "gpufleet"), *args], capture_output=True, text=True,
                              env=aws["env"], check=False, timeout=300)

    made = gpufleet("apply", "-y", "-f", str(path))
    assert made.returncode == 0, made.stdout + made.stderr
    assert made.stdout.startswith("Volume datasets ready: aws us-east-1c 50GB vol-")
    again = gpufleet("apply", "-y", "-f", str(path))
    assert again.returncode == 0 and again.stdout.startswith("Volume datasets exists: ")
    assert len(aws["double"].calls("CreateVolume")) == 1
    gone = gpufleet("delete", "-y", "-f", str(path))
    assert gone.returncode == 0, gone.stdout + gone.stderr
    assert gone.stdout.startswith("Volume datasets deleted: ")
    assert gpufleet("delete", "-y", "-f", str(path)).stdout == \
        "Volume datasets: nothing to delete.\n"
