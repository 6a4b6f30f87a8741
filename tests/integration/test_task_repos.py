"""A task's code (``repos``) on a real local fleet: what ships, where it lands, edits between runs.

Uses the shared 3-node task world (tests/integration/task_world.py)."""

from __future__ import annotations

import subprocess

from gpufleet import cli

from .task_world import CPU, FLEET, SUFFIX, logs


def git(cwd, *args):
    subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@example.com"] + list(args),
                   cwd=str(cwd), check=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def test_a_local_repo_reaches_every_node_as_dstack_ships_it(world, tmp_path, capsys):
    """tracked, modified and untracked files arrive in the working folder of both nodes, the
    ignored file does not, the variables are dstack's, and an edit shows in the next run."""
    code = tmp_path / "project"
    code.mkdir()
    git(code, "init", "-q", "-b", "main")
    (code / "train.py").write_text("print('train v1')\n")
    (code / "lib.py").write_text("VALUE = 'committed'\n")
    (code / ".gitignore").write_text("*.ckpt\n")
    git(code, "add", "-A")
    git(code, "commit", "-q", "-m", "one")
    (code / "lib.py").write_text("VALUE = 'modified'\n")
    (code / "notes.txt").write_text("untracked\n")
    (code / "weights.ckpt").write_text("ignored\n")
    name = "repo-" + SUFFIX
    task = code / ".dstack.yml"
    task.write_text(
        "type: task\nname: %s\nnodes: 2\n%srepos:\n  - .\n"
        "commands:\n"
        "  - echo PWD $(pwd) REPO $DSTACK_REPO_DIR WD $DSTACK_WORKING_DIR ID $DSTACK_REPO_ID\n"
        "  - ls -A | sort | tr '\\n' ' '; echo\n"
        "  - python3 train.py\n"
        "  - python3 -c 'import lib; print(lib.VALUE)'\n"
        "  - cat notes.txt\n" % (name, CPU))
    assert cli.main(["apply", "-f", str(task), "-y", "--fleet", FLEET]) == 0
    out = logs(name)
    for rank in (0, 1):
        lines = out[rank]
        head = lines[0].split()
        assert head[:6] == ["PWD", "/dstack/run", "REPO", "/dstack/run", "WD", "/dstack/run"]
        assert head[7].startswith("project-")
        assert lines[1].split() == [".dstack.yml", ".gitignore", "lib.py", "notes.txt",
                                    "train.py"]
        assert lines[2:] == ["train v1", "modified", "untracked"]
    # An edit between two runs is in the second one (a new archive, sent again).
    (code / "train.py").write_text("print('train v2')\n")
    capsys.readouterr()
    assert cli.main(["apply", "-f", str(task), "-y", "--fleet", FLEET]) == 0
    assert "sent to" in capsys.readouterr().out
    assert [logs(name)[r][2] for r in (0, 1)] == ["train v2", "train v2"]
