"""How long does ``ansible-inventory --list`` take on an aws fleet of 500 instances, with a cold
and with a warm inventory cache, against a static YAML inventory of the same hosts?

The fleet is launched once into the local EC2 double (tests/doubles/ec2.py) with the aws
backend; the inventory source is a ``.gpufleet.yml`` naming the fleet file, with the jsonfile
cache. Cold runs pass ``--flush-cache`` (every region of the settings is asked for the fleet's
instances); warm runs read the cache and call no API (the double counts the calls to prove
it). The baseline, timed alternately in the same run, is the yaml plugin on a ``hosts.yml``
with the same host names and connection variables. Whole processes are timed.

    .venv/bin/python bench/cloud_inventory.py [--instances 500] [--rounds 3]

Target (proposed): warm at most 3x the static inventory; the script exits 1 when missed.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from gpufleet._collection import collections_path, ensure_importable  # noqa: E402

ensure_importable()

import boto3  # noqa: E402
from ansible_collections.gpufleet.cluster.plugins.module_utils.backends.aws import (  # noqa: E402
    Aws,
    instance_records,
)

from tests.doubles.ec2 import Ec2Double  # noqa: E402

REGION = "us-east-1"
TARGET = 3.0


def listing(env, source, *extra):
    started = time.monotonic()
    proc = subprocess.run([str(Path(sys.executable).parent / "ansible-inventory"), "-i",
                           str(source), "--list", *extra], capture_output=True, text=True,
                          env=env, check=False)
    elapsed = time.monotonic() - started
    if proc.returncode != 0:
        raise SystemExit("ansible-inventory failed: %s" % proc.stderr[-2000:])
    return elapsed, json.loads(proc.stdout)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", maxsplit=1)[0])
    parser.add_argument("--instances", type=int, default=500)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    double = Ec2Double()
    os.environ.update(double.env())
    work = Path(tempfile.mkdtemp(prefix="gpufleet-bench-"))
    try:
        image = boto3.client("ec2", region_name=REGION).describe_images(
            Owners=["amazon"], Filters=[{"Name": "architecture", "Values": ["x86_64"]}]
        )["Images"][0]["ImageId"]
        settings = {"regions": [REGION], "image_id": image}
        aws = Aws(settings, poll=0.05)
        key = work / "key"
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(key)],
                       check=True)
        offer = {"backend": "aws", "region": REGION, "zones": ["us-east-1a"],
                 "instance_type": "g5.xlarge", "spot": False, "price": 1.006,
                 "reservation": None}
        placed = aws.launch_group("big", list(range(args.instances)), [offer],
                                  {"placement": "any", "blocks": 1, "tags": None,
                                   "reservation": None},
                                  key.with_suffix(".pub").read_text().strip(), 100, True)
        placed = aws.wait_running(placed)
        state = work / "state"
        state.mkdir()
        (state / "backends.yml").write_text(yaml.safe_dump({"aws": settings}))
        (work / "big.dstack.yml").write_text("type: fleet\nname: big\nnodes: %d\n"
                                             "backends: [aws]\n" % args.instances)
        source = work / "fleets.gpufleet.yml"
        source.write_text("plugin: gpufleet.cluster.fleet\nfleets: [big.dstack.yml]\n"
                          "cache: true\ncache_plugin: ansible.builtin.jsonfile\n"
                          "cache_connection: %s\n" % (work / "cache"))
        records = instance_records(placed, "big", str(state / "fleets/big/id_ed25519"))
        static = work / "hosts.yml"
        static.write_text(yaml.safe_dump({"all": {"hosts": dict(
            (r["name"], {"ansible_host": r["hostname"], "ansible_user": r["user"],
                         "ansible_port": r["port"],
                         "ansible_ssh_private_key_file": r["identity_file"]})
            for r in records)}}))
        env = dict(os.environ, GPUFLEET_STATE_DIR=str(state),
                   ANSIBLE_COLLECTIONS_PATH=str(collections_path()),
                   ANSIBLE_INVENTORY_ENABLED="gpufleet.cluster.fleet,yaml")
        for _name, found in (("cold", listing(env, source, "--flush-cache")[1]),
                             ("static", listing(env, static)[1])):
            hosts = list(found["_meta"]["hostvars"])
            if len(hosts) != args.instances:
                raise SystemExit("expected %d hosts, listed %d" % (args.instances, len(hosts)))
        times = {"static": [], "cold": [], "warm": []}
        warm_calls = 0
        for _round in range(args.rounds):
            times["static"].append(listing(env, static)[0])
            times["cold"].append(listing(env, source, "--flush-cache")[0])
            double.clear()
            times["warm"].append(listing(env, source)[0])
            warm_calls += len(double.calls())
    finally:
        double.stop()
    medians = dict((k, statistics.median(v)) for k, v in times.items())
    print("| instances | rounds | static median | cold median | warm median | cold/static "
          "| warm/static | API calls when warm |")
    print("|---|---|---|---|---|---|---|---|")
    print("| %d | %d | %.2f s | %.2f s | %.2f s | %.2fx | %.2fx | %d |" % (
        args.instances, args.rounds, medians["static"], medians["cold"], medians["warm"],
        medians["cold"] / medians["static"], medians["warm"] / medians["static"], warm_calls))
    return 0 if medians["warm"] / medians["static"] <= TARGET and warm_calls == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
