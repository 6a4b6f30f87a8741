"""How many requests does a service lose when one of its replicas is lost, and during an
update of the service (issue 35)?

A 2-node local fleet is brought up, and a service of two replicas (a small Python HTTP app in
the task image, ``retry`` on ``error``) applied on it with ``gpufleet apply -y -d``. A load
thread sends one request every 10 ms to the service's URL with the user's token and keeps
every answer. Each round has three windows of the same load, in turn:

- **baseline**: nothing happens for ``--seconds`` seconds (what the machine and the proxy
  lose when nothing goes wrong; expected 0);
- **replica loss**: one replica's container is removed on its node (``docker rm -f``), then,
  6 s later, ``gpufleet ps`` runs (a pass over the queue, which makes the replica again on its
  host), and the window lasts until both replicas answer again;
- **update**: ``gpufleet apply -y -d`` of the same service with another ``VERSION`` in its
  ``env``: the replicas are rolled one at a time; the window lasts until the command returns.

A request is lost when it gets no answer or an answer other than 200. The report gives, for
each window, the requests sent and lost in every round, and the lost share against the
baseline's of the same round. Goal (issue 35): a loss costs at most 5% of requests, an update
none. The fleet is deleted at the end, whatever happens.

    .venv/bin/python bench/service_faults.py [--rounds 3] [--seconds 20]
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import platform
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import task_start  # noqa: E402  (the same fleet helpers and environment)
from task_start import BIN, fleet_instances, node_docker, playbook, run  # noqa: E402

FLEET = "benchsvc"
NAME = "svcbench"
APP = r'''
import os, socket
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
class App(BaseHTTPRequestHandler):
    def do_GET(self):
        body = ("%s %s" % (socket.gethostname(), os.environ["VERSION"])).encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
    def log_message(self, *args):
        pass
ThreadingHTTPServer(("0.0.0.0", 8000), App).serve_forever()
'''


def service(version):
    app = base64.b64encode(APP.encode()).decode()
    return ("type: service\nname: %s\nport: 8000\nreplicas: 2\n"
            "resources:\n  cpu: 1..\n  memory: 1GB..\n  disk: 1GB..\n"
            "retry:\n  on_events: [error]\n  duration: 1h\n"
            "env:\n  - VERSION=%s\n"
            "commands:\n  - echo %s | base64 -d > /tmp/app.py\n  - python3 /tmp/app.py\n"
            % (NAME, version, app))


def gpufleet(env, *argv):
    proc = run([str(BIN / "gpufleet")] + list(argv), env)
    if proc.returncode != 0:
        raise RuntimeError("gpufleet %s failed:\n%s%s" % (" ".join(argv), proc.stdout[-3000:],
                                                          proc.stderr[-3000:]))
    return proc.stdout


def ask(url, token):
    """The answer's status and body, or (None, None) when nothing answers."""
    request = urllib.request.Request(url, headers={"Authorization": "Bearer " + token})
    try:
        with urllib.request.urlopen(request, timeout=10) as answer:
            return answer.status, answer.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, None
    except (urllib.error.URLError, ConnectionError, TimeoutError, OSError):
        return None, None


class Load(object):
    """One request every 10 ms in a thread while the window is open."""

    def __init__(self, url, token):
        self.url, self.token = url, token
        self.answers = []
        self.done = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self):
        while not self.done.is_set():
            self.answers.append(ask(self.url, self.token))
            time.sleep(0.01)

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.done.set()
        self.thread.join(20)
        return False

    def lost(self):
        return sum(1 for status, _body in self.answers if status != 200)


def replicas_answering(url, token, count=2, seconds=180):
    deadline = time.time() + seconds
    while time.time() < deadline:
        names = set((ask(url, token)[1] or "-").split()[0] for _n in range(12)) - {"-"}
        if len(names) >= count:
            return
        time.sleep(1)
    raise RuntimeError("the service's replicas never all answered")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=20.0)
    args = parser.parse_args()
    signal.signal(signal.SIGTERM, lambda _s, _f: sys.exit("terminated"))
    if subprocess.run(["docker", "info"], capture_output=True, check=False).returncode != 0:
        subprocess.run(["make", "-C", str(task_start.ROOT), "engine"], check=True)
    work = Path(tempfile.mkdtemp(prefix="gpufleet-bench-"))
    env = task_start.bench_env(work)
    (work / "vault-password").write_text("the bench's vault password\n")
    env["ANSIBLE_VAULT_PASSWORD_FILE"] = str(work / "vault-password")
    fleet = work / "fleet.dstack.yml"
    fleet.write_text("type: fleet\nname: %s\nnodes: 2\nplacement: cluster\nbackends: [local]\n"
                     % FLEET)
    path = work / "svc.dstack.yml"
    rows = []
    try:
        instances = fleet_instances(env, work, fleet, FLEET)
        token = json.loads(gpufleet(env, "token", "--json"))["token"]
        path.write_text(service("1"))
        out = gpufleet(env, "apply", "-y", "-d", "-f", str(path)).splitlines()
        url = out[out.index("Service is published at:") + 1].strip()
        replicas_answering(url, token)
        for number in range(args.rounds):
            with Load(url, token) as base:
                time.sleep(args.seconds)
            with Load(url, token) as loss:
                time.sleep(1)
                inst = instances[number % len(instances)]
                boxes = node_docker(inst["container"], "ps", "--format", "{{.Names}}",
                                    "--filter", "label=gpufleet.run=" + NAME).stdout.split()
                node_docker(inst["container"], "rm", "-f", boxes[0])
                time.sleep(6)
                gpufleet(env, "ps")
                replicas_answering(url, token)
            with Load(url, token) as update:
                path.write_text(service(str(number + 2)))
                gpufleet(env, "apply", "-y", "-d", "-f", str(path))
            rows.append((base, loss, update))
    finally:
        run([str(BIN / "gpufleet"), "stop", "-y", NAME], env)
        playbook("delete.yml", env, "fleet=" + str(fleet))
    print("machine: %s, %d CPUs, load %.1f, Python %s"
          % (platform.node(), os.cpu_count(), os.getloadavg()[0], platform.python_version()))
    print("%-6s %-14s %8s %6s %8s %14s"
          % ("round", "window", "requests", "lost", "lost %", "vs baseline"))
    for number, (base, loss, update) in enumerate(rows, 1):
        base_share = base.lost() / max(1, len(base.answers))
        for label, load in (("baseline", base), ("replica loss", loss), ("update", update)):
            share = load.lost() / max(1, len(load.answers))
            print("%-6d %-14s %8d %6d %7.2f%% %+13.2f%%" % (
                number, label, len(load.answers), load.lost(), 100 * share,
                100 * (share - base_share)))
    print("goal: a replica loss costs at most 5% of requests, an update none")


if __name__ == "__main__":
    main()
