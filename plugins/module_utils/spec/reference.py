# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""What every configuration field means: the words of docs/reference/configuration.md.

Data only. scripts/gendocs.py walks the parser's own field tables (fleet.FIELDS, task.FIELDS,
grammar.RESOURCE_FIELDS, ...) and takes each field's description from here; the default shown
for a field is what the parser gives when the field is left out, never a value written here.
tests/unit/repo/test_reference_docs.py fails when a field of the model has no entry here, when an
entry names a field the model does not have, and when the checked-in page is stale.

SECTIONS (its fleet, task and service sections in spec/reference_fleet.py,
spec/reference_task.py and spec/reference_service.py, the descriptions they share in
spec/reference_words.py) maps a section (a configuration type or an object nested in one) to:

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

from .reference_fleet import FLEET_SECTIONS
from .reference_service import SERVICE_SECTIONS
from .reference_task import TASK_SECTIONS
from .reference_words import _BOOL as _BOOL_TEXT
from .reference_words import _DURATION, _NAME, _TAGS

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


SECTIONS = {
    # -----------------------------------------------------------------------------------------
    # type: gateway
    "gateway": {
        "title": "`type: gateway`",
        "intro": (
            "A host that publishes services at `https://RUN.DOMAIN/`, as dstack's gateways (see "
            "[services.md](../services.md#gateways)). gpufleet makes the host as a one-node fleet of the gateway's "
            "name in its backend (`local`, `aws` or `gcp`), sets up HAProxy there with the role "
            "gpufleet.cluster.gateway, and never places a run on it. A service names it in `gateway`, or gets the "
            "default gateway."
        ),
        "fields": {
            "type": {"values": "`gateway`", "text": "Makes the file a gateway configuration.", "required": ""},
            "name": {"values": _NAME, "text": "The gateway's name, which services give in `gateway`; without it, the "
                     "file's name gives one, as for fleets."},
            "backend": {"values": "{choices:common.BACKENDS}", "required": "",
                        "text": "Where the gateway's host is made. gpufleet makes it in `local` (a container on this "
                                "machine's Docker engine), `aws` and `gcp`; `validate` and `apply` refuse the others."},
            "region": {"values": "a string", "required": "unless `backend` is `local`",
                       "text": "The region the host is made in."},
            "instance_type": {"values": "a string", "text": "The host's instance type; without it, the cheapest offer "
                              "with 2 or more CPUs, 2 GB or more of memory and no GPU."},
            "domain": {"values": "a domain name; `*.` before it and `${{ run.project_name }}` in it are allowed",
                       "text": "The wildcard domain: a service is published at `RUN.DOMAIN`, the models at "
                               "`gateway.DOMAIN`. Point `*.DOMAIN` at the gateway's address. `${{ run.project_name }}` "
                               "becomes `main`, gpufleet's one project."},
            "default": {"values": _BOOL_TEXT, "text": "Whether services without `gateway` use this one. Unset: it "
                        "becomes the default unless another gateway is one already."},
            "public_ip": {"values": _BOOL_TEXT, "text": "Whether the host gets a public address (cloud backends)."},
            "certificate": {
                "values": "`{type: lets-encrypt}`, `{type: self-signed}` (gpufleet's own), `{type: acm, arn}`, or `null`",
                "text": "How HTTPS is served. `lets-encrypt` (the default, except on `local`): the gateway obtains a "
                        "certificate for each service from an ACME server. `self-signed` (the default on `local`): "
                        "a certificate of `*.DOMAIN` signed by a CA the gateway makes. `null`: plain HTTP only. "
                        "`acm` is refused: it needs an AWS load balancer gpufleet does not make.",
            },
            "replicas": {"values": "a whole number of at least 1", "text": "The number of gateway hosts; more than 1 "
                         "is refused."},
            "tags": {"values": _TAGS, "text": "Tags on the host, next to gpufleet's own."},
        },
    },
    **FLEET_SECTIONS,
    **TASK_SECTIONS,
    **SERVICE_SECTIONS,
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
