# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""``gpufleet event``'s filters (events.query): dstack's --target-*, --within-* and
--include-target-type, which go together as dstack's do."""

from __future__ import annotations

import pytest
from ansible_collections.gpufleet.cluster.plugins.module_utils.events.query import (
    EventQueryError,
    Filters,
    select,
)

EVENTS = [
    {"id": "1", "kind": "fleet.applied", "fleet": "gpus"},
    {"id": "2", "kind": "instance.created", "fleet": "gpus", "instance": "gpus-1"},
    {"id": "3", "kind": "run.status", "run": "train", "fleet": "gpus"},
    {"id": "4", "kind": "job.created", "run": "train", "job": 0, "fleet": "gpus",
     "instance": "gpus-1"},
    {"id": "5", "kind": "job.ended", "run": "train", "job": 0, "fleet": "gpus"},
    {"id": "6", "kind": "run.status", "run": "eval", "fleet": "cpus"},
    {"id": "7", "kind": "member.granted", "user": "carl", "fleet": "gpus"},
]


def ids(**given):
    return [e["id"] for e in select(EVENTS, Filters.of(given))]


def test_target_filters_keep_the_events_about_the_thing_itself():
    assert ids(target_runs=["train"]) == ["3"]
    assert ids(target_fleets=["gpus"]) == ["1", "7"]


def test_within_filters_keep_the_events_about_its_parts_too():
    assert ids(within_runs=["train"]) == ["3", "4", "5"]
    assert ids(within_fleets=["gpus"]) == ["1", "2", "4", "7"]
    assert ids(within_runs=["train", "eval"]) == ["3", "4", "5", "6"]


def test_target_types_and_no_filter():
    assert ids(include_target_types=["job"]) == ["4", "5"]
    assert ids(within_runs=["train"], include_target_types=["run"]) == ["3"]
    assert ids() == [e["id"] for e in EVENTS]
    assert [e["id"] for e in select(EVENTS, Filters(), limit=2)] == ["6", "7"]


def test_filters_that_cannot_go_together_are_refused_by_name():
    with pytest.raises(EventQueryError, match="--target-fleet and --target-run"):
        Filters.of({"target_fleets": ["a"], "target_runs": ["b"]})
    with pytest.raises(EventQueryError, match="--within-fleet and --within-run"):
        Filters.of({"within_fleets": ["a"], "within_runs": ["b"]})
    with pytest.raises(EventQueryError, match="--include-target-type volume"):
        Filters.of({"include_target_types": ["volume"]})
    with pytest.raises(EventQueryError, match="unknown event filter target_volumes"):
        Filters.of({"target_volumes": ["v"]})


def test_one_run_is_asked_of_the_hosts_alone_when_the_filters_name_just_it():
    assert Filters.of({"within_runs": ["train"]}).one_run() == "train"
    assert Filters.of({"target_runs": ["train", "eval"]}).one_run() is None
    assert Filters.of({"within_runs": ["train"], "target_fleets": ["g"]}).one_run() is None
