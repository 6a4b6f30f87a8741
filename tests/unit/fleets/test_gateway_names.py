"""A gateway's host and a fleet never share a name (fleets.apply): the second is refused
before anything is made or remembered, whichever came first."""

from __future__ import annotations

import pytest
from ansible_collections.gpufleet.cluster.plugins.module_utils.fleets import apply, state
from ansible_collections.gpufleet.cluster.plugins.module_utils.spec import parse_hosts_file

SSH_FLEET = ("type: fleet\nname: dup\nssh_config:\n  user: ubuntu\n  identity_file: /k\n"
             "  hosts: [10.0.0.1]\n")
GATEWAY = "type: gateway\nname: dup\nbackend: local\ndomain: example.com\n"


def remembered(tmp_path, text):
    path = tmp_path / "first.dstack.yml"
    path.write_text(text)
    root = str(tmp_path / "state")
    state.remember_file(root, "dup", str(path))
    return root


def test_a_fleet_cannot_take_a_gateways_name(tmp_path):
    root = remembered(tmp_path, GATEWAY)
    second = tmp_path / "fleet.dstack.yml"
    second.write_text(SSH_FLEET)
    with pytest.raises(apply.ApplyError, match="dup is the name of a gateway already: give the "
                                               "fleet another name, or delete the gateway"):
        apply.apply(parse_hosts_file(str(second))[0], str(second), None, root)
    assert state.remembered_files(root)["dup"] == str(tmp_path / "first.dstack.yml")


def test_a_gateway_cannot_take_a_fleets_name(tmp_path):
    root = remembered(tmp_path, SSH_FLEET)
    second = tmp_path / "gw.dstack.yml"
    second.write_text(GATEWAY)
    with pytest.raises(apply.ApplyError, match="dup is the name of a fleet already"):
        apply.apply(parse_hosts_file(str(second))[0], str(second), None, root, check_mode=True)


def test_the_same_kind_applies_again(tmp_path):
    root = remembered(tmp_path, SSH_FLEET)
    record, _changed = apply.apply(parse_hosts_file(str(tmp_path / "first.dstack.yml"))[0],
                                   str(tmp_path / "first.dstack.yml"), None, root)
    assert record["name"] == "dup" and record["gateway"] is None
