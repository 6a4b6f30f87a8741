"""Parsed configurations for the unit tests of every package, made by the real parser."""

from __future__ import annotations

from ansible_collections.gpufleet.cluster.plugins.module_utils.spec import parse_data


def task(**fields):
    """A task as the parser returns it (the normalized config, without the warnings): named
    ``train``, running ``python train.py``, with ``fields`` added or put in their place."""
    data = {"type": "task", "name": "train", "commands": ["python train.py"]}
    data.update(fields)
    config, _warnings = parse_data(data)
    return config
