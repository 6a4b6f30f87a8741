"""How much does ``ansible-inventory --list`` cost on a dstack SSH fleet file compared with a
static YAML inventory of the same hosts?

One fleet file, ``big.dstack.yml``, lists 5,000 hosts under ``ssh_config.hosts`` (a few as
mappings with their own port, user and blocks); the static ``hosts.yml`` lists the same host
names (``big-<n>``) with the same ``ansible_host``, ``ansible_user``, ``ansible_port`` and
``ansible_ssh_private_key_file``. Both are listed by the same ``ansible-inventory`` with the same
environment (the gpufleet.cluster.fleet and yaml plugins enabled), alternately, in the same run,
so the ratio of the medians holds on a noisy machine. Each process start (Python, Ansible, the
plugin loader) is part of both sides. The target: the fleet file costs at most 3x the static
inventory.

    .venv/bin/python bench/inventory_speed.py [--hosts 5000] [--rounds 5]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from gpufleet._collection import collections_path  # noqa: E402

TARGET_RATIO = 3.0
FLEET = "big"
USER = "ubuntu"
KEY_NAME = "id_bench"


def address(num):
    """A distinct private IPv4 address for host number ``num`` (up to 64,000 hosts)."""
    return "10.%d.%d.%d" % (num // 64000, num // 250 % 256, num % 250 + 1)


def special(num):
    """Every 1,000th host is written as a mapping with its own port, user and blocks."""
    return num % 1000 == 7


def write_fleet(directory, count):
    hosts = []
    for num in range(count):
        if special(num):
            hosts.append({"hostname": address(num), "port": 2222, "user": "admin", "blocks": 2})
        else:
            hosts.append(address(num))
    config = {
        "type": "fleet",
        "name": FLEET,
        "ssh_config": {"user": USER, "identity_file": KEY_NAME, "hosts": hosts},
    }
    path = directory / (FLEET + ".dstack.yml")
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return path


def write_static(directory, count, key):
    hosts = {}
    for num in range(count):
        hosts["%s-%d" % (FLEET, num)] = {
            "ansible_host": address(num),
            "ansible_user": "admin" if special(num) else USER,
            "ansible_port": 2222 if special(num) else 22,
            "ansible_ssh_private_key_file": str(key),
        }
    path = directory / "hosts.yml"
    path.write_text(yaml.safe_dump({"all": {"hosts": hosts}}, sort_keys=False))
    return path


def environment(state_dir):
    env = dict(os.environ)
    env.update(
        ANSIBLE_INVENTORY_ENABLED="gpufleet.cluster.fleet,yaml",
        ANSIBLE_COLLECTIONS_PATH=str(collections_path()),
        GPUFLEET_STATE_DIR=str(state_dir),
        ANSIBLE_INVENTORY_UNPARSED_FAILED="true",
        ANSIBLE_INVENTORY_ANY_UNPARSED_IS_FAILED="true",
        ANSIBLE_NOCOLOR="1",
    )
    return env


def list_inventory(source, env):
    """Run ``ansible-inventory --list`` once; returns (seconds, parsed JSON)."""
    command = [str(Path(sys.executable).parent / "ansible-inventory"), "-i", str(source), "--list"]
    start = time.perf_counter()
    done = subprocess.run(command, env=env, capture_output=True, text=True, check=False)
    elapsed = time.perf_counter() - start
    if done.returncode != 0:
        raise SystemExit("%s failed (rc %d):\n%s"
                         % (" ".join(command), done.returncode, done.stderr[-4000:]))
    return elapsed, json.loads(done.stdout)


def check(listing, count, key, label):
    """Both inventories must list the same hosts with the same connection variables."""
    hostvars = listing["_meta"]["hostvars"]
    names = {"%s-%d" % (FLEET, num) for num in range(count)}
    if set(hostvars) != names:
        raise SystemExit("%s: expected %d hosts named %s-<n>, got %d"
                         % (label, count, FLEET, len(hostvars)))
    for num in (0, 7, count - 1):
        got = hostvars["%s-%d" % (FLEET, num)]
        want = {
            "ansible_host": address(num),
            "ansible_user": "admin" if special(num) else USER,
            "ansible_port": 2222 if special(num) else 22,
            "ansible_ssh_private_key_file": str(key),
        }
        for name, value in want.items():
            if _plain(got.get(name)) != value:
                raise SystemExit("%s: %s-%d %s is %r, expected %r"
                                 % (label, FLEET, num, name, got.get(name), value))
    return len(hostvars)


def _plain(value):
    """A value as ansible-inventory --list writes it, less the marking of unsafe strings."""
    if isinstance(value, dict) and set(value) == {"__ansible_unsafe"}:
        return value["__ansible_unsafe"]
    return value


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", maxsplit=1)[0])
    parser.add_argument("--hosts", type=int, default=5000)
    parser.add_argument("--rounds", type=int, default=5, help="timed runs of each, alternating")
    args = parser.parse_args(argv)

    load_before = os.getloadavg()
    with tempfile.TemporaryDirectory(prefix="gpufleet-bench-inv-") as tmp:
        tmp = Path(tmp)
        key = tmp / KEY_NAME
        key.write_text("not a real key\n")
        key.chmod(0o600)
        fleet = write_fleet(tmp, args.hosts)
        static = write_static(tmp, args.hosts, key)
        state_dir = tmp / "state"
        state_dir.mkdir()
        env = environment(state_dir)

        # Untimed first runs: check both listings (and warm the page cache and .pyc files).
        _t, listing = list_inventory(static, env)
        static_hosts = check(listing, args.hosts, key, "static YAML")
        _t, listing = list_inventory(fleet, env)
        fleet_hosts = check(listing, args.hosts, key, "dstack fleet file")

        static_times, fleet_times = [], []
        for _round in range(args.rounds):
            static_times.append(list_inventory(static, env)[0])
            fleet_times.append(list_inventory(fleet, env)[0])

    base = statistics.median(static_times)
    ours = statistics.median(fleet_times)
    ratio = ours / base
    print("machine: %d cores, load before %s, after %s; Python %s, ansible-core %s"
          % (os.cpu_count(), " ".join("%.2f" % x for x in load_before),
             " ".join("%.2f" % x for x in os.getloadavg()), platform.python_version(),
             _ansible_version()))
    print("hosts: static YAML %d, dstack fleet file %d; %d alternating runs of each"
          % (static_hosts, fleet_hosts, args.rounds))
    print("static YAML (yaml plugin):       median %.3fs  min %.3fs  max %.3fs"
          % (base, min(static_times), max(static_times)))
    print("dstack fleet file (fleet plugin): median %.3fs  min %.3fs  max %.3fs"
          % (ours, min(fleet_times), max(fleet_times)))
    verdict = "PASS" if ratio <= TARGET_RATIO else "FAIL"
    print("ratio (median/median): %.2fx  target <= %.1fx  %s" % (ratio, TARGET_RATIO, verdict))
    return 0 if ratio <= TARGET_RATIO else 1


def _ansible_version():
    from ansible.release import __version__

    return __version__


if __name__ == "__main__":
    sys.exit(main())
