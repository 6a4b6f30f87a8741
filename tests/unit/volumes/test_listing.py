# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""``gpufleet volume [list] [-v] [--json]``: dstack's volume table (render/volume_table.py), the
volumes found in the clouds by their tag or label (volumes/listing.py, against the EC2 and
Compute Engine doubles), the volume_info module, and the command over volume_list.yml."""

from __future__ import annotations

import json

import pytest
from ansible_collections.gpufleet.cluster.plugins.module_utils.render.fleet_table import (
    FleetTableError,
)
from ansible_collections.gpufleet.cluster.plugins.module_utils.render.volume_table import (
    volume_table,
)
from ansible_collections.gpufleet.cluster.plugins.module_utils.spec import parse_data
from ansible_collections.gpufleet.cluster.plugins.module_utils.volumes import listing
from ansible_collections.gpufleet.cluster.plugins.module_utils.volumes import provision

from gpufleet import api
from tests.doubles.playbooks import run_cli

NOW = "2026-11-22T12:00:00Z"


def record(name, backend="aws", region="us-east-1", zone="us-east-1a", status="active",
           created="2026-11-22T11:57:00Z", **extra):
    data = {"name": name, "backend": backend, "region": region, "availability_zone": zone,
            "size": 100, "volume_id": "vol-" + name, "status": status, "external": False,
            "attached_to": [], "attached_fleets": [], "created": created}
    data.update(extra)
    return data


# --- the table -------------------------------------------------------------------------------


def test_the_table_has_dstacks_columns_with_the_region_in_backend():
    lines = volume_table([record("datasets"),
                          record("ckpt", "gcp", "us-central1", "us-central1-b", "submitted",
                                 created="2026-11-21T10:00:00Z")], now=NOW)
    assert lines == [
        "NAME      BACKEND            STATUS     CREATED",
        "datasets  aws (us-east-1)    active     3 mins ago",
        "ckpt      gcp (us-central1)  submitted  yesterday",
    ]


def test_the_verbose_table_splits_backend_and_region_and_shows_attachments():
    lines = volume_table([record("datasets", attached_to=["i-1"], attached_fleets=["train"]),
                          record("old", zone=None, status="failed", error="disk\nbroken",
                                 created=None)], now=NOW, verbose=True)
    assert lines == [
        "NAME      BACKEND  REGION                  STATUS  ATTACHED  CREATED     ERROR",
        "datasets  aws      us-east-1 (us-east-1a)  active  train     3 mins ago",
        "old       aws      us-east-1               failed  -                     disk broken",
    ]


def test_no_volumes_is_the_header_alone_and_bad_records_are_refused():
    assert volume_table([], now=NOW) == ["NAME  BACKEND  STATUS  CREATED"]
    assert volume_table(record("one"), now=NOW)[1].startswith("one")
    with pytest.raises(FleetTableError, match="volume 0 is not a volume record"):
        volume_table([{"backend": "aws"}], now=NOW)
    with pytest.raises(FleetTableError, match="expected a list of volume records"):
        volume_table("datasets", now=NOW)


# --- found in the clouds ---------------------------------------------------------------------


def volume(**fields):
    data = {"type": "volume", "name": "data", "backend": "aws", "region": "us-east-1",
            "size": "100GB"}
    data.update(fields)
    return parse_data(data)[0]


@pytest.mark.cloud
def test_ebs_volumes_are_listed_from_their_tags_in_the_settings_regions(monkeypatch):
    import boto3
    from ansible_collections.gpufleet.cluster.plugins.module_utils.backends.aws import Aws

    from tests.doubles.ec2 import Ec2Double

    double = Ec2Double()
    aws = theirs = None
    try:
        for key, value in double.env().items():
            monkeypatch.setenv(key, value)
        aws = Aws({"regions": ["us-east-1", "us-west-2"]}, poll=0.05)
        ebs = boto3.client("ec2", region_name="us-east-1")
        # moto keeps its state for the whole test session: only this test's volumes count.
        before = set(v["name"] for v in listing.list_volumes(
            {"aws": {"regions": ["us-east-1", "us-west-2"]}}, clients={"aws": aws}))
        provision.apply(volume(name="first"), "first", client=aws)
        provision.apply(volume(name="second", region="us-west-2"), "second", client=aws)
        theirs = ebs.create_volume(AvailabilityZone="us-east-1a", Size=10)  # not gpufleet's
        settings = {"aws": {"regions": ["us-east-1", "us-west-2"]}}
        found = [v for v in listing.list_volumes(settings, clients={"aws": aws})
                 if v["name"] not in before]
        assert sorted((v["name"], v["region"], v["status"], v["attached_fleets"])
                      for v in found) == [("first", "us-east-1", "active", []),
                                          ("second", "us-west-2", "active", [])]
        assert listing.list_volumes({"aws": {"regions": ["eu-west-1"]}},
                                    clients={"aws": aws}) == []
        provision.delete(volume(name="first"), "first", client=aws)
        assert [v["name"] for v in listing.list_volumes(settings, clients={"aws": aws})
                if v["name"] not in before] == ["second"]
        # No cloud backend configured: nothing asked. (No local client either: the engine's
        # own volumes, which integration tests running beside this tier make, are not this
        # test's.)
        assert listing.list_volumes({}, clients={}) == []
    finally:
        try:
            if aws is not None:
                provision.delete(volume(name="first"), "first", client=aws)
                provision.delete(volume(name="second", region="us-west-2"), "second", client=aws)
            if theirs is not None:
                ebs.delete_volume(VolumeId=theirs["VolumeId"])
        finally:
            double.stop()


@pytest.mark.cloud
def test_persistent_disks_are_listed_newest_first_with_the_fleets_they_are_attached_to(
        tmp_path, monkeypatch):
    from ansible_collections.gpufleet.cluster.plugins.module_utils.backends.gcp import Gcp

    from tests.doubles.gce import GceDouble

    double = GceDouble()
    try:
        monkeypatch.setenv("GOOGLE_APPLICATION_CREDENTIALS",
                           double.credentials_file(str(tmp_path / "sa.json")))
        monkeypatch.setenv("GPUFLEET_GCP_ENDPOINT", double.endpoint)
        gcp = Gcp({}, poll=0.01)
        for name, zone in (("older", "us-central1-a"), ("newer", "us-central1-b"),
                           ("far", "europe-west4-a")):
            provision.apply(volume(name=name, backend="gcp", region=zone[:-2],
                                   availability_zone=zone), name, client=gcp)
        double.disks[("us-central1-a", "older")]["creationTimestamp"] = "2026-11-20T10:00:00Z"
        double.disks[("us-central1-b", "newer")]["creationTimestamp"] = "2026-11-21T10:00:00Z"
        double.disks[("us-central1-a", "theirs")] = {
            "name": "theirs", "sizeGb": "10", "status": "READY", "users": [],
            "labels": {"owner": "bob"}, "labelFingerprint": "f1"}
        double.instances[("us-central1-b", "train-0")] = {
            "name": "train-0", "status": "RUNNING", "labels": {"gpufleet-fleet": "train"},
            "machineType": "zones/us-central1-b/machineTypes/a2-highgpu-1g",
            "networkInterfaces": [{"networkIP": "10.0.0.2"}]}
        double.disks[("us-central1-b", "newer")]["users"] = [
            "projects/test-project/zones/us-central1-b/instances/train-0"]
        found = listing.list_volumes({"gcp": {"regions": ["us-central1"]}},
                                     clients={"gcp": gcp})
        assert [(v["name"], v["availability_zone"], v["attached_to"], v["attached_fleets"])
                for v in found] == [("newer", "us-central1-b", ["train-0"], ["train"]),
                                    ("older", "us-central1-a", [], [])]
    finally:
        double.stop()


# --- the command -----------------------------------------------------------------------------


run = run_cli


@pytest.mark.parametrize("argv", [["volume"], ["volume", "list"]])
def test_volume_and_volume_list_print_the_table(playbooks, argv):
    playbooks.answer(stats={"gpufleet_volumes": [record("datasets", created=None)]})
    code, out, _err = run(playbooks, *argv)
    assert code == 0
    assert out.splitlines() == ["NAME      BACKEND          STATUS  CREATED",
                                "datasets  aws (us-east-1)  active"]
    assert [(c["playbook"], c["check"], c["extravars"]) for c in playbooks.calls] == [
        ("volume_list.yml", False, {})]


def test_volume_list_verbose_and_json(playbooks):
    playbooks.answer(stats={"gpufleet_volumes": [record("datasets", created=None)]})
    code, out, _err = run(playbooks, "volume", "list", "-v")
    assert code == 0 and out.splitlines()[0].split() == [
        "NAME", "BACKEND", "REGION", "STATUS", "ATTACHED", "CREATED", "ERROR"]
    playbooks.answer(stats={"gpufleet_volumes": [record("datasets")]})
    code, out, _err = run(playbooks, "volume", "--json")
    assert code == 0 and json.loads(out) == [record("datasets")]


def test_no_volumes_and_a_failed_listing(playbooks):
    playbooks.answer(stats={"gpufleet_volumes": []})
    assert run(playbooks, "volume")[:2] == (0, "No volumes.\n")
    playbooks.answer(rc=2, failures=[{"host": "localhost", "task": "Find the volumes in the "
                                      "clouds", "msg": "listing gpufleet volumes failed"}])
    code, _out, err = run(playbooks, "volume", "list")
    assert code == 1 and "listing gpufleet volumes failed" in err


def test_the_api_lists_volumes(playbooks):
    playbooks.answer(stats={"gpufleet_volumes": [record("datasets")]})
    assert api.volumes(backend_settings={"aws": {}}) == [record("datasets")]
    assert playbooks.calls[0]["extravars"] == {"gpufleet_backend_settings": {"aws": {}}}


def test_the_volume_info_module_returns_records_and_the_table(tmp_path, monkeypatch):
    from ansible_collections.gpufleet.cluster.plugins.modules import volume_info

    from ..plugins.modules import module_runner

    seen = []

    def found(settings, catalog_dir=None, clients=None):
        seen.append((settings, catalog_dir))
        return [record("datasets", created=None)]

    monkeypatch.setattr(listing, "list_volumes", found)
    root = str(tmp_path / "state")
    code, result = module_runner.run_module(volume_info.main, {
        "state_dir": root, "verbose": True, "backend_settings": {"aws": {"regions": ["x"]}}})
    assert code == 0 and not result["changed"]
    assert result["volumes"] == [record("datasets", created=None)]
    assert result["table"][0].split()[2] == "REGION"
    assert seen == [({"aws": {"regions": ["x"]}}, root + "/catalog")]
