# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""One registry and one choice of a fleet's backend (backends/base.py), asked by every path
that looks for a fleet: apply, the cloud lookup, the inventory plugin and the modules. Also
the contract the clients keep (backends/interface.py), the local backend's client, and the
backend errors' common root."""

from __future__ import annotations

import inspect
import json

import os

import pytest
from ansible_collections.gpufleet.cluster.plugins.inventory import fleet as inventory_plugin
from ansible_collections.gpufleet.cluster.plugins.module_utils.backends import (
    aws,
    aws_layout,
    base,
    docker_cli as docker,
    errors,
    gcp,
    gcp_layout,
    interface,
    local,
)
from ansible_collections.gpufleet.cluster.plugins.module_utils.core.errors import GpufleetError
from ansible_collections.gpufleet.cluster.plugins.module_utils.fleets import apply, cloud
from ansible_collections.gpufleet.cluster.plugins.module_utils.spec import parse_data

UNSUPPORTED = ("fleet far: backends azure, lambda cannot provision nodes in this version of "
               "gpufleet (available: local, aws, gcp): add local to backends, or describe "
               "existing hosts with ssh_config")


def fleet(backends, name="far"):
    return parse_data({"type": "fleet", "name": name, "nodes": 1, "backends": backends})[0]


def node(fleet_name, num, state="running", placement="any"):
    """A node as ``docker inspect`` describes it."""
    network = "gpufleet-%s-%d" % (fleet_name, num) if placement != "cluster" else \
        "gpufleet-" + fleet_name
    return {"Id": "id-%s-%d" % (fleet_name, num), "Name": "/gpufleet-%s-%d" % (fleet_name, num),
            "State": {"Status": state},
            "Config": {"Labels": {"gpufleet.fleet": fleet_name, "gpufleet.instance": str(num),
                                  "gpufleet.placement": placement,
                                  "gpufleet.created": "2026-01-01T00:00:00Z"}},
            "NetworkSettings": {"Networks": {network: {"IPAddress": "172.30.0.%d" % (num + 2)}}}}


class FakeDocker:
    """Answers ``ps`` and ``inspect`` from a list of nodes; records every other command."""

    def __init__(self, nodes=(), refuse_privileged=False):
        self.nodes = list(nodes)
        self.calls = []
        self.refuse_privileged = refuse_privileged

    def run(self, *args, check=True):
        self.calls.append(args)
        if args[0] == "ps":
            selector = args[-1][len("label=gpufleet.fleet"):]
            wanted = selector[1:] if selector.startswith("=") else None
            out = "\n".join(n["Id"] for n in self.nodes
                            if wanted in (None, n["Config"]["Labels"]["gpufleet.fleet"]))
        elif args[0] == "inspect":
            out = json.dumps([n for n in self.nodes if n["Id"] in args[1:]])
        elif args[0] == "run" and self.refuse_privileged and "--privileged" in args:
            return 1, "", "docker: Error response: unable to apply caps"
        else:
            out = ""
        return out if check else (0, out, "")

    def ping(self):
        return "20.10.24"


# --- select: one rule, asked by every path ---------------------------------------------------

@pytest.mark.parametrize("backends, chosen", [
    (None, "local"),
    (["local"], "local"),
    (["local", "aws"], "local"),      # local nodes cost nothing
    (["aws", "local"], "local"),
    (["aws"], "aws"),
    (["gcp"], "gcp"),
    (["gcp", "aws"], "gcp"),          # else the first listed
    (["azure", "aws"], "aws"),        # that gpufleet provisions
])
def test_select_prefers_local_then_the_first_backend_gpufleet_provisions(backends, chosen):
    assert base.select({"backends": backends}, "far") == chosen


def test_select_refuses_a_list_without_a_backend_gpufleet_provisions():
    with pytest.raises(errors.UnsupportedBackend) as info:
        base.select({"backends": ["azure", "lambda"]}, "far")
    assert str(info.value) == UNSUPPORTED


def test_local_and_aws_is_a_local_fleet_on_every_path(monkeypatch, tmp_path):
    config = fleet(["local", "aws"])

    def no_cloud(*args, **kwargs):
        raise AssertionError("a local fleet was looked for in a cloud")

    for name in ("describe", "apply", "remove", "delete"):
        monkeypatch.setattr(cloud, name, no_cloud)
    engine = FakeDocker([node("far", 0), node("other", 0)])
    # apply: the fleet is described, converged and removed from the local nodes.
    record = apply.describe(config, docker=engine, root=str(tmp_path))
    assert [(i["name"], i["backend"]) for i in record["instances"]] == [("far-0", "local")]
    record, changed = apply.apply(config, docker=engine, root=str(tmp_path), check_mode=True)
    assert not changed and record["plan"]["keep"] == ["far-0"]
    # the inventory plugin and the modules ask the same question.
    assert inventory_plugin.fleet_backend(config, "far") == "local"
    assert base.select(config, "far") not in base.CLOUD_BACKENDS
    # the cloud lookup refuses it rather than looking in EC2.
    monkeypatch.undo()
    with pytest.raises(cloud.CloudError, match="make it a local fleet, not a cloud one"):
        cloud.describe(config, "far", str(tmp_path / "key"), {"aws": {}})


@pytest.mark.parametrize("backends, chosen", [
    (["aws", "local"], "local"), (["aws"], "aws"), (["gcp", "aws"], "gcp")])
def test_the_inventory_and_cloud_lookup_agree_with_apply(backends, chosen):
    config = fleet(backends)
    assert inventory_plugin.fleet_backend(config, "far") == chosen
    if chosen in base.CLOUD_BACKENDS:
        assert cloud._backend(config, "far") == chosen


def test_an_unsupported_list_gives_the_same_message_on_every_path(tmp_path):
    config = fleet(["azure", "lambda"])
    with pytest.raises(apply.ApplyError) as info:
        apply.apply(config, docker=FakeDocker(), root=str(tmp_path))
    assert str(info.value) == UNSUPPORTED
    with pytest.raises(cloud.CloudError) as info:
        cloud.describe(config, "far", str(tmp_path / "key"), {})
    assert str(info.value) == UNSUPPORTED
    # No backend built it: the inventory looks among the local nodes, as before.
    assert inventory_plugin.fleet_backend(config, "far") == "local"


# --- the registry and the contract -----------------------------------------------------------

def test_the_registry_names_each_backend_once():
    assert dict(base.BACKENDS.items()) == {"local": local.Local, "aws": aws.Aws, "gcp": gcp.Gcp}
    assert list(base.BACKENDS) == list(base.BACKENDS.keys()) == ["local", "aws", "gcp"]
    assert base.CLOUD_BACKENDS == ("aws", "gcp")
    assert base.CLOUD_BACKENDS == tuple(n for n, cls in base.BACKENDS.items()
                                        if issubclass(cls, interface.CloudBackend))
    for name, cls in base.BACKENDS.items():
        assert cls.name == name and issubclass(cls, interface.Backend)
    assert "azure" not in base.BACKENDS
    with pytest.raises(KeyError):
        base.BACKENDS["azure"]


def test_a_task_submission_does_not_import_the_cloud_sdks():
    """boto3 and google-auth cost a fifth of a second to import: a run on a local or SSH fleet
    (the task module's own imports, then a local client) never loads them."""
    import subprocess
    import sys

    code = ("import sys\n"
            "from gpufleet._collection import ensure_importable\n"
            "ensure_importable()\n"
            "from ansible_collections.gpufleet.cluster.plugins.module_utils.tasks import actions\n"
            "from ansible_collections.gpufleet.cluster.plugins.module_utils.backends import base\n"
            "base.client('local', docker=object())\n"
            "print(sorted(m for m in ('boto3', 'botocore', 'google.auth') if m in sys.modules))\n"
            "base.BACKENDS['aws']\n"
            "print('boto3' in sys.modules)\n")
    root = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
    proc = subprocess.run([sys.executable, "-c", code], cwd=root, capture_output=True,
                          text=True, check=False, env=dict(os.environ, PYTHONPATH=root))
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split("\n")[:2] == ["[]", "True"]


@pytest.mark.parametrize("cls", [local.Local, aws.Aws, gcp.Gcp])
def test_every_backend_implements_the_contract(cls):
    contract = interface.CloudBackend if cls.name in base.CLOUD_BACKENDS else interface.Backend
    for name, member in inspect.getmembers(contract, inspect.isfunction):
        if name.startswith("_"):
            continue
        assert getattr(cls, name) is not member, "%s does not implement %s" % (cls.__name__,
                                                                               name)


def test_client_makes_each_backend_from_its_settings():
    engine = FakeDocker()
    assert base.client("local", docker=engine).docker is engine
    made = base.client("aws", {"aws": {"regions": ["us-east-1"], "retry_delays": [5]}})
    assert isinstance(made, aws.Aws) and made.settings["regions"] == ["us-east-1"]
    with pytest.raises(errors.BackendError, match="^backend settings: aws must be a mapping, "
                                                  "got str$"):
        base.client("aws", {"aws": "us-east-1"})
    with pytest.raises(errors.UnsupportedBackend, match="no backend named azure"):
        base.client("azure", {})


# --- the local backend's client --------------------------------------------------------------

def test_local_client_lists_views_starts_and_removes_nodes():
    engine = FakeDocker([node("web", 0, placement="cluster"),
                         node("web", 1, state="exited", placement="cluster"),
                         node("db", 0)])
    client = local.Local(engine)
    placed = client.fleet_instances("web")
    assert [client.view(n) for n in placed] == [
        {"num": 0, "state": "running", "placement": "cluster"},
        {"num": 1, "state": "exited", "placement": "cluster"}]
    assert sorted(client.all_fleet_instances()) == ["db", "web"]
    records = client.records(placed, "web", "/k", blocks=2)
    assert [(r["name"], r["status"], r["hostname"], r["blocks"]) for r in records] == [
        ("web-0", "idle", "172.30.0.2", 2), ("web-1", "stopped", "172.30.0.3", 2)]
    engine.calls = []
    client.start(placed[1:])
    client.terminate(placed[:1] + client.fleet_instances("db"))
    commands = [c for c in engine.calls if c[0] not in ("ps", "inspect")]
    assert commands == [
        ("start", "gpufleet-web-1"),
        ("rm", "-f", "-v", "gpufleet-web-0"), ("volume", "rm", "-f", "gpufleet-web-0-docker"),
        ("rm", "-f", "-v", "gpufleet-db-0"), ("volume", "rm", "-f", "gpufleet-db-0-docker"),
        ("network", "rm", "gpufleet-db-0"),     # a cluster keeps its one network
    ]


def test_local_client_creates_nodes_falling_back_from_privileged_once():
    engine = FakeDocker(refuse_privileged=True)
    local.Local(engine).create("web", [0, 1], "any", "gpufleet/node:x", "ssh-ed25519 K",
                               "2026-01-01T00:00:00Z")
    runs = [c for c in engine.calls if c[0] == "run"]
    assert len(runs) == 3
    assert [("--privileged" in c, "gpufleet-web-%d" % n in c) for c, n in
            zip(runs, (0, 0, 1))] == [(True, True), (False, True), (False, True)]


# --- errors ----------------------------------------------------------------------------------

def test_backend_errors_share_the_root_error():
    for cls in (errors.BackendError, errors.UnsupportedBackend, errors.NoCapacity,
                errors.CapacityError, errors.LayoutError, aws.AwsError, gcp.GcpError,
                docker.DockerError, local.BuildError, local.FleetError, apply.ApplyError,
                cloud.CloudError):
        assert issubclass(cls, GpufleetError), cls


def test_both_layouts_raise_the_one_layout_error():
    assert aws_layout.LayoutError is gcp_layout.LayoutError is errors.LayoutError


def test_without_backends_a_fleet_uses_the_configured_cloud_backends_else_local(tmp_path):
    from ansible_collections.gpufleet.cluster.plugins.module_utils.offers import catalog

    config = parse_data({"type": "fleet", "name": "gpus", "nodes": 1,
                         "resources": {"gpu": "H100:8"}})[0]
    assert base.configured(None) == [] and base.configured({"gcp": {}, "x": {}}) == ["gcp"]
    assert base.default_backends(config) == ["local"]
    assert base.select(config, "gpus") == "local"
    assert base.select(config, "gpus", {"aws": {"regions": ["us-east-1"]}}) == "aws"
    assert base.select(config, "gpus", {"gcp": {"project_id": "p"}}) == "gcp"
    # Several configured: the one with the cheapest offer for the fleet comes first.
    cheap = {"backend": "gcp", "as_of": "2026-01-01", "currency": "USD", "source": "test",
             "notes": [], "instance_types": [
                 {"name": "a3-highgpu-8g", "cpus": 208, "memory_mib": 1916928, "arch": "x86",
                  "gpu": {"vendor": "nvidia", "name": "H100", "memory_mib": 81920, "count": 8},
                  "offers": [{"region": "us-central1", "zones": ["us-central1-a"],
                              "price": 1.0, "spot_price": None}]}]}
    catalog.write(cheap, str(tmp_path / "gcp.json"))
    both = {"aws": {}, "gcp": {"project_id": "p"}}
    assert base.default_backends(config, both, str(tmp_path)) == ["gcp", "aws"]
    assert base.select(config, "gpus", both, str(tmp_path)) == "gcp"
    # The file's own backends always win.
    assert base.default_backends(dict(config, backends=["aws"]), both) == ["aws"]
    # apply, delete and the inventory see the same resolved backends.
    assert apply.resolved(config, both, str(tmp_path))["backends"][0] in ("aws", "gcp")
