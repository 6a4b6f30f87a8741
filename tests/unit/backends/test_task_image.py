"""The local backend's task base image: recipe, tag and import instructions (no engine needed)."""

from __future__ import annotations

import pytest
from ansible_collections.gpufleet.cluster.plugins.module_utils.backends import local, task_image
from ansible_collections.gpufleet.cluster.plugins.module_utils.backends.docker_cli import Docker

from .fakes import fake


def test_recipe_has_what_a_distributed_job_needs():
    recipe = task_image.task_recipe()
    assert recipe["suite"] == "bookworm" and recipe["variant"] == "minbase"
    for package in ("openssh-server", "openssh-client", "openmpi-bin", "python3",
                    "python3-mpi4py", "iproute2", "iputils-ping", "procps", "util-linux",
                    "ca-certificates", "sudo"):
        assert package in recipe["packages"], package
    env = dict(recipe["env"])
    assert env["OMPI_MCA_pml"] == "^cm,ucx"
    assert env["OMPI_MCA_btl"] == "tcp,self"
    assert env["OMPI_MCA_btl_tcp_if_exclude"] == "lo,docker0"
    assert env["NCCL_SOCKET_IFNAME"] == "^docker,lo"
    assert "/usr/local/bin" in env["PATH"].split(":") and "/usr/sbin" in env["PATH"].split(":")
    assert recipe["workdir"] == "/dstack/run" and "/dstack/run" in recipe["dirs"]
    assert (recipe["user"], recipe["uid"]) == ("dstack", 1001)
    assert recipe["sudoers"] == "dstack ALL=(ALL) NOPASSWD:ALL\n"


def test_ref_is_the_repository_and_12_characters_of_the_digest():
    ref = task_image.task_image_ref()
    repository, tag = ref.split(":")
    assert repository == "gpufleet/task-base" == task_image.TASK_IMAGE_REPOSITORY
    assert tag == task_image.task_recipe_digest()[:12] and len(tag) == 12
    assert task_image.task_image_ref() == ref  # stable
    assert ref != local.image_ref()  # never the node image


@pytest.mark.parametrize("name, value", [
    ("TASK_PACKAGES", task_image.TASK_PACKAGES + ("vim",)),
    ("TASK_ENV", task_image.TASK_ENV + (("NCCL_DEBUG", "INFO"),)),
    ("TASK_UID", 1002),
    ("TASK_WORKDIR", "/workflow"),
])
def test_a_changed_recipe_is_a_new_image(monkeypatch, name, value):
    before = task_image.task_image_ref()
    monkeypatch.setattr(task_image, name, value)
    assert task_image.task_image_ref() != before


def test_import_instructions_set_env_workdir_and_command():
    changes = task_image.task_image_changes()
    assert 'ENV OMPI_MCA_pml="^cm,ucx"' in changes
    assert 'ENV OMPI_MCA_btl="tcp,self"' in changes
    assert 'ENV OMPI_MCA_btl_tcp_if_exclude="lo,docker0"' in changes
    assert 'ENV NCCL_SOCKET_IFNAME="^docker,lo"' in changes
    assert any(change.startswith('ENV PATH="/usr/local/sbin:') for change in changes)
    assert "WORKDIR /dstack/run" in changes
    assert changes[-1] == 'CMD ["/bin/bash"]'
    labels = task_image.task_image_labels()
    assert labels == {"gpufleet.recipe": task_image.task_recipe_digest(),
                      "gpufleet.image": "task-base", "gpufleet.pythons": "3.11"}
    # uv in the image works offline: the seed wheels are found locally, no index is asked
    assert 'ENV UV_FIND_LINKS="/opt/gpufleet/wheels"' in changes
    assert 'ENV UV_OFFLINE="1"' in changes


def test_existing_image_is_reused_and_check_mode_never_builds():
    labels = b'{"gpufleet.recipe": "%s"}' % task_image.task_recipe_digest().encode()
    runner = fake({"version": (0, b"20.10.24\n", b""), "image": (0, labels, b"")})
    assert task_image.ensure_task_image(Docker("docker", runner)) == (
        task_image.task_image_ref(), False,
    )
    # An image under the same tag from another recipe (or none at all) needs a build.
    stale = fake({"version": (0, b"20.10.24\n", b""),
                  "image": (0, b'{"gpufleet.recipe": "0000"}', b"")})
    missing = fake({"version": (0, b"20.10.24\n", b""), "image": (1, b"", b"No such image")})
    for runner in (stale, missing):
        assert task_image.ensure_task_image(Docker("docker", runner), check_mode=True) == (
            task_image.task_image_ref(), True,
        )
        assert not any(call[0] == "import" for call in runner.calls)


def test_build_without_root_says_to_become_root(monkeypatch, tmp_path):
    monkeypatch.setattr(local.shutil, "which", lambda name: "/usr/sbin/debootstrap")
    monkeypatch.setattr(local.os, "geteuid", lambda: 1000)
    with pytest.raises(local.BuildError) as info:
        task_image.build_task_image(Docker("docker", fake({})), task_image.task_image_ref(),
                                    workdir=str(tmp_path))
    assert "task base image" in str(info.value) and "root" in str(info.value)
    assert "become: true" in str(info.value)


def test_build_without_debootstrap_says_what_to_install(monkeypatch, tmp_path):
    monkeypatch.setattr(local.shutil, "which", lambda name: None)
    real_exists = local.os.path.exists
    monkeypatch.setattr(local.os.path, "exists",
                        lambda path: path != "/usr/sbin/debootstrap" and real_exists(path))
    with pytest.raises(local.BuildError) as info:
        task_image.build_task_image(Docker("docker", fake({})), task_image.task_image_ref(),
                                    workdir=str(tmp_path))
    assert "apt-get install -y debootstrap" in str(info.value)
    assert "task base image" in str(info.value)


def test_user_and_directories_are_added_to_a_root_filesystem(monkeypatch, tmp_path):
    ran = []

    class Done(object):
        returncode = 0
        stdout = b""

    class Python(object):
        returncode = 0
        stdout = b"3.11\n"

    monkeypatch.setattr(task_image.subprocess, "run",
                        lambda argv, **kw: ran.append(argv) or (Python if "python3" in argv
                                                                else Done))
    ssh = tmp_path / "etc" / "ssh"
    ssh.mkdir(parents=True)
    (ssh / "ssh_host_ed25519_key").write_text("secret")
    (ssh / "sshd_config").write_text("# kept")
    lists = tmp_path / "var" / "lib" / "apt" / "lists"
    lists.mkdir(parents=True)
    (lists / "deb.debian.org_dists_bookworm_InRelease").write_text("x")
    (tmp_path / "var" / "cache" / "apt").mkdir(parents=True)
    (tmp_path / "var" / "cache" / "apt" / "pkgcache.bin").write_text("x")

    task_image.install_task_files(str(tmp_path))

    assert (tmp_path / "dstack" / "run").is_dir() and (tmp_path / "run" / "sshd").is_dir()
    sudoers = tmp_path / "etc" / "sudoers.d" / "dstack"
    assert sudoers.read_text() == "dstack ALL=(ALL) NOPASSWD:ALL\n"
    assert oct(sudoers.stat().st_mode & 0o777) == "0o440"
    assert ran[0] == ["chroot", str(tmp_path), "useradd", "--uid", "1001", "--user-group",
                      "--create-home", "--shell", "/bin/bash", "dstack"]
    assert ran[1][:3] == ["chroot", str(tmp_path), "python3"] and len(ran) == 2
    assert sorted(p.name for p in ssh.iterdir()) == ["sshd_config"]
    assert list(lists.iterdir()) == []
    assert not (tmp_path / "var" / "cache" / "apt" / "pkgcache.bin").exists()


def test_failed_useradd_names_the_user(monkeypatch, tmp_path):
    class Failed(object):
        returncode = 4
        stdout = b"useradd: UID 1001 is not unique"

    monkeypatch.setattr(task_image.subprocess, "run", lambda argv, **kw: Failed)
    with pytest.raises(local.BuildError) as info:
        task_image.install_task_files(str(tmp_path))
    assert "dstack" in str(info.value) and "1001 is not unique" in str(info.value)


def test_a_python_other_than_the_pinned_one_fails_the_build(monkeypatch, tmp_path):
    class Python(object):
        returncode = 0
        stdout = b"3.12\n"

    monkeypatch.setattr(task_image.subprocess, "run", lambda argv, **kw: Python)
    with pytest.raises(local.BuildError, match="python3 is 3.12, not 3.11"):
        task_image.install_task_files(str(tmp_path))
