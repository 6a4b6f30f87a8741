"""Integration tests run against this machine's real Docker engine (make integration starts it)."""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from gpufleet._collection import ensure_importable  # noqa: E402

ensure_importable()


import pytest  # noqa: E402

from .task_world import make_world, use_world  # noqa: E402


@pytest.fixture(scope="session")
def task_world(tmp_path_factory):
    """The 3-node local fleet the task tests share (made once per session)."""
    yield from make_world(tmp_path_factory)


@pytest.fixture(scope="module")
def world(task_world):
    """The task world, with GPUFLEET_STATE_DIR set to its state dir for the module's tests."""
    with use_world(task_world):
        yield task_world
