"""``type: task``: fields, defaults, cross-field rules and interpolation
(docs/reference/dstack-files.md#task-files, docs/reference/dstack-files.md#volume-mounts)."""

from __future__ import annotations

import pytest
from .helpers import assert_rejected, parse, problems, task_with


def test_minimal_task_defaults():
    config = parse("type: task\ncommands: [nvidia-smi]\n")
    assert config["nodes"] == 1
    assert config["groups"] is None
    assert config["image"] is None
    assert config["shell"] == "/bin/bash"
    assert config["startup_order"] == "any"
    assert config["stop_criteria"] == "all-done"
    assert config["retry"] is None
    assert config["spot_policy"] == "on-demand"
    assert config["creation_policy"] == "reuse-or-create"
    assert config["priority"] == 0
    assert config["privileged"] is False
    assert config["single_branch"] is True
    assert config["env"] == {}
    assert config["volumes"] == [] and config["files"] == [] and config["repos"] == []


def test_distributed_task():
    config = parse(
        task_with(
            """\
            name: train-distrib
            nodes: 4
            python: 3.12
            startup_order: workers-first
            stop_criteria: master-done
            env:
              - NCCL_DEBUG=INFO
              - HF_TOKEN
              - EMPTY=
              - WITH_EQUALS=a=b
            resources:
              gpu: H100:8
              shm_size: 24GB
            """
        )
    )
    assert config["nodes"] == 4
    assert config["python"] == "3.12"
    assert config["startup_order"] == "workers-first"
    assert config["stop_criteria"] == "master-done"
    # A bare name takes its value from the submitter's environment later: None for now.
    assert config["env"] == {
        "NCCL_DEBUG": "INFO", "HF_TOKEN": None, "EMPTY": "", "WITH_EQUALS": "a=b",
    }
    assert config["resources"]["shm_size"] == 24


@pytest.mark.parametrize(
    "value,expected",
    [("3.10", "3.10"), ('"3.10"', "3.10"), ("3.9", "3.9"), ("3.12", "3.12"), ("3.14", "3.14")],
)
def test_python_versions(value, expected):
    assert parse(task_with("python: %s\n" % value))["python"] == expected


@pytest.mark.parametrize(
    "block,expected",
    [
        ("", "/bin/bash"),
        ("image: ubuntu\n", "/bin/sh"),
        ("shell: sh\n", "/bin/sh"),
        ("shell: bash\n", "/bin/bash"),
        ("shell: /usr/bin/zsh\n", "/usr/bin/zsh"),
        ("image: ubuntu\nshell: bash\n", "/bin/bash"),
    ],
)
def test_shell_defaults_follow_the_image(block, expected):
    assert parse(task_with(block))["shell"] == expected


def test_image_alone_is_enough():
    config = parse("type: task\nimage: nginx\n")
    assert config["commands"] == [] and config["image"] == "nginx"


def test_docker_forces_privileged():
    config = parse(task_with("docker: true\n"))
    assert config["docker"] is True and config["privileged"] is True


def test_ports_files_repos_volumes():
    config = parse(
        task_with(
            """\
            ports: [8080, "80:8000", "*:9000", {container_port: 7000}]
            files:
              - ../data:/data
              - train.py
              - local_path: C:\\Users\\me\\cfg.yaml
                path: /cfg.yaml
            repos:
              - https://github.com/org/repo.git:/workflow/repo
            volumes:
              - my-vol:/checkpoints
              - /mnt/cache:/root/.cache
              - name: [vol-a, vol-b]
                path: /data/
              - name: data-${{ dstack.node_rank }}
                path: /data2
              - instance_path: /mnt/nfs
                path: /nfs
                optional: true
            """
        )
    )
    assert config["ports"] == [
        {"local_port": 8080, "container_port": 8080},
        {"local_port": 80, "container_port": 8000},
        {"local_port": None, "container_port": 9000},
        {"local_port": None, "container_port": 7000},
    ]
    assert config["files"] == [
        {"local_path": "../data", "path": "/data"},
        {"local_path": "train.py", "path": "train.py"},
        {"local_path": "C:\\Users\\me\\cfg.yaml", "path": "/cfg.yaml"},
    ]
    assert config["repos"][0]["url"] == "https://github.com/org/repo.git"
    assert config["repos"][0]["path"] == "/workflow/repo"
    assert config["volumes"] == [
        {"type": "network", "name": ["my-vol"], "path": "/checkpoints"},
        {"type": "instance", "instance_path": "/mnt/cache", "path": "/root/.cache",
         "optional": False},
        {"type": "network", "name": ["vol-a", "vol-b"], "path": "/data"},
        {"type": "network", "name": ["data-${{ dstack.node_rank }}"], "path": "/data2"},
        {"type": "instance", "instance_path": "/mnt/nfs", "path": "/nfs", "optional": True},
    ]


@pytest.mark.parametrize(
    "value,expected",
    [
        (".", {"local_path": ".", "path": "."}),
        (".:/repo", {"local_path": ".", "path": "/repo"}),
        ("git@github.com:org/repo.git", {"url": "git@github.com:org/repo.git", "path": "."}),
        ("{url: 'https://x/y.git', branch: main, if_exists: skip}",
         {"url": "https://x/y.git", "branch": "main", "if_exists": "skip"}),
    ],
)
def test_repo_forms(value, expected):
    repo = parse(task_with("repos: [%s]\n" % value))["repos"][0]
    for key, item in expected.items():
        assert repo[key] == item


def test_profile_fields():
    config = parse(
        task_with(
            """\
            fleets: [my-fleet, team/shared]
            instances: [my-fleet-0, {hostname: 10.0.0.5}, {fleet: my-fleet, instance: 1}]
            priority: 50
            creation_policy: reuse
            schedule: {cron: "0 8 * * mon-fri"}
            utilization_policy: {min_gpu_utilization: 10, time_window: 30m}
            max_price: 3
            spot_policy: spot
            tags: {project: llm}
            registry_auth: {username: bot, password: "${{ secrets.REGISTRY_TOKEN }}"}
            user: 1000:1000
            working_dir: /workspace
            privileged: true
            """
        )
    )
    assert config["fleets"] == ["my-fleet", "team/shared"]
    assert config["instances"] == [
        {"name": "my-fleet-0"}, {"hostname": "10.0.0.5"}, {"fleet": "my-fleet", "instance": 1},
    ]
    assert config["schedule"] == {"cron": ["0 8 * * mon-fri"]}
    assert config["utilization_policy"] == {"min_gpu_utilization": 10, "time_window": 1800}
    assert config["registry_auth"]["password"] == "${{ secrets.REGISTRY_TOKEN }}"
    assert config["user"] == "1000:1000"


def test_interpolation_is_left_for_the_runner():
    config = parse(
        """\
        type: task
        commands: ['python train.py ${{ run.args }}', 'echo $${{ x.y }}']
        env:
          HF_TOKEN: ${{ secrets.HF_TOKEN }}
          REGISTRY_USER: bot
        registry_auth:
          username: ${{ env.REGISTRY_USER }}
          password: ${{ secrets.PASS }}
        """
    )
    assert config["commands"] == ["python train.py ${{ run.args }}", "echo $${{ x.y }}"]
    assert config["env"]["HF_TOKEN"] == "${{ secrets.HF_TOKEN }}"
    assert config["registry_auth"]["username"] == "${{ env.REGISTRY_USER }}"


def test_node_groups():
    config = parse(
        """\
        type: task
        image: vllm/vllm-openai
        groups:
          - name: prefill
            nodes: 2
            resources: {gpu: H100:8}
            commands: ["serve --role prefill --peer ${{ groups[1].nodes[0].IP_ADDRESS }}"]
          - nodes: 1
        """
    )
    assert config["nodes"] == 3
    assert [g["name"] for g in config["groups"]] == ["prefill", "1"]
    assert config["groups"][0]["resources"]["gpu"]["count"] == {"min": 8, "max": 8}
    # Groups do not inherit top-level resources: an omitted block is the run default.
    assert config["groups"][1]["resources"]["memory"] == {"min": 8, "max": None}


TASK_INVALID = [
    ("nodes: 0\n", "nodes", "at least 1"),
    ("nodes: two\n", "nodes", "number of nodes"),
    ("nodes: 1..2\n", "nodes", "number of nodes"),
    ("python: '2.7'\n", "python", "must be one of"),
    ("python: 3\n", "python", "Python version"),
    ("image: ubuntu\npython: 3.11\n", "python", "mutually exclusive"),
    ("image: ubuntu\ndocker: true\n", "docker", "image and docker"),
    ("python: 3.11\ndocker: true\n", "docker", "python and docker"),
    ("nvcc: true\ndocker: true\n", "docker", "nvcc and docker"),
    ("shell: zsh\n", "shell", "absolute path"),
    ("user: 'a:b:c'\n", "user", "too many parts"),
    ("user: ':grp'\n", "user", "empty user"),
    ("user: '-5'\n", "user", "negative"),
    ("privileged: maybe\n", "privileged", "true or false"),
    ("priority: 101\n", "priority", "at most 100"),
    ("priority: -1\n", "priority", "at least 0"),
    ("startup_order: master_first\n", "startup_order", "must be one of"),
    ("stop_criteria: any\n", "stop_criteria", "must be one of"),
    ("creation_policy: create\n", "creation_policy", "must be one of"),
    ("commands: echo hi\n", "commands", "write it as a list"),
    ("commands: [1]\n", "commands[0]", "command string"),
    ("ports: [0]\n", "ports[0]", "at least 1"),
    ("ports: ['80:http']\n", "ports[0]", "invalid port mapping"),
    ("ports: [{local_port: 80}]\n", "ports[0]", "container_port"),
    ("env: [1BAD=x]\n", "env[0]", "invalid entry"),
    ("env: {A: [1]}\n", "env.A", "text or a number"),
    ("env: {A: null}\n", "env.A", "text or a number"),
    ("env: {A: '${{ env.B }}'}\n", "env.A", "secrets"),
    ("env: {A: '${{ secrets.B '}\n", "env.A", "no closing"),
    ("env: {A: '${{ secrets..B }}'}\n", "env.A", "illegal reference"),
    ("registry_auth: {username: u}\n", "registry_auth", "password"),
    ("registry_auth: {username: u, password: p, token: t}\n", "registry_auth.token", "unknown field"),
    ("registry_auth: {username: '${{ env.NOPE }}', password: p}\n",
     "registry_auth.username", "not in this task's env"),
    ("registry_auth: {username: '${{ run.args }}', password: p}\n",
     "registry_auth.username", "unknown reference"),
    ("repos: [a, b]\n", "repos", "maximum of one repo"),
    ("repos: [{branch: main}]\n", "repos[0]", "local_path or url"),
    ("repos: [{local_path: ., url: 'https://x'}]\n", "repos[0]", "mutually exclusive"),
    ("repos: [{local_path: ., path: '~bob/x'}]\n", "repos[0]", "~username"),
    ("files: ['a:b:c']\n", "files[0]", "invalid file path mapping"),
    ("files: [{local_path: a, path: 'C:/x'}]\n", "files[0].path", "Unix file path"),
    ("files: [{local_path: a}]\n", "files[0]", "path"),
    ("volumes: ['vol']\n", "volumes[0]", "invalid mount point format"),
    ("volumes: ['vol:data']\n", "volumes[0]", "must be absolute"),
    ("volumes: ['vol:/a/../b']\n", "volumes[0]", ".. are not allowed"),
    ("volumes: ['/host:']\n", "volumes[0]", "empty path"),
    ("volumes: [{name: v}]\n", "volumes[0]", "needs path"),
    ("volumes: [{path: /x}]\n", "volumes[0]", "name"),
    ("volumes: [{instance_path: rel, path: /x}]\n", "volumes[0].instance_path", "absolute"),
    ("volumes: [{name: v, path: /x, instance: true}]\n", "volumes[0].instance", "unknown field"),
    ("volumes: [{name: 'v-${{ dstack.rank }}', path: /x}]\n", "volumes[0].name", "unknown reference"),
    ("volumes: [{name: [], path: /x}]\n", "volumes[0].name", "must not be empty"),
    ("fleets: ['a/b/c']\n", "fleets[0]", "invalid fleet reference"),
    ("fleets: my-fleet\n", "fleets", "list"),
    ("instances: []\n", "instances", "at least 1"),
    ("instances: [{name: a, hostname: b}]\n", "instances[0]", "exactly name"),
    ("schedule: {cron: '0 8 * *'}\n", "schedule.cron", "5 fields"),
    ("schedule: {cron: '61 * * * *'}\n", "schedule.cron", "out of range"),
    ("schedule: {cron: '*/0 * * * *'}\n", "schedule.cron", "a step of 0"),
    ("schedule: {cron: '0 8 * * fri-mon'}\n", "schedule.cron", "goes backwards"),
    ("schedule: {cron: []}\n", "schedule.cron", "at least one"),
    ("utilization_policy: {min_gpu_utilization: 10, time_window: 1m}\n",
     "utilization_policy.time_window", "minimum time_window"),
    ("utilization_policy: {min_gpu_utilization: 150, time_window: 1h}\n",
     "utilization_policy.min_gpu_utilization", "at most 100"),
    ("utilization_policy: {time_window: 1h}\n", "utilization_policy", "min_gpu_utilization"),
    ("spot_policy: sometimes\n", "spot_policy", "must be one of"),
    ("pool_name: old\n", "pool_name", "fleets"),
    ("memory: 8GB\n", "memory", "under resources"),
    ("comands: [x]\n", "comands", "did you mean 'commands'"),
    ("name: Train\n", "name", "invalid name"),
    ("dstack: 2\n", "dstack", "true or false"),
]


@pytest.mark.parametrize("block,path,fragment", TASK_INVALID, ids=[c[0].strip() for c in TASK_INVALID])
def test_task_invalid(block, path, fragment):
    assert_rejected(task_with(block), path, fragment)


def test_commands_reference_rules():
    assert_rejected(
        "type: task\ncommands: ['echo ${{ secrets.X }} ${{ env.Y }}']\n",
        "commands[0]", "unknown reference ${{ env.Y }}",
    )
    assert_rejected(
        "type: task\ncommands: ['echo ${{ run.argv }}']\n", "commands[0]", "run.args",
    )


def test_either_commands_or_image():
    assert_rejected("type: task\nname: nothing\n", "", "either commands or image")
    assert_rejected("type: task\ncommands: []\n", "", "either commands or image")


GROUP_INVALID = [
    ("nodes: 2\ngroups: [{nodes: 1, commands: [x]}]\n", "groups", "mutually exclusive"),
    ("groups: []\n", "groups", "empty list"),
    ("groups: [{name: a, commands: [x]}, {name: a, commands: [y]}]\n", "groups", "duplicate"),
    ("groups: [{name: Bad_Name, commands: [x]}]\n", "groups[0].name", "regex"),
    ("groups: [{nodes: 0, commands: [x]}]\n", "groups[0].nodes", "at least 1"),
    ("groups: [{nodes: 1}]\n", "groups[0]", "set commands in the group"),
    ("groups: [{commands: ['x ${{ groups[0].nodes[a].IP_ADDRESS }}']}]\n",
     "groups[0].commands[0]", "illegal reference"),
    ("commands: [x]\ngroups: [{commands: [y]}]\n", "commands", "not allowed when groups"),
    ("entrypoint: sh\ngroups: [{commands: [y]}]\n", "entrypoint", "not allowed when groups"),
    ("groups: [{commands: [y], image: z}]\n", "groups[0].image", "unknown field"),
]


@pytest.mark.parametrize("block,path,fragment", GROUP_INVALID, ids=[c[0].strip() for c in GROUP_INVALID])
def test_groups_invalid(block, path, fragment):
    assert_rejected("type: task\n" + block, path, fragment)


def test_deprecated_fields_warn_but_pass():
    from ansible_collections.gpufleet.cluster.plugins.module_utils import spec

    _config, warnings = spec.parse_text(task_with("home_dir: /root\nsetup: [pip install x]\n"))
    messages = " ".join(w.message for w in warnings)
    assert "home_dir" in messages and "setup" in messages


def test_error_paths_point_inside_lists():
    found = problems(task_with("volumes: ['ok:/a', 'bad', {name: v, path: rel}]\n"))
    assert ("volumes[1]", found[0][1]) in found
    assert any(path == "volumes[2].path" for path, _message in found)


def test_an_env_value_with_a_newline_is_blamed_on_the_value_not_the_name():
    """dstack's NAME=value entries hold one line: the message names the field, says the value
    has a newline and what to write instead; the name is not called bad."""
    found = problems(task_with('env:\n  - "GOOD_NAME=first\\nsecond"\n'))
    assert found == [("env[0]", "the value of GOOD_NAME contains a newline, which a NAME=value "
                      "entry cannot hold: write env as a mapping (GOOD_NAME: value) to give a "
                      "value of several lines, or remove the newline")]
    # the mapping form holds such a value
    config = parse(task_with('env:\n  GOOD_NAME: "first\\nsecond"\n'))
    assert config["env"] == {"GOOD_NAME": "first\nsecond"}
    # a name that is itself bad is still called bad
    assert_rejected(task_with('env:\n  - "BAD\\nNAME=x"\n'), "env[0]", "invalid entry")


def test_an_env_value_with_a_newline_given_with_env_on_the_command_line():
    from ansible_collections.gpufleet.cluster.plugins.module_utils.spec import SpecError
    from ansible_collections.gpufleet.cluster.plugins.module_utils.spec.overrides import (
        apply_overrides,
    )

    with pytest.raises(SpecError) as info:
        apply_overrides(parse(task_with("")), env=["A=1\n2"], source="t.dstack.yml")
    assert str(info.value).startswith("t.dstack.yml: --env[0]: the value of A contains a "
                                      "newline")
