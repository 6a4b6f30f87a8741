# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""tasks.images.ensure_image: which hosts are asked about the image, and what is brought."""

from __future__ import annotations

import threading

import pytest
from ansible_collections.gpufleet.cluster.plugins.module_utils.tasks import images
from ansible_collections.gpufleet.cluster.plugins.module_utils.tasks.errors import RunError

INFO = {"present": True, "entrypoint": ["/e"], "cmd": None, "working_dir": "/w"}


class Host(object):
    def __init__(self, name, log, has=True, pulls=True):
        self.name, self.log, self.has, self.pulls = name, log, has, pulls

    def call(self, op, payload=None, timeout=120):
        with LOCK:
            self.log.append((self.name, op))
        if op == "image_info":
            return dict(INFO) if self.has else {"present": False}
        if op == "pull":
            self.has = self.pulls
            return {"pulled": self.pulls, "message": None if self.pulls else "denied"}
        raise AssertionError(op)


LOCK = threading.Lock()


def hosts(*missing):
    log = []
    return log, dict((n, Host(n, log, has=n not in missing)) for n in ("a", "b", "c"))


def test_hosts_whose_claims_answered_are_not_asked_again():
    log, nodes = hosts()
    info = images.ensure_image("img", nodes, ["a", "b", "c"],
                               known={"a": dict(INFO), "b": dict(INFO), "z": dict(INFO)})
    assert sorted(info) == ["a", "b", "c"]
    assert log == [("c", "image_info")]


def test_a_host_known_to_lack_the_image_pulls_it_and_is_asked_again_after():
    log, nodes = hosts("b")
    info = images.ensure_image("img", nodes, ["a", "b"], known={
        "a": dict(INFO), "b": {"present": False}})
    assert info["b"] == INFO
    assert log[0] == ("b", "pull")
    assert sorted(log[1:]) == [("a", "image_info"), ("b", "image_info")]


def test_known_answers_do_not_hide_a_failed_pull():
    log, nodes = hosts("c")
    nodes["c"].pulls = False
    with pytest.raises(RunError, match="could not be pulled on c"):
        images.ensure_image("img", nodes, ["c"], source="pull", known={"c": {"present": False}})
    assert log == [("c", "pull")]
