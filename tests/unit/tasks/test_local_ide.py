# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The submitter's IDE version, read as dstack's CLI reads it (tasks/local_ide.py): real
commands and files in a temporary PATH, no IDE installed."""

from __future__ import annotations

import json
import os
import shutil

import pytest
from ansible_collections.gpufleet.cluster.plugins.module_utils.tasks import local_ide


def command(folder, name, body):
    path = folder / name
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(0o755)
    return path


def which_in(folder):
    return lambda name: shutil.which(name, path=str(folder))


@pytest.mark.parametrize("ide, name", [("vscode", "code"), ("cursor", "cursor")])
def test_vscode_and_cursor_give_the_commit_on_the_second_line(tmp_path, ide, name):
    command(tmp_path, name, "printf '1.95.3\\nf1a4fb101478ce6ec82fe9627c43efbf9e98c813\\nx64\\n'\n")
    assert local_ide.detect(ide, which=which_in(tmp_path)) == \
        "f1a4fb101478ce6ec82fe9627c43efbf9e98c813"


@pytest.mark.parametrize("body", ["exit 1\n", "echo only-one-line\n", "printf '1.0\\n\\n'\n"])
def test_a_failing_or_odd_command_gives_none(tmp_path, body):
    command(tmp_path, "code", body)
    assert local_ide.detect("vscode", which=which_in(tmp_path)) is None


def test_no_command_gives_none_and_a_hint_naming_it(tmp_path):
    assert local_ide.detect("cursor", which=which_in(tmp_path)) is None
    hint = local_ide.hint("cursor")
    assert "`cursor` command in PATH" in hint and "set version in the file" in hint
    assert local_ide.detect("zed", which=which_in(tmp_path)) is None
    assert local_ide.hint("zed") is None


@pytest.mark.parametrize("resources", ["resources", "Resources"])
def test_windsurf_reads_product_json_above_the_real_command(tmp_path, resources):
    # /opt/Windsurf/bin/windsurf, linked from a bin folder in PATH, as the Linux package lays
    # it out; macOS has Resources/app beside the binary's folder.
    install = tmp_path / "opt" / "Windsurf"
    (install / "bin").mkdir(parents=True)
    (install / resources / "app").mkdir(parents=True)
    (install / resources / "app" / "product.json").write_text(json.dumps(
        {"version": "1.94.0", "windsurfVersion": "1.13.5", "commit": "97d7a9c6ff"}))
    real = command(install / "bin", "windsurf", "exit 0\n")
    path = tmp_path / "path"
    path.mkdir()
    os.symlink(real, path / "windsurf")
    assert local_ide.detect("windsurf", which=which_in(path)) == "1.13.5@97d7a9c6ff"


def test_windsurf_without_its_versions_gives_none(tmp_path):
    (tmp_path / "resources" / "app").mkdir(parents=True)
    (tmp_path / "resources" / "app" / "product.json").write_text('{"version": "1.94.0"}')
    command(tmp_path, "windsurf", "exit 0\n")
    assert local_ide.detect("windsurf", which=which_in(tmp_path)) is None
    (tmp_path / "resources" / "app" / "product.json").write_text("not json")
    assert local_ide.detect("windsurf", which=which_in(tmp_path)) is None
