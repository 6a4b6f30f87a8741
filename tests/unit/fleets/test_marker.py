# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The fleet ownership marker (plugins/module_utils/fleets/marker.py): claiming, keeping, releasing and
refusing hosts, on real files under tmp_path; and released_hosts."""

from __future__ import annotations

import json
import os
import stat

import pytest
from ansible_collections.gpufleet.cluster.plugins.module_utils.core import files as core_files
from ansible_collections.gpufleet.cluster.plugins.module_utils.fleets import marker as marker_utils
from ansible_collections.gpufleet.cluster.plugins.module_utils.fleets.marker import (
    MarkerError,
    ensure,
    read_marker,
    released_hosts,
)

T0 = "2025-06-01T09:30:00Z"
T1 = "2025-06-02T10:00:00Z"
HOSTS = ["10.0.0.5", "10.0.0.6"]


@pytest.fixture
def path(tmp_path):
    """A marker path whose directory does not exist yet, like /etc/gpufleet on a fresh host."""
    return str(tmp_path / "etc" / "gpufleet" / "fleet.json")


def claim(path, fleet="my-fleet", instance=0, **options):
    options.setdefault("hosts", HOSTS)
    options.setdefault("controller", "laptop")
    options.setdefault("now", T0)
    return ensure(path, "present", fleet, instance=instance, **options)


def on_disk(path):
    with open(path, encoding="utf-8") as handle:
        return json.load(handle)


def test_no_marker_reads_as_none(path):
    assert read_marker(path) is None


def test_claiming_a_fresh_host_writes_the_marker(path):
    result = claim(path)
    expected = {
        "format": 1,
        "fleet": "my-fleet",
        "instance": 0,
        "hosts": HOSTS,
        "controller": "laptop",
        "created": T0,
        "updated": T0,
    }
    assert result == {
        "changed": True,
        "marker": expected,
        "previous": None,
        "msg": "fleet my-fleet claimed this host as instance 0",
        "took_over": None,
    }
    assert on_disk(path) == expected
    directory = os.path.dirname(path)
    assert stat.S_IMODE(os.stat(directory).st_mode) == 0o755
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o644
    # Nothing but the marker is left in the directory (no temporary file).
    assert os.listdir(directory) == ["fleet.json"]
    with open(path, encoding="utf-8") as handle:
        assert handle.read() == marker_utils.marker_text(expected)


def test_claiming_again_changes_nothing(path):
    claim(path)
    before = os.stat(path)
    result = claim(path, now=T1)
    assert result["changed"] is False
    assert result["marker"] == result["previous"] == on_disk(path)
    assert on_disk(path)["updated"] == T0
    assert result["msg"] == "fleet my-fleet already claims this host as instance 0"
    assert os.stat(path).st_ino == before.st_ino


@pytest.mark.parametrize(
    "change",
    [{"instance": 1}, {"hosts": ["10.0.0.5"]}, {"hosts": HOSTS[::-1]}, {"controller": "ci"}],
    ids=["instance", "fewer-hosts", "host-order", "controller"],
)
def test_a_changed_claim_is_rewritten_keeping_created(path, change):
    claim(path)
    result = claim(path, now=T1, **change)
    assert result["changed"] is True
    marker = on_disk(path)
    assert marker == result["marker"]
    assert marker["created"] == T0
    assert marker["updated"] == T1
    for key, value in change.items():
        assert marker[key] == value
    assert result["previous"]["updated"] == T0
    assert result["msg"].startswith("updated the claim of fleet my-fleet on this host")


def test_hosts_and_controller_left_out_keep_what_the_marker_has(path):
    claim(path)
    result = claim(path, hosts=None, controller=None, now=T1)
    assert result["changed"] is False
    assert on_disk(path)["hosts"] == HOSTS
    assert on_disk(path)["controller"] == "laptop"


def test_a_new_marker_without_hosts_or_controller(path):
    result = claim(path, hosts=None, controller=None)
    assert result["marker"]["hosts"] == []
    assert result["marker"]["controller"] is None


def test_another_fleets_host_is_refused_with_what_to_do(path):
    claim(path, fleet="other", instance=3)
    with pytest.raises(MarkerError) as info:
        claim(path, fleet="my-fleet", instance=0)
    assert str(info.value) == (
        "host is already in fleet other as instance 3 (marker %s, written %s from laptop); "
        "remove it from fleet other's ssh_config.hosts and re-apply other, or delete fleet "
        "other, before adding it to fleet my-fleet (force: true takes it over)" % (path, T0)
    )
    assert on_disk(path)["fleet"] == "other"


def test_conflict_message_without_a_controller(path):
    claim(path, fleet="other", instance=1, controller=None)
    with pytest.raises(MarkerError, match=r"as instance 1 \(marker .*, written %s\); " % T0):
        claim(path)


def test_force_takes_the_host_over(path):
    claim(path, fleet="other", instance=3)
    result = claim(path, instance=1, now=T1, force=True)
    assert result["changed"] is True
    assert result["took_over"] == "other"
    assert result["previous"]["fleet"] == "other"
    assert on_disk(path) == result["marker"]
    assert result["marker"]["fleet"] == "my-fleet"
    assert result["marker"]["instance"] == 1
    assert result["marker"]["created"] == T1
    assert result["msg"].startswith(
        "took this host over for fleet my-fleet (instance 1) from fleet other as instance 3"
    )


def test_check_mode_writes_nothing_but_reports_the_marker(path):
    result = claim(path, check_mode=True)
    assert result["changed"] is True
    assert result["marker"]["fleet"] == "my-fleet"
    assert not os.path.exists(os.path.dirname(path))

    claim(path)
    result = claim(path, instance=2, now=T1, check_mode=True)
    assert result["changed"] is True
    assert result["marker"]["instance"] == 2
    assert on_disk(path)["instance"] == 0

    result = ensure(path, "absent", "my-fleet", check_mode=True)
    assert result["changed"] is True
    assert result["marker"] is None
    assert os.path.exists(path)


def test_releasing_removes_only_this_fleets_marker(path):
    claim(path)
    result = ensure(path, "absent", "my-fleet")
    assert result["changed"] is True
    assert result["marker"] is None
    assert result["previous"]["fleet"] == "my-fleet"
    assert result["msg"] == "released this host from fleet my-fleet (removed %s)" % path
    assert not os.path.exists(path)

    result = ensure(path, "absent", "my-fleet")
    assert result["changed"] is False
    assert result["msg"] == "no fleet marker at %s" % path


def test_releasing_leaves_another_fleets_marker(path):
    claim(path, fleet="other", instance=2)
    result = ensure(path, "absent", "my-fleet")
    assert result["changed"] is False
    assert result["marker"] == result["previous"] == on_disk(path)
    assert result["msg"] == (
        "left the marker %s in place: the host belongs to fleet other as instance 2 (marker %s, "
        "written %s from laptop), not to fleet my-fleet" % (path, path, T0)
    )


@pytest.mark.parametrize(
    "text, reason",
    [
        ("{not json", "not valid JSON"),
        ("[1, 2]", "a JSON list instead of an object"),
        ('"my-fleet"', "a JSON str instead of an object"),
        ('{"format": 1, "instance": 0}', "no fleet name"),
        ('{"fleet": "f", "instance": "zero"}', 'instance is "zero", not a whole number'),
        ('{"fleet": "f", "instance": 0, "hosts": "a,b"}', "hosts is not a list of host names"),
        (b"\xff\xfe{}", "not UTF-8 text"),
    ],
)
@pytest.mark.parametrize("state", ["present", "absent"])
def test_a_damaged_marker_fails_asking_to_remove_it(path, text, reason, state):
    os.makedirs(os.path.dirname(path))
    with open(path, "wb") as handle:
        handle.write(text if isinstance(text, bytes) else text.encode())
    with pytest.raises(MarkerError) as info:
        ensure(path, state, "my-fleet", instance=0)
    message = str(info.value)
    assert message.startswith("the fleet marker %s is damaged (" % path)
    assert reason in message
    assert message.endswith(
        "remove it (sudo rm %s) and re-apply the fleet this host belongs to" % path
    )
    assert os.path.exists(path)


def test_a_marker_of_a_newer_format_is_left_alone(path):
    os.makedirs(os.path.dirname(path))
    with open(path, "w", encoding="utf-8") as handle:
        json.dump({"format": 2, "fleet": "my-fleet"}, handle)
    with pytest.raises(MarkerError, match="has format 2, newer than the format 1"):
        claim(path)


@pytest.mark.parametrize(
    "args, message",
    [
        (("present", "f"), "instance must be the host's instance number in fleet f"),
        (("present", "f", -1), "got -1"),
        (("present", "f", True), "got True"),
        (("present", ""), "fleet must be the fleet's name"),
        (("gone", "f", 0), "state must be present or absent, got 'gone'"),
    ],
)
def test_bad_options_are_refused(path, args, message):
    with pytest.raises(MarkerError, match=message.replace("(", r"\(")):
        ensure(path, *args)


def test_bad_hosts_and_controller_are_refused(path):
    with pytest.raises(MarkerError, match="hosts must be a list of host names"):
        ensure(path, "present", "f", instance=0, hosts="a,b")
    with pytest.raises(MarkerError, match="hosts must be a list of host names"):
        ensure(path, "present", "f", instance=0, hosts=["a", ""])
    with pytest.raises(MarkerError, match="controller must be a host name"):
        ensure(path, "present", "f", instance=0, controller=5)


def test_a_failed_rename_leaves_the_old_marker_and_no_temporary_file(path, monkeypatch):
    claim(path)

    def refuse(_src, _dst):
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(marker_utils.os, "replace", refuse)
    with pytest.raises(MarkerError, match="cannot write the fleet marker .*: Permission denied"):
        claim(path, instance=5, now=T1)
    monkeypatch.undo()
    assert on_disk(path)["instance"] == 0
    assert os.listdir(os.path.dirname(path)) == ["fleet.json"]


def test_a_directory_that_cannot_be_made(tmp_path):
    blocker = tmp_path / "etc"
    blocker.write_text("a file where the directory should be")
    path = str(blocker / "gpufleet" / "fleet.json")
    assert read_marker(path) is None
    with pytest.raises(MarkerError) as info:
        claim(path)
    assert str(info.value).startswith("cannot write the fleet marker %s: " % path)
    assert "become" not in str(info.value)


def test_no_permission_suggests_become(path, monkeypatch):
    def refuse(*_args, **_kwargs):
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(core_files.tempfile, "mkstemp", refuse)
    with pytest.raises(MarkerError) as info:
        claim(path)
    assert str(info.value) == (
        "cannot write the fleet marker %s: Permission denied (run the task with become: true)"
        % path
    )


def test_a_marker_that_cannot_be_read(tmp_path):
    # A directory where the file should be.
    (tmp_path / "fleet.json").mkdir()
    with pytest.raises(MarkerError, match="cannot read the fleet marker .*fleet.json: "):
        read_marker(str(tmp_path / "fleet.json"))


def test_utc_now_is_an_iso_utc_timestamp():
    assert len(marker_utils.utc_now()) == len(T0)
    assert marker_utils.utc_now().endswith("Z")


# released_hosts


def test_released_hosts_are_those_no_longer_listed():
    markers = [
        {"fleet": "f", "hosts": ["h1", "h2", "h3"]},
        {"fleet": "f", "hosts": ["h1", "h2", "h4"]},
        None,
    ]
    assert released_hosts(["h2", "h1"], markers) == ["h3", "h4"]


def test_nothing_released_when_nothing_was_removed():
    assert released_hosts(["h1", "h2"], [{"fleet": "f", "hosts": ["h1", "h2"]}]) == []
    assert released_hosts(["h1"], []) == []
    assert released_hosts([], [None]) == []


def test_released_hosts_can_ignore_other_fleets():
    markers = [{"fleet": "f", "hosts": ["h1", "h9"]}, {"fleet": "g", "hosts": ["h1", "h7"]}]
    assert released_hosts(["h1"], markers, fleet="f") == ["h9"]
    assert released_hosts(["h1"], markers) == ["h7", "h9"]


def test_released_hosts_are_sorted_and_unique():
    markers = [{"hosts": ["z", "b", "a"]}, {"hosts": ["b", "m"]}]
    assert released_hosts(["m"], markers) == ["a", "b", "z"]
