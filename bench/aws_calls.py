"""How many mutating EC2 calls does provisioning an aws fleet of N instances make?

The goal (issue 6) is a number that does not grow with N: one RunInstances for the whole group
when capacity allows, the fleet's security group, key pair and placement group once. The
baseline, counted in the same run against the same endpoint, is dstack's way: the same set-up
calls, then one RunInstances per instance (docs/reference/dstack-runtime.md#aws-instances: each
instance is its own offer).

Both sides run against the local EC2 double (tests/doubles/ec2.py: moto behind a proxy that
counts every request), for a cluster of g5.xlarge (no EFA) and of p4d.24xlarge (4 EFA
interfaces: EC2 gives such a launch no public IP, so each instance also gets an Elastic IP,
two calls per instance on both sides).

    .venv/bin/python bench/aws_calls.py [--sizes 1,8,32]

Exits 1 when gpufleet's count for a type without EFA differs between sizes.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from gpufleet._collection import ensure_importable  # noqa: E402

ensure_importable()

import boto3  # noqa: E402
from ansible_collections.gpufleet.cluster.plugins.module_utils.backends import (  # noqa: E402
    aws_layout,
)
from ansible_collections.gpufleet.cluster.plugins.module_utils.backends.aws import (  # noqa: E402
    Aws,
)
from ansible_collections.gpufleet.cluster.plugins.module_utils.fleets import cloud  # noqa: E402
from ansible_collections.gpufleet.cluster.plugins.module_utils.offers import catalog  # noqa: E402
from ansible_collections.gpufleet.cluster.plugins.module_utils.spec import (  # noqa: E402
    parse_data,
)

from tests.doubles.ec2 import Ec2Double  # noqa: E402

REGION = "us-east-1"
TYPES = {
    "g5.xlarge": {"cpus": 4, "memory_mib": 16384, "gpu": ("A10G", 24576, 1)},
    "p4d.24xlarge": {"cpus": 96, "memory_mib": 1179648, "gpu": ("A100", 40960, 8)},
}


def bench_catalog():
    return {"backend": "aws", "as_of": "bench", "currency": "USD", "source": "bench",
            "notes": [], "instance_types": [
                {"name": name, "cpus": spec["cpus"], "memory_mib": spec["memory_mib"],
                 "arch": "x86", "gpu": {"vendor": "nvidia", "name": spec["gpu"][0],
                                        "memory_mib": spec["gpu"][1], "count": spec["gpu"][2]},
                 "offers": [{"region": REGION, "zones": ["us-east-1a"], "price": 1.0,
                             "spot_price": None}]}
                for name, spec in sorted(TYPES.items())]}


def gpufleet_calls(double, aws, settings, root, catalog_dir, name, instance_type, size):
    config = parse_data({"type": "fleet", "name": name, "nodes": size, "placement": "cluster",
                         "backends": ["aws"], "instance_types": [instance_type]})[0]
    double.clear()
    cloud.apply(config, name, root, settings, client=aws, catalog_dir=catalog_dir)
    return [c["action"] for c in double.mutating()]


def per_instance_calls(double, aws, name, instance_type, size, public_key):
    """dstack's way: the fleet's set-up once, then one launch per instance."""
    double.clear()
    offer = {"backend": "aws", "region": REGION, "zones": ["us-east-1a"],
             "instance_type": instance_type, "spot": False, "price": 1.0, "reservation": None}
    config = {"placement": "cluster", "blocks": 1, "tags": None, "reservation": None}
    for num in range(size):
        aws.launch_group(name, [num], [offer], config, public_key, 100, all_at_once=True)
    return [c["action"] for c in double.mutating()]


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", maxsplit=1)[0])
    parser.add_argument("--sizes", default="1,8,32")
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    double = Ec2Double()
    os.environ.update(double.env())
    work = tempfile.mkdtemp(prefix="gpufleet-bench-")
    catalog_dir = os.path.join(work, "catalog")
    catalog.write(bench_catalog(), os.path.join(catalog_dir, "aws.json"))
    image = boto3.client("ec2", region_name=REGION).describe_images(
        Owners=["amazon"], Filters=[{"Name": "architecture", "Values": ["x86_64"]}]
    )["Images"][0]["ImageId"]
    aws = Aws({"regions": [REGION], "image_id": image}, poll=0.05)
    settings = {"aws": {"regions": [REGION], "image_id": image}}
    key = os.path.join(work, "key")
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", key], check=True)
    with open(key + ".pub") as handle:
        public_key = handle.read().strip()
    rows = []
    ok = True
    try:
        for instance_type in sorted(TYPES):
            counts = {}
            for size in sizes:
                tag = "%s-%d" % (instance_type.split(".")[0], size)
                ours = gpufleet_calls(double, aws, settings, os.path.join(work, "state"),
                                      catalog_dir, "gf-" + tag, instance_type, size)
                theirs = per_instance_calls(double, aws, "pi-" + tag, instance_type, size,
                                            public_key)
                counts[size] = len(ours)
                rows.append((instance_type, size, len(ours), ours.count("RunInstances"),
                             len(theirs), theirs.count("RunInstances"),
                             len(ours) / len(theirs)))
            if not aws_layout.efa_interfaces(aws.type_info(REGION, instance_type)) \
                    and len(set(counts.values())) != 1:
                ok = False
    finally:
        double.stop()
    print("| instance type | N | gpufleet calls | of which RunInstances | per-instance calls "
          "| of which RunInstances | ratio |")
    print("|---|---|---|---|---|---|---|")
    for row in rows:
        print("| %s | %d | %d | %d | %d | %d | %.2fx |" % row)
    print("constant in N without EFA: %s" % ("yes" if ok else "NO"))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
