"""Network volumes at task time (volumes/attach.py), against the EC2 double: each job's volume,
named per node, attached to its own instance, then mounted by the host (a recording stand-in
for the node-side helper, whose mount is tested on a real loop device elsewhere)."""

from __future__ import annotations

import boto3
import pytest
from ansible_collections.gpufleet.cluster.plugins.module_utils.volumes import provision as cloud_volumes
from ansible_collections.gpufleet.cluster.plugins.module_utils.backends.aws import (
    Aws,
    instance_records,
)
from ansible_collections.gpufleet.cluster.plugins.module_utils.spec import parse_data
from ansible_collections.gpufleet.cluster.plugins.module_utils.volumes import attach as volumes

from tests.doubles.ec2 import Ec2Double

from ..configs import task

pytestmark = pytest.mark.cloud


class RecordingNode:
    def __init__(self, instance):
        self.instance = instance
        self.calls = []

    def call(self, op, payload):
        self.calls.append((op, payload))
        return {"device": payload["devices"][1], "mountpoint": "/mnt/disks/dstack-volumes/"
                + payload["name"], "formatted": True, "mounted": True}


@pytest.fixture
def aws_nodes(monkeypatch):
    """Two EC2 instances of fleet t as task nodes that record the host calls, with the Aws
    client and the EC2 double."""
    # (moto keeps its state per process: names here are unique to this file)
    double = Ec2Double()
    for key, value in double.env().items():
        monkeypatch.setenv(key, value)
    aws = Aws({}, poll=0.05)
    ec2 = boto3.client("ec2", region_name="us-east-1")
    image = ec2.describe_images(Owners=["amazon"], Filters=[
        {"Name": "architecture", "Values": ["x86_64"]}])["Images"][0]["ImageId"]
    launched = ec2.run_instances(
        ImageId=image, MinCount=2, MaxCount=2, InstanceType="g5.xlarge",
        Placement={"AvailabilityZone": "us-east-1a"},
        TagSpecifications=[{"ResourceType": "instance", "Tags": [
            {"Key": "gpufleet:fleet", "Value": "t"}, {"Key": "gpufleet:nums", "Value": "0,1"}]}],
    )["Instances"]
    records = instance_records([("us-east-1", i) for i in launched], "t", "/k")
    nodes = dict((r["name"], RecordingNode(r)) for r in records)
    yield {"double": double, "aws": aws, "nodes": nodes}
    double.stop()


def two_node_task(volumes_field):
    """A task of 2 nodes with ``volumes`` (tests/unit/configs.py)."""
    return task(nodes=2, commands=["true"], volumes=volumes_field)


PLACED = {"jobs": [{"host": "t-0", "job_num": 0}, {"host": "t-1", "job_num": 1}]}
RUN = {"name": "r", "id": "x", "submission": 0, "submitted_at": None}


def make(aws_nodes, name):
    cloud_volumes.apply(parse_data({"type": "volume", "name": name, "backend": "aws",
                                    "region": "us-east-1", "availability_zone": "us-east-1a",
                                    "size": "10GB"})[0], name, client=aws_nodes["aws"])


def test_each_node_gets_its_own_volume_attached_and_mounted(aws_nodes):
    make(aws_nodes, "rank-0")
    make(aws_nodes, "rank-1")
    done = volumes.attach_and_mount(two_node_task(["rank-${{ dstack.node_rank }}:/data"]), PLACED,
                                    RUN, aws_nodes["nodes"], {"aws": aws_nodes["aws"]})
    assert sorted(done) == ["t-0", "t-1"]
    attached = dict((c["params"]["VolumeId"], c["params"]["InstanceId"])
                    for c in aws_nodes["double"].calls("AttachVolume"))
    by_name = dict((n, aws_nodes["aws"].volume(n, "us-east-1")) for n in ("rank-0", "rank-1"))
    assert attached == {by_name["rank-0"]["VolumeId"]: aws_nodes["nodes"]["t-0"].instance[
        "instance_id"], by_name["rank-1"]["VolumeId"]: aws_nodes["nodes"]["t-1"].instance[
        "instance_id"]}
    op, payload = aws_nodes["nodes"]["t-1"].calls[0]
    assert op == "mount_volume" and payload["name"] == "rank-1"
    assert payload["devices"][0].startswith("/dev/disk/by-id/nvme-Amazon_Elastic_Block_Store_vol")
    # A second submission finds them attached already: nothing new is attached.
    volumes.attach_and_mount(two_node_task(["rank-${{ dstack.node_rank }}:/data"]), PLACED, RUN,
                             aws_nodes["nodes"], {"aws": aws_nodes["aws"]})
    assert len(aws_nodes["double"].calls("AttachVolume")) == 2


def test_a_missing_or_busy_volume_and_a_non_cloud_host_are_refused(aws_nodes):
    with pytest.raises(volumes.VolumeError, match=r"network volume never-0 was not found in "
                                                  r"us-east-1 \(aws\): create it first"):
        volumes.attach_and_mount(two_node_task(["never-${{ dstack.node_rank }}:/data"]), PLACED,
                                 RUN, aws_nodes["nodes"], {"aws": aws_nodes["aws"]})
    make(aws_nodes, "shared")
    with pytest.raises(volumes.VolumeError, match=r"volume shared \(vol-\w+\) is attached to "
                                                  r"i-\w+: stop the runs that use it there"):
        volumes.attach_and_mount(two_node_task(["shared:/data"]), PLACED, RUN, aws_nodes["nodes"],
                                 {"aws": aws_nodes["aws"]})
    aws_nodes["nodes"]["t-0"].instance["backend"] = "ssh"
    with pytest.raises(volumes.VolumeError, match="job 0 runs on t-0, a ssh host; network "
                                                  "volumes attach to local nodes and aws and gcp "
                                                  "instances only"):
        volumes.attach_and_mount(two_node_task(["other:/data"]), PLACED, RUN, aws_nodes["nodes"],
                                 {"aws": aws_nodes["aws"]})
    # Instance volumes need nothing attached.
    assert volumes.attach_and_mount(two_node_task(["/srv/data:/data"]), PLACED, RUN,
                                    aws_nodes["nodes"], {}) == {}


def test_a_run_is_steered_to_where_its_first_jobs_volumes_are(aws_nodes):
    for name, zone in (("steer-0", "us-east-1b"), ("steer-1", "us-east-1c")):
        cloud_volumes.apply(parse_data({"type": "volume", "name": name, "backend": "aws",
                                        "region": "us-east-1", "availability_zone": zone,
                                        "size": "10GB"})[0], name, client=aws_nodes["aws"])
    config = two_node_task(["steer-${{ dstack.node_rank }}:/data"])
    where = volumes.locate(config, RUN, {"aws": aws_nodes["aws"]}, {"aws": ["us-west-2",
                                                                            "us-east-1"]})
    assert where == {"backend": "aws", "region": "us-east-1", "zone": "us-east-1b"}
    steered = volumes.steer(config, where)
    assert (steered["backends"], steered["regions"], steered["availability_zones"]) == \
        (["aws"], ["us-east-1"], ["us-east-1b"])
    with pytest.raises(volumes.VolumeError, match="network volume nowhere-0 was not found in "
                                                  "any region of the aws backend settings"):
        volumes.locate(two_node_task(["nowhere-${{ dstack.node_rank }}:/d"]), RUN,
                       {"aws": aws_nodes["aws"]}, {"aws": ["us-east-1"]})
    assert volumes.locate(two_node_task(["/srv:/d"]), RUN, {"aws": aws_nodes["aws"]}, {}) is None
