"""gpufleet.cluster.json_merge run by ansible-playbook on this machine: a created file, a merge
that keeps other keys, idempotence, check mode, diff, and a file that is not JSON."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from gpufleet._collection import collections_path  # noqa: E402

PLAY = """---
- hosts: localhost
  connection: local
  gather_facts: false
  tasks:
    - gpufleet.cluster.json_merge:
        path: {path}
        settings: {settings}
        remove: {remove}
        mode: "0640"
      register: merged
    - ansible.builtin.copy:
        content: "{{{{ merged | to_json }}}}"
        dest: {out}
        mode: "0600"
      check_mode: false
"""


def play(tmp_path, path, settings, remove=(), *flags):
    book = tmp_path / "play.yml"
    out = tmp_path / "result.json"
    book.write_text(PLAY.format(path=path, settings=json.dumps(settings),
                                remove=json.dumps(list(remove)), out=out))
    env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=str(collections_path()),
               ANSIBLE_NOCOLOR="1", ANSIBLE_LOCALHOST_WARNING="0")
    bindir = Path(sys.executable).parent
    proc = subprocess.run([str(bindir / "ansible-playbook"), "-i", "localhost,", str(book),
                           "-e", "ansible_python_interpreter=%s" % sys.executable]
                          + list(flags), capture_output=True, text=True, env=env, check=False)
    result = json.loads(out.read_text()) if out.exists() else None
    if out.exists():
        out.unlink()
    return proc, result


def test_merge_create_keep_idempotent_check_and_diff(tmp_path):
    path = tmp_path / "docker" / "daemon.json"
    proc, result = play(tmp_path, path, {"log-driver": "json-file"})
    assert proc.returncode == 0, proc.stdout
    assert result["changed"] is True
    assert json.loads(path.read_text()) == {"log-driver": "json-file"}
    assert oct(path.stat().st_mode & 0o777) == "0o640"

    # Another tool adds a key; the role's merge keeps it.
    path.write_text('{"runtimes": {"nvidia": {"path": "nvidia-container-runtime"}},'
                    ' "log-driver": "json-file"}')
    proc, result = play(tmp_path, path, {"log-driver": "json-file"})
    assert result["changed"] is False  # same content, other formatting: not rewritten
    assert path.read_text().startswith('{"runtimes"')

    before = path.read_text()
    proc, result = play(tmp_path, path, {"log-opts": {"max-size": "100m"}}, (), "--check",
                        "--diff")
    assert proc.returncode == 0, proc.stdout
    assert result["changed"] is True
    assert result["config"]["log-opts"] == {"max-size": "100m"}
    assert path.read_text() == before  # check mode writes nothing
    assert '+  "log-opts": {' in proc.stdout

    proc, result = play(tmp_path, path, {"log-opts": {"max-size": "100m"}}, [["runtimes"]])
    assert json.loads(path.read_text()) == {"log-driver": "json-file",
                                            "log-opts": {"max-size": "100m"}}
    proc, result = play(tmp_path, path, {"log-opts": {"max-size": "100m"}}, [["runtimes"]])
    assert result["changed"] is False


def test_a_file_that_is_not_json_fails_naming_it_and_is_left_alone(tmp_path):
    path = tmp_path / "daemon.json"
    path.write_text("{broken")
    proc, result = play(tmp_path, path, {"debug": True})
    assert proc.returncode != 0
    assert "%s is not valid JSON" % path in proc.stdout
    assert "move it away" in proc.stdout
    assert path.read_text() == "{broken"
