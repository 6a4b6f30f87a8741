#!/usr/bin/env python3
"""gpufleet from Python: a local fleet, a two-node task, each rank's result, then cleanup.

    .venv/bin/python examples/python/two_node_task.py            # after `make demo` once
    .venv/bin/python examples/python/two_node_task.py --keep     # leave the fleet up

1. Bring up a two-node local cluster fleet (two containers with their own sshd and dockerd).
2. Run a task on it: each rank sums the squares of its half of 1..N, finding its half from
   DSTACK_NODE_RANK and DSTACK_NODES_NUM, and prints one ``RESULT {json}`` line.
3. Read each rank's line from the run's logs, combine them and check the total.
4. Delete the fleet, also when something failed.

Exits 0 when every rank reported and the total is right; otherwise prints the error (with
the host it concerns) and exits 1.
"""

from __future__ import annotations

import argparse
import json
import sys

from gpufleet import api

RANK_PROGRAM = """\
import json, os
rank, nodes, n = int(os.environ["DSTACK_NODE_RANK"]), int(os.environ["DSTACK_NODES_NUM"]), {n}
lo, hi = rank * n // nodes + 1, (rank + 1) * n // nodes
print("RESULT " + json.dumps({{"rank": rank, "first": lo, "last": hi,
                               "sum": sum(i * i for i in range(lo, hi + 1)),
                               "master": os.environ["DSTACK_MASTER_NODE_IP"]}}))
"""


def fleet_config(name):
    return {"type": "fleet", "name": name, "nodes": 2, "placement": "cluster",
            "backends": ["local"]}


def task_config(name, n):
    # Local nodes are containers on this machine: ask for little (dstack's defaults ask for
    # 2 CPUs, 8GB of memory and 100GB of disk per node).
    return {"type": "task", "name": name, "nodes": 2,
            "resources": {"cpu": "1..", "memory": "1GB..", "disk": "1GB.."},
            "commands": ["python3 -c '%s'" % RANK_PROGRAM.format(n=n).replace("'", "'\\''")]}


def show_progress(event):
    """The callback: the runner's lines (node status changes, rank-prefixed logs)."""
    if event.get("event") == "verbose" and (event.get("stdout") or "").strip():
        print(event["stdout"].rstrip("\n"), file=sys.stderr)


def rank_results(run):
    """{rank: result} from the ``RESULT`` line each rank printed."""
    results = {}
    for entry in api.logs(run)["ranks"]:
        for line in entry["lines"]:
            if line.startswith("RESULT "):
                results[entry["rank"]] = json.loads(line[len("RESULT "):])
    return results


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--name", default="pyexample", help="the fleet's name (default: %(default)s)")
    parser.add_argument("-n", type=int, default=1000, help="sum the squares of 1..N")
    parser.add_argument("--keep", action="store_true", help="leave the fleet up")
    args = parser.parse_args(argv)

    fleet = fleet_config(args.name)
    try:
        code = run_on(fleet, args)
    except api.GpufleetError as exc:
        print("error: %s" % exc, file=sys.stderr)
        code = 1
    if not args.keep:
        try:
            api.delete(fleet)
            print("fleet %s deleted" % args.name)
        except api.GpufleetError as exc:
            print("error: deleting the fleet: %s" % exc, file=sys.stderr)
            code = 1
    return code


def run_on(fleet, args):
    record = api.apply(fleet)
    print("fleet %s: %s" % (record["name"], ", ".join(
        "%s (%s)" % (i["name"], i["internal_ip"]) for i in record["instances"])))
    run = api.run_task(task_config(fleet["name"] + "-sum", args.n), on_event=show_progress)
    print("run %s %s, exit codes by rank: %s" % (
        run["run"], run["status"],
        [job["exit_code"] for job in sorted(run["jobs"], key=lambda j: j["job_num"])]))
    results = rank_results(run["run"])
    for rank in sorted(results):
        part = results[rank]
        print("rank %d: squares of %d..%d sum to %d (master %s)"
              % (rank, part["first"], part["last"], part["sum"], part["master"]))
    total = sum(part["sum"] for part in results.values())
    expected = args.n * (args.n + 1) * (2 * args.n + 1) // 6
    print("total %d, expected %d" % (total, expected))
    if sorted(results) != [0, 1] or total != expected:
        print("error: ranks %s reported; the total is %s"
              % (sorted(results), "right" if total == expected else "wrong"), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
