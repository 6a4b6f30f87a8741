"""The local backend's pure parts: image recipe, engine messages, run flags (no engine needed)."""

from __future__ import annotations

import pytest
from ansible_collections.gpufleet.cluster.plugins.module_utils.backends import local
from ansible_collections.gpufleet.cluster.plugins.module_utils.backends.docker_cli import (
    Docker,
    DockerError,
)

from .fakes import fake


def test_image_tag_is_the_recipe_digest(monkeypatch):
    ref = local.image_ref()
    assert ref == "gpufleet/node:" + local.recipe_digest()[:12]
    assert local.image_ref() == ref  # stable
    monkeypatch.setattr(local, "NODE_PACKAGES", local.NODE_PACKAGES + ("vim",))
    assert local.image_ref() != ref  # a changed recipe is a new image


def test_missing_docker_command_says_what_to_install():
    docker = Docker(binary="", runner=fake({}))
    docker.binary = None
    with pytest.raises(DockerError) as info:
        docker.ping()
    assert "apt-get install -y docker.io" in str(info.value)


def test_engine_not_running_says_how_to_start_it():
    runner = fake({"version": (1, b"", b"Cannot connect to the Docker daemon at unix:///var/run/docker.sock")})
    with pytest.raises(DockerError) as info:
        Docker(binary="docker", runner=runner).ping()
    message = str(info.value)
    assert "not running" in message and "systemctl start docker" in message
    assert "Cannot connect to the Docker daemon" in message


def test_existing_image_of_the_same_recipe_is_reused_and_check_mode_never_builds():
    labels = b'{"gpufleet.recipe": "%s"}' % local.recipe_digest().encode()
    runner = fake({"version": (0, b"20.10.24\n", b""), "image": (0, labels, b"")})
    assert local.ensure_node_image(Docker("docker", runner)) == (local.image_ref(), False)

    missing = fake({"version": (0, b"20.10.24\n", b""), "image": (1, b"", b"No such image")})
    assert local.ensure_node_image(Docker("docker", missing), check_mode=True) == (
        local.image_ref(), True,
    )
    assert not any(call[0] == "import" for call in missing.calls)


class _Engine(object):
    """Stands in for Docker in ensure_recipe_image: an image store shared between threads."""

    def __init__(self):
        self.labels = None

    def ping(self):
        pass

    def image_labels(self, ref):
        return self.labels


def test_two_builders_of_one_missing_image_build_it_once(tmp_path, monkeypatch):
    """Both find the image missing; the second waits on the build lock, then finds it made."""
    import threading

    monkeypatch.setattr("tempfile.tempdir", str(tmp_path))
    engine, builds = _Engine(), []
    first_building, release = threading.Event(), threading.Event()

    def build(ref):
        builds.append(ref)
        first_building.set()
        assert release.wait(10)
        engine.labels = {"gpufleet.recipe": "d1"}

    results = []
    first = threading.Thread(target=lambda: results.append(
        local.ensure_recipe_image(engine, "gpufleet/x:1", "d1", False, build)))
    first.start()
    assert first_building.wait(10)
    second = threading.Thread(target=lambda: results.append(
        local.ensure_recipe_image(engine, "gpufleet/x:1", "d1", False, build)))
    second.start()
    second.join(0.3)
    assert second.is_alive()        # it waits for the build under way
    release.set()
    first.join(10)
    second.join(10)
    assert builds == ["gpufleet/x:1"]
    assert sorted(results) == [("gpufleet/x:1", False), ("gpufleet/x:1", True)]
    # Another recipe is another image: it is built, not taken for the first.
    engine.labels = {"gpufleet.recipe": "d1"}
    assert local.ensure_recipe_image(engine, "gpufleet/x:1", "d2", False, builds.append) == (
        "gpufleet/x:1", True)
    assert builds == ["gpufleet/x:1", "gpufleet/x:1"]


def test_failed_commands_name_the_subcommand_and_engine_error():
    runner = fake({"network": (1, b"", b"network with name x already exists")})
    with pytest.raises(DockerError) as info:
        Docker("docker", runner).run("network", "create", "x")
    assert "docker network failed (exit 1)" in str(info.value)
    assert "already exists" in str(info.value)


def test_privileged_then_fallback_flags():
    assert local.run_flags(True) == ("--privileged",)
    fallback = local.run_flags(False)
    assert "--privileged" not in fallback and "--cap-drop=SYS_RESOURCE" in fallback
    assert local.privilege_refused(
        "OCI runtime create failed: runc create failed: unable to start container process: "
        "unable to apply caps: operation not permitted: unknown"
    )
    assert not local.privilege_refused("no space left on device")


def test_a_node_carries_its_creator_and_the_records_say_it():
    runner = fake({})
    local.start_node(Docker(binary="docker", runner=runner), "lab", 0, "any", "img", "ssh-ed25519 K",
                     "2026-01-01T00:00:00Z", privileged=True, made_from="/s", creator="carol")
    run = next(c for c in runner.calls if c[0] == "run")
    assert "%s=carol" % local.CREATOR_LABEL in run and "%s=/s" % local.MADE_FROM_LABEL in run
    node = {"name": "gpufleet-lab-0", "state": "running", "created": None,
            "networks": {"gpufleet-lab-0": "10.0.0.2"},
            "labels": {local.FLEET_LABEL: "lab", local.INSTANCE_LABEL: "0",
                       local.MADE_FROM_LABEL: "/s", local.CREATOR_LABEL: "carol"}}
    record = local.instance_records([node], "lab", 1, "/k")[0]
    assert record["creator"] == "carol" and record["made_from"] == "/s"
    del node["labels"][local.CREATOR_LABEL]
    assert "creator" not in local.instance_records([node], "lab", 1, "/k")[0]
