# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The gpufleet.cluster.nccl_tests_result, nccl_tests_expected and nccl_tests_sizes filters.

Thin wrappers over plugins/module_utils/hosts/nccltests.py (the parser) and
nccltests_compare.py (the expected figures and the comparison); their documentation is in the
sidecar files nccl_tests_result.yml, nccl_tests_expected.yml and nccl_tests_sizes.yml beside
this one.
"""

from __future__ import annotations

from ansible.errors import AnsibleFilterError
from ansible.module_utils.common.text.converters import to_native
from ansible.module_utils.parsing.convert_bool import boolean
from ansible_collections.gpufleet.cluster.plugins.module_utils.hosts import (
    nccltests,
    nccltests_compare,
)


def _text(data):
    if isinstance(data, str):
        return data
    if isinstance(data, (list, tuple)):
        return [to_native(line) for line in data]
    raise AnsibleFilterError("nccl_tests_result: expected the benchmark's output (a string or a "
                             "list of lines), got %s" % type(data).__name__)


def nccl_tests_result(data, expected_busbw=None, expected=None, tolerance=None, fabric=None,
                      allow_empty=False):
    """Parsed nccl-tests / rccl-tests output compared with an expected figure (see
    nccl_tests_result.yml)."""
    try:
        return nccltests_compare.result_facts(
            _text(data), expected_busbw=expected_busbw, expected=expected or None,
            tolerance=nccltests_compare.DEFAULT_TOLERANCE if tolerance is None else tolerance,
            fabric=fabric or None, allow_empty=boolean(allow_empty, strict=True))
    except TypeError as exc:
        raise AnsibleFilterError("nccl_tests_result: allow_empty must be true or false, got %r"
                                 % (allow_empty,)) from exc
    except nccltests.NcclTestsError as exc:
        raise AnsibleFilterError("nccl_tests_result: %s" % to_native(exc)) from exc


def nccl_tests_expected(key=None):
    """The table of expected figures, or one entry of it (see nccl_tests_expected.yml)."""

    def entry(name):
        value = dict(nccltests_compare.anchor(name))
        value["points"] = dict((str(size), busbw) for size, busbw in value["points"].items())
        value["name"] = name
        return value

    try:
        if key:
            return entry(key)
        return dict((name, entry(name)) for name in sorted(nccltests_compare.EXPECTED))
    except nccltests.NcclTestsError as exc:
        raise AnsibleFilterError("nccl_tests_expected: %s" % to_native(exc)) from exc


def nccl_tests_sizes(min_bytes, max_bytes, factor=2):
    """The message sizes a run walks through (see nccl_tests_sizes.yml)."""
    try:
        return nccltests.expected_sizes(min_bytes, max_bytes, factor)
    except (TypeError, ValueError) as exc:
        raise AnsibleFilterError("nccl_tests_sizes: %s" % to_native(exc)) from exc


class FilterModule:
    """gpufleet.cluster nccl-tests filters."""

    def filters(self):
        return {"nccl_tests_result": nccl_tests_result,
                "nccl_tests_expected": nccl_tests_expected,
                "nccl_tests_sizes": nccl_tests_sizes}
