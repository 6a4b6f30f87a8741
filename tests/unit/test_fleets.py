# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Fleets as hosts: names, convergence plans, instance records, host variables, reports."""

from __future__ import annotations

import shlex

import pytest

from ansible_collections.gpufleet.cluster.plugins.module_utils.backends import local
from ansible_collections.gpufleet.cluster.plugins.module_utils.fleets import (
    apply,
    plan,
    records,
    report,
    state,
)
from ansible_collections.gpufleet.cluster.plugins.module_utils.spec import naming, parse_data

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
    assert "ansible_host" not in variables


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


def test_backend_choice():
    assert apply.choose_backend({"backends": None}, "x") == "local"
    assert apply.choose_backend({"backends": ["aws", "local"]}, "x") == "local"
    assert apply.choose_backend({"backends": ["azure", "aws", "gcp"]}, "x") == "aws"
    assert apply.choose_backend({"backends": ["azure", "gcp"]}, "x") == "gcp"
    with pytest.raises(apply.ApplyError, match="backends azure, lambda cannot provision"):
        apply.choose_backend({"backends": ["azure", "lambda"]}, "x")


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
    assert folded["plan"] == {"create": ["onprem-0"], "start": [], "keep": ["onprem-1"],
                              "remove": [], "release": ["10.0.0.9"]}
    assert report.failures(folded) == ["onprem-1 (10.0.0.2): " + second["error"]]
    assert record["instances"][1]["status"] == "pending"  # the input is not changed


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
