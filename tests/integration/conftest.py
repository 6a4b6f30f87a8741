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


# make integration runs two files at a time (pytest-xdist, -n 2 --dist loadfile
# --no-loadscope-reorder): half of this tier's time is spent waiting on containers, SSH
# timeouts and polls. A worker takes whole files in collection order, so the longest ones
# (333, 200, 122, 105, 92 and 77 s alone on a 2-core machine) come first: otherwise one of
# them could start last and run alone while the other worker sits idle.
LONGEST_FIRST = ("test_task_scheduling.py", "test_fleets.py", "test_attach.py", "test_tasks.py",
                 "test_api.py", "test_doc_examples.py")


def pytest_collection_modifyitems(items):
    rank = {name: index for index, name in enumerate(LONGEST_FIRST)}
    # sort is stable: each file keeps its tests' order, the other files theirs.
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)))
