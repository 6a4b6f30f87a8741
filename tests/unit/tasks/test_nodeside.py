# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The node side of the task runner (tasks.hostside.nodeside), without root and without Docker.

A fake ``docker`` executable comes first on PATH: it appends each call (argv, and stdin for
``login``) as one JSON line to a log and answers from a rule table the test sets (the first rule
whose words start the argv wins). RUN_ROOT points into a temporary folder.
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys

import pytest
from ansible_collections.gpufleet.cluster.plugins.module_utils.core import files
from ansible_collections.gpufleet.cluster.plugins.module_utils.core.files import module_source
from ansible_collections.gpufleet.cluster.plugins.module_utils.tasks.hostside import (
    bootstrap as starter,
    engineside,
    metricside,
    nodeside,
)

from .fakes import inspect_entry, job_spec, replica_spec, write_state


def mode(path):
    return stat.S_IMODE(os.stat(str(path)).st_mode)


# ---------------------------------------------------------------------------------------------
# status
# ---------------------------------------------------------------------------------------------


def test_status_lists_containers_with_their_state_files(docker, run_root):
    docker.on(["ps"], stdout="aaa111\nbbb222\n")
    docker.on(["inspect"], stdout=json.dumps([
        inspect_entry("train-0-0", run="train", job=0, status="exited", exit_code=3,
                      OOMKilled=True, FinishedAt="2024-05-01T11:00:00Z", Error="boom",
                      network="host"),
        inspect_entry("train-1-0", run="train", job=1, network="172.17.0.4"),
    ]))
    write_state(run_root, "train", 0, running="1714557600\n", reason="user\n", exit_code="3\n")
    write_state(run_root, "train", 1, running="1714557601\n", reason="")

    answer = nodeside.op_status({"run": "train"})

    assert docker.calls() == [
        ["ps", "-a", "-q", "--no-trunc", "--filter", "label=gpufleet.run=train"],
        ["inspect", "aaa111", "bbb222"],
    ]
    first, second = answer["containers"]
    assert first == {
        "name": "train-0-0",
        "labels": {"gpufleet.submission": "0", "gpufleet.run": "train", "gpufleet.job": "0"},
        "state": "exited",
        "exit_code": 3,
        "oom_killed": True,
        "started_at": "2024-05-01T10:00:00Z",
        "finished_at": "2024-05-01T11:00:00Z",
        "error": "boom",
        # Where attach reaches it from the host: the host's network, or its bridge address.
        "address": "localhost",
        "files": {"running": "1714557600", "reason": "user", "exit_code": "3"},
    }
    assert second["name"] == "train-1-0"
    assert second["address"] == "172.17.0.4"
    assert second["state"] == "running"
    assert second["error"] is None
    assert second["oom_killed"] is False
    # An empty state file reads as None, like a missing one.
    assert second["files"] == {"running": "1714557601", "reason": None, "exit_code": None}


def test_status_without_a_run_asks_for_every_task_container(docker, run_root):
    docker.on(["ps"], stdout="ccc333\n")
    docker.on(["inspect"], stdout=json.dumps([inspect_entry("stray")]))

    answer = nodeside.op_status({})

    assert docker.calls()[0] == ["ps", "-a", "-q", "--no-trunc", "--filter",
                                 "label=gpufleet.run"]
    (entry,) = answer["containers"]
    assert entry["name"] == "stray"
    # Without run and job labels there is no job folder to read.
    assert "files" not in entry


def test_status_of_a_job_without_state_files(docker, run_root):
    docker.on(["ps"], stdout="ddd444\n")
    docker.on(["inspect"], stdout=json.dumps(
        [inspect_entry("r-2-0", run="r", job=2, status="created")]))

    (entry,) = nodeside.op_status({"run": "r"})["containers"]

    assert entry["state"] == "created"
    assert entry["files"] == {"running": None, "reason": None, "exit_code": None}


def test_status_with_no_containers_does_not_inspect(docker, run_root):
    docker.on(["ps"], stdout="")

    assert nodeside.op_status({"run": "r"}) == {"containers": []}
    assert [c[0] for c in docker.calls()] == ["ps"]


def test_status_reports_a_failed_ps(docker, run_root):
    docker.on(["ps"], stderr="Cannot connect to the Docker daemon", rc=1)

    with pytest.raises(nodeside.Failure, match="docker ps failed \\(exit 1\\): Cannot connect"):
        nodeside.op_status({"run": "r"})


def test_docker_missing_from_the_host(tmp_path, monkeypatch, run_root):
    empty = tmp_path / "empty"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))
    monkeypatch.setattr(engineside, "_ENGINE", {"socket": None})   # and no engine socket

    with pytest.raises(nodeside.Failure, match="docker is not installed"):
        nodeside.op_status({})


# ---------------------------------------------------------------------------------------------
# image_info
# ---------------------------------------------------------------------------------------------


def test_image_info_of_a_present_image(docker):
    docker.on(["image", "inspect"],
              stdout='["/bin/entry"]\t["serve","--port","80"]\t"/app"\n')

    answer = nodeside.op_image_info({"image": "ghcr.io/org/app:1"})

    assert answer == {"present": True, "entrypoint": ["/bin/entry"],
                      "cmd": ["serve", "--port", "80"], "working_dir": "/app"}
    (call,) = docker.calls()
    assert call[:3] == ["image", "inspect", "--format"]
    assert call[-1] == "ghcr.io/org/app:1"
    assert "{{json .Config.Entrypoint}}" in call[3]


def test_image_info_of_an_image_without_entrypoint(docker):
    docker.on(["image", "inspect"], stdout='null\t["bash"]\t""\n')

    answer = nodeside.op_image_info({"image": "ubuntu"})

    assert answer == {"present": True, "entrypoint": None, "cmd": ["bash"], "working_dir": ""}


def test_image_info_of_a_missing_image(docker):
    docker.on(["image", "inspect"], stderr="Error: No such image: nope", rc=1)

    assert nodeside.op_image_info({"image": "nope"}) == {"present": False}


# ---------------------------------------------------------------------------------------------
# start
# ---------------------------------------------------------------------------------------------


def run_call(docker):
    runs = [c for c in docker.calls() if c[0] == "run"]
    assert len(runs) == 1, docker.calls()
    return runs[0]


def test_start_writes_the_job_folder_and_runs_the_container(absent, run_root):
    absent.on(["run"], stdout="f00d" * 16 + "\n")

    answer = nodeside.op_start({"job": job_spec()})

    assert answer == {"started": True, "id": "f00d" * 16}
    folder = run_root / "train" / "1"
    job = folder / "job"
    assert (job / "job.sh").read_text() == "#!/bin/sh\necho job\n"
    assert mode(job / "job.sh") == 0o755
    assert (job / "env.sh").read_text() == "export A=1\n"
    assert mode(job / "env.sh") == 0o600
    assert (job / "ssh" / "blob.bin").read_bytes() == b"\x00\x01binary\xff"
    assert mode(job / "ssh" / "blob.bin") == 0o644
    # The state folder, and its mount point inside the read-only job folder.
    assert (folder / "state").is_dir()
    assert (job / "state").is_dir()
    assert list((folder / "state").iterdir()) == []

    assert absent.calls()[0] == ["container", "inspect", "--format", "{{.Id}}", "train-1-0"]
    assert run_call(absent) == [
        "run", "-d", "--name", "train-1-0", "--label", "gpufleet.run=train",
        "--entrypoint", "/bin/sh",
        "-v", "%s:/gpufleet:ro" % job,
        "-v", "%s:/gpufleet/state" % (folder / "state"),
        "ubuntu:22.04", "/gpufleet/job.sh",
    ]


def test_start_keeps_a_mount_point_the_files_already_carry(absent, run_root):
    absent.on(["run"], stdout="abc\n")
    job = job_spec()
    job["files"]["state/.mountpoint"] = {"text": "", "mode": 0o644}

    nodeside.op_start({"job": job})

    mountpoint = run_root / "train" / "1" / "job" / "state"
    assert sorted(p.name for p in mountpoint.iterdir()) == [".mountpoint"]


def test_start_replaces_a_stale_job_folder(absent, run_root):
    absent.on(["run"], stdout="abc\n")
    stale = run_root / "train" / "1" / "state"
    stale.mkdir(parents=True)
    (stale / "exit_code").write_text("1\n")
    (run_root / "train" / "1" / "job").mkdir()
    (run_root / "train" / "1" / "job" / "old.sh").write_text("old")

    nodeside.op_start({"job": job_spec()})

    assert not (stale / "exit_code").exists()
    assert not (run_root / "train" / "1" / "job" / "old.sh").exists()


def test_start_creates_a_missing_instance_folder_open_to_everyone(absent, run_root, tmp_path):
    absent.on(["run"], stdout="abc\n")
    source = tmp_path / "host" / "cache" / "leaf"

    nodeside.op_start({"job": job_spec(mounts=[
        {"kind": "instance", "source": str(source), "target": "/cache", "optional": False},
    ])})

    assert source.is_dir()
    assert mode(source) == 0o777
    argv = run_call(absent)
    assert argv[-4:] == ["-v", "%s:/cache" % source, "ubuntu:22.04", "/gpufleet/job.sh"]


def test_start_leaves_an_existing_instance_folder_as_it_is(absent, run_root, tmp_path):
    absent.on(["run"], stdout="abc\n")
    source = tmp_path / "data"
    source.mkdir()
    source.chmod(0o750)
    (source / "keep.txt").write_text("kept")

    nodeside.op_start({"job": job_spec(mounts=[
        {"kind": "instance", "source": str(source), "target": "/data", "optional": False},
    ])})

    assert mode(source) == 0o750
    assert (source / "keep.txt").read_text() == "kept"
    assert "%s:/data" % source in run_call(absent)


def test_start_mounts_an_attached_network_volume(absent, run_root, tmp_path):
    absent.on(["run"], stdout="abc\n")
    source = tmp_path / "volumes" / "data-1"
    source.mkdir(parents=True)

    nodeside.op_start({"job": job_spec(mounts=[
        {"kind": "network", "name": "data-1", "source": str(source), "target": "/vol"},
    ])})

    argv = run_call(absent)
    index = argv.index("%s:/vol" % source)
    assert argv[index - 1] == "-v"


def test_start_names_a_network_volume_that_is_not_attached(absent, run_root, tmp_path):
    source = tmp_path / "volumes" / "data-7"

    with pytest.raises(nodeside.Failure) as caught:
        nodeside.op_start({"job": job_spec(mounts=[
            {"kind": "network", "name": "data-7", "source": str(source), "target": "/vol"},
        ])})

    message = str(caught.value)
    assert "network volume data-7 is not attached" in message
    assert str(source) in message
    assert not source.exists()
    assert [c for c in absent.calls() if c[0] == "run"] == []


@pytest.mark.parametrize("present", [True, False])
def test_start_adds_infiniband_only_when_the_host_has_it(absent, run_root, tmp_path,
                                                         monkeypatch, present):
    absent.on(["run"], stdout="abc\n")
    device = tmp_path / "dev-infiniband"
    if present:
        device.mkdir()
    flags = ["--device", "/dev/infiniband", "--ulimit", "memlock=-1:-1"]
    monkeypatch.setattr(nodeside, "CONDITIONAL", {"infiniband": (str(device), flags)})

    nodeside.op_start({"job": job_spec(conditional=["infiniband"])})

    argv = run_call(absent)
    if present:
        assert argv[-6:-2] == flags
    else:
        assert "--device" not in argv and "--ulimit" not in argv
    assert argv[-2:] == ["ubuntu:22.04", "/gpufleet/job.sh"]


def test_start_does_not_add_features_the_job_does_not_ask_for(absent, run_root, tmp_path,
                                                              monkeypatch):
    absent.on(["run"], stdout="abc\n")
    device = tmp_path / "dev-infiniband"
    device.mkdir()
    monkeypatch.setattr(nodeside, "CONDITIONAL", {"infiniband": (str(device), ["--device", "x"])})

    nodeside.op_start({"job": job_spec(conditional=[])})

    assert "--device" not in run_call(absent)


def test_start_keeps_an_existing_container(docker, run_root):
    docker.on(["container", "inspect"], stdout="0123abcd\n")
    folder = run_root / "train" / "1" / "state"
    folder.mkdir(parents=True)
    (folder / "running").write_text("1714557600\n")

    answer = nodeside.op_start({"job": job_spec()})

    assert answer == {"started": False, "exists": True}
    assert docker.calls() == [["container", "inspect", "--format", "{{.Id}}", "train-1-0"]]
    # The running job's folder is left alone.
    assert (folder / "running").read_text() == "1714557600\n"
    assert not (run_root / "train" / "1" / "job").exists()


def test_start_treats_a_name_taken_meanwhile_as_existing(absent, run_root):
    absent.on(["run"], rc=125, stderr='docker: Error response from daemon: Conflict. The '
              'container name "/train-1-0" is already in use by container "0123".\n')

    answer = nodeside.op_start({"job": job_spec()})

    assert answer == {"started": False, "exists": True}
    assert not [c for c in absent.calls() if c[:2] == ["rm", "-f"]]


def test_start_failure_removes_the_container_and_reports_docker(absent, run_root):
    absent.on(["run"], rc=125, stderr="docker: Error response from daemon: could not select "
              "device driver \"\" with capabilities: [[gpu]].\n")

    with pytest.raises(nodeside.Failure) as caught:
        nodeside.op_start({"job": job_spec()})

    message = str(caught.value)
    assert message.startswith("could not start container train-1-0: ")
    assert "could not select device driver" in message
    assert absent.calls()[-1] == ["rm", "-f", "train-1-0"]


# ---------------------------------------------------------------------------------------------
# stop
# ---------------------------------------------------------------------------------------------


def test_stop_records_the_reason_unless_one_is_there(docker, run_root):
    fresh = write_state(run_root, "r", 0, running="1\n")
    decided = write_state(run_root, "r", 1, reason="failed\n")
    jobs = [{"run": "r", "job_num": 0, "container": "r-0-0"},
            {"run": "r", "job_num": 1, "container": "r-1-0"},
            {"run": "r", "job_num": 2, "container": "r-2-0"}]

    answer = nodeside.op_stop({"jobs": jobs, "reason": "user", "timeout": 30})

    assert answer == {"stopped": ["r-0-0", "r-1-0", "r-2-0"], "ended": []}
    assert (fresh / "reason").read_text() == "user\n"
    assert (decided / "reason").read_text() == "failed\n"
    # A job without a folder on this host gets none.
    assert not (run_root / "r" / "2").exists()
    assert docker.calls() == [["stop", "-t", "30", "r-0-0", "r-1-0", "r-2-0"]]


def test_stop_records_no_reason_for_a_job_whose_command_ended(docker, run_root):
    """Its wrapper wrote the code (it is telling the other nodes, or exiting): that is why the
    job ended, and a stop that comes now does not make it a stopped job."""
    ended = write_state(run_root, "r", 0, running="1\n", exit_code="3\n")

    answer = nodeside.op_stop({"jobs": [{"run": "r", "job_num": 0, "container": "r-0-0"}],
                               "reason": "terminated_by_server"})

    assert answer == {"stopped": ["r-0-0"], "ended": [0]}
    assert not (ended / "reason").exists()
    # The run's stop is said apart: job 0 of a multi-node run may be waiting for the others'
    # ends (wrapper_peers), and a user's stop ends that wait.
    assert (ended / "run_stopped").read_text() == "terminated_by_server\n"
    assert docker.calls() == [["stop", "-t", "10", "r-0-0"]]


def test_a_job_whose_command_ended_gets_time_to_end_its_wait_even_on_an_abort(docker, run_root):
    """docker stop -t 0 sends KILL at once: job 0, which waits for the others' ends, gets 10
    seconds for its TERM (it ends the wait and writes what it knows), the running job none."""
    write_state(run_root, "r", 0, running="1\n", exit_code="0\n")
    write_state(run_root, "r", 1, running="1\n")
    answer = nodeside.op_stop({"jobs": [{"run": "r", "job_num": 0, "container": "r-0-0"},
                                        {"run": "r", "job_num": 1, "container": "r-1-0"}],
                               "reason": "terminated_by_user", "timeout": 0})
    assert answer == {"stopped": ["r-0-0", "r-1-0"], "ended": [0]}
    assert docker.calls() == [["stop", "-t", "0", "r-1-0"], ["stop", "-t", "10", "r-0-0"]]


def test_stop_waits_ten_seconds_by_default(docker, run_root):
    nodeside.op_stop({"jobs": [{"run": "r", "job_num": 0, "container": "r-0-0"}],
                      "reason": "user"})

    assert docker.calls() == [["stop", "-t", "10", "r-0-0"]]


def test_stop_of_nothing_runs_no_docker(docker, run_root):
    assert nodeside.op_stop({"jobs": [], "reason": "user"}) == {"stopped": [], "ended": []}
    assert docker.calls() == []


# ---------------------------------------------------------------------------------------------
# remove
# ---------------------------------------------------------------------------------------------


@pytest.fixture
def three_jobs(docker, run_root):
    docker.on(["ps"], stdout="id0\nid1\nid2\n")
    docker.on(["inspect"], stdout=json.dumps([
        inspect_entry("r-%d-0" % num, run="r", job=num, status="exited") for num in range(3)
    ]))
    for num in range(3):
        write_state(run_root, "r", num, exit_code="0\n")
    write_state(run_root, "other", 0, exit_code="0\n")
    return docker


def test_remove_a_whole_run(three_jobs, run_root):
    answer = nodeside.op_remove({"run": "r"})

    assert answer == {"removed": ["r-0-0", "r-1-0", "r-2-0"]}
    calls = three_jobs.calls()
    assert calls[0] == ["ps", "-a", "-q", "--no-trunc", "--filter", "label=gpufleet.run=r"]
    assert calls[-1] == ["rm", "-f", "r-0-0", "r-1-0", "r-2-0"]
    assert not (run_root / "r").exists()
    assert (run_root / "other" / "0" / "state" / "exit_code").exists()


def test_remove_listed_jobs_only(three_jobs, run_root):
    answer = nodeside.op_remove({"run": "r", "jobs": [1]})

    assert answer == {"removed": ["r-1-0"]}
    assert three_jobs.calls()[-1] == ["rm", "-f", "r-1-0"]
    assert not (run_root / "r" / "1").exists()
    assert (run_root / "r" / "0").is_dir()
    assert (run_root / "r" / "2").is_dir()


def test_remove_without_containers_still_removes_the_folders(docker, run_root):
    docker.on(["ps"], stdout="")
    write_state(run_root, "r", 0, exit_code="0\n")

    assert nodeside.op_remove({"run": "r"}) == {"removed": []}
    assert not [c for c in docker.calls() if c[0] == "rm"]
    assert not (run_root / "r").exists()


# ---------------------------------------------------------------------------------------------
# pull
# ---------------------------------------------------------------------------------------------

PASSWORD = "s3cr3t-Pa55"


def test_pull_without_credentials(docker):
    assert nodeside.op_pull({"image": "ubuntu:22.04"}) == {"pulled": True, "message": ""}
    assert docker.calls() == [["pull", "ubuntu:22.04"]]


def test_pull_logs_in_with_the_password_on_stdin_and_logs_out(docker):
    answer = nodeside.op_pull({"image": "ghcr.io/org/app:1",
                               "auth": {"username": "bob", "password": PASSWORD}})

    assert answer == {"pulled": True, "message": ""}
    entries = docker.entries()
    assert [e["argv"] for e in entries] == [
        ["login", "--username", "bob", "--password-stdin", "ghcr.io"],
        ["pull", "ghcr.io/org/app:1"],
        ["logout", "ghcr.io"],
    ]
    assert entries[0]["stdin"] == PASSWORD
    assert not any(PASSWORD in word for e in entries for word in e["argv"])


def test_pull_logs_in_to_a_registry_with_a_port(docker):
    nodeside.op_pull({"image": "registry.local:5000/app",
                      "auth": {"username": "bob", "password": PASSWORD}})

    calls = docker.calls()
    assert calls[0][-1] == "registry.local:5000"
    assert calls[-1] == ["logout", "registry.local:5000"]


def test_pull_from_docker_hub_names_no_registry(docker):
    nodeside.op_pull({"image": "org/app:2", "auth": {"username": "bob", "password": PASSWORD}})

    assert docker.calls() == [
        ["login", "--username", "bob", "--password-stdin"],
        ["pull", "org/app:2"],
        ["logout"],
    ]


def test_pull_logs_in_to_localhost(docker):
    nodeside.op_pull({"image": "localhost/team/app",
                      "auth": {"username": "bob", "password": PASSWORD}})

    assert docker.calls()[0] == ["login", "--username", "bob", "--password-stdin", "localhost"]


def test_pull_masks_the_password_in_a_failed_login(docker):
    docker.on(["login"], rc=1,
              stderr="Error response from daemon: login with password %s refused\n" % PASSWORD)

    answer = nodeside.op_pull({"image": "ghcr.io/org/app:1",
                               "auth": {"username": "bob", "password": PASSWORD}})

    assert answer["pulled"] is False
    assert answer["message"].startswith("registry login failed: ")
    assert "login with password *** refused" in answer["message"]
    assert PASSWORD not in answer["message"]
    # No pull after a failed login, and nothing to log out of.
    assert docker.calls() == [["login", "--username", "bob", "--password-stdin", "ghcr.io"]]


def test_pull_failure_reports_docker_and_still_logs_out(docker):
    docker.on(["pull"], rc=1, stderr="Error response from daemon: manifest unknown\n")

    answer = nodeside.op_pull({"image": "ghcr.io/org/app:9",
                               "auth": {"username": "bob", "password": PASSWORD}})

    assert answer == {"pulled": False,
                      "message": "Error response from daemon: manifest unknown"}
    assert docker.calls()[-1] == ["logout", "ghcr.io"]


# ---------------------------------------------------------------------------------------------
# serve and the bootstrap
# ---------------------------------------------------------------------------------------------


def test_serve_answers_one_json_line(docker, capsys):
    docker.on(["image", "inspect"], stdout='null\t["sh"]\t"/w"\n')

    nodeside.serve(json.dumps({"op": "image_info", "payload": {"image": "x"}}).encode("utf-8"))

    out = capsys.readouterr().out
    assert out.endswith("\n") and out.count("\n") == 1
    assert json.loads(out) == {"present": True, "entrypoint": None, "cmd": ["sh"],
                               "working_dir": "/w"}


def test_serve_without_payload(docker, run_root, capsys):
    docker.on(["ps"], stdout="")

    nodeside.serve(b'{"op": "status"}')

    assert json.loads(capsys.readouterr().out) == {"containers": []}
    assert docker.calls()[0][-1] == "label=gpufleet.run"


def test_serve_turns_a_failure_into_an_error_answer(absent, run_root, tmp_path, capsys):
    job = job_spec(mounts=[{"kind": "network", "name": "vol-x",
                            "source": str(tmp_path / "nope"), "target": "/v"}])

    nodeside.serve(json.dumps({"op": "start", "payload": {"job": job}}).encode("utf-8"))

    answer = json.loads(capsys.readouterr().out)
    assert list(answer) == ["error"]
    assert "network volume vol-x is not attached" in answer["error"]


def test_serve_answers_an_error_when_the_host_refuses_a_folder(absent, run_root, tmp_path,
                                                               capsys):
    source = tmp_path / "data"
    source.write_text("a file, not a folder")
    job = job_spec(mounts=[{"kind": "instance", "source": str(source), "target": "/data",
                            "optional": False}])

    nodeside.serve(json.dumps({"op": "start", "payload": {"job": job}}).encode("utf-8"))

    answer = json.loads(capsys.readouterr().out)
    assert str(source) in answer["error"]


def helper():
    """The helper's first parts, as tasks.ssh.host_source joins them: engineside, nodeside."""
    return module_source(vars(engineside)) + b"\n" + module_source(vars(nodeside))


def bootstrap(request, env):
    data = helper() + b"\n" + starter.SEPARATOR + b"\n" + request
    return subprocess.run([sys.executable, "-c", starter.BOOTSTRAP], input=data,
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env,
                          timeout=60, check=False)


def test_the_source_does_not_contain_the_separator_line():
    assert (b"\n" + starter.SEPARATOR + b"\n") not in helper()
    assert starter.SEPARATOR.decode("ascii") in starter.BOOTSTRAP


def test_bootstrap_runs_the_sent_source(docker):
    docker.on(["image", "inspect"], stdout='["/e"]\tnull\t""\n')
    env = dict(os.environ, **docker.env())

    proc = bootstrap(json.dumps({"op": "image_info",
                                 "payload": {"image": "alpine"}}).encode("utf-8"), env)

    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout) == {"present": True, "entrypoint": ["/e"], "cmd": None,
                                       "working_dir": ""}
    assert docker.calls() == [["image", "inspect", "--format",
                               "{{json .Config.Entrypoint}}\t{{json .Config.Cmd}}\t"
                               "{{json .Config.WorkingDir}}", "alpine"]]


def test_bootstrap_status_through_the_sent_source(docker):
    docker.on(["ps"], stdout="id9\n")
    docker.on(["inspect"], stdout=json.dumps(
        [inspect_entry("zz-0-0", run="zz-no-such-run", job=0, status="exited")]))
    env = dict(os.environ, **docker.env())

    proc = bootstrap(b'{"op": "status", "payload": {"run": "zz-no-such-run"}}', env)

    assert proc.returncode == 0, proc.stderr
    (entry,) = json.loads(proc.stdout)["containers"]
    assert entry["name"] == "zz-0-0"
    assert entry["state"] == "exited"
    assert entry["files"] == {"running": None, "reason": None, "exit_code": None}
    assert docker.calls()[0][-1] == "label=gpufleet.run=zz-no-such-run"


def cached_call(cache, source, request, digest="0123456789abcdef01234567", env=None):
    """The bootstrap as a host runs it (``python3 -S -c BOOTSTRAP DIGEST``), caching in
    ``cache``."""
    data = source + b"\n" + starter.SEPARATOR + b"\n" + request
    proc = subprocess.run([sys.executable, "-S", "-c", starter.bootstrap(str(cache)), digest],
                          input=data, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          env=env, timeout=60, check=False)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def swap_code(path, answer):
    """Put in the cache file a compiled helper that answers ``answer`` whatever it is asked."""
    import marshal

    code = compile("import json, sys\ndef serve(r):\n    sys.stdout.write(json.dumps(%r))\n"
                   % (answer,), "swapped", "exec")
    path.write_bytes(marshal.dumps(code))


SERVE_OP = b"import json, sys\ndef serve(r):\n    sys.stdout.write(json.dumps({'op': 'sent'}))\n"


def test_the_compiled_helper_is_kept_and_used_for_the_next_request(tmp_path):
    cache = tmp_path / "var" / "helper"

    assert cached_call(cache, SERVE_OP, b"{}") == {"op": "sent"}

    (kept,) = cache.iterdir()
    assert kept.name == "0123456789abcdef01234567." + sys.implementation.cache_tag
    assert stat.S_IMODE(cache.stat().st_mode) == 0o700
    swap_code(kept, {"op": "cached"})
    # The next request with the same digest runs what the cache holds, not the source sent.
    assert cached_call(cache, SERVE_OP, b"{}") == {"op": "cached"}
    # Another digest (another controller version) compiles its own and drops the old one.
    assert cached_call(cache, SERVE_OP, b"{}", digest="f" * 24) == {"op": "sent"}
    assert [p.name for p in cache.iterdir()] == ["f" * 24 + "." + sys.implementation.cache_tag]


@pytest.mark.parametrize("spoil", ["writable file", "writable folder", "garbage", "bad digest"])
def test_a_cache_that_cannot_be_trusted_is_compiled_anew(tmp_path, spoil):
    cache = tmp_path / "helper"
    cached_call(cache, SERVE_OP, b"{}")
    (kept,) = cache.iterdir()
    swap_code(kept, {"op": "cached"})
    digest = "0123456789abcdef01234567"
    if spoil == "writable file":
        kept.chmod(0o666)
    elif spoil == "writable folder":
        cache.chmod(0o777)
    elif spoil == "garbage":
        kept.write_bytes(b"not marshal data")
    else:
        digest = "../" + digest[3:]

    assert cached_call(cache, SERVE_OP, b"{}", digest=digest) == {"op": "sent"}


def test_the_real_helper_answers_through_the_cache(docker, tmp_path):
    docker.on(["image", "inspect"], stdout='["/e"]\tnull\t""\n')
    request = json.dumps({"op": "image_info", "payload": {"image": "alpine"}}).encode("utf-8")
    cache = tmp_path / "helper"
    env = dict(os.environ, **docker.env())
    first = cached_call(cache, helper(), request, env=env)
    assert [p.name[:24] for p in cache.iterdir()] == ["0123456789abcdef01234567"]
    assert cached_call(cache, helper(), request, env=env) == first
    assert first["present"] is True


def test_bootstrap_answers_a_failure_as_an_error(tmp_path):
    empty = tmp_path / "empty"
    empty.mkdir()
    # No docker command, and no engine socket either.
    env = dict(os.environ, PATH=str(empty), DOCKER_HOST="unix://" + str(empty / "none.sock"))

    proc = bootstrap(b'{"op": "status", "payload": {}}', env)

    assert proc.returncode == 0, proc.stderr
    answer = json.loads(proc.stdout)
    assert "docker is not installed on this host" in answer["error"]


def test_source_is_read_from_a_zip_as_in_a_modules_payload(tmp_path):
    """Modules run from an AnsiballZ zip: the source must come through the zip importer."""
    import subprocess
    import sys
    import zipfile

    archive = tmp_path / "payload.zip"
    package = "ansible_collections/gpufleet/cluster/plugins/module_utils"
    with zipfile.ZipFile(archive, "w") as zipped:
        parts = (package + "/tasks/hostside").split("/")
        for depth in range(1, len(parts) + 1):
            zipped.writestr("/".join(parts[:depth]) + "/__init__.py", "")
        zipped.writestr(package + "/core/__init__.py", "")
        zipped.writestr(package + "/core/files.py", module_source(vars(files)))
        zipped.writestr(package + "/tasks/hostside/engineside.py", module_source(vars(engineside)))
        zipped.writestr(package + "/tasks/hostside/nodeside.py", module_source(vars(nodeside)))
    proc = subprocess.run(
        [sys.executable, "-c",
         "from ansible_collections.gpufleet.cluster.plugins.module_utils.tasks.hostside import nodeside;"
         "from ansible_collections.gpufleet.cluster.plugins.module_utils.core import files;"
         "import sys; sys.stdout.buffer.write(files.module_source(vars(nodeside)))"],
        env={"PYTHONPATH": str(archive), "PATH": "/usr/bin:/bin"}, capture_output=True,
        check=False)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == module_source(vars(nodeside))


def test_run_key_reads_the_jobs_key_and_refuses_paths(run_root):
    folder = run_root / "train" / "1" / "job" / "ssh"
    folder.mkdir(parents=True)
    (folder / "dstack_job").write_text("PRIVATE\n")
    assert nodeside.op_run_key({"run": "train", "job_num": 1}) == {"key": "PRIVATE\n"}
    assert nodeside.op_run_key({"run": "train", "job_num": 0}) == {"key": None}
    for bad in ({"run": "../etc", "job_num": 0}, {"run": "train", "job_num": "0"},
                {"run": "a/b", "job_num": 0}, {"run": "train", "job_num": -1}):
        with pytest.raises(nodeside.Failure, match="run_key: bad run"):
            nodeside.op_run_key(bad)


# ---------------------------------------------------------------------------------------------
# metrics
# ---------------------------------------------------------------------------------------------


def test_metrics_answers_the_runs_containers_and_each_jobs_samples_since(docker, run_root):
    docker.on(["ps"], stdout="aaa111\nbbb222\n")
    docker.on(["inspect"], stdout=json.dumps([
        inspect_entry("train-0-0", run="train", job=0),
        inspect_entry("train-1-0", run="train", job=1),
    ]))
    write_state(run_root, "train", 0, metrics="\n".join([
        "nvidia 5 5 5",                      # the tail of a block trimmed away
        "@ 900 1.00 1 2 3 max 4 5", "nvidia 1 2 3",
        "@ 1000 2.00 1 2 3 max 4 5", "nvidia 9 8 7",
        "@ 1010 3.00 1 2 3 max 4 5"]) + "\n")

    # The window is counted back from each file's newest sample (1010), not from now: a job
    # that ended long ago keeps its last samples.
    answer = metricside.op_metrics({"run": "train", "window": 10})

    assert docker.calls()[0] == ["ps", "-a", "-q", "--no-trunc", "--filter",
                                 "label=gpufleet.run=train"]
    assert [c["name"] for c in answer["containers"]] == ["train-0-0", "train-1-0"]
    assert answer["metrics"] == {
        "0": "@ 1000 2.00 1 2 3 max 4 5\nnvidia 9 8 7\n@ 1010 3.00 1 2 3 max 4 5",
        "1": ""}


def test_metrics_refuses_a_run_name_that_is_no_name(docker, run_root):
    with pytest.raises(nodeside.Failure, match="bad run name"):
        metricside.op_metrics({"run": "../etc"})


def test_metrics_reads_only_a_regular_file(docker, run_root, tmp_path):
    docker.on(["ps"], stdout="aaa111\nbbb222\n")
    docker.on(["inspect"], stdout=json.dumps([
        inspect_entry("train-0-0", run="train", job=0),
        inspect_entry("train-1-0", run="train", job=1),
    ]))
    secret = tmp_path / "elsewhere"
    secret.write_text("@ 1000 1.00 1 2 3 max 4 5\n")
    folder = write_state(run_root, "train", 0)
    os.symlink(str(secret), str(folder / "metrics"))      # a link the container made
    folder = write_state(run_root, "train", 1)
    os.mkfifo(str(folder / "metrics"))                    # a FIFO would block a plain read
    answer = metricside.op_metrics({"run": "train"})
    assert answer["metrics"] == {"0": "", "1": ""}


def test_start_links_the_repo_archive_into_a_job_folder_it_makes(absent, run_root, tmp_path):
    """The job folder holds the repo archive even when the job brings no file that would have
    made the folder first."""
    absent.on(["run"], stdout="abc\n")
    archive = tmp_path / "repo.tar.gz"
    archive.write_bytes(b"code")
    nodeside.op_start({"job": job_spec(files={}, repo_archive=str(archive))})
    linked = run_root / "train" / "1" / "job" / "repo.tar.gz"
    assert linked.read_bytes() == b"code"
    assert os.stat(str(linked)).st_ino == os.stat(str(archive)).st_ino


# ---------------------------------------------------------------------------------------------
# what respawn (tasks/test_booking.py) needs of a service's replica
# ---------------------------------------------------------------------------------------------


def test_start_keeps_what_respawn_needs_for_a_service_replica_only(absent, run_root):
    absent.on(["run"], stdout="abc\n")
    nodeside.op_start({"job": replica_spec()})
    kept = run_root / "svc" / "1" / "start.json"
    assert mode(kept) == 0o600
    assert json.loads(kept.read_text()) == dict(
        (key, replica_spec().get(key)) for key in nodeside.RESPAWN_KEYS)
    assert "files" not in json.loads(kept.read_text())   # they stay in the job folder

    nodeside.op_start({"job": job_spec()})   # a task's job keeps nothing of the kind
    assert not (run_root / "train" / "1" / "start.json").exists()
