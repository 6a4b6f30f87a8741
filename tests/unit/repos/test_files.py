"""A task's ``files`` (repos.files): a local path that is a file or a folder, checked on the
controller before any host is touched (gpufleet validate reports the same), then carried in the
start requests and written in the job folder, where the wrapper copies it into the container.

Docker on the host is the fake of tasks/test_nodeside.py; git is real."""

from __future__ import annotations

import base64
import json
import os
import stat

import pytest
from ansible_collections.gpufleet.cluster.plugins.module_utils import spec
from ansible_collections.gpufleet.cluster.plugins.module_utils.repos import files, sources
from ansible_collections.gpufleet.cluster.plugins.module_utils.tasks import (
    actions,
    rankplan,
    run_preparation,
    runbook,
)
from ansible_collections.gpufleet.cluster.plugins.module_utils.tasks.hostside import nodeside

from ..tasks import test_nodeside as test_task_nodeside
from ..tasks.test_rankplan import RUN, placed_job, placement

docker = test_task_nodeside.docker  # the fake docker on PATH (a fixture)
absent = test_task_nodeside.absent
run_root = test_task_nodeside.run_root


def mode(path):
    return stat.S_IMODE(os.lstat(str(path)).st_mode)


@pytest.fixture
def conf(tmp_path):
    """A folder to ship: nested files, an executable, an ignored file, a link inside it, a
    link to a file outside it, and a file beside it."""
    root = tmp_path / "src" / "conf"
    (root / "sub").mkdir(parents=True)
    (root / "app.yml").write_text("a: 1\n")
    (root / "run.sh").write_text("#!/bin/sh\necho run\n")
    os.chmod(str(root / "run.sh"), 0o755)
    (root / "sub" / "deep.txt").write_text("deep\n")
    (root / ".gitignore").write_text("*.ckpt\n")
    (root / "model.ckpt").write_text("ignored\n")
    os.symlink("sub/deep.txt", str(root / "inside"))
    (tmp_path / "outside.txt").write_text("outside\n")
    os.symlink(str(tmp_path / "outside.txt"), str(root / "outside"))
    (tmp_path / "src" / "single.txt").write_text("one\n")
    return root


def decoded(item):
    return base64.b64decode(item["data"]).decode()


def test_a_folder_is_read_as_dstack_packs_it(conf):
    read = files.read(str(conf))
    assert sorted(read) == ["", ".gitignore", "app.yml", "inside", "outside", "run.sh",
                            "sub/deep.txt"]
    assert read[""] == {"dir": True, "mode": mode(conf)}
    assert decoded(read["app.yml"]) == "a: 1\n" and read["run.sh"]["mode"] == 0o755
    assert decoded(read["sub/deep.txt"]) == "deep\n"
    assert read["inside"] == {"link": "sub/deep.txt"}           # a link inside stays a link
    assert decoded(read["outside"]) == "outside\n"              # one outside is its file
    single = files.read(str(conf.parent / "single.txt"))
    assert list(single) == [""] and decoded(single[""]) == "one\n"


def test_a_folder_reaches_the_job_folder_instead_of_failing_as_a_directory(
        conf, absent, run_root):
    """The probe's case: ``files`` naming a folder failed with [Errno 21] Is a directory when
    the start requests were made, after the image and repo were shipped."""
    config = spec.parse_data({"type": "task", "commands": ["true"],
                              "files": ["conf:/data/conf", "single.txt"]})[0]
    jobs = rankplan.build_jobs(config, placement(placed_job(0)), dict(RUN), environ={},
                               config_dir=str(conf.parent))
    inlined = run_preparation._inline_files(jobs)[0]
    assert inlined["files"]["files/0"] == {"dir": True, "mode": mode(conf)}
    assert decoded(inlined["files"]["files/0/sub/deep.txt"]) == "deep\n"
    assert decoded(inlined["files"]["files/1"]) == "one\n"
    assert inlined["files"]["files.list"]["text"] == "0 /data/conf\n1 single.txt\n"
    json.dumps(inlined)   # what travels to the host

    absent.on(["run"], stdout="abc\n")
    job = dict(inlined, container="%s-0-0" % RUN["name"], conditional=[], mounts=[],
               docker_args=["--name", "%s-0-0" % RUN["name"]])
    nodeside.op_start({"job": job})
    shipped = run_root / RUN["name"] / "0" / "job" / "files"
    assert (shipped / "0" / "app.yml").read_text() == "a: 1\n"
    assert mode(shipped / "0" / "run.sh") == 0o755
    assert (shipped / "0" / "sub" / "deep.txt").read_text() == "deep\n"
    assert os.readlink(str(shipped / "0" / "inside")) == "sub/deep.txt"
    assert (shipped / "0" / "outside").read_text() == "outside\n"
    assert not (shipped / "0" / "model.ckpt").exists()
    assert (shipped / "1").read_text() == "one\n"


def test_a_queued_run_carries_a_folder_and_reads_an_earlier_entry(conf):
    config = spec.parse_data({"type": "task", "commands": ["true"],
                              "files": ["conf", "single.txt"]})[0]

    class Runner(object):
        pass

    runner = Runner()
    runner.config, runner.config_dir = config, str(conf.parent)
    held = runbook.file_contents(runner)
    assert held[str(conf)] == files.read(str(conf))
    assert runbook.ENTRY_VERSION in runbook.READ_VERSIONS and 1 in runbook.READ_VERSIONS
    # An entry written before folders were carried holds a file's base64 text alone.
    earlier = {"files/0": {"local_path": "/gone/train.py", "target": "train.py"}}
    job = run_preparation._inline_files([{"files": earlier}], {"/gone/train.py": "b25lCg=="})[0]
    assert job["files"] == {"files/0": {"data": "b25lCg=="}}


def test_validate_names_the_field_and_path_of_an_entry_that_cannot_be_shipped(tmp_path, conf):
    os.mkfifo(str(conf.parent / "pipe"))
    (conf.parent / "big.bin").write_bytes(b"x" * 4096)
    path = conf.parent / "task.dstack.yml"
    path.write_text("type: task\ncommands: [x]\nfiles:\n  - conf:/c\n  - nope.txt:/n\n"
                    "  - pipe:/p\n  - big.bin:/b\n  - %s/gone:/g\n" % tmp_path)
    result = sources.validate_file(str(path),
                                   environ={"DSTACK_SERVER_CODE_UPLOAD_LIMIT": "1000"})
    assert result["ok"] and not result["runnable"]
    assert result["unsupported"] == [
        {"path": "files[1]", "message": "%s does not exist on this controller (relative paths "
                                        "start at the task file's folder, %s)"
                                        % (conf.parent / "nope.txt", conf.parent)},
        {"path": "files[2]", "message": "%s is neither a file nor a folder (a socket, FIFO or "
                                        "device)" % (conf.parent / "pipe")},
        {"path": "files[3]", "message": "%s comes to 4.0KiB, which exceeds the limit of "
                                        "1000.0B on each entry of files. Exclude large files "
                                        "with .gitignore (or .dstackignore), or raise the limit "
                                        "with the DSTACK_SERVER_CODE_UPLOAD_LIMIT environment "
                                        "variable (0: no limit)." % (conf.parent / "big.bin")},
        {"path": "files[4]", "message": "%s does not exist on this controller"
                                        % (tmp_path / "gone")},
    ]


def test_a_folder_with_a_broken_link_out_of_it_is_refused(conf):
    os.symlink("/nowhere/at/all", str(conf / "broken"))
    with pytest.raises(files.FilesError) as info:
        files.check(str(conf))
    assert str(info.value) == ("%s is a link to /nowhere/at/all, which does not exist; remove "
                               "the link, or exclude it with .gitignore or .dstackignore"
                               % (conf / "broken"))


def test_apply_refuses_before_any_host_is_touched(tmp_path, monkeypatch):
    path = tmp_path / "task.dstack.yml"
    path.write_text("type: task\ncommands: [x]\nfiles: [missing/]\n")

    def no_hosts(params):
        raise AssertionError("the fleets (and their hosts) were looked at")

    monkeypatch.setattr(actions, "_fleets", no_hosts)
    with pytest.raises(actions.ActionError) as info:
        actions.submit({"path": str(path)})
    assert str(info.value) == ("files[0]: %s does not exist on this controller (relative paths "
                               "start at the task file's folder, %s)"
                               % (tmp_path / "missing", tmp_path))
