"""Network volumes on aws (moto behind the EC2 double) and gcp (the Compute Engine double):
create, find again by tag or label, register an existing volume, delete, and the refusals."""

from __future__ import annotations

import boto3
import pytest
from ansible_collections.gpufleet.cluster.plugins.module_utils.volumes import provision as volumes
from ansible_collections.gpufleet.cluster.plugins.module_utils.backends.aws import Aws
from ansible_collections.gpufleet.cluster.plugins.module_utils.backends.gcp import Gcp
from ansible_collections.gpufleet.cluster.plugins.module_utils.spec import parse_data

from tests.doubles.ec2 import Ec2Double
from tests.doubles.gce import GceDouble

pytestmark = pytest.mark.cloud


def volume(**fields):
    data = {"type": "volume", "name": "data", "backend": "aws", "region": "us-east-1",
            "size": "100GB"}
    data.update(fields)
    return parse_data(data)[0]


@pytest.fixture(scope="module")
def ec2():
    double = Ec2Double()
    yield double
    double.stop()


@pytest.fixture
def aws(ec2, monkeypatch):
    for key, value in ec2.env().items():
        monkeypatch.setenv(key, value)
    ec2.clear()
    return Aws({}, poll=0.05)


def test_an_ebs_volume_is_created_once_found_by_its_tag_and_deleted(aws, ec2):
    record, changed = volumes.apply(volume(tags={"team": "ml"}), "data", client=aws,
                                    check_mode=True)
    assert changed and record["status"] == "submitted" and ec2.mutating() == []
    record, changed = volumes.apply(volume(tags={"team": "ml"}), "data", client=aws)
    assert changed
    assert (record["backend"], record["region"], record["availability_zone"], record["size"],
            record["status"], record["external"]) == ("aws", "us-east-1", "us-east-1a", 100,
                                                      "active", False)
    create = ec2.calls("CreateVolume")[0]["params"]
    assert (create["Size"], create["VolumeType"], create["AvailabilityZone"]) == \
        ("100", "gp3", "us-east-1a")
    tags = dict((create["TagSpecification.1.Tag.%d.Key" % n],
                 create["TagSpecification.1.Tag.%d.Value" % n]) for n in range(1, 5))
    assert tags == {"team": "ml", "gpufleet:volume": "data", "gpufleet:created-by": "gpufleet",
                    "Name": "data"}
    again, changed = volumes.apply(volume(), "data", client=aws)
    assert not changed and again["volume_id"] == record["volume_id"]
    gone, changed = volumes.delete(volume(), "data", client=aws)
    assert changed and gone["status"] == "terminated"
    assert volumes.describe(volume(), "data", client=aws)["status"] == "terminated"
    assert volumes.delete(volume(), "data", client=aws)[1] is False


def test_a_registered_ebs_volume_is_only_released_on_delete(aws, ec2):
    ebs = boto3.client("ec2", region_name="us-east-1")
    existing = ebs.create_volume(AvailabilityZone="us-east-1b", Size=50)["VolumeId"]
    record, changed = volumes.apply(volume(name="old", volume_id=existing, size=None), "old",
                                    client=aws)
    assert changed and record["external"] and record["volume_id"] == existing
    assert record["availability_zone"] == "us-east-1b"
    volumes.delete(volume(name="old"), "old", client=aws)
    left = ebs.describe_volumes(VolumeIds=[existing])["Volumes"][0]
    assert not [t for t in left.get("Tags") or [] if t["Key"].startswith("gpufleet:")]


def test_volumes_of_backends_gpufleet_does_not_provision_are_refused(aws):
    with pytest.raises(volumes.VolumeError, match="backend runpod volumes are not provisioned"):
        volumes.apply(volume(backend="runpod"), "data", client=aws)


def test_a_persistent_disk_is_created_registered_and_released(tmp_path, monkeypatch):
    double = GceDouble()
    try:
        monkeypatch.setenv("GOOGLE_APPLICATION_CREDENTIALS",
                           double.credentials_file(str(tmp_path / "sa.json")))
        monkeypatch.setenv("GPUFLEET_GCP_ENDPOINT", double.endpoint)
        gcp = Gcp({}, poll=0.01)
        config = volume(backend="gcp", region="us-central1", size="200GB")
        record, changed = volumes.apply(config, "data", client=gcp)
        assert changed and (record["availability_zone"], record["size"], record["status"]) == \
            ("us-central1-a", 200, "active")
        body = double.calls("POST", r"/disks$")[0]["body"]
        assert body == {"name": "data", "sizeGb": "200",
                        "type": "zones/us-central1-a/diskTypes/pd-balanced",
                        "labels": {"gpufleet-volume": "data", "gpufleet-created-by": "gpufleet"}}
        assert not volumes.apply(config, "data", client=gcp)[1]
        double.disks[("us-central1-c", "theirs")] = {
            "name": "theirs", "sizeGb": "10", "status": "READY", "users": [],
            "labels": {"owner": "bob"}, "labelFingerprint": "f1"}
        mine, _changed = volumes.apply(volume(name="theirs", backend="gcp", region="us-central1",
                                              volume_id="theirs", size=None), "theirs",
                                       client=gcp)
        assert mine["external"] and mine["availability_zone"] == "us-central1-c"
        volumes.delete(volume(name="theirs", backend="gcp", region="us-central1"), "theirs",
                       client=gcp)
        assert double.disks[("us-central1-c", "theirs")]["labels"] == {"owner": "bob"}
        double.disks[("us-central1-a", "data")]["users"] = ["zones/us-central1-a/instances/x-0"]
        with pytest.raises(volumes.VolumeError, match="is attached to x-0: stop the runs"):
            volumes.delete(config, "data", client=gcp)
    finally:
        double.stop()


def test_an_ebs_volume_attaches_in_its_zone_only_and_detaches(aws, ec2):
    from ansible_collections.gpufleet.cluster.plugins.module_utils.backends.aws import AwsError

    ebs = boto3.client("ec2", region_name="us-east-1")
    image = ebs.describe_images(Owners=["amazon"], Filters=[
        {"Name": "architecture", "Values": ["x86_64"]}])["Images"][0]["ImageId"]
    host = ebs.run_instances(ImageId=image, MinCount=1, MaxCount=1, InstanceType="g5.xlarge",
                             Placement={"AvailabilityZone": "us-east-1a"})["Instances"][0]
    other = ebs.run_instances(ImageId=image, MinCount=1, MaxCount=1, InstanceType="g5.xlarge",
                              Placement={"AvailabilityZone": "us-east-1b"})["Instances"][0]
    volumes.apply(volume(name="ckpt", availability_zone="us-east-1a"), "ckpt", client=aws)
    found = aws.volume("ckpt", "us-east-1")
    with pytest.raises(AwsError, match=r"volume ckpt is in us-east-1a and the host i-\w+ in "
                                       r"us-east-1b: a volume can only be attached in its own"):
        aws.attach_volume("ckpt", "us-east-1", found, other)
    paths = aws.attach_volume("ckpt", "us-east-1", found, host)
    short = found["VolumeId"].replace("-", "")
    assert paths == ["/dev/disk/by-id/nvme-Amazon_Elastic_Block_Store_" + short,
                     "/dev/sdf", "/dev/xvdf"]
    attach = ec2.calls("AttachVolume")[0]["params"]
    assert (attach["InstanceId"], attach["Device"]) == (host["InstanceId"], "/dev/sdf")
    found = aws.volume("ckpt", "us-east-1")
    assert aws.attach_volume("ckpt", "us-east-1", found, host) == paths   # already there
    assert len(ec2.calls("AttachVolume")) == 1
    with pytest.raises(volumes.VolumeError, match="is attached to i-"):
        volumes.delete(volume(name="ckpt"), "ckpt", client=aws)
    assert aws.detach_volume("ckpt", "us-east-1", found)
    assert volumes.delete(volume(name="ckpt"), "ckpt", client=aws)[1]


def test_a_persistent_disk_attaches_with_its_device_name(tmp_path, monkeypatch):
    from ansible_collections.gpufleet.cluster.plugins.module_utils.backends.gcp import GcpError

    double = GceDouble()
    try:
        monkeypatch.setenv("GOOGLE_APPLICATION_CREDENTIALS",
                           double.credentials_file(str(tmp_path / "sa.json")))
        monkeypatch.setenv("GPUFLEET_GCP_ENDPOINT", double.endpoint)
        gcp = Gcp({}, poll=0.01)
        config = volume(name="ckpt", backend="gcp", region="us-central1",
                        availability_zone="us-central1-b")
        volumes.apply(config, "ckpt", client=gcp)
        for zone in ("us-central1-a", "us-central1-b"):
            double.instances[(zone, "f-" + zone[-1])] = {"name": "f-" + zone[-1],
                                                         "status": "RUNNING"}
        with pytest.raises(GcpError, match="volume ckpt is in us-central1-b and the host f-a"):
            gcp.attach_volume("ckpt", "us-central1", gcp.volume("ckpt", "us-central1"),
                              ("us-central1-a", double.instances[("us-central1-a", "f-a")]))
        host = ("us-central1-b", double.instances[("us-central1-b", "f-b")])
        assert gcp.attach_volume("ckpt", "us-central1", gcp.volume("ckpt", "us-central1"),
                                 host) == ["/dev/disk/by-id/google-gpufleet-ckpt"]
        body = double.calls("POST", r"/attachDisk$")[0]["body"]
        assert body == {"source": "projects/test-project/zones/us-central1-b/disks/ckpt",
                        "deviceName": "gpufleet-ckpt", "mode": "READ_WRITE",
                        "autoDelete": False}
        assert gcp.detach_volume("ckpt", "us-central1", gcp.volume("ckpt", "us-central1"))
        assert double.disks[("us-central1-b", "ckpt")]["users"] == []
    finally:
        double.stop()
