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
