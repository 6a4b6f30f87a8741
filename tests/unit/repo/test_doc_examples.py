# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Every dstack configuration written in the user guides is valid and can be applied: it parses
with the config model and gpufleet's one verdict (spec.support) refuses nothing in it."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml
from ansible_collections.gpufleet.cluster.plugins.module_utils.spec import parse_data, support

ROOT = Path(__file__).resolve().parents[3]
GUIDES = ("coming-from-slurm.md", "coming-from-dstack.md", "tasks.md", "fleets.md", "secrets.md",
          "quickstart.md", "concepts.md", "services.md")
TYPES = ("task", "service", "fleet", "volume")
_BLOCK = re.compile(r"```ya?ml\n(.*?)```", re.S)


def examples():
    found = []
    for guide in GUIDES:
        path = ROOT / "docs" / guide
        if not path.exists():
            continue
        for index, block in enumerate(_BLOCK.findall(path.read_text(encoding="utf-8"))):
            data = yaml.safe_load(block)
            if isinstance(data, dict) and data.get("type") in TYPES:
                found.append(pytest.param(data, id="%s-%d" % (guide, index)))
    return found


def test_the_guides_have_examples():
    assert len(examples()) >= 3


@pytest.mark.parametrize("data", examples())
def test_every_guide_example_validates_and_can_be_applied(data):
    config, _warnings = parse_data(data, "example")
    assert support.refusals(config) == []
