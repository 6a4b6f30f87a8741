from ansible_collections.gpufleet.cluster.plugins.module_utils import spec


def test_spec_parses_a_minimal_task():
    config, warnings = spec.parse_data({"type": "task", "commands": ["true"]})
    assert config["nodes"] == 1
    assert warnings == []
