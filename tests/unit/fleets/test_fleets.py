# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Fleets as hosts: names, convergence plans, instance records, host variables, reports."""

from __future__ import annotations

import os
import shlex
import stat

import pytest
import yaml
from ansible.inventory.data import InventoryData
from ansible.plugins.filter.core import to_nice_json

from ansible_collections.gpufleet.cluster.plugins.inventory import fleet as inventory_plugin
from ansible_collections.gpufleet.cluster.plugins.modules import fleet as fleet_module
from ansible_collections.gpufleet.cluster.plugins.module_utils.backends import base, local
from ansible_collections.gpufleet.cluster.plugins.module_utils.backends.docker_cli import Docker
from ansible_collections.gpufleet.cluster.plugins.module_utils.fleets import (
    apply,
    hostkeys,
    plan,
    records,
    report,
    state,
)
from ansible_collections.gpufleet.cluster.plugins.module_utils.spec import naming, parse_data

from ..plugins.modules import module_runner

SSH_FLEET = {
    "type": "fleet",
    "name": "onprem",
    "placement": "cluster",
    "ssh_config": {
        "user": "ubuntu",
        "identity_file": "keys/id_ed25519",
        "proxy_jump": {"hostname": "head.example.com", "port": 2200, "user": "jump",
                       "identity_file": "~/.ssh/jump key"},
        "hosts": [
            "10.0.0.1",
            {"hostname": "10.0.0.2", "port": 2222, "user": "root", "blocks": "auto"},
        ],
    },
}


def parsed(data):
    return parse_data(data, "test")[0]


# --- naming -----------------------------------------------------------------------------------

@pytest.mark.parametrize("path, expected", [
    ("/x/gpu-cluster.dstack.yml", "gpu-cluster"),
    ("/x/My_Fleet.dstack.yaml", "my-fleet"),
    ("/x/fleet.yml", "fleet"),
    ("/x/a.dstack.yml", None),            # one letter: not a valid dstack name
    ("/x/9lives.dstack.yml", None),       # must start with a letter
    ("/x/" + "a" * 50 + ".yml", None),    # too long
])
def test_name_from_file(path, expected):
    assert naming.name_from_file(path) == expected


@pytest.mark.parametrize("path, expected", [
    ("/x/gpu-cluster.dstack.yml", "gpu-cluster"),     # the whole suffix goes, not the file name
    ("/x/My.Fleet.v2.yml", "my-fleet-v2"),            # not cut at the first dot
    ("/x/a.dstack.yml", "a.dstack.yml"),              # no valid name: the file's own name
])
def test_label_names_an_unnamed_file_by_fleet_names_rule(path, expected):
    """offer_info and the gpufleet command name a configuration by naming.label, which takes
    fleet_name's rule: one file, one name."""
    assert naming.label({"name": None}, path) == expected
    assert naming.label({"name": "given"}, path) == "given"
    assert naming.label({}) == "inline config"
    if naming.name_from_file(path):
        assert naming.label({}, path) == naming.fleet_name({}, path)


def test_fleet_name_prefers_the_name_field():
    assert naming.fleet_name({"name": "given"}, "/x/other.dstack.yml") == "given"
    assert naming.fleet_name({"name": None}, "/x/other.dstack.yml") == "other"


def test_fleet_without_any_usable_name_says_what_to_add():
    with pytest.raises(naming.NamingError) as info:
        naming.fleet_name({"name": None}, "/x/9.dstack.yml")
    assert "/x/9.dstack.yml" in str(info.value)
    assert "add `name: <name>`" in str(info.value)
    with pytest.raises(naming.NamingError, match="inline fleet configuration"):
        naming.fleet_name({"name": None})


def test_group_names_are_ansible_safe():
    assert naming.group_name("fleet", "my-fleet") == "fleet_my_fleet"
    assert naming.group_name("gpu", "nvidia") == "gpu_nvidia"


# --- plan -------------------------------------------------------------------------------------

def nodes(minimum, target, maximum):
    return {"min": minimum, "target": target, "max": maximum}


def existing(*pairs):
    return [{"num": n, "state": s} for n, s in pairs]


def test_new_fleet_creates_target_nodes():
    assert plan.plan_backend(nodes(0, 2, 4), []) == {
        "create": [0, 1], "keep": [], "start": [], "remove": []}


def test_reapply_keeps_existing_and_fills_lowest_free_numbers():
    result = plan.plan_backend(nodes(1, 3, 3), existing((0, "running"), (2, "running")))
    assert result == {"create": [1], "keep": [0, 2], "start": [], "remove": []}


def test_stopped_nodes_are_started_not_replaced():
    result = plan.plan_backend(nodes(2, 2, 2), existing((0, "exited"), (1, "running")))
    assert result == {"create": [], "keep": [0, 1], "start": [0], "remove": []}


def test_broken_nodes_are_replaced():
    result = plan.plan_backend(nodes(2, 2, 2), existing((0, "dead"), (1, "running")))
    assert result["remove"] == [0]
    assert result["create"] == [0]


def test_more_nodes_than_target_but_within_max_are_kept():
    result = plan.plan_backend(nodes(1, 2, 5), existing(*[(n, "running") for n in range(4)]))
    assert result == {"create": [], "keep": [0, 1, 2, 3], "start": [], "remove": []}


def test_nodes_above_max_are_removed_highest_first():
    result = plan.plan_backend(nodes(1, 2, 2), existing(*[(n, "running") for n in range(4)]))
    assert result["remove"] == [2, 3]
    assert result["keep"] == [0, 1]


def test_unbounded_max_never_removes():
    result = plan.plan_backend(nodes(0, 1, None), existing(*[(n, "running") for n in range(9)]))
    assert result["remove"] == [] and len(result["keep"]) == 9


def test_has_changes():
    assert not plan.has_changes({"create": [], "keep": ["a"], "start": [], "remove": []})
    assert plan.has_changes({"create": [], "keep": [], "start": [], "remove": [],
                             "release": ["h"]})


# --- records and host variables ---------------------------------------------------------------

def test_ssh_instances_resolve_per_host_settings_and_paths(tmp_path):
    config = parsed(SSH_FLEET)
    instances = records.ssh_instances(config, "onprem", "/srv/fleets")
    assert [i["name"] for i in instances] == ["onprem-0", "onprem-1"]
    first, second = instances
    assert first["identity_file"] == "/srv/fleets/keys/id_ed25519"
    assert first["user"] == "ubuntu" and first["port"] == 22
    assert second["user"] == "root" and second["port"] == 2222 and second["blocks"] == "auto"
    assert first["proxy_jump"]["hostname"] == "head.example.com"
    assert first["placement"] == "cluster" and first["backend"] == "ssh"


def test_ssh_hostvars_reach_the_host_through_its_jump_host(tmp_path):
    config = parsed(SSH_FLEET)
    instance = records.ssh_instances(config, "onprem", "/srv/fleets")[1]
    variables = records.hostvars(instance, str(tmp_path))
    assert variables["ansible_host"] == "10.0.0.2"
    assert variables["ansible_port"] == 2222
    assert variables["ansible_user"] == "root"
    assert variables["gpufleet_instance_num"] == 1
    args = shlex.split(variables["ansible_ssh_common_args"])
    known = str(tmp_path / "fleets" / "onprem" / "known_hosts")
    assert "UserKnownHostsFile=" + known in args
    proxy = [a for a in args if a.startswith("ProxyCommand=")]
    assert len(proxy) == 1
    # The jump command survives both rounds of splitting (Ansible's, then the shell's).
    jump = shlex.split(proxy[0][len("ProxyCommand="):])
    assert jump[:4] == ["ssh", "-W", "%h:%p", "-q"]
    assert jump[jump.index("-p") + 1] == "2200"
    assert jump[jump.index("-i") + 1].endswith("/.ssh/jump key")
    assert jump[-1] == "jump@head.example.com"


def test_each_route_to_a_host_has_its_own_multiplexed_connection(tmp_path):
    """Ansible names a ControlPersist socket by address, port and user: an SSH fleet over a
    local fleet's nodes (the same addresses, through a jump host) would use the local fleet's
    direct connection while it stays open."""
    instance = records.ssh_instances(parsed(SSH_FLEET), "onprem", "/srv/fleets")[1]
    path = records.hostvars(instance, str(tmp_path))["ansible_control_path"]
    assert path.startswith("%(directory)s/gf-") and len(path) == len("%(directory)s/gf-") + 12
    assert records.hostvars(instance, str(tmp_path))["ansible_control_path"] == path
    others = [dict(instance, proxy_jump=None), dict(instance, identity_file="/other/key"),
              dict(instance, fleet="lab"), dict(instance, backend="local")]
    paths = [records.hostvars(other, str(tmp_path))["ansible_control_path"] for other in others]
    assert len(set(paths + [path])) == len(others) + 1


def test_local_hostvars_do_not_record_host_keys():
    record = dict(records.ssh_instances(parsed(SSH_FLEET), "onprem")[0], backend="local")
    variables = records.hostvars(record)
    assert "UserKnownHostsFile=/dev/null" in variables["ansible_ssh_common_args"]
    assert variables["ansible_python_interpreter"] == records.LOCAL_NODE_PYTHON


def test_groups():
    instance = records.ssh_instances(parsed(SSH_FLEET), "onprem")[0]
    assert records.groups(instance, "nvidia") == [
        "gpufleet", "fleet_onprem", "backend_ssh", "cluster", "gpu_nvidia"]
    assert "cluster" not in records.groups(dict(instance, placement="any"))


def test_release_hostvars_use_the_fleet_level_settings(tmp_path):
    variables = records.release_hostvars(parsed(SSH_FLEET), "onprem", "/srv/fleets/f.yml")
    assert variables["ansible_user"] == "ubuntu"
    assert variables["ansible_ssh_private_key_file"] == "/srv/fleets/keys/id_ed25519"
    assert "ProxyCommand=" in variables["ansible_ssh_common_args"]
    assert "ansible_host" not in variables and "ansible_control_path" not in variables


def test_spec_gpu_vendor():
    assert records.spec_gpu_vendor(parsed({"type": "fleet", "name": "ab", "nodes": 1,
                                           "resources": {"gpu": "nvidia:2"}})) == "nvidia"
    assert records.spec_gpu_vendor(parsed({"type": "fleet", "name": "ab", "nodes": 1})) is None


# --- local backend records --------------------------------------------------------------------

def raw_node(fleet, num, state_="running", placement="cluster", ip="172.20.0.2"):
    net = local.network_name(fleet, num, placement)
    return {
        "id": "c%d" % num, "name": local.container_name(fleet, num), "state": state_,
        "labels": {local.FLEET_LABEL: fleet, local.INSTANCE_LABEL: str(num),
                   local.PLACEMENT_LABEL: placement, local.CREATED_LABEL: "2026-11-21T10:00:00Z"},
        "created": "2026-11-21T10:00:00Z", "networks": {net: ip},
    }


def test_local_instance_records_come_from_labels():
    raw = [raw_node("demo", 1, ip="172.20.0.3"), raw_node("demo", 0, "exited"),
           raw_node("other", 0)]
    found = local.instance_records(raw, "demo", 1, "/k")
    assert [(r["name"], r["status"], r["hostname"]) for r in found] == [
        ("demo-1", "idle", "172.20.0.3"), ("demo-0", "stopped", "172.20.0.2")]
    assert all(r["user"] == local.NODE_USER and r["identity_file"] == "/k" for r in found)


def test_local_networks_follow_placement():
    assert local.network_name("demo", 3, "cluster") == "gpufleet-demo"
    assert local.network_name("demo", 3, "any") == "gpufleet-demo-3"


def test_local_fleet_refuses_gpus():
    config = parsed({"type": "fleet", "name": "gpus", "nodes": 1,
                     "resources": {"gpu": "1..8"}})
    with pytest.raises(local.FleetError, match="at least 1 GPU"):
        local.check_local_fleet(config, "gpus")


def test_backend_choice(tmp_path):
    assert base.select({"backends": None}, "x") == "local"
    assert base.select({"backends": ["aws", "local"]}, "x") == "local"
    assert base.select({"backends": ["azure", "aws", "gcp"]}, "x") == "aws"
    assert base.select({"backends": ["azure", "gcp"]}, "x") == "gcp"
    with pytest.raises(apply.ApplyError, match="backends azure, lambda cannot provision"):
        apply.describe(parsed({"type": "fleet", "name": "elsewhere", "nodes": 1,
                               "backends": ["azure", "lambda"]}), root=str(tmp_path))


# --- state dir --------------------------------------------------------------------------------

def test_state_dir_precedence(tmp_path):
    assert state.state_dir("/explicit", {"GPUFLEET_STATE_DIR": "/env"}) == "/explicit"
    assert state.state_dir(None, {"GPUFLEET_STATE_DIR": "/env"}) == "/env"
    assert state.state_dir(None, {"XDG_DATA_HOME": "/xdg"}) == "/xdg/gpufleet"


def test_fleet_key_is_made_once_and_removed_with_the_fleet(tmp_path):
    root = str(tmp_path)
    path, public, made = state.ensure_key(root, "demo")
    assert made and public.startswith("ssh-ed25519 ") and public.endswith("gpufleet-demo")
    again = state.ensure_key(root, "demo")
    assert again == (path, public, False)
    assert state.remove_fleet_dir(root, "demo") is True
    assert state.remove_fleet_dir(root, "demo") is False


def test_cached_facts_are_optional(tmp_path):
    root = str(tmp_path)
    assert state.read_facts(root, "demo") == {}
    state.ensure_fleet_dir(root, "demo")
    with open(state.facts_path(root, "demo"), "w") as handle:
        handle.write("not json")
    assert state.read_facts(root, "demo") == {}
    with open(state.facts_path(root, "demo"), "w") as handle:
        handle.write('{"demo-0": {"cpus": 2}, "demo-1": "junk"}')
    assert state.read_facts(root, "demo") == {"demo-0": {"cpus": 2}}


def test_facts_are_cached_atomically_for_the_owner_alone(tmp_path, monkeypatch):
    root = str(tmp_path / "state")
    facts = {"demo-1": {"cpus": 4, "gpu": None}, "demo-0": {"cpus": 2, "name": "n\u00f6de"}}
    # Check mode says it would write, and writes nothing (not even the fleet's directory).
    assert state.write_facts(root, "demo", facts, check_mode=True) is True
    assert not os.path.exists(state.fleet_dir(root, "demo"))
    assert state.write_facts(root, "demo", facts) is True
    path = state.facts_path(root, "demo")
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    assert state.read_facts(root, "demo") == facts
    # The same text the playbook's to_nice_json wrote before, so an old cache reads the same.
    with open(path, encoding="utf-8") as handle:
        assert handle.read() == to_nice_json(facts)
    assert os.listdir(state.fleet_dir(root, "demo")) == ["facts.json"]  # no temporary left
    # The same content again is no change; the file is not touched.
    before = os.stat(path).st_ino
    assert state.write_facts(root, "demo", facts) is False
    assert state.write_facts(root, "demo", facts, check_mode=True) is False
    assert os.stat(path).st_ino == before
    # A wider mode, or other content, is a change; the file is replaced, never rewritten in place.
    os.chmod(path, 0o644)
    assert state.write_facts(root, "demo", facts, check_mode=True) is True
    assert state.write_facts(root, "demo", facts) is True
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    assert state.write_facts(root, "demo", {}) is True
    assert state.read_facts(root, "demo") == {}
    # A cache that cannot be written says where, and what to do.
    monkeypatch.setattr(state.os, "replace", _refuse)
    with pytest.raises(state.StateError, match="cannot write .*facts.json .*GPUFLEET_STATE_DIR"):
        state.write_facts(root, "demo", facts)
    # No temporary left; facts.lock is the lock writers take (it stays, empty).
    assert sorted(os.listdir(state.fleet_dir(root, "demo"))) == ["facts.json", "facts.lock"]


def _refuse(*_args):
    raise PermissionError(13, "Permission denied")


def test_an_unreadable_cache_is_replaced(tmp_path):
    root = str(tmp_path)
    state.ensure_fleet_dir(root, "demo")
    with open(state.facts_path(root, "demo"), "w") as handle:
        handle.write("not json")
    assert state.write_facts(root, "demo", {"demo-0": {"cpus": 1}}) is True
    assert state.read_facts(root, "demo") == {"demo-0": {"cpus": 1}}


def test_ready_facts_keep_the_measured_idle_instances():
    fleet = {"name": "demo", "instances": [
        {"name": "demo-0", "status": "idle", "resources": {"cpus": 2}},
        {"name": "demo-1", "status": "failed", "resources": {"cpus": 2}},
        {"name": "demo-2", "status": "idle", "resources": None},
        {"name": "demo-3", "status": "idle"},
        {"name": "demo-4", "status": "unreachable"},
    ]}
    assert records.ready_facts(fleet) == {"demo-0": {"cpus": 2}}
    assert records.ready_facts({"name": "demo", "instances": []}) == {}


def test_last_peers_are_the_instances_measured_at_the_last_apply():
    fleet = {"name": "demo", "instances": [
        {"name": "demo-0", "port": 22}, {"name": "demo-1", "port": 2222},
        {"name": "demo-2", "port": 22}, {"name": "demo-3"}]}
    facts = {"demo-0": {"internal_ip": "10.0.0.5"}, "demo-1": {"internal_ip": "10.0.0.6"},
             "demo-2": {"cpus": 2}, "demo-3": {"internal_ip": "10.0.0.8"},
             "gone-9": {"internal_ip": "10.0.0.9"}}
    assert records.last_peers(fleet, facts) == [
        {"name": "demo-0", "address": "10.0.0.5", "port": 22},
        {"name": "demo-1", "address": "10.0.0.6", "port": 2222},
        {"name": "demo-3", "address": "10.0.0.8", "port": 22}]
    assert records.last_peers(fleet, {}) == []


def test_the_peers_reached_filter_wraps_preflight_and_names_bad_input():
    from ansible.errors import AnsibleFilterError
    from ansible_collections.gpufleet.cluster.plugins.filter.peers_reached import FilterModule

    reached = FilterModule().filters()["peers_reached"]
    probed = [{"name": "b", "address": "10.0.0.6", "port": 22, "reachable": True}]
    assert reached(probed, [{"name": "a", "address": "10.0.0.5"},
                            {"name": "b", "address": "10.0.0.6"}], "a") is True
    assert reached(probed, [{"name": "c", "address": "10.0.0.7"}], "a") is False
    with pytest.raises(AnsibleFilterError, match="expects the peers a preflight returned"):
        reached(None, [])
    with pytest.raises(AnsibleFilterError, match=r"peers_reached: peers\[0\]: address"):
        reached(probed, [{"name": "c"}])


# --- host entries: the fleet module and the inventory plugin agree ------------------------------

CLOUD_FLEET = {"type": "fleet", "name": "train", "nodes": 1, "backends": ["aws"],
               "resources": {"gpu": "A100:8"}}


def cloud_record(key_file):
    return {
        "name": "train-0", "num": 0, "fleet": "train", "backend": "aws", "region": "us-east-1",
        "zone": "us-east-1a", "instance_type": "p4d.24xlarge", "instance_id": "i-0123",
        "price": 9.83, "spot": True, "status": "idle", "error": None,
        "created": "2026-11-21T10:00:00Z", "hostname": "54.0.0.1", "port": 22, "user": "ubuntu",
        "identity_file": key_file, "proxy_jump": None, "internal_ip": "10.0.0.1",
        "network": None, "blocks": 1, "placement": "any",
    }


def fleet_case(kind, tmp_path):
    """(fleet file, its config, fleet name, the instance records, the backends' answers)."""
    root = str(tmp_path / "state")
    if kind == "ssh":
        data, base_dir = SSH_FLEET, str(tmp_path)
    elif kind == "local":
        data = {"type": "fleet", "name": "web", "nodes": 2, "backends": ["local"],
                "placement": "cluster"}
    else:
        data = CLOUD_FLEET
    path = tmp_path / (data["name"] + ".dstack.yml")
    path.write_text(yaml.safe_dump(data))
    config, name = parsed(data), data["name"]
    key = state.key_path(root, name)
    if kind == "ssh":
        return str(path), config, name, records.ssh_instances(config, name, base_dir), {}
    if kind == "local":
        raw = [raw_node("web", 0), raw_node("web", 1, ip="172.20.0.3"),
               raw_node("web", 2, "exited", ip="")]  # no address: not a host
        return str(path), config, name, local.instance_records(raw, name, 1, key), {"local": raw}
    instance = cloud_record(key)
    return str(path), config, name, [instance], {"aws": {name: [instance]}}


def module_hosts(monkeypatch, path, config, name, instances, root):
    """The ``hosts`` the fleet module returns when its apply finds ``instances``."""
    def fake_apply(config, path, docker, root, check_mode, **_kwargs):
        record = records.fleet_record(config, name, path)
        record["instances"] = instances
        return record, False

    monkeypatch.setattr(apply, "apply", fake_apply)
    monkeypatch.setattr(Docker, "ping", lambda self: None)
    code, result = module_runner.run_module(fleet_module.main, {"path": path, "state_dir": root})
    assert code == 0, result
    return result["hosts"]


def plugin_hosts(path, config, name, answers, root):
    """The hosts the inventory plugin adds for a fleet: ``{name, groups, vars}`` each."""
    plugin = inventory_plugin.InventoryModule()
    plugin.inventory = InventoryData()
    plugin._options = {"strict": False, "compose": {}, "groups": {}, "keyed_groups": []}
    plugin._add_fleet(config, path, name, root, answers)
    # Ansible's own inventory_file and inventory_dir (the source, here none) are not the plugin's.
    return [{"name": host.name,
             "groups": [g.name for g in host.get_groups() if g.name != "all"],
             "vars": dict((k, v) for k, v in host.vars.items()
                          if k not in ("inventory_file", "inventory_dir"))}
            for host in plugin.inventory.hosts.values()]


@pytest.mark.parametrize("kind", ["ssh", "local", "cloud"])
def test_the_module_gives_each_host_what_the_inventory_plugin_gives(kind, tmp_path, monkeypatch):
    root = str(tmp_path / "state")
    path, config, name, instances, answers = fleet_case(kind, tmp_path)
    from_module = module_hosts(monkeypatch, path, config, name, instances, root)
    from_plugin = plugin_hosts(path, config, name, answers, root)
    assert from_module == from_plugin
    assert len(from_module) == len([i for i in instances if i["hostname"]]) > 0
    for entry in from_module:
        assert set(entry["vars"]) >= {
            "gpufleet_instance_type", "gpufleet_price", "gpufleet_spot", "gpufleet_created"}
    first = from_module[0]["vars"]
    if kind == "cloud":
        assert (first["gpufleet_instance_type"], first["gpufleet_price"], first["gpufleet_spot"],
                first["gpufleet_created"]) == ("p4d.24xlarge", 9.83, True, "2026-11-21T10:00:00Z")
        assert "gpu_nvidia" in from_module[0]["groups"]
    # Variables with no value are left out, for add_host as for the inventory.
    assert ("ansible_python_interpreter" in first) == (kind == "local")
    assert "ansible_ssh_private_key_file" in first
    if kind == "ssh":
        assert "ansible_ssh_private_key_file" not in records.hostvars(
            dict(instances[0], identity_file=None))


def test_cached_facts_add_the_host_facts_and_their_gpu_group(tmp_path):
    root = str(tmp_path / "state")
    path, config, name, instances, answers = fleet_case("local", tmp_path)
    facts = {"cpus": 8, "gpu": {"vendor": "amd"}}
    state.write_facts(root, name, {"web-1": facts})
    from_plugin = dict((h["name"], h) for h in plugin_hosts(path, config, name, answers, root))
    plain = records.host_entries(dict(records.fleet_record(config, name, path),
                                      instances=instances), root)
    assert from_plugin["web-0"] == plain[0]
    assert from_plugin["web-1"] == records.host_entry(instances[1], root, None, facts)
    assert from_plugin["web-1"]["vars"] == dict(plain[1]["vars"], gpufleet_host=facts)
    assert from_plugin["web-1"]["groups"] == plain[1]["groups"] + ["gpu_amd"]


# --- report -----------------------------------------------------------------------------------

def test_report_folds_statuses_and_says_how_a_host_was_tried():
    config = parsed(SSH_FLEET)
    record = records.fleet_record(config, "onprem")
    record["instances"] = records.ssh_instances(config, "onprem", "/srv")
    folded = report.fold(record, {
        "onprem-0": {"status": "idle", "error": None, "claimed": True,
                     "facts": {"internal_ip": "10.0.0.1", "cpus": 4}},
        "onprem-1": {"status": "unreachable", "error": "timed out\n waiting"},
    }, ["10.0.0.9"])
    first, second = folded["instances"]
    assert first["status"] == "idle" and first["resources"]["cpus"] == 4
    assert second["status"] == "unreachable"
    assert second["error"].startswith(
        "cannot reach root@10.0.0.2:2222 through the jump host jump@head.example.com:2200: "
        "timed out waiting.")
    # A host the plan could not reach is not "keep": the plan cannot read it.
    assert folded["plan"] == {"create": ["onprem-0"], "start": [], "keep": [],
                              "unread": ["onprem-1"], "remove": [], "release": ["10.0.0.9"]}
    assert report.failures(folded) == ["onprem-1 (10.0.0.2): " + second["error"]]
    assert record["instances"][1]["status"] == "pending"  # the input is not changed
    assert folded["status"] == "active"   # one host is ready
    # The plan's message, carried into the apply of the same command, is not wrapped again.
    again = report.fold(record, {"onprem-1": {"status": "unreachable",
                                              "error": second["error"]}})
    assert again["instances"][1]["error"] == second["error"]


def test_a_fleet_whose_only_host_cannot_be_reached_is_not_active():
    config = parsed(dict(SSH_FLEET, ssh_config=dict(SSH_FLEET["ssh_config"],
                                                    hosts=SSH_FLEET["ssh_config"]["hosts"][:1])))
    record = records.fleet_record(config, "onprem")
    record["instances"] = records.ssh_instances(config, "onprem", "/srv")
    folded = report.fold(record, {"onprem-0": {"status": "unreachable",
                                               "error": "Connection refused"}})
    assert folded["status"] == "unreachable"
    assert folded["plan"]["unread"] == ["onprem-0"] and folded["plan"]["keep"] == []
    failed = report.fold(record, {"onprem-0": {"status": "failed", "error": "no docker"}})
    assert failed["status"] == "failed"
    assert report.fold(record, {"onprem-0": {"status": "idle"}})["status"] == "active"


def test_report_keeps_role_checks_and_dcgm_health_reaches_the_resources():
    config = parsed(SSH_FLEET)
    record = records.fleet_record(config, "onprem")
    record["instances"] = records.ssh_instances(config, "onprem", "/srv")
    checks = {
        "docker": {"applies": True, "ok": True, "problems": [],
                   "package_version": "5:27.3.1-1~debian.12~bookworm"},
        "nvidia": {"applies": True, "ok": True, "problems": [], "gpu_count": 8,
                   "driver_version": "570.124.06"},
        "efa": {"applies": False, "reason": "t3.micro does not support EFA"},
        "dcgm": {"applies": True, "ok": False, "problems": ["GPU 3: XID 79"],
                 "health": "failure"},
        "amd": "",  # a role that was listed but never got to record anything
        "infiniband": {},
    }
    folded = report.fold(record, {
        "onprem-0": {"status": "idle", "facts": {"cpus": 4}, "checks": checks},
        "onprem-1": {"status": "idle", "facts": {"cpus": 4}},
    })
    first, second = folded["instances"]
    assert first["resources"] == {"cpus": 4, "health": "failure"}
    assert sorted(first["checks"]) == ["dcgm", "docker", "efa", "nvidia"]
    assert "checks" not in second and "health" not in second["resources"]
    assert report.check_lines(folded) == [
        "onprem-0: dcgm: PROBLEM: GPU 3: XID 79",
        "onprem-0: docker: ok (5:27.3.1-1~debian.12~bookworm)",
        "onprem-0: efa: skipped: t3.micro does not support EFA",
        "onprem-0: nvidia: ok (8 GPUs, driver 570.124.06)",
    ]


def test_check_summary_counts_lists_and_flags():
    assert report.check_summary({"applies": True, "ok": True, "problems": [],
                                 "active_ports": ["mlx5_0/1", "mlx5_1/1"],
                                 "reboot_required": True}) == (
        "ok (2 active ports, reboot required)")
    assert report.check_summary({"applies": True, "ok": True, "problems": []}) == "ok"
    assert report.check_summary({"applies": False}) == "skipped: does not apply"


# --- host keys --------------------------------------------------------------------------------

# What OpenSSH prints when a host presents another key than the one recorded (accept-new).
CHANGED_KEY_STDERR = (
    "@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@\n"
    "@    WARNING: REMOTE HOST IDENTIFICATION HAS CHANGED!     @\n"
    "@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@\n"
    "IT IS POSSIBLE THAT SOMEONE IS DOING SOMETHING NASTY!\n"
    "Offending ED25519 key in /state/fleets/onprem/known_hosts:2\n"
    "Host key for [10.0.0.2]:2222 has changed and you have requested strict checking.\n"
    "Host key verification failed.\n")


def test_ssh_fleet_hosts_check_host_keys_whatever_ansibles_setting():
    """ansible-runner (and an ansible.cfg) may turn Ansible's host_key_checking off, which puts
    StrictHostKeyChecking=no before the host's own options: the host itself says it is on."""
    instance = records.ssh_instances(parsed(SSH_FLEET), "onprem", "/srv/fleets")[1]
    assert records.hostvars(instance, "/state")["ansible_host_key_checking"] is True
    released = records.release_hostvars(parsed(SSH_FLEET), "onprem", "/srv/fleets/f.yml", "/st")
    assert released["ansible_host_key_checking"] is True
    # Hosts gpufleet made keep their own policy (no record: a fresh key each time).
    assert "ansible_host_key_checking" not in records.hostvars(dict(instance, backend="local"))


def test_a_refused_host_key_is_recognised_in_what_openssh_says():
    assert hostkeys.refused(CHANGED_KEY_STDERR)
    assert hostkeys.refused("Host key verification failed.\r\n")
    assert not hostkeys.refused("ssh: connect to host 10.0.0.2 port 22: Connection refused")
    assert not hostkeys.refused("Permission denied (publickey).")
    assert not hostkeys.refused(None)


def test_the_changed_key_message_names_the_host_and_how_to_accept_its_new_key():
    instance = records.ssh_instances(parsed(SSH_FLEET), "onprem", "/srv/fleets")[1]
    known = "/state dir/fleets/onprem/known_hosts"
    message = hostkeys.changed_message(instance, known)
    assert "\n" not in message and hostkeys.is_message(message)
    assert message.startswith("the SSH host key of root@10.0.0.2:2222 (instance onprem-1 of "
                              "fleet onprem) has changed since it was first recorded in " + known)
    assert message.endswith(
        "accept the new key with: ssh-keygen -R '[10.0.0.2]:2222' -f '%s' (the next "
        "connection records the key the host has now)" % known)
    # Port 22 is recorded under the bare address.
    assert hostkeys.accept_command("10.0.0.1", 22, "/k") == "ssh-keygen -R 10.0.0.1 -f /k"
    assert not hostkeys.is_message("cannot reach root@10.0.0.2:2222: Host key verification failed")


def test_the_known_hosts_file_is_read_from_the_hosts_own_options(tmp_path):
    instance = records.ssh_instances(parsed(SSH_FLEET), "onprem", "/srv/fleets")[1]
    args = records.hostvars(instance, str(tmp_path))["ansible_ssh_common_args"]
    assert hostkeys.known_hosts_of(args) == state.known_hosts_path(str(tmp_path), "onprem")
    assert hostkeys.known_hosts_of("-o StrictHostKeyChecking=no") is None
    assert hostkeys.known_hosts_of("-o 'unclosed") is None


def test_a_changed_key_is_reported_as_such_not_as_an_unreachable_host():
    config = parsed(SSH_FLEET)
    record = records.fleet_record(config, "onprem")
    record["instances"] = records.ssh_instances(config, "onprem", "/srv")
    message = hostkeys.changed_message(record["instances"][1], "/state/fleets/onprem/known_hosts")
    folded = report.fold(record, {"onprem-1": {"status": "unreachable", "error": message}})
    second = folded["instances"][1]
    assert second["status"] == "unreachable" and second["error"] == message
    assert report.failures(folded) == ["onprem-1 (10.0.0.2): " + message]


def test_the_inventory_makes_the_known_hosts_folder_before_any_host_is_reached(tmp_path):
    """OpenSSH records a key on first contact only where it can make the file: without the
    folder nothing would be recorded and every later key would pass as a first one."""
    root = str(tmp_path / "state")
    path, config, name, _instances, answers = fleet_case("ssh", tmp_path)
    plugin_hosts(path, config, name, answers, root)
    assert os.path.isdir(os.path.dirname(state.known_hosts_path(root, name)))
