"""``python`` on a real local fleet: dstack's /dstack/venv made with uv in the offline task image,
pip installing into it, and a Python the image lacks fetched by the job with uv, which a node
that cannot reach the download answers with a message naming the version, the host and what
to do.

Uses the shared 3-node task world (tests/integration/task_world.py)."""

from __future__ import annotations

import re
import zipfile

from ansible_collections.gpufleet.cluster.plugins.module_utils.backends import local

from gpufleet import cli

from .task_world import CPU, FLEET, SUFFIX, logs


def hand_made_wheel(folder):
    """A pure-Python wheel, written by hand so no build backend or index is needed."""
    path = folder / "hello_gf-1.0-py3-none-any.whl"
    info = "hello_gf-1.0.dist-info"
    with zipfile.ZipFile(str(path), "w") as wheel:
        wheel.writestr("hello_gf.py", "GREETING = 'hello from a wheel'\n")
        wheel.writestr(info + "/METADATA",
                       "Metadata-Version: 2.1\nName: hello-gf\nVersion: 1.0\n")
        wheel.writestr(info + "/WHEEL", "Wheel-Version: 1.0\nGenerator: hand\n"
                                        "Root-Is-Purelib: true\nTag: py3-none-any\n")
        wheel.writestr(info + "/RECORD", "hello_gf.py,,\n%s/METADATA,,\n%s/WHEEL,,\n"
                                         "%s/RECORD,,\n" % (info, info, info))
    return path.name


def test_python_gets_a_uv_venv_that_pip_installs_into(world, tmp_path, capsys):
    code = tmp_path / "pyproj"
    code.mkdir()
    wheel = hand_made_wheel(code)
    name = "py-" + SUFFIX
    task = code / "task.dstack.yml"
    task.write_text(
        "type: task\nname: %s\npython: \"3.11\"\n%srepos: [.]\n"
        "commands:\n"
        "  - python --version\n"
        "  - echo PY $(command -v python) PIP $(command -v pip) VENV $VIRTUAL_ENV\n"
        "  - pip install -q --no-index ./%s\n"
        "  - python -c 'import hello_gf; print(hello_gf.GREETING)'\n"
        "  - python -c 'import mpi4py; print(\"mpi4py\", mpi4py.__version__ > \"3\")'\n"
        "  - grep -c DSTACK_VENV_DIR /dstack/profile\n" % (name, CPU, wheel))
    assert cli.main(["apply", "-f", str(task), "-y", "--fleet", FLEET]) == 0
    lines = logs(name)[0]
    assert lines[0].startswith("Python 3.11.")
    assert lines[1] == "PY /dstack/venv/bin/python PIP /dstack/venv/bin/pip VENV /dstack/venv"
    assert lines[2:] == ["hello from a wheel", "mpi4py True", "2"]


def test_a_python_the_local_image_lacks_is_fetched_or_the_node_says_why_not(world, tmp_path):
    # The job's uv asks a mirror no node can reach (this machine's nodes cannot reach github.com
    # either; the mirror makes the test the same where they can): the job ends before the
    # task's commands with the message, after uv's own error naming the mirror's URL.
    name = "py312-" + SUFFIX
    task = tmp_path / "py312.dstack.yml"
    task.write_text("type: task\nname: %s\npython: \"3.12\"\n%s"
                    "env:\n  - UV_PYTHON_INSTALL_MIRROR=http://127.0.0.1:9/pbs\n"
                    "  - UV_HTTP_RETRIES=0\n"
                    "commands: [python --version]\n" % (name, CPU))
    assert cli.main(["apply", "-f", str(task), "-y", "--fleet", FLEET]) == 1
    lines = logs(name)[0]
    text = "\n".join(lines)
    assert "http://127.0.0.1:9/pbs/" in text and "cpython-3.12." in text
    message = [line for line in lines if line.startswith("gpufleet: python: 3.12 ")]
    assert len(message) == 1, text
    assert not any(line.startswith("Python ") for line in lines)
    host = re.search(r"could not download it on host (\S+) ", message[0]).group(1)
    assert host in [i["name"] for i in world["fleet"]["instances"]], message[0]
    assert message[0].endswith(
        "Give the task an image with Python 3.12, let the host reach github.com, set "
        "UV_PYTHON_INSTALL_MIRROR in the task's env to a mirror it can reach, or set "
        "python: \"3.11\"")
    # The node's folder of downloaded Pythons was made for the job and is kept for the next.
    nodes = [local.container_name(FLEET, num) for num in range(3)]
    found = [n for n in nodes if world["docker"].run(
        "exec", n, "sh", "-c", "test -d /var/lib/gpufleet/pythons && echo yes || true").strip()]
    assert found, "no node has /var/lib/gpufleet/pythons"
