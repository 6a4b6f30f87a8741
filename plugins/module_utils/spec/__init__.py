# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""gpufleet's one configuration model: dstack's fleet, task and volume files, normalized.

Every module, plugin and the ``gpufleet`` command parse configurations through this package.
It is pure Python (PyYAML is needed only to read YAML text) and raises nothing but SpecError.

    config, warnings = parse_file("fleet.dstack.yml")
    config, warnings = parse_data({"type": "task", "commands": ["nvidia-smi"]})

The normalized shape is documented in docs/config-json.md.
"""

from __future__ import annotations

from typing import Any

from ._errors import Problem, SpecError, format_path
from .loader import HAS_YAML, parse_data, parse_file, parse_hosts_data, parse_hosts_file, parse_text

__all__ = [
    "HAS_YAML",
    "Problem",
    "SpecError",
    "format_path",
    "parse_data",
    "parse_file",
    "parse_hosts_data",
    "parse_hosts_file",
    "parse_text",
    "validate_file",
]


def validate_file(path: str) -> dict[str, Any]:
    """Validate one file without raising: the object ``gpufleet validate --json`` prints.

    ``ok``: dstack would accept it; ``unsupported``: what gpufleet's ``apply`` refuses in it
    (spec.support), ``runnable`` False when there is any; ``warnings`` include the fields
    gpufleet accepts without acting on them. (repos.sources.validate_file adds what the file
    names on this controller: ``gpufleet validate`` and ``config_info`` use that one.)"""
    from . import support

    try:
        config, warnings = parse_file(path)
    except SpecError as exc:
        return {
            "file": path,
            "ok": False,
            "runnable": False,
            "config": None,
            "errors": exc.as_dicts(),
            "unsupported": [],
            "warnings": [],
        }
    refused = support.refusals(config)
    return {
        "file": path,
        "ok": True,
        "runnable": not refused,
        "config": config,
        "errors": [],
        "unsupported": [p.as_dict() for p in refused],
        "warnings": [w.as_dict() for w in list(warnings) + support.notes(config)],
    }
