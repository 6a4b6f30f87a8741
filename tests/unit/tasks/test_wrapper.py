"""The job wrapper (tasks.hostside.wrapper), run for real with dash and, when installed, busybox sh.

Each test builds a job folder from tasks.rankplan.build_jobs, points the wrapper's paths into a
temporary folder (GPUFLEET_DIR, DSTACK_DIR, GPUFLEET_ETC, HOME) and runs ``job.sh``.
"""

from __future__ import annotations

import base64
import contextlib
import os
import re
import shutil
import signal
import stat
import subprocess
import tempfile
import time

import pytest
from ansible_collections.gpufleet.cluster.plugins.module_utils.spec import parse_data
from ansible_collections.gpufleet.cluster.plugins.module_utils.tasks import environment as plan_env
from ansible_collections.gpufleet.cluster.plugins.module_utils.tasks import rankplan
from ansible_collections.gpufleet.cluster.plugins.module_utils.tasks.hostside import (
    logside,
    nodeside,
    wrapper,
)

RUN = {"name": "wrap", "id": "run-1", "submission": 0, "submitted_at": "2026-08-01T10:00:00Z"}
KEY = {"private": "PRIVATE KEY TEXT\n", "public": "ssh-rsa AAAAB3 dstack_job\n"}
PASSWD = (
    "root:x:0:0:root:/root:/bin/sh\n"
    "nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n"
)
BUSYBOX = shutil.which("busybox")
SHELLS = ["dash"] + (["busybox"] if BUSYBOX else [])
# Tools the wrapper may use besides shell builtins, for the restricted PATH tests.
BASIC_TOOLS = ("cat", "chmod", "chown", "cp", "date", "grep", "id", "mkdir", "sleep", "tail",
               "rm", "sed", "ls", "touch", "sort", "env")


@pytest.fixture(scope="session")
def busybox_bin(tmp_path_factory):
    """A folder holding only busybox applets, used as PATH in the busybox runs."""
    if not BUSYBOX:
        return None
    folder = tmp_path_factory.mktemp("busybox-bin")
    applets = subprocess.run([BUSYBOX, "--list"], stdout=subprocess.PIPE, check=True)
    for name in applets.stdout.decode().split():
        os.symlink(BUSYBOX, str(folder / name))
    return folder


@pytest.fixture(params=SHELLS)
def shell(request, busybox_bin):
    """``(argv prefix, PATH)`` for the shell under test."""
    if request.param == "busybox":
        return [BUSYBOX, "sh"], str(busybox_bin)
    return ["/bin/sh"], os.environ.get("PATH", "/usr/bin:/bin")


def placed(num, ip):
    return {
        "job_num": num, "group": None, "host": "demo-%d" % num, "fleet": "demo",
        "instance_num": num, "backend": "ssh", "region": "remote", "instance_type": None,
        "price": 0.0, "spot": False, "internal_ip": ip, "whole_host": True, "blocks": 1,
        "total_blocks": 1, "cpus": 2, "memory_mib": 4096, "disk_mib": 10000,
        "gpu_vendor": "none", "gpu_name": None, "gpu_memory_mib": 0, "gpus": [],
        "resources": {},
    }


class Job(object):
    """A job folder and the paths the wrapper is pointed at, all under ``root``."""

    def __init__(self, root, data, nodes=1, rank=0, repo_archive=None, repo=None, key=None,
                 extra_config=None):
        self.root = root
        config, _warnings = parse_data(
            dict({"type": "task", "image": "busybox", "nodes": nodes}, **data))
        config.update(extra_config or {})
        jobs = [placed(n, "10.1.0.%d" % (n + 2)) for n in range(nodes)]
        specs = rankplan.build_jobs(
            config, {"fleet": "demo", "placement": "cluster", "jobs": jobs}, dict(RUN),
            environ={}, ssh_key=KEY if nodes > 1 or key else None, config_dir=str(root / "src"),
            repo=repo or ({"archive": "/var/lib/gpufleet/repos/x.tar.gz",
                           "repo_id": "code-12345678"} if repo_archive else None),
        )
        self.spec = specs[rank]
        self.dir = root / "job"
        if repo_archive:
            self.dir.mkdir(parents=True, exist_ok=True)
            shutil.copy(str(repo_archive), str(self.dir / "repo.tar.gz"))
        for rel, item in self.spec["files"].items():
            path = self.dir / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            if "text" in item:
                path.write_text(item["text"])
                os.chmod(str(path), item["mode"])
            elif not os.path.exists(item["local_path"]):
                continue  # a file the test leaves out of the job folder
            elif os.path.isdir(item["local_path"]):
                shutil.copytree(item["local_path"], str(path))
            else:
                shutil.copy(item["local_path"], str(path))
        self.state = self.dir / "state"
        self.state.mkdir(exist_ok=True)
        self.dstack = root / "dstack"
        self.etc = root / "etc"
        self.etc.mkdir(exist_ok=True)
        (self.etc / "passwd").write_text(PASSWD)
        (self.etc / "group").write_text("root:x:0:\nnogroup:x:65534:\n")
        self.home = root / "home"
        self.home.mkdir(exist_ok=True)
        self.workdir = root / "image-workdir"
        self.workdir.mkdir(exist_ok=True)

    def env(self, path, extra=None):
        env = {
            "PATH": path,
            "GPUFLEET_DIR": str(self.dir),
            "DSTACK_DIR": str(self.dstack),
            "GPUFLEET_ETC": str(self.etc),
            "HOME": str(self.home),
        }
        env.update(extra or {})
        return env

    def argv(self, shell):
        return shell[0] + [str(self.dir / "job.sh")]

    def run(self, shell, path=None, extra=None, timeout=60):
        # In a session of its own: a wrapper that hangs takes its job's processes with it.
        proc = subprocess.Popen(
            self.argv(shell), env=self.env(path or shell[1], extra), cwd=str(self.workdir),
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True,
        )
        try:
            out, err = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate()
            raise
        return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)

    def start(self, shell, path=None, extra=None):
        return subprocess.Popen(
            self.argv(shell), env=self.env(path or shell[1], extra), cwd=str(self.workdir),
            stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        )

    def read_state(self, name):
        return (self.state / name).read_text().strip()


def wait_for(path, seconds=15.0):
    deadline = time.time() + seconds
    while time.time() < deadline:
        if path.exists():
            return
        time.sleep(0.05)
    raise AssertionError("%s did not appear" % path)


def tools_bin(folder, names, fakes=None):
    """A PATH folder with links to the named host tools, plus fake scripts."""
    folder.mkdir()
    for name in names:
        found = shutil.which(name)
        assert found, "the test needs %s on this machine" % name
        os.symlink(found, str(folder / name))
    for name, text in (fakes or {}).items():
        path = folder / name
        path.write_text("#!/bin/sh\n" + text)
        os.chmod(str(path), 0o755)
    return str(folder)


# ---------------------------------------------------------------------------------------------


MULTI = "first line\nit's a \"quoted\" $VALUE\n"
# No single quote (written without sed), but what a shell would expand, and trailing newlines.
ODD = "a\\b $HOME `id` \"q\"\n\n"


def test_environment_profile_hostfile_and_exit_code(tmp_path, shell):
    job = Job(tmp_path, {
        "env": {"MULTI": MULTI, "ODD": ODD, "PLAIN": "x", "TRICK": "x\nFAKE_NAME=1"},
        "commands": [
            "printf '%s' \"$MULTI\" > multi.out",
            "printf '%s|%s|%s|%s' \"$DSTACK_NODE_RANK\" \"$DSTACK_WORKING_DIR\" "
            "\"$DSTACK_REPO_DIR\" \"$(pwd)\" > vars.out",
            "exit 7",
        ],
    })
    proc = job.run(shell)
    assert proc.returncode == 7, proc.stderr
    assert job.read_state("exit_code") == "7"
    assert int(job.read_state("running")) > 0
    workdir = str(job.workdir)
    assert (job.workdir / "multi.out").read_text() == MULTI
    # without repos, DSTACK_REPO_DIR is dstack's legacy /workflow (nothing is put there)
    assert (job.workdir / "vars.out").read_text() == "0|%s|/workflow|%s" % (workdir, workdir)

    profile = (job.dstack / "profile").read_text()
    lines = profile.splitlines()
    assert lines[-1] == 'cd "$DSTACK_WORKING_DIR"'
    assert "export DSTACK_NODE_RANK='0'" in lines
    assert "export DSTACK_WORKING_DIR='%s'" % workdir in lines
    assert "export GPUFLEET_MULTINODE='0'" in lines
    assert "export TRICK='x" in lines and "FAKE_NAME=1'" in lines
    for name in ("HOME", "USER", "SHELL", "SHLVL", "PWD", "HOSTNAME", "_", "FAKE_NAME"):
        assert not any(line.startswith("export %s=" % name) for line in lines), name
    mode = stat.S_IMODE(os.stat(str(job.dstack / "profile")).st_mode)
    assert mode == 0o600  # it holds the environment, secrets included
    seen = subprocess.run(
        ["/bin/sh", "-c", '. "$1"; printf "%s|%s|%s" "$MULTI" "$ODD" "$(pwd)"', "sh",
         str(job.dstack / "profile")],
        cwd="/", stdout=subprocess.PIPE, check=True,
    ).stdout.decode()
    assert seen == "%s|%s|%s" % (MULTI, ODD, workdir)

    source_line = '[ -r "{0}/profile" ] && . "{0}/profile"'.format(job.dstack)
    assert (job.etc / "profile").read_text() == source_line + "\n"
    job.run(shell)
    assert (job.etc / "profile").read_text() == source_line + "\n"

    hostfile = job.dstack / "mpi" / "hostfile"
    assert hostfile.read_text() == "10.1.0.2\n"
    assert stat.S_IMODE(os.stat(str(hostfile)).st_mode) == 0o644


def test_success_and_working_dir_under_home(tmp_path, shell):
    job = Job(tmp_path, {"working_dir": "~/proj/run", "commands": ["pwd > where.out"]})
    proc = job.run(shell)
    assert proc.returncode == 0, proc.stderr
    assert job.read_state("exit_code") == "0"
    target = job.home / "proj" / "run"
    assert (target / "where.out").read_text().strip() == str(target)
    profile = (job.dstack / "profile").read_text()
    assert "export DSTACK_WORKING_DIR='%s'" % target in profile


def test_files_are_copied_to_their_targets(tmp_path, shell):
    src = tmp_path / "src"
    (src / "pkg" / "sub").mkdir(parents=True)
    (src / "train.py").write_text("print('hi')\n")
    (src / "pkg" / "sub" / "mod.py").write_text("x = 1\n")
    (src / "pkg" / ".hidden").write_text("h\n")
    absolute = tmp_path / "opt" / "pkg"
    job = Job(tmp_path, {
        "files": ["train.py", "train.py:conf/copy.py",
                  {"local_path": "pkg", "path": str(absolute)}],
        "commands": ["true"],
    })
    proc = job.run(shell)
    assert proc.returncode == 0, proc.stderr
    assert (job.workdir / "train.py").read_text() == "print('hi')\n"
    assert (job.workdir / "conf" / "copy.py").read_text() == "print('hi')\n"
    assert (absolute / "sub" / "mod.py").read_text() == "x = 1\n"
    assert (absolute / ".hidden").read_text() == "h\n"


def test_missing_file_fails_before_running(tmp_path, shell):
    job = Job(tmp_path, {"files": ["gone.txt"], "commands": ["touch ran"]})
    proc = job.run(shell)
    assert proc.returncode == 1
    assert b"gone.txt" in proc.stderr or b"files/0" in proc.stderr
    assert job.read_state("exit_code") == "1"
    assert not (job.state / "running").exists()
    assert not (job.workdir / "ran").exists()


def test_max_duration_stops_the_command(tmp_path, shell):
    job = Job(tmp_path, {
        "max_duration": 1, "stop_duration": 5,
        "commands": ["trap 'echo term > got_term; exit 5' TERM; "
                     "while :; do sleep 0.1; done"],
    })
    began = time.time()
    proc = job.run(shell, timeout=30)
    assert proc.returncode == 5, proc.stderr
    assert time.time() - began < 15
    assert job.read_state("reason") == "max_duration_exceeded"
    assert job.read_state("exit_code") == "5"
    assert (job.workdir / "got_term").exists()
    assert b"max_duration" in proc.stderr


def test_max_duration_kills_after_stop_duration(tmp_path, shell):
    job = Job(tmp_path, {
        "max_duration": 1, "stop_duration": 1,
        "commands": ["trap '' TERM; while :; do sleep 0.1; done"],
    })
    proc = job.run(shell, timeout=30)
    assert proc.returncode == 128 + signal.SIGKILL, proc.stderr
    assert job.read_state("reason") == "max_duration_exceeded"
    assert job.read_state("exit_code") == str(128 + signal.SIGKILL)


def test_existing_reason_is_kept(tmp_path, shell):
    job = Job(tmp_path, {
        "max_duration": 1, "commands": ["trap 'exit 4' TERM; while :; do sleep 0.1; done"],
    })
    (job.state / "reason").write_text("terminated_by_user\n")
    proc = job.run(shell, timeout=30)
    assert proc.returncode == 4, proc.stderr
    assert job.read_state("reason") == "terminated_by_user"


def test_sigterm_reaches_the_command(tmp_path, shell):
    job = Job(tmp_path, {
        "commands": ["trap 'echo term > got_term; exit 3' TERM; : > ready; "
                     "while :; do sleep 0.1; done"],
    })
    proc = job.start(shell)
    try:
        wait_for(job.workdir / "ready")
        proc.send_signal(signal.SIGTERM)
        _out, err = proc.communicate(timeout=15)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 3, err
    assert (job.workdir / "got_term").read_text().strip() == "term"
    assert job.read_state("exit_code") == "3"
    assert not (job.state / "reason").exists()


# ssh-keygen as the wrapper calls it: each call logged, the file named by -f made (with -A: an
# Ed25519 key where the host keys go), and a key type in $FAKE_REFUSE refused, as an old
# ssh-keygen refuses one it does not know.
FAKE_KEYGEN = """printf '%s\\n' "$*" >> "$FAKE_LOG/ssh-keygen.log"
while [ $# -gt 0 ]; do
    case $1 in
        -t) case " ${FAKE_REFUSE-} " in *" $2 "*) exit 1 ;; esac ;;
        -f) : > "$2" ;;
        -A) mkdir -p "$GPUFLEET_ETC/ssh"; : > "$GPUFLEET_ETC/ssh/ssh_host_ed25519_key" ;;
    esac
    shift
done
"""


def test_ssh_files_and_sshd_for_multinode(tmp_path, shell):
    job = Job(tmp_path, {"commands": ["true"]}, nodes=2, rank=1)
    ssh_dir = job.home / ".ssh"
    ssh_dir.mkdir()
    (ssh_dir / "config").write_text("Host old\n    User me")
    (job.etc / "pam.d").mkdir()
    (job.etc / "pam.d" / "sshd").write_text("session    required     pam_loginuid.so\n")
    fakes = tmp_path / "fakes"
    fakes.mkdir()
    for name, text in (
        ("sshd", 'printf "%s\\n" "$*" >> "$FAKE_LOG/sshd.log"\n'),
        ("ssh-keygen", FAKE_KEYGEN),
    ):
        (fakes / name).write_text("#!/bin/sh\n" + text)
        os.chmod(str(fakes / name), 0o755)
    proc = job.run(shell, path="%s:%s" % (fakes, shell[1]), extra={"FAKE_LOG": str(fakes)})
    assert proc.returncode == 0, proc.stderr

    key = ssh_dir / "dstack_job"
    assert key.read_text() == KEY["private"]
    assert stat.S_IMODE(os.stat(str(key)).st_mode) == 0o600
    expected = "Host old\n    User me\n" + plan_env.ssh_client_config(
        [placed(0, "10.1.0.2"), placed(1, "10.1.0.3")])
    assert (ssh_dir / "config").read_text() == expected
    assert (job.dstack / "ssh" / "authorized_keys").read_text() == KEY["public"]

    # An ECDSA and an Ed25519 host key, as dstack's runner makes: no RSA key, which costs a
    # few hundred CPU milliseconds per node.
    etc_ssh = job.etc / "ssh"
    kinds = ("ecdsa", "ed25519")
    assert (fakes / "ssh-keygen.log").read_text().splitlines() == [
        "-q -t %s -N  -f %s/ssh_host_%s_key" % (kind, etc_ssh, kind) for kind in kinds]
    config_path = job.dstack / "ssh" / "sshd_config"
    (started,) = (fakes / "sshd.log").read_text().splitlines()
    assert started.split()[:2] == ["-f", str(config_path)]
    sshd_config = config_path.read_text().splitlines()
    # Every session reads the job's environment first: sshd runs it through session.sh.
    session = job.dstack / "ssh" / "session.sh"
    assert "ForceCommand %s" % session in sshd_config
    assert os.access(str(session), os.X_OK)
    for line in ("Port 10022", "PasswordAuthentication no", "UsePAM yes", "StrictModes no",
                 "ClientAliveInterval 30",
                 "AuthorizedKeysFile %s .ssh/authorized_keys"
                 % (job.dstack / "ssh" / "authorized_keys"),
                 "HostKey %s" % (etc_ssh / "ssh_host_ecdsa_key"),
                 "HostKey %s" % (etc_ssh / "ssh_host_ed25519_key")):
        assert line in sshd_config
    assert not [line for line in sshd_config if "rsa" in line]
    assert (job.etc / "pam.d" / "sshd").read_text() == "session optional pam_loginuid.so\n"
    assert "export GPUFLEET_MULTINODE='1'" in (job.dstack / "profile").read_text()
    assert (job.dstack / "mpi" / "hostfile").read_text() == "10.1.0.2\n10.1.0.3\n"


def test_no_sshd_warns_and_goes_on(tmp_path):
    job = Job(tmp_path, {"commands": ["touch ran"]}, nodes=2)
    path = tools_bin(tmp_path / "bin", BASIC_TOOLS, fakes={
        "apt-get": 'echo "$*" >> "$FAKE_LOG"\nexit 100\n',
    })
    log = tmp_path / "apt.log"
    proc = job.run((["/bin/sh"], path), extra={"FAKE_LOG": str(log)})
    assert proc.returncode == 0, proc.stderr
    warnings = [line for line in proc.stderr.decode().splitlines() if "sshd" in line]
    assert len(warnings) == 1 and warnings[0].startswith("gpufleet: warning:")
    assert (job.workdir / "ran").exists()
    if os.geteuid() == 0:
        assert log.read_text().splitlines()[0] == "update"
    assert (job.home / ".ssh" / "dstack_job").read_text() == KEY["private"]


def test_unknown_user_fails_clearly(tmp_path, shell):
    job = Job(tmp_path, {"user": "ghost", "commands": ["touch ran"]})
    proc = job.run(shell)
    assert proc.returncode == 1
    assert b"ghost does not exist" in proc.stderr
    assert job.read_state("exit_code") == "1"
    assert not (job.workdir / "ran").exists()


def test_no_tool_to_switch_user(tmp_path):
    job = Job(tmp_path, {"user": "nobody", "commands": ["touch ran"]})
    path = tools_bin(tmp_path / "bin", BASIC_TOOLS)
    proc = job.run((["/bin/sh"], path))
    assert proc.returncode == 1
    assert b"none of setpriv" in proc.stderr
    assert not (job.workdir / "ran").exists()


def test_command_runs_as_the_task_user():
    root = tempfile.mkdtemp(prefix="gpufleet-wrapper-")
    try:
        os.chmod(root, 0o755)
        from pathlib import Path

        job = Job(Path(root), {"user": "nobody", "working_dir": root + "/wd",
                               "commands": ["id -u > uid.out; id -g >> uid.out"]})
        proc = job.run((["/bin/sh"], os.environ.get("PATH", "/usr/bin:/bin")))
        if os.geteuid() == 0:
            assert proc.returncode == 0, proc.stderr
            assert (Path(root) / "wd" / "uid.out").read_text().split() == ["65534", "65534"]
            assert os.stat(root + "/wd").st_uid == 65534
        else:
            # Only root may switch users: the attempt fails and the failure is recorded.
            assert proc.returncode != 0
            assert job.read_state("exit_code") == str(proc.returncode)
    finally:
        shutil.rmtree(root, ignore_errors=True)


def test_wrapper_script_is_the_constant():
    assert wrapper.wrapper_script() == wrapper.WRAPPER
    assert wrapper.WRAPPER.startswith("#!/bin/sh\n")
    for name in ("GPUFLEET_DIR", "GPUFLEET_STATE", "DSTACK_DIR", "GPUFLEET_ETC"):
        assert "%s=${%s:-" % (name, name) in wrapper.WRAPPER
    check = subprocess.run(["/bin/sh", "-n"], input=wrapper.WRAPPER.encode(), check=False)
    assert check.returncode == 0


# ---------------------------------------------------------------------------------------------
# The run's code (repos)


@pytest.fixture
def code_archive(tmp_path):
    """A repo archive as repos.local.build_archive makes it: main.py and pkg/util.py."""
    from ansible_collections.gpufleet.cluster.plugins.module_utils.repos import local

    src = tmp_path / "code"
    (src / "pkg").mkdir(parents=True)
    (src / "main.py").write_text("print('main')\n")
    (src / "pkg" / "util.py").write_text("X = 1\n")
    out = tmp_path / "archives"
    out.mkdir()
    snap = local.Snapshot(str(src), ["main.py", "pkg/util.py"], [], False)
    return local.build_archive(snap, str(out))["path"]


def test_the_repo_is_unpacked_in_the_working_folder_by_default(tmp_path, shell, code_archive):
    job = Job(tmp_path, {"repos": ["."], "commands": [
        "printf '%s|%s|%s' \"$DSTACK_REPO_DIR\" \"$DSTACK_REPO_ID\" \"$(cat pkg/util.py)\" "
        "> vars.out"]}, repo_archive=code_archive)
    proc = job.run(shell)
    assert proc.returncode == 0, proc.stderr
    assert (job.workdir / "main.py").read_text() == "print('main')\n"
    assert (job.workdir / "vars.out").read_text() == "%s|code-12345678|X = 1" % job.workdir


@pytest.mark.parametrize("path, where", [("src/app", "image-workdir/src/app"),
                                         ("~/code", "home/code"), ("ABS", "abs/code")])
def test_the_repo_goes_to_its_path(tmp_path, shell, code_archive, path, where):
    if path == "ABS":
        path = str(tmp_path / "abs" / "code")
    job = Job(tmp_path, {"repos": [{"local_path": ".", "path": path}],
                         "commands": ["printf '%s' \"$DSTACK_REPO_DIR\" > repo.out"]},
              repo_archive=code_archive)
    proc = job.run(shell)
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / where / "pkg" / "util.py").exists()
    assert (job.workdir / "repo.out").read_text() == str(tmp_path / where)


def test_a_repo_dir_that_is_not_empty_fails_unless_if_exists_skip(tmp_path, shell,
                                                                  code_archive):
    job = Job(tmp_path, {"repos": ["."], "commands": ["echo ran > ran.out"]},
              repo_archive=code_archive)
    (job.workdir / "old.txt").write_text("old")
    proc = job.run(shell)
    assert proc.returncode == 1
    assert "Failed to set up the repo (repo dir is not empty: %s)" % job.workdir in (
        proc.stderr.decode())
    assert not (job.workdir / "ran.out").exists() and not (job.workdir / "main.py").exists()

    job = Job(tmp_path, {"repos": [{"local_path": ".", "if_exists": "skip"}],
                         "commands": ["echo ran > ran.out"]}, repo_archive=code_archive)
    proc = job.run(shell)
    assert proc.returncode == 0, proc.stderr
    assert "Skipping repo checkout: repo dir is not empty" in proc.stderr.decode()
    assert (job.workdir / "ran.out").exists() and not (job.workdir / "main.py").exists()


def test_a_lone_lost_and_found_counts_as_empty(tmp_path, shell, code_archive):
    job = Job(tmp_path, {"repos": ["."], "commands": ["true"]}, repo_archive=code_archive)
    (job.workdir / "lost+found").mkdir()
    proc = job.run(shell)
    assert proc.returncode == 0, proc.stderr
    assert (job.workdir / "main.py").exists() and (job.workdir / "lost+found").is_dir()


@pytest.fixture
def bare_repo(tmp_path):
    """A bare Git repository with a main and a dev branch, reachable as file://."""
    work = tmp_path / "upstream"
    work.mkdir()

    def git(*args, cwd=work):
        subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@example.com"] +
                       list(args), cwd=str(cwd), check=True, stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE)
    git("init", "-q", "-b", "main")
    (work / "app.py").write_text("BRANCH = 'main'\n")
    git("add", "-A")
    git("commit", "-q", "-m", "main")
    git("checkout", "-q", "-b", "dev")
    (work / "app.py").write_text("BRANCH = 'dev'\n")
    git("commit", "-q", "-am", "dev")
    bare = tmp_path / "code.git"
    git("clone", "-q", "--bare", str(work), str(bare), cwd=tmp_path)
    return "file://%s" % bare


# git is not a busybox applet: the clone runs with the system's sh (dash) and git.
SYSTEM_SH = (["/bin/sh"], os.environ.get("PATH", "/usr/bin:/bin"))


def remote_job(tmp_path, url, **repo):
    spec = dict({"url": url}, **repo)
    return Job(tmp_path, {"repos": [spec], "commands": ["cat app.py > out.txt"]},
               repo={"url": url, "branch": repo.get("branch"), "hash": repo.get("hash"),
                     "repo_id": "code-1"})


def test_a_remote_repo_is_cloned_at_its_branch(tmp_path, bare_repo):
    job = remote_job(tmp_path, bare_repo, branch="dev")
    proc = job.run(SYSTEM_SH)
    assert proc.returncode == 0, proc.stderr
    assert (job.workdir / "out.txt").read_text() == "BRANCH = 'dev'\n"
    assert (job.workdir / ".git").is_dir()


def test_a_failed_clone_names_the_url_and_the_credentials(tmp_path):
    job = remote_job(tmp_path, "file://%s/missing.git" % tmp_path)
    proc = job.run(SYSTEM_SH)
    assert proc.returncode == 1
    assert ("Failed to set up the repo (git clone of file://%s/missing.git failed" % tmp_path
            in proc.stderr.decode())
    assert "GIT_TOKEN or GIT_SSH_KEY" in proc.stderr.decode()


# ---------------------------------------------------------------------------------------------
# A run that supervises itself: a job that ends the run asks the others to stop over SSH, and
# each job's monitor carries such a request out. Each job tells job 0 how it ended, and job 0
# writes the run's end (state/run_end) once it has every job's word.


def multinode_fakes(tmp_path):
    """sshd and ssh-keygen that do nothing, and an ssh that logs its arguments and runs the
    remote command here (the "other node" shares this test's DSTACK_DIR)."""
    fakes = tmp_path / "fakes"
    fakes.mkdir()
    for name, text in (
        ("sshd", "exit 0\n"),
        ("ssh-keygen", "exit 0\n"),
        ("ssh", 'printf "%s\\n" "$*" >> "$FAKE_LOG/ssh.log"\n'
                'for last; do :; done\nsh -c "$last"\n'),
    ):
        (fakes / name).write_text("#!/bin/sh\n" + text)
        os.chmod(str(fakes / name), 0o755)
    return fakes


@contextlib.contextmanager
def with_peers(job, shell, fakes, **environ):
    """The job's wrapper started with multinode_fakes on its PATH (and ``environ``), killed if
    still there when the block ends."""
    proc = job.start(shell, path="%s:%s" % (fakes, shell[1]),
                     extra=dict(environ, FAKE_LOG=str(fakes)))
    try:
        yield proc
    finally:
        if proc.poll() is None:
            proc.kill()


def ssh_calls(fakes, what="run/stop"):
    """The fake ssh's calls whose remote command holds ``what``."""
    log = fakes / "ssh.log"
    return sorted(c for c in (log.read_text().splitlines() if log.exists() else [])
                  if what in c)


def test_a_failing_job_asks_the_other_nodes_to_stop(tmp_path, shell):
    job = Job(tmp_path, {"commands": ["exit 3"]}, nodes=3, rank=1)
    fakes = multinode_fakes(tmp_path)
    proc = job.run(shell, path="%s:%s" % (fakes, shell[1]), extra={"FAKE_LOG": str(fakes)})
    assert proc.returncode == 3, proc.stderr
    calls = ssh_calls(fakes)
    # Ranks 0 and 2, on the run's port with the run's key, and not itself.
    assert [c.split(" -l ")[1].split()[1] for c in calls] == ["10.1.0.2", "10.1.0.4"]
    for call in calls:
        assert "-p 10022" in call and "-i %s" % (job.dir / "ssh" / "dstack_job") in call
        # Bounded even when a peer goes silent after connecting.
        assert "-o ConnectTimeout=4" in call and "-o ServerAliveInterval=2" in call
        assert "-o ServerAliveCountMax=3" in call
    assert (job.dstack / "run" / "stop").read_text() == "terminated_by_server\n"
    # Said in the state folder, not in the job's output.
    assert job.read_state("peers.log") == (
        "gpufleet: asked the other nodes of the run to stop (terminated_by_server)")
    assert b"asked the other nodes" not in proc.stderr
    # Then it tells job 0 (at the master's address) how it ended: rank, code, began, reason.
    (told,) = ssh_calls(fakes, "end.1")
    assert told.split(" -l ")[1].split()[1] == "10.1.0.2"
    assert (job.dstack / "run" / "end.1").read_text() == "1 3 1 -\n"


def test_a_peer_that_never_answers_does_not_hold_the_jobs_end(tmp_path, shell):
    """One peer's ssh hangs before its session is up (no ssh option bounds that): the job
    still ends after GPUFLEET_PEER_STOP_LIMIT seconds, the other peer told, and says so."""
    job = Job(tmp_path, {"commands": ["exit 3"]}, nodes=3, rank=1)
    fakes = multinode_fakes(tmp_path)
    (fakes / "ssh").write_text(
        '#!/bin/sh\ncase "$*" in *10.1.0.4*) exec sleep 300 ;; esac\n'
        'for last; do :; done\nsh -c "$last"\n')
    started = time.time()
    proc = job.run(shell, path="%s:%s" % (fakes, shell[1]),
                   extra={"FAKE_LOG": str(fakes), "GPUFLEET_PEER_STOP_LIMIT": "1"})
    assert proc.returncode == 3, proc.stderr
    assert time.time() - started < 60
    assert (job.dstack / "run" / "stop").read_text() == "terminated_by_server\n"
    assert job.read_state("peers.log").splitlines() == [
        "gpufleet: could not reach another node to stop it (a gpufleet command on the fleet "
        "will stop it)",
        "gpufleet: asked the other nodes of the run to stop (terminated_by_server)"]


@pytest.mark.parametrize("criteria, rank, told", [
    ("master-done", 0, "done_by_runner"),
    ("master-done", 1, None),
    ("all-done", 0, None),
])
def test_the_master_of_a_master_done_run_ends_it(tmp_path, shell, criteria, rank, told):
    job = Job(tmp_path, {"commands": ["true"], "stop_criteria": criteria}, nodes=2, rank=rank)
    fakes = multinode_fakes(tmp_path)
    if rank == 0:
        tell_job_0(job, "1 0 1 done_by_runner")
    proc = job.run(shell, path="%s:%s" % (fakes, shell[1]), extra={"FAKE_LOG": str(fakes)})
    assert proc.returncode == 0, proc.stderr
    stop = job.dstack / "run" / "stop"
    assert (stop.read_text() if stop.exists() else None) == (told and told + "\n")


def test_a_job_stopped_from_outside_tells_nobody(tmp_path, shell):
    job = Job(tmp_path, {"commands": ["exit 9"]}, nodes=2, rank=1)
    (job.state / "reason").write_text("terminated_by_user\n")
    fakes = multinode_fakes(tmp_path)
    proc = job.run(shell, path="%s:%s" % (fakes, shell[1]), extra={"FAKE_LOG": str(fakes)})
    assert proc.returncode == 9, proc.stderr
    assert not ssh_calls(fakes)
    # It still tells job 0 how it ended.
    assert (job.dstack / "run" / "end.1").read_text() == "1 9 1 terminated_by_user\n"


@pytest.mark.parametrize("asked, recorded", [
    ("terminated_by_server", "terminated_by_server"),
    ("done_by_runner", "done_by_runner"),
    ("anything else", "terminated_by_server"),
])
def test_a_stop_request_from_another_node_stops_the_command(tmp_path, shell, asked, recorded):
    job = Job(tmp_path, {"commands": ["trap 'exit 7' TERM; : > ready; "
                                      "while :; do sleep 0.1; done"]}, nodes=2, rank=0)
    fakes = multinode_fakes(tmp_path)
    tell_job_0(job, "1 3 1 -")
    with with_peers(job, shell, fakes) as proc:
        wait_for(job.workdir / "ready")
        (job.dstack / "run" / "stop").write_text(asked + "\n")
        began = time.time()
        _out, err = proc.communicate(timeout=15)
    assert time.time() - began < 3
    assert proc.returncode == 7, err
    assert job.read_state("reason") == recorded
    assert b"another node of the run ended it" in err
    assert not ssh_calls(fakes)  # stopped from outside: nobody else is told


def tell_job_0(job, *lines):
    """What the other jobs told job 0 (``RANK CODE STARTED REASON`` each)."""
    (job.dstack / "run").mkdir(parents=True, exist_ok=True)
    for line in lines:
        (job.dstack / "run" / ("end." + line.split()[0])).write_text(line + "\n")


def test_job_0_waits_for_every_jobs_word_then_writes_the_runs_end(tmp_path, shell):
    job = Job(tmp_path, {"commands": ["exit 0"]}, nodes=3, rank=0)
    fakes = multinode_fakes(tmp_path)
    with with_peers(job, shell, fakes) as proc:
        wait_for(job.state / "exit_code")
        time.sleep(1.5)
        # Its command ended; it waits, its container still there, for jobs 1 and 2.
        assert proc.poll() is None and not (job.state / "run_end").exists()
        tell_job_0(job, "1 0 1 -")
        time.sleep(1.5)
        assert proc.poll() is None
        tell_job_0(job, "2 4 1 -")
        proc.communicate(timeout=15)
    assert proc.returncode == 0
    assert job.read_state("run_end").splitlines() == ["0 0 1 -", "1 0 1 -", "2 4 1 -"]
    assert not ssh_calls(fakes, "")   # every word came before a probe was due


def test_job_0_counts_a_job_gone_without_a_word_as_lost(tmp_path, shell):
    """Job 1 never tells, and no sshd answers at its address on two probes in a row."""
    job = Job(tmp_path, {"commands": ["exit 0"]}, nodes=3, rank=0)
    fakes = multinode_fakes(tmp_path)
    (fakes / "ssh").write_text(
        '#!/bin/sh\nprintf "%s\\n" "$*" >> "$FAKE_LOG/ssh.log"\n'
        'case "$*" in *10.1.0.3*) exit 255 ;; esac\n'
        'for last; do :; done\nsh -c "$last"\n')
    tell_job_0(job, "2 0 1 -")
    proc = job.run(shell, path="%s:%s" % (fakes, shell[1]),
                   extra={"FAKE_LOG": str(fakes), "GPUFLEET_PEER_PROBE_EVERY": "1",
                          "GPUFLEET_PEER_LOST_AFTER": "2"})
    assert proc.returncode == 0, proc.stderr
    assert job.read_state("run_end").splitlines() == ["0 0 1 -", "1 - - lost", "2 0 1 -"]
    # Silent from the first probe to one at least GPUFLEET_PEER_LOST_AFTER seconds later.
    probes = ssh_calls(fakes, "true")
    assert len(probes) >= 3 and all("10.1.0.3" in p for p in probes), probes
    assert job.read_state("peers.log") == (
        "gpufleet: the jobs of rank 1 ended without a word (no sshd answers where they ran)")


def test_job_0_keeps_waiting_for_a_job_that_still_answers(tmp_path, shell):
    job = Job(tmp_path, {"commands": ["exit 0"]}, nodes=2, rank=0)
    fakes = multinode_fakes(tmp_path)
    with with_peers(job, shell, fakes, GPUFLEET_PEER_PROBE_EVERY="1") as proc:
        wait_for(job.state / "exit_code")
        deadline = time.time() + 15
        while len(ssh_calls(fakes, "true")) < 3:
            assert time.time() < deadline and proc.poll() is None
            time.sleep(0.2)
        tell_job_0(job, "1 0 1 -")
        proc.communicate(timeout=15)
    assert job.read_state("run_end").splitlines() == ["0 0 1 -", "1 0 1 -"]


@pytest.mark.parametrize("said, term, untold", [
    ("terminated_by_user", True, "1 - 1 terminated_by_user"),
    (None, True, "1 - - unknown"),
    # The host's word alone (TERM came before the wait began, when it is ignored).
    ("terminated_by_server", False, "1 - - unknown"),
])
def test_a_stop_that_comes_while_job_0_waits_ends_the_wait(tmp_path, shell, said, term,
                                                           untold):
    """Its command ended, job 0 waits for job 1: a stop (docker stop's TERM, after the host
    wrote the run's stop in run_stopped) ends it at once."""
    job = Job(tmp_path, {"commands": ["exit 0"]}, nodes=2, rank=0)
    fakes = multinode_fakes(tmp_path)
    with with_peers(job, shell, fakes) as proc:
        wait_for(job.state / "exit_code")
        time.sleep(1)
        if said:
            (job.state / "run_stopped").write_text(said + "\n")
        if term:
            proc.send_signal(signal.SIGTERM)
        proc.communicate(timeout=10)
    assert proc.returncode == 0
    assert job.read_state("run_end").splitlines() == ["0 0 1 -", untold]


def test_a_stop_ends_a_round_of_probes_under_way(tmp_path, shell):
    """Three jobs whose sshd stalls (each probe waits GPUFLEET_PEER_STOP_LIMIT): a TERM
    during the round ends the wait without probing the rest."""
    job = Job(tmp_path, {"commands": ["exit 0"]}, nodes=4, rank=0)
    fakes = multinode_fakes(tmp_path)
    (fakes / "ssh").write_text('#!/bin/sh\nprintf "%s\\n" "$*" >> "$FAKE_LOG/ssh.log"\n'
                               'exec sleep 300\n')
    with with_peers(job, shell, fakes, GPUFLEET_PEER_PROBE_EVERY="1",
                    GPUFLEET_PEER_STOP_LIMIT="4") as proc:
        deadline = time.time() + 15
        while not ssh_calls(fakes, "true"):
            assert time.time() < deadline and proc.poll() is None
            time.sleep(0.1)
        began = time.time()
        proc.send_signal(signal.SIGTERM)
        proc.communicate(timeout=15)
    assert time.time() - began < 6   # the probe under way ends, the next two never begin
    assert len(ssh_calls(fakes, "true")) == 1
    assert job.read_state("run_end").splitlines() == [
        "0 0 1 -", "1 - - unknown", "2 - - unknown", "3 - - unknown"]


def test_a_users_stop_ends_job_0s_wait_at_once(tmp_path, shell):
    job = Job(tmp_path, {"commands": ["exit 0"]}, nodes=3, rank=0)
    (job.state / "reason").write_text("terminated_by_user\n")
    fakes = multinode_fakes(tmp_path)
    tell_job_0(job, "2 143 1 terminated_by_user")
    proc = job.run(shell, path="%s:%s" % (fakes, shell[1]), extra={"FAKE_LOG": str(fakes)})
    assert proc.returncode == 0, proc.stderr
    assert job.read_state("run_end").splitlines() == [
        "0 0 1 terminated_by_user", "1 - 1 terminated_by_user", "2 143 1 terminated_by_user"]
    assert not ssh_calls(fakes, "")


def _fake_sshd(tmp_path, check_rc=0):
    fakes = tmp_path / "fakes"
    fakes.mkdir()
    (fakes / "sshd").write_text(
        '#!/bin/sh\nprintf "%%s\\n" "$*" >> "$FAKE_LOG/sshd.log"\n'
        'case $1 in -t) exit %d ;; esac\n' % check_rc)
    (fakes / "ssh-keygen").write_text("#!/bin/sh\n" + FAKE_KEYGEN)
    for name in ("sshd", "ssh-keygen"):
        os.chmod(str(fakes / name), 0o755)
    return fakes


def test_a_single_node_run_with_a_key_starts_the_images_sshd_for_attach(tmp_path, shell):
    job = Job(tmp_path, {"commands": ["true"]}, key=True)
    fakes = _fake_sshd(tmp_path)
    proc = job.run(shell, path="%s:%s" % (fakes, shell[1]), extra={"FAKE_LOG": str(fakes)})
    assert proc.returncode == 0, proc.stderr
    assert (job.dstack / "ssh" / "authorized_keys").read_text() == KEY["public"]
    assert (fakes / "sshd.log").read_text().splitlines()[-1].startswith(
        "-f %s" % (job.dstack / "ssh" / "sshd_config"))
    # Nothing of the multi-node client side: no key or config in the user's home.
    assert not (job.home / ".ssh").exists()


def test_an_ssh_keygen_without_ecdsa_or_ed25519_falls_back_to_making_every_host_key(
        tmp_path, shell):
    job = Job(tmp_path, {"commands": ["true"]}, key=True)
    fakes = _fake_sshd(tmp_path)
    proc = job.run(shell, path="%s:%s" % (fakes, shell[1]),
                   extra={"FAKE_LOG": str(fakes), "FAKE_REFUSE": "ecdsa ed25519"})
    assert proc.returncode == 0, proc.stderr
    calls = (fakes / "ssh-keygen.log").read_text().splitlines()
    assert [c.split()[2] for c in calls[:2]] == ["ecdsa", "ed25519"]
    assert calls[2:] == ["-A"]
    assert "HostKey %s" % (job.etc / "ssh" / "ssh_host_ed25519_key") in (
        job.dstack / "ssh" / "sshd_config").read_text().splitlines()


def test_host_keys_the_image_has_are_kept(tmp_path, shell):
    job = Job(tmp_path, {"commands": ["true"]}, key=True)
    (job.etc / "ssh").mkdir()
    (job.etc / "ssh" / "ssh_host_rsa_key").write_text("baked in")
    fakes = _fake_sshd(tmp_path)
    proc = job.run(shell, path="%s:%s" % (fakes, shell[1]), extra={"FAKE_LOG": str(fakes)})
    assert proc.returncode == 0, proc.stderr
    assert not (fakes / "ssh-keygen.log").exists()
    assert "HostKey %s" % (job.etc / "ssh" / "ssh_host_rsa_key") in (
        job.dstack / "ssh" / "sshd_config").read_text().splitlines()


def test_the_session_script_reads_the_profile_then_runs_what_was_asked(tmp_path, shell):
    job = Job(tmp_path, {"commands": ["true"], "env": {"GREETING": "two words"}}, key=True)
    fakes = _fake_sshd(tmp_path)
    proc = job.run(shell, path="%s:%s" % (fakes, shell[1]), extra={"FAKE_LOG": str(fakes)})
    assert proc.returncode == 0, proc.stderr
    session = str(job.dstack / "ssh" / "session.sh")

    def login(command=None, login_shell="/bin/sh"):
        env = {"PATH": shell[1], "SHELL": login_shell}
        if command is not None:
            env["SSH_ORIGINAL_COMMAND"] = command
        return subprocess.run([session], env=env, stdout=subprocess.PIPE, check=False,
                              timeout=20).stdout.decode()

    assert login('echo "$GREETING"; echo "$DSTACK_NODE_RANK"') == "two words\n0\n"
    assert login('pwd').strip() == str(job.workdir)
    # No command: a login shell (its profile files are the image's; here, none).
    assert login(login_shell="/bin/echo") == "-l\n"


def test_a_single_node_image_without_sshd_is_not_given_one(tmp_path):
    job = Job(tmp_path, {"commands": ["touch ran"]}, key=True)
    path = tools_bin(tmp_path / "bin", BASIC_TOOLS, fakes={
        "apt-get": 'echo "$*" >> "$FAKE_LOG"\nexit 100\n',
    })
    log = tmp_path / "apt.log"
    proc = job.run((["/bin/sh"], path), extra={"FAKE_LOG": str(log)})
    assert proc.returncode == 0, proc.stderr
    assert (job.workdir / "ran").exists()
    assert not log.exists()   # no package manager call for a single node
    assert b"sshd" not in proc.stderr   # not in the job's log: the run does not need it
    assert job.read_state("sshd.log") == \
        "no sshd in the image: ssh to this run (gpufleet attach) is not available"


TCP_HEADER = ("  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid"
              "  timeout inode\n")


def test_a_dev_environment_with_no_ssh_connection_stops_after_its_inactivity_duration(
        tmp_path, shell):
    proc_dir = tmp_path / "proc" / "net"
    proc_dir.mkdir(parents=True)
    # Listening on 10022 (0A) and a connection to another port: neither is activity.
    (proc_dir / "tcp").write_text(
        TCP_HEADER
        + "   0: 00000000:271E 00000000:0000 0A 00000000:00000000 00:00000000 00000000 0 0 1\n"
        + "   1: 0100007F:1F90 0100007F:C350 01 00000000:00000000 00:00000000 00000000 0 0 2\n")
    job = Job(tmp_path, {"commands": ["while :; do sleep 1; done"]}, extra_config={
        "run_type": "dev-environment", "inactivity_duration": 2})
    started = time.time()
    proc = job.run(shell, extra={"GPUFLEET_PROC": str(tmp_path / "proc")})
    assert time.time() - started < 20
    assert job.read_state("reason") == "inactivity_duration_exceeded"
    assert re.search(rb"gpufleet: The job was inactive for [23] seconds, exceeding the "
                     rb"inactivity_duration of 2 seconds: stopping the command", proc.stderr), \
        proc.stderr


def fake_cgroup(root, version):
    """A container's cgroup files as the kernel shows them, v2 (unified) or v1."""
    if version == 2:
        root.mkdir()
        (root / "cpu.stat").write_text("usage_usec 5000000\nuser_usec 4000000\n"
                                       "system_usec 1000000\n")
        (root / "memory.current").write_text("734003200\n")
        (root / "memory.stat").write_text("anon 600000000\nfile 100000000\n"
                                          "inactive_file 34003200\nactive_file 1000\n")
        (root / "memory.max").write_text("max\n")
    else:
        (root / "cpuacct").mkdir(parents=True)
        (root / "memory").mkdir()
        (root / "cpuacct" / "cpuacct.usage").write_text("5000000000\n")
        (root / "memory" / "memory.usage_in_bytes").write_text("734003200\n")
        (root / "memory" / "memory.stat").write_text(
            "cache 1000\ninactive_file 5\ntotal_cache 1000\ntotal_inactive_file 34003200\n")
        (root / "memory" / "memory.limit_in_bytes").write_text("2147483648\n")
    return str(root)


@pytest.mark.parametrize("version, limit", [(2, "max"), (1, "2147483648")])
def test_metrics_are_sampled_from_the_cgroup_proc_and_nvidia_smi(tmp_path, shell, version,
                                                                 limit):
    proc = tmp_path / "proc"
    proc.mkdir()
    (proc / "uptime").write_text("12345.67 40000.00\n")
    (proc / "meminfo").write_text("MemTotal:       16303592 kB\nMemFree:  1000 kB\n")
    fakes = tmp_path / "fakes"
    fakes.mkdir()
    (fakes / "nvidia-smi").write_text(
        "#!/bin/sh\n"
        "[ \"$1 $2\" = '--query-gpu=utilization.gpu,memory.used,memory.total "
        "--format=csv,noheader,nounits' ] || exit 2\n"
        "printf '93, 71234, 81559\\n0, 3, 81559\\n'\n")
    os.chmod(str(fakes / "nvidia-smi"), 0o755)
    # The command lasts until two samples are written (a sample each second; on a loaded
    # machine one sample can take longer than that), or 30 s.
    metrics = tmp_path / "job" / "state" / "metrics"
    wait = ("i=0; while [ $i -lt 60 ]; do n=$(grep -c '^@ ' %s 2>/dev/null); "
            "[ \"${n:-0}\" -lt 2 ] || break; sleep 0.5; i=$((i+1)); done" % metrics)
    job = Job(tmp_path, {"commands": [wait]})
    done = job.run(shell, path="%s:%s" % (fakes, shell[1]), extra={
        "GPUFLEET_CGROUP": fake_cgroup(tmp_path / "cgroup", version),
        "GPUFLEET_PROC": str(proc), "GPUFLEET_METRICS_INTERVAL": "1"})
    assert done.returncode == 0, done.stderr
    lines = (job.state / "metrics").read_text().splitlines()
    headers = [line.split() for line in lines if line.startswith("@ ")]
    assert len(headers) >= 2, lines
    for header in headers:
        assert header[1].isdigit() and header[2] == "12345.67"
        assert header[3:7] == ["5000000", "734003200", "34003200", limit]
        assert header[7].isdigit() and header[8] == "16303592"
    assert lines[1:3] == ["nvidia 93 71234 81559", "nvidia 0 3 81559"]


def short_window(job, seconds):
    """The job's utilization_policy window made ``seconds`` (the grammar's least is 5m)."""
    env = job.dir / "env.sh"
    env.write_text(re.sub(r"GPUFLEET_UTIL_WINDOW=\S*", "GPUFLEET_UTIL_WINDOW=%d" % seconds,
                          env.read_text()))


def fake_gpus(tmp_path, *utils):
    """A directory with an nvidia-smi that reports one GPU per value of ``utils`` (percent)."""
    fakes = tmp_path / "fakes"
    fakes.mkdir()
    lines = "".join("%s, 100, 81559\\n" % u for u in utils)
    (fakes / "nvidia-smi").write_text("#!/bin/sh\nprintf '%s'\n" % lines)
    os.chmod(str(fakes / "nvidia-smi"), 0o755)
    return fakes


def test_utilization_policy_stops_a_job_whose_gpu_stays_below_the_least_for_the_window(
        tmp_path, shell):
    # GPU 1 idles (0%) while GPU 0 works: one idle GPU is enough, as dstack judges it
    fakes = fake_gpus(tmp_path, 90, 0)
    job = Job(tmp_path, {"commands": ["sleep 60"], "stop_duration": 1,
                         "utilization_policy": {"min_gpu_utilization": 10, "time_window": 300}})
    short_window(job, 2)
    started = time.time()
    done = job.run(shell, path="%s:%s" % (fakes, shell[1]),
                   extra={"GPUFLEET_METRICS_INTERVAL": "1"})
    assert time.time() - started < 30
    assert done.returncode != 0
    assert (job.state / "reason").read_text() == "terminated_due_to_utilization_policy\n"
    assert b"The job GPU utilization below 10% for 2 seconds: the command was stopped" in (
        done.stderr)


def test_utilization_policy_leaves_a_busy_job_alone_and_samples_even_with_metrics_off(
        tmp_path, shell):
    fakes = fake_gpus(tmp_path, 50, 40)
    policy = {"min_gpu_utilization": 10, "time_window": 300}
    job = Job(tmp_path, {"commands": ["sleep 4"], "utilization_policy": policy})
    short_window(job, 2)
    done = job.run(shell, path="%s:%s" % (fakes, shell[1]),
                   extra={"GPUFLEET_METRICS_INTERVAL": "1"})
    assert done.returncode == 0, done.stderr
    assert not (job.state / "reason").exists()
    # metrics off: the policy still needs its samples (every 10 s); a job shorter than that
    # is sampled once, at its start
    (tmp_path / "off").mkdir()
    fakes = fake_gpus(tmp_path / "off", 0)
    job = Job(tmp_path / "off", {"commands": ["sleep 1"], "utilization_policy": policy})
    done = job.run(shell, path="%s:%s" % (fakes, shell[1]),
                   extra={"GPUFLEET_METRICS_INTERVAL": "0"})
    assert done.returncode == 0, done.stderr
    assert (job.state / "metrics").read_text().splitlines()[1] == "nvidia 0 100 81559"


def test_utilization_policy_judges_amd_gpus_from_amd_smis_gfx_column(tmp_path, shell):
    fakes = tmp_path / "fakes"
    fakes.mkdir()
    # amd-smi's CSV: a header, then one row per GPU; GPU 1 idles, GPU 0 works.
    (fakes / "amd-smi").write_text(
        "#!/bin/sh\n"
        "printf 'gpu,power_usage,hotspot_temperature,gfx,vram_used,vram_total\\n"
        "0,300,60,87.5,1000,196592\\n1,90,40,N/A,1000,196592\\n"
        "2,90,40,0,1000,196592\\n'\n")
    os.chmod(str(fakes / "amd-smi"), 0o755)
    job = Job(tmp_path, {"commands": ["sleep 60"], "stop_duration": 1,
                         "utilization_policy": {"min_gpu_utilization": 10, "time_window": 300}})
    short_window(job, 2)
    started = time.time()
    done = job.run(shell, path="%s:%s" % (fakes, shell[1]),
                   extra={"GPUFLEET_METRICS_INTERVAL": "1"})
    assert time.time() - started < 30
    assert (job.state / "reason").read_text() == "terminated_due_to_utilization_policy\n"
    assert done.returncode != 0
    # A busy AMD GPU (and one that says N/A) is left alone.
    (tmp_path / "busy").mkdir()
    busy = tmp_path / "busy" / "fakes"
    busy.mkdir()
    (busy / "amd-smi").write_text(
        "#!/bin/sh\nprintf 'gpu,gfx,vram_used,vram_total\\n0,55,1,2\\n1,N/A,1,2\\n'\n")
    os.chmod(str(busy / "amd-smi"), 0o755)
    job = Job(tmp_path / "busy", {"commands": ["sleep 4"], "utilization_policy": {
        "min_gpu_utilization": 10, "time_window": 300}})
    short_window(job, 2)
    done = job.run(shell, path="%s:%s" % (busy, shell[1]),
                   extra={"GPUFLEET_METRICS_INTERVAL": "1"})
    assert done.returncode == 0, done.stderr
    assert not (job.state / "reason").exists()


@pytest.mark.parametrize("interval", ["0", "00"])
def test_metrics_can_be_turned_off(tmp_path, shell, interval):
    # Long enough for a sampler to write (the test above: one sample at once, then each second).
    job = Job(tmp_path, {"commands": ["sleep 2"]})
    done = job.run(shell, extra={"GPUFLEET_METRICS_INTERVAL": interval})
    assert done.returncode == 0, done.stderr
    assert not (job.state / "metrics").exists()


def test_metrics_read_nvidia_smi_fields_it_cannot_give_and_ignore_the_jobs_omp_threads(
        tmp_path, shell):
    fakes = tmp_path / "fakes"
    fakes.mkdir()
    (fakes / "nvidia-smi").write_text(
        "#!/bin/sh\nprintf '[Not Supported], 1234, 81559\\n'\n")
    os.chmod(str(fakes / "nvidia-smi"), 0o755)
    job = Job(tmp_path, {"commands": ["sleep 1"], "env": ["OMP_NUM_THREADS=64"]})
    done = job.run(shell, path="%s:%s" % (fakes, shell[1]),
                   extra={"GPUFLEET_METRICS_INTERVAL": "01"})
    assert done.returncode == 0, done.stderr
    lines = (job.state / "metrics").read_text().splitlines()
    assert lines[1] == "nvidia [NotSupported] 1234 81559"
    header = lines[0].split()
    assert header[7] != "64" and header[7].isdigit() and len(header) == 9, header


# --- the job's output, kept beside its state (tasks.joblogs reads it) ---------------------------

def _idx(path):
    return [tuple(int(x) for x in line.split()) for line in path.read_text().splitlines()]


def test_output_goes_to_docker_and_to_the_state_folder(tmp_path, shell):
    job = Job(tmp_path, {"commands": ["echo to-stdout", "echo to-stderr >&2",
                                      "printf 'no newline'"]})
    done = job.run(shell)
    assert done.returncode == 0, done.stderr
    # docker still gets each stream on its own
    assert done.stdout == b"to-stdout\nno newline"
    assert b"to-stderr" in done.stderr and b"to-stdout" not in done.stderr
    kept = (job.state / "output.log").read_bytes()
    assert sorted(kept.replace(b"no newline", b"no newline\n").splitlines()) == [
        b"no newline", b"to-stderr", b"to-stdout"]
    entries = _idx(job.state / "output.idx")
    assert entries[0][1] == 0 and entries[-1][1] == len(kept), entries
    assert [e[0] for e in entries] == sorted(e[0] for e in entries)
    assert (job.state / "output.base").read_text().strip() == "0 0"
    # Only root reads what a job printed.
    assert stat.S_IMODE((job.state / "output.log").stat().st_mode) == 0o600


def test_setup_failures_are_kept_too(tmp_path, shell):
    job = Job(tmp_path, {"user": "ghost", "commands": ["touch ran"]})
    done = job.run(shell)
    assert done.returncode == 1
    assert b"ghost" in (job.state / "output.log").read_bytes()
    assert b"ghost" in done.stderr


def test_output_rotates_at_half_the_cap_and_offsets_count_every_byte(tmp_path, shell):
    # 1 MB cap: output.log is copied to output.log.1 and emptied once past 512 KiB, at the
    # keeper's once-a-second tick. The pauses after the bursts give it ticks between them; on
    # a loaded machine a tick can still come in the middle of a burst (a burst of printf can
    # take longer than a second there), so where the files were cut is read from
    # output.base, and every byte is checked against the offset it was printed at.
    burst = "i=0; while [ $i -lt 700 ]; do printf '%%01023d\\n' %d; i=$((i+1)); done"
    job = Job(tmp_path, {"commands": [burst % 1, "sleep 3", burst % 2, "sleep 3", "echo last"]})
    done = job.run(shell, extra={"GPUFLEET_LOGS_MAX_MB": "1"})
    assert done.returncode == 0, done.stderr[-2000:]
    printed = (("%01023d\n" % 1) * 700 + ("%01023d\n" % 2) * 700 + "last\n").encode()
    first, base = [int(f) for f in (job.state / "output.base").read_text().split()]
    current = (job.state / "output.log").read_bytes()
    previous = (job.state / "output.log.1").read_bytes()
    # 1.4 MB printed: at least two rotations (one per burst), each of more than half the cap.
    assert 512 * 1024 < first < base and base - first > 512 * 1024
    assert previous == printed[first:base]
    assert current == printed[base:] and current.endswith(b"last\n")
    entries = _idx(job.state / "output.idx")
    assert entries[0][1] == base and entries[-1][1] == len(printed)
    assert _idx(job.state / "output.idx.1")[0][1] == first


# The command stops every process of the wrapper's own shell beside itself: that is the output
# keeper alone (no max_duration, one node, metrics off: no monitor, no sampler; the tees are tee).
# Its 2>/dev/null comes before the < of a process that may have ended since the glob: dash opens
# redirections left to right and would print the failed open to the job's output first.
STOP_THE_KEEPER = (
    "read -r _ me _ < /proc/$PPID/stat; "
    "for f in /proc/[0-9]*/stat; do "
    "read -r pid comm _ ppid _ 2>/dev/null < $f || continue; "
    "if [ \"$ppid\" = \"$PPID\" ] && [ \"$comm\" = \"$me\" ] && [ \"$pid\" != $$ ]; "
    "then kill -STOP $pid && echo stopped; fi; "
    "done")


def test_a_keeper_that_never_takes_its_term_does_not_hold_the_jobs_end(tmp_path, shell):
    """A TERM sent to the keeper just after it started can be lost (the subshell takes it
    under its parent's trap, then resets its traps and drops it: a job whose user did not
    exist hung so on a loaded machine). The wrapper sends it again and ends the keeper with
    KILL after three seconds. A stopped keeper takes no TERM at all: the job still ends."""
    job = Job(tmp_path, {"commands": [STOP_THE_KEEPER, "echo done"]})
    started = time.time()
    proc = job.run(shell, extra={"GPUFLEET_METRICS_INTERVAL": "0"}, timeout=30)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines() == [b"stopped", b"done"]
    assert 3 <= time.time() - started < 20
    assert job.read_state("exit_code") == "0"
    assert (job.state / "output.log").read_bytes() == b"stopped\ndone\n"


def test_since_skips_what_was_printed_before_a_quiet_spell(tmp_path, shell, monkeypatch):
    job = Job(tmp_path, {"commands": ["echo early", "sleep 3", "echo late"]})
    done = job.run(shell)
    assert done.returncode == 0, done.stderr
    began = int(job.read_state("running"))
    monkeypatch.setattr(nodeside, "RUN_ROOT", str(tmp_path / "runs"))
    (tmp_path / "runs" / "wrap" / "0").mkdir(parents=True)
    os.symlink(str(job.state), str(tmp_path / "runs" / "wrap" / "0" / "state"))
    page = logside.read_job("wrap", 0, since=began + 2)
    assert base64.b64decode(page["data"]) == b"late\n", _idx(job.state / "output.idx")


def test_the_host_reads_what_the_wrapper_kept(tmp_path, monkeypatch):
    # The host side (tasks.hostside.logside) on the very files a wrapper wrote, rotation included.
    burst = "i=0; while [ $i -lt 700 ]; do printf '%%01023d\\n' %d; i=$((i+1)); done"
    job = Job(tmp_path, {"commands": [burst % 1, "sleep 2", burst % 2, "echo last"]})
    done = job.run((["/bin/sh"], os.environ.get("PATH", "/usr/bin:/bin")),
                   extra={"GPUFLEET_LOGS_MAX_MB": "1"})
    assert done.returncode == 0
    monkeypatch.setattr(nodeside, "RUN_ROOT", str(tmp_path / "runs"))
    (tmp_path / "runs" / "wrap" / "0").mkdir(parents=True)
    os.symlink(str(job.state), str(tmp_path / "runs" / "wrap" / "0" / "state"))
    whole = logside.read_job("wrap", 0, limit=8 << 20)
    data = base64.b64decode(whole["data"])
    # However many rotations the load allowed, what is kept is the end of all that was
    # printed, at the offsets it was printed at. The keeper rotates at its once-a-second
    # tick: on a loaded machine a tick can come in the middle of a burst, or only after
    # both (one rotation, which keeps everything: first is then 0).
    printed = (("%01023d\n" % 1) * 700 + ("%01023d\n" % 2) * 700 + "last\n").encode()
    assert (job.state / "output.log.1").exists()
    assert data.endswith(b"last\n") and 0 <= whole["first"] < len(printed)
    assert data == printed[whole["first"]:]
    assert whole["next"] == whole["end"] == len(printed)
    last = base64.b64decode(logside.read_job("wrap", 0, tail=2)["data"])
    assert last == ("%01023d\nlast\n" % 2).encode()
