# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Prometheus file_sd target files for the fleet's exporters: the pure computation
(monitoring/targets.py) and the prometheus_targets module writing it into a directory."""

from __future__ import annotations

import json
import os

import pytest
from ansible_collections.gpufleet.cluster.plugins.module_utils.monitoring import targets
from ansible_collections.gpufleet.cluster.plugins.modules import prometheus_targets

from ..plugins.modules import module_runner

H100 = {"vendor": "nvidia", "count": 8, "name": "H100", "memory_mib": 81920}


def host(name, fleet="gpus", **extra):
    entry = {"name": name, "fleet": fleet, "instance": name, "backend": "ssh",
             "address": "10.0.0.%d" % (11 + int(name.rsplit("-", 1)[1])), "gpu": None,
             "gpu_vendor": None, "exporters": None}
    entry.update(extra)
    return entry


# --- the pure part -----------------------------------------------------------------------------

def test_a_gpu_host_gets_a_group_per_exporter_with_the_fleet_labels():
    groups = targets.host_groups(host("gpus-0", gpu=H100, exporters={"node": 9100, "dcgm": 9400}))
    labels = {"fleet": "gpus", "instance": "gpus-0", "backend": "ssh", "gpu": "H100"}
    assert groups == [
        {"targets": ["10.0.0.11:9100"], "labels": dict(labels, exporter="node")},
        {"targets": ["10.0.0.11:9400"], "labels": dict(labels, exporter="dcgm")},
    ]


def test_a_host_without_the_dcgm_exporter_has_only_the_node_group():
    groups = targets.host_groups(host("cpu-1", fleet="cpu", backend="local",
                                      exporters={"node": 9200, "dcgm": None}))
    assert groups == [{"targets": ["10.0.0.12:9200"],
                       "labels": {"fleet": "cpu", "instance": "cpu-1", "backend": "local",
                                  "gpu": "none", "exporter": "node"}}]


def test_without_what_the_role_recorded_the_default_ports_follow_the_gpu_vendor():
    # A host the role failed on keeps its targets, so that Prometheus shows it down.
    nvidia = targets.host_groups(host("gpus-0", gpu_vendor="nvidia"))
    assert [g["targets"] for g in nvidia] == [["10.0.0.11:9100"], ["10.0.0.11:9400"]]
    assert nvidia[0]["labels"]["gpu"] == "nvidia"
    amd = targets.host_groups(host("gpus-1", gpu={"vendor": "amd", "count": 8, "name": "MI300X"}))
    assert [g["targets"] for g in amd] == [["10.0.0.12:9100"]]
    assert amd[0]["labels"]["gpu"] == "MI300X"


def test_gpu_label():
    assert targets.gpu_label(H100) == "H100"
    assert targets.gpu_label({"vendor": "nvidia", "count": 2, "name": None}) == "nvidia"
    assert targets.gpu_label({"vendor": None, "count": 0, "name": None}, "amd") == "amd"
    assert targets.gpu_label(None, "none") == "none"
    assert targets.gpu_label(None) == "none"


def test_ipv6_addresses_are_bracketed_and_the_instance_defaults_to_the_name():
    groups = targets.host_groups(host("gpus-0", address="fd00::5", instance=None,
                                      exporters={"node": 9100}))
    assert groups[0]["targets"] == ["[fd00::5]:9100"]
    assert groups[0]["labels"]["instance"] == "gpus-0"


@pytest.mark.parametrize("change, message", [
    ({"address": None}, "gpus-0 has no address"),
    ({"fleet": None}, "is not a fleet name"),
    ({"fleet": "../etc"}, "is not a fleet name"),
    ({"exporters": {"node": 70000}}, "port 70000 is not a port number"),
    ({"exporters": {"node": 9100, "smi": 9835}}, "unknown exporters smi"),
])
def test_hosts_that_cannot_be_targets_are_refused_with_the_reason(change, message):
    with pytest.raises(targets.TargetsError, match=message):
        targets.host_groups(host("gpus-0", **change))


def test_two_hosts_claiming_one_instance_of_a_fleet_are_refused():
    with pytest.raises(targets.TargetsError, match="both instance gpus-0 of fleet gpus"):
        targets.fleet_groups([host("gpus-0"), host("gpus-1", instance="gpus-0")])


def test_one_file_per_fleet_ordered_by_instance_and_a_gone_fleet_emptied():
    hosts = [host("gpus-1", exporters={"node": 9100, "dcgm": 9400}),
             host("cpu-0", fleet="cpu"), host("gpus-0", exporters={"node": 9100, "dcgm": 9400})]
    existing = {"gpufleet-old.json": "[]\n", "gpufleet-gone.json": "[{}]\n",
                "gpufleet-gpus.json": "stale"}
    wanted = targets.wanted_files(hosts, existing)
    assert sorted(wanted) == ["gpufleet-cpu.json", "gpufleet-gone.json", "gpufleet-gpus.json",
                              "gpufleet-old.json"]
    gpus = json.loads(wanted["gpufleet-gpus.json"])
    assert [(g["labels"]["instance"], g["labels"]["exporter"]) for g in gpus] == [
        ("gpus-0", "node"), ("gpus-0", "dcgm"), ("gpus-1", "node"), ("gpus-1", "dcgm")]
    assert json.loads(wanted["gpufleet-gone.json"]) == []
    # Only what differs is written: the already empty file is left as it is.
    assert targets.changes(wanted, existing) == ["gpufleet-cpu.json", "gpufleet-gone.json",
                                                 "gpufleet-gpus.json"]
    assert "gpufleet-gone.json" not in targets.wanted_files(hosts, existing, prune=False)


def test_file_names_and_the_fleets_they_belong_to():
    assert targets.file_name("my-fleet") == "gpufleet-my-fleet.json"
    assert targets.fleet_of("gpufleet-my-fleet.json") == "my-fleet"
    for other in ("prometheus.yml", "gpufleet-.json", "gpufleet-A.json", "node.json"):
        assert targets.fleet_of(other) is None


# --- the module --------------------------------------------------------------------------------

def run(args):
    return module_runner.run_module(prometheus_targets.main, args)


def test_the_module_writes_atomically_once_then_reports_no_change(tmp_path):
    directory = tmp_path / "targets"
    args = {"path": str(directory), "hosts": [host("gpus-0", gpu=H100), host("gpus-1")]}
    code, result = run(args)
    assert code == 0 and result["changed"], result
    path = str(directory / "gpufleet-gpus.json")
    assert result["files"] == {path: {"fleet": "gpus", "groups": 3, "changed": True}}
    written = json.loads((directory / "gpufleet-gpus.json").read_text())
    assert [g["targets"][0] for g in written] == ["10.0.0.11:9100", "10.0.0.11:9400",
                                                  "10.0.0.12:9100"]
    assert oct(os.stat(path).st_mode & 0o777) == "0o644"
    assert [p.name for p in directory.iterdir()] == ["gpufleet-gpus.json"]  # no temp file left
    code, again = run(args)
    assert code == 0 and not again["changed"], again
    assert again["files"][path]["changed"] is False


def test_check_mode_and_diff_change_nothing_on_disk(tmp_path):
    directory = tmp_path / "targets"
    directory.mkdir()
    (directory / "gpufleet-old.json").write_text('[{"targets": ["10.9.9.9:9100"]}]\n')
    (directory / "prometheus.yml").write_text("scrape_configs: []\n")
    code, result = run({"path": str(directory), "hosts": [host("gpus-0")],
                        "_ansible_check_mode": True, "_ansible_diff": True})
    assert code == 0 and result["changed"], result
    assert sorted(result["files"]) == [str(directory / "gpufleet-gpus.json"),
                                       str(directory / "gpufleet-old.json")]
    assert result["files"][str(directory / "gpufleet-old.json")]["groups"] == 0
    assert sorted(d["after_header"] for d in result["diff"]) == sorted(result["files"])
    assert sorted(p.name for p in directory.iterdir()) == ["gpufleet-old.json", "prometheus.yml"]
    assert "10.9.9.9" in (directory / "gpufleet-old.json").read_text()


def test_a_fleet_without_hosts_is_emptied_and_other_files_are_left_alone(tmp_path):
    directory = tmp_path / "targets"
    directory.mkdir()
    (directory / "gpufleet-old.json").write_text('[{"targets": ["10.9.9.9:9100"]}]\n')
    (directory / "prometheus.yml").write_text("scrape_configs: []\n")
    code, result = run({"path": str(directory), "hosts": []})
    assert code == 0 and result["changed"], result
    assert json.loads((directory / "gpufleet-old.json").read_text()) == []
    assert (directory / "prometheus.yml").read_text() == "scrape_configs: []\n"


def test_the_module_fails_naming_the_host_it_cannot_target(tmp_path):
    code, result = run({"path": str(tmp_path), "hosts": [host("gpus-0", address="")]})
    assert code == 1 and result["failed"]
    assert "gpus-0 has no address" in result["msg"]


# --- the Grafana dashboard in the docs ---------------------------------------------------------

def test_the_grafana_dashboard_is_json_with_fleet_and_instance_variables():
    path = os.path.join(os.path.dirname(__file__), "..", "..", "..", "docs", "grafana",
                        "gpufleet-gpus.json")
    with open(path, encoding="utf-8") as handle:
        dashboard = json.load(handle)
    variables = dict((v["name"], v) for v in dashboard["templating"]["list"])
    assert {"fleet", "instance"} <= set(variables)
    exprs = [t["expr"] for p in dashboard["panels"] for t in p["targets"]]
    for metric in ("DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_FB_USED", "DCGM_FI_DEV_GPU_TEMP",
                   "DCGM_FI_DEV_POWER_USAGE", "node_cpu_seconds_total",
                   "node_memory_MemAvailable_bytes"):
        assert any(metric in expr for expr in exprs), metric
    # Every query is narrowed to the chosen fleets and instances.
    assert all('fleet=~"$fleet"' in expr and 'instance=~"$instance"' in expr for expr in exprs)
    assert len(set(p["id"] for p in dashboard["panels"])) == len(dashboard["panels"])
