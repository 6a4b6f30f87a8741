# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The SSH transport of the task runner (tasks.ssh): the OpenSSH command line made from an
instance record, and ``Node.call``/``Node.check`` over a fake runner in place of subprocess.run.
"""

from __future__ import annotations

import re

import json
import os
import shlex
import stat
import subprocess

import pytest
from ansible_collections.gpufleet.cluster.plugins.module_utils.core.files import module_source
from ansible_collections.gpufleet.cluster.plugins.module_utils.fleets import state
from ansible_collections.gpufleet.cluster.plugins.module_utils.tasks import ssh
from ansible_collections.gpufleet.cluster.plugins.module_utils.tasks.hostside import (
    acmeside,
    admitside,
    booking,
    bootstrap,
    engineside,
    eventside,
    healthside,
    indexside,
    logside,
    memberside,
    metricside,
    mirrorside,
    nodeside,
    notifyside,
    proxyconf,
    proxyside,
    replicaside,
    runendside,
    scheduleside,
    usageside,
    volumeside,
)
from ansible_collections.gpufleet.cluster.plugins.module_utils.tasks.ssh import Node, NodeError


@pytest.fixture(autouse=True)
def control_folder(tmp_path, monkeypatch):
    folder = tmp_path / "ctl"
    monkeypatch.setattr(ssh, "_CONTROL_DIR", str(folder))
    return folder


def local_instance(**changes):
    record = {
        "name": "dev-0", "num": 0, "fleet": "dev", "backend": "local", "region": "local",
        "hostname": "172.18.0.2", "port": 22, "user": "gpufleet",
        "identity_file": "/state/fleets/dev/id_ed25519", "proxy_jump": None,
    }
    record.update(changes)
    return record


def ssh_instance(**changes):
    record = {
        "name": "lab-1", "num": 1, "fleet": "lab", "backend": "ssh", "region": "remote",
        "hostname": "10.0.0.5", "port": 2201, "user": "ubuntu",
        "identity_file": "/keys/lab", "proxy_jump": {
            "hostname": "bastion.example.com", "port": 2222, "user": "jumper",
            "identity_file": "/keys/jump",
        },
    }
    record.update(changes)
    return record


def options(argv):
    """The ``-o`` values of an ssh argv, as a dict."""
    found = {}
    for index, word in enumerate(argv):
        if word == "-o":
            key, _sep, value = argv[index + 1].partition("=")
            found[key] = value
    return found


def flag(argv, name):
    return argv[argv.index(name) + 1]


class FakeRunner(object):
    """In place of subprocess.run: records each call and answers the next queued result."""

    def __init__(self, *answers):
        self.answers = list(answers)
        self.calls = []

    def __call__(self, argv, **kwargs):
        self.calls.append((argv, kwargs))
        answer = self.answers.pop(0)
        if isinstance(answer, BaseException):
            raise answer
        rc, out, err = answer
        return subprocess.CompletedProcess(argv, rc, out, err)


def answer(data, rc=0, err=b""):
    return (rc, (json.dumps(data) + "\n").encode("utf-8"), err)


# ---------------------------------------------------------------------------------------------
# The ssh command line
# ---------------------------------------------------------------------------------------------


def test_argv_for_a_local_backend_node(control_folder):
    argv = Node(local_instance()).argv("docker ps")

    assert argv[:2] == ["ssh", "-T"]
    assert argv[-3:] == ["gpufleet@172.18.0.2", "--", "docker ps"]
    opts = options(argv)
    assert opts["BatchMode"] == "yes"
    assert opts["ConnectTimeout"] == "20"
    assert opts["StrictHostKeyChecking"] == "no"
    assert opts["UserKnownHostsFile"] == "/dev/null"
    assert opts["IdentitiesOnly"] == "yes"
    assert opts["ControlMaster"] == "auto"
    assert re.match(re.escape(str(control_folder)) + r"/[0-9a-f]{8}-%C$", opts["ControlPath"])
    assert opts["ControlPersist"] == str(ssh.CONTROL_PERSIST)
    assert "ProxyCommand" not in opts
    assert flag(argv, "-i") == "/state/fleets/dev/id_ed25519"
    assert flag(argv, "-p") == "22"


def test_the_control_folder_is_private(control_folder):
    Node(local_instance()).argv("true")

    assert control_folder.is_dir()
    assert stat.S_IMODE(os.stat(str(control_folder)).st_mode) == 0o700


def test_argv_with_another_connect_timeout_and_default_port():
    argv = Node(local_instance(port=None), connect_timeout=5).argv("true")

    assert options(argv)["ConnectTimeout"] == "5"
    assert flag(argv, "-p") == "22"


def test_argv_without_user_or_key():
    argv = Node(local_instance(user=None, identity_file=None)).argv("true")

    assert "-i" not in argv
    assert "IdentitiesOnly" not in options(argv)
    assert argv[-3] == "172.18.0.2"


def test_argv_for_an_ssh_fleet_host_behind_a_jump_host(tmp_path):
    root = str(tmp_path / "state")
    known_hosts = state.known_hosts_path(root, "lab")

    argv = Node(ssh_instance(), root=root).argv("true")

    opts = options(argv)
    assert opts["StrictHostKeyChecking"] == "accept-new"
    assert opts["UserKnownHostsFile"] == known_hosts
    assert known_hosts.startswith(root + os.sep)
    assert opts["IdentitiesOnly"] == "yes"
    assert opts["BatchMode"] == "yes"
    assert flag(argv, "-i") == "/keys/lab"
    assert flag(argv, "-p") == "2201"
    assert argv[-3] == "ubuntu@10.0.0.5"

    proxy = shlex.split(opts["ProxyCommand"])
    assert proxy[:4] == ["ssh", "-W", "%h:%p", "-q"]
    assert flag(proxy, "-p") == "2222"
    assert flag(proxy, "-i") == "/keys/jump"
    assert proxy[-1] == "jumper@bastion.example.com"
    jump_opts = options(proxy)
    assert jump_opts["StrictHostKeyChecking"] == "accept-new"
    assert jump_opts["UserKnownHostsFile"] == known_hosts
    assert jump_opts["BatchMode"] == "yes"
    assert jump_opts["IdentitiesOnly"] == "yes"


def test_the_known_hosts_folder_is_made_before_the_first_connection(tmp_path):
    """OpenSSH records a key on first contact only where it can make the file."""
    root = str(tmp_path / "state")
    Node(ssh_instance(), root=root).argv("true")
    assert os.path.isdir(os.path.dirname(state.known_hosts_path(root, "lab")))
    Node(local_instance(fleet="dev"), root=root).argv("true")
    assert not os.path.exists(os.path.join(root, "fleets", "dev"))  # no keys recorded there


CHANGED_KEY = (b"@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@\n"
               b"@    WARNING: REMOTE HOST IDENTIFICATION HAS CHANGED!     @\n"
               b"Host key for [10.0.0.5]:2201 has changed and you have requested strict "
               b"checking.\nHost key verification failed.\n")


@pytest.mark.parametrize("how", ["call", "check"])
def test_a_changed_host_key_is_refused_with_how_to_accept_it(tmp_path, how):
    root = str(tmp_path / "state")
    node = Node(ssh_instance(), root=root, runner=FakeRunner((255, b"", CHANGED_KEY)))
    with pytest.raises(NodeError) as caught:
        node.call("status") if how == "call" else node.check("true")
    message = str(caught.value)
    known = state.known_hosts_path(root, "lab")
    assert message.startswith("lab-1: the SSH host key of ubuntu@10.0.0.5:2201 (instance lab-1 "
                              "of fleet lab) has changed since it was first recorded in " + known)
    assert "ssh-keygen -R '[10.0.0.5]:2201' -f %s" % known in message
    assert "\n" not in message and "@@@" not in message
    assert not caught.value.silent  # the host answered; it is not taken for a lost one


def test_an_unreachable_host_is_not_taken_for_a_changed_key(tmp_path):
    node = Node(ssh_instance(), root=str(tmp_path),
                runner=FakeRunner((255, b"", b"ssh: connect to host 10.0.0.5 port 2201: "
                                             b"Connection refused\n")))
    with pytest.raises(NodeError) as caught:
        node.check("true")
    assert "unreachable over SSH: ssh: connect to host" in str(caught.value)
    assert caught.value.silent


def test_argv_for_an_ssh_fleet_host_without_state_dir():
    argv = Node(ssh_instance(proxy_jump=None)).argv("true")

    opts = options(argv)
    assert opts["StrictHostKeyChecking"] == "accept-new"
    assert "UserKnownHostsFile" not in opts
    assert "ProxyCommand" not in opts


def test_hosts_behind_different_jump_hosts_get_different_connections(tmp_path):
    root = str(tmp_path / "state")
    first = ssh_instance(name="lab-1", fleet="lab")
    second = ssh_instance(name="lab2-1", fleet="lab2", proxy_jump={
        "hostname": "other-bastion.example.com", "port": 22, "user": "ops",
        "identity_file": "/keys/other",
    })

    one = options(Node(first, root=root).argv("true"))["ControlPath"]
    two = options(Node(second, root=root).argv("true"))["ControlPath"]

    assert one != two


@pytest.mark.parametrize("user, prefix", [
    ("ubuntu", "sudo -n "),
    ("root", ""),
])
def test_sudo_for_login_users_other_than_root(user, prefix):
    runner = FakeRunner(answer({"containers": []}))
    node = Node(local_instance(user=user), runner=runner)

    assert node.sudo == prefix
    node.call("status")

    command = runner.calls[0][0][-1]
    assert command == "%spython3 -S -c %s %s" % (prefix, shlex.quote(bootstrap.BOOTSTRAP),
                                                 ssh.host_source_digest())


def test_a_host_whose_key_is_not_in_the_state_dir_is_never_tried(tmp_path, monkeypatch):
    ran = []
    monkeypatch.setattr(subprocess, "run", lambda *a, **k: ran.append(a) or None)
    monkeypatch.setattr(subprocess, "Popen", lambda *a, **k: ran.append(a) or None)
    moved = str(tmp_path / "moved-away")
    inst = local_instance(identity_file=state.key_path(moved, "dev"))
    node = Node(inst, root=moved)
    with pytest.raises(NodeError) as info:
        node.call("status")
    # Not the host's silence (it was not tried): tasks.silence does not count it.
    assert not info.value.silent and ran == []
    message = str(info.value)
    assert message.startswith("dev-0: cannot be checked: its SSH key %s is missing"
                              % state.key_path(moved, "dev"))
    assert "the state dir %s does not exist" % moved in message
    assert "$GPUFLEET_STATE_DIR" in message
    with pytest.raises(NodeError):
        node.popen("true")
    os.makedirs(moved)
    with pytest.raises(NodeError) as info:
        Node(inst, root=moved).run("true")
    assert "the state dir %s has no key for fleet dev" % moved in str(info.value)
    # A record made under another state dir than the one named now.
    with pytest.raises(NodeError) as info:
        Node(inst, root=str(tmp_path / "other")).run("true")
    assert "the state dir %s that holds it was moved or removed" % moved in str(info.value)
    assert ran == []


def test_a_missing_key_of_an_ssh_fleet_is_named(tmp_path):
    inst = ssh_instance(identity_file=str(tmp_path / "gone_key"))
    with pytest.raises(NodeError) as info:
        Node(inst, root=str(tmp_path)).run("true")
    assert str(info.value).endswith("its SSH key %s does not exist on this controller"
                                    % (tmp_path / "gone_key"))


# ---------------------------------------------------------------------------------------------
# Node.call
# ---------------------------------------------------------------------------------------------


def test_call_sends_the_source_and_the_request_on_stdin():
    runner = FakeRunner(answer({"containers": []}))
    node = Node(ssh_instance(), runner=runner)

    result = node.call("status", {"run": "train"}, timeout=45)

    assert result == {"containers": []}
    ((argv, kwargs),) = runner.calls
    assert argv[-2] == "--"
    assert shlex.split(argv[-1]) == ["sudo", "-n", "python3", "-S", "-c", bootstrap.BOOTSTRAP,
                                     ssh.host_source_digest()]
    assert kwargs["timeout"] == 45
    assert kwargs["stdout"] == subprocess.PIPE and kwargs["stderr"] == subprocess.PIPE
    data = kwargs["input"]
    # Split the way BOOTSTRAP splits it on the host: engineside's source, nodeside's, volumeside's,
    # metricside's, booking's, mirrorside's, replicaside's, healthside's, logside's, indexside's, usageside's, admitside's,
    # memberside's, runendside's, eventside's, notifyside's, scheduleside's, proxyconf's, acmeside's and proxyside's.
    source, sep, request = data.partition(b"\n" + bootstrap.SEPARATOR + b"\n")
    assert sep and source == b"\n".join((module_source(vars(engineside)),
                                         module_source(vars(nodeside)),
                                         module_source(vars(volumeside)),
                                         module_source(vars(metricside)),
                                         module_source(vars(booking)),
                                         module_source(vars(mirrorside)),
                                         module_source(vars(replicaside)),
                                         module_source(vars(healthside)),
                                         module_source(vars(logside)),
                                         module_source(vars(indexside)),
                                         module_source(vars(usageside)),
                                         module_source(vars(admitside)),
                                         module_source(vars(memberside)),
                                         module_source(vars(runendside)),
                                         module_source(vars(eventside)),
                                         module_source(vars(notifyside)),
                                         module_source(vars(scheduleside)),
                                         module_source(vars(proxyconf)),
                                         module_source(vars(acmeside)),
                                         module_source(vars(proxyside))))
    assert json.loads(request.decode("utf-8")) == {"op": "status", "payload": {"run": "train"}}


def test_call_without_payload_sends_an_empty_one():
    runner = FakeRunner(answer({"present": False}))

    Node(local_instance(), runner=runner).call("image_info")

    data = runner.calls[0][1]["input"]
    request = data.partition(b"\n" + bootstrap.SEPARATOR + b"\n")[2]
    assert json.loads(request.decode("utf-8")) == {"op": "image_info", "payload": {}}
    assert runner.calls[0][1]["timeout"] == 120


def test_call_reads_the_last_line_of_the_answer():
    out = b"Welcome to the lab!\nlast login: yesterday\n" + json.dumps(
        {"started": True, "id": "abc"}).encode("utf-8") + b"\n"
    runner = FakeRunner((0, out, b""))

    assert Node(local_instance(), runner=runner).call("start", {"job": {}}) == {
        "started": True, "id": "abc"}


def test_call_of_an_unreachable_host():
    runner = FakeRunner((255, b"", b"ssh: connect to host 10.0.0.5 port 2201: No route to host\n"))

    with pytest.raises(NodeError) as caught:
        Node(ssh_instance(), runner=runner).call("status")

    assert caught.value.host == "lab-1"
    assert str(caught.value) == ("lab-1: unreachable over SSH: ssh: connect to host 10.0.0.5 "
                                 "port 2201: No route to host")
    assert caught.value.silent   # nothing was heard from it (tasks.silence counts it)
    runner = FakeRunner((255, b"", b"ssh: connect to host 10.0.0.5 port 2201: No route to host\n"))
    with pytest.raises(NodeError) as caught:
        Node(ssh_instance(), runner=runner).check("true")
    assert caught.value.silent


def test_call_of_an_unreachable_host_that_says_nothing():
    runner = FakeRunner((255, b"", b""))

    with pytest.raises(NodeError, match="unreachable over SSH: no answer"):
        Node(ssh_instance(), runner=runner).call("status")


@pytest.mark.parametrize("err", [
    b"sudo: a password is required\n",
    b"sudo: a terminal is required to read the password; either use the -S option\n",
])
def test_call_when_sudo_wants_a_password(err):
    runner = FakeRunner((1, b"", err))

    with pytest.raises(NodeError) as caught:
        Node(ssh_instance(), runner=runner).call("status")

    assert caught.value.host == "lab-1"
    assert not caught.value.silent   # the host answered, with an error
    assert "passwordless sudo" in caught.value.detail
    assert caught.value.detail.startswith("status failed: ")


def test_call_when_the_host_has_no_python3():
    runner = FakeRunner((1, b"", b"sudo: python3: command not found\n"))

    with pytest.raises(NodeError, match="python3 is not installed on the host"):
        Node(ssh_instance(), runner=runner).call("status")


def test_call_with_an_error_answer():
    runner = FakeRunner(answer({"error": "network volume v is not attached to this host"}))

    with pytest.raises(NodeError) as caught:
        Node(ssh_instance(), runner=runner).call("start", {"job": {}})

    assert caught.value.detail == "network volume v is not attached to this host"
    assert str(caught.value) == "lab-1: network volume v is not attached to this host"


@pytest.mark.parametrize("out, expected", [
    (b"hello there\n", "start failed: hello there"),
    (b"", "start failed: no answer"),
    (b"[1, 2]\n", "start failed: [1, 2]"),
    (b'{"started": tru\n', 'start failed: {"started": tru'),
])
def test_call_with_garbage_output(out, expected):
    runner = FakeRunner((0, out, b""))

    with pytest.raises(NodeError) as caught:
        Node(local_instance(), runner=runner).call("start")

    assert caught.value.detail == expected


def test_call_that_crashed_on_the_host_shows_the_end_of_stderr():
    err = b"Traceback (most recent call last):\n  ...\nKeyError: 'job'\n"
    runner = FakeRunner((1, b"", err))

    with pytest.raises(NodeError) as caught:
        Node(local_instance(), runner=runner).call("start")

    assert caught.value.detail.startswith("start failed: Traceback")
    assert caught.value.detail.endswith("KeyError: 'job'")


def test_call_that_got_no_answer_in_time():
    runner = FakeRunner(subprocess.TimeoutExpired(["ssh"], 5))

    with pytest.raises(NodeError, match="no answer within 5 s to: the status request$") as caught:
        Node(ssh_instance(), runner=runner).call("status", timeout=5)
    assert caught.value.silent


def test_call_without_ssh_on_the_controller():
    runner = FakeRunner(FileNotFoundError(2, "No such file or directory", "ssh"))

    with pytest.raises(NodeError, match="cannot run ssh on the controller"):
        Node(local_instance(), runner=runner).call("status")


# ---------------------------------------------------------------------------------------------
# Node.run and Node.check
# ---------------------------------------------------------------------------------------------


def test_run_passes_stdin_and_returns_text():
    runner = FakeRunner((3, b"out\n", b"err\n"))

    rc, out, err = Node(local_instance(), runner=runner).run("cat", data=b"x", timeout=7)

    assert (rc, out, err) == (3, "out\n", "err\n")
    argv, kwargs = runner.calls[0]
    assert argv[-2:] == ["--", "cat"]
    assert kwargs["input"] == b"x" and kwargs["timeout"] == 7 and kwargs["check"] is False


def test_run_accepts_a_runner_that_answers_text():
    runner = FakeRunner((0, "text out", None))

    assert Node(local_instance(), runner=runner).run("true") == (0, "text out", "")


def test_check_returns_the_output():
    runner = FakeRunner((0, b"id1\nid2\n", b""))

    assert Node(local_instance(), runner=runner).check("docker ps -q") == "id1\nid2\n"


def test_check_of_an_unreachable_host():
    runner = FakeRunner((255, b"", b"Permission denied (publickey).\n"))

    with pytest.raises(NodeError) as caught:
        Node(ssh_instance(), runner=runner).check("docker ps -q")

    assert str(caught.value) == "lab-1: unreachable over SSH: Permission denied (publickey)."


def test_check_of_a_failed_command():
    runner = FakeRunner((2, b"", b"Error: No such container: x\n"))

    with pytest.raises(NodeError) as caught:
        Node(ssh_instance(), runner=runner).check("docker logs x")

    assert "failed (exit 2): Error: No such container: x" in caught.value.detail
    assert caught.value.host == "lab-1"


def test_check_of_a_failed_command_quiet_on_stderr():
    runner = FakeRunner((1, b"only stdout\n", b""))

    with pytest.raises(NodeError, match="failed \\(exit 1\\): only stdout"):
        Node(ssh_instance(), runner=runner).check("false")


def test_check_names_the_failed_command_as_text():
    runner = FakeRunner((2, b"", b"Error: No such container: x\n"))

    with pytest.raises(NodeError) as caught:
        Node(ssh_instance(), runner=runner).check("docker logs x")

    assert caught.value.detail.startswith("docker logs x failed (exit 2)")


def test_close_ends_the_shared_connection(monkeypatch):
    seen = []
    monkeypatch.setattr(ssh.subprocess, "run", lambda argv, **kw: seen.append(argv))

    Node(local_instance()).close()

    (argv,) = seen
    assert argv[-3:] == ["-O", "exit", "gpufleet@172.18.0.2"]
    assert options(argv)["ControlPath"].endswith("-%C")


def test_close_without_ssh_is_quiet(monkeypatch):
    def missing(argv, **kwargs):
        raise FileNotFoundError(2, "No such file or directory", "ssh")

    monkeypatch.setattr(ssh.subprocess, "run", missing)

    assert Node(local_instance()).close() is None


def test_the_source_and_its_digest_are_the_same_in_every_thread(monkeypatch):
    """Many first requests at once (a survey) fill the cache together: every one sends the
    whole source and a digest of it, never one in place of the other."""
    import hashlib
    import threading

    monkeypatch.setattr(ssh, "_HOST_SOURCE", {})
    barrier = threading.Barrier(16)
    seen = []

    def first_request():
        barrier.wait()
        seen.append((ssh.host_source(), ssh.host_source_digest()))

    threads = [threading.Thread(target=first_request) for _number in range(16)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    source = module_source(vars(engineside))   # the first part
    assert len(seen) == 16
    for sent, digest in seen:
        assert sent.startswith(source) and len(sent) > len(source)
        assert digest == hashlib.sha256(sent).hexdigest()[:24]
