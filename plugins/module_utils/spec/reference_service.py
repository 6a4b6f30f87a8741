# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""What the fields of `type: service` files mean: their sections of the configuration reference.

Data only, a part of spec.reference.SECTIONS (see spec/reference.py for what an entry holds).

PRIVATE to gpufleet.cluster.
"""

from __future__ import annotations

from .reference_words import _BOOL, _DURATION, _PORT, _STRINGS

_REFUSED_NOW = "**Not run by this version of gpufleet:** the file validates, `apply` refuses it."

SERVICE_SECTIONS = {
    # -----------------------------------------------------------------------------------------
    # type: service
    "service": {
        "title": "`type: service`",
        "base": "task",
        "intro": (
            "Replicas of one container that serve HTTP on `port`, published at one URL: `https://NAME.DOMAIN/` "
            "on a gateway ({see:gateway}), else `/proxy/services/main/NAME/` on a proxy on a host of the fleet, "
            "as dstack's services without a gateway. It takes every field of a task above except `nodes` and "
            "`ports` (a replica is one node, and a service publishes its one `port`), with the same defaults; "
            "`groups` are replica groups here, not node groups. What this version cannot run yet (`https: true` "
            "with `gateway: false`, what replica groups cannot have yet, a range of replicas that starts at 0) "
            "is accepted by the "
            "parser and refused by `gpufleet validate` and `apply` with one message naming the field. The "
            "service's own fields:"
        ),
        "fields": {
            "type": {"values": "`service`", "text": "Makes the file a service configuration.", "required": ""},
            "port": {
                "values": _PORT + ", `\"80:8000\"` (the second number is used), or `{local_port, container_port}`",
                "text": "The port the application listens on in the container; requests to the service's URL go there.",
                "required": "",
            },
            "gateway": {
                "values": "`true`, `false`, a gateway's name (`name` or `project/name`), or `{project, name}`",
                "text": (
                    "Which gateway publishes the service. A name: that one. `true`: the default gateway (refused "
                    "when there is none). Unset: the default gateway, else the in-fleet proxy. `false`: the "
                    "in-fleet proxy."
                ),
            },
            "strip_prefix": {
                "values": _BOOL,
                "text": "Strip `/proxy/services/main/NAME/` from the request path before it reaches the replica.",
            },
            "model": {
                "values": "a model name, or a mapping: {see:service.model} or {see:service.model.tgi}",
                "text": (
                    "Also publish the service as a model on the OpenAI-compatible route "
                    "(`/proxy/models/main/`). A name means an OpenAI-compatible API at `/v1` (`format: openai`)."
                ),
            },
            "https": {
                "values": "`true`, `false` or `auto`",
                "text": (
                    "HTTPS on a gateway. Unset or `true`: HTTPS, refused at apply on a gateway without a "
                    "certificate; `auto`: HTTPS where the gateway has a certificate. The in-fleet proxy serves "
                    "plain HTTP: `true` with `gateway: false` is refused."
                ),
            },
            "auth": {
                "values": _BOOL,
                "text": "Require `Authorization: Bearer TOKEN` with the token of a member of the fleet (`gpufleet token`).",
            },
            "scaling": {
                "values": "a mapping: {see:service.scaling}",
                "text": "Autoscaling rules; needed when `replicas` is a range (docs/services.md#autoscaling).",
            },
            "rate_limits": {
                "values": "a list of mappings: {see:service.rate_limits}",
                "text": "Request rate limits per path prefix; prefixes are unique.",
            },
            "probes": {
                "values": "a list of mappings: {see:service.probes}",
                "text": (
                    "HTTP checks of each replica's health; listed probes are unique. Unset with an OpenAI `model`: "
                    "one `POST` of a one-token chat completion to the model's `/chat/completions` (timeout 30s). "
                    "Unset otherwise, or `[]`: the proxy checks that the port accepts connections."
                ),
            },
            "replicas": {
                "values": (
                    "a whole number of at least 0, a range (`0..4`, `{min, max}`; the maximum is needed), or a list "
                    "of replica groups (dstack's older form of `groups`)"
                ),
                "text": (
                    "How many copies of the service run, each on one node. A range needs `scaling` and `scaling` "
                    "needs a range: the count then follows the request rate between the two ends "
                    "(docs/services.md#autoscaling). 0, and a range from 0 (scale to zero), are refused for now."
                ),
            },
            "groups": {
                "values": "a non-empty list of mappings: {see:service.groups}",
                "text": (
                    "Replica groups with their own commands and resources, numbered across the groups in order "
                    "(docs/services.md#replicas); not with `replicas`, and then `scaling` and `commands` go in "
                    "each group."
                ),
            },
        },
    },
    "service.model": {
        "title": "`model` (`format: openai`)",
        "intro": "A model served by an OpenAI-compatible API.",
        "fields": {
            "type": {"values": "`chat`", "text": "The kind of model."},
            "name": {"values": "a string", "text": "The model's name, as clients ask for it.", "required": ""},
            "format": {"values": "`openai`", "text": "The serving format.", "required": ""},
            "prefix": {"values": "a path", "text": "Where the API is in the service: `PREFIX/chat/completions`."},
        },
    },
    "service.model.tgi": {
        "title": "`model` (`format: tgi`)",
        "intro": "A model served by Hugging Face's Text Generation Inference (dstack's older format).",
        "fields": {
            "type": {"values": "`chat`", "text": "The kind of model."},
            "name": {"values": "a string", "text": "The model's name on the Hugging Face Hub.", "required": ""},
            "format": {"values": "`tgi`", "text": "The serving format.", "required": ""},
            "chat_template": {"values": "a string", "text": "A prompt template instead of the Hub's."},
            "eos_token": {"values": "a string", "text": "An end-of-sentence token instead of the Hub's."},
        },
    },
    "service.scaling": {
        "title": "`scaling`",
        "intro": (
            "dstack's autoscaling on the request rate the proxy measures: the replica count becomes the rate "
            "over `window` divided by `target`, rounded up and kept within `replicas`. A background pass "
            "carries it out (playbooks/reconcile.yml: docs/services.md#autoscaling)."
        ),
        "fields": {
            "metric": {"values": "{choices:service_fields.SCALING_METRICS}", "text": "What is measured: requests per second.", "required": ""},
            "target": {"values": "a number above 0", "text": "The rate one replica should take.", "required": ""},
            "window": {
                "values": "`30s`, `60s` or `5m`",
                "text": "The time over which the rate is measured (dstack's default: 60s).",
                "kind": "duration",
            },
            "scale_up_delay": {"values": _DURATION, "text": "The least time between a scaling event and the next scale-up.", "kind": "duration"},
            "scale_down_delay": {"values": _DURATION, "text": "The least time between a scaling event and the next scale-down.", "kind": "duration"},
        },
    },
    "service.rate_limits": {
        "title": "`rate_limits[]`",
        "intro": "A limit on the requests under one path prefix; where several prefixes match, the longest applies.",
        "fields": {
            "prefix": {
                "values": "a path starting with `/`, without spaces, `\\`, `{` or `}` (at most 4094 characters)",
                "text": "The path prefix the limit applies to.",
            },
            "key": {
                "values": "{see:service.rate_limits.key}",
                "text": "What the requests are counted per: the client's address, or a header's value.",
            },
            "rps": {
                "values": "a number from 1/60 up",
                "text": "The most requests a second (`10`: one request per 100 ms).",
                "required": "",
            },
            "burst": {"values": "a whole number of at least 0", "text": "Requests let through ahead of the limit."},
        },
    },
    "service.rate_limits.key": {
        "title": "`rate_limits[].key`",
        "intro": "How requests are grouped for a limit: `{type: ip_address}` or `{type: header, header: NAME}`.",
        "fields": {
            "type": {"values": "{choices:service_fields.RATE_LIMIT_KEYS}", "text": "Per client address or per header value.", "required": ""},
            "header": {
                "values": "letters, digits, `-` and `_` (at most 500)",
                "text": "The header whose value groups the requests.",
                "required": "with `type: header`",
            },
        },
    },
    "service.probes": {
        "title": "`probes[]`",
        "intro": "An HTTP request to each replica; a replica is ready after `ready_after` successes in a row.",
        "fields": {
            "type": {"values": "{choices:service_fields.PROBE_TYPES}", "text": "The kind of probe.", "required": ""},
            "url": {"values": "a path starting with `/` (at most 2048 printable characters)", "text": "The path requested."},
            "method": {"values": "{choices:service_fields.PROBE_METHODS}", "text": "The HTTP method (lower case)."},
            "headers": {"values": "a list of at most 16 mappings: {see:service.probes.headers}", "text": "Headers sent with the request."},
            "body": {"values": "1 to 2048 characters", "text": "The request body; not with `method: get` or `head`."},
            "timeout": {"values": _DURATION + " of at least 1s", "text": "How long the request may take.", "kind": "duration"},
            "interval": {"values": _DURATION + " of at least 1s", "text": "The time from the end of one probe to the next.", "kind": "duration"},
            "ready_after": {"values": "a whole number of at least 1", "text": "Successes in a row before the replica is ready."},
            "until_ready": {"values": _BOOL, "text": "Stop probing once the replica is ready."},
        },
    },
    "service.probes.headers": {
        "title": "`probes[].headers[]`",
        "intro": "One header of a probe's request.",
        "fields": {
            "name": {"values": "1 to 256 characters", "text": "The header's name.", "required": ""},
            "value": {"values": "1 to 2048 characters", "text": "The header's value.", "required": ""},
        },
    },
    "service.groups": {
        "title": "`groups[]` (replica groups)",
        "intro": (
            "A group of replicas with its own commands, image and resources (dstack's heterogeneous services). "
            "`image`, `docker`, `privileged`, `python`, `nvcc`, `spot_policy` and `reservation` are set either "
            "at the service level or in groups, never both. This version runs a group's `name`, count, "
            "`resources` and `commands`; a range of replicas, `scaling`, `router`, and the settings above in a "
            "group are refused (set them on the service)."
        ),
        "fields": {
            "name": {
                "values": "1 to 40 lower-case letters, digits or `-`, starting with a letter or digit",
                "text": "The group's name; unique. Unset: its position (`0`, `1`, ...).",
            },
            "replicas": {
                "values": "a whole number or a range, as the service's `replicas` (`count` is another name for it)",
                "text": "How many replicas the group runs; a range needs `scaling` (refused for now).",
                "required": "",
            },
            "scaling": {"values": "{see:service.scaling}", "text": "The group's autoscaling rules."},
            "resources": {"values": "{see:resources}", "text": "What each replica of the group needs.", "see": "resources"},
            "spot_policy": {"values": "`spot`, `on-demand` or `auto`", "text": "Spot or on-demand instances for the group."},
            "reservation": {"values": "a string", "text": "A cloud reservation for the group's instances."},
            "commands": {
                "values": _STRINGS,
                "text": "The group's commands.",
                "required": "unless `image` is set in the group or at the service level",
            },
            "image": {"values": "a Docker image reference", "text": "The group's image."},
            "python": {"values": "as the task's `python`", "text": "The group's Python version; not with the group's `image`."},
            "nvcc": {"values": _BOOL, "text": "The base image's `devel` variant for the group."},
            "docker": {"values": _BOOL, "text": "Docker in Docker for the group; not with `image`, `python` or `nvcc`."},
            "privileged": {"values": _BOOL, "text": "Run the group's containers privileged (not `false` with `docker: true`)."},
            "router": {
                "values": "`{type: sglang}` or `{type: dynamo}`",
                "text": "Run an in-service HTTP router in this group (at most one group; it has `replicas: 1`).",
            },
        },
    },
}
