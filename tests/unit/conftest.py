"""Make ``ansible_collections.gpufleet.cluster`` importable from this checkout for unit tests."""

from __future__ import annotations

import socket
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from gpufleet._collection import ensure_importable  # noqa: E402

ensure_importable()


@pytest.fixture
def playbooks(monkeypatch):
    """``gpufleet.runner.run_playbook`` replaced by tests/doubles/playbooks.FakePlaybooks, which
    records each run and answers as a test tells it; the double is the fixture's value."""
    from gpufleet import runner
    from tests.doubles.playbooks import FakePlaybooks

    fake = FakePlaybooks()
    monkeypatch.setattr(runner, "run_playbook", fake)
    return fake


@pytest.fixture
def listener():
    """A TCP port on 127.0.0.1 that accepts connections."""
    server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    server.bind(("127.0.0.1", 0))
    server.listen(16)
    yield server.getsockname()[1]
    server.close()


@pytest.fixture
def closed_port():
    """A TCP port on 127.0.0.1 that nothing listens on."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    sock.close()
    return port


# The fake docker CLI on PATH, for the node-side helper (tasks.hostside.nodeside): the tests of
# tasks and of repos both use it.


@pytest.fixture
def docker(tmp_path, monkeypatch):
    """tests/unit/tasks/fakes.FakeDocker on PATH (``on()`` answers, ``calls()`` reads the log);
    the double is the fixture's value."""
    from ansible_collections.gpufleet.cluster.plugins.module_utils.tasks.hostside import engineside
    from tests.unit.tasks.fakes import FakeDocker

    fake = FakeDocker(tmp_path)
    for key, value in fake.env().items():
        monkeypatch.setenv(key, value)
    # The fake is a CLI: the Engine API's socket (engineside._engine) is not used.
    monkeypatch.setattr(engineside, "_ENGINE", {"socket": None})
    return fake


@pytest.fixture
def run_root(tmp_path, monkeypatch):
    """The node-side helper's folder of runs, moved under the test's tmp_path."""
    from ansible_collections.gpufleet.cluster.plugins.module_utils.tasks.hostside import nodeside

    root = tmp_path / "runs"
    root.mkdir()
    monkeypatch.setattr(nodeside, "RUN_ROOT", str(root))
    return root


@pytest.fixture
def absent(docker):
    """Docker answers that the job's container does not exist yet."""
    docker.on(["container", "inspect"], stderr="Error: No such container: train-1-0", rc=1)
    return docker
