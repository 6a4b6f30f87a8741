"""The rank plan: env, hostfile, SSH config, command, docker options, jobs (tasks.rankplan)."""

from __future__ import annotations

import json
import random
import re
import shlex
import subprocess
import sys

import pytest
from ansible_collections.gpufleet.cluster.plugins.module_utils.render import run_table as runtable
from ansible_collections.gpufleet.cluster.plugins.module_utils.spec import parse_data
from ansible_collections.gpufleet.cluster.plugins.module_utils.tasks import command as plan_command
from ansible_collections.gpufleet.cluster.plugins.module_utils.tasks import container as plan_container
from ansible_collections.gpufleet.cluster.plugins.module_utils.tasks import environment as plan_env
from ansible_collections.gpufleet.cluster.plugins.module_utils.tasks import rankplan
from ansible_collections.gpufleet.cluster.plugins.module_utils.tasks.hostside import (
    volumeside,
    wrapper,
)
from ansible_collections.gpufleet.cluster.plugins.module_utils.volumes import mounts as volume_mounts

from ..configs import task
from .fakes import RUN, gpu_devices, placed_job, placement

KEY = {"private": "-----BEGIN RSA PRIVATE KEY-----\nabc\n", "public": "ssh-rsa AAAA dstack_job\n"}


def build(config, jobs, **kwargs):
    kwargs.setdefault("environ", {})
    if len(jobs) >= 2:
        kwargs.setdefault("ssh_key", KEY)
    return rankplan.build_jobs(config, placement(*jobs), dict(RUN), **kwargs)


def sourced(text, tmp_path, names):
    """Source an env.sh text with /bin/sh; the values of ``names`` as the shell sees them."""
    path = tmp_path / "env.sh"
    path.write_text(text)
    script = '. "$1"; shift; exec "$@"'
    out = subprocess.run(
        ["/bin/sh", "-c", script, "sh", str(path), sys.executable, "-c",
         "import json, os, sys; print(json.dumps({n: os.environ.get(n) for n in sys.argv[1:]}))"]
        + list(names),
        check=True, stdout=subprocess.PIPE,
    ).stdout
    return json.loads(out)


# ---------------------------------------------------------------------------------------------
# DSTACK_* (docs/reference/dstack-runtime.md#environment-variables)


def test_system_env_three_cpu_nodes():
    jobs = [dict(placed_job(n), job_id="job-%d" % n) for n in range(3)]
    env = plan_env.system_env(RUN, jobs, jobs[1])
    assert env == {
        "DSTACK_RUN_ID": "3f2a9c",
        "DSTACK_JOB_ID": "job-1",
        "DSTACK_RUN_NAME": "train",
        "DSTACK_REPO_ID": "none",
        "DSTACK_REPO_DIR": "",
        "DSTACK_WORKING_DIR": "",
        "DSTACK_NODES_IPS": "10.1.0.2\n10.1.0.3\n10.1.0.4",
        "DSTACK_MASTER_NODE_IP": "10.1.0.2",
        "DSTACK_NODE_RANK": "1",
        "DSTACK_NODES_NUM": "3",
        "DSTACK_GPUS_PER_NODE": "0",
        "DSTACK_GPUS_NUM": "0",
        "DSTACK_MPI_HOSTFILE": "/dstack/mpi/hostfile",
    }


def test_system_env_two_by_eight_gpus():
    jobs = [dict(placed_job(n, vendor="nvidia", gpus=8), job_id="j%d" % n) for n in range(2)]
    env = plan_env.system_env(RUN, jobs, jobs[0])
    assert env == {
        "DSTACK_RUN_ID": "3f2a9c",
        "DSTACK_JOB_ID": "j0",
        "DSTACK_RUN_NAME": "train",
        "DSTACK_REPO_ID": "none",
        "DSTACK_REPO_DIR": "",
        "DSTACK_WORKING_DIR": "",
        "DSTACK_NODES_IPS": "10.1.0.2\n10.1.0.3",
        "DSTACK_MASTER_NODE_IP": "10.1.0.2",
        "DSTACK_NODE_RANK": "0",
        "DSTACK_NODES_NUM": "2",
        "DSTACK_GPUS_PER_NODE": "8",
        "DSTACK_GPUS_NUM": "16",
        "DSTACK_MPI_HOSTFILE": "/dstack/mpi/hostfile",
    }


def test_system_env_blank_for_a_job_without_ip_and_gpus_summed_per_job():
    jobs = [
        dict(placed_job(0, vendor="nvidia", gpus=2), job_id="a"),
        dict(placed_job(1, ip=None, vendor="nvidia", gpus=1), job_id="b"),
    ]
    env = plan_env.system_env(RUN, jobs, jobs[1])
    assert env["DSTACK_NODES_IPS"] == "10.1.0.2\n"
    assert env["DSTACK_GPUS_PER_NODE"] == "1"
    assert env["DSTACK_GPUS_NUM"] == "3"


def test_env_sh_of_build_jobs_has_every_variable(tmp_path):
    jobs = build(task(nodes=3), [placed_job(n) for n in range(3)])
    names = ["DSTACK_NODE_RANK", "DSTACK_NODES_IPS", "DSTACK_JOB_ID", "DSTACK_RUN_NAME",
             "GPUFLEET_MULTINODE", "GPUFLEET_SHELL", "GPUFLEET_STOP_DURATION",
             "GPUFLEET_MAX_DURATION", "GPUFLEET_WORKING_DIR", "GPUFLEET_USER"]
    values = sourced(jobs[2]["files"]["env.sh"]["text"], tmp_path, names)
    assert values == {
        "DSTACK_NODE_RANK": "2",
        "DSTACK_NODES_IPS": "10.1.0.2\n10.1.0.3\n10.1.0.4",
        "DSTACK_JOB_ID": jobs[2]["job_id"],
        "DSTACK_RUN_NAME": "train",
        "GPUFLEET_MULTINODE": "1",
        "GPUFLEET_SHELL": "/bin/bash",
        "GPUFLEET_STOP_DURATION": "300",
        "GPUFLEET_MAX_DURATION": "",
        "GPUFLEET_WORKING_DIR": "",
        "GPUFLEET_USER": "",
    }
    assert len({j["job_id"] for j in jobs}) == 3
    text = jobs[0]["files"]["env.sh"]["text"]
    assert text.index("DSTACK_RUN_ID") < text.index("GPUFLEET_SHELL")


def test_user_env_overrides_dstack_variables(tmp_path):
    config = task(env={"DSTACK_NODE_RANK": "7", "OTHER": "x"}, nodes=2)
    jobs = build(config, [placed_job(0), placed_job(1)])
    values = sourced(jobs[1]["files"]["env.sh"]["text"], tmp_path,
                     ["DSTACK_NODE_RANK", "OTHER", "DSTACK_NODES_NUM"])
    assert values == {"DSTACK_NODE_RANK": "7", "OTHER": "x", "DSTACK_NODES_NUM": "2"}


def test_an_ssh_fleets_env_reaches_the_job_under_the_tasks_env(tmp_path):
    config = task(env={"HTTPS_PROXY": "http://task-proxy:3128"})
    jobs = build(config, [placed_job(0)], fleet_env={
        "HTTPS_PROXY": "http://fleet-proxy:3128", "NO_PROXY": "10.0.0.0/8"})
    values = sourced(jobs[0]["files"]["env.sh"]["text"], tmp_path, ["HTTPS_PROXY", "NO_PROXY"])
    assert values == {"HTTPS_PROXY": "http://task-proxy:3128", "NO_PROXY": "10.0.0.0/8"}


def test_env_sh_quotes_newlines_and_quotes(tmp_path):
    value = "it's \"quoted\"\nsecond line $HOME `id` \\"
    jobs = build(task(env={"TRICKY": value}), [placed_job(0)])
    assert sourced(jobs[0]["files"]["env.sh"]["text"], tmp_path, ["TRICKY"]) == {"TRICKY": value}


def test_settings_for_the_wrapper():
    config = task(working_dir="~/work", user="dstack:users", max_duration="2h",
                  stop_duration="10s", shell="sh")
    env = build(config, [placed_job(0)])[0]["files"]["env.sh"]["text"]
    for line in ("export GPUFLEET_SHELL='/bin/sh'", "export GPUFLEET_WORKING_DIR='~/work'",
                 "export GPUFLEET_USER='dstack:users'", "export GPUFLEET_MAX_DURATION='7200'",
                 "export GPUFLEET_STOP_DURATION='10'", "export GPUFLEET_MULTINODE='0'"):
        assert line in env.splitlines()


# ---------------------------------------------------------------------------------------------
# env, secrets, registry credentials


def test_bare_names_come_from_the_environment():
    config, _warnings = parse_data({"type": "task", "commands": ["x"], "env": ["HF_TOKEN", "A=1"]})
    assert plan_env.resolve_env(config, {}, {"HF_TOKEN": "hf_abc"}) == {
        "HF_TOKEN": "hf_abc", "A": "1"}


def test_unset_bare_name_is_an_error_naming_the_field():
    config, _warnings = parse_data({"type": "task", "commands": ["x"], "env": ["HF_TOKEN"]})
    with pytest.raises(rankplan.PlanError) as info:
        plan_env.resolve_env(config, {}, {})
    assert "env.HF_TOKEN" in str(info.value)
    assert "Environment variable HF_TOKEN is not set" in str(info.value)


def test_missing_secrets_are_listed_together():
    config = task(env={"A": "${{ secrets.ONE }}", "B": "x-${{ secrets.TWO }}",
                       "C": "${{ secrets.THREE }}"})
    with pytest.raises(rankplan.PlanError) as info:
        plan_env.resolve_env(config, {"THREE": "3"}, {})
    message = str(info.value)
    assert "Failed to interpolate due to missing vars: [ONE, TWO]" in message
    assert "gpufleet_secrets" in message and "env.A" in message and "env.B" in message
    assert "3" not in message.replace("env.", "")


def test_secrets_reach_env_sh_only():
    secret = "s3cr3t-VALUE-42"
    config = task(
        env={"TOKEN": "${{ secrets.TOKEN }}", "PLAIN": "p"},
        registry_auth={"username": "me", "password": "${{ secrets.TOKEN }}"},
        nodes=2, resources={"gpu": "H100:8"},
    )
    jobs = build(config, [placed_job(n, vendor="nvidia", gpus=8) for n in range(2)],
                 secrets={"TOKEN": secret})
    for job in jobs:
        assert "export TOKEN='%s'" % secret in job["files"]["env.sh"]["text"]
        rest = dict(job, files=dict((k, v) for k, v in job["files"].items() if k != "env.sh"))
        assert secret not in json.dumps(rest)
        assert secret not in json.dumps(job["labels"]) + json.dumps(job["docker_args"])


def test_registry_credentials_fill_secrets_and_env():
    config = task(env={"REG_USER": "robot"},
                  registry_auth={"username": "${{ env.REG_USER }}",
                                 "password": "${{ secrets.REG_PASS }}"})
    env = plan_env.resolve_env(config, {}, {})
    assert plan_env.registry_credentials(config, env, {"REG_PASS": "pw"}) == {
        "username": "robot", "password": "pw"}
    with pytest.raises(rankplan.PlanError) as info:
        plan_env.registry_credentials(config, env, {})
    assert "registry_auth.password" in str(info.value)
    assert "[REG_PASS]" in str(info.value)
    assert plan_env.registry_credentials(task(), {}, {}) is None


# ---------------------------------------------------------------------------------------------
# hostfile and SSH config (docs/reference/dstack-runtime.md#mpi-hostfile,
# docs/reference/dstack-runtime.md#ssh-between-nodes)


def test_hostfile_gpu_nodes():
    jobs = [placed_job(n, vendor="nvidia", gpus=8) for n in range(2)]
    assert plan_env.hostfile(jobs) == "10.1.0.2 slots=8\n10.1.0.3 slots=8\n"


def test_hostfile_cpu_nodes_have_no_slots():
    jobs = [placed_job(n) for n in range(3)]
    assert plan_env.hostfile(jobs) == "10.1.0.2\n10.1.0.3\n10.1.0.4\n"


def test_hostfile_is_empty_when_any_ip_is_missing():
    jobs = [placed_job(0, vendor="nvidia", gpus=8), placed_job(1, ip=None)]
    assert plan_env.hostfile(jobs) == ""


def test_ssh_client_config():
    assert plan_env.ssh_client_config([placed_job(0), placed_job(1)]) == (
        "Host 10.1.0.2\n    Port 10022\n    StrictHostKeyChecking no\n"
        "    UserKnownHostsFile /dev/null\n    IdentityFile ~/.ssh/dstack_job\n"
        "Host 10.1.0.3\n    Port 10022\n    StrictHostKeyChecking no\n"
        "    UserKnownHostsFile /dev/null\n    IdentityFile ~/.ssh/dstack_job\n"
    )
    assert plan_env.ssh_client_config([placed_job(0), placed_job(1, ip=None)]) == ""


# ---------------------------------------------------------------------------------------------
# command.sh


def test_commands_are_joined_with_and():
    script = plan_command.command_script(task(commands=["pip install x", "python train.py"]))
    assert script.startswith("#!/bin/sh\n")
    assert script.splitlines()[-1] == "exec '/bin/bash' -c 'pip install x && python train.py'"


def test_background_command_is_wrapped_in_braces():
    script = plan_command.command_script(task(commands=["server &", "client"], image="alpine"))
    assert script.splitlines()[-1] == "exec '/bin/sh' -c '{ server & } && client'"


def test_commands_run_and_quote_correctly(tmp_path):
    script = plan_command.command_script(
        task(image="alpine", commands=["echo \"it's\" $((1+2))", "sleep 0 &", "echo done"])
    )
    path = tmp_path / "command.sh"
    path.write_text(script)
    out = subprocess.run(["/bin/sh", str(path)], stdout=subprocess.PIPE, check=True).stdout
    assert out.decode() == "it's 3\ndone\n"


def test_missing_shell_is_reported(tmp_path):
    script = plan_command.command_script(task(shell="/no/such/shell"))
    path = tmp_path / "command.sh"
    path.write_text(script)
    proc = subprocess.run(["/bin/sh", str(path)], stderr=subprocess.PIPE, check=False)
    assert proc.returncode == 127
    assert b"/no/such/shell is not in the image" in proc.stderr


def test_entrypoint_with_commands_as_arguments():
    config = task(image="img", entrypoint="python -m 'my app'", commands=["--lr", "a b"])
    script = plan_command.command_script(config)
    assert script.splitlines()[-1] == "exec 'python' '-m' 'my app' '--lr' 'a b'"


def test_image_command_when_neither_is_set():
    config, _warnings = parse_data({"type": "task", "image": "nginx"})
    script = plan_command.command_script(config, image_cmd=["/docker-entrypoint.sh", "nginx"])
    assert script.splitlines()[-1] == "exec '/docker-entrypoint.sh' 'nginx'"
    with pytest.raises(rankplan.PlanError) as info:
        plan_command.command_script(config)
    assert "Could not determine what command to run" in str(info.value)


def test_run_args_are_shell_joined():
    config = task(commands=["python train.py ${{ run.args }}", "echo $$HOME"])
    script = plan_command.command_script(config, run_args=["--name", "my run", "it's"])
    words = shlex.split(script.splitlines()[-1])
    assert words[:3] == ["exec", "/bin/bash", "-c"]
    first, second = words[3].split(" && ")
    assert shlex.split(first) == ["python", "train.py", "--name", "my run", "it's"]
    assert second == "echo $HOME"
    empty = plan_command.command_script(config)
    assert empty.splitlines()[-1] == "exec '/bin/bash' -c 'python train.py && echo $HOME'"


def test_group_commands_and_node_ip_references():
    config, _warnings = parse_data({
        "type": "task", "image": "img",
        "groups": [
            {"name": "prefill", "nodes": 1, "commands": ["serve"]},
            {"name": "decode", "nodes": 2,
             "commands": ["connect ${{ groups[0].nodes[0].IP_ADDRESS }}"]},
        ],
    })
    jobs = [placed_job(0, group="prefill"), placed_job(1, group="decode"),
            placed_job(2, group="decode")]
    specs = build(config, jobs)
    assert specs[0]["files"]["command.sh"]["text"].splitlines()[-1] == (
        "exec '/bin/sh' -c 'serve'")
    assert specs[2]["files"]["command.sh"]["text"].splitlines()[-1] == (
        "exec '/bin/sh' -c 'connect 10.1.0.2'")
    jobs[0]["internal_ip"] = None
    with pytest.raises(rankplan.PlanError) as info:
        build(config, jobs)
    assert "groups[1].commands[0]" in str(info.value) and "internal_ip" in str(info.value)


# ---------------------------------------------------------------------------------------------
# docker run options (docs/reference/dstack-runtime.md#container-start)


def options(config, job, run=None):
    run = run or RUN
    return plan_container.docker_args(config, job, run, {"gpufleet.run": run["name"]})


def pairs(args, flag):
    return [args[i + 1] for i, a in enumerate(args[:-1]) if a == flag]


def test_basic_options_host_network():
    args = options(task(), placed_job(0))
    assert args[:2] == ["--name", "train-0-0"]
    assert pairs(args, "--network") == ["host"]
    assert pairs(args, "--entrypoint") == ["/bin/sh"]
    assert pairs(args, "--label") == ["gpufleet.run=train"]
    assert "--privileged" not in args and "--shm-size" not in args and "--cpus" not in args
    assert not any("infiniband" in a or "hugepages" in a for a in args)


def test_labels_are_sorted():
    args = plan_container.docker_args(task(), placed_job(0), RUN, {"b": "2", "a": "1", "c": "x=y"})
    assert pairs(args, "--label") == ["a=1", "b=2", "c=x=y"]


def test_blocks_job_is_bridged_and_limited():
    job = placed_job(0, whole_host=False, blocks=2, total_blocks=4, cpus=8, memory_mib=65536)
    args = options(task(), job)
    assert pairs(args, "--network") == ["bridge"]
    assert pairs(args, "--cpus") == ["8"]
    assert pairs(args, "--memory") == ["65536m"]
    assert "-p" not in args


def test_shm_size_and_privileged():
    args = options(task(resources={"shm_size": "1GB"}, privileged=True), placed_job(0))
    assert pairs(args, "--shm-size") == ["1073741824"]
    assert pairs(args, "--tmpfs") == ["/dev/shm:rw,exec,size=1073741824"]
    assert "--privileged" in args


def test_docker_true_is_privileged_and_uses_dind():
    config, _warnings = parse_data({"type": "task", "docker": True, "commands": ["docker ps"]})
    assert "--privileged" in options(config, placed_job(0))
    assert build(config, [placed_job(0)])[0]["image"] == "dstackai/dind"


def test_nvidia_gpus():
    args = options(task(), placed_job(0, vendor="nvidia", gpus=2))
    assert pairs(args, "--gpus") == ['"device=GPU-0-0,GPU-0-1"']
    assert pairs(args, "-e") == ["NVIDIA_DRIVER_CAPABILITIES=compute,utility,graphics,video"]
    assert "--ipc=host" not in args
    counted = placed_job(0, vendor="nvidia")
    counted["gpus"] = gpu_devices("nvidia", 2, ids=["/dev/nvidia0", "/dev/nvidia1"])
    assert pairs(options(task(), counted), "--gpus") == ['"device=0,1"']


def test_amd_gpus():
    args = options(task(), placed_job(0, vendor="amd", gpus=2))
    assert pairs(args, "--device") == ["/dev/kfd", "/dev/dri/renderD128", "/dev/dri/renderD129"]
    assert "--ipc=host" in args
    assert pairs(args, "--cap-add") == ["SYS_PTRACE"]
    assert pairs(args, "--security-opt") == ["seccomp=unconfined"]


def test_intel_gaudi():
    args = options(task(), placed_job(0, vendor="intel", gpus=3))
    assert pairs(args, "--runtime") == ["habana"]
    assert "--ipc=host" in args
    assert pairs(args, "--cap-add") == ["SYS_NICE"]
    assert pairs(args, "-e") == ["HABANA_VISIBLE_DEVICES=0,1,2"]


def test_tenstorrent_devices():
    job = placed_job(0, vendor="tenstorrent")
    job["gpus"] = gpu_devices("tenstorrent", 2, ids=["/dev/tenstorrent/3", "board-7"])
    args = options(task(), job)
    assert pairs(args, "--device") == ["/dev/tenstorrent/3", "/dev/tenstorrent/1"]
    spec = build(task(), [job])[0]
    assert spec["conditional"] == ["infiniband", "hugepages-1g"]


def test_cpu_job_has_no_gpu_flags():
    args = options(task(), placed_job(0))
    for flag in ("--gpus", "--device", "--runtime", "--ipc=host"):
        assert flag not in args


# ---------------------------------------------------------------------------------------------
# mounts (docs/reference/dstack-files.md#volume-mounts)


def test_network_volume_names_per_node_and_instance_volumes():
    config = task(volumes=[
        "data-${{ dstack.node_rank }}:/data",
        {"name": ["ckpt-${{ dstack.job_num }}", "other"], "path": "/ckpt"},
        {"instance_path": "/mnt/cache", "path": "/cache", "optional": True},
    ])
    assert volume_mounts.mounts(config, placed_job(3), RUN) == [
        {"kind": "network", "name": "data-3", "target": "/data",
         "source": "/mnt/disks/dstack-volumes/data-3"},
        {"kind": "network", "name": "ckpt-3", "target": "/ckpt",
         "source": "/mnt/disks/dstack-volumes/ckpt-3"},
        {"kind": "instance", "source": "/mnt/cache", "target": "/cache", "optional": True},
    ]


def test_a_network_volume_without_a_name_is_refused_with_its_field():
    config = task(volumes=["data-0:/data"])
    config["volumes"][0]["name"] = ""
    with pytest.raises(volume_mounts.VolumeError, match=r"volumes\[0\]\.name: a network volume "
                       "needs a name"):
        volume_mounts.mounts(config, placed_job(0), RUN)


def test_hosts_mount_network_volumes_where_the_plan_binds_them_from():
    # nodeside.py travels to the hosts alone, so it keeps its own copy of the root.
    assert volumeside.NETWORK_VOLUMES_ROOT == volume_mounts.NETWORK_VOLUMES_ROOT


# ---------------------------------------------------------------------------------------------
# jobs


def test_job_spec_shape_for_two_gpu_nodes():
    config = task(nodes=2, resources={"gpu": "H100:80GB:8"}, max_duration="1h")
    specs = build(config, [placed_job(n, vendor="nvidia", gpus=8) for n in range(2)])
    spec = specs[1]
    assert spec["run"] == "train" and spec["run_id"] == "3f2a9c"
    assert spec["job_num"] == 1 and spec["replica"] == 0 and spec["submission"] == 2
    assert spec["container"] == "train-1-0" and spec["host"] == "demo-1"
    assert spec["image"] == rankplan.DEFAULT_IMAGE
    assert spec["max_duration"] == 3600 and spec["stop_duration"] == 300
    assert spec["conditional"] == ["infiniband"]
    assert spec["image_cmd_needed"] is False
    assert spec["files"]["hostfile"] == {"text": "10.1.0.2 slots=8\n10.1.0.3 slots=8\n",
                                         "mode": 0o644}
    assert spec["files"]["ssh/dstack_job"] == {"text": KEY["private"], "mode": 0o600}
    assert spec["files"]["ssh/dstack_job.pub"]["text"] == KEY["public"]
    assert spec["files"]["ssh/config"]["text"] == plan_env.ssh_client_config(
        [placed_job(0), placed_job(1)])
    assert spec["files"]["env.sh"]["mode"] == 0o600
    assert spec["files"]["job.sh"]["text"] == wrapper.WRAPPER
    # The state folder is mounted inside the read-only job folder: its mount point must exist.
    assert spec["files"]["state/.mountpoint"] == {"text": "", "mode": 0o644}
    labels = spec["labels"]
    assert labels["gpufleet.job"] == "1" and labels["gpufleet.nodes"] == "2"
    assert labels["gpufleet.job-id"] == spec["job_id"]
    assert labels["gpufleet.instance"] == "demo-1" and labels["gpufleet.fleet"] == "demo"
    assert labels["gpufleet.gpus"] == ",".join("GPU-1-%d" % i for i in range(8))
    assert labels["gpufleet.submitted"] == "2026-08-01T10:00:00Z"
    assert labels["gpufleet.submission"] == "2" and labels["gpufleet.run-id"] == "3f2a9c"
    assert all(isinstance(v, str) for v in labels.values())
    run_spec = json.loads(labels["gpufleet.run-spec"])
    # The label holds the task's GPU requirement as data; render/ makes the table's text of it.
    assert runtable.run_gpu(run_spec.pop("gpu")) == "H100:80GB:8"
    assert run_spec == {
        "nodes": 2, "backend": "ssh", "region": "remote", "price": 0.0,
        "spot": False, "startup_order": "any", "stop_criteria": "all-done",
        "max_duration": 3600, "stop_duration": 300, "retry": None, "schedule": None,
        "hosts": ["demo-0", "demo-1"], "ports": [], "user": None, "type": "task", "ide": None,
    }
    assert "\n" not in labels["gpufleet.run-spec"]
    json.dumps(specs)


def test_single_node_has_no_ssh_files_and_needs_no_key():
    spec = build(task(max_duration="off"), [placed_job(0, ip=None)])[0]
    assert not any(name.startswith("ssh/") for name in spec["files"])
    assert "export GPUFLEET_MULTINODE='0'" in spec["files"]["env.sh"]["text"]
    assert spec["max_duration"] is None
    assert spec["files"]["hostfile"]["text"] == ""


def test_multinode_needs_a_key():
    with pytest.raises(rankplan.PlanError) as info:
        rankplan.build_jobs(task(nodes=2), placement(placed_job(0), placed_job(1)), dict(RUN),
                            environ={})
    assert "ssh_key" in str(info.value)


def test_node_count_must_match_placement():
    with pytest.raises(rankplan.PlanError) as info:
        build(task(nodes=3), [placed_job(0), placed_job(1)])
    assert "nodes" in str(info.value)


def test_files_are_listed_for_the_wrapper(tmp_path):
    config = task(files=["train.py", {"local_path": "/etc/hosts", "path": "/opt/hosts"}])
    spec = build(config, [placed_job(0)], config_dir=str(tmp_path))[0]
    assert spec["files"]["files/0"] == {"local_path": str(tmp_path / "train.py"),
                                        "target": "train.py"}
    assert spec["files"]["files/1"] == {"local_path": "/etc/hosts", "target": "/opt/hosts"}
    assert spec["files"]["files.list"]["text"] == "0 train.py\n1 /opt/hosts\n"


def test_image_defaults():
    assert rankplan.default_image(task()) == "dstackai/base:0.15-base-ubuntu24.04"
    assert rankplan.default_image(task(nvcc=True)) == "dstackai/base:0.15-devel-ubuntu24.04"
    assert rankplan.default_image(task(image="my/img:1")) == "my/img:1"
    assert build(task(), [placed_job(0)], image="local/img")[0]["image"] == "local/img"


def test_image_command_needed():
    config, _warnings = parse_data({"type": "task", "image": "nginx"})
    spec = build(config, [placed_job(0)])[0]
    assert spec["image_cmd_needed"] is True and "command.sh" not in spec["files"]
    spec = build(config, [placed_job(0)], image_cmd=["nginx", "-g", "daemon off;"])[0]
    assert spec["files"]["command.sh"]["text"].splitlines()[-1] == (
        "exec 'nginx' '-g' 'daemon off;'")


def test_run_names():
    rng = random.Random(5)
    for _attempt in range(50):
        name = rankplan.random_run_name(rng)
        assert re.match(r"^[a-z][a-z0-9-]{1,40}$", name)
        assert re.match(r"^[a-z]+-[a-z]+-[1-9][0-9]*$", name)
    assert rankplan.run_name(task(name="my-run")) == "my-run"
    assert re.match(r"^[a-z]+-[a-z]+-\d+$", rankplan.run_name(task(name=None), rng))


def test_not_a_task_is_rejected():
    with pytest.raises(rankplan.PlanError) as info:
        rankplan.build_jobs({"type": "fleet"}, placement(placed_job(0)), dict(RUN))
    assert "type" in str(info.value)


def test_a_python_the_local_image_lacks_is_fetched_into_each_nodes_folder():
    from ansible_collections.gpufleet.cluster.plugins.module_utils.tasks import python_env

    config = task(nodes=2, python="3.12", volumes=[{"instance_path": "/data", "path": "/d"}])
    setup = python_env.choose(config, available=("3.11",))
    specs = build(config, [placed_job(0), placed_job(1)], python_setup=setup)
    for num, spec in enumerate(specs):
        assert spec["mounts"][1:] == [{"kind": "instance", "source": "/var/lib/gpufleet/pythons",
                                       "target": "/opt/gpufleet/pythons", "optional": False}]
        assert spec["mounts"][0]["target"] == "/d"
        script = spec["files"]["command.sh"]["text"]
        assert "uv python install 3.12 2>&1" in script
        assert "could not download it on host demo-%d " % num in script
    local = build(task(), [placed_job(0)],
                  python_setup=python_env.choose(task(), available=("3.11",)))
    assert local[0]["mounts"] == [] and "uv python install" not in local[0]["files"][
        "command.sh"]["text"]
