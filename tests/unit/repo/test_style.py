"""PEP 8 as `ansible-test sanity --test pep8` reads it, and pyflakes (the unused imports and
names that the sanity tier's pylint refuses), over every Python file git knows about, so a slip
shows in the unit tier in seconds rather than in the sanity tier at the end of CI."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
PEP8_DIR = "ansible_test/_util/controller/sanity/pep8/current-ignore.txt"


def _ansible_test_ignores() -> list[str]:
    """The codes ansible-test's pep8 test leaves out, read from the installed ansible-test."""
    import ansible_test

    path = Path(ansible_test.__file__).resolve().parent.parent / PEP8_DIR
    codes = []
    for line in path.read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            codes.append(line)
    return sorted(codes)


def _python_files() -> list[str]:
    out = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard", "*.py"],
        cwd=ROOT, check=True, capture_output=True, text=True).stdout
    return [f for f in out.splitlines() if (ROOT / f).is_file()]


def test_ignores_are_read_from_ansible_test():
    assert "E402" in _ansible_test_ignores()


def test_every_python_file_passes_ansible_tests_pep8():
    cmd = [sys.executable, "-m", "pycodestyle", "--max-line-length", "160", "--config", "/dev/null",
           "--ignore", ",".join(_ansible_test_ignores())] + _python_files()
    done = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, check=False)
    assert done.returncode == 0, "pep8 as ansible-test reads it:\n" + done.stdout + done.stderr


def test_every_python_file_passes_pyflakes():
    """Unused imports and variables, redefinitions and undefined names: what pylint reports in
    `make sanity` as unused-import, unused-variable and function-redefined."""
    cmd = [sys.executable, "-m", "pyflakes"] + _python_files()
    done = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, check=False)
    assert done.returncode == 0, "pyflakes:\n" + done.stdout + done.stderr
