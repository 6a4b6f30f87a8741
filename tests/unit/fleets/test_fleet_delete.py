# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""``fleet delete NAME [-i N]`` in the collection: a fleet found by its name (remembered file,
then the backends' labels and tags), dstack's refusal of a fleet in use, and deleting some
instances (backend instances removed, SSH hosts released), through fleets/lookup.py and the
fleet module. No Docker engine: the local backend's node listing is replaced."""

from __future__ import annotations

import pytest
import yaml
from ansible_collections.gpufleet.cluster.plugins.modules import fleet as fleet_module
from ansible_collections.gpufleet.cluster.plugins.module_utils.backends import local
from ansible_collections.gpufleet.cluster.plugins.module_utils.backends.docker_cli import (
    Docker,
    DockerError,
)
from ansible_collections.gpufleet.cluster.plugins.module_utils.fleets import (
    apply,
    lookup,
    state,
)
from ansible_collections.gpufleet.cluster.plugins.module_utils.tasks import listing
from ansible_collections.gpufleet.cluster.plugins.module_utils.spec import parse_data

from ..plugins.modules import module_runner

SSH_FLEET = {"type": "fleet", "name": "onprem",
             "ssh_config": {"user": "ubuntu", "identity_file": "/keys/id_ed25519",
                            "hosts": ["10.0.0.1", "10.0.0.2", "10.0.0.3"]}}


def parsed(data):
    return parse_data(data, "test")[0]


def raw_node(fleet, num, placement="cluster", ip=None, spec=None):
    labels = {local.FLEET_LABEL: fleet, local.INSTANCE_LABEL: str(num),
              local.PLACEMENT_LABEL: placement, local.CREATED_LABEL: "2026-11-21T10:00:00Z"}
    if spec is not None:
        labels[local.SPEC_LABEL] = spec
    return {"id": "c%d" % num, "name": local.container_name(fleet, num), "state": "running",
            "labels": labels, "created": "2026-11-21T10:00:00Z",
            "networks": {local.network_name(fleet, num, placement):
                         ip or "172.20.0.%d" % (num + 2)}}


class Engine:
    """The local nodes of fleets, in memory: what list_nodes answers and remove_node changes."""

    def __init__(self, *nodes):
        self.nodes = list(nodes)
        self.removed = []

    def install(self, monkeypatch):
        monkeypatch.setattr(local, "list_nodes", self.list_nodes)
        monkeypatch.setattr(local, "remove_node", self.remove_node)
        monkeypatch.setattr(local, "remove_fleet", self.remove_fleet)
        monkeypatch.setattr(Docker, "ping", lambda self: "27.0")
        return self

    def list_nodes(self, _docker, fleet=None):
        return [n for n in self.nodes if fleet is None or n["labels"][local.FLEET_LABEL] == fleet]

    def remove_node(self, _docker, fleet, num, _placement):
        self.removed.append(local.container_name(fleet, num))
        self.nodes = [n for n in self.nodes if n["name"] != local.container_name(fleet, num)]

    def remove_fleet(self, _docker, fleet, check_mode=False):
        names = [n["name"] for n in self.list_nodes(None, fleet)]
        if not check_mode:
            self.removed += names
            self.nodes = [n for n in self.nodes if n["name"] not in names]
        return {"containers": names, "volumes": [], "networks": []}


@pytest.fixture
def root(tmp_path):
    return str(tmp_path / "state")


def remember(tmp_path, root, data, name=None):
    path = tmp_path / ((name or data["name"]) + ".dstack.yml")
    path.write_text(yaml.safe_dump(data))
    state.remember_file(root, name or data["name"], str(path))
    return str(path)


# --- finding a fleet by name ---------------------------------------------------------------


def test_a_remembered_file_is_found_first(tmp_path, root):
    path = remember(tmp_path, root, SSH_FLEET)
    config, found = lookup.find("onprem", None, root, {})
    assert found == path and config["fleet_type"] == "ssh"


def test_a_file_that_now_names_another_fleet_is_not_that_fleet(tmp_path, root):
    path = remember(tmp_path, root, dict(SSH_FLEET, name="renamed"), name="onprem")
    assert state.remembered_files(root) == {"onprem": path}
    with pytest.raises(lookup.FleetNotFound) as info:
        lookup.find("onprem", None, root, {})
    assert str(info.value) == "Fleet onprem does not exist"


def test_a_remembered_file_that_no_longer_reads_says_so(tmp_path, root):
    path = remember(tmp_path, root, SSH_FLEET)
    with open(path, "w") as handle:
        handle.write("type: fleet\nname: onprem\nnodes: 0..x\n")
    with pytest.raises(apply.ApplyError, match="applied from %s, which no longer reads" % path):
        lookup.find("onprem", None, root, {})


def test_a_local_fleet_is_found_from_its_node_labels(monkeypatch, root):
    spec = local.spec_label(parsed({"type": "fleet", "name": "web", "nodes": 2,
                                    "placement": "cluster"}))
    Engine(raw_node("web", 0, spec=spec), raw_node("web", 1, spec=spec),
           raw_node("other", 0)).install(monkeypatch)
    config, path = lookup.find("web", Docker("docker"), root, {})
    assert path is None
    assert (config["name"], config["fleet_type"], config["backends"], config["placement"],
            config["nodes"]["target"]) == ("web", "backend", ["local"], "cluster", 2)
    record = apply.describe(config, None, Docker("docker"), root)
    assert [i["name"] for i in record["instances"]] == ["web-0", "web-1"]


def test_no_engine_and_no_file_is_no_fleet(monkeypatch, root):
    def refuse(_docker, _fleet=None):
        raise DockerError("the docker command was not found")

    monkeypatch.setattr(local, "list_nodes", refuse)
    with pytest.raises(lookup.FleetNotFound, match="^Fleet web does not exist$"):
        lookup.find("web", Docker("docker"), root, {})


# --- a fleet in use ------------------------------------------------------------------------


def record(*names):
    return {"name": "web", "instances": [{"name": n, "num": int(n.rsplit("-", 1)[1])}
                                         for n in names]}


def test_a_fleet_in_use_is_refused_as_dstack_refuses_it_naming_the_runs():
    fleet = record("web-0", "web-1")
    with pytest.raises(lookup.FleetInUse) as info:
        lookup.refuse_in_use(fleet, {"web-1": {"train"}})
    assert str(info.value) == ("Failed to delete fleet web. Fleet is in use: web-1 runs train "
                               "(stop it first: gpufleet stop train)")
    with pytest.raises(lookup.FleetInUse) as info:
        lookup.refuse_in_use(fleet, {"web-0": {"b", "a"}, "web-1": {"a"}}, [1, 0])
    assert str(info.value) == (
        "Failed to delete fleet web instances [1, 0]. Fleet instances are in use: web-0 runs "
        "a, b; web-1 runs a (stop them first: gpufleet stop a, gpufleet stop b)")


def test_instances_not_deleted_may_be_busy():
    lookup.refuse_in_use(record("web-0", "web-1"), {"web-0": {"train"}}, [1])
    lookup.refuse_in_use(record("web-0"), {})
    lookup.refuse_in_use(record("web-0"), None)


def test_a_host_that_cannot_be_checked_is_never_taken_as_idle():
    fleet = record("web-0", "web-1")
    with pytest.raises(lookup.FleetInUse) as info:
        lookup.refuse_in_use(fleet, {}, unknown={"web-1": "its SSH key /s/k is missing"})
    assert str(info.value) == (
        "Failed to delete fleet web. Cannot tell whether it is in use: web-1 could not be "
        "checked (its SSH key /s/k is missing). Make the hosts answer, or delete it anyway "
        "with --force (the module's refuse_busy=false), which also destroys any run still on "
        "them")
    with pytest.raises(lookup.FleetInUse) as info:
        lookup.refuse_in_use(fleet, {}, [1], unknown={"web-1": "no answer"})
    assert str(info.value).startswith("Failed to delete fleet web instances [1]. Cannot tell "
                                      "whether it is in use: web-1 could not be checked")
    # Busy hosts come first; the unknown ones are named with them.
    with pytest.raises(lookup.FleetInUse) as info:
        lookup.refuse_in_use(fleet, {"web-0": {"a"}}, unknown={"web-1": "no answer"})
    assert str(info.value) == (
        "Failed to delete fleet web. Fleet is in use: web-0 runs a (stop it first: gpufleet "
        "stop a; web-1 could not be checked (no answer))")
    # Instances not deleted may be unknown.
    lookup.refuse_in_use(fleet, {}, [0], unknown={"web-1": "no answer"})


def test_the_module_refuses_a_fleet_whose_hosts_cannot_be_checked(tmp_path, root,
                                                                  monkeypatch):
    remember(tmp_path, root, SSH_FLEET)
    monkeypatch.setattr(listing, "runs_alive", lambda fleet, _root: (
        {}, {"onprem-2": "unreachable over SSH: Connection refused"}))
    code, result = run({"name": "onprem", "state": "absent", "refuse_busy": True,
                        "state_dir": root})
    assert code == 1 and result["msg"].startswith(
        "Failed to delete fleet onprem. Cannot tell whether it is in use: onprem-2 could not "
        "be checked (unreachable over SSH: Connection refused)")
    assert state.remembered_files(root)
    code, result = run({"name": "onprem", "state": "absent", "instances": [2],
                        "state_dir": root, "refuse_busy": True})
    assert code == 1 and "onprem-2 could not be checked" in result["msg"]
    # refuse_busy=false (gpufleet delete --force) deletes it anyway.
    code, result = run({"name": "onprem", "state": "absent", "instances": [2],
                        "state_dir": root})
    assert code == 0, result
    code, result = run({"name": "onprem", "state": "absent", "state_dir": root})
    assert code == 0 and result["fleet"]["status"] == "terminated"


# --- deleting instances ----------------------------------------------------------------------


def test_local_instances_are_removed_and_the_fleet_stays(monkeypatch, root):
    engine = Engine(raw_node("web", 0), raw_node("web", 1), raw_node("web", 2)).install(
        monkeypatch)
    config = parsed({"type": "fleet", "name": "web", "nodes": 3, "placement": "cluster"})
    planned, changed = lookup.delete_instances(config, [1, 7], None, Docker("docker"), root,
                                               check_mode=True)
    assert changed and engine.removed == []
    assert planned["plan"]["remove"] == ["web-1"] and planned["plan"]["release"] == []
    assert planned["plan"]["keep"] == ["web-0", "web-2"]
    done, changed = lookup.delete_instances(config, [1, 7], None, Docker("docker"), root)
    assert changed and engine.removed == ["gpufleet-web-1"]
    assert done["removed"] == {"instances": ["web-1"]}
    assert [i["name"] for i in done["instances"]] == ["web-0", "web-2"]
    again, changed = lookup.delete_instances(config, [1], None, Docker("docker"), root)
    assert not changed and again["removed"] == {"instances": []}


def test_ssh_hosts_are_released_and_leave_the_facts_cache(root):
    config = parsed(SSH_FLEET)
    state.write_facts(root, "onprem", {"onprem-0": {"cpus": 8}, "onprem-1": {"cpus": 8}})
    planned, changed = lookup.delete_instances(config, [1], None, None, root, check_mode=True)
    assert changed and planned["plan"]["release"] == ["onprem-1"]
    assert planned["plan"]["remove"] == [] and planned["removed"] == {"instances": []}
    assert set(state.read_facts(root, "onprem")) == {"onprem-0", "onprem-1"}
    lookup.delete_instances(config, [1], None, None, root)
    assert set(state.read_facts(root, "onprem")) == {"onprem-0"}


# --- the fleet module ------------------------------------------------------------------------


def run(args):
    return module_runner.run_module(fleet_module.main, args)


def test_the_runs_alive_on_a_fleet_come_from_its_hosts_task_containers(monkeypatch, root):
    asked = []

    def list_runs(nodes):
        asked.append(sorted(nodes))

        def job(host, status):
            return {"host": host, "status": status}
        return [{"name": "train", "jobs": [job("web-0", "running"), job("web-1", "done")]},
                {"name": "eval", "jobs": [job("web-1", "terminating")]},
                {"name": "old", "jobs": [job("web-0", "failed")]}], {"web-2": "unreachable"}

    monkeypatch.setattr(listing, "list_runs", list_runs)
    fleet = {"name": "web", "instances": [
        {"name": "web-%d" % n, "num": n, "fleet": "web", "backend": "local", "hostname": ip,
         "port": 22, "user": "gpufleet", "identity_file": None, "proxy_jump": None}
        for n, ip in ((0, "172.20.0.2"), (1, "172.20.0.3"), (2, "172.20.0.4"), (3, None))]}
    assert listing.runs_alive(fleet, root) == ({"web-0": {"train"}, "web-1": {"eval"}},
                                               {"web-2": "unreachable"})
    assert asked == [["web-0", "web-1", "web-2"]]  # an instance without an address is not asked
    assert listing.runs_alive({"name": "web", "instances": []}, root) == ({}, {})


def test_the_module_releases_ssh_hosts_of_a_fleet_named(tmp_path, root, monkeypatch):
    remember(tmp_path, root, SSH_FLEET)
    monkeypatch.setattr(listing, "runs_alive", lambda fleet, _root: ({}, {}))
    state.write_facts(root, "onprem", {"onprem-2": {"cpus": 8}})
    code, result = run({"name": "onprem", "state": "absent", "instances": [2],
                        "state_dir": root})
    assert code == 0, result
    assert [h["name"] for h in result["release_hosts"]] == ["onprem-2"]
    assert result["release_hosts"][0]["vars"]["ansible_host"] == "10.0.0.3"
    assert result["fleet"]["plan"]["release"] == ["onprem-2"] and result["changed"]
    assert state.read_facts(root, "onprem") == {}
    assert state.remembered_files(root)  # the fleet stays


def test_the_module_deletes_a_whole_ssh_fleet_named(tmp_path, root):
    remember(tmp_path, root, SSH_FLEET)
    code, result = run({"name": "onprem", "state": "absent", "state_dir": root,
                        "_ansible_check_mode": True})
    assert code == 0, result
    assert [h["name"] for h in result["release_hosts"]] == ["onprem-0", "onprem-1", "onprem-2"]
    assert state.remembered_files(root)
    code, result = run({"name": "onprem", "state": "absent", "state_dir": root})
    assert code == 0 and result["fleet"]["status"] == "terminated"
    assert state.remembered_files(root) == {}


def test_the_module_refuses_busy_instances(tmp_path, root, monkeypatch):
    remember(tmp_path, root, SSH_FLEET)
    asked = []

    def alive(fleet, _root):
        asked.append(fleet["name"])
        return {"onprem-1": {"train"}}, {}

    monkeypatch.setattr(listing, "runs_alive", alive)
    code, result = run({"name": "onprem", "state": "absent", "instances": [1],
                        "state_dir": root})
    assert code == 1 and result["msg"].startswith(
        "Failed to delete fleet onprem instances [1]. Fleet instances are in use: onprem-1 "
        "runs train")
    code, result = run({"name": "onprem", "state": "absent", "instances": [0],
                        "state_dir": root})
    assert code == 0, result
    code, result = run({"name": "onprem", "state": "absent", "refuse_busy": True,
                        "state_dir": root})
    assert code == 1 and result["msg"].startswith("Failed to delete fleet onprem. Fleet is in use")
    assert state.remembered_files(root)
    assert asked == ["onprem"] * 3


def test_the_module_says_when_no_fleet_has_the_name(root, monkeypatch):
    Engine().install(monkeypatch)
    code, result = run({"name": "nope", "state": "absent", "state_dir": root})
    assert code == 1 and result["msg"] == "Fleet nope does not exist"


@pytest.mark.parametrize("args, message", [
    ({"name": "web"}, "state is present but any of the following are missing: path, config"),
    ({"config": {"type": "fleet", "name": "web", "nodes": 1}, "instances": [1]},
     "instances: only with state=absent"),
    ({"name": "web", "path": "/x.yml", "state": "absent"}, "mutually exclusive"),
])
def test_the_module_refuses_names_and_instances_outside_deletion(root, args, message):
    code, result = run(dict(args, state_dir=root))
    assert code == 1 and message in result["msg"]


# --- a cloud fleet (the EC2 double) ----------------------------------------------------------


@pytest.mark.cloud
def test_an_aws_fleet_is_found_by_its_tags_and_loses_one_instance(tmp_path, monkeypatch):
    import boto3
    from ansible_collections.gpufleet.cluster.plugins.module_utils.backends.aws import Aws
    from ansible_collections.gpufleet.cluster.plugins.module_utils.fleets import cloud
    from ansible_collections.gpufleet.cluster.plugins.module_utils.offers import catalog

    from tests.doubles.catalogs import catalog as make_catalog
    from tests.doubles.catalogs import machine
    from tests.doubles.ec2 import Ec2Double

    double = Ec2Double()
    try:
        for key, value in double.env().items():
            monkeypatch.setenv(key, value)
        root = str(tmp_path / "state")
        catalog.write(make_catalog("aws", machine(
            "g5.xlarge", 4, 16384, ("A10G", 24576, 1), "us-east-1", ["us-east-1a"], 1.0, 0.4)),
            catalog.directory(root) + "/aws.json")
        image = boto3.client("ec2", region_name="us-east-1").describe_images(
            Owners=["amazon"], Filters=[{"Name": "architecture", "Values": ["x86_64"]}]
        )["Images"][0]["ImageId"]
        settings = {"aws": {"regions": ["us-east-1"], "image_id": image}}
        # moto keeps its state for the whole test session: a name of this test's own, and
        # the fleet deleted at the end.
        config = parsed({"type": "fleet", "name": "bytag", "nodes": 2, "placement": "cluster",
                         "backends": ["aws"], "resources": {"gpu": "A10G"}})
        cloud.apply(config, "bytag", root, settings, client=Aws(settings["aws"], poll=0.05),
                    catalog_dir=catalog.directory(root), sleep=lambda s: None)

        found, path = lookup.find("bytag", None, root, settings)
        assert path is None and (found["backends"], found["placement"]) == (["aws"], "cluster")
        with pytest.raises(lookup.FleetNotFound):
            lookup.find("other", None, root, settings)
        done, changed = lookup.delete_instances(found, [1], None, None, root, settings=settings)
        assert changed and done["removed"] == {"instances": ["bytag-1"]}
        alive = [i["name"] for i in done["instances"]
                 if i["status"] not in ("terminating", "terminated")]
        assert alive == ["bytag-0"]
        assert len(double.calls("TerminateInstances")) == 1
    finally:
        try:
            apply.delete(parsed({"type": "fleet", "name": "bytag", "nodes": 1,
                                 "backends": ["aws"]}), None, None, root,
                         settings={"aws": {"regions": ["us-east-1"]}})
        finally:
            double.stop()


# --- a smaller nodes count -------------------------------------------------------------------


@pytest.mark.parametrize("alive, message", [
    (({"web-2": {"train"}}, {}), "web-2 runs train"),
    (({}, {"web-2": "cannot be checked: its SSH key /s/k is missing"}),
     "web-2 could not be checked (cannot be checked: its SSH key /s/k is missing)"),
])
def test_a_smaller_nodes_count_never_removes_a_busy_or_unknown_instance(root, monkeypatch,
                                                                        alive, message):
    Engine(raw_node("web", 0), raw_node("web", 1), raw_node("web", 2)).install(monkeypatch)
    asked = []

    def runs_alive(record, _root):
        asked.append([i["name"] for i in record["instances"]])
        return alive

    monkeypatch.setattr(listing, "runs_alive", runs_alive)
    args = {"config": {"type": "fleet", "name": "web", "nodes": 2, "placement": "cluster",
                       "backends": ["local"]}, "state_dir": root, "_ansible_check_mode": True}
    code, result = run(dict(args, refuse_busy=True))
    assert code == 1, result
    assert result["msg"] == (
        "Failed to apply fleet web: the smaller nodes count removes web-2, which may not be "
        "idle: %s. Stop the runs, or make the hosts answer, and apply again (the playbook's "
        "gpufleet_refuse_busy=false removes them anyway)" % message)
    assert asked == [["web-2"]]   # only the instance that would go is asked
    code, result = run(args)      # refuse_busy=false: the plan removes it
    assert code == 0 and result["fleet"]["plan"]["remove"] == ["web-2"], result
    assert asked == [["web-2"]]
