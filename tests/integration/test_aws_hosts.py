"""An aws fleet all the way to ready hosts: playbooks/fleet.yml provisions it against the EC2
double, whose instances are each backed by a real host (a node container from the local
backend's image, with its own sshd, dockerd and address), so the play reaches every instance
over SSH with the fleet's key, runs preflight (sudo, Docker, sshd settings, the cluster's nodes
reaching each other), measures it and reports it ready; delete.yml then terminates the
instances, and their hosts go with them."""

from __future__ import annotations

import json
import uuid

import boto3
import pytest
import yaml
from ansible_collections.gpufleet.cluster.plugins.module_utils.backends import local
from ansible_collections.gpufleet.cluster.plugins.module_utils.backends.docker_cli import Docker
from ansible_collections.gpufleet.cluster.plugins.module_utils.offers import catalog
from .task_images import ensure_base_image

from gpufleet.runner import run_playbook
from tests.doubles.catalogs import catalog as make_catalog
from tests.doubles.catalogs import machine
from tests.doubles.ec2 import Ec2Double

REGION = "us-east-1"
NAME = "cloud-" + uuid.uuid4().hex[:6]
CATALOG = make_catalog("aws", machine("c5.xlarge", 4, 8192, None, REGION, price=0.17))


class Hosts:
    """Node containers standing in for EC2 instances."""

    def __init__(self, docker, image):
        self.docker = docker
        self.image = image
        self.started = {}
        self.privileged = None

    def back(self, instance_id, public_key):
        name = "gpufleet-ec2-" + instance_id
        for allowed in ([True, False] if self.privileged is None else [self.privileged]):
            rc, _out, err = self.docker.run(
                "run", "-d", "--name", name, "--hostname", instance_id,
                "--env", "GPUFLEET_AUTHORIZED_KEY=" + public_key,
                *(list(local.run_flags(allowed)) + [self.image]), check=False)
            if rc == 0:
                self.privileged = allowed
                break
            self.docker.run("rm", "-f", name, check=False)
            if not (allowed and local.privilege_refused(err)):
                raise AssertionError("could not start a host for %s: %s" % (instance_id, err))
        self.started[instance_id] = name
        info = json.loads(self.docker.run("inspect", name))
        return info[0]["NetworkSettings"]["IPAddress"]

    def unback(self, instance_id):
        name = self.started.pop(instance_id, None)
        if name:
            self.docker.run("rm", "-f", name, check=False)


@pytest.fixture(scope="module")
def aws_lab(tmp_path_factory):
    base = tmp_path_factory.mktemp("aws-hosts")
    docker = Docker()
    image, _built = local.ensure_node_image(docker)
    hosts = Hosts(docker, image)
    double = Ec2Double()
    double.backing = hosts.back
    double.unbacking = hosts.unback
    state = base / "state"
    catalog.write(CATALOG, str(state / "catalog" / "aws.json"))
    with pytest.MonkeyPatch.context() as patch:
        for key, value in double.env().items():
            patch.setenv(key, value)
        patch.setenv("GPUFLEET_STATE_DIR", str(state))
        ami = boto3.client("ec2", region_name=REGION).describe_images(
            Owners=["amazon"], Filters=[{"Name": "architecture", "Values": ["x86_64"]}]
        )["Images"][0]["ImageId"]
        (state / "backends.yml").write_text(yaml.safe_dump({"aws": {
            "regions": [REGION], "image_id": ami, "ssh_user": local.NODE_USER}}))
        path = base / (NAME + ".dstack.yml")
        path.write_text("type: fleet\nname: %s\nnodes: 2\nplacement: cluster\n"
                        "backends: [aws]\n" % NAME)
        yield {"path": str(path), "hosts": hosts, "double": double}
        run_playbook("delete.yml", {"fleet": str(path)})
        for instance_id in list(hosts.started):
            hosts.unback(instance_id)
        double.stop()


def test_fleet_yml_brings_aws_instances_to_ready_hosts_over_ssh(aws_lab):
    result = run_playbook("fleet.yml", {"fleet": aws_lab["path"], "gpufleet_connect_timeout": 60})
    assert result.ok, result.stdout[-4000:]
    record = result.stats["gpufleet_fleets"][0]
    instances = record["instances"]
    assert [(i["name"], i["backend"], i["instance_type"], i["status"]) for i in instances] == [
        (NAME + "-0", "aws", "c5.xlarge", "idle"), (NAME + "-1", "aws", "c5.xlarge", "idle")]
    assert len(aws_lab["hosts"].started) == 2
    # Each instance was measured on its real host (the play's facts, not the catalog's).
    assert all(i["resources"]["cpus"] >= 1 and i["internal_ip"] for i in instances)
    assert len(aws_lab["double"].calls("RunInstances")) == 1

    again = run_playbook("fleet.yml", {"fleet": aws_lab["path"]})
    assert again.ok and again.stats["gpufleet_fleets"][0]["plan"]["create"] == []

    # A two-node task on the aws fleet, through the task runner as on any fleet: the image is
    # pushed to the hosts, each rank gets dstack's variables with the instances' addresses.
    task = aws_lab["path"].replace(".dstack.yml", "-task.dstack.yml")
    with open(task, "w") as handle:
        handle.write("type: task\nname: on-aws\nnodes: 2\nbackends: [aws]\nimage: %s\n"
                     "resources:\n  cpu: 1..\n  memory: 1GB..\n  disk: 1GB..\n"
                     "commands:\n  - echo rank=$DSTACK_NODE_RANK master=$DSTACK_MASTER_NODE_IP\n"
                     % ensure_base_image(Docker()))
    ran = run_playbook("task.yml", {"task": task})
    run = ran.stats.get("gpufleet_run")
    assert ran.ok and run and run["status"] == "done", ran.stdout[-4000:]
    assert run["fleet"] == NAME
    assert sorted(job["internal_ip"] for job in run["jobs"]) == \
        sorted(i["internal_ip"] for i in instances)

    gone = run_playbook("delete.yml", {"fleet": aws_lab["path"]})
    assert gone.ok, gone.stdout[-3000:]
    assert aws_lab["hosts"].started == {}
