# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The gpufleet.cluster.fleet inventory plugin, through the real ansible-inventory command.

Local fleets are read from a stand-in ``docker`` command on PATH that answers ``ps`` and
``inspect`` the way the engine does (or fails like a stopped engine), so these tests need no
Docker engine; tests/integration runs the plugin against real nodes.
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from ansible_collections.gpufleet.cluster.plugins.module_utils.fleets import records
from ansible_collections.gpufleet.cluster.plugins.module_utils.spec import parse_file

from ..modules.module_runner import ansible_env

BIN = Path(sys.executable).parent

# Each test runs ansible-inventory (about two seconds): kept out of the fast tier.
pytestmark = pytest.mark.slow

NODES = [
    {"Id": "c%d" % n, "Name": "/gpufleet-web-%d" % n, "State": {"Status": "running"},
     "Config": {"Labels": {"gpufleet.fleet": "web", "gpufleet.instance": str(n),
                           "gpufleet.placement": "cluster",
                           "gpufleet.created": "2026-11-21T10:00:00Z"}},
     "NetworkSettings": {"Networks": {"gpufleet-web": {"IPAddress": "172.30.0.%d" % (n + 2)}}}}
    for n in range(2)
]

FAKE_DOCKER = """#!/bin/sh
# A stand-in for the docker command: answers from files, or fails like a stopped engine.
if [ -e "{dir}/down" ]; then echo "Cannot connect to the Docker daemon" >&2; exit 1; fi
echo "$@" >> "{dir}/calls"
case "$1" in
  version) echo 20.10.24 ;;
  ps) cat "{dir}/ids" ;;
  inspect) cat "{dir}/inspect.json" ;;
  *) echo "unexpected: $*" >&2; exit 1 ;;
esac
"""

SSH_FLEET = """type: fleet
name: lab
placement: cluster
ssh_config:
  user: ubuntu
  identity_file: keys/lab
  proxy_jump: {hostname: head.example, user: jump, identity_file: keys/jump}
  hosts:
    - {hostname: 10.0.0.1, internal_ip: 10.1.0.1}
    - {hostname: 10.0.0.2, port: 2222, user: root, internal_ip: 10.1.0.2}
"""


@pytest.fixture
def env(tmp_path):
    fake = tmp_path / "fakebin"
    fake.mkdir()
    (fake / "docker").write_text(FAKE_DOCKER.format(dir=fake))
    (fake / "docker").chmod(0o755)
    (fake / "ids").write_text("\n".join(n["Id"] for n in NODES) + "\n")
    (fake / "inspect.json").write_text(json.dumps(NODES))
    return ansible_env(
        tmp_path,
        PATH=os.pathsep.join([str(fake), str(BIN), os.environ.get("PATH", "")]),
        GPUFLEET_STATE_DIR=str(tmp_path / "state"),
        ANSIBLE_INVENTORY_ENABLED="gpufleet.cluster.fleet,yaml",
        ANSIBLE_INVENTORY_ANY_UNPARSED_IS_FAILED="1",
    ), fake


def inventory(env, *args):
    proc = subprocess.run([str(BIN / "ansible-inventory")] + list(args), env=env,
                          capture_output=True, text=True, check=False, timeout=120)
    assert "Traceback" not in proc.stderr, proc.stderr
    return proc


def _plain(value):
    """ansible-inventory marks plugin-made strings as unsafe in its JSON; unwrap them."""
    if isinstance(value, dict):
        if set(value) == {"__ansible_unsafe"}:
            return value["__ansible_unsafe"]
        return dict((k, _plain(v)) for k, v in value.items())
    if isinstance(value, list):
        return [_plain(v) for v in value]
    return value


def listing(env, source):
    proc = inventory(env, "-i", source, "--list")
    assert proc.returncode == 0, proc.stderr
    return _plain(json.loads(proc.stdout))


def members(data, group):
    return sorted(data.get(group, {}).get("hosts", []))


def test_a_dstack_ssh_fleet_file_is_an_inventory(env, tmp_path):
    env, _fake = env
    path = tmp_path / "lab.dstack.yml"
    path.write_text(SSH_FLEET)
    data = listing(env, str(path))
    assert members(data, "fleet_lab") == ["lab-0", "lab-1"]
    assert members(data, "backend_ssh") == ["lab-0", "lab-1"]
    assert members(data, "cluster") == ["lab-0", "lab-1"]
    second = data["_meta"]["hostvars"]["lab-1"]
    assert second["ansible_host"] == "10.0.0.2" and second["ansible_port"] == 2222
    assert second["ansible_user"] == "root"
    assert second["ansible_ssh_private_key_file"] == str(tmp_path / "keys" / "lab")
    assert second["gpufleet_internal_ip"] == "10.1.0.2"
    args = shlex.split(second["ansible_ssh_common_args"])
    proxy = next(a for a in args if a.startswith("ProxyCommand="))
    assert proxy.endswith("jump@head.example") and str(tmp_path / "keys" / "jump") in proxy


def test_a_task_file_is_left_to_other_plugins(env, tmp_path):
    env, _fake = env
    env["ANSIBLE_INVENTORY_ENABLED"] = "gpufleet.cluster.fleet"
    path = tmp_path / "train.dstack.yml"
    path.write_text("type: task\ncommands: [hostname]\n")
    proc = inventory(env, "-i", str(path), "--list")
    assert proc.returncode != 0  # nothing could parse it, and unparsed sources fail here
    assert "lab-0" not in proc.stdout


def test_config_file_with_inline_fleets_local_nodes_and_constructed_groups(env, tmp_path):
    env, fake = env
    (tmp_path / "lab.dstack.yml").write_text(SSH_FLEET)
    source = tmp_path / "all.gpufleet.yml"
    source.write_text(
        "plugin: gpufleet.cluster.fleet\n"
        "fleets:\n"
        "  - lab.dstack.yml\n"
        "  - {type: fleet, name: web, nodes: 2, backends: [local], placement: cluster}\n"
        "keyed_groups:\n"
        "  - {key: gpufleet_backend, prefix: via}\n"
        "compose:\n"
        "  ansible_become: gpufleet_backend == 'ssh'\n")
    fleet_dir = tmp_path / "state" / "fleets" / "web"
    fleet_dir.mkdir(parents=True)
    (fleet_dir / "facts.json").write_text(
        json.dumps({"web-1": {"cpus": 8, "gpu": {"vendor": "nvidia"}}}))
    data = listing(env, str(source))
    assert members(data, "fleet_web") == ["web-0", "web-1"]
    assert members(data, "backend_local") == ["web-0", "web-1"]
    assert members(data, "via_local") == ["web-0", "web-1"]
    assert members(data, "via_ssh") == ["lab-0", "lab-1"]
    assert members(data, "gpu_nvidia") == ["web-1"]      # from the cached facts
    hostvars = data["_meta"]["hostvars"]
    assert hostvars["web-0"]["ansible_host"] == "172.30.0.2"
    assert hostvars["web-0"]["ansible_user"] == "gpufleet"
    assert hostvars["web-1"]["gpufleet_host"]["cpus"] == 8
    assert "gpufleet_host" not in hostvars["web-0"]
    assert hostvars["lab-0"]["ansible_become"] is True
    assert hostvars["web-0"]["ansible_become"] is False
    assert (fake / "calls").read_text().count("ps ") == 1   # one listing for every local fleet


def test_cache_keeps_the_backend_answer_not_the_groups(env, tmp_path):
    env, fake = env
    source = tmp_path / "web.gpufleet.yml"
    source.write_text(
        "plugin: gpufleet.cluster.fleet\n"
        "fleets: [{type: fleet, name: web, nodes: 2, backends: [local]}]\n"
        "cache: true\n"
        "cache_plugin: ansible.builtin.jsonfile\n"
        "cache_connection: %s\n" % (tmp_path / "cache"))
    assert members(listing(env, str(source)), "fleet_web") == ["web-0", "web-1"]
    (fake / "down").write_text("")
    # The engine is down, but the cached answer still gives the hosts ...
    assert members(listing(env, str(source)), "fleet_web") == ["web-0", "web-1"]
    # ... and the groups follow the file as it is now, not as it was when cached.
    source.write_text(source.read_text() + "groups:\n  first: gpufleet_instance_num == 0\n")
    data = listing(env, str(source))
    assert members(data, "first") == ["web-0"]
    assert members(data, "fleet_web") == ["web-0", "web-1"]


def test_engine_down_without_cache_warns_and_gives_no_hosts(env, tmp_path):
    env, fake = env
    (fake / "down").write_text("")
    path = tmp_path / "web.dstack.yml"
    path.write_text("type: fleet\nname: web\nnodes: 2\nbackends: [local]\n")
    proc = inventory(env, "-i", str(path), "--list")
    assert proc.returncode == 0, proc.stderr
    assert "local fleets' nodes cannot be listed" in proc.stderr
    assert "start it with" in proc.stderr  # the engine message says what to do
    assert members(_plain(json.loads(proc.stdout)), "fleet_web") == []


def test_a_bad_fleet_file_names_the_file_and_field(env, tmp_path):
    env, _fake = env
    path = tmp_path / "bad.dstack.yml"
    path.write_text("type: fleet\nname: bad\nssh_config:\n  hosts: [h1]\n")
    proc = inventory(env, "-i", str(path), "--list")
    assert proc.returncode != 0
    text = " ".join(proc.stderr.split())
    assert str(path) in text and "ssh_config" in text


def test_the_hosts_are_those_the_fleet_module_returns(env, tmp_path):
    """Through ansible-inventory, each host has exactly the groups and variables of the fleet
    module's hosts[] entry for it (records.host_entries), nulls included."""
    env, _fake = env
    path = tmp_path / "lab.dstack.yml"
    path.write_text(SSH_FLEET)
    data = listing(env, str(path))
    config = parse_file(str(path), "fleet")[0]
    fleet = dict(records.fleet_record(config, "lab", str(path)),
                 instances=records.ssh_instances(config, "lab", str(tmp_path)))
    entries = records.host_entries(fleet, env["GPUFLEET_STATE_DIR"])
    assert [e["name"] for e in entries] == ["lab-0", "lab-1"]
    for entry in entries:
        assert data["_meta"]["hostvars"][entry["name"]] == entry["vars"]
        assert entry["vars"]["gpufleet_instance_type"] is None
        assert entry["vars"]["gpufleet_spot"] is False
        for group in entry["groups"]:
            assert entry["name"] in members(data, group)
