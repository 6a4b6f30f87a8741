"""``type: gateway`` (docs/reference/configuration.md#gateway) and its host's fleet."""

from __future__ import annotations

import pytest
from ansible_collections.gpufleet.cluster.plugins.module_utils import spec
from ansible_collections.gpufleet.cluster.plugins.module_utils.spec import support
from ansible_collections.gpufleet.cluster.plugins.module_utils.spec.gateway import GATEWAY_TAG, https

from .helpers import assert_rejected, parse


def test_dstacks_gateway_file():
    config = parse("""\
        type: gateway
        name: example-gateway
        backend: aws
        region: eu-west-1
        domain: '*.${{ run.project_name }}.Example.com'
        default: true
        tags: {team: ml}
        """)
    assert config == {
        "type": "gateway", "name": "example-gateway", "default": True, "backend": "aws",
        "region": "eu-west-1", "instance_type": None, "domain": "main.example.com",
        "public_ip": True, "certificate": {"type": "lets-encrypt"}, "replicas": None,
        "tags": {"team": "ml"}}
    assert https(config) and support.refusals(config) == []


def test_a_local_gateway_signs_its_own_certificate_unless_told_otherwise():
    config = parse("type: gateway\nbackend: local\ndomain: gw.test\n")
    assert (config["region"], config["certificate"]) == ("local", {"type": "self-signed"})
    plain = parse("type: gateway\nbackend: local\ndomain: gw.test\ncertificate: null\n")
    assert plain["certificate"] is None and not https(plain)
    assert parse("type: gateway\nbackend: local\ncertificate: {type: lets-encrypt}\n")[
        "certificate"] == {"type": "lets-encrypt"}


@pytest.mark.parametrize("text, where, fragment", [
    ("type: gateway\nregion: r\n", "backend", "a gateway needs backend"),
    ("type: gateway\nbackend: moon\nregion: r\n", "backend", "unknown backend 'moon'"),
    ("type: gateway\nbackend: aws\n", "region", "a gateway on aws needs region"),
    ("type: gateway\nbackend: aws\nregion: r\ndomain: localhost\n", "domain", "invalid domain"),
    ("type: gateway\nbackend: aws\nregion: r\ndomain: a..b\n", "domain", "invalid domain"),
    ("type: gateway\nbackend: aws\nregion: r\ncertificate: {type: acme}\n", "certificate.type",
     "unknown certificate type 'acme'"),
    ("type: gateway\nbackend: aws\nregion: r\ncertificate: {type: acm}\n", "certificate.arn",
     "needs arn"),
    ("type: gateway\nbackend: aws\nregion: r\nreplicas: 0\n", "replicas", "at least 1"),
    ("type: gateway\nbackend: aws\nregion: r\nport: 80\n", "port", ""),
])
def test_bad_gateway_files_name_the_field(text, where, fragment):
    assert_rejected(text, where, fragment)


@pytest.mark.parametrize("extra, where, fragment", [
    ("backend: azure\nregion: r\n", "backend", "azure cannot provision nodes"),
    ("backend: aws\nregion: r\nreplicas: 2\n", "replicas", "one host"),
    ("backend: aws\nregion: r\ncertificate: {type: acm, arn: 'arn:x'}\n", "certificate.type",
     "load balancer"),
])
def test_what_gpufleet_does_not_make_is_refused_naming_the_field(extra, where, fragment):
    refused = dict((p.where, p.message)
                   for p in support.refusals(parse("type: gateway\n" + extra)))
    assert fragment in refused[where], refused


def test_a_gateways_host_is_a_one_node_fleet_marked_as_a_gateway(tmp_path):
    path = tmp_path / "gw.dstack.yml"
    path.write_text("type: gateway\nname: gw\nbackend: aws\nregion: eu-west-1\n"
                    "instance_type: t3.small\ndomain: example.com\ntags: {team: ml}\n")
    fleet, _warnings = spec.parse_hosts_file(str(path))
    assert (fleet["type"], fleet["name"], fleet["nodes"], fleet["backends"], fleet["regions"],
            fleet["instance_types"], fleet["spot_policy"]) == (
        "fleet", "gw", {"min": 1, "target": 1, "max": 1}, ["aws"], ["eu-west-1"], ["t3.small"],
        "on-demand")
    assert fleet["tags"] == {"team": "ml", GATEWAY_TAG: "true"}
    assert fleet["gateway"] == {"domain": "example.com", "default": None, "public_ip": True,
                                "certificate": {"type": "lets-encrypt"}}
    # Without an instance type: a small host with no GPU.
    local, _warnings = spec.parse_hosts_data({"type": "gateway", "name": "gw", "backend": "local"})
    assert local["resources"]["gpu"]["count"] == {"min": 0, "max": 0}
    assert local["resources"]["cpu"]["count"]["min"] == 2
    # A fleet file reads as it is; another kind is refused naming the type.
    assert spec.parse_hosts_data({"type": "fleet", "name": "ff", "nodes": 1})[0].get("gateway") is None
    with pytest.raises(spec.SpecError, match="expected a fleet or gateway configuration"):
        spec.parse_hosts_data({"type": "task", "commands": ["x"]})
