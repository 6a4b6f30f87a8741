# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""``python`` and dstack's /dstack/venv (tasks.python_env), and the uv bundle of the local task
image (backends.uv_bundle)."""

from __future__ import annotations

import hashlib
import os
import sys
import zipfile

import pytest
from ansible_collections.gpufleet.cluster.plugins.module_utils.backends import local, uv_bundle
from ansible_collections.gpufleet.cluster.plugins.module_utils.tasks import python_env
from ansible_collections.gpufleet.cluster.plugins.module_utils.tasks.command import command_script

from ..configs import task


def test_only_dstacks_default_image_gets_the_venv():
    assert python_env.wants_venv(task())
    assert python_env.wants_venv(task(python="3.12", nvcc=True))
    assert not python_env.wants_venv(task(image="ubuntu"))
    assert not python_env.wants_venv(task(entrypoint="python"))
    assert not python_env.wants_venv(task(docker=True))
    assert python_env.choose(task(image="ubuntu")) is None


def test_dstacks_images_take_the_asked_version_or_the_controllers():
    assert python_env.choose(task(python="3.13")) == {
        "python": "3.13", "system_site_packages": False}
    here = "%d.%d" % sys.version_info[:2]
    assert python_env.choose(task()) == {"python": here, "system_site_packages": False}


def test_the_local_image_offers_its_own_python_and_fetches_others():
    assert python_env.choose(task(), available=("3.11",)) == {
        "python": "3.11", "system_site_packages": True}
    assert python_env.choose(task(python="3.11"), available=("3.11",))["python"] == "3.11"
    # Another version is not refused: the job downloads it (no Debian site packages then).
    assert python_env.choose(task(python="3.12"), available=("3.11",)) == {
        "python": "3.12", "system_site_packages": False, "fetch": ["3.11"]}


def test_a_fetched_python_is_kept_in_the_nodes_folder_and_its_host_named():
    setup = python_env.choose(task(python="3.13"), available=("3.11",))
    on_host = python_env.for_host(setup, "tk-1-0")
    assert on_host["host"] == "tk-1-0" and "host" not in setup
    assert python_env.cache_mount(on_host) == {
        "kind": "instance", "source": "/var/lib/gpufleet/pythons",
        "target": "/opt/gpufleet/pythons", "optional": False}
    image_python = python_env.choose(task(), available=("3.11",))
    assert python_env.for_host(image_python, "tk-1-0") is image_python
    assert python_env.cache_mount(image_python) is None
    assert python_env.fetch_commands(image_python) == []


def test_the_fetch_comes_before_the_venv_which_uses_the_fetched_python():
    setup = python_env.for_host(python_env.choose(task(python="3.12"), available=("3.11",)),
                                "tk-1-0")
    commands = python_env.setup_commands(setup)
    assert commands[0] == ("eval $(echo 'export UV_PYTHON_INSTALL_DIR=/opt/gpufleet/pythons' "
                           "| sudo tee -a /dstack/profile)")
    assert commands[1].startswith(
        "if ! _gf_uv=$(sudo -E UV_OFFLINE=0 UV_PYTHON_DOWNLOADS=manual "
        "UV_PYTHON_INSTALL_DIR=/opt/gpufleet/pythons uv python install 3.12 2>&1); then "
        "printf '%s\\n' \"$_gf_uv\" '")
    assert commands[1].endswith("' >&2; exit 1; fi")
    assert commands[6] == "uv venv -q --prompt dstack -p 3.12 --seed $DSTACK_VENV_DIR"


def test_the_fetch_refusal_names_the_version_the_host_and_what_to_do():
    setup = python_env.for_host(python_env.choose(task(python="3.12"), available=("3.11",)),
                                "tk-1-0")
    assert python_env.fetch_refusal(setup) == (
        "gpufleet: python: 3.12 is not in the local task image (it has Python 3.11), and uv "
        "could not download it on host tk-1-0 (python-build-standalone's builds, from "
        "github.com or the mirror UV_PYTHON_INSTALL_MIRROR names). Give the task an image "
        "with Python 3.12, let the host reach github.com, set UV_PYTHON_INSTALL_MIRROR in the "
        "task's env to a mirror it can reach, or set python: \"3.11\"")


def fake_tools(folder, uv_rc):
    """``sudo`` that runs its command (dropping -E, taking VAR=value words as env does) and
    ``uv`` that records its arguments and the variables it sees, says something on stdout and
    stderr, then exits with ``uv_rc``."""
    bindir = folder / "bin"
    bindir.mkdir()
    (bindir / "sudo").write_text('#!/bin/sh\n[ "$1" = -E ] && shift\nexec env "$@"\n')
    (bindir / "uv").write_text(
        '#!/bin/sh\necho "uv $* | $UV_OFFLINE $UV_PYTHON_DOWNLOADS $UV_PYTHON_INSTALL_DIR '
        '$UV_PYTHON_INSTALL_MIRROR" >> %s\necho uv says\necho error: no route >&2\n'
        'exit %d\n' % (folder / "calls", uv_rc))
    for tool in ("sudo", "uv"):
        os.chmod(str(bindir / tool), 0o755)
    return str(bindir)


@pytest.mark.parametrize("uv_rc", [0, 1])
def test_the_fetch_runs_uv_online_with_the_jobs_mirror_or_ends_the_job(tmp_path, uv_rc):
    import subprocess

    setup = python_env.for_host(python_env.choose(task(python="3.12"), available=("3.11",)),
                                "tk-1-0")
    script = python_env.fetch_commands(setup)[1] + " && echo the task commands"
    env = {"PATH": fake_tools(tmp_path, uv_rc) + ":/usr/bin:/bin", "UV_OFFLINE": "1",
           "UV_PYTHON_DOWNLOADS": "never", "UV_PYTHON_INSTALL_MIRROR": "http://mirror.lan/pbs"}
    proc = subprocess.run(["/bin/sh", "-c", script], env=env, stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, universal_newlines=True, check=False)
    assert (tmp_path / "calls").read_text() == (
        "uv python install 3.12 | 0 manual /opt/gpufleet/pythons http://mirror.lan/pbs\n")
    if uv_rc == 0:   # uv's output is shown only when it fails
        assert (proc.returncode, proc.stdout, proc.stderr) == (0, "the task commands\n", "")
    else:
        assert (proc.returncode, proc.stdout) == (1, "")
        assert proc.stderr == ("uv says\nerror: no route\n" + python_env.fetch_refusal(setup)
                               + "\n")


def test_the_venv_commands_come_first_as_dstack_writes_them():
    script = command_script(task(python="3.12"), python_setup={"python": "3.12"})
    line = script.splitlines()[-1]
    assert line.startswith("exec '/bin/bash' -c ")
    expected = (
        "eval $(echo 'export DSTACK_VENV_DIR=/dstack/venv' | sudo tee -a /dstack/profile) && "
        "sudo rm -rf $DSTACK_VENV_DIR && sudo mkdir $DSTACK_VENV_DIR && "
        "sudo chown $(id -u):$(id -g) $DSTACK_VENV_DIR && "
        "uv venv -q --prompt dstack -p 3.12 --seed $DSTACK_VENV_DIR && "
        "eval $(echo '. $DSTACK_VENV_DIR/bin/activate' | sudo tee -a /dstack/profile) && "
        "python train.py")
    assert expected.replace("'", "'\\''") in line
    local_line = command_script(task(), python_setup={"python": "3.11",
                                                      "system_site_packages": True})
    assert "-p 3.11 --seed --system-site-packages $DSTACK_VENV_DIR" in local_line
    assert "uv venv" not in command_script(task(image="ubuntu"))


def fake_wheel(folder, name, version, tag="py3-none-any", uv=False):
    path = os.path.join(folder, "%s-%s-%s.whl" % (name, version, tag))
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("%s/__init__.py" % name, "")
        if uv:
            archive.writestr("uv-%s.data/scripts/uv" % version, "#!/bin/sh\necho uv\n")
            archive.writestr("uv-%s.data/scripts/uvx" % version, "#!/bin/sh\necho uvx\n")
    with open(path, "rb") as handle:
        return path, hashlib.sha256(handle.read()).hexdigest()


@pytest.fixture
def pins(tmp_path, monkeypatch):
    """Two pinned wheels whose files a fake pip 'downloads' from a folder."""
    index = tmp_path / "index"
    index.mkdir()
    uv_path, uv_sha = fake_wheel(str(index), "uv", "9.9", "py3-none-manylinux_2_17_x86_64",
                                 uv=True)
    pip_path, pip_sha = fake_wheel(str(index), "pip", "1.0")
    monkeypatch.setattr(uv_bundle, "PINNED", (("uv", "9.9", {"x86_64": uv_sha}),
                                              ("pip", "1.0", {"any": pip_sha})))
    return {"uv": uv_path, "pip": pip_path}


class FakePip(object):
    """pip download: copies the named wheel from the index folder into -d."""

    def __init__(self, files, rc=0):
        self.files = files
        self.rc = rc
        self.calls = []

    def __call__(self, argv, **kwargs):
        import shutil

        self.calls.append(argv)
        name = argv[-1].split("==")[0]
        if self.rc == 0:
            shutil.copy(self.files[name], argv[argv.index("-d") + 1])

        class Done(object):
            returncode = self.rc
            stdout = b"ERROR: No matching distribution found for x\n"
        return Done


def test_wheels_are_downloaded_once_checked_and_cached(pins, tmp_path):
    cache = str(tmp_path / "cache")
    pip = FakePip(pins)
    got = uv_bundle.fetch(cache, arch="x86_64", runner=pip)
    assert sorted(got) == ["pip", "uv"] and all(os.path.dirname(p) == cache
                                                for p in got.values())
    uv_call = next(c for c in pip.calls if c[-1] == "uv==9.9")
    assert uv_call[uv_call.index("--platform") + 1] == "manylinux_2_17_x86_64"
    assert "--platform" not in next(c for c in pip.calls if c[-1] == "pip==1.0")
    assert uv_bundle.fetch(cache, arch="x86_64", runner=FakePip(pins, rc=1)) == got


def test_a_wheel_with_another_hash_or_no_download_is_a_build_error(pins, tmp_path):
    with pytest.raises(local.BuildError, match="pip could not download it"):
        uv_bundle.fetch(str(tmp_path / "a"), arch="x86_64", runner=FakePip(pins, rc=1))
    with open(pins["pip"], "ab") as handle:
        handle.write(b"tampered")
    with pytest.raises(local.BuildError, match="its SHA-256 is not the pinned one"):
        uv_bundle.fetch(str(tmp_path / "b"), arch="x86_64", runner=FakePip(pins))
    with pytest.raises(local.BuildError, match="for x86_64 only; this controller is riscv64"):
        uv_bundle.fetch(str(tmp_path / "c"), arch="riscv64", runner=FakePip(pins))


def test_uv_and_the_wheels_go_into_the_root_filesystem(pins, tmp_path):
    rootfs = tmp_path / "rootfs"
    uv_bundle.install(str(rootfs), pins)
    uv = rootfs / "usr" / "local" / "bin" / "uv"
    assert uv.read_text() == "#!/bin/sh\necho uv\n" and os.access(str(uv), os.X_OK)
    assert (rootfs / "usr" / "local" / "bin" / "uvx").exists()
    assert os.listdir(str(rootfs / "opt" / "gpufleet" / "wheels")) == [
        os.path.basename(pins["pip"])]


def test_docker_true_starts_dockerd_first_as_in_dstacks_dind_image():
    script = command_script(task(docker=True))
    assert "start-dockerd && python train.py" in script.splitlines()[-1]
    assert python_env.image_commands(task(image="ubuntu"), None) == []
