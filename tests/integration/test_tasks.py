"""Distributed tasks, end to end on a real 3-node local cluster fleet.

Each node is a container with its own sshd and dockerd; every run below goes through
playbooks/task.yml (ansible-runner, the action plugin, SSH to the nodes), and the checks read what
the containers printed, through playbooks/logs.yml, or what the nodes' engines hold.
"""

from __future__ import annotations

import json
import os
import time

from gpufleet import cli
from gpufleet.runner import run_playbook

from .task_world import CPU, FLEET, SUFFIX, logs, node_containers, run_task, task_file


def test_every_rank_sees_dstacks_variables_and_hostfile(world):
    name = "env-" + SUFFIX
    result, record = run_task(world, name, (
        "type: task\nname: %s\nnodes: 3\n%s"
        "env:\n  - GREETING=hi there\n"
        "commands:\n"
        "  - python3 -c 'import os, json; print(\"ENV\", json.dumps(dict((k, v) for k, v in "
        "os.environ.items() if k.startswith((\"DSTACK_\", \"GREETING\")))))'\n"
        "  - echo HOSTFILE; cat $DSTACK_MPI_HOSTFILE; echo END\n"
        "  - echo PWD $(pwd)\n" % (name, CPU)))
    assert result.ok, result.stdout[-4000:]
    assert record["status"] == "done" and record["fleet"] == FLEET
    ips = [job["internal_ip"] for job in record["jobs"]]
    assert sorted(ips) == sorted(world["ips"]) and len(set(ips)) == 3
    out = logs(name)
    assert sorted(out) == [0, 1, 2]
    for rank in range(3):
        lines = out[rank]
        env = json.loads(next(line for line in lines if line.startswith("ENV "))[4:])
        assert env["DSTACK_RUN_NAME"] == name
        assert env["DSTACK_RUN_ID"] == record["run_id"]
        assert env["DSTACK_NODE_RANK"] == str(rank)
        assert env["DSTACK_NODES_NUM"] == "3"
        assert env["DSTACK_NODES_IPS"] == "\n".join(ips)
        assert env["DSTACK_MASTER_NODE_IP"] == ips[0]
        assert env["DSTACK_GPUS_PER_NODE"] == "0"
        assert env["DSTACK_GPUS_NUM"] == "0"
        assert env["DSTACK_MPI_HOSTFILE"] == "/dstack/mpi/hostfile"
        assert env["DSTACK_WORKING_DIR"] == "/dstack/run"
        assert env["GREETING"] == "hi there"
        assert env["DSTACK_JOB_ID"] and env["DSTACK_JOB_ID"] != env["DSTACK_RUN_ID"]
        start = lines.index("HOSTFILE")
        assert lines[start + 1:lines.index("END")] == ips  # CPU nodes: "<ip>" lines
        assert "PWD /dstack/run" in lines
    job_ids = set()
    for rank in range(3):
        env = json.loads(next(x for x in out[rank] if x.startswith("ENV "))[4:])
        job_ids.add(env["DSTACK_JOB_ID"])
    assert len(job_ids) == 3


def test_mpi_allreduce_across_all_nodes_with_workers_first_and_master_done(world):
    name = "mpi-" + SUFFIX
    # Every rank takes part in both collectives; rank 0 alone prints.
    script = ("from mpi4py import MPI; c = MPI.COMM_WORLD; "
              "s = c.allreduce(c.Get_rank() + 1); "
              "h = len(set(c.allgather(MPI.Get_processor_name()))); "
              "print('SUM', s, 'SIZE', c.Get_size(), 'HOSTS', h) if c.Get_rank() == 0 else None")
    result, record = run_task(world, name, (
        "type: task\nname: %s\nnodes: 3\n%s"
        "startup_order: workers-first\nstop_criteria: master-done\nstop_duration: 10s\n"
        "max_duration: 5m\n"
        "commands:\n"
        "  - |\n"
        "    if [ $DSTACK_NODE_RANK -eq 0 ]; then\n"
        "      mpirun --allow-run-as-root --hostfile $DSTACK_MPI_HOSTFILE -n 3 --map-by node \\\n"
        "        python3 -c \"%s\"\n"
        "    else\n"
        "      sleep infinity\n"
        "    fi\n" % (name, CPU, script)))
    assert result.ok, result.stdout[-4000:]
    assert record["status"] == "done", record
    assert "SUM 6 SIZE 3 HOSTS 3" in logs(name)[0]
    states = node_containers(world, name)
    assert all(state != "running" for entries in states.values() for _n, state in entries)


def test_one_failing_rank_stops_every_node_and_names_it(world):
    name = "fail-" + SUFFIX
    result, record = run_task(world, name, (
        "type: task\nname: %s\nnodes: 3\n%sstop_duration: 10s\n"
        "commands:\n"
        "  - if [ $DSTACK_NODE_RANK -eq 1 ]; then sleep 2; echo bye; exit 3; fi;"
        " echo waiting $DSTACK_NODE_RANK; sleep infinity\n"
        % (name, CPU)))
    assert not result.ok
    assert record["status"] == "failed"
    assert "job 1 on %s-1 exited with code 3" % FLEET in record["message"]
    jobs = dict((j["job_num"], j) for j in record["jobs"])
    assert jobs[1]["status"] == "failed" and jobs[1]["exit_code"] == 3
    assert jobs[0]["status"] == jobs[2]["status"] == "terminated"
    assert "waiting 0" in record["log_tail"]  # rank 0's last lines come with the report
    states = node_containers(world, name)
    assert sum(len(v) for v in states.values()) == 3
    assert all(state == "exited" for entries in states.values() for _n, state in entries)


def test_retry_on_error_resubmits_all_nodes_until_the_flaky_command_succeeds(world):
    name = "flaky-" + SUFFIX
    result, record = run_task(world, name, (
        "type: task\nname: %s\nnodes: 2\n%s"
        "retry:\n  on_events: [error]\n  duration: 10m\n"
        "volumes:\n  - /tmp/gpufleet-flaky-%s:/state\n"
        "commands:\n"
        # Only rank 0 is flaky: each node has its own /state, and a stop may beat rank 1's
        # touch, which would make the count of submissions depend on timing.
        "  - if [ $DSTACK_NODE_RANK -eq 0 ]; then if [ -e /state/tried ]; then echo second try;"
        " else touch /state/tried; exit 1; fi; fi\n"
        % (name, CPU, SUFFIX)))
    assert result.ok, result.stdout[-4000:]
    assert record["status"] == "done" and record["submissions"] == 2
    assert "second try" in logs(name)[0]


def test_max_duration_stops_a_run_that_outlives_it(world):
    name = "long-" + SUFFIX
    result, record = run_task(world, name, (
        "type: task\nname: %s\nnodes: 2\n%smax_duration: 3s\nstop_duration: 5s\n"
        "commands:\n  - sleep 300\n" % (name, CPU)))
    assert not result.ok
    assert record["status"] == "terminated" and record["reason"] == "max_duration_exceeded"


def test_stop_ps_and_logs_from_the_command_line(world, capsys):
    name = "sleepy-" + SUFFIX
    result, record = run_task(world, name, (
        "type: task\nname: %s\nnodes: 2\n%s"
        "commands:\n  - echo started $DSTACK_NODE_RANK; sleep infinity\n" % (name, CPU)),
        gpufleet_task_wait=False)
    assert result.ok, result.stdout[-3000:]
    assert cli.main(["ps", "--json"]) == 0
    runs = json.loads(capsys.readouterr().out)
    mine = next(r for r in runs if r["name"] == name)
    assert mine["status"] in ("provisioning", "running")
    # Stop once both commands have printed, so the logs afterwards must still hold those lines
    # (a stop that lands earlier is another test's matter: the run ends before its command).
    started = ["[%s-%d] started %d" % (name, rank, rank) for rank in (0, 1)]
    deadline = time.time() + 120
    while True:
        assert cli.main(["logs", name]) == 0
        printed = capsys.readouterr().out.splitlines()
        if all(line in printed for line in started):
            break
        assert time.time() < deadline, "the commands never printed: %s" % printed
        time.sleep(1)
    assert cli.main(["stop", "-y", name]) == 0
    capsys.readouterr()
    assert cli.main(["ps"]) == 0
    table = capsys.readouterr().out.splitlines()
    assert table[0].split() == ["NAME", "USER", "BACKEND", "GPU", "PRICE", "STATUS",
                                "SUBMITTED"]
    row = next(line for line in table if line.startswith(name))
    assert "terminated" in row
    assert any(line.strip().startswith("job=1") for line in table)
    assert cli.main(["logs", name]) == 0
    out = capsys.readouterr().out.splitlines()
    assert all(line in out for line in started), out


def test_a_task_on_an_ssh_fleet_found_through_its_remembered_file(world):
    """The fleet's nodes adopted again as an SSH fleet (real sshd, sudo, markers); the task names
    that fleet and is given no fleet file: the runner finds it through the state dir."""
    name = "lab-" + SUFFIX
    key = os.path.join(os.environ["GPUFLEET_STATE_DIR"], "fleets", FLEET, "id_ed25519")
    fleet = world["base"] / "lab.dstack.yml"
    # The nodes' nested docker0 would be their first address: name the fleet's network.
    subnet = world["docker"].run("network", "inspect", "--format",
                                 "{{(index .IPAM.Config 0).Subnet}}", "gpufleet-" + FLEET).strip()
    # The fleet's env reaches its jobs, under the task's own env (as in dstack).
    fleet.write_text("type: fleet\nname: %s\nplacement: cluster\n"
                     "env: [FROM_FLEET=fleet-value, BOTH=fleet]\nssh_config:\n  user: gpufleet\n"
                     "  identity_file: %s\n  network: %s\n  hosts: [%s, %s]\n"
                     % (name, key, subnet, world["ips"][0], world["ips"][1]))
    result = run_playbook("fleet.yml", {"fleet": str(fleet)})
    assert result.ok, result.stdout[-4000:]
    try:
        run = "onssh-" + SUFFIX
        result, record = run_task(world, run, (
            "type: task\nname: %s\nnodes: 2\nfleets: [%s]\nimage: %s\n%senv: [BOTH=task]\n"
            "commands:\n  - echo rank $DSTACK_NODE_RANK master $DSTACK_MASTER_NODE_IP\n"
            "  - echo $FROM_FLEET $BOTH\n"
            % (run, name, world["base_image"], CPU)))
        assert result.ok, result.stdout[-4000:]
        assert record["status"] == "done" and record["fleet"] == name
        assert [j["host"] for j in record["jobs"]] == [name + "-0", name + "-1"]
        out = logs(run)
        assert out[0] == ["rank 0 master %s" % world["ips"][0], "fleet-value task"]
        assert out[1] == ["rank 1 master %s" % world["ips"][0], "fleet-value task"]
    finally:
        assert run_playbook("delete.yml", {"fleet": str(fleet)}).ok


def test_a_sweep_with_dstack_apply_options_name_env_and_fleet(world, capsys, monkeypatch):
    """The guide's sweep (docs/tasks.md), as written: one file with retry on no-capacity,
    ``apply -d --name hp-$i --env CONFIG_ID=$i`` five times on a fleet of three hosts;
    ``--env`` wins over the file, a bare ``--env NAME`` takes the submitter's value, ``--fleet``
    picks the fleet, the runs that do not fit wait in the queue and start as ``ps`` moves it,
    and every run is in ps and has its own logs."""
    path = task_file(world, "sweep", (
        "type: task\nimage: %s\n%senv:\n  - CONFIG_ID=none\n  - FROM_FILE=kept\n"
        "retry:\n  on_events: [no-capacity]\n  duration: 10m\n"
        "commands:\n  - echo config=$CONFIG_ID file=$FROM_FILE shell=$FROM_SHELL\n"
        % (world["base_image"], CPU)))
    monkeypatch.setenv("FROM_SHELL", "submitter")
    names = ["hp-%d-%s" % (i, SUFFIX) for i in range(5)]
    for i, name in enumerate(names):
        assert cli.main(["apply", "-f", path, "-y", "-d", "--name", name, "--env",
                         "CONFIG_ID=%d" % i, "-e", "FROM_SHELL", "--fleet", FLEET]) == 0
    capsys.readouterr()
    deadline = time.time() + 180
    while True:
        assert cli.main(["ps", "--json"]) == 0   # each look moves the queue when it is due
        listed = dict((r["name"], r) for r in json.loads(capsys.readouterr().out))
        assert set(names) <= set(listed)
        if all(listed[n]["status"] == "done" for n in names):
            break
        assert time.time() < deadline, [(n, listed[n]["status"]) for n in names]
        time.sleep(2)
    assert all(listed[n]["fleet"] == FLEET for n in names)
    for i, name in enumerate(names):
        assert run_playbook("logs.yml", {"run": name, "gpufleet_follow": True}).ok
        assert logs(name)[0] == ["config=%d file=kept shell=submitter" % i]
    # --fleet names a fleet that does not exist: nothing runs, and the message says so
    assert cli.main(["apply", "-f", path, "-y", "--fleet", "no-such-fleet"]) == 1
    assert "no-such-fleet" in capsys.readouterr().err
