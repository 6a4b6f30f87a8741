"""Helpers shared by the backends' unit tests."""

from __future__ import annotations


def fake(responses):
    """A runner answering ``docker <subcommand>`` from a dict; records every call."""
    calls = []

    def runner(argv, stdin=None):
        calls.append(argv[1:])
        return responses.get(argv[1], (0, b"", b""))

    runner.calls = calls
    return runner
