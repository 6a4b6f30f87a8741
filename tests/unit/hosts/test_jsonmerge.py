# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Merging settings into JSON files other tools also write (daemon.json)."""

from __future__ import annotations

import json

import pytest
from ansible_collections.gpufleet.cluster.plugins.module_utils.hosts.jsonmerge import (
    JsonMergeError,
    merge,
    parse,
    remove,
    render,
)

NVIDIA = {"default-runtime": "nvidia",
          "runtimes": {"nvidia": {"args": [], "path": "nvidia-container-runtime"}}}


def test_merge_keeps_other_tools_keys_and_merges_objects_key_by_key():
    current = dict(NVIDIA, **{"log-opts": {"max-size": "10m", "compress": "true"}})
    merged = merge(current, {"log-opts": {"max-size": "100m", "max-file": "3"},
                             "runtimes": {"habana": {"path": "habana-container-runtime"}}})
    assert merged["default-runtime"] == "nvidia"
    assert merged["runtimes"]["nvidia"]["path"] == "nvidia-container-runtime"
    assert merged["runtimes"]["habana"]["path"] == "habana-container-runtime"
    assert merged["log-opts"] == {"max-size": "100m", "compress": "true", "max-file": "3"}
    assert current["log-opts"] == {"max-size": "10m", "compress": "true"}  # not changed


def test_merge_replaces_lists_and_scalars():
    merged = merge({"dns": ["1.1.1.1"], "debug": True, "labels": {"a": 1}},
                   {"dns": ["8.8.8.8"], "debug": False, "labels": "x"})
    assert merged == {"dns": ["8.8.8.8"], "debug": False, "labels": "x"}


def test_merging_what_is_there_changes_nothing():
    assert merge(NVIDIA, {"runtimes": {"nvidia": NVIDIA["runtimes"]["nvidia"]}}) == NVIDIA


def test_remove_takes_out_nested_keys_and_ignores_missing_ones():
    assert remove(NVIDIA, [["default-runtime"], ["runtimes", "nvidia"], ["nope", "x"]]) == {
        "runtimes": {}}


@pytest.mark.parametrize("text", ["", "  \n"])
def test_an_empty_file_is_an_empty_object(text):
    assert parse(text, "/etc/docker/daemon.json") == {}


def test_bad_json_names_the_file_and_what_to_do():
    with pytest.raises(JsonMergeError) as caught:
        parse('{"debug": true,', "/etc/docker/daemon.json")
    message = str(caught.value)
    assert message.startswith("/etc/docker/daemon.json is not valid JSON (")
    assert "fix it, or move it away" in message


def test_a_list_is_not_a_configuration_object():
    with pytest.raises(JsonMergeError, match="holds a JSON list, not an object"):
        parse("[1, 2]", "/x.json")


def test_render_is_indented_json_with_a_final_newline_in_key_order():
    text = render({"b": 1, "a": {"c": 2}})
    assert text.endswith("}\n")
    assert list(json.loads(text)) == ["b", "a"]
    assert '\n  "a": {\n    "c": 2\n  }' in text
