# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Merge settings into a JSON configuration file that other tools also write.

``/etc/docker/daemon.json`` is the usual case: the docker role, the NVIDIA Container Toolkit
(``nvidia-ctk runtime configure``), cloud images and operators all add keys to it. A role that
wrote the whole file would undo the others, so roles merge only their own keys: objects are
merged key by key, any other value (lists included) is replaced, and keys the settings do not
name are kept as they are.

PRIVATE to gpufleet.cluster.
"""

from __future__ import annotations

import copy
import json
from typing import Any, Iterable, Sequence

from ..core.errors import GpufleetError


class JsonMergeError(GpufleetError):
    """The file cannot be merged into (not JSON, not an object); the message says what to do."""


def parse(text: str, path: str) -> dict[str, Any]:
    """The JSON object in ``text`` (the content of ``path``); an empty file is an empty object."""
    if not text.strip():
        return {}
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise JsonMergeError(
            "%s is not valid JSON (%s); fix it, or move it away to start from an empty file"
            % (path, exc)) from exc
    if not isinstance(data, dict):
        raise JsonMergeError(
            "%s holds a JSON %s, not an object; a configuration file must be an object "
            "({...}): fix it or move it away" % (path, type(data).__name__))
    return data


def merge(current: dict[str, Any], settings: dict[str, Any]) -> dict[str, Any]:
    """``current`` with ``settings`` merged in (a new dict; neither argument changes)."""
    merged = copy.deepcopy(current)
    for key, value in settings.items():
        if isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = merge(merged[key], value)
        else:
            merged[key] = copy.deepcopy(value)
    return merged


def remove(current: dict[str, Any], paths: Iterable[Sequence[str]]) -> dict[str, Any]:
    """``current`` without the keys at ``paths`` (each a list of keys into nested objects)."""
    result = copy.deepcopy(current)
    for path in paths:
        parent: Any = result
        for key in path[:-1]:
            parent = parent.get(key) if isinstance(parent, dict) else None
            if parent is None:
                break
        if isinstance(parent, dict):
            parent.pop(path[-1], None)
    return result


def render(data: dict[str, Any]) -> str:
    """The file content for ``data``: indented, keys in their order, a final newline."""
    return json.dumps(data, indent=2) + "\n"
