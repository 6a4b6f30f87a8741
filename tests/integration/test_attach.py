"""gpufleet attach on the task world: ssh RUN and ssh RUN-1 land in the run's containers with
the job's environment, the run's ports answer on localhost, Ctrl-C detaches (the run goes on,
the port closes, ssh RUN still works), and once the run is over its aliases are gone while the
user's own ~/.ssh/config is unchanged but for the one Include line."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request

from .task_world import CPU, FLEET, SUFFIX

GPUFLEET = os.path.join(os.path.dirname(sys.executable), "gpufleet")   # the command


def _home(tmp_path, config=None):
    """A home of the test's own, with ~/.ssh (and its config, when given)."""
    home = tmp_path / "home"
    (home / ".ssh").mkdir(parents=True)
    if config is not None:
        (home / ".ssh" / "config").write_bytes(config)
    return home


def _env(home, path_first=None):
    env = dict(os.environ, HOME=str(home))
    if path_first is not None:
        env["PATH"] = "%s:%s" % (path_first, env["PATH"])
    return env


def _gpufleet(home, *args, path_first=None):
    return subprocess.Popen([GPUFLEET] + list(args), stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True,
                            env=_env(home, path_first))


def _ssh(home, *args):
    # OpenSSH takes ~ from the password database, not HOME: name the test's config.
    config = str(home / ".ssh" / "config")
    return subprocess.run(["ssh", "-F", config, "-o", "BatchMode=yes"] + list(args),
                          stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, text=True, env=_env(home), timeout=60,
                          check=False)


def _get(url):
    with urllib.request.urlopen(url, timeout=5) as answer:
        return answer.status, answer.read().decode()


def _wait_line(proc, *texts, seconds=180):
    """Read the output until every one of ``texts`` was seen (in any order)."""
    seen = []
    missing = list(texts)
    deadline = time.time() + seconds
    while time.time() < deadline:
        line = proc.stdout.readline()
        if not line:
            break
        seen.append(line)
        missing = [t for t in missing if t not in line]
        if not missing:
            return "".join(seen)
    raise AssertionError("never saw %r: %s" % (missing, "".join(seen)))


def test_attach_reaches_every_job_and_forwards_the_ports(world, tmp_path):
    mine = b"Host mine\n    User me\n    Port 2200\n"
    home = _home(tmp_path, mine)
    run = "at-" + SUFFIX
    task = tmp_path / "attach.dstack.yml"
    task.write_text(
        "type: task\nname: %s\nimage: %s\nnodes: 2\nfleets: [%s]\n%s"
        "ports: [\"18080:8000\"]\nstop_duration: 1\n"
        "commands:\n"
        "  - echo served > /tmp/index.html\n"
        "  - if [ \"$DSTACK_NODE_RANK\" = 0 ]; then cd /tmp && exec python3 -m http.server"
        " 8000; fi\n"
        "  - sleep infinity\n" % (run, world["base_image"], FLEET, CPU))
    submit = _gpufleet(home, "apply", "-f", str(task), "-y", "-d")
    assert submit.wait(timeout=300) == 0, submit.stdout.read()

    attach = _gpufleet(home, "attach", run)
    try:
        out = _wait_line(attach, "Press Ctrl+C to detach")
        assert "Attached to run %s (replica=0 job=0)" % run in out, out
        assert "localhost:18080 -> 8000" in out, out
        assert "To connect to the run via SSH, use `ssh %s`." % run in out, out

        # ssh RUN is job 0's container, ssh RUN-1 job 1's, with the job's environment.
        first = _ssh(home, run, "echo $DSTACK_NODE_RANK $DSTACK_RUN_NAME; cat /tmp/index.html")
        assert first.returncode == 0, first.stderr
        assert first.stdout.split() == ["0", run, "served"], first.stdout + first.stderr
        second = _ssh(home, run + "-1", "echo $DSTACK_NODE_RANK")
        assert (second.returncode, second.stdout.strip()) == (0, "1"), second.stderr
        assert _get("http://localhost:18080/index.html") == (200, "served\n")

        attach.send_signal(signal.SIGINT)
        rest = attach.communicate(timeout=120)[0]
        assert attach.returncode == 0, rest
        assert "Detached" in rest, rest
    finally:
        if attach.poll() is None:
            attach.kill()
    # The run goes on, the port is closed, and ssh RUN still works.
    try:
        _get("http://localhost:18080/index.html")
        raise AssertionError("port 18080 still answers after detaching")
    except (urllib.error.URLError, ConnectionError, OSError):
        pass
    again = _ssh(home, run, "hostname")
    assert again.returncode == 0, again.stderr

    stop = _gpufleet(home, "stop", run, "-y")
    assert stop.wait(timeout=300) == 0, stop.stdout.read()
    gone = _ssh(home, run, "true")
    assert gone.returncode != 0 and "Could not resolve hostname" in gone.stderr, gone.stderr
    state = os.environ["GPUFLEET_STATE_DIR"]
    ours = os.path.join(state, "ssh", "config")
    assert ("Include %s\n" % ours).encode() + mine == (home / ".ssh" / "config").read_bytes()
    assert run not in open(ours).read()
    assert not os.path.exists(os.path.join(state, "ssh", "keys", run))


def test_apply_of_a_task_with_ports_attaches_until_the_run_ends(world, tmp_path):
    """A single-node run (the image's own sshd) applied without -d: its port is forwarded once
    it runs, ssh RUN reaches it, and when it ends (stopped from elsewhere) its alias goes."""
    import re

    home = _home(tmp_path)
    run = "ap-" + SUFFIX
    task = tmp_path / "apply.dstack.yml"
    task.write_text(
        "type: task\nname: %s\nimage: %s\nfleets: [%s]\n%s"
        "ports: [\"*:8000\"]\nstop_duration: 1\n"
        "commands:\n"
        "  - echo single > /tmp/index.html\n"
        "  - cd /tmp && python3 -m http.server 8000\n" % (run, world["base_image"], FLEET, CPU))
    apply = _gpufleet(home, "apply", "-f", str(task), "-y")
    try:
        out = _wait_line(apply, "Press Ctrl+C to detach", seconds=300)
        local = int(re.search(r"localhost:(\d+) -> 8000", out).group(1))
        assert local >= 8000, out
        assert _get("http://localhost:%d/index.html" % local) == (200, "single\n")
        inside = _ssh(home, run, "echo $DSTACK_NODE_RANK $DSTACK_NODES_NUM")
        assert (inside.returncode, inside.stdout.split()) == (0, ["0", "1"]), inside.stderr
        stop = _gpufleet(home, "stop", run, "-y")
        assert stop.wait(timeout=300) == 0, stop.stdout.read()
        rest = apply.communicate(timeout=300)[0]
        assert "Run %s terminated" % run in rest, out + rest
    finally:
        if apply.poll() is None:
            apply.kill()
    ours = os.path.join(os.environ["GPUFLEET_STATE_DIR"], "ssh", "config")
    assert run not in open(ours).read()


def test_a_dev_environment_prints_its_link_and_stops_when_nobody_uses_it(world, tmp_path):
    """apply of a dev environment attaches and prints dstack's IDE link; the VS Code on the
    submitter's machine (a `code` command in PATH) names the server the job installs, whose
    download fails without stopping it; init ran once, ssh NAME reaches it; detached with
    nobody connected it stops itself after inactivity_duration: the job terminated
    (inactivity_duration_exceeded), the run failed (job_failed)."""
    import json

    home = _home(tmp_path)
    ide = tmp_path / "ide"
    ide.mkdir()
    commit = "0" * 40   # no such build: the node's download fails, wherever it can reach
    (ide / "code").write_text("#!/bin/sh\nprintf '1.95.3\\n%s\\nx64\\n'\n" % commit)
    (ide / "code").chmod(0o755)
    name = "dev-" + SUFFIX
    env = tmp_path / "env.dstack.yml"
    env.write_text(
        "type: dev-environment\nname: %s\nimage: %s\nfleets: [%s]\n%s"
        "ide: vscode\ninit: [\"echo ready > /tmp/ready\"]\ninactivity_duration: 30s\n"
        "stop_duration: 1\n" % (name, world["base_image"], FLEET, CPU))
    applied_at = time.time()
    apply = _gpufleet(home, "apply", "-f", str(env), "-y", path_first=ide)
    try:
        # The job prints the link; the attach (ssh NAME) comes once it runs: either first.
        out = _wait_line(apply, "vscode://vscode-remote/ssh-remote+%s/" % name,
                         "Press Ctrl+C to detach", seconds=300)
        assert "To open in VS Code, use link below:" in out, out
        assert "Could not install the VS Code server %s here" % commit in out, out
        assert "No VS Code version found" not in out, out
        ready = _ssh(home, name, "cat /tmp/ready")
        assert (ready.returncode, ready.stdout) == (0, "ready\n"), ready.stderr
        apply.send_signal(signal.SIGINT)
        rest = apply.communicate(timeout=120)[0]
        assert "detached; the run %s goes on" % name in rest, out + rest
    finally:
        if apply.poll() is None:
            apply.kill()
    detached_at = time.time()
    deadline = detached_at + 180
    record = None
    while time.time() < deadline:
        command = [GPUFLEET, "ps", "--json"]
        listed = subprocess.run(command, stdout=subprocess.PIPE, text=True, env=_env(home),
                                timeout=120, check=False)
        record = next(r for r in json.loads(listed.stdout) if r["name"] == name)
        if record["status"] in ("failed", "terminated", "done"):
            break
        time.sleep(10)
    assert record["type"] == "dev-environment"
    assert (record["status"], record["reason"]) == ("failed", "job_failed"), record
    (job,) = record["jobs"]
    assert (job["status"], job["reason"]) == ("terminated", "inactivity_duration_exceeded"), job
    # Not before its 30 s of inactivity, as the job itself counted them (dstack's message in
    # its output), and not before 30 s after the apply began.
    logs = subprocess.run([GPUFLEET, "logs", name], stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True, env=_env(home), timeout=120,
                          check=False)
    found = re.search(r"The job was inactive for (\d+) seconds, exceeding the "
                      r"inactivity_duration of 30 seconds", logs.stdout)
    assert found and int(found.group(1)) >= 30, logs.stdout[-2000:]
    assert time.time() - applied_at >= 30
