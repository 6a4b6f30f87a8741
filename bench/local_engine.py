"""What the benchmarks that bring up a local fleet share: the Docker engine, started when it is
not running, and a fleet name nothing on the engine uses yet."""

from __future__ import annotations

import subprocess
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def docker(*args):
    return subprocess.run(["docker"] + list(args), capture_output=True, text=True, check=False)


def ensure_engine():
    if docker("info").returncode != 0:
        subprocess.run(["make", "-C", str(ROOT), "engine"], check=True)


def fleet_in_use(name):
    """Containers, networks or volumes of a fleet with this name already on the engine?"""
    label = "label=gpufleet.fleet=" + name
    for kind in (("ps", "-a"), ("network", "ls"), ("volume", "ls")):
        if docker(*(kind + ("-q", "--filter", label))).stdout.strip():
            return True
    return bool(docker("ps", "-a", "-q", "--filter", "name=^gpufleet-%s-" % name).stdout.strip())


def pick_name(base):
    """``base``, or ``base-<random>`` when a fleet of that name is on the engine."""
    if not fleet_in_use(base):
        return base
    while True:
        name = "%s-%s" % (base, uuid.uuid4().hex[:6])
        if not fleet_in_use(name):
            return name
