"""The Molecule stub repositories: scenarios that start side by side on a fresh machine share
one cache (the signing key, downloaded .debs), and each must still get signed repositories.
CI once failed a scenario in its first seconds: two builds made the key at once and gpg found
its keyring replaced under it."""

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
STUBREPO = ROOT / "tests" / "molecule" / "stubrepo.py"

SPEC = """\
repos:
  - path: repo
    suite: bookworm
    components: [main]
    keys: [repo/key.asc]
    packages:
      - name: stub-%(n)d
        version: "1.0"
        files: [{path: /usr/share/stub-%(n)d, content: "%(n)d"}]
"""

pytestmark = pytest.mark.skipif(not (shutil.which("gpg") and shutil.which("dpkg-deb")),
                                reason="needs gpg and dpkg-deb")


@pytest.fixture
def short_tmp():
    """pytest's tmp_path is too long a home for gpg-agent's socket (108 characters at most)."""
    path = Path(tempfile.mkdtemp(prefix="gf-stub-", dir="/tmp"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


def test_builds_started_together_on_a_cold_cache_all_sign_their_repositories(short_tmp):
    tmp_path = short_tmp
    env = dict(os.environ, XDG_CACHE_HOME=str(tmp_path / "cache"))
    procs = []
    for n in range(3):
        spec = tmp_path / ("spec%d.yml" % n)
        spec.write_text(SPEC % {"n": n})
        procs.append(subprocess.Popen(
            [sys.executable, str(STUBREPO), str(spec), str(tmp_path / ("out%d" % n))],
            env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT))
    try:
        outputs = [p.communicate(timeout=120)[0].decode() for p in procs]
        assert [p.returncode for p in procs] == [0, 0, 0], outputs
        # Every repository verifies against the key it published, and all three keys are one.
        keys = set()
        for n in range(3):
            out = tmp_path / ("out%d" % n) / "repo"
            keys.add((out / "key.asc").read_text())
            keyring = tmp_path / ("keyring%d.gpg" % n)
            subprocess.run(["gpg", "--batch", "--dearmor", "-o", str(keyring),
                            str(out / "key.asc")], check=True, capture_output=True)
            release = out / "dists" / "bookworm" / "Release"
            check = subprocess.run(["gpgv", "--keyring", str(keyring), str(release) + ".gpg",
                                    str(release)], capture_output=True, check=False)
            assert check.returncode == 0, check.stderr.decode()
        assert len(keys) == 1
    finally:
        home = tmp_path / "cache" / "gpufleet" / "molecule" / "gnupg"
        subprocess.run(["gpgconf", "--homedir", str(home), "--kill", "all"], capture_output=True,
                       check=False)
