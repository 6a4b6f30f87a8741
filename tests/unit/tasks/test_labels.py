# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Container labels carry data; render/ makes their text (tasks.container, tasks.listing,
render.run_table).

A run's labels hold the job's resources and the task's GPU requirement as JSON. The ``ps``
table made of them must read exactly as it did when the labels held the text, and containers
labelled that way by an earlier version must still be listed as they were.
"""

from __future__ import annotations

import datetime
import json

import pytest
from ansible_collections.gpufleet.cluster.plugins.module_utils.render import run_table as runtable
from ansible_collections.gpufleet.cluster.plugins.module_utils.render.fleet_table import fleet_gpu
from ansible_collections.gpufleet.cluster.plugins.module_utils.tasks import container, listing, rankplan

from ..configs import task

RUN = {"name": "train", "id": "3f2a9c", "submission": 0, "submitted_at": "2026-08-01T10:00:00Z"}
KEY = {"private": "PRIVATE", "public": "PUBLIC"}
NOW = datetime.datetime(2026, 8, 1, 10, 5, tzinfo=datetime.timezone.utc)


def placed_job(num, gpus=0, name="H100", vendor="nvidia", memory_mib=81920, cpus=16):
    return {
        "job_num": num, "group": None, "host": "gpus-%d" % num, "fleet": "gpus",
        "backend": "ssh", "region": "remote", "price": None, "spot": False,
        "internal_ip": "10.1.0.%d" % (num + 2), "whole_host": True, "blocks": 1,
        "total_blocks": 1, "cpus": cpus, "memory_mib": 262144, "disk_mib": 1000000,
        "gpu_vendor": vendor if gpus else "none", "gpu_name": name if gpus else None,
        "gpu_memory_mib": memory_mib if gpus else 0,
        "gpus": [{"vendor": vendor, "name": name, "index": i, "id": "GPU-%d-%d" % (num, i),
                  "bus_id": None} for i in range(gpus)],
        "resources": {},
    }


def build(config, jobs):
    placement = {"fleet": "gpus", "placement": "cluster", "jobs": jobs}
    return rankplan.build_jobs(config, placement, dict(RUN), environ={},
                               ssh_key=KEY if len(jobs) >= 2 else None)


def old_labels(config, job, labels):
    """The labels an earlier version wrote for the same job: the text in place of the data."""
    old = dict(labels)
    spec = json.loads(old["gpufleet.run-spec"])
    spec["gpu"] = fleet_gpu(job.get("resources") or config.get("resources"))
    old["gpufleet.run-spec"] = json.dumps(spec, sort_keys=True, separators=(",", ":"))
    old["gpufleet.resources"] = runtable.job_resources(job)
    return old


def running(spec, labels):
    """A running container as nodeside.op_status reports it."""
    return {"name": spec["container"], "labels": labels, "state": "running", "exit_code": 0,
            "oom_killed": False, "started_at": "2026-08-01T10:00:05Z", "finished_at": None,
            "error": None, "files": {"running": "1785578405", "reason": None, "exit_code": None}}


CASES = [
    (task(nodes=2, resources={"gpu": "H100:80GB:8"}), [placed_job(0, 8), placed_job(1, 8)]),
    (task(resources={"gpu": "A100:40GB..80GB:1..2"}), [placed_job(0, 2, "A100", memory_mib=40960)]),
    (task(resources={"gpu": "amd:1"}), [placed_job(0, 1, None, "amd", 0, cpus=4.5)]),
    (task(), [placed_job(0)]),
    (task(nodes=2, resources={"gpu": 0}), [placed_job(0), placed_job(1)]),
]


@pytest.mark.parametrize("config, jobs", CASES)
def test_labels_hold_the_resources_and_the_gpu_as_data(config, jobs):
    for spec, job in zip(build(config, jobs), jobs):
        labels = spec["labels"]
        assert all(isinstance(v, str) for v in labels.values())
        resources = json.loads(labels["gpufleet.resources"])
        assert resources == container.resources_of(job)
        assert resources["gpu_count"] == len(job["gpus"])
        assert json.loads(labels["gpufleet.run-spec"])["gpu"] == config["resources"]["gpu"]
        # The labels also go on the docker run command line, as they are.
        assert "gpufleet.resources=" + labels["gpufleet.resources"] in spec["docker_args"]


@pytest.mark.parametrize("config, jobs", CASES)
def test_render_makes_the_text_the_labels_held_before(config, jobs):
    for spec, job in zip(build(config, jobs), jobs):
        labels = spec["labels"]
        old = old_labels(config, job, labels)
        resources = listing.job_resources(labels)
        assert isinstance(resources, dict)
        assert runtable.run_resources(resources) == old["gpufleet.resources"]
        assert runtable.run_gpu(json.loads(labels["gpufleet.run-spec"])["gpu"]) == (
            json.loads(old["gpufleet.run-spec"])["gpu"])


@pytest.mark.parametrize("verbose", [False, True])
@pytest.mark.parametrize("config, jobs", CASES)
def test_ps_reads_the_same_from_old_and_new_labels(config, jobs, verbose):
    specs = build(config, jobs)
    new = {s["host"]: [running(s, s["labels"])] for s in specs}
    old = {s["host"]: [running(s, old_labels(config, j, s["labels"]))]
           for s, j in zip(specs, jobs)}
    new_records = listing.run_records(new)
    old_records = listing.run_records(old)
    # An earlier version's labels are read as they were written: text.
    assert isinstance(old_records[0]["gpu"], str)
    assert all(isinstance(j["resources"], str) for j in old_records[0]["jobs"])
    assert runtable.run_table(new_records, now=NOW, verbose=verbose) == runtable.run_table(
        old_records, now=NOW, verbose=verbose)


def test_the_table_of_a_run_from_new_labels():
    config, jobs = CASES[0]
    specs = build(config, jobs)
    records = listing.run_records({s["host"]: [running(s, s["labels"])] for s in specs})
    assert runtable.run_table(records, now=NOW) == [
        "NAME      USER  BACKEND       GPU          PRICE  STATUS   SUBMITTED",
        "train     -                                       running  5 mins ago",
        "   job=0        ssh (remote)  H100:80GB:8         running",
        "   job=1        ssh (remote)  H100:80GB:8         running",
    ]
    assert runtable.run_table(records, now=NOW, verbose=True)[2:] == [
        "   job=0        ssh (remote)  cpu=16 mem=256GB disk=976.6GB gpu=H100:80GB:8  gpus-0"
        "                running",
        "   job=1        ssh (remote)  cpu=16 mem=256GB disk=976.6GB gpu=H100:80GB:8  gpus-1"
        "                running",
    ]


@pytest.mark.parametrize("value, expected", [
    ("cpu=2 mem=24GB disk=70GB", "cpu=2 mem=24GB disk=70GB"),  # an earlier version's text
    ("{not json", "{not json"),
    ("[1, 2]", "[1, 2]"),
    ("", ""),
    (None, ""),
])
def test_a_resources_label_that_is_not_data_reads_as_its_text(value, expected):
    labels = {} if value is None else {"gpufleet.resources": value}
    assert listing.job_resources(labels) == expected
    assert runtable.run_resources(listing.job_resources(labels)) == expected


@pytest.mark.parametrize("value, expected", [
    ("H100:80GB:1", "H100:80GB:1"), ("", ""), (None, ""),
    ({"name": ["H100"], "memory": {"min": 80, "max": 80}, "count": {"min": 8, "max": 8}},
     "H100:80GB:8"),
    ({"name": None, "memory": None, "count": {"min": 0, "max": None}}, ""),
])
def test_the_gpu_column_of_old_and_new_records(value, expected):
    assert runtable.run_gpu(value) == expected
