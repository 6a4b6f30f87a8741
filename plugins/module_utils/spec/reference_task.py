# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""What the fields of `type: task` and `type: dev-environment` files mean: their sections of the
configuration reference.

Data only, a part of spec.reference.SECTIONS (see spec/reference.py for what an entry holds).

PRIVATE to gpufleet.cluster.
"""

from __future__ import annotations

from .reference_words import _BOOL, _DURATION, _ENV, _NAME, _PORT, _STRINGS, _TAGS

TASK_SECTIONS = {
    # -----------------------------------------------------------------------------------------
    # type: task
    "task": {
        "title": "`type: task`",
        "intro": (
            "A task runs `commands` in one container on each of `nodes` hosts, with dstack's `DSTACK_*` "
            "environment, an MPI hostfile and, for two nodes or more, SSH between the containers. gpufleet runs "
            "tasks on fleets that already exist; see [tasks.md](../tasks.md). The defaults below are those of a "
            "task with `commands`; where a task with `image` or `docker: true` gets another, both are shown."
        ),
        "fields": {
            "type": {"values": "`task`", "text": "Makes the file a task configuration.", "required": ""},
            "name": {
                "values": _NAME,
                "text": (
                    "The run's name, used by `gpufleet ps`, `logs` and `stop` and in the container names. Unset, each "
                    "run gets a random name. A run whose name is still running is refused."
                ),
            },
            "image": {
                "values": "a Docker image reference",
                "text": (
                    "The image the containers run. Unset: dstack's base image (its `devel` variant with `nvcc`, "
                    "dstack's Docker-in-Docker image with `docker: true`); on the `local` backend, gpufleet's own "
                    "`gpufleet/task-base`. Cannot be combined with `python`."
                ),
            },
            "python": {
                "values": "{choices:task.PYTHON_VERSIONS} (a YAML number `3.10` is read as `3.10`, not `3.1`)",
                "text": (
                    "The Python of the job's venv (`/dstack/venv`, made with `uv` in the default image). "
                    "Cannot be combined with `image`. On the `local` backend the task image has 3.11; another "
                    "version is downloaded by the job with `uv python install` and kept on the node."
                ),
            },
            "nvcc": {"values": _BOOL, "text": "Use the base image's `devel` variant, which has the CUDA compiler."},
            "docker": {
                "values": _BOOL,
                "text": (
                    "Docker in Docker: run dstack's DinD image, privileged. Cannot be combined with `image`, `python` "
                    "or `nvcc`."
                ),
            },
            "entrypoint": {
                "values": "a string",
                "text": "Replaces the image's ENTRYPOINT; `commands` become its arguments. Not allowed with `groups`.",
            },
            "commands": {
                "values": "a list of strings",
                "text": (
                    "Shell commands, run one after the other by `shell` until one fails. `${{ run.args }}` stands "
                    "for the run's arguments. Without commands the image's own ENTRYPOINT and CMD run. Not allowed "
                    "with `groups`."
                ),
                "required": "unless `image` is set",
            },
            "shell": {
                "values": "`sh`, `bash`, or an absolute path",
                "text": "The shell that runs `commands`; `sh` and `bash` stand for `/bin/sh` and `/bin/bash`.",
            },
            "working_dir": {"values": "a path", "text": "The directory the commands start in; unset, the image's WORKDIR."},
            "user": {
                "values": "`name_or_uid[:group_or_gid]`",
                "text": "The user (and group) the commands run as; unset, the image's USER. The setup before them runs as root.",
            },
            "privileged": {"values": _BOOL, "text": "Run the containers privileged; `docker: true` forces it."},
            "env": {
                "values": _ENV,
                "text": (
                    "Environment of the commands, set after dstack's `DSTACK_*` variables (so it wins). A bare `NAME` "
                    "takes its value from the environment of whoever submits the run. Values may use "
                    "`${{ secrets.NAME }}`, filled from `gpufleet secret set` (or the Ansible variable `gpufleet_secrets`)."
                ),
            },
            "registry_auth": {
                "values": "a mapping: {see:task.registry_auth}",
                "text": "Credentials to pull `image` from a private registry.",
            },
            "resources": {
                "values": "a mapping: {see:resources}",
                "text": "What each node needs; keys left out take dstack's run defaults.",
                "see": "resources",
            },
            "groups": {
                "values": "a non-empty list of mappings: {see:task.groups}",
                "text": (
                    "Node groups: nodes with their own count, resources, commands and ports, ranked in the order of "
                    "the groups. Not allowed with `nodes`, nor with top-level `commands`, `ports` or `entrypoint`."
                ),
            },
            "nodes": {
                "values": "a whole number of at least 1",
                "text": (
                    "How many nodes run the task, one container per host; two or more need a `placement: cluster` "
                    "fleet and take whole hosts. With `groups`, the normalized value is their sum."
                ),
            },
            "ports": {
                "values": "a list of `8080`, `\"80:8080\"`, `\"*:8080\"` or mappings: {see:task.ports}",
                "text": "Container ports dstack forwards to the machine of whoever attaches to the run.",
                "status": "runner-warns",
            },
            "volumes": {
                "values": "a list of `name:/path`, `/host/dir:/path`, or mappings: {see:task.volumes.network} and {see:task.volumes.instance}",
                "text": (
                    "Network volumes (a string whose source has no `/`) and host directories (one whose source has "
                    "a `/`) mounted into the containers."
                ),
            },
            "files": {
                "values": "a list of `local[:container]` strings or mappings: {see:task.files}",
                "text": "Files and directories copied from the controller into every container.",
            },
            "repos": {
                "values": "a list of at most one path, URL (optionally followed by `:/dir`), or mapping: {see:task.repos}",
                "text": (
                    "Your code in every container: a local folder (tracked, changed and untracked files Git "
                    "does not ignore, shipped from the controller) or a Git URL (cloned in each container; "
                    "a private one with the secret `GIT_TOKEN` or `GIT_SSH_KEY`)."
                ),
            },
            "single_branch": {"values": _BOOL, "text": "With a repo `url`: clone only its branch, not every remote branch (default: yes)."},
            "dstack": {
                "values": _BOOL,
                "text": "Give the job access to the dstack server's API from inside its container.",
                "status": "runner-warns",
            },
            "priority": {
                "values": "a whole number from 0 to 100",
                "text": (
                    "The order in which runs waiting for capacity start: higher first, then the first submitted. A "
                    "waiting run that does not fit does not hold back lower ones. Only runs that wait (`retry` on "
                    "`no-capacity`) have an order to keep."
                ),
            },
            "startup_order": {
                "values": "{choices:task.STARTUP_ORDERS}",
                "text": (
                    "`any` starts every node at once; `master-first` starts the other nodes once rank 0 runs; "
                    "`workers-first` starts rank 0 once every other node runs."
                ),
            },
            "stop_criteria": {
                "values": "{choices:task.STOP_CRITERIA}",
                "text": (
                    "`all-done` ends the run `done` when every node is done; `master-done` ends it `done` as soon as "
                    "rank 0 is, stopping the other nodes."
                ),
            },
            "retry": {
                "values": "`true`, `false`, or a mapping: {see:retry}",
                "text": (
                    "Resubmit every node of the run after a failure that matches `on_events`, within `duration`. "
                    "`true` is the mapping with every default; `false` or unset never retries. With `no-capacity`, a "
                    "run that does not fit now waits in the queue, kept on a host of its fleet, until it fits; a "
                    "detached run is resubmitted after `error` or `interruption` by the next pass over the queue "
                    "(made by `gpufleet apply` of a task, `ps`, `stop`, or `reconcile.yml` on a schedule)."
                ),
            },
            "max_duration": {
                "values": _DURATION + ", `off`, or `true`/`false`",
                "text": (
                    "The longest a node's command may run, counted from its start (not from provisioning or "
                    "pulling); then the run ends `terminated` (`max_duration_exceeded`) and is not retried. "
                    "`off` or `false`: no limit; `true`: the default."
                ),
                "kind": "duration",
            },
            "stop_duration": {
                "values": _DURATION + ", `off`, or `true`/`false`",
                "text": (
                    "How long a stop waits after TERM before it kills the commands (and force-detaches volumes). "
                    "In dstack `off` or `false` waits without a limit; `true` is the default."
                ),
                "kind": "duration",
            },
            "idle_duration": {
                "values": _DURATION + ", or `off`",
                "text": (
                    "How long an instance this run provisioned may stay idle once the run is over: the shorter of this "
                    "and the fleet's, 5m when neither is set. `off`, `false` or a negative number: keep it (the "
                    "fleet's then applies). An instance the run only reuses keeps the fleet's."
                ),
                "kind": "duration",
            },
            "spot_policy": {
                "values": "{choices:common.SPOT_POLICIES}",
                "text": "`on-demand`: on-demand hosts only; `spot`: spot hosts only; `auto`: either.",
            },
            "max_price": {"values": "a number greater than 0", "text": "Hosts that cost more, in dollars per hour, are not used."},
            "creation_policy": {
                "values": "{choices:task.CREATION_POLICIES}",
                "text": (
                    "`reuse` runs on the instances fleets have; `reuse-or-create` also lets the run make a backend "
                    "fleet grow, up to its `nodes.max`, when it fits none of them."
                ),
            },
            "reservation": {
                "values": "a string",
                "text": (
                    "Reserved capacity (as a fleet's `reservation`) new instances come from. Instances a run makes a "
                    "fleet grow by come from the fleet's own `reservation`."
                ),
                "status": "kept",
            },
            "backends": {
                "values": "a list of {choices:common.BACKENDS}",
                "text": (
                    "Only hosts of these backends are used (`remote`: SSH fleets' hosts). A list with none of "
                    "`local`, `aws`, `gcp` and `remote` matches no host gpufleet has: validate and apply refuse it."
                ),
            },
            "regions": {"values": _STRINGS, "text": "Only hosts in these regions are used."},
            "availability_zones": {"values": _STRINGS, "text": "Only hosts in these availability zones are used."},
            "instance_types": {"values": _STRINGS, "text": "Only hosts of these instance types are used."},
            "fleets": {
                "values": "a list of fleet names, `project/name` strings, or mappings: {see:task.fleets}",
                "text": (
                    "The only fleets the run may go to; unset, every fleet. gpufleet tries them in this order, and the "
                    "first that can hold every node takes the run; when none can, the first backend fleet that can "
                    "grow enough for it grows."
                ),
            },
            "instances": {
                "values": (
                    "a non-empty list of instance names (`my-fleet-0`) or mappings `{name}`, `{hostname}` or "
                    "`{fleet, instance}` (the instance number)"
                ),
                "text": "Only these hosts are used.",
            },
            "tags": {
                "values": _TAGS,
                "text": (
                    "Tags on the cloud resources dstack provisions for the run. Instances a run makes a fleet grow by "
                    "get the fleet's `tags`."
                ),
                "status": "kept",
            },
            "schedule": {
                "values": "a mapping: {see:task.schedule}",
                "text": (
                    "Start the run at cron times (UTC), with no controller on: `apply` places it and its hosts keep "
                    "it ready, then start it at each time (see [tasks.md](../tasks.md#starting-at-set-times-schedule)). Tasks "
                    "only, and not with `retry` or a `startup_order`; services and dev environments refuse it."
                ),
            },
            "utilization_policy": {
                "values": "a mapping: {see:task.utilization_policy}",
                "text": (
                    "Terminate the run when one of its GPUs stays under-used (docs/tasks.md#idle-gpus)."
                ),
            },
            "backend_options": {
                "values": "a list of mappings: {see:backend_options}",
                "text": "Backend-specific offer settings; only Vast.ai has any.",
                "status": "kept",
            },
            "home_dir": {"values": "anything", "text": "Formerly the home directory in the container.", "status": "deprecated"},
            "setup": {
                "values": "anything",
                "text": "Formerly commands run before `commands`; for tasks, put them in `commands`.",
                "status": "deprecated",
            },
        },
    },
    "task.groups": {
        "title": "`groups[]`",
        "intro": (
            "One node group of a task. Ranks follow the groups in order: the first node of the first group is "
            "rank 0, the master."
        ),
        "fields": {
            "name": {
                "values": "1 to 40 characters: a lower-case letter or digit, then lower-case letters, digits or `-`",
                "text": "The group's name, unique in the task; unset, the group's index in the list (`\"0\"` for the first).",
            },
            "nodes": {"values": "a whole number of at least 1", "text": "How many nodes the group has."},
            "resources": {
                "values": "a mapping: {see:resources}",
                "text": "What each node of the group needs. Not inherited from the task's `resources`: keys left out take the run defaults.",
                "see": "resources",
            },
            "commands": {
                "values": "a list of strings",
                "text": (
                    "The group's commands. Besides `${{ run.args }}` they may use `${{ groups[i].nodes[j].IP_ADDRESS }}` "
                    "for the address of another node."
                ),
                "required": "unless the task sets `image`",
            },
            "ports": {"values": "as the task's `ports`: {see:task.ports}", "text": "Ports of the group's nodes."},
        },
    },
    "task.registry_auth": {
        "title": "`registry_auth`",
        "intro": "Credentials for the registry of `image`. The password reaches `docker login` on standard input only.",
        "fields": {
            "username": {
                "values": "a string; may use `${{ secrets.NAME }}` and `${{ env.NAME }}` (a variable of the task's `env`)",
                "text": "The registry user.",
                "required": "",
            },
            "password": {
                "values": "a string; may use `${{ secrets.NAME }}` and `${{ env.NAME }}`",
                "text": "The registry password or token.",
                "required": "",
            },
        },
    },
    "task.ports": {
        "title": "`ports[]`",
        "intro": (
            "The mapping form of a port. As strings, `8080` forwards 8080 to 8080, `\"80:8080\"` local port 80 to "
            "container port 8080, and `\"*:8080\"` any free local port to 8080."
        ),
        "fields": {
            "local_port": {"values": _PORT, "text": "The port on the machine that attaches; unset, any free port."},
            "container_port": {"values": _PORT, "text": "The port in the container.", "required": ""},
        },
    },
    "task.volumes.network": {
        "title": "`volumes[]`: network volumes",
        "intro": "A network volume (a `type: volume` file) mounted into the containers, as a mapping; `name:/path` is the same.",
        "fields": {
            "name": {
                "values": "a volume name, or a non-empty list of them",
                "text": (
                    "The volume's `name`. With a list, one of them is mounted: the one in the run's backend and "
                    "region. `${{ dstack.node_rank }}` (or `${{ dstack.job_num }}`) in a name gives each node its "
                    "own volume."
                ),
                "required": "",
            },
            "path": {"values": "an absolute path without `..`", "text": "Where the volume appears in the container.", "required": ""},
        },
    },
    "task.volumes.instance": {
        "title": "`volumes[]`: instance volumes",
        "intro": "A directory of the host mounted into the container, as a mapping; `/host/dir:/path` is the same.",
        "fields": {
            "instance_path": {
                "values": "an absolute path without `..`",
                "text": "The directory on the host; created (mode 0755, the last part 0777) when it is missing.",
                "required": "",
            },
            "path": {"values": "an absolute path without `..`", "text": "Where it appears in the container.", "required": ""},
            "optional": {
                "values": _BOOL,
                "text": "Leave the mount out, instead of failing, on backends without instance volumes (runpod, vastai).",
            },
        },
    },
    "task.files": {
        "title": "`files[]`",
        "intro": "The mapping form of a file to copy; `local[:container]` is the same (one path alone is used for both).",
        "fields": {
            "local_path": {
                "values": "a file or directory on the controller",
                "text": (
                    "What to copy; a relative path starts from the task file's folder. A directory is copied "
                    "with its files, less what `.gitignore` and `.dstackignore` exclude; modes are kept. It must "
                    "exist and be readable, and come to at most `DSTACK_SERVER_CODE_UPLOAD_LIMIT` bytes (2 MiB by "
                    "default): `gpufleet validate` checks, and `apply` refuses before any host is touched."
                ),
                "required": "",
            },
            "path": {
                "values": "a Unix path",
                "text": "Where it goes in the container; a relative path starts from the working directory.",
                "required": "",
            },
        },
    },
    "task.repos": {
        "title": "`repos[]`",
        "intro": "The mapping form of a repo: a local folder to ship, or a remote repository to clone.",
        "fields": {
            "local_path": {
                "values": "a directory (relative: from the task file's folder)",
                "text": "A local folder, a Git work tree or not; `gpufleet validate` checks that it is one.",
                "required": "unless `url` is set",
            },
            "url": {"values": "a Git URL", "text": "A remote repository."},
            "branch": {"values": "a string", "text": "With `url`: the branch to clone (default: the remote's default branch)."},
            "hash": {"values": "a string", "text": "With `url`: the commit to check out."},
            "path": {
                "values": "a path (`~` and `~/...` allowed, `~user` not)",
                "text": "Where the repository goes in the container, relative to the working directory.",
            },
            "if_exists": {
                "values": "`error` or `skip`",
                "text": "When `path` already exists in the container: fail (`error`) or leave it as it is (`skip`).",
            },
        },
    },
    "task.fleets": {
        "title": "`fleets[]`",
        "intro": "The mapping form of a fleet reference; the normalized configuration holds `name` or `project/name`.",
        "fields": {
            "name": {"values": "a string", "text": "The fleet's name.", "required": ""},
            "project": {"values": "a string", "text": "The dstack project the fleet belongs to; unset, the run's own."},
        },
    },
    "task.schedule": {
        "title": "`schedule`",
        "intro": (
            "When the run starts by itself. Between its times the run is `pending`; a time that comes while the "
            "previous start still runs is skipped; `gpufleet stop` ends the schedule."
        ),
        "fields": {
            "cron": {
                "values": "a cron expression of 5 fields (minute hour day month weekday), or a list of them",
                "text": "The times to start the run (UTC).",
                "required": "",
            },
        },
    },
    "task.utilization_policy": {
        "title": "`utilization_policy`",
        "intro": (
            "Each job's own metrics sampler (every 10 s) stops its command once one of its GPUs has stayed below "
            "`min_gpu_utilization` for `time_window`: the job and the run end `terminated` with the reason "
            "`terminated_due_to_utilization_policy`, never retried, as dstack ends them."
        ),
        "fields": {
            "min_gpu_utilization": {"values": "a whole number from 0 to 100", "text": "The lowest acceptable GPU utilization, in percent.", "required": ""},
            "time_window": {
                "values": "a duration of at least 5m",
                "text": "How long utilization must stay below the minimum before the run is terminated.",
                "required": "",
                "kind": "duration",
            },
        },
    },
    # -----------------------------------------------------------------------------------------
    # type: dev-environment
    "dev-environment": {
        "title": "`type: dev-environment`",
        "intro": (
            "One container on one host that stays up until it is stopped, reached with `ssh NAME` and an IDE "
            "link (see [dev-environments.md](../dev-environments.md)). It takes every field of a task above "
            "except `commands`, `nodes`, `groups` and `entrypoint`, with the same defaults but "
            "`single_branch` (`false`), and these:"
        ),
        "fields": {
            "type": {"values": "`dev-environment`", "text": "Makes the file a dev environment.",
                     "required": ""},
            "ide": {
                "values": "{choices:dev_environment.IDES}",
                "text": "The desktop IDE whose link is printed. Unset: SSH only.",
            },
            "version": {
                "values": "a string: the IDE server's commit (windsurf: `version@commit`)",
                "text": (
                    "The IDE server to install in the container (it is downloaded; a host that cannot "
                    "download it goes on without). Unset: the IDE installs its server on first connect."
                ),
            },
            "init": {"values": _STRINGS, "text": "Commands run once, after `setup`; a failure ends the run."},
            "setup": {
                "values": _STRINGS,
                "text": "Commands run before `init` (deprecated in dstack, still run for dev environments).",
            },
            "inactivity_duration": {
                "values": _DURATION + ", `off`, or `true`/`false`",
                "text": (
                    "Stop the dev environment after this long with no SSH connection (one lasting more than 10 "
                    "seconds counts). `off`, `true`, `false` or unset: never."
                ),
                "kind": "duration",
            },
        },
    },
}
