"""The task examples of docs/coming-from-slurm.md, run on the shared local fleet as written,
but for what depends on the cluster: ``resources`` (CPU nodes here, with the GPU count the
example's launcher reads set to 1), ``nodes`` (at most the fleet's 3), ``fleets`` (the test
fleet) and a registry ``image`` (no registry is reachable: the offline torch image holds the
same tools). The files they name are the test's.

This is also the suite's torchrun test: the example launches a gloo all-reduce across nodes."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from gpufleet import cli

from .task_images import ensure_torch_image
from .task_world import FLEET, SUFFIX, logs

DOC = Path(__file__).resolve().parents[2] / "docs" / "coming-from-slurm.md"
TRAIN = (
    "import torch, torch.distributed as dist\n"
    "dist.init_process_group('gloo')\n"
    "t = torch.tensor([dist.get_rank() + 1.0])\n"
    "dist.all_reduce(t)\n"
    "print('RANK', dist.get_rank(), 'WORLD', dist.get_world_size(), 'SUM', int(t.item()))\n"
    "dist.destroy_process_group()\n")


def doc_tasks():
    blocks = re.findall(r"```yaml\n(.*?)```", DOC.read_text(encoding="utf-8"), re.S)
    tasks = [yaml.safe_load(b) for b in blocks]
    return [t for t in tasks if isinstance(t, dict) and t.get("type") == "task"]


def as_here(task, world, index):
    """The example with the cluster-dependent fields of this fleet."""
    out = dict(task, name="%s-%s" % (task.get("name", "doc%d" % index), SUFFIX), fleets=[FLEET])
    out["resources"] = {"cpu": "1..", "memory": "1GB..", "disk": "1GB.."}
    out["nodes"] = min(int(task.get("nodes") or 1), 3)
    if task.get("image"):
        out["image"] = ensure_torch_image(world["docker"])
    env = dict(task.get("env") or {})
    env["DSTACK_GPUS_PER_NODE"] = "1"   # what the resources would give each node
    out["env"] = env
    return out


def test_the_guide_has_the_examples_this_test_runs():
    names = [t.get("name") for t in doc_tasks()]
    assert names == ["train", "allreduce"], names


@pytest.mark.parametrize("index", [0, 1])
def test_a_slurm_guide_example_runs_as_written(world, tmp_path, index):
    task = as_here(doc_tasks()[index], world, index)
    for item in task.get("files") or []:
        (tmp_path / item).write_text(TRAIN)
    path = tmp_path / "example.dstack.yml"
    path.write_text(yaml.safe_dump(task))
    assert cli.main(["apply", "-f", str(path), "-y"]) == 0
    out = logs(task["name"])
    nodes = task["nodes"]
    if doc_tasks()[index]["name"] == "train":
        total = nodes * (nodes + 1) // 2
        for rank in range(nodes):
            assert "RANK %d WORLD %d SUM %d" % (rank, nodes, total) in out[rank], out[rank]
    else:
        # mpirun on rank 0 started one process on every node: each printed its hostname (ssh
        # adds a line per node it meets: "Warning: Permanently added ...")
        hosts = [line for line in out[0] if not line.startswith("Warning: ")]
        assert sorted(hosts) == ["%s-%d" % (FLEET, n) for n in range(nodes)], out[0]
