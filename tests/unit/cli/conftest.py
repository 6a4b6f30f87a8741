"""Fixtures shared by the tests of the gpufleet command."""

from __future__ import annotations

import sys

import pytest

from tests.doubles.playbooks import Stdin


@pytest.fixture
def stdin(monkeypatch):
    """No terminal unless a test says otherwise (``stdin.tty``, ``stdin.answer``): sys.stdin is
    tests/doubles/playbooks.Stdin, the fixture's value."""
    fake = Stdin(False)
    monkeypatch.setattr(sys, "stdin", fake)
    return fake
