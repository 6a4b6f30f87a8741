"""A service whose proxy host is lost (issue 35), on a 2-node local fleet of its own (the task
world's fleet is shared, and a node of it must not be lost).

A task holds node 0, the fleet's queue host, where the in-fleet proxy of its services runs, so
the service's one replica runs on node 1. Node 0's container is removed: the host is lost, with
the proxy. An apply of the same file sets HAProxy up on node 1, publishes the service there
without touching its replica, says so, and prints the new URL, which answers; ``ps`` shows the
new proxy; an apply after that changes nothing; ``stop`` takes the route off node 1.
"""

from __future__ import annotations

import base64
import json
import time
import urllib.error
import urllib.request
import uuid

import pytest
from ansible_collections.gpufleet.cluster.plugins.module_utils.backends import local
from ansible_collections.gpufleet.cluster.plugins.module_utils.backends.docker_cli import Docker

from gpufleet import cli
from gpufleet.runner import run_playbook

from .task_images import ensure_base_image
from .task_world import CPU

SUFFIX = uuid.uuid4().hex[:6]
FLEET = "pl-" + SUFFIX
NAME = "moved-" + SUFFIX
HOLD = "hold-" + SUFFIX

APP = r'''
import json, socket
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
class App(BaseHTTPRequestHandler):
    def do_GET(self):
        data = json.dumps({"replica": socket.gethostname()}).encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)
    def log_message(self, *args):
        pass
ThreadingHTTPServer(("0.0.0.0", 8000), App).serve_forever()
'''


@pytest.fixture(scope="module")
def fleet(tmp_path_factory):
    base = tmp_path_factory.mktemp("proxyloss")
    path = base / (FLEET + ".dstack.yml")
    path.write_text("type: fleet\nname: %s\nnodes: 2\nbackends: [local]\n" % FLEET)
    docker = Docker()
    local.ensure_node_image(docker)
    ensure_base_image(docker)
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("GPUFLEET_STATE_DIR", str(base / "state"))
        result = run_playbook("fleet.yml", {"fleet": str(path)})
        assert result.ok, result.stdout[-3000:]
        names = [i["name"] for i in result.stats["gpufleet_fleets"][0]["instances"]]
        yield {"base": base, "path": str(path), "docker": docker, "names": sorted(names)}
        run_playbook("delete.yml", {"fleet": str(path), "gpufleet_refuse_busy": False})


def write(fleet, name, text):
    path = fleet["base"] / (name + ".dstack.yml")
    path.write_text(text)
    return str(path)


def records(capsys):
    capsys.readouterr()
    assert cli.main(["ps", "--json"]) == 0
    return dict((r["name"], r) for r in json.loads(capsys.readouterr().out))


def answers(url):
    """The replica that answered ``url``, or the HTTP status when none did (None: nothing
    listens)."""
    try:
        with urllib.request.urlopen(url, timeout=10) as answer:
            return json.loads(answer.read())["replica"]
    except urllib.error.HTTPError as exc:
        return exc.code
    except (urllib.error.URLError, ConnectionError, TimeoutError):
        return None


def wait_for(what, check, seconds=180):
    deadline = time.time() + seconds
    while True:
        found = check()
        if found:
            return found
        assert time.time() < deadline, "%s never happened" % what
        time.sleep(2)


def published_url(out):
    lines = out.splitlines()
    assert "Service is published at:" in lines, out
    return lines[lines.index("Service is published at:") + 1].strip()


def test_a_lost_proxy_host_is_replaced_by_another_host_of_the_fleet(fleet, capsys):
    first, second = fleet["names"]
    # The task takes node 0 (hosts are taken cheapest first, then by number).
    hold = write(fleet, HOLD, "type: task\nname: %s\n%scommands:\n  - sleep 3600\n"
                 % (HOLD, CPU))
    assert cli.main(["apply", "-f", hold, "-y", "-d"]) == 0, capsys.readouterr()
    app = base64.b64encode(APP.encode()).decode()
    path = write(fleet, NAME, "type: service\nname: %s\nport: 8000\nauth: false\n%s"
                 "commands:\n  - echo %s | base64 -d > /tmp/app.py\n  - python3 /tmp/app.py\n"
                 % (NAME, CPU, app))
    capsys.readouterr()
    assert cli.main(["apply", "-f", path, "-y", "-d"]) == 0, capsys.readouterr()
    url = published_url(capsys.readouterr().out)
    record = records(capsys)
    assert [j["host"] for j in record[HOLD]["jobs"]] == [first]
    assert [j["host"] for j in record[NAME]["jobs"]] == [second]
    assert record[NAME]["service"]["proxy_host"] == first
    replica = wait_for("the replica answering", lambda: answers(url) if isinstance(
        answers(url), str) else None)

    # Node 0 is lost, and the proxy with it; the replica on node 1 goes on.
    fleet["docker"].run("rm", "-f", local.container_name(FLEET, 0))
    assert answers(url) is None
    capsys.readouterr()
    assert cli.main(["apply", "-f", path, "-y", "-d"]) == 0, capsys.readouterr()
    out = capsys.readouterr().out
    assert ("service %s: its proxy host %s is no longer a host of fleet %s; the proxy on %s "
            "publishes it from now on" % (NAME, first, FLEET, second)) in out, out
    moved = published_url(out)
    assert moved != url and moved.endswith("/proxy/services/main/%s/" % NAME)
    # The same replica (not replaced), behind the new proxy.
    assert wait_for("the replica answering at the new URL",
                    lambda: answers(moved) == replica, seconds=60)
    record = records(capsys)[NAME]
    assert record["status"] == "running"
    assert (record["service"]["proxy_host"], record["service"]["url"]) == (second, moved)
    assert record["service"]["moved_from"] == first
    # Once moved, an apply of the same file changes nothing.
    capsys.readouterr()
    assert cli.main(["apply", "-f", path, "-y", "-d"]) == 0
    out = capsys.readouterr().out
    assert "is up to date: nothing changed" in out and "no longer a host" not in out, out

    assert cli.main(["stop", NAME, "-y"]) == 0
    assert wait_for("the route taken off", lambda: answers(moved) in (404, 503, None),
                    seconds=60)
