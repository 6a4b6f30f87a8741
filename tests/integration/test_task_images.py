"""The local backend's task base image, and the torch image on top of it, on the real engine.

Both are built offline (the first build takes minutes), then one container of the torch image
shows what a distributed task relies on: torch and mpi4py import, mpirun runs an allreduce,
sshd accepts its configuration, the dstack user and working directory match dstack's base image,
the Open MPI settings are preset, and a gloo all_reduce across two processes adds up. A second
ensure builds nothing.
"""

from __future__ import annotations

import re
import uuid

import pytest
from ansible_collections.gpufleet.cluster.plugins.module_utils.backends import task_image
from ansible_collections.gpufleet.cluster.plugins.module_utils.backends.docker_cli import Docker
from .task_images import ensure_base_image, ensure_torch_image, ensure_torch_image_built

MPI_ALLREDUCE = (
    "from mpi4py import MPI\n"
    "comm = MPI.COMM_WORLD\n"
    "total = comm.allreduce(comm.Get_rank() + 1, op=MPI.SUM)\n"
    "print('rank %d of %d sum %d' % (comm.Get_rank(), comm.Get_size(), total), flush=True)\n"
)

GLOO_ALLREDUCE = """
import os
import torch
import torch.distributed as dist

dist.init_process_group("gloo")
rank = dist.get_rank()
value = torch.tensor([float(rank + 1), 10.0 * (rank + 1)])
dist.all_reduce(value, op=dist.ReduceOp.SUM)
# One write per line: both ranks share the output, and print() may write in pieces.
os.write(1, ("rank %d of %d sum %s\\n" % (rank, dist.get_world_size(), value.tolist())).encode())
dist.destroy_process_group()
"""


def image_id(docker, ref):
    return docker.run("image", "inspect", "--format", "{{.Id}}", ref).strip()


@pytest.fixture(scope="module")
def docker():
    engine = Docker()
    engine.ping()
    return engine


@pytest.fixture(scope="module")
def torch_image(docker):
    return ensure_torch_image(docker)


@pytest.fixture(scope="module")
def container(docker, torch_image):
    """One running container of the torch image, shared by every check below."""
    name = "gpufleet-it-task-%s" % uuid.uuid4().hex[:8]
    docker.run("run", "-d", "--name", name, torch_image, "sleep", "infinity")
    try:
        yield name
    finally:
        docker.run("rm", "-f", name, check=False)


def run_in(docker, container, *argv, **kwargs):
    user = kwargs.pop("user", None)
    args = ["exec"] + (["--user", user] if user else []) + [container] + list(argv)
    rc, out, err = docker.run(*args, check=False)
    assert rc == 0, "%s failed (exit %d):\n%s\n%s" % (" ".join(argv), rc, out, err)
    return out


def test_images_are_labelled_and_reused(docker, torch_image):
    base = ensure_base_image(docker)
    assert base == task_image.task_image_ref()
    labels = docker.image_labels(base)
    assert labels["gpufleet.recipe"] == task_image.task_recipe_digest()
    assert labels["gpufleet.image"] == "task-base"
    assert torch_image.startswith("gpufleet/task-torch:")
    assert docker.image_labels(torch_image)["gpufleet.image"] == "task-torch"

    base_id, torch_id = image_id(docker, base), image_id(docker, torch_image)
    assert task_image.ensure_task_image(docker) == (base, False)
    assert task_image.ensure_task_image(docker, check_mode=True) == (base, False)
    assert ensure_torch_image_built(docker) == (torch_image, False)
    assert (image_id(docker, base), image_id(docker, torch_image)) == (base_id, torch_id)


def test_torch_and_mpi4py_import(docker, container):
    out = run_in(docker, container, "python3", "-c",
                 "import torch, mpi4py; print(torch.__version__, mpi4py.__version__)")
    assert out.split()[0].startswith("2.13.0"), out


def test_mpirun_allreduce_of_ranks(docker, container):
    out = run_in(docker, container, "mpirun", "--allow-run-as-root", "--oversubscribe",
                 "-n", "2", "python3", "-c", MPI_ALLREDUCE)
    lines = sorted(re.findall(r"rank \d+ of \d+ sum \d+", out))
    assert lines == ["rank 0 of 2 sum 3", "rank 1 of 2 sum 3"], out


def test_sshd_accepts_its_configuration_once_host_keys_exist(docker, container):
    keys = run_in(docker, container, "sh", "-c", "ls /etc/ssh | grep -c '^ssh_host_' || true")
    assert keys.strip() == "0"  # none baked in: each container makes its own
    # The two host keys the job wrapper makes (no RSA key): sshd starts with them alone.
    for kind in ("ecdsa", "ed25519"):
        run_in(docker, container, "ssh-keygen", "-q", "-t", kind, "-N", "",
               "-f", "/etc/ssh/ssh_host_%s_key" % kind)
    run_in(docker, container, "/usr/sbin/sshd", "-t")
    assert run_in(docker, container, "sh", "-c", "command -v ssh").strip() == "/usr/bin/ssh"


def test_dstack_user_workdir_and_environment(docker, container):
    assert run_in(docker, container, "id", "-u", "dstack").strip() == "1001"
    assert run_in(docker, container, "id", "dstack").startswith("uid=1001(dstack)")
    assert run_in(docker, container, "sudo", "-n", "id", "-u", user="dstack").strip() == "0"
    assert run_in(docker, container, "pwd").strip() == "/dstack/run"
    env = dict(line.split("=", 1) for line in run_in(docker, container, "env").splitlines()
               if "=" in line)
    assert env["OMPI_MCA_pml"] == "^cm,ucx"
    assert env["OMPI_MCA_btl"] == "tcp,self"
    assert env["OMPI_MCA_btl_tcp_if_exclude"] == "lo,docker0"
    assert env["NCCL_SOCKET_IFNAME"] == "^docker,lo"
    assert "/usr/local/bin" in env["PATH"].split(":")
    leftovers = run_in(docker, container, "find", "/var/lib/apt/lists", "/var/cache/apt",
                       "-type", "f", "!", "-name", "lock")
    assert leftovers.strip() == ""  # no package lists or cached packages
    assert run_in(docker, container, "setpriv", "--version").startswith("setpriv")


def test_gloo_all_reduce_with_torchrun(docker, container):
    run_in(docker, container, "sh", "-c", "cat > /tmp/allreduce.py << 'EOF'\n%sEOF\n"
           % GLOO_ALLREDUCE)
    out = run_in(docker, container, "torchrun", "--nproc-per-node", "2", "--standalone",
                 "/tmp/allreduce.py")
    lines = sorted(re.findall(r"rank \d+ of \d+ sum \[[^\]]*\]", out))
    assert lines == ["rank 0 of 2 sum [3.0, 30.0]", "rank 1 of 2 sum [3.0, 30.0]"], out
