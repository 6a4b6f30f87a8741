"""galaxy-importer, run as Galaxy runs it, except for one thing: the fixed 180 s it allows its
ansible-lint call.

That limit measures the machine, not the tarball. On a 2-core CI machine the release tier runs
beside the integration tier, and there the same lint run that takes about 70 s on an idle
machine passed 180 s twice (2026-11-28, 2026-11-29), which the importer reports as an error.
The tests here assert behaviour, never time, so the call gets no limit; the lint run's own time
on an idle machine is recorded in bench/RESULTS.md. Every other step and argument is the
importer's own: its ansible-lint command line, its checks, its report.

Usage: python galaxy_importer_unlimited.py TARBALL (as `python -m galaxy_importer.main`).
"""
from __future__ import annotations

import runpy
import subprocess

from galaxy_importer.loaders import collection


class _NoTimeout(subprocess.Popen):
    def communicate(self, input=None, timeout=None):  # noqa: A002 - Popen's own name
        return super().communicate(input)


if not hasattr(collection, "Popen"):
    raise SystemExit("galaxy_importer.loaders.collection no longer starts ansible-lint with "
                     "Popen: update tests/release/galaxy_importer_unlimited.py")
collection.Popen = _NoTimeout
runpy.run_module("galaxy_importer.main", run_name="__main__", alter_sys=True)
