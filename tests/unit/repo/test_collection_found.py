"""After ``make venv``, the venv's Ansible finds the collection from any folder with no
ANSIBLE_COLLECTIONS_PATH: ``ansible-playbook gpufleet.cluster.<playbook>`` as the README
writes it, roles by their FQCN and ``ansible-doc`` (the Makefile links the checkout into the
venv's site-packages, where ansible-core looks for collections)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

BIN = Path(sys.executable).parent
ROLE_PLAY = """\
- name: A host role by its FQCN
  hosts: localhost
  gather_facts: false
  roles:
    - gpufleet.cluster.docker
"""


def ansible(tool, *args, cwd):
    """``tool`` from the venv, in ``cwd``, without anything that points Ansible at a
    collection or a config."""
    env = dict((k, v) for k, v in os.environ.items()
               if not k.startswith(("ANSIBLE_COLLECTIONS_PATH", "ANSIBLE_CONFIG")))
    return subprocess.run([str(BIN / tool), *args], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=300, check=False)


def test_playbooks_and_roles_are_found_by_name_from_any_folder(tmp_path):
    (tmp_path / "roles.yml").write_text(ROLE_PLAY)
    done = ansible("ansible-playbook", "gpufleet.cluster.ps", "gpufleet.cluster.fleet",
                   "roles.yml", "--syntax-check", cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "could not be found" not in done.stdout + done.stderr
    assert done.stdout.count("playbook: ") == 3


def test_ansible_doc_finds_the_modules(tmp_path):
    done = ansible("ansible-doc", "gpufleet.cluster.task", cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "gpufleet.cluster.task" in done.stdout
