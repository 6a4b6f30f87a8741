"""Shared helpers for the config-model tests."""

from __future__ import annotations

import textwrap

import pytest
from ansible_collections.gpufleet.cluster.plugins.module_utils import spec


def parse(text, expect=None):
    """Parse YAML text; return the normalized config (fails the test on SpecError)."""
    try:
        config, _warnings = spec.parse_text(textwrap.dedent(text), "test.yml", expect)
    except spec.SpecError as exc:  # pragma: no cover - a failing test prints why
        pytest.fail("unexpected problems:\n%s" % exc)
    return config


def problems(text):
    """Parse YAML text that must be rejected; return [(path, message), ...]."""
    with pytest.raises(spec.SpecError) as info:
        spec.parse_text(textwrap.dedent(text), "test.yml")
    return [(p.where, p.message) for p in info.value.problems]


def assert_rejected(text, path, *fragments):
    """The text is rejected with a problem at exactly ``path`` whose message has ``fragments``."""
    found = problems(text)
    at_path = [message for where, message in found if where == path]
    assert at_path, "no problem reported at %r; got %r" % (path, found)
    for fragment in fragments:
        assert any(fragment.lower() in m.lower() for m in at_path), (
            "no problem at %r mentions %r; got %r" % (path, fragment, at_path)
        )


def task_with(block):
    """A minimal valid task with ``block`` (YAML lines at top level) added."""
    return "type: task\ncommands: [echo hi]\n" + textwrap.dedent(block)


def resources(block):
    """A task whose resources section is ``block``."""
    return task_with("resources:\n" + textwrap.indent(textwrap.dedent(block), "  "))


def rng(low, high):
    return {"min": low, "max": high}
