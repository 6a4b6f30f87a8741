"""The local backend's node image: built offline through Ansible, reused, and able to run a node
with its own sshd, passwordless sudo and its own Docker engine, reached over real SSH."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
from ansible_collections.gpufleet.cluster.plugins.module_utils.backends import local
from ansible_collections.gpufleet.cluster.plugins.module_utils.backends.docker_cli import Docker

from gpufleet._collection import collections_path

BIN = Path(sys.executable).parent


def ansible_module(module, *args):
    env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=str(collections_path()),
               ANSIBLE_NOCOLOR="1", ANSIBLE_LOCALHOST_WARNING="0")
    proc = subprocess.run(
        [str(BIN / "ansible"), "localhost", "-c", "local", "-m", module, *args,
         "-e", "ansible_python_interpreter=%s" % sys.executable],
        capture_output=True, text=True, env=env, check=False, timeout=900,
    )
    assert "Traceback" not in proc.stderr, proc.stderr
    # Ad-hoc output is "localhost | STATUS => {json result}".
    head, _sep, body = proc.stdout.partition(" => ")
    assert head.startswith("localhost |"), proc.stdout + proc.stderr
    return json.loads(body)


@pytest.mark.slow
def test_node_image_is_built_once_and_reused():
    first = ansible_module("gpufleet.cluster.local_node_image")
    assert not first.get("failed"), first.get("msg")
    assert first["image"] == local.image_ref()
    labels = Docker().image_labels(first["image"])
    assert labels["gpufleet.recipe"] == local.recipe_digest()

    again = ansible_module("gpufleet.cluster.local_node_image")
    assert again["changed"] is False and again["image"] == first["image"]
    checked = ansible_module("gpufleet.cluster.local_node_image", "--check")
    assert checked["changed"] is False


@pytest.fixture
def node(tmp_path):
    """One node from the image, on its own network, with a fresh key; removed afterwards."""
    docker = Docker()
    ref, _built = local.ensure_node_image(docker)
    key = tmp_path / "id_ed25519"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(key)], check=True)
    name = "gpufleet-it-%s" % uuid.uuid4().hex[:8]
    docker.run("network", "create", name)
    base = ["run", "-d", "--name", name, "--network", name,
            "-v", "%s-docker:/var/lib/docker" % name,
            "-e", "GPUFLEET_AUTHORIZED_KEY=" + key.with_suffix(".pub").read_text().strip()]
    try:
        rc, _out, err = docker.run(*(base + list(local.run_flags(True)) + [ref]), check=False)
        if rc != 0:
            assert local.privilege_refused(err), err
            docker.run("rm", "-f", name, check=False)
            docker.run(*(base + list(local.run_flags(False)) + [ref]))
        address = docker.run(
            "inspect", "-f", "{{range .NetworkSettings.Networks}}{{.IPAddress}}{{end}}", name
        ).strip()
        yield address, key
    finally:
        docker.run("rm", "-f", name, check=False)
        docker.run("volume", "rm", "%s-docker" % name, check=False)
        docker.run("network", "rm", name, check=False)


def ssh(address, key, command):
    argv = ["ssh", "-i", str(key), "-o", "StrictHostKeyChecking=no",
            "-o", "UserKnownHostsFile=/dev/null", "-o", "LogLevel=ERROR",
            "-o", "ConnectTimeout=5", "%s@%s" % (local.NODE_USER, address), command]
    for _attempt in range(30):
        proc = subprocess.run(argv, capture_output=True, text=True, check=False, timeout=60)
        if proc.returncode != 255:  # 255: ssh could not connect (sshd may still be starting)
            return proc
        subprocess.run(["sleep", "1"], check=True)
    return proc


@pytest.mark.slow
def test_a_node_runs_sshd_sudo_and_its_own_docker(node):
    address, key = node
    proc = ssh(address, key, "id -un && sudo -n true && echo sudo-ok && "
                             "for i in $(seq 1 30); do sudo docker info --format "
                             "'{{.ServerVersion}}' 2>/dev/null && break; sleep 1; done")
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.split()
    assert lines[0] == "gpufleet" and lines[1] == "sudo-ok"
    assert len(lines) == 3 and lines[2][0].isdigit(), proc.stdout
    # Password logins are off: without the key, sshd refuses.
    refused = subprocess.run(
        ["ssh", "-o", "BatchMode=yes", "-o", "StrictHostKeyChecking=no",
         "-o", "UserKnownHostsFile=/dev/null", "-o", "PubkeyAuthentication=no",
         "-o", "ConnectTimeout=5", "gpufleet@" + address, "true"],
        capture_output=True, text=True, check=False, timeout=60,
    )
    assert refused.returncode == 255 and "Permission denied" in refused.stderr
