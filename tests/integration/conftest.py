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
# timeouts and polls. A worker takes whole files in collection order (the next one when its
# current file has two tests left), so the files go longest first, as a whole run measured
# them (per file, setup included: 600, 530, (test_automation.py about 400, most of it waiting
# for a utilization window), 380, 320, 310, 290, 200, 180, 165, 155, 155, 150,
# 150, 140, 125 and 110 s on a loaded 2-core machine, 2026-11-29); the others, each under
# 90 s, follow in name order and fill the ends. Otherwise a long file could start last and run
# alone while the other worker sits idle: the order before this one ended about 170 s later
# on the same measurements.
LONGEST_FIRST = ("test_fleets.py", "test_task_scheduling.py", "test_automation.py",
                 "test_task_volumes.py", "test_tasks.py", "test_fleet_delete.py", "test_api.py",
                 "test_aws_hosts.py", "test_monitoring.py", "test_task_secrets.py",
                 "test_doc_examples.py", "test_task_repos.py", "test_logs.py",
                 "test_aws_fleets.py", "test_reconcile.py", "test_task_array.py",
                 "test_metrics.py")


def pytest_collection_modifyitems(items):
    rank = {name: index for index, name in enumerate(LONGEST_FIRST)}
    # sort is stable: each file keeps its tests' order, the other files theirs.
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)))
