"""User input echoed in messages is shortened by one helper (core.text): a bad value of any
length shows its first characters and how long it is, wherever a message quotes it."""

from __future__ import annotations

import textwrap

import pytest
from ansible_collections.gpufleet.cluster.plugins.module_utils import spec
from ansible_collections.gpufleet.cluster.plugins.module_utils.core.text import quote, shorten
from ansible_collections.gpufleet.cluster.plugins.module_utils.spec import interpolation
from ansible_collections.gpufleet.cluster.plugins.module_utils.tasks import environment
from ansible_collections.gpufleet.cluster.plugins.module_utils.tasks.errors import PlanError
from ansible_collections.gpufleet.cluster.plugins.plugin_utils import secret_store

LONG = "a" * 5000


def test_shorten_and_quote():
    assert shorten("short") == "short"
    assert shorten("x" * 60) == "x" * 60
    assert shorten("x" * 61) == "x" * 60 + "... (61 characters)"
    assert quote("it's") == repr("it's")
    assert quote("a\nb" * 40) == repr(("a\nb" * 40)[:60]) + "... (120 characters)"
    assert shorten("y" * 300, 200) == "y" * 200 + "... (300 characters)"


def test_a_long_secret_name_is_shortened():
    with pytest.raises(secret_store.SecretStoreError) as info:
        secret_store.check_name(LONG)
    assert str(info.value) == ("invalid secret name %r... (5000 characters): use letters, "
                               "digits and _, do not start with a digit (at most 200 "
                               "characters)" % ("a" * 60))


def test_a_missing_secret_with_a_long_name_is_shortened():
    config = spec.parse_data({"type": "task", "commands": ["true"],
                              "env": ["TOKEN=${{ secrets.%s }}" % LONG]})[0]
    with pytest.raises(PlanError) as info:
        environment.resolve_env(config, {}, {})
    assert "[%s... (5000 characters)]" % ("a" * 60) in str(info.value)
    assert len(str(info.value)) < 300


def test_interpolation_shortens_the_names_it_refuses():
    with pytest.raises(interpolation.InterpolationError) as info:
        interpolation.check("${{ secrets.%s- }}" % LONG, {"secrets": None})
    assert str(info.value) == "illegal reference name ${{ secrets.%s... (5009 characters) }}" % (
        "a" * 52)
    with pytest.raises(interpolation.InterpolationError) as info:
        interpolation.interpolate("${{ secrets.%s }}" % LONG, {"secrets": {}})
    assert len(str(info.value)) < 200


DOCUMENTS = [
    # an unknown key, at the top and nested
    {"type": "task", "commands": ["x"], LONG: 1},
    {"type": "task", "commands": ["x"], "resources": {LONG + "!": 1}},
    # keys and values that fail their rules
    {"type": "task", "commands": ["x"], "tags": {LONG: "v"}},
    {"type": "task", "commands": ["x"], "env": {LONG + "=": "v"}},
    {"type": "task", "commands": ["x"], "env": [LONG + "-=1"]},
    {"type": "task", "commands": ["x"], "env": [LONG + "=1", LONG + "=2"]},
    {"type": "task", "commands": ["x"], "name": LONG},
    {"type": "task", "commands": ["x"], "instances": [{LONG: 1, "fleet": "f"}]},
    {"type": "task", "commands": ["x"], "volumes": [{LONG: 1, "path": "/p"}]},
    {"type": "task", "commands": ["x"], "fleets": [LONG + "/x/y"]},
    {"type": "task", "commands": ["${{ secrets.%s- }}" % LONG]},
    {"type": "task", "image": "x", "registry_auth": {
        "username": "${{ env.%s }}" % LONG, "password": "p"}},
    {"type": "fleet", "ssh_config": {"hosts": [LONG, LONG], "user": "u",
                                     "identity_file": "k"}},
    {"type": "fleet", "nodes": 1, "backends": [LONG]},
    {"type": "volume", "backend": "aws", "region": LONG, "size": LONG},
]


@pytest.mark.parametrize("document", DOCUMENTS, ids=range(len(DOCUMENTS)))
def test_the_config_model_never_echoes_a_long_value_whole(document):
    with pytest.raises(spec.SpecError) as info:
        spec.parse_data(document, "t.yml")
    for problem in info.value.problems:
        assert len(str(problem)) < 400, str(problem)[:500]
    assert "characters)" in str(info.value), str(info.value)[:500]


def test_a_repeated_long_key_is_shortened_in_its_warning():
    text = textwrap.dedent("""\
        type: task
        commands: [x]
        env:
          ? %s
          : a
          ? %s
          : b
        """ % (LONG, LONG))
    _config, warnings = spec.parse_text(text, "t.yml")
    assert warnings and all(len(str(w)) < 400 for w in warnings)


def test_run_and_fleet_names_nothing_has_are_shortened():
    from ansible_collections.gpufleet.cluster.plugins.module_utils.fleets import lookup
    from ansible_collections.gpufleet.cluster.plugins.module_utils.tasks import listing
    from ansible_collections.gpufleet.cluster.plugins.module_utils.tasks.errors import RunError

    assert lookup.not_found_message(LONG) == "Fleet %s... (5000 characters) does not exist" % (
        "a" * 60)
    with pytest.raises(RunError) as info:
        listing.find_run({}, LONG, surveyed=({}, {}))
    assert str(info.value).startswith("no run named %s... (5000 characters) on the fleets' "
                                      "hosts" % ("a" * 60))
