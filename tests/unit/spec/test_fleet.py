"""``type: fleet``: nodes, placement, blocks, SSH fleets, backend-only fields
(docs/reference/dstack-files.md#fleet-files)."""

from __future__ import annotations

import textwrap

import pytest
from .helpers import assert_rejected, parse, problems, rng

BACKEND = "type: fleet\nname: gpu-fleet\nnodes: 2\n"
SSH = """\
type: fleet
name: on-prem
ssh_config:
  user: ubuntu
  identity_file: ~/.ssh/id_rsa
  hosts:
    - 10.0.0.1
    - 10.0.0.2
"""


def backend(extra=""):
    return BACKEND + textwrap.dedent(extra)


def ssh(extra=""):
    return SSH + textwrap.dedent(extra)


NODES_CASES = [
    ("2", {"min": 2, "target": 2, "max": 2}),
    ('"1..2"', {"min": 1, "target": 1, "max": 2}),
    ('"..2"', {"min": 0, "target": 0, "max": 2}),
    ('"1.."', {"min": 1, "target": 1, "max": None}),
    ('"0.."', {"min": 0, "target": 0, "max": None}),
    ('".."', {"min": 0, "target": 0, "max": None}),
    ('"1 .. 3"', {"min": 1, "target": 1, "max": 3}),
    ('"4"', {"min": 4, "target": 4, "max": 4}),
    ("{min: 1, max: 2}", {"min": 1, "target": 1, "max": 2}),
    ("{target: 2, max: 3}", {"min": 0, "target": 2, "max": 3}),
    ("{min: 1, target: 2}", {"min": 1, "target": 2, "max": None}),
    ("{}", {"min": 0, "target": 0, "max": None}),
    ("0", {"min": 0, "target": 0, "max": 0}),
]


@pytest.mark.parametrize("value,expected", NODES_CASES, ids=[c[0] for c in NODES_CASES])
def test_nodes(value, expected):
    assert parse("type: fleet\nnodes: %s\n" % value)["nodes"] == expected


NODES_INVALID = [
    ('"2..1"', "max must not be less than min"),
    ("{min: -1}", "min cannot be negative"),
    ("{target: 2, max: 1}", "max must not be less than target"),
    ("{min: 2, target: 1}", "target must not be less than min"),
    ('"a..b"', "whole number"),
    ("true", "number of nodes"),
    ("2.5", "number of nodes"),
    ("[1, 2]", "number of nodes"),
    ('"1..2..3"', "invalid range"),
    ("{min: 1, desired: 2}", "unknown field"),
]


@pytest.mark.parametrize("value,fragment", NODES_INVALID, ids=[c[0] for c in NODES_INVALID])
def test_nodes_invalid(value, fragment):
    path = "nodes.desired" if "desired" in value else "nodes"
    assert_rejected("type: fleet\nnodes: %s\n" % value, path, fragment)


def test_backend_fleet_defaults():
    config = parse(backend())
    assert config["fleet_type"] == "backend"
    assert config["placement"] == "any"
    assert config["blocks"] == 1
    assert config["spot_policy"] == "on-demand"
    assert config["retry"] is None
    # Unset stays unset: the fleet's own instances keep 3d (fleets/idle.py).
    assert config["idle_duration"] is None
    assert config["backends"] is None
    assert config["ssh_config"] is None
    # PR #3776: a fleet without resources is unconstrained, not the run defaults.
    assert config["resources"] == {
        "cpu": {"arch": None, "count": rng(1, None)},
        "memory": rng(0, None),
        "disk": None,
        "shm_size": None,
        "gpu": {
            "vendor": None, "name": None, "count": rng(0, None), "memory": None,
            "total_memory": None, "compute_capability": None,
        },
    }


def test_backend_fleet_fields():
    config = parse(
        backend(
            """\
            placement: cluster
            blocks: auto
            backends: [aws, gcp, local]
            regions: [us-east-1]
            availability_zones: [us-east-1a]
            instance_types: [p5.48xlarge]
            spot_policy: auto
            max_price: 12.5
            idle_duration: 1h
            reservation: cr-0123456789
            retry: {on_events: [no-capacity], duration: 30m}
            tags: {team: ml, cost-center: "42"}
            resources:
              gpu: H100:8
              disk: 500GB..
            """
        )
    )
    assert config["placement"] == "cluster"
    assert config["blocks"] == "auto"
    assert config["backends"] == ["aws", "gcp", "local"]
    assert config["spot_policy"] == "auto"
    assert config["max_price"] == 12.5
    assert config["idle_duration"] == 3600
    assert config["retry"] == {"on_events": ["no-capacity"], "duration": 1800}
    assert config["tags"] == {"team": "ml", "cost-center": "42"}
    assert config["resources"]["gpu"]["name"] == ["H100"]
    assert config["resources"]["gpu"]["vendor"] == "nvidia"
    # Resources given partially take dstack's defaults for the rest.
    assert config["resources"]["memory"] == rng(8, None)
    assert config["resources"]["disk"] == {"size": rng(500, None)}


def test_fleet_idle_duration_off_forms():
    for value in ("off", "false", "-1"):
        assert parse(backend("idle_duration: %s\n" % value))["idle_duration"] == "off"


FLEET_INVALID = [
    ("name: My_Fleet\n", "name", "invalid name"),
    ("name: a\n", "name", "invalid name"),
    ("name: 1fleet\n", "name", "invalid name"),
    ("name: %s\n" % ("a" * 42), "name", "invalid name"),
    ("name: 42\n", "name", "expected a name"),
    ("placement: Cluster\n", "placement", "must be one of"),
    ("placement: clustr\n", "placement", "did you mean 'cluster'"),
    ("blocks: 0\n", "blocks", "at least 1"),
    ("blocks: many\n", "blocks", "auto"),
    ("blocks: true\n", "blocks", "at least 1"),
    ("spot_policy: on_demand\n", "spot_policy", "must be one of"),
    ("max_price: 0\n", "max_price", "greater than 0"),
    ("max_price: -1\n", "max_price", "greater than 0"),
    ("max_price: cheap\n", "max_price", "price"),
    ("backends: [aws, azur]\n", "backends[1]", "unknown backend"),
    ("backends: aws\n", "backends", "write it as a list"),
    ("regions: us-east-1\n", "regions", "list"),
    ("instance_types: [1]\n", "instance_types[0]", "expected a string"),
    ("tags: {'bad key!': x}\n", 'tags["bad key!"]', "invalid tag key"),
    ("tags: {team: 5}\n", "tags.team", "quote"),
    ("tags: {team: 'a;b'}\n", "tags.team", "invalid tag value"),
    ("env: {A: b}\n", "env", "SSH fleets only"),
    ("termination_idle_time: 1h\n", "termination_idle_time", "idle_duration"),
    ("gpu: H100\n", "gpu", "under resources"),
    ("nodez: 3\n", "nodez", "did you mean 'nodes'"),
    ("backend_options: [{type: vastai, offer_order: cheapest}]\n",
     "backend_options[0].offer_order", "must be one of"),
    ("backend_options: [{type: vastai}, {type: vastai}]\n", "backend_options[1]", "duplicate"),
    ("backend_options: [{type: aws}]\n", "backend_options[0].type", "vastai"),
]


@pytest.mark.parametrize("extra,path,fragment", FLEET_INVALID, ids=[c[0].strip() for c in FLEET_INVALID])
def test_backend_fleet_invalid(extra, path, fragment):
    assert_rejected(backend(extra), path, fragment)


def test_ssh_xor_nodes():
    assert_rejected(ssh("nodes: 2\n"), "nodes", "mutually exclusive")
    assert_rejected("type: fleet\nname: empty\n", "", "no ssh_config or nodes")


def test_ssh_fleet_merges_hosts():
    config = parse(
        """\
        type: fleet
        name: lab
        placement: cluster
        blocks: 2
        ssh_config:
          user: ubuntu
          port: 2222
          identity_file: ~/.ssh/lab
          proxy_jump:
            hostname: login.example.com
            user: admin
            identity_file: ~/.ssh/login
          hosts:
            - 192.168.1.10
            - hostname: 192.168.1.11
              port: 22
              user: root
              identity_file: ~/.ssh/root
              blocks: auto
            - hostname: 192.168.1.12
              proxy_jump: {hostname: other-jump, port: 2200, user: x, identity_file: ~/.ssh/x}
        env:
          - HTTP_PROXY=http://proxy:3128
          - DSTACK_DOCKER_PRIVILEGED=true
        """
    )
    assert config["fleet_type"] == "ssh"
    assert config["nodes"] is None
    assert config["resources"] is None
    assert config["env"] == {
        "HTTP_PROXY": "http://proxy:3128", "DSTACK_DOCKER_PRIVILEGED": "true",
    }
    hosts = config["ssh_config"]["hosts"]
    assert hosts[0] == {
        "hostname": "192.168.1.10",
        "port": 2222,
        "user": "ubuntu",
        "identity_file": "~/.ssh/lab",
        "proxy_jump": {
            "hostname": "login.example.com", "port": 22, "user": "admin",
            "identity_file": "~/.ssh/login",
        },
        "internal_ip": None,
        "blocks": 2,
    }
    assert hosts[1]["port"] == 22 and hosts[1]["user"] == "root"
    assert hosts[1]["blocks"] == "auto"
    assert hosts[2]["proxy_jump"]["hostname"] == "other-jump"
    assert hosts[2]["proxy_jump"]["port"] == 2200


def test_ssh_same_address_on_different_ports_is_allowed():
    config = parse(
        ssh().replace("    - 10.0.0.1\n    - 10.0.0.2\n",
                      "    - {hostname: gw.example.com, port: 22013}\n"
                      "    - {hostname: gw.example.com, port: 22014}\n")
    )
    assert [h["port"] for h in config["ssh_config"]["hosts"]] == [22013, 22014]


def test_internal_ips_and_network():
    config = parse(
        """\
        type: fleet
        ssh_config:
          user: u
          identity_file: k
          hosts:
            - {hostname: a.example.com, internal_ip: 10.1.0.1}
            - {hostname: b.example.com, internal_ip: 10.2.0.1}
        """
    )
    assert [h["internal_ip"] for h in config["ssh_config"]["hosts"]] == ["10.1.0.1", "10.2.0.1"]
    assert parse(ssh().replace("  hosts:", "  network: 10.0.0.0/24\n  hosts:"))["ssh_config"][
        "network"
    ] == "10.0.0.0/24"


SSH_INVALID = [
    # (YAML, path, fragment)
    (SSH.replace("  user: ubuntu\n", ""), "ssh_config.hosts[0]", "no SSH user"),
    (SSH.replace("  identity_file: ~/.ssh/id_rsa\n", ""), "ssh_config.hosts[1]", "no SSH key"),
    (SSH.replace("    - 10.0.0.2\n", "    - 10.0.0.1\n"), "ssh_config.hosts[1]", "listed twice"),
    (SSH.replace("    - 10.0.0.2\n", "    - {hostname: 10.0.0.2, port: 70000}\n"),
     "ssh_config.hosts[1].port", "at most 65535"),
    (SSH.replace("    - 10.0.0.2\n", "    - {hostname: 10.0.0.2, port: ssh}\n"),
     "ssh_config.hosts[1].port", "port number"),
    (SSH.replace("    - 10.0.0.2\n", "    - {port: 22}\n"), "ssh_config.hosts[1]", "needs hostname"),
    (SSH.replace("    - 10.0.0.2\n", "    - {hostname: 10.0.0.2, hostnme: x}\n"),
     "ssh_config.hosts[1].hostnme", "did you mean 'hostname'"),
    (SSH.replace("    - 10.0.0.2\n", "    - {hostname: 10.0.0.2, blocks: 0}\n"),
     "ssh_config.hosts[1].blocks", "at least 1"),
    (SSH.replace("    - 10.0.0.2\n", "    - {hostname: 10.0.0.2, internal_ip: 8.8.8.8}\n"),
     "ssh_config.hosts[1].internal_ip", "not private"),
    (SSH.replace("    - 10.0.0.2\n", "    - {hostname: 10.0.0.2, internal_ip: 10.0.0.300}\n"),
     "ssh_config.hosts[1].internal_ip", "invalid IP address"),
    (SSH.replace("    - 10.0.0.2\n", "    - {hostname: 10.0.0.2, internal_ip: 10.0.0.2}\n"),
     "ssh_config.hosts", "all hosts or none"),
    (SSH.replace("    - 10.0.0.1\n    - 10.0.0.2\n",
                 "    - {hostname: a, internal_ip: 10.0.0.1}\n  network: 10.0.0.0/8\n"),
     "ssh_config.network", "mutually exclusive"),
    (SSH.replace("  hosts:", "  network: 8.8.8.0/24\n  hosts:"), "ssh_config.network", "public network"),
    (SSH.replace("  hosts:", "  network: not-a-net\n  hosts:"), "ssh_config.network", "failed to parse"),
    (SSH.replace("  hosts:", "  proxy_jump: {hostname: jump}\n  hosts:"),
     "ssh_config.proxy_jump", "needs user, identity_file"),
    (SSH.replace("  hosts:\n    - 10.0.0.1\n    - 10.0.0.2\n", "  hosts: []\n"),
     "ssh_config.hosts", "at least one host"),
    (SSH.replace("  hosts:\n    - 10.0.0.1\n    - 10.0.0.2\n", "  hosts: 10.0.0.1\n"),
     "ssh_config.hosts", "list"),
    (SSH.replace("  hosts:\n    - 10.0.0.1\n    - 10.0.0.2\n", ""), "ssh_config", "needs hosts"),
    (SSH.replace("    - 10.0.0.2\n", "    - ''\n"), "ssh_config.hosts[1]", "empty"),
    (SSH.replace("    - 10.0.0.2\n", "    - 42\n"), "ssh_config.hosts[1]", "hostname"),
    (SSH.replace("  user: ubuntu\n", "  user: ubuntu\n  ssh_key: {private: x}\n"),
     "ssh_config.ssh_key", "identity_file"),
    (SSH + "resources:\n  gpu: 1\n", "resources", "SSH fleet configuration does not support"),
    (SSH + "spot_policy: spot\n", "spot_policy", "SSH fleet configuration does not support"),
    (SSH + "idle_duration: 1h\n", "idle_duration", "does not support"),
    (SSH + "tags: {a: b}\n", "tags", "does not support"),
    (SSH + "env: [BAD-NAME=1]\n", "env[0]", "invalid entry"),
    (SSH + "env: [A=1, A=2]\n", "env[1]", "duplicate environment variable"),
    (SSH + "env: {FLAG: true}\n", "env.FLAG", "quote it"),
    (SSH + "env: A=1\n", "env", "mapping"),
]


@pytest.mark.parametrize("text,path,fragment", SSH_INVALID)
def test_ssh_fleet_invalid(text, path, fragment):
    assert_rejected(text, path, fragment)


def test_all_problems_of_a_file_are_reported_together():
    found = problems(
        """\
        type: fleet
        name: Bad_Name
        nodes: "3..1"
        placement: everywhere
        resources:
          gpu: "A100:"
          memory: lots
        """
    )
    paths = {path for path, _message in found}
    assert {"name", "nodes", "placement", "resources.gpu", "resources.memory"} <= paths


def test_ssh_fleet_numeric_env_values_are_text():
    config = parse(SSH + "env: {PORT: 8080, RATIO: 0.5}\n")
    assert config["env"] == {"PORT": "8080", "RATIO": "0.5"}
