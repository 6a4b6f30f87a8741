# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Job arrays: Slurm's index syntax (spec.overrides.parse_array), one run per index with its
variables and labels, and at most %N alive at a time (tasks.array)."""

from __future__ import annotations

import pytest
from ansible_collections.gpufleet.cluster.plugins.module_utils.spec import SpecError, parse_data
from ansible_collections.gpufleet.cluster.plugins.module_utils.spec.overrides import parse_array
from ansible_collections.gpufleet.cluster.plugins.module_utils.tasks import array as arrays
from ansible_collections.gpufleet.cluster.plugins.module_utils.tasks import container, rankplan
from ansible_collections.gpufleet.cluster.plugins.module_utils.tasks.errors import PlanError


@pytest.mark.parametrize("text, indices, limit", [
    ("1-6%2", [1, 2, 3, 4, 5, 6], 2),
    ("0-15:4", [0, 4, 8, 12], None),
    ("1,3,5-7", [1, 3, 5, 6, 7], None),
    ("7", [7], None),
    (" 3,1,3 %1", [1, 3], 1),
])
def test_slurms_array_syntax(text, indices, limit):
    parsed = parse_array(text)
    assert parsed["indices"] == indices and parsed["limit"] == limit


@pytest.mark.parametrize("text, message", [
    ("", "write indices as Slurm does"),
    ("5-1", "'5-1': a range goes up"),
    ("1-4:0", "a range goes up, with a step of 1 or more"),
    ("a-b", "'a-b' is not an index, A-B or A-B:STEP"),
    ("1-4%0", "%N must be a whole number of runs at a time"),
    ("0-5000", "more than 1000 runs; split the array"),
])
def test_bad_arrays_name_the_option_and_the_value(text, message):
    with pytest.raises(SpecError) as caught:
        parse_array(text, "t.dstack.yml")
    assert "t.dstack.yml: --array: invalid array" in str(caught.value)
    assert message in str(caught.value)


def test_member_names_must_stay_valid_run_names():
    assert arrays.member_names("hp", [1, 10]) == {1: "hp-1", 10: "hp-10"}
    with pytest.raises(PlanError, match="give the array a shorter --name"):
        arrays.member_names("a" * 38, [100])


def test_each_run_gets_slurm_like_variables_and_the_array_labels():
    info = {"name": "hp", "index": 3, "count": 6, "min": 1, "max": 6}
    assert rankplan.array_variables(info) == {
        "GPUFLEET_ARRAY_NAME": "hp", "GPUFLEET_ARRAY_INDEX": "3", "GPUFLEET_ARRAY_COUNT": "6",
        "GPUFLEET_ARRAY_MIN": "1", "GPUFLEET_ARRAY_MAX": "6"}
    assert rankplan.array_variables(None) == {}
    config = parse_data({"type": "task", "image": "busybox", "commands": ["true"]})[0]
    job = {"job_num": 0, "host": "h-0", "fleet": "f", "gpus": []}
    labels = container.labels_of(config, {"name": "hp-3", "id": "x", "array": info}, [job], job)
    assert labels[container.ARRAY_LABEL] == "hp"
    assert labels[container.ARRAY_INDEX_LABEL] == "3"
    assert container.ARRAY_LABEL not in container.labels_of(config, {"name": "one", "id": "x"},
                                                            [job], job)


class FakeRuns(object):
    """Runs that live for ``lifetime`` polls after they start; statuses() as the hosts tell."""

    def __init__(self, lifetime=2, fail=()):
        self.lifetime = lifetime
        self.fail = set(fail)
        self.ages = {}
        self.started = []
        self.peak = 0
        self.configs = {}

    def make_runner(self, config, info, code):
        runs = self

        class Runner(object):
            def run(self, wait=True):
                assert wait is False
                runs.ages[config["name"]] = 0
                runs.started.append(config["name"])
                runs.configs[config["name"]] = (config, info, code)
                return {"run": config["name"], "status": "running", "run_id": "id"}

            def result(self):
                return {"run": config["name"]}
        return Runner()

    def statuses(self):
        out = {}
        for name, age in self.ages.items():
            if age >= self.lifetime:
                out[name] = "failed" if name in self.fail else "done"
            else:
                out[name] = "running"
        live = sum(1 for s in out.values() if s == "running")
        self.peak = max(self.peak, live)
        return out

    def sleep(self, _seconds):
        for name in self.ages:
            self.ages[name] += 1


def array_runner(fake, text, name="hp"):
    config = parse_data({"type": "task", "name": name, "commands": ["train"]})[0]
    events = []
    runner = arrays.ArrayRunner(config, parse_array(text), fake.make_runner, fake.statuses,
                                emit=events.append, sleep=fake.sleep, poll=0)
    return runner, events


def test_at_most_n_runs_live_and_every_index_ends():
    fake = FakeRuns(lifetime=3)
    runner, events = array_runner(fake, "1-6%2")
    record = runner.run(wait=True)
    assert fake.started == ["hp-1", "hp-2", "hp-3", "hp-4", "hp-5", "hp-6"]
    assert fake.peak <= 2
    assert record["status"] == "done" and record["run"] == "hp"
    assert [(r["run"], r["index"], r["status"]) for r in record["runs"]] == [
        ("hp-%d" % i, i, "done") for i in range(1, 7)]
    config, info, _code = fake.configs["hp-4"]
    assert config["name"] == "hp-4"
    assert info == {"name": "hp", "index": 4, "count": 6, "min": 1, "max": 6}
    assert any("at most 2 at a time" in e["message"] for e in events)


def test_a_failed_index_fails_the_array_and_is_named():
    fake = FakeRuns(lifetime=1, fail={"hp-2"})
    record = array_runner(fake, "1-3")[0].run(wait=True)
    assert record["status"] == "failed" and record["message"] == "not done: hp-2"


def test_detached_returns_once_the_last_index_is_submitted():
    fake = FakeRuns(lifetime=5)
    record = array_runner(fake, "1-4%2")[0].run(wait=False)
    assert len(fake.started) == 4 and fake.peak <= 2
    assert record["status"] == "submitted"
