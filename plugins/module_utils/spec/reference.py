# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""What every configuration field means: the words of docs/reference/configuration.md.

Data only. scripts/gendocs.py walks the parser's own field tables (fleet.FIELDS, task.FIELDS,
grammar.RESOURCE_FIELDS, ...) and takes each field's description from here; the default shown
for a field is what the parser gives when the field is left out, never a value written here.
tests/unit/repo/test_reference_docs.py fails when a field of the model has no entry here, when an
entry names a field the model does not have, and when the checked-in page is stale.

SECTIONS maps a section (a configuration type or an object nested in one) to:

* ``title`` and ``intro``: the section's heading (Markdown) and the prose under it;
* ``fields``: per field, ``values`` (the accepted forms), ``text`` (what it means), and
  optionally ``required`` (the field is needed; the string says when, "" for always),
  ``status`` (a key of NOTES), ``kind`` ("duration": defaults are also shown as 5m, 3d...)
  and ``see`` (a section whose table shows the default, for fields holding a whole object).

A section with a ``base`` (``volume.kubernetes``) takes the fields of that section and replaces
those it lists. In the strings, ``{choices:module.NAME}`` stands for the values of
that constant of the model and ``{see:section}`` for a link to that section.

PRIVATE to gpufleet.cluster.
"""

from __future__ import annotations

INTRO = (
    "Every field gpufleet accepts in dstack's `type: fleet`, `type: task` and `type: volume` files: what it "
    "takes, what it means, and the default, which is the value the parser "
    "(`plugins/module_utils/spec`) fills in when the field is left out, as it appears in the normalized "
    "configuration ([config-json.md](../config-json.md)). The meanings are dstack's, at the commit named in "
    "[dstack-compatibility.md](../dstack-compatibility.md); where gpufleet does something else with a field "
    "(refuses it, warns, or has nothing to act on), the row says so.\n\n"
    "Conventions: a range is written `a..b`, `a..` (at least) or `..b` (at most), or as `{min, max}`; a single "
    "value is exact, not a minimum. Sizes are GB: `512MB`, `16GB`, `1TB` or a number of GB (`GiB`, `G` and "
    "`KB` are not accepted). Durations are whole numbers with one unit (`30s`, `15m`, `2h`, `1d`, `1w`) or "
    "a number of seconds; `1h30m` and `1.5h` are not accepted. Defaults are shown as JSON, durations in "
    "seconds."
)

# Notes a field's ``status`` adds in front of its meaning.
NOTES = {
    "ssh-only": "*SSH fleets only.*",
    "backend-only": "*Backend fleets only.*",
    "refused": "**Refused by gpufleet**, although dstack accepts it.",
    "deprecated": "**Deprecated:** accepted with a warning; it has no effect.",
    "runner-refuses": "**The task runner refuses it** (the file still validates).",
    "runner-warns": "**The task runner accepts it with a warning** and does not act on it.",
    "kept": "**Validated and kept** in the normalized configuration; gpufleet does not act on it.",
    "extension": "**gpufleet extension**, not in dstack.",
}

_NAME = "2 to 41 characters: a lower-case letter, then lower-case letters, digits or `-` (`^[a-z][a-z0-9-]{1,40}$`)"
_DURATION = "a duration (`90s`, `15m`, `2h`, `3d`, `1w`, or seconds)"
_TAGS = (
    "a mapping: keys of 1 to 60 letters, digits, `_` or `-`; string values of up to 256 letters, digits, "
    "spaces and `. : / = _ - + @`"
)
_ENV = "a list of `NAME=value` and `NAME` strings, or a mapping of names to strings or numbers"
_PORT = "a port number, 1 to 65535"
_BOOL = "`true` or `false`"
_STRINGS = "a list of strings"

SECTIONS = {
    # -----------------------------------------------------------------------------------------
    # type: fleet
    "fleet": {
        "title": "`type: fleet`",
        "intro": (
            "A fleet is the set of hosts tasks run on. It sets either `nodes`, which makes it a *backend fleet* "
            "whose hosts are provisioned from `backends`, or `ssh_config`, which makes it an *SSH fleet* of "
            "existing servers reached over SSH; never both. Fields marked *backend fleets only* are refused in "
            "an SSH fleet, as dstack refuses them."
        ),
        "fields": {
            "type": {"values": "`fleet`", "text": "Makes the file a fleet configuration.", "required": ""},
            "name": {
                "values": _NAME,
                "text": (
                    "The fleet's name, which tasks use in `fleets`. dstack gives an unnamed fleet a new random name "
                    "on every apply; gpufleet, which has no server to remember it, takes the name from the file "
                    "name instead (`gpu-cluster.dstack.yml` is `gpu-cluster`), so that applying the file again "
                    "finds the same fleet."
                ),
            },
            "placement": {
                "values": "{choices:fleet.PLACEMENTS}",
                "text": (
                    "`cluster` says the hosts are interconnected and can run multi-node jobs: cloud hosts are placed "
                    "close together (a cluster placement group on AWS, a compact placement policy on GCP), and only "
                    "`cluster` fleets take runs of two nodes or more. `any` makes no such promise."
                ),
            },
            "blocks": {
                "values": "a whole number of at least 1, or `auto`",
                "text": (
                    "Splits each host into this many equal shares of its CPUs, memory and GPUs (the disk is shared), "
                    "so that several single-node runs can use one host; a run takes the fewest blocks that hold it, "
                    "and a multi-node run needs whole hosts. A host's CPU and GPU counts must divide by it. `auto` "
                    "is one block per GPU (at most one per CPU), or one per CPU on a host without GPUs. A host in "
                    "`ssh_config.hosts` may set its own."
                ),
            },
            "nodes": {
                "values": "a number (`2`), a range (`1..4`, `..2`, `1..`), or a mapping: {see:fleet.nodes}",
                "text": (
                    "How many hosts to provision from the backends; this makes the fleet a backend fleet. A number "
                    "sets `min`, `target` and `max` to it; a range sets `min` and `max`, and `target` to `min`. A "
                    "run that does not fit the hosts the fleet has makes it grow up to `max`, so `0..4` is a "
                    "template with no hosts until a run needs them."
                ),
                "required": "in a backend fleet; an SSH fleet sets `ssh_config` instead",
            },
            "reservation": {
                "values": "a string",
                "text": (
                    "Reserved capacity to provision from: an AWS Capacity Reservation or Capacity Block id, or a "
                    "GCP reservation name."
                ),
            },
            "resources": {
                "values": "a mapping: {see:resources}",
                "text": (
                    "What every host must have. Without it a backend fleet takes any offer (no requirement at all, "
                    "since dstack PR #3776); keys left out of a `resources` mapping take dstack's run defaults."
                ),
                "see": "resources",
            },
            "backends": {
                "values": "a list of {choices:common.BACKENDS}",
                "text": (
                    "The backends hosts may come from; in dstack, unset means every configured backend. gpufleet "
                    "provisions `aws`, `gcp` and `local` (containers on the controller's Docker engine), and a fleet "
                    "without `backends` gets `local`; the other names are valid dstack backends that gpufleet "
                    "validate and apply refuse when the list has none of those three."
                ),
            },
            "regions": {"values": _STRINGS, "text": "Regions hosts may be provisioned in; unset means any."},
            "availability_zones": {"values": _STRINGS, "text": "Availability zones hosts may be provisioned in; unset means any."},
            "instance_types": {
                "values": _STRINGS,
                "text": "Cloud instance types hosts may be (such as `p5.48xlarge`); unset means any that meets `resources`.",
            },
            "spot_policy": {
                "values": "{choices:common.SPOT_POLICIES}",
                "text": "`on-demand` takes on-demand instances only, `spot` spot (interruptible) instances only, `auto` either.",
            },
            "retry": {
                "values": "`true`, `false`, or a mapping: {see:retry}",
                "text": (
                    "Whether, on which failures and for how long provisioning is tried again. `true` is the "
                    "mapping with every default; `false` or unset never retries."
                ),
            },
            "max_price": {"values": "a number greater than 0", "text": "The most a host may cost, in dollars per hour."},
            "idle_duration": {
                "values": _DURATION + ", or `off`",
                "text": (
                    "How long a host may stay idle (no job) before it is terminated, but only while the fleet has more "
                    "than `nodes.min` hosts: a fleet of a fixed number of nodes never shrinks. `off`, `false` or "
                    "a negative number keep idle hosts; `true` is the default. Unset, the fleet's own hosts keep 3d; "
                    "a host a run makes keeps the shorter of this and the run's `idle_duration` (5m when neither is set)."
                ),
                "kind": "duration",
            },
            "tags": {
                "values": _TAGS,
                "text": "Tags (labels on GCP) on the cloud resources the fleet creates, next to gpufleet's own.",
            },
            "backend_options": {
                "values": "a list of mappings: {see:backend_options}",
                "text": "Backend-specific offer settings; only Vast.ai has any.",
                "status": "kept",
            },
            "env": {
                "values": _ENV,
                "text": (
                    "Environment of dstack's agent (`dstack-shim`) on each host, not of the runs' containers; it "
                    "can set the agent's `DSTACK_*` knobs. A bare `NAME` takes its value from the environment of "
                    "whoever applies the file. gpufleet runs no agent on the hosts."
                ),
                "status": "kept",
            },
            "ssh_config": {
                "values": "a mapping: {see:ssh_config}",
                "text": "The servers to adopt and how to reach them; this makes the fleet an SSH fleet.",
                "required": "in an SSH fleet; a backend fleet sets `nodes` instead",
                "status": "ssh-only",
            },
        },
    },
    "fleet.nodes": {
        "title": "`nodes` (fleet)",
        "intro": "The mapping form of a backend fleet's `nodes`. Every key is optional.",
        "fields": {
            "min": {
                "values": "a whole number of at least 0",
                "text": "The fewest hosts: missing hosts are created again, and idle hosts are never removed below it.",
            },
            "target": {
                "values": "a whole number from `min` to `max`",
                "text": "How many hosts to create when the fleet is applied; unset means `min`.",
            },
            "max": {
                "values": "a whole number, not below `min` or `target`",
                "text": "The most hosts; unset means no limit. Runs make the fleet grow up to it. Idle hosts above it are removed.",
            },
        },
    },
    "ssh_config": {
        "title": "`ssh_config`",
        "intro": (
            "The servers of an SSH fleet. The connection settings here apply to every host that does not set its "
            "own. Paths such as `identity_file` are not read by the parser; the preflight checks read them "
            "([preflight.md](../preflight.md))."
        ),
        "fields": {
            "user": {"values": "a string", "text": "SSH login user of the hosts that set none."},
            "port": {"values": _PORT, "text": "SSH port of the hosts that set none (see the host's `port` for the fallback)."},
            "identity_file": {
                "values": "a path on the controller (`~` is expanded)",
                "text": "The private SSH key for the hosts that set none.",
            },
            "proxy_jump": {
                "values": "a mapping: {see:proxy_jump}",
                "text": "A jump host the hosts that set none are reached through.",
            },
            "network": {
                "values": "a private network in CIDR form, such as `10.0.0.0/24`",
                "text": (
                    "The private network the hosts share: each host's address in it becomes its internal IP, the "
                    "one other nodes reach it on. Cannot be combined with the hosts' `internal_ip`."
                ),
            },
            "hosts": {
                "values": "a non-empty list of hostnames or mappings: {see:ssh_config.hosts}",
                "text": "The servers, each listed once (one `hostname` and `port` twice is refused).",
                "required": "",
            },
            "ssh_key": {
                "values": "(none)",
                "text": "Filled in by the dstack CLI from `identity_file`, never written in a file: write `identity_file`.",
                "status": "refused",
            },
        },
    },
    "ssh_config.hosts": {
        "title": "`ssh_config.hosts[]`",
        "intro": (
            "One server of an SSH fleet: a hostname (a string, which takes every setting from `ssh_config` and "
            "`blocks` from the fleet) or a mapping. Each setting a host leaves out is taken from `ssh_config`, as "
            "dstack resolves it; the normalized configuration holds the resolved values."
        ),
        "fields": {
            "hostname": {"values": "a hostname or IP address", "text": "The address to connect to over SSH.", "required": ""},
            "port": {"values": _PORT, "text": "SSH port; unset takes `ssh_config.port`, and the default when that is unset too."},
            "user": {
                "values": "a string",
                "text": "SSH login user; unset takes `ssh_config.user`.",
                "required": "here or in `ssh_config.user`",
            },
            "identity_file": {
                "values": "a path on the controller",
                "text": "The private SSH key; unset takes `ssh_config.identity_file`.",
                "required": "here or in `ssh_config.identity_file`",
            },
            "proxy_jump": {
                "values": "a mapping: {see:proxy_jump}",
                "text": "A jump host for this host; unset takes `ssh_config.proxy_jump`.",
            },
            "internal_ip": {
                "values": "a private IP address",
                "text": (
                    "The address other nodes reach this host on (in `DSTACK_NODES_IPS` and the MPI hostfile). Set on "
                    "every host or on none, and not with `ssh_config.network`; unset, the host's address in "
                    "`ssh_config.network`, else its first IPv4 address."
                ),
            },
            "blocks": {"values": "a whole number of at least 1, or `auto`", "text": "This host's `blocks`; unset takes the fleet's."},
            "ssh_key": {
                "values": "(none)",
                "text": "Filled in by the dstack CLI from `identity_file`: write `identity_file`.",
                "status": "refused",
            },
        },
    },
    "proxy_jump": {
        "title": "`proxy_jump`",
        "intro": "A jump host (`ssh -J`), in `ssh_config` or on one host.",
        "fields": {
            "hostname": {"values": "a hostname or IP address", "text": "The jump host's address.", "required": ""},
            "port": {"values": _PORT, "text": "The jump host's SSH port."},
            "user": {"values": "a string", "text": "The login user on the jump host.", "required": ""},
            "identity_file": {"values": "a path on the controller", "text": "The private key for the jump host.", "required": ""},
            "ssh_key": {
                "values": "(none)",
                "text": "Filled in by the dstack CLI from `identity_file`: write `identity_file`.",
                "status": "refused",
            },
        },
    },
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
                "text": "Start the run on a cron schedule. Run `gpufleet apply` from cron or an AWX schedule instead.",
                "status": "runner-refuses",
            },
            "utilization_policy": {
                "values": "a mapping: {see:task.utilization_policy}",
                "text": "Terminate the run when its GPUs stay under-used.",
                "status": "runner-warns",
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
        "intro": "When dstack starts the run by itself. gpufleet's task runner refuses `schedule`.",
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
        "intro": "dstack terminates the run when GPU utilization stays low; gpufleet does not enforce it.",
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
    # -----------------------------------------------------------------------------------------
    # type: volume
    "volume": {
        "title": "`type: volume`",
        "intro": (
            "A network volume: a cloud disk that tasks mount by name (see [volumes.md](../volumes.md)). `backend` "
            "decides which fields the file may have. gpufleet creates `aws` (EBS) and `gcp` (persistent disk) "
            "volumes, and `local` ones (a gpufleet extension: a folder on this machine's Docker engine); `runpod` "
            "and `kubernetes` volume files are valid for dstack, and `gpufleet validate` and `apply` refuse them."
        ),
        "fields": {
            "type": {"values": "`volume`", "text": "Makes the file a volume configuration.", "required": ""},
            "backend": {"values": "{choices:volume.VOLUME_BACKENDS}", "text": "The backend the volume lives in.", "required": ""},
            "name": {"values": _NAME, "text": "The volume's name, by which tasks mount it."},
            "region": {"values": "a string", "text": "The region the volume is created in, or is in with `volume_id`.", "required": ""},
            "availability_zone": {
                "values": "a string",
                "text": "The zone the volume is created in; runs that mount it are placed there. runpod ignores it.",
            },
            "size": {
                "values": "a size (`100GB`, `1TB`, or a number of GB)",
                "text": "The size of a new volume.",
                "required": "unless `volume_id` is set",
            },
            "volume_id": {
                "values": "a string",
                "text": (
                    "Registers an existing volume (an EBS volume id; on gcp, a disk name) instead of creating one; "
                    "deleting the volume file then leaves the disk and its data."
                ),
            },
            "auto_cleanup_duration": {
                "values": _DURATION + ", or `off`",
                "text": "dstack deletes the volume once it has been unused this long. `off`, `false` or a negative number: keep it.",
                "kind": "duration",
            },
            "tags": {"values": _TAGS, "text": "Tags on the cloud volume, next to gpufleet's own."},
        },
    },
    "volume.local": {
        "title": "`type: volume`",
        "base": "volume",
        "intro": (
            "A local volume (gpufleet's own, not dstack's) is a folder in the Docker volume `gpufleet-volumes` "
            "of this machine's engine, which every local node mounts; a task's job on a local node takes it, "
            "one node at a time (see [volumes.md](../volumes.md#local-volumes))."
        ),
        "fields": {
            "region": {"values": "`local`", "text": "Optional: the engine's only region."},
            "size": {
                "values": "a size (`100GB`, `1TB`, or a number of GB)",
                "text": "Recorded and listed; a local volume is not limited to it (it shares the engine's disk).",
                "required": "",
            },
            "tags": {"values": _TAGS, "text": "Accepted; a local volume keeps no tags."},
            "availability_zone": {"values": "none", "text": "Refused: a local volume attaches to any local node."},
            "volume_id": {"values": "none", "text": "Refused: there is no existing local volume to register."},
        },
    },
    "volume.kubernetes": {
        "title": "`type: volume`",
        "base": "volume",
        "intro": "A Kubernetes volume is a PersistentVolumeClaim, new or existing.",
        "fields": {
            "region": {"values": "a string", "text": "Optional for Kubernetes volumes."},
            "size": {
                "values": "a size (`100GB`, `1TB`, or a number of GB)",
                "text": "The size of the claim to create.",
                "required": "unless `claim_name` is set",
            },
            "claim_name": {"values": "a string", "text": "An existing PersistentVolumeClaim to use instead of creating one."},
            "storage_class_name": {"values": "a string", "text": "The StorageClass of the claim created; unset, the cluster's default."},
            "access_modes": {
                "values": "a list of Kubernetes access modes (`ReadWriteOnce`, `ReadOnlyMany`, `ReadWriteMany`, `ReadWriteOncePod`)",
                "text": "The access modes of the claim.",
            },
        },
    },
    # -----------------------------------------------------------------------------------------
    # Shared objects
    "resources": {
        "title": "`resources`",
        "intro": (
            "What a host (in a fleet) or a node (in a task or node group) must have. A single value is an exact "
            "requirement: `memory: 200GB` asks for exactly 200GB, `memory: 200GB..` for at least that. The "
            "defaults are a task's; a backend fleet without `resources` takes any host, as shown. On SSH hosts the "
            "disk measured is the space free in Docker's data root."
        ),
        "fields": {
            "cpu": {
                "values": "a count or range (`4`, `8..`), with an optional architecture (`x86:4`, `arm:2..`), or a mapping: {see:resources.cpu}",
                "text": "CPU cores, and their architecture.",
            },
            "memory": {"values": "a size or range (`16GB`, `64GB..`, `..1TB`)", "text": "RAM."},
            "shm_size": {
                "values": "a size (`16GB`), not a range",
                "text": "The size of `/dev/shm` in the container, mounted as an executable tmpfs; unset, Docker's default (64MB).",
            },
            "gpu": {
                "values": (
                    "a string of `:`-separated parts (`H100:8`, `A10G,A100`, `24GB..`, `amd:MI300X:2`, `nvidia`, "
                    "`0..8`), a count, or a mapping: {see:resources.gpu}"
                ),
                "text": (
                    "GPUs per host or node. Each part of the string is a vendor, a comma-separated list of acceptable "
                    "names (a part starting with a letter), a memory range per GPU (a part starting with a digit and "
                    "holding a letter: `24GB`, `16GB..32`), or "
                    "a count range. A spec without a count asks for at least one GPU; `0` asks for none. When names "
                    "are given without a vendor, the vendor is taken from the names, as dstack does."
                ),
            },
            "disk": {
                "values": "a size or range (`100GB..`), or a mapping: {see:resources.disk}",
                "text": "Disk space. Prefer a range: an exact size almost never matches.",
            },
        },
    },
    "resources.cpu": {
        "title": "`resources.cpu`",
        "intro": "The mapping form of `cpu`. A mapping of only `min` and `max` is the count range.",
        "fields": {
            "arch": {
                "values": "{choices:grammar.CPU_ARCHES} (any case)",
                "text": "The CPU architecture; unset, dstack takes it from the image (x86 for its own images).",
            },
            "count": {"values": "a count or range (`4`, `8..`, `{min: 2}`)", "text": "The number of cores."},
        },
    },
    "resources.gpu": {
        "title": "`resources.gpu`",
        "intro": "The mapping form of `gpu`; `total_memory` and `compute_capability` exist only in this form.",
        "fields": {
            "vendor": {
                "values": "{choices:gpus.VENDORS} (any case; `tpu` and `tt` stand for `google` and `tenstorrent`)",
                "text": (
                    "The GPU vendor. Unset, it is inferred: names that all belong to one vendor give that vendor; "
                    "without names, a task on the default image that asks for GPUs gets `nvidia`."
                ),
            },
            "name": {
                "values": "a name or a non-empty list of names",
                "text": "The acceptable GPU models (any of them), compared without regard to case. A `tpu-` prefix is deprecated.",
            },
            "count": {"values": "a count or range (`8`, `1..8`)", "text": "How many GPUs."},
            "memory": {"values": "a size or range (`80GB`, `40GB..`)", "text": "The memory of each GPU."},
            "total_memory": {"values": "a size or range", "text": "The memory of all the GPUs together."},
            "compute_capability": {
                "values": "`major.minor`: `8.0`, `\"9.0\"` or `[9, 0]`",
                "text": "The lowest CUDA compute capability; normalized to a `\"major.minor\"` string.",
            },
        },
    },
    "resources.disk": {
        "title": "`resources.disk`",
        "intro": "The mapping form of `disk`: `disk: 100GB..` is `disk: {size: 100GB..}`.",
        "fields": {
            "size": {"values": "a size or range", "text": "The disk space.", "required": ""},
        },
    },
    "retry": {
        "title": "`retry`",
        "intro": (
            "The mapping form of `retry`, in fleets (provisioning) and tasks (the run). `retry: true` is this "
            "mapping with every default; `retry: false` turns retrying off."
        ),
        "fields": {
            "on_events": {
                "values": "a non-empty list of {choices:common.RETRY_EVENTS}",
                "text": (
                    "The failures retried: `no-capacity` (no host or offer could take it), `interruption` (a spot "
                    "instance was reclaimed), `error` (any other failure, such as a command exiting non-zero or a "
                    "host becoming unreachable). Stops by the user and `max_duration` are never retried."
                ),
            },
            "duration": {
                "values": _DURATION,
                "text": (
                    "How long to keep retrying: from the submission for `no-capacity` before anything ran, else from "
                    "when the failed submission was last seen alive."
                ),
                "kind": "duration",
            },
        },
    },
    "backend_options": {
        "title": "`backend_options[]`",
        "intro": "Offer settings for one backend; each backend appears once. Only Vast.ai has any.",
        "fields": {
            "type": {"values": "`vastai`", "text": "The backend the settings are for."},
            "offer_order": {"values": "`score` or `price`", "text": "The order Vast.ai offers are taken in: by Vast.ai's score or by price."},
            "min_reliability": {"values": "a number from 0 to 1", "text": "The lowest reliability Vast.ai reports that an offer's host may have."},
            "min_score": {"values": "a whole number of at least 0", "text": "The lowest Vast.ai score an offer may have."},
        },
    },
}

# The closing sections of the page.
REMOVED_INTRO = (
    "Fields dstack used to accept and has removed are refused with what to write instead; so are "
    "resource keys written at the top level instead of under `resources` ({choices:common.RESOURCE_KEYS})."
)
NOT_SUPPORTED_INTRO = "These configuration types are recognised and refused:"
