"""``python`` on a real local fleet: dstack's /dstack/venv made with uv in the offline task image,
pip installing into it, and a Python the image cannot offer refused before anything starts.

Uses the shared 3-node task world (tests/integration/task_world.py)."""

from __future__ import annotations

import zipfile

from gpufleet import cli

from .task_world import CPU, FLEET, SUFFIX, logs, node_containers


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


def test_a_python_the_local_image_lacks_is_refused_before_anything_starts(world, tmp_path,
                                                                          capsys):
    name = "py312-" + SUFFIX
    task = tmp_path / "py312.dstack.yml"
    task.write_text("type: task\nname: %s\npython: \"3.12\"\n%scommands: [python --version]\n"
                    % (name, CPU))
    capsys.readouterr()
    assert cli.main(["apply", "-f", str(task), "-y", "--fleet", FLEET]) == 1
    err = capsys.readouterr().err
    assert ("python: 3.12 is not available on the local backend, whose offline task image has "
            "Python 3.11") in err
    assert all(not entries for entries in node_containers(world, name).values())
