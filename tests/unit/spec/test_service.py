"""type: service: every field dstack's service has, with dstack's checks, defaults and messages
(spec/service.py, spec/service_fields.py), and what this version refuses to run
(spec/support.py), as validate and apply share it."""

from __future__ import annotations

import json

import pytest
from ansible_collections.gpufleet.cluster.plugins.module_utils import spec
from ansible_collections.gpufleet.cluster.plugins.module_utils.spec import support

BASE = {"type": "service", "port": 8000, "commands": ["python -m http.server 8000"]}


def parse(**fields):
    return spec.parse_data(dict(BASE, **fields))[0]


def parse_only(data):
    return spec.parse_data(data)[0]


def problems(data=None, **fields):
    """[(path, message)] of a service that must be rejected."""
    with pytest.raises(spec.SpecError) as info:
        spec.parse_data(dict(BASE, **fields) if data is None else data)
    return [(p.where, p.message) for p in info.value.problems]


def problem_at(path, data=None, **fields):
    found = problems(data, **fields)
    at = [message for where, message in found if where == path]
    assert at, "no problem at %r; got %r" % (path, found)
    return " | ".join(at)


def refused(config):
    return dict((p.where, p.message) for p in support.refusals(config))


# ---------------------------------------------------------------------------------------------
# The normalized shape


def test_a_minimal_service_is_a_one_node_run_with_dstacks_defaults():
    config = parse()
    assert config["type"] == "service"
    assert (config["port"], config["nodes"], config["ports"]) == (8000, 1, [])
    assert config["replicas"] == {"min": 1, "max": 1}
    assert (config["groups"], config["scaling"], config["model"]) == (None, None, None)
    assert (config["auth"], config["https"], config["gateway"], config["strip_prefix"]) \
        == (True, None, None, True)
    assert (config["rate_limits"], config["probes"]) == ([], [])
    assert config["commands"] == ["python -m http.server 8000"]
    # Every task field is there with a task's normalization.
    task = spec.parse_data({"type": "task", "commands": BASE["commands"]})[0]
    for key in set(task) - {"type", "ports", "groups"}:
        assert config[key] == task[key], key
    assert refused(config) == {}


def test_every_task_field_but_nodes_and_ports_is_taken():
    config = parse(python="3.12", env=["A=1"], resources={"gpu": "24GB"}, fleets=["gpus"],
                   retry=True, volumes=["/data:/data"], files=["app.py"], repos=["."],
                   max_duration="2h", spot_policy="auto", priority=50, name="my-svc",
                   entrypoint="python", working_dir="/w", user="1000", shell="bash",
                   startup_order="master-first", stop_criteria="master-done")
    assert (config["python"], config["env"], config["name"]) == ("3.12", {"A": "1"}, "my-svc")
    assert config["resources"]["gpu"]["memory"] == {"min": 24, "max": 24}
    assert config["fleets"] == ["gpus"] and config["max_duration"] == 7200
    assert config["retry"]["duration"] == 3600


@pytest.mark.parametrize("field, value, fragment", [
    ("nodes", 2, "a service has no nodes"),
    ("ports", [8080], "a service has no ports: set port"),
])
def test_nodes_and_ports_are_refused_as_dstack_refuses_them(field, value, fragment):
    assert fragment in problem_at(field, **{field: value})


def test_an_image_alone_is_enough_and_nothing_to_run_is_an_error():
    config = parse_only({"type": "service", "port": 80, "image": "nginx"})
    assert (config["commands"], config["image"], config["shell"]) == ([], "nginx", "/bin/sh")
    found = problems({"type": "service", "port": 80})
    assert ("", "either commands or image must be set: a service needs something to run") in found


def test_port_is_required():
    found = problems({"type": "service", "image": "nginx"})
    assert any(where == "" and "a service needs port" in m for where, m in found)


# ---------------------------------------------------------------------------------------------
# port


@pytest.mark.parametrize("value, expected", [
    (8000, 8000), ("8000", 8000), ("80:8000", 8000), ({"container_port": 9000}, 9000), (8000.0, 8000),
    ({"local_port": 80, "container_port": 9000}, 9000), (65535, 65535), (1, 1),
])
def test_port_forms(value, expected):
    assert parse(port=value)["port"] == expected


@pytest.mark.parametrize("value, fragment", [
    (0, "must be at least 1"), (65536, "must be at most 65535"), ("*:8000", "write 8000 or 80:8000"),
    ("http", "write 8000 or 80:8000"), ("80:", "write 8000 or 80:8000"), (True, "expected a port"),
    ("0:8000", "must be at least 1"), ({"local_port": 80}, "needs container_port"),
    ([8000], "expected a port"), (8000.5, "expected a port"),
])
def test_bad_ports(value, fragment):
    assert fragment in problem_at("port", port=value)


# ---------------------------------------------------------------------------------------------
# gateway, https, auth, strip_prefix


@pytest.mark.parametrize("value, expected", [
    (None, None), (False, False), (True, True), ("false", False), ("my-gateway", "my-gateway"),
    ("team-a/my-gateway", "team-a/my-gateway"), ({"name": "gw"}, "gw"),
    ({"project": "p", "name": "gw"}, "p/gw"),
])
def test_gateway_forms(value, expected):
    assert parse(gateway=value)["gateway"] == expected


@pytest.mark.parametrize("value", ["a/b/c", "/gw", "gw/", 2.5, ["gw"], {"project": "p"}])
def test_bad_gateway(value):
    message = problem_at("gateway", gateway=value) if not isinstance(value, dict) else " ".join(
        m for _w, m in problems(gateway=value))
    assert message


def test_a_bad_gateway_reference_has_dstacks_message():
    assert problem_at("gateway", gateway="a/b/c") == (
        "Invalid entity reference. Only `<name>` or `<project>/<name>` formats are allowed")


@pytest.mark.parametrize("value, expected", [
    (None, None), (True, True), (False, False), ("auto", "auto"), ("yes", True)])
def test_https_forms(value, expected):
    assert parse(https=value)["https"] == expected


def test_bad_https():
    assert "true, false or auto" in problem_at("https", https="sometimes")


@pytest.mark.parametrize("field", ["auth", "strip_prefix"])
def test_auth_and_strip_prefix_are_booleans(field):
    assert parse(**{field: False})[field] is False
    assert "expected true or false" in problem_at(field, **{field: "maybe"})


# ---------------------------------------------------------------------------------------------
# model


def test_a_model_name_is_an_openai_chat_model_at_v1_with_dstacks_probe():
    config = parse(model="meta-llama/Llama-3.1-8B")
    assert config["model"] == {"type": "chat", "name": "meta-llama/Llama-3.1-8B",
                               "format": "openai", "prefix": "/v1"}
    (probe,) = config["probes"]
    assert probe == {
        "type": "http", "url": "/v1/chat/completions", "method": "post",
        "headers": [{"name": "Content-Type", "value": "application/json"}],
        "body": json.dumps({"model": "meta-llama/Llama-3.1-8B",
                            "messages": [{"role": "user", "content": "hi"}], "max_tokens": 1}),
        "timeout": 30, "interval": 15, "ready_after": 1, "until_ready": False,
    }


def test_the_model_probe_follows_the_prefix_and_explicit_probes_replace_it():
    config = parse(model={"name": "m", "format": "openai", "prefix": "/api/v1/"})
    assert config["probes"][0]["url"] == "/api/v1/chat/completions"
    assert parse(model="m", probes=[])["probes"] == []
    assert [p["url"] for p in parse(model="m", probes=[{"type": "http", "url": "/h"}])["probes"]] \
        == ["/h"]
    # null is omitted, as in dstack.
    assert parse(model="m", probes=None)["probes"][0]["method"] == "post"


def test_a_tgi_model_has_its_own_fields_and_no_default_probe():
    config = parse(model={"format": "tgi", "name": "m", "chat_template": "{{x}}"})
    assert config["model"] == {"type": "chat", "name": "m", "format": "tgi",
                               "chat_template": "{{x}}", "eos_token": None}
    assert config["probes"] == []


@pytest.mark.parametrize("value, path, fragment", [
    ({"name": "m"}, "model", "needs format: openai or tgi"),
    ({"name": "m", "format": "vllm"}, "model", "must be one of openai, tgi"),
    ({"format": "openai"}, "model", "needs name"),
    ({"name": "m", "format": "openai", "type": "embeddings"}, "model.type", "must be one of chat"),
    ({"name": "m", "format": "openai", "eos_token": "x"}, "model.eos_token", "unknown field"),
    ({"name": "m", "format": "tgi", "prefix": "/v1"}, "model.prefix", "unknown field"),
    (5, "model", "expected a model name or a mapping"),
])
def test_bad_models(value, path, fragment):
    assert fragment in problem_at(path, model=value)


# ---------------------------------------------------------------------------------------------
# replicas and scaling


@pytest.mark.parametrize("value, expected", [
    (1, {"min": 1, "max": 1}), (3, {"min": 3, "max": 3}), ("2", {"min": 2, "max": 2}),
    (0, {"min": 0, "max": 0}), ({"min": 2, "max": 2}, {"min": 2, "max": 2}),
])
def test_fixed_replicas(value, expected):
    assert parse(replicas=value)["replicas"] == expected


def test_a_range_needs_scaling_and_scaling_needs_a_range():
    scaling = {"metric": "rps", "target": 10}
    config = parse(replicas="0..4", scaling=scaling)
    assert config["replicas"] == {"min": 0, "max": 4}
    assert config["scaling"] == {"metric": "rps", "target": 10.0, "window": None,
                                 "scale_up_delay": 300, "scale_down_delay": 600}
    assert parse(replicas="..4", scaling=scaling)["replicas"] == {"min": 0, "max": 4}
    assert problem_at("replicas", replicas="1..4") == (
        "When you set `replicas` to a range, ensure to specify `scaling`.")
    assert problem_at("replicas", replicas=2, scaling=scaling) == (
        "To use `scaling`, `replicas` must be set to a range.")
    assert problem_at("scaling", scaling=scaling) == (
        "To use `scaling`, `replicas` must be set to a range.")


@pytest.mark.parametrize("value, fragment", [
    ("1..", "The maximum number of replicas is required"),
    (-1, "The minimum number of replicas must be greater than or equal to 0"),
    ("-1..2", "The minimum number of replicas must be greater than or equal to 0"),
    ("3..1", "invalid range order"), (1.5, "expected a number of replicas"),
    (True, "expected a value or a range"), ("..", "invalid empty range"),
])
def test_bad_replicas(value, fragment):
    assert fragment in problem_at("replicas", replicas=value, scaling={"metric": "rps", "target": 1})


@pytest.mark.parametrize("scaling, expected", [
    ({"metric": "rps", "target": 0.5, "window": "30s"}, {"target": 0.5, "window": 30}),
    ({"metric": "rps", "target": 1, "window": 300, "scale_up_delay": "1m",
      "scale_down_delay": 0}, {"window": 300, "scale_up_delay": 60, "scale_down_delay": 0}),
    ({"metric": "rps", "target": 1, "window": "5m"}, {"window": 300}),
])
def test_scaling_forms(scaling, expected):
    got = parse(replicas="1..2", scaling=scaling)["scaling"]
    assert dict((k, got[k]) for k in expected) == expected


@pytest.mark.parametrize("scaling, path, fragment", [
    ({"metric": "rps", "target": 0}, "scaling.target", "must be greater than 0"),
    ({"metric": "rps", "target": -1}, "scaling.target", "must be greater than 0"),
    ({"metric": "cpu", "target": 1}, "scaling.metric", "must be one of rps"),
    ({"metric": "rps", "target": 1, "window": "45s"}, "scaling.window",
     "Window must be one of: `30s`, `60s`, `300s`"),
    ({"metric": "rps"}, "scaling", "needs target"),
    ({"target": 1}, "scaling", "needs metric"),
    ({"metric": "rps", "target": 1, "scale_up_delay": "soon"}, "scaling.scale_up_delay",
     "cannot parse the duration"),
    ({"metric": "rps", "target": 1, "extra": 1}, "scaling.extra", "unknown field"),
])
def test_bad_scaling(scaling, path, fragment):
    assert fragment in problem_at(path, replicas="1..2", scaling=scaling)


# ---------------------------------------------------------------------------------------------
# rate_limits


def test_rate_limits_take_dstacks_defaults():
    config = parse(rate_limits=[{"prefix": "/api/auth/", "rps": 1}, {"rps": 4, "burst": 9},
                                {"prefix": "/v1", "rps": 0.5,
                                 "key": {"type": "header", "header": "Authorization"}}])
    assert config["rate_limits"] == [
        {"prefix": "/api/auth/", "key": {"type": "ip_address"}, "rps": 1.0, "burst": 0},
        {"prefix": "/", "key": {"type": "ip_address"}, "rps": 4.0, "burst": 9},
        {"prefix": "/v1", "key": {"type": "header", "header": "Authorization"}, "rps": 0.5,
         "burst": 0},
    ]
    assert parse(rate_limits=[{"rps": 1 / 60.0, "key": {"type": "ip_address"}}])["rate_limits"]


@pytest.mark.parametrize("limit, path, fragment", [
    ({"prefix": "/"}, "rate_limits[0]", "needs rps"),
    ({"rps": 0}, "rate_limits[0].rps", "at least 1/60"),
    ({"rps": 0.01}, "rate_limits[0].rps", "at least 1/60"),
    ({"rps": 2 ** 62}, "rate_limits[0].rps", "must be at most"),
    ({"rps": 1, "burst": -1}, "rate_limits[0].burst", "must be at least 0"),
    ({"rps": 1, "burst": 1.5}, "rate_limits[0].burst", "expected a number of requests"),
    ({"rps": 1, "prefix": "api"}, "rate_limits[0].prefix", "starts with /"),
    ({"rps": 1, "prefix": "/a b"}, "rate_limits[0].prefix", "no spaces"),
    ({"rps": 1, "prefix": "/a{b}"}, "rate_limits[0].prefix", "braces"),
    ({"rps": 1, "prefix": "/" + "a" * 4094}, "rate_limits[0].prefix", "at most 4094"),
    ({"rps": 1, "key": {"type": "cookie"}}, "rate_limits[0].key", "must be one of ip_address, header"),
    ({"rps": 1, "key": {"header": "X"}}, "rate_limits[0].key", "needs type"),
    ({"rps": 1, "key": {"type": "header"}}, "rate_limits[0].key", "needs header"),
    ({"rps": 1, "key": {"type": "header", "header": "X Y"}}, "rate_limits[0].key.header",
     "invalid header name"),
    ({"rps": 1, "key": {"type": "header", "header": "a" * 501}}, "rate_limits[0].key.header",
     "at most 500"),
    ({"rps": 1, "key": {"type": "ip_address", "header": "X"}}, "rate_limits[0].key.header",
     "unknown field"),
])
def test_bad_rate_limits(limit, path, fragment):
    assert fragment in problem_at(path, rate_limits=[limit])


def test_rate_limit_prefixes_are_unique():
    message = problem_at("rate_limits", rate_limits=[{"rps": 1}, {"prefix": "/", "rps": 2}])
    assert message == ("Prefixes ['/'] are used more than once. Each rate limit should have a "
                       "unique path prefix")


# ---------------------------------------------------------------------------------------------
# probes


def test_a_probe_gets_dstacks_defaults():
    (probe,) = parse(probes=[{"type": "http"}])["probes"]
    assert probe == {"type": "http", "url": "/", "method": "get", "headers": [], "body": None,
                     "timeout": 10, "interval": 15, "ready_after": 1, "until_ready": False}


def test_a_full_probe():
    (probe,) = parse(env=["KEY"], probes=[{
        "type": "http", "method": "post", "url": "/check-health",
        "headers": [{"name": "X-API-Key", "value": "${{ env.KEY }}"}],
        "body": '{"level": 2}', "timeout": "20s", "interval": "1m", "ready_after": 3,
        "until_ready": True}])["probes"]
    assert (probe["method"], probe["url"], probe["timeout"], probe["interval"]) \
        == ("post", "/check-health", 20, 60)
    assert probe["headers"] == [{"name": "X-API-Key", "value": "${{ env.KEY }}"}]
    assert (probe["body"], probe["ready_after"], probe["until_ready"]) == ('{"level": 2}', 3, True)


@pytest.mark.parametrize("probe, path, fragment", [
    ({}, "probes[0]", "needs type"),
    ({"type": "exec"}, "probes[0].type", "must be one of http"),
    ({"type": "http", "url": "health"}, "probes[0].url", "Must start with `/`"),
    ({"type": "http", "url": "/" + "a" * 2048}, "probes[0].url", "Cannot be longer than 2048"),
    ({"type": "http", "url": "/a\tb"}, "probes[0].url", "Cannot contain non-printable"),
    ({"type": "http", "method": "GET"}, "probes[0].method", "must be one of get, post"),
    ({"type": "http", "method": "options"}, "probes[0].method", "must be one of"),
    ({"type": "http", "method": "get", "body": "x"}, "probes[0]",
     "Cannot set request body for the `get` method"),
    ({"type": "http", "method": "head", "body": "x"}, "probes[0]",
     "Cannot set request body for the `head` method"),
    ({"type": "http", "method": "post", "body": ""}, "probes[0].body", "1 to 2048"),
    ({"type": "http", "timeout": 0}, "probes[0].timeout", "Probe timeout cannot be shorter than 1s"),
    ({"type": "http", "interval": "0s"}, "probes[0].interval",
     "Probe interval cannot be shorter than 1s"),
    ({"type": "http", "ready_after": 0}, "probes[0].ready_after", "must be at least 1"),
    ({"type": "http", "until_ready": "sure"}, "probes[0].until_ready", "expected true or false"),
    ({"type": "http", "headers": [{"name": "", "value": "v"}]}, "probes[0].headers[0].name",
     "1 to 256"),
    ({"type": "http", "headers": [{"name": "n"}]}, "probes[0].headers[0]", "needs value"),
    ({"type": "http", "headers": [{"name": "n", "value": "v"}] * 17}, "probes[0].headers",
     "at most 16"),
    ({"type": "http", "headers": None}, "probes[0].headers", "expected a list of headers"),
    ({"type": "http", "port": 80}, "probes[0].port", "unknown field"),
])
def test_bad_probes(probe, path, fragment):
    assert fragment in problem_at(path, probes=[probe])


def test_a_body_without_a_method_is_accepted_as_dstack_accepts_it():
    (probe,) = parse(probes=[{"type": "http", "body": "x"}])["probes"]
    assert (probe["method"], probe["body"]) == ("get", "x")


def test_probes_are_unique():
    assert problem_at("probes", probes=[{"type": "http"}, {"type": "http"}]) == \
        "Probes must be unique"
    # As dstack compares them as written: an omitted url is not the same as "/".
    assert len(parse(probes=[{"type": "http"}, {"type": "http", "url": "/"}])["probes"]) == 2


def test_probe_references_name_the_services_env_or_secrets_only():
    probe = {"type": "http", "method": "post", "url": "/h?k=${{ env.A }}",
             "body": "${{ secrets.TOKEN }}", "headers": [{"name": "X", "value": "${{ env.A }}"}]}
    assert parse(env=["A"], probes=[probe])["probes"][0]["url"] == "/h?k=${{ env.A }}"
    assert "not in this service's env" in problem_at("probes[0].headers[0].value", probes=[probe])
    assert "unknown reference" in problem_at(
        "probes[0].body", probes=[{"type": "http", "method": "post", "body": "${{ run.args }}"}])


# ---------------------------------------------------------------------------------------------
# replica groups


def test_replica_groups_are_parsed_with_dstacks_defaults():
    config = parse_only({"type": "service", "port": 8000, "image": "sglang", "groups": [
        {"replicas": "1..2", "scaling": {"metric": "rps", "target": 10}, "commands": ["a"],
         "resources": {"gpu": "48GB"}},
        {"name": "router", "count": 1, "router": {"type": "sglang"}},
    ]})
    first, second = config["groups"]
    assert (first["name"], first["replicas"], first["commands"]) == ("0", {"min": 1, "max": 2}, ["a"])
    assert first["scaling"]["target"] == 10.0
    assert first["resources"]["gpu"]["memory"] == {"min": 48, "max": 48}
    assert (second["name"], second["replicas"], second["router"]) == (
        "router", {"min": 1, "max": 1}, {"type": "sglang"})
    assert second["commands"] == [] and second["resources"]["cpu"]
    assert config["commands"] == [] and config["replicas"] == {"min": 1, "max": 1}


def test_the_legacy_list_form_of_replicas_is_groups():
    config = parse_only({"type": "service", "port": 8000, "replicas": [
        {"count": 2, "commands": ["a"]}, {"count": 1, "replicas": 3, "commands": ["b"]}]})
    assert [g["replicas"] for g in config["groups"]] == [{"min": 2, "max": 2}, {"min": 3, "max": 3}]


@pytest.mark.parametrize("data, path, fragment", [
    ({"groups": []}, "groups", "`groups` cannot be an empty list"),
    ({"groups": [{"commands": ["a"]}]}, "groups[0]", "needs replicas (or count)"),
    ({"groups": [{"replicas": 1, "commands": ["a"], "name": "A"}]}, "groups[0].name",
     "Resource name should match regex '^[a-z0-9][a-z0-9-]{0,39}$'"),
    ({"groups": [{"replicas": 1, "commands": ["a"], "name": "x"},
                 {"replicas": 1, "commands": ["b"], "name": "x"}]}, "groups",
     "Duplicate replica group names found: ['x']. Each replica group must have a unique name."),
    ({"groups": [{"replicas": "1..2", "commands": ["a"]}]}, "groups[0].replicas",
     "When you set `replicas` to a range, ensure to specify `scaling`."),
    ({"groups": [{"replicas": 2, "commands": ["a"], "scaling": {"metric": "rps", "target": 1}}]},
     "groups[0].replicas", "To use `scaling`, `replicas` must be set to a range."),
    ({"groups": [{"replicas": 1}]}, "groups",
     "Replica group '0': either `commands` or `image` must be set in the group, or `image` at the "
     "service level."),
    ({"groups": [{"replicas": 1, "image": "x", "python": "3.12"}]}, "groups[0].python",
     "`image` and `python` are mutually exclusive within a replica group"),
    ({"groups": [{"replicas": 1, "commands": ["a"], "docker": True, "nvcc": True}]},
     "groups[0].docker", "`nvcc` and `docker` are mutually exclusive within a replica group"),
    ({"groups": [{"replicas": 1, "commands": ["a"], "docker": True, "privileged": False}]},
     "groups[0].privileged", "`privileged: false` is incompatible with `docker: true`"),
    ({"groups": [{"replicas": 1, "commands": ["a"], "router": {"type": "nginx"}}]},
     "groups[0].router.type", "must be one of sglang, dynamo"),
    ({"groups": [{"replicas": 2, "commands": ["a"], "router": {"type": "sglang"}}]}, "groups",
     "For now replica group with `router` must have `replicas: 1`."),
    ({"groups": [{"replicas": 1, "commands": ["a"], "router": {}},
                 {"replicas": 1, "commands": ["a"], "router": {}, "name": "b"}]}, "groups",
     "At most one replica group may specify `router`."),
    ({"groups": [{"replicas": 1, "commands": ["a"], "nodes": 2}]}, "groups[0].nodes",
     "unknown field"),
    ({"groups": [{"replicas": 1, "commands": ["a"]}], "replicas": 2}, "replicas",
     "`replicas` and `groups` are mutually exclusive"),
    ({"groups": [{"replicas": 1, "commands": ["a"]}], "commands": ["x"]}, "commands",
     "Top-level `commands` is not allowed when `groups` is set."),
    ({"groups": [{"replicas": "1..2", "commands": ["a"], "scaling": {"metric": "rps", "target": 1}}],
      "scaling": {"metric": "rps", "target": 1}}, "scaling",
     "Top-level `scaling` is not allowed when `groups` is set."),
    ({"groups": [{"replicas": 1, "image": "y"}], "image": "x"}, "groups",
     "`image` is set at both the service level and in replica group(s) ['0']."),
    ({"groups": [{"replicas": 1, "commands": ["a"], "python": "3.12"}], "image": "x"}, "groups",
     "Service-level `image` conflicts with group-level `python` in replica group(s) ['0']."),
    ({"groups": [{"replicas": 1, "commands": ["a"], "spot_policy": "spot"}], "spot_policy": "auto"},
     "groups", "`spot_policy` is set at both the service level and in replica group(s) ['0']."),
])
def test_bad_replica_groups(data, path, fragment):
    full = dict({"type": "service", "port": 8000}, **data)
    assert fragment in problem_at(path, full)


# ---------------------------------------------------------------------------------------------
# What this version refuses: validate and apply share the verdict


@pytest.mark.parametrize("fields, path, fragment", [
    ({"https": True, "gateway": False}, "https", "the in-fleet proxy serves plain HTTP, and "
                                                 "`gateway: false` asks for it"),
    ({"replicas": "0..4", "scaling": {"metric": "rps", "target": 1}}, "replicas",
     "scale to zero is not supported yet: the in-fleet proxy cannot hold a request until a "
     "replica starts"),
    ({"replicas": 0}, "replicas", "a service needs at least one replica"),
    ({"model": {"type": "chat", "name": "m", "format": "tgi"}}, "model.format",
     "the model format 'tgi' is not supported"),
    ({"model": {"type": "chat", "name": "m", "format": "openai", "prefix": "/v1 x"}},
     "model.prefix", "the model prefix '/v1 x' is not supported"),
    ({"probes": [{"type": "http", "url": "/a b"}]}, "probes[0].url",
     "the probe URL '/a b' has a space"),
])
def test_what_this_version_does_not_run_is_refused_naming_the_field(fields, path, fragment):
    config = parse(**fields)
    assert fragment in refused(config)[path]


def test_replica_groups_of_fixed_counts_are_accepted_and_what_they_cannot_have_yet_refused():
    config = parse_only({"type": "service", "port": 8000, "replicas": [
        {"count": 1, "commands": ["a"]},
        {"name": "decode", "replicas": 2, "commands": ["b"], "resources": {"gpu": "A100:1"}}]})
    assert refused(config) == {}
    config = parse_only({"type": "service", "port": 8000, "groups": [
        {"replicas": "1..3", "scaling": {"metric": "rps", "target": 2}, "commands": ["a"]},
        {"replicas": 0, "commands": ["b"]},
        {"replicas": 1, "image": "vllm/vllm-openai", "spot_policy": "spot", "docker": False,
         "privileged": True},
        {"replicas": 1, "commands": ["r"], "router": {"type": "sglang"}}]})
    found = refused(config)
    assert set(found) == {"groups[0].replicas", "groups[1].replicas", "groups[2].image",
                          "groups[2].spot_policy", "groups[2].privileged", "groups[3].router"}
    assert found["groups[0].replicas"].startswith("a replica group's `replicas` is one number")
    assert found["groups[2].image"] == ("`image` per replica group is not supported yet: set it "
                                        "on the service, for all its groups")
    assert "a router replica group (sglang) is not supported yet" in found["groups[3].router"]


@pytest.mark.parametrize("fields", [
    {"gateway": False}, {"https": False}, {"https": "auto"}, {"replicas": 3}, {"auth": False},
    {"gateway": True}, {"gateway": "team-a/gw"}, {"https": True}, {"https": True, "gateway": "gw"},
    {"model": "m"}, {"strip_prefix": False}, {"rate_limits": [{"rps": 1}]},
    {"probes": [{"type": "http", "url": "/health"}]},
    {"replicas": "1..4", "scaling": {"metric": "rps", "target": 10, "window": "30s"}},
])
def test_everything_else_is_accepted(fields):
    assert refused(parse(**fields)) == {}


def test_the_run_refusals_of_a_task_apply_to_a_service_too():
    config = parse(schedule={"cron": "0 * * * *"}, backends=["kubernetes"], gateway=True)
    assert set(refused(config)) == {"schedule", "backends"}
    assert [n.where for n in support.notes(parse(dstack=True))] == ["dstack"]


def test_validate_file_reports_the_refusal_as_unsupported(tmp_path):
    path = tmp_path / "svc.dstack.yml"
    path.write_text("type: service\nport: 8000\nimage: nginx\nhttps: true\ngateway: false\n")
    result = spec.validate_file(str(path))
    assert result["ok"] and not result["runnable"]
    assert [u["path"] for u in result["unsupported"]] == ["https"]
