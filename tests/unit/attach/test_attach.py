"""gpufleet attach's pure parts: the SSH config file of ours and the one line it adds to the
user's (attach/sshconfig.py), the aliases of a run's jobs (attach/hosts.py) and the local
ports its `ports` get (attach/ports.py)."""

from __future__ import annotations

import os
import stat
import threading

import pytest
from ansible_collections.gpufleet.cluster.plugins.module_utils.attach import (
    hosts,
    ports,
    sshconfig,
)


def test_a_runs_section_is_replaced_whole_and_dropped_without_touching_the_others(tmp_path):
    ours = str(tmp_path / "state" / "ssh" / "config")
    assert sshconfig.set_run(ours, "a", [sshconfig.host_block(["a"], [("HostName", "h1")])])
    assert sshconfig.set_run(ours, "b", [sshconfig.host_block(["b", "b-0"], [("Port", 22)])])
    assert not sshconfig.set_run(ours, "b", [sshconfig.host_block(["b", "b-0"], [("Port", 22)])])
    assert sshconfig.set_run(ours, "a", [sshconfig.host_block(["a"], [("HostName", "h2")])])
    text = open(ours).read()
    assert text == ("# gpufleet run b begin\nHost b b-0\n    Port 22\n# gpufleet run b end\n"
                    "# gpufleet run a begin\nHost a\n    HostName h2\n# gpufleet run a end\n")
    assert sshconfig.runs(ours) == ["b", "a"]
    assert stat.S_IMODE(os.stat(ours).st_mode) == 0o600
    assert stat.S_IMODE(os.stat(os.path.dirname(ours)).st_mode) == 0o700
    assert sshconfig.set_run(ours, "b", None) and sshconfig.runs(ours) == ["a"]
    assert not sshconfig.set_run(ours, "gone", None)


def test_runs_written_at_once_are_all_kept(tmp_path):
    ours = str(tmp_path / "config")
    threads = [threading.Thread(target=sshconfig.set_run, args=(
        ours, "r%d" % n, [sshconfig.host_block(["r%d" % n], [("Port", n)])]))
        for n in range(12)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(sshconfig.runs(ours)) == sorted("r%d" % n for n in range(12))


def test_the_users_config_gets_one_include_line_first_and_nothing_else(tmp_path):
    user = tmp_path / "home" / ".ssh" / "config"
    user.parent.mkdir(parents=True)
    original = b"Host work\n    User me\n# no newline at the end"
    user.write_bytes(original)
    os.chmod(str(user), 0o644)
    ours = str(tmp_path / "state dir" / "ssh" / "config")
    assert sshconfig.ensure_include(str(user), ours)
    assert not sshconfig.ensure_include(str(user), ours)
    assert user.read_bytes() == ('Include "%s"\n' % ours).encode() + original
    assert stat.S_IMODE(os.stat(str(user)).st_mode) == 0o644   # its mode is kept


def test_a_missing_user_config_is_made_private(tmp_path):
    user = tmp_path / "home" / ".ssh" / "config"
    assert sshconfig.ensure_include(str(user), "/s/ssh/config")
    assert user.read_text() == "Include /s/ssh/config\n"
    assert stat.S_IMODE(os.stat(str(user)).st_mode) == 0o600
    assert stat.S_IMODE(os.stat(str(user.parent)).st_mode) == 0o700


def test_a_linked_user_config_is_written_through_the_link(tmp_path):
    real = tmp_path / "dotfiles" / "ssh_config"
    real.parent.mkdir()
    real.write_text("Host x\n")
    link = tmp_path / ".ssh" / "config"
    link.parent.mkdir()
    link.symlink_to(real)
    assert sshconfig.ensure_include(str(link), "/s/c")
    assert link.is_symlink() and real.read_text() == "Include /s/c\nHost x\n"


NODE = {"hostname": "172.18.0.5", "port": 22, "user": "gpufleet", "backend": "local",
        "identity_file": "/s/fleets/el/id_ed25519", "proxy_jump": None, "fleet": "el"}
SSH_HOST = {"hostname": "10.0.0.7", "port": 2222, "user": "ubuntu", "backend": "ssh",
            "identity_file": "/k/id", "fleet": "lab",
            "proxy_jump": {"hostname": "bastion", "port": 22, "user": "jump",
                           "identity_file": "/k/jump"}}


def test_each_job_is_its_instance_then_its_container_with_the_runs_key():
    jobs = [{"job_num": 0, "instance": NODE, "address": "localhost", "user": None},
            {"job_num": 1, "instance": dict(NODE, hostname="172.18.0.6"),
             "address": "172.17.0.2", "user": "ubuntu:users"}]
    found = hosts.entries("train", jobs, "/s/ssh/keys/train")
    names = [aliases for aliases, _options in found]
    assert names == [["train-host"], ["train", "train-0", "train-0-0"],
                     ["train-1-host"], ["train-1", "train-1-0"]]
    options = dict((tuple(a), dict(o)) for a, o in found)
    host = options[("train-host",)]
    assert (host["HostName"], host["Port"], host["User"], host["IdentityFile"]) == (
        "172.18.0.5", 22, "gpufleet", "/s/fleets/el/id_ed25519")
    assert host["StrictHostKeyChecking"] == "no" and host["UserKnownHostsFile"] == "/dev/null"
    first = options[("train", "train-0", "train-0-0")]
    assert (first["HostName"], first["Port"], first["User"], first["IdentityFile"],
            first["ProxyJump"]) == ("localhost", 10022, "root", "/s/ssh/keys/train",
                                    "train-host")
    second = options[("train-1", "train-1-0")]
    assert (second["HostName"], second["User"], second["ProxyJump"]) == (
        "172.17.0.2", "ubuntu", "train-1-host")


def test_attaching_another_job_and_a_jump_host():
    jobs = [{"job_num": 0, "instance": SSH_HOST, "address": "localhost", "user": "1000"},
            {"job_num": 1, "instance": SSH_HOST, "address": "localhost", "user": None}]
    found = hosts.entries("t", jobs, "/k/run", known_hosts="/s/fleets/lab/known_hosts",
                          attached=1)
    names = [aliases for aliases, _options in found]
    assert names == [["t-0-jump-host"], ["t-0-host"], ["t-0", "t-0-0"],
                     ["t-jump-host"], ["t-host"], ["t", "t-1", "t-1-0"]]
    options = dict((tuple(a), dict(o)) for a, o in found)
    assert options[("t-host",)]["ProxyJump"] == "t-jump-host"
    assert options[("t-host",)]["StrictHostKeyChecking"] == "accept-new"
    assert options[("t-host",)]["UserKnownHostsFile"] == "/s/fleets/lab/known_hosts"
    jump = options[("t-jump-host",)]
    assert (jump["HostName"], jump["User"], jump["IdentityFile"]) == ("bastion", "jump",
                                                                      "/k/jump")
    assert options[("t-0", "t-0-0")]["User"] == "root"   # a numeric user logs in as root


def test_named_local_ports_must_be_free_and_unnamed_ones_move_up():
    busy = {8000, 8001, 18080}

    def free(port):
        return port not in busy
    chosen = ports.choose([{"local_port": None, "container_port": 8000},
                           {"local_port": 9090, "container_port": 9090},
                           {"local_port": 10999, "container_port": 10999}], is_free=free)
    assert chosen == [
        {"local_port": 8002, "container_port": 8000, "url": "http://localhost:8002"},
        {"local_port": 9090, "container_port": 9090, "url": "http://localhost:9090"}]
    with pytest.raises(ports.PortError, match=r"port 18080 is already in use: .*"
                                              r"gpufleet attach -p 18081:8000"):
        ports.choose([{"local_port": 18080, "container_port": 8000}], is_free=free)
    assert ports.choose([{"local_port": 18080, "container_port": 8000}], is_free=free,
                        overrides={8000: 28080})[0]["local_port"] == 28080
    with pytest.raises(ports.PortError, match="port 7000 is not among the run's ports"):
        ports.choose([{"local_port": 1, "container_port": 8000}], is_free=free,
                     overrides={7000: 7001})


def test_is_free_sees_a_listening_socket():
    import socket

    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(1)
    try:
        assert not ports.is_free(sock.getsockname()[1])
    finally:
        sock.close()
