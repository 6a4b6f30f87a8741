# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""dstack apply's --env, --name and --fleet over a task (spec/overrides.py)."""

from __future__ import annotations

import pytest
from ansible_collections.gpufleet.cluster.plugins.module_utils.spec import SpecError, parse_data
from ansible_collections.gpufleet.cluster.plugins.module_utils.spec.overrides import (
    apply_overrides,
)

from ..configs import task


def refused(config, **overrides):
    with pytest.raises(SpecError) as caught:
        apply_overrides(config, source="t.dstack.yml", **overrides)
    return str(caught.value)


def test_nothing_given_changes_nothing():
    config = task(env=["A=1"], name="train")
    assert apply_overrides(config) is config
    assert apply_overrides(config, env=[], name=None, fleets=[]) is config


def test_env_entries_win_over_the_file_and_a_bare_name_comes_from_the_submitter():
    config = task(env={"A": "1", "B": "keep"})
    out = apply_overrides(config, env=["A=2", "C", "D=x=y", "E=${{ secrets.TOKEN }}"])
    assert out["env"] == {"A": "2", "B": "keep", "C": None, "D": "x=y",
                          "E": "${{ secrets.TOKEN }}"}
    assert config["env"] == {"A": "1", "B": "keep"}  # the given config is not changed


def test_env_as_a_mapping_as_the_api_and_extra_vars_give_it():
    out = apply_overrides(task(), env={"LR": 0.001, "STEPS": 10, "FROM_SHELL": None})
    assert out["env"] == {"LR": "0.001", "STEPS": "10", "FROM_SHELL": None}


def test_name_and_fleets_replace_the_files():
    out = apply_overrides(task(name="train", fleets=["old"]), name="hp-7",
                          fleets=["gpus", "team/big"])
    assert out["name"] == "hp-7"
    assert out["fleets"] == ["gpus", "team/big"]
    assert apply_overrides(task(), fleets="one")["fleets"] == ["one"]


@pytest.mark.parametrize("overrides, message", [
    ({"env": ["1A=2"]}, "t.dstack.yml: --env[0]: invalid entry '1A=2': write NAME=value or NAME"),
    ({"env": ["A=1", "A=2"]}, "--env[1]: duplicate environment variable: A"),
    ({"env": ["A=${{ foo.bar }}"]}, "--env.A: unknown reference ${{ foo.bar }}"),
    ({"env": 5}, "--env: expected NAME=value strings (a list) or a mapping"),
    ({"env": {"A": True}}, "--env.A: the value of A must be text or a number"),
    ({"name": "Bad_Name"}, "--name: invalid name 'Bad_Name': a name starts with a lower-case"),
    ({"fleets": ["a/b/c"]}, "--fleet[0]: invalid fleet reference 'a/b/c'"),
])
def test_bad_values_get_the_message_the_same_field_gets_in_a_file(overrides, message):
    assert message in refused(task(), **overrides)


def test_every_bad_value_is_reported_at_once():
    text = refused(task(), env=["1A"], name="X", fleets=["a/b/c"])
    assert "--env[0]" in text and "--name" in text and "--fleet[0]" in text


def test_only_tasks_take_them():
    fleet = parse_data({"type": "fleet", "name": "gpus", "nodes": 1})[0]
    assert "apply to tasks; this is a fleet configuration" in refused(fleet, name="x1")


def dev(**fields):
    data = {"type": "dev-environment", "ide": "vscode"}
    data.update(fields)
    return parse_data(data)[0]


def test_the_local_ide_version_fills_a_dev_environment_without_one():
    assert apply_overrides(dev(), ide_version="abc123")["version"] == "abc123"
    # The file's own version wins, as in dstack (its CLI fills only an unset one).
    assert apply_overrides(dev(version="f00d"), ide_version="abc123")["version"] == "f00d"
    windsurf = dev(ide="windsurf")
    assert apply_overrides(windsurf, ide_version="1.13.5@97d7a")["version"] == "1.13.5@97d7a"


@pytest.mark.parametrize("config, value, message", [
    (lambda: dev(ide="windsurf"), "1.13.5",
     "ide_version: Invalid Windsurf version format: `1.13.5`. Expected format: `version@commit`"),
    (lambda: dev(ide=None), "abc", "ide_version: the dev environment sets no ide"),
    (task, "abc", "ide_version: the IDE version is for dev environments; this is a task"),
    (dev, 12, "ide_version: expected the IDE's version as text, got"),
])
def test_an_ide_version_that_cannot_apply_is_refused(config, value, message):
    assert message in refused(config(), ide_version=value)
