"""Every host role's interface: argument specs that match its defaults, prefixed names, and
no input named like the ``<role>_check`` fact the role publishes (a role that set such a fact
would fail its own argument validation the next time it is included in the same play)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

ROLES = Path(__file__).resolve().parents[3] / "roles"
HOST_ROLES = sorted(p.name for p in ROLES.iterdir() if (p / "meta" / "argument_specs.yml").exists())


def spec_options(role):
    specs = yaml.safe_load((ROLES / role / "meta" / "argument_specs.yml").read_text())
    options = {}
    for entry in specs["argument_specs"].values():
        options.update(entry.get("options") or {})
    return options


def defaults(role):
    path = ROLES / role / "defaults" / "main.yml"
    return yaml.safe_load(path.read_text()) or {} if path.exists() else {}


def test_the_host_roles_are_all_here():
    assert {"docker", "nvidia", "amd", "efa", "infiniband", "gcp_gpudirect", "firewall", "dcgm",
            "nccl_tests"} <= set(HOST_ROLES)


@pytest.mark.parametrize("role", HOST_ROLES)
def test_no_input_is_named_like_the_result_fact(role):
    assert role + "_check" not in spec_options(role)
    assert role + "_check" not in defaults(role)


@pytest.mark.parametrize("role", HOST_ROLES)
def test_every_default_is_a_documented_prefixed_option(role):
    options = spec_options(role)
    for name in defaults(role):
        assert name.startswith(role + "_"), name
        assert name in options, "%s: %s has a default but no argument spec" % (role, name)
    for name, option in options.items():
        assert name.startswith(role + "_"), name
        assert option.get("description"), "%s: %s has no description" % (role, name)
