# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""What the fields of a `type: fleet` file mean: its sections of the configuration reference.

Data only, a part of spec.reference.SECTIONS (see spec/reference.py for what an entry holds).

PRIVATE to gpufleet.cluster.
"""

from __future__ import annotations

from .reference_words import _DURATION, _ENV, _NAME, _PORT, _STRINGS, _TAGS

FLEET_SECTIONS = {
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
}
