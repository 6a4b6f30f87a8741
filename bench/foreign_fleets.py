"""How much do other people's fleets cost this controller's ``gpufleet ps``? (issue 34)

On a shared Docker engine every controller sees every local fleet. A fleet this controller has
no access to (another state dir made it, another user, and its key is not here) must never be
tried over SSH, so ``ps`` should take no longer with such fleets around than without them.

This controller (its own state dir, GPUFLEET_USER=bench-me) applies one 1-node local fleet
with playbooks/fleet.yml. ``gpufleet ps`` is timed ``--rounds`` times with no foreign fleet;
then 5 foreign fleets of 1 node each are made, each from its own state dir under another user
name (fleets.apply.apply, the fleet apply's own code: the nodes with their labels, as another
controller makes them; their host set-up is not needed since this controller never reaches
them), and ``ps`` is timed ``--rounds`` times again. The medians and their ratio are printed
(target: at most 1.1); the command exits 1 over it. Everything is deleted at the end.

The engine is shared: fleets that others (tests, other checkouts) keep on it are there in both
series alike.

    flock /tmp/gpufleet-docker.lock .venv/bin/python bench/foreign_fleets.py [--rounds 7]
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from gpufleet._collection import collections_path, ensure_importable  # noqa: E402

ensure_importable()
from ansible_collections.gpufleet.cluster.plugins.module_utils.backends import local  # noqa: E402,E501
from ansible_collections.gpufleet.cluster.plugins.module_utils.backends.docker_cli import Docker  # noqa: E402,E501
from ansible_collections.gpufleet.cluster.plugins.module_utils.fleets import apply  # noqa: E402
from ansible_collections.gpufleet.cluster.plugins.module_utils.spec import parse_data  # noqa: E402,E501

BIN = Path(sys.executable).parent
TAG = uuid.uuid4().hex[:5]
OWN = "bench-own-" + TAG
FOREIGN = ["bench-foreign-%s-%d" % (TAG, n) for n in range(5)]


def run(argv, env, timeout=900):
    return subprocess.run(argv, capture_output=True, text=True, env=env, timeout=timeout,
                          stdin=subprocess.DEVNULL, check=False)


def timed_ps(env):
    start = time.monotonic()
    proc = run([str(BIN / "gpufleet"), "ps"], env)
    took = time.monotonic() - start
    if proc.returncode != 0 or "Permission denied" in proc.stdout + proc.stderr:
        raise RuntimeError("gpufleet ps failed or tried a foreign fleet (exit %d):\n%s%s"
                           % (proc.returncode, proc.stdout[-2000:], proc.stderr[-2000:]))
    return took


def foreign_fleet(docker, work, name, num):
    """A 1-node local fleet made from another state dir by another user."""
    config = parse_data({"type": "fleet", "name": name, "nodes": 1, "backends": ["local"]},
                        "foreign fleet", "fleet")[0]
    old = os.environ.get("GPUFLEET_USER")
    os.environ["GPUFLEET_USER"] = "bench-other-%d" % num
    try:
        apply.apply(config, None, docker, str(work / ("other-%d" % num)),
                    build_image=lambda check: local.image_ref())
    finally:
        if old is None:
            os.environ.pop("GPUFLEET_USER", None)
        else:
            os.environ["GPUFLEET_USER"] = old


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n", maxsplit=1)[0])
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args()
    docker = Docker()
    local.ensure_node_image(docker)
    work = Path(tempfile.mkdtemp(prefix="gpufleet-bench-foreign-"))
    env = dict(os.environ, GPUFLEET_STATE_DIR=str(work / "state"), GPUFLEET_USER="bench-me",
               ANSIBLE_COLLECTIONS_PATH=str(collections_path()), ANSIBLE_NOCOLOR="1")
    own = work / "own.dstack.yml"
    own.write_text("type: fleet\nname: %s\nnodes: 1\nbackends: [local]\n" % OWN)
    try:
        proc = run([str(BIN / "ansible-playbook"), str(ROOT / "playbooks" / "fleet.yml"),
                    "-e", "fleet=" + str(own)], env)
        if proc.returncode != 0:
            raise RuntimeError("fleet.yml failed:\n" + proc.stdout[-3000:])
        timed_ps(env)   # warm: the helper compiled on the node, the SSH connection open
        none = [timed_ps(env) for _round in range(args.rounds)]
        for num, name in enumerate(FOREIGN):
            foreign_fleet(docker, work, name, num)
        timed_ps(env)
        five = [timed_ps(env) for _round in range(args.rounds)]
    finally:
        for name in FOREIGN + [OWN]:
            local.remove_fleet(docker, name)
    before, after = statistics.median(none), statistics.median(five)
    ratio = after / before
    print("date: %s" % datetime.date.today().isoformat())
    print("machine: %s, %d cores, Python %s"
          % (platform.platform(), os.cpu_count() or 0, platform.python_version()))
    print("gpufleet ps, median of %d: no foreign fleet %.3f s, 5 foreign fleets %.3f s, "
          "ratio %.2f (target <= 1.1)" % (args.rounds, before, after, ratio))
    print("all: none %s; five %s" % (["%.3f" % t for t in none], ["%.3f" % t for t in five]))
    return 0 if ratio <= 1.1 else 1


if __name__ == "__main__":
    sys.exit(main())
