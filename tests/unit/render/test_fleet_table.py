# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The fleet table and plan (plugins/module_utils/render/fleet_table.py) and the filters over them:
dstack's formats, column layout, order, errors shown to playbook users, and one run of the
filters through Ansible's real template engine."""

from __future__ import annotations

import copy
import datetime
import itertools
import json

import pytest
from ansible.errors import AnsibleFilterError
from ansible_collections.gpufleet.cluster.plugins.filter.fleet_table import FilterModule
from ansible_collections.gpufleet.cluster.plugins.module_utils import spec
from ansible_collections.gpufleet.cluster.plugins.module_utils.render.fleet_table import (
    FleetTableError,
    fleet_gpu,
    fleet_table,
    format_range,
    host_resources,
    plan_lines,
    pretty_date,
    pretty_resources,
)

from ..plugins.modules import module_runner

NOW = "2026-11-21T10:05:00Z"

H100_HOST = {
    "cpus": 16,
    "memory": {"mib": 257587},
    "disk": {"available_mib": 1783561},
    "gpu": {
        "vendor": "nvidia", "count": 8, "name": "H100", "memory_mib": 81920,
        "driver_version": "570.86.15",
    },
    "blocks": {"total": 8},
}
CPU_HOST = {
    "cpus": 4,
    "memory": {"mib": 8000},
    "disk": {"available_mib": 100000},
    "gpu": {"vendor": "none", "count": 0, "name": None, "memory_mib": 0, "driver_version": None},
    "blocks": {"total": 1},
}


def resources_of(text):
    config, _warnings = spec.parse_text(text, "fleet.dstack.yml", "fleet")
    return config["resources"]


def instance(num, **extra):
    record = {
        "name": "demo-%d" % num, "num": num, "backend": "local", "region": "local",
        "instance_type": "container", "price": 0.0, "spot": False, "status": "idle",
        "error": None, "created": "2026-11-21T10:01:00Z", "hostname": "172.18.0.%d" % (num + 2),
        "port": 22, "user": "gpufleet", "internal_ip": None, "blocks": 1, "resources": CPU_HOST,
    }
    record.update(extra)
    return record


def backend_fleet(**extra):
    record = {
        "name": "demo", "file": "/home/me/fleet.dstack.yml", "fleet_type": "backend",
        "placement": "cluster", "nodes": {"min": 0, "target": 2, "max": 2}, "hosts": None,
        "backends": ["local"], "spot_policy": "on-demand", "max_price": 1.5,
        "resources": resources_of(
            "type: fleet\nname: demo\nnodes: 0..2\nresources:\n  gpu: H100:8\n"),
        "status": "active", "created": "2026-11-21T10:00:00Z",
        "plan": {"create": ["demo-1"], "keep": ["demo-0"], "remove": [], "release": []},
        "instances": [instance(0, resources=H100_HOST, blocks="auto", busy_blocks=2),
                      instance(1, status="failed", price=None, resources=None,
                               error="docker run failed:\n  no space left on device")],
    }
    record.update(extra)
    return record


def ssh_fleet(**extra):
    record = {
        "name": "onprem", "file": None, "fleet_type": "ssh", "placement": "any", "nodes": None,
        "hosts": 2, "backends": None, "spot_policy": None, "max_price": None, "resources": None,
        "status": "active", "created": "2026-11-20T09:00:00Z",
        "plan": {"create": [], "keep": ["onprem-0", "onprem-1"], "remove": [], "release": []},
        "instances": [
            instance(0, backend="ssh", region="remote", price=0.0, status="pending",
                     resources=None),
            instance(1, backend="ssh", region="remote", price=0.0, unreachable=True),
        ],
    }
    record.update(extra)
    return record


def columns(line, header):
    """The values of a table line, cut at the header's column starts."""
    names = header.split()
    starts = [header.index(" " + name) + 1 if i else 0 for i, name in enumerate(names)]
    ends = starts[1:] + [None]
    return {name: line[s:e].strip() for name, s, e in zip(names, starts, ends)}


# ---------------------------------------------------------------------------------------------
# Helpers
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "seconds, expected",
    [
        (0, "now"),
        (9, "now"),
        (12, "12 sec ago"),
        (61, "1 min ago"),
        (180, "3 mins ago"),
        (3599, "60 mins ago"),
        (3600, "1 hour ago"),
        (7200, "2 hours ago"),
        (86399, "24 hours ago"),
        (86400, "yesterday"),
        (5 * 86400, "5 days ago"),
        (7 * 86400, "1 week ago"),
        (20 * 86400, "3 weeks ago"),
        (31 * 86400, "1 month ago"),
        (120 * 86400, "4 months ago"),
        (365 * 86400, "1 year ago"),
        (800 * 86400, "2 years ago"),
        (-30, "now"),
        (-3600, ""),
    ],
)
def test_pretty_date_steps(seconds, expected):
    now = datetime.datetime(2026, 11, 21, 10, 0, tzinfo=datetime.UTC)
    then = now - datetime.timedelta(seconds=seconds)
    assert pretty_date(then.strftime("%Y-%m-%dT%H:%M:%SZ"), now) == expected


def test_pretty_date_reads_offsets_naive_times_and_unknowns():
    now = "2026-11-21T10:00:00Z"
    assert pretty_date("2026-11-21T11:57:00+02:00", now) == "3 mins ago"
    assert pretty_date("2026-11-21T09:57:00", now) == "3 mins ago"  # no zone: UTC
    assert pretty_date(datetime.datetime(2026, 11, 21, 9, 57), now) == "3 mins ago"
    assert pretty_date(None, now) == ""
    assert pretty_date("last tuesday", now) == "last tuesday"


def test_pretty_date_defaults_to_the_current_time():
    just_now = datetime.datetime.now(datetime.UTC) - datetime.timedelta(minutes=3)
    assert pretty_date(just_now.isoformat()) == "3 mins ago"


def test_bad_now_is_named():
    with pytest.raises(FleetTableError, match="now must be an ISO 8601 .*'soon'"):
        pretty_date("2026-11-21T10:00:00Z", "soon")


@pytest.mark.parametrize(
    "value, expected",
    [
        ({"min": 2, "max": None}, "2.."),
        ({"min": None, "max": 8}, "..8"),
        ({"min": 1, "max": 8}, "1..8"),
        ({"min": 8, "max": 8}, "8"),
        ({"min": None, "max": None}, ""),
        (3, "3"),
        (None, ""),
    ],
)
def test_format_range(value, expected):
    assert format_range(value) == expected


@pytest.mark.parametrize(
    "resources, expected",
    [
        ("  gpu: H100:8\n", "cpu=2.. mem=8GB.. disk=100GB.. gpu=H100:8"),
        ("  gpu: 40GB..80GB:4..8\n", "cpu=2.. mem=8GB.. disk=100GB.. gpu=40GB..80GB:4..8"),
        ("  gpu: nvidia:1..8\n", "cpu=2.. mem=8GB.. disk=100GB.. gpu=nvidia:1..8"),
        ("  gpu: A10G,A100:24GB..:2\n", "cpu=2.. mem=8GB.. disk=100GB.. gpu=A10G,A100:24GB..:2"),
        ("  cpu: arm:16..\n  memory: 512MB..1TB\n  disk: 1.5TB\n",
         "cpu=arm:16.. mem=0.5GB..1024GB disk=1536GB gpu=0.."),
        ("  gpu:\n    count: 2\n    total_memory: 160GB..\n    compute_capability: 8.0\n",
         "cpu=2.. mem=8GB.. disk=100GB.. gpu=2:160GB..:8.0"),
    ],
)
def test_pretty_resources_of_specs(resources, expected):
    text = "type: fleet\nname: demo\nnodes: 1\nresources:\n" + resources
    assert pretty_resources(resources_of(text)) == expected


def test_pretty_resources_of_an_unconstrained_fleet():
    assert pretty_resources(resources_of("type: fleet\nname: demo\nnodes: 1\n")) == (
        "cpu=1.. mem=0GB.. gpu=0.."
    )
    assert pretty_resources(None) == ""


@pytest.mark.parametrize(
    "gpu, expected",
    [
        ("H100:80GB..:8", "H100:80GB..:8"),
        ("1..2", "gpu:1..2"),
        ("nvidia:24GB", "gpu:24GB:1.."),
        ("A10G,A100", "A10G,A100:1.."),
        ("0..8", "gpu:0..8"),
        ("0", ""),
        ("0..", ""),
    ],
)
def test_fleet_gpu_column(gpu, expected):
    text = "type: fleet\nname: demo\nnodes: 1\nresources:\n  gpu: %s\n" % gpu
    assert fleet_gpu(resources_of(text)) == expected


def test_fleet_gpu_column_without_requirements():
    assert fleet_gpu(resources_of("type: fleet\nname: demo\nnodes: 1\n")) == ""
    assert fleet_gpu(None) == ""


def test_host_resources_like_dstack_instances():
    assert host_resources(H100_HOST) == "cpu=16 mem=251.5GB disk=1741.8GB gpu=H100:80GB:8"
    assert host_resources(CPU_HOST) == "cpu=4 mem=7.8GB disk=97.7GB"
    counted = dict(H100_HOST, gpu={"vendor": "amd", "count": 4, "name": None, "memory_mib": 0})
    assert host_resources(counted).endswith(" gpu=amd:4")
    assert host_resources(None) == ""


# ---------------------------------------------------------------------------------------------
# The table
# ---------------------------------------------------------------------------------------------


def test_short_table_rows_and_values():
    lines = fleet_table([ssh_fleet(), backend_fleet()], now=NOW)
    header = lines[0]
    assert header.split() == ["NAME", "NODES", "GPU", "SPOT", "BACKEND", "PRICE", "STATUS",
                              "CREATED"]
    rows = [columns(line, header) for line in lines[1:]]
    # Newest fleet first; its instances right under it.
    assert rows[0] == {
        "NAME": "demo", "NODES": "0..2", "GPU": "H100:8", "SPOT": "on-demand",
        "BACKEND": "local", "PRICE": "$0..1.5", "STATUS": "active", "CREATED": "5 mins ago",
    }
    assert rows[1] == {
        "NAME": "instance=0", "NODES": "", "GPU": "gpu=H100:80GB:8", "SPOT": "on-demand",
        "BACKEND": "local (local)", "PRICE": "$0", "STATUS": "2/8 busy",
        "CREATED": "4 mins ago",
    }
    assert lines[2].startswith("   instance=0  ")
    assert columns(lines[3], header)["STATUS"] == "failed"
    assert columns(lines[3], header)["GPU"] == "-"
    # The error of an instance, on one line of its own under it.
    assert lines[4] == "     error: docker run failed: no space left on device"
    assert rows[4] == {
        "NAME": "onprem", "NODES": "2", "GPU": "", "SPOT": "", "BACKEND": "ssh", "PRICE": "",
        "STATUS": "active", "CREATED": "yesterday",
    }
    # A pending SSH host is not measured yet: no GPU, no spot, no price.
    assert columns(lines[6], header) == {
        "NAME": "instance=0", "NODES": "", "GPU": "", "SPOT": "", "BACKEND": "ssh (remote)",
        "PRICE": "", "STATUS": "pending", "CREATED": "4 mins ago",
    }
    assert columns(lines[7], header)["GPU"] == "-"
    assert columns(lines[7], header)["STATUS"] == "idle (unreachable)"
    assert len(lines) == 8


def test_columns_are_padded_to_the_widest_value_two_spaces_apart():
    for verbose in (False, True):
        lines = fleet_table([ssh_fleet(), backend_fleet()], now=NOW, verbose=verbose)
        header = lines[0]
        table = [line.ljust(len(max(lines, key=len))) for line in lines
                 if not line.lstrip().startswith("error:")]
        starts = [0] + [header.index(" " + name) + 1 for name in header.split()[1:]]
        for start, end in itertools.pairwise(starts):
            # Two spaces before the next column on every line, and the widest value of the
            # column reaches them.
            assert all(line[end - 2:end] == "  " for line in table)
            assert any(line[end - 3] != " " for line in table)
        assert all(line == line.rstrip() for line in lines)


def test_verbose_table():
    lines = fleet_table([backend_fleet(), ssh_fleet()], now=NOW, verbose=True)
    header = lines[0]
    assert header.split() == ["NAME", "NODES", "RESOURCES", "DRIVER", "SPOT", "BACKEND",
                              "PRICE", "STATUS", "CREATED", "ERROR"]
    fleet_row, first, failed = (columns(line, header) for line in lines[1:4])
    assert fleet_row["NODES"] == "0..2 (cluster)"
    assert fleet_row["RESOURCES"] == "cpu=2.. mem=8GB.. disk=100GB.. gpu=H100:8"
    assert first["RESOURCES"] == "cpu=16 mem=251.5GB disk=1741.8GB gpu=H100:80GB:8"
    assert first["DRIVER"] == "570.86.15"
    assert failed["ERROR"] == "docker run failed: no space left on device"
    # The error is in its column, not on a line of its own.
    assert not any("error:" in line for line in lines)
    assert columns(lines[4], header)["NODES"] == "2"  # not a cluster
    assert len(lines) == 7


def test_fleet_errors_too():
    fleet = backend_fleet(status="failed", error="no offers\nfor local", instances=[])
    assert fleet_table([fleet], now=NOW)[2] == "   error: no offers for local"
    lines = fleet_table([fleet], now=NOW, verbose=True)
    assert columns(lines[1], lines[0])["ERROR"] == "no offers for local"
    assert len(lines) == 2


def test_fleets_newest_first_undated_last_then_by_name():
    fleets = [
        ssh_fleet(name="zeta", created=None, instances=[]),
        ssh_fleet(name="alpha", created=None, instances=[]),
        ssh_fleet(name="old", created="2026-01-01T00:00:00Z", instances=[]),
        ssh_fleet(name="new", created="2026-11-21T10:00:00+00:00", instances=[]),
        ssh_fleet(name="twin", created="2026-11-21T10:00:00Z", instances=[]),
    ]
    names = [line.split()[0] for line in fleet_table(fleets, now=NOW)[1:]]
    assert names == ["new", "twin", "old", "alpha", "zeta"]


def test_blocks_and_statuses():
    def status(**extra):
        fleet = ssh_fleet(instances=[instance(0, backend="ssh", region="remote", **extra)])
        lines = fleet_table([fleet], now=NOW)
        return columns(lines[2], lines[0])["STATUS"]

    assert status() == "idle"
    assert status(status="busy") == "busy"
    assert status(blocks=4, resources=None) == "0/4 busy"  # as given, until measured
    assert status(blocks=4, resources=None, busy_blocks=3, status="busy") == "3/4 busy"
    assert status(blocks="auto", resources=H100_HOST, busy_blocks=1) == "1/8 busy"
    assert status(blocks="auto", resources=None) == "idle"  # not split yet
    assert status(status="provisioning", blocks=4, resources=None) == "provisioning"
    assert status(status="busy", unreachable=True) == "busy (unreachable)"
    assert status(status="terminated") == "terminated"


def test_backend_choices_and_prices():
    fleet = backend_fleet(backends=None, max_price=None, placement="any",
                          instances=[instance(0, backend="aws", region="us-east-1", spot=True,
                                              price=3.912)])
    lines = fleet_table([fleet], now=NOW)
    header = lines[0]
    assert columns(lines[1], header)["BACKEND"] == "*"
    assert columns(lines[1], header)["PRICE"] == ""
    row = columns(lines[2], header)
    assert (row["BACKEND"], row["SPOT"], row["PRICE"]) == ("aws (us-east-1)", "spot", "$3.912")
    two = backend_fleet(backends=["aws", "gcp"], nodes={"min": 1, "target": 1, "max": None})
    lines = fleet_table([two], now=NOW)
    row = columns(lines[1], lines[0])
    assert (row["BACKEND"], row["NODES"]) == ("aws, gcp", "1..")


def test_empty_and_single_record():
    assert fleet_table([], now=NOW) == ["NAME  NODES  GPU  SPOT  BACKEND  PRICE  STATUS  CREATED"]
    assert fleet_table(ssh_fleet(), now=NOW) == fleet_table([ssh_fleet()], now=NOW)


def test_missing_keys_show_blank():
    lines = fleet_table([{"name": "bare", "instances": [{"num": 0}]}], now=NOW)
    assert lines[1].split() == ["bare", "*"]
    assert lines[2].split() == ["instance=0", "-"]


@pytest.mark.parametrize(
    "fleets, message",
    [
        ("demo", "expected a list of fleet records, got str"),
        (["demo"], "fleet 0 must be a mapping"),
        ([{"status": "active"}], "fleet 0 has no name"),
        ([{"name": "demo", "instances": ["demo-0"]}], "fleet demo, instance 0 must be a mapping"),
    ],
)
def test_bad_records_are_named(fleets, message):
    with pytest.raises(FleetTableError, match=message):
        fleet_table(fleets, now=NOW)


def test_records_are_not_changed():
    fleets = [backend_fleet(), ssh_fleet()]
    before = copy.deepcopy(fleets)
    fleet_table(fleets, now=NOW, verbose=True)
    assert fleets == before


# ---------------------------------------------------------------------------------------------
# The plan
# ---------------------------------------------------------------------------------------------


def test_plan_of_a_backend_fleet():
    assert plan_lines(backend_fleet()) == [
        "Configuration  /home/me/fleet.dstack.yml",
        "Type           fleet",
        "Fleet type     cloud",
        "Nodes          0..2 (target 2)",
        "Placement      cluster",
        "Backends       local",
        "Resources      cpu=2.. mem=8GB.. disk=100GB.. gpu=H100:8",
        "Spot policy    on-demand",
        "Max price      $1.5",
        "",
        "create demo-1",
        "keep demo-0",
    ]


def test_plan_of_an_ssh_fleet_without_changes():
    assert plan_lines(ssh_fleet()) == [
        "Configuration  -",
        "Type           fleet",
        "Fleet type     ssh",
        "Nodes          2",
        "Placement      any",
        "",
        "no changes",
        "keep onprem-0, onprem-1",
    ]


def test_the_plan_says_which_hosts_it_cannot_read_not_keep():
    plan = {"create": [], "keep": ["onprem-0"], "unread": ["onprem-1"], "remove": [],
            "release": []}
    instances = ssh_fleet()["instances"]
    instances[1] = dict(instances[1], name="onprem-1", status="unreachable",
                        error="cannot reach root@10.0.0.2:22: Connection refused")
    lines = plan_lines(ssh_fleet(plan=plan, instances=instances))
    assert lines[lines.index("") + 1:] == [
        "keep onprem-0",
        "cannot read onprem-1: cannot reach root@10.0.0.2:22: Connection refused"]


def test_plan_lists_every_kind_of_change_in_order():
    plan = {"release": ["h-3"], "remove": ["h-2"], "keep": [], "create": ["h-4", "h-5"]}
    lines = plan_lines(ssh_fleet(plan=plan))
    assert lines[lines.index("") + 1:] == ["create h-4, h-5", "remove h-2", "release h-3"]
    nothing = plan_lines(backend_fleet(plan=None, nodes={"min": 2, "target": 2, "max": 2}))
    assert "Nodes          2" in nothing
    assert nothing[-1] == "no changes"


def test_bad_plan_is_named():
    with pytest.raises(FleetTableError, match="the plan of fleet demo must be a mapping"):
        plan_lines(backend_fleet(plan=["demo-1"]))
    with pytest.raises(FleetTableError, match="the fleet must be a mapping"):
        plan_lines(["demo"])


# ---------------------------------------------------------------------------------------------
# The filters
# ---------------------------------------------------------------------------------------------

FILTERS = FilterModule().filters()


def test_filters_wrap_the_table_and_the_plan():
    fleets = [backend_fleet(), ssh_fleet()]
    assert FILTERS["fleet_table"](fleets, now=NOW) == fleet_table(fleets, now=NOW)
    assert FILTERS["fleet_table"](fleets, verbose="yes", now=NOW) == fleet_table(
        fleets, now=NOW, verbose=True)
    assert FILTERS["fleet_plan"](ssh_fleet()) == plan_lines(ssh_fleet())


def test_filter_errors_are_ansible_errors():
    with pytest.raises(AnsibleFilterError, match="fleet_table: fleet 0 has no name"):
        FILTERS["fleet_table"]([{}])
    with pytest.raises(AnsibleFilterError, match="fleet_table: verbose must be true or false"):
        FILTERS["fleet_table"]([], verbose="maybe")
    with pytest.raises(AnsibleFilterError, match="fleet_table: now must be an ISO 8601"):
        FILTERS["fleet_table"]([], now="tomorrow")
    with pytest.raises(AnsibleFilterError, match="fleet_plan: the fleet must be a mapping"):
        FILTERS["fleet_plan"]("demo")


@pytest.mark.slow
def test_filters_through_ansible(tmp_path):
    """Both filters as a playbook uses them: FQCN, keyword options, Ansible's own containers."""
    fleets = [backend_fleet(), ssh_fleet()]
    (tmp_path / "vars.json").write_text(json.dumps({"fleets": fleets}))
    expression = (
        '{{ {"table": fleets | gpufleet.cluster.fleet_table(now="%s"),'
        ' "verbose": fleets | gpufleet.cluster.fleet_table(verbose=true, now="%s"),'
        ' "plan": fleets[0] | gpufleet.cluster.fleet_plan} }}' % (NOW, NOW)
    )
    proc = module_runner.run_adhoc(
        tmp_path, "ansible.builtin.debug", json.dumps({"msg": expression}),
        "-e", "@%s" % (tmp_path / "vars.json"),
    )
    result = module_runner.adhoc_result(proc)["msg"]
    assert result["table"] == fleet_table(fleets, now=NOW)
    assert result["verbose"] == fleet_table(fleets, now=NOW, verbose=True)
    assert result["plan"] == plan_lines(fleets[0])


def test_the_plan_of_a_cloud_fleet_shows_its_cheapest_offers():
    offer = {"backend": "aws", "region": "us-east-1", "instance_type": "g5.xlarge",
             "spot": False, "price": 1.006,
             "resources": {"cpus": 4, "memory": {"mib": 16384},
                           "disk": {"available_mib": 102400},
                           "gpu": {"vendor": "nvidia", "name": "A10G", "memory_mib": 24576,
                                   "count": 1}}}
    record = {"name": "a", "fleet_type": "backend", "nodes": {"min": 1, "target": 1, "max": 1},
              "placement": "any", "plan": {"create": ["a-0"]}, "offers": [offer],
              "offers_total": 7, "offers_max_price": 12.5}
    lines = plan_lines(record)
    assert "create a-0" in lines
    assert lines[-4].split()[:4] == ["1", "aws", "us-east-1", "g5.xlarge"]
    assert lines[-3] == "   ..."
    assert lines[-1] == "Shown 1 of 7 offers, $12.5 max"
    # Nothing to create: no offers table.
    assert "Shown" not in "\n".join(plan_lines(dict(record, plan={"keep": ["a-0"]})))


def test_a_fleet_with_no_access_is_one_row():
    fleets = [{"name": "theirs", "status": "no access", "access": "no access",
               "fleet_type": "backend", "backends": ["local"], "nodes": {"min": 1, "max": 1},
               "instances": [{"name": "theirs-0", "num": 0, "backend": "local",
                              "status": "idle"}]}]
    lines = fleet_table(fleets)
    assert len(lines) == 2 and "no access" in lines[1] and "instance=" not in "".join(lines)
