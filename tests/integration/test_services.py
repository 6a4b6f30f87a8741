"""A service (issue 35) end to end on the task world's 3-node local fleet: one apply of a tiny
HTTP app (python3 of the task image) with two replicas behind the real proxy on the fleet's
queue host (HAProxy, installed there by task.yml's gpufleet.cluster.gateway play when missing).

Requests reach both replicas; no token gets 401, another token 403, ``gpufleet token``'s token
200 (and the replica never sees it); a burst over the rate limit gets 429; the model's
``chat/completions`` and ``models`` answer in OpenAI's shape; ``ps --json`` carries the URLs and
``ps`` a row per replica; a replica removed under continuous requests costs under 5% of them
and is made again by the next pass (``ps``); a second apply of a changed file rolls the
replicas to the new version under continuous requests with none failing, and an unchanged
one changes nothing; with ``replicas: 2..3`` and ``scaling``, passes of
playbooks/reconcile.yml add a third replica under a burst and take it away under a light load,
with no request failing; ``gpufleet stop`` takes the route
off (404, or nothing listens). A service of two replica groups runs each group's commands
behind one URL, and ``ps`` shows its rows as dstack does (``group=I replica=N``).
"""

from __future__ import annotations

import base64
import json
import threading
import time
import urllib.error
import urllib.request

import pytest

from gpufleet import cli
from gpufleet.runner import run_playbook

from .task_world import CPU, SUFFIX, node_containers, task_file

NAME = "svc-" + SUFFIX
GROUPED = "grp-" + SUFFIX
MODEL = "tiny-" + SUFFIX
# Other files' runs may still hold the shared world: the replicas wait for capacity. A replica
# that is lost (error) is made again on its own, while the other serves.
WAIT = "retry:\n  on_events: [no-capacity, error]\n  duration: 5m\n"

# Each replica answers with its host name (its container's); the model stub in OpenAI's shape.
APP = r'''
import json, os, socket
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
MODEL = os.environ["MODEL"]
ME = socket.gethostname()
class App(BaseHTTPRequestHandler):
    def answer(self, body):
        data = json.dumps(body).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)
    def do_GET(self):
        if self.path.startswith("/v1/models"):
            return self.answer({"object": "list", "data": [{"id": MODEL, "object": "model"}]})
        self.answer({"replica": ME, "path": self.path, "version": os.environ.get("VERSION"),
                     "group": os.environ.get("GROUP"),
                     "authorization": self.headers.get("Authorization")})
    def do_POST(self):
        length = int(self.headers.get("Content-Length") or 0)
        asked = json.loads(self.rfile.read(length) or b"{}")
        self.answer({"id": "chatcmpl-1", "object": "chat.completion", "model": asked.get("model"),
                     "path": self.path, "choices": [{"index": 0, "finish_reason": "stop",
                     "message": {"role": "assistant", "content": "hello from " + ME}}]})
    def log_message(self, *args):
        pass
ThreadingHTTPServer(("0.0.0.0", 8000), App).serve_forever()
'''


# Autoscaling as the test drives it: 2 requests/s per replica over 30 s, no delays.
SCALING = ("scaling:\n  metric: rps\n  target: 2\n  window: 30s\n  scale_up_delay: 0s\n"
           "  scale_down_delay: 0s\n")


def service_file(version="1", replicas=2, scaling=""):
    # dstack joins the commands with && on one line: the app travels as base64, not a heredoc.
    app = base64.b64encode(APP.encode()).decode()
    return ("type: service\nname: %s\nport: 8000\nreplicas: %s\nmodel: %s\n%s%s%s"
            "env:\n  - MODEL=%s\n  - VERSION=%s\n"
            "rate_limits:\n  - prefix: /burst\n    rps: 1\n    burst: 1\n"
            "commands:\n  - echo %s | base64 -d > /tmp/app.py\n"
            "  - python3 /tmp/app.py\n"
            % (NAME, replicas, MODEL, CPU, WAIT, scaling, MODEL, version, app))


class Load(object):
    """Requests to ``url`` every ``every`` seconds in a thread, their status codes kept."""

    def __init__(self, url, token, every=0.02):
        self.codes, self.answers = [], []
        self.done = threading.Event()

        def load():
            while not self.done.is_set():
                # A slow answer on a machine busy with other tests is an answer: only a
                # request cut or refused counts against the update.
                status, answer = request(url + "hello", token, timeout=60)
                self.codes.append(status)
                self.answers.append(answer)
                time.sleep(every)

        self.thread = threading.Thread(target=load, daemon=True)

    def __enter__(self):
        self.thread.start()
        time.sleep(1)
        return self

    def __exit__(self, *exc):
        self.done.set()
        self.thread.join(15)
        return False


def request(url, token=None, body=None, timeout=10):
    """``(status, JSON answer or None)``; (None, None) when nothing answers at all (within
    ``timeout`` seconds)."""
    headers = {"Content-Type": "application/json"}
    if token:
        headers["Authorization"] = "Bearer " + token
    data = json.dumps(body).encode() if body is not None else None
    try:
        with urllib.request.urlopen(urllib.request.Request(url, data=data, headers=headers),
                                    timeout=timeout) as answer:
            return answer.status, json.loads(answer.read() or b"null")
    except urllib.error.HTTPError as exc:
        return exc.code, None
    except (urllib.error.URLError, ConnectionError, TimeoutError):
        return None, None


def records(capsys):
    capsys.readouterr()
    assert cli.main(["ps", "--json"]) == 0
    return dict((r["name"], r) for r in json.loads(capsys.readouterr().out))


def running(record):
    """The run record when its run is running, else None."""
    return record if record and record["status"] == "running" else None


def replicas_seen(url, token, count):
    """The replicas that answered a dozen requests, when they are ``count``; else None."""
    names = set((request(url + "hello", token)[1] or {}).get("replica")
                for _attempt in range(12)) - {None}
    return names if len(names) == count else None


def reconcile(world):
    """One pass of playbooks/reconcile.yml over the world's fleet: the services it scaled."""
    result = run_playbook("reconcile.yml", {"fleets": [str(world["base"] / "fleet.dstack.yml")]})
    assert result.ok, result.stdout[-3000:]
    return result.stats["gpufleet_reconcile"]["queue"]["scaled"]


def assert_replicas(capsys, url, token, count):
    """``count`` replicas answer, ps lists them numbered 0..count-1."""
    assert wait_for("%d replicas answering" % count, lambda: replicas_seen(url, token, count),
                    seconds=60)
    record = running(records(capsys).get(NAME))
    assert record and record["service"]["replicas"] == count, record
    assert sorted(j["replica"] for j in record["jobs"]) == list(range(count))


def wait_for(what, check, seconds=300):
    deadline = time.time() + seconds
    while True:
        found = check()
        if found:
            return found
        assert time.time() < deadline, "%s never happened" % what
        time.sleep(2)


@pytest.fixture
def token(world, capsys, monkeypatch):
    """This controller user's token, made in the world's store (gpufleet token)."""
    monkeypatch.setenv("ANSIBLE_VAULT_PASSWORD_FILE", str(world["vault_password"]))
    capsys.readouterr()
    assert cli.main(["token", "--json"]) == 0
    return json.loads(capsys.readouterr().out)["token"]


def test_a_service_behind_the_in_fleet_proxy(world, capsys, token):
    path = task_file(world, NAME, service_file())
    assert cli.main(["apply", "-f", path, "-y", "-d"]) == 0, capsys.readouterr()
    out = capsys.readouterr().out.splitlines()
    try:
        # As dstack apply: the line, then the URL on the next one; the model's too. (A service
        # that had to wait in the queue is published by the pass that starts it, which prints
        # nothing here.)
        assert "Service is published at:" in out, out
        at = out.index("Service is published at:")
        url = out[at + 1].strip()
        assert url.startswith("http://") and url.endswith("/proxy/services/main/%s/" % NAME)
        at = out.index("Model %s is published at:" % MODEL)
        model_url = out[at + 1].strip()
        assert model_url.endswith("/proxy/models/main/")

        record = wait_for("the service running", lambda: running(records(capsys).get(NAME)))
        service = record["service"]
        assert (service["url"], service["model_url"]) == (url, model_url)
        assert service["proxy_host"] and service["replicas"] == 2
        assert sorted(j["replica"] for j in record["jobs"]) == [0, 1]

        # Both replicas enter once their checks pass; requests reach both.
        seen = wait_for("both replicas answering", lambda: replicas_seen(url, token, 2),
                        seconds=120)
        assert len(seen) == 2
        status, answer = request(url + "hello?x=1", token)
        assert status == 200 and answer["path"] == "/hello?x=1"   # strip_prefix
        assert answer["authorization"] is None                   # the token stays at the proxy
        assert request(url + "hello")[0] == 401
        assert request(url + "hello", "not-" + token)[0] == 403

        # The rate limit: 1 request per second with a burst of 1.
        codes = [request(url + "burst/x", token)[0] for _attempt in range(8)]
        assert 429 in codes and 200 in codes, codes

        # The model: OpenAI's chat/completions and models under the model URL.
        status, answer = request(model_url + "chat/completions", token, {
            "model": MODEL, "messages": [{"role": "user", "content": "hi"}]})
        assert status == 200 and answer["path"] == "/v1/chat/completions"
        assert answer["choices"][0]["message"]["content"].startswith("hello from ")
        status, answer = request(model_url + "models", token)
        assert status == 200 and MODEL in [m["id"] for m in answer["data"]]

        # ps: a row per replica, and -v names the proxy host.
        capsys.readouterr()
        assert cli.main(["ps"]) == 0
        rows = [line.split()[0] for line in capsys.readouterr().out.splitlines()[1:]]
        assert "replica=0" in rows and "replica=1" in rows
        assert cli.main(["ps", "-v"]) == 0
        assert "%s (service via %s)" % (NAME, service["proxy_host"]) in capsys.readouterr().out

        # A replica lost under continuous requests (its container removed on its node):
        # the proxy takes it out and retries what was in flight on the other; the next pass
        # (this ps) makes it again on its host, and the route follows its new port.
        with Load(url, token) as load:
            node, (lost, _state) = next((node, boxes[0]) for node, boxes in sorted(
                node_containers(world, NAME).items()) if boxes)
            world["docker"].run("exec", node, "docker", "rm", "-f", lost)
            assert lost not in [n for n, _s in node_containers(world, NAME)[node]]
            time.sleep(6)   # out of the proxy within 5 s; requests go to the other replica
            capsys.readouterr()
            assert cli.main(["ps"]) == 0   # a pass: the lost replica is made again
            wait_for("the lost replica made again", lambda: replicas_seen(url, token, 2),
                     seconds=120)
            time.sleep(1)
        ok = load.codes.count(200)
        with capsys.disabled():
            print("\nrequests during the loss: %d of %d answered 200" % (ok, len(load.codes)))
        assert len(load.codes) > 50 and ok >= 0.95 * len(load.codes), (ok, set(load.codes))
        boxes = dict(node_containers(world, NAME))[node]
        assert (lost, "running") in boxes, boxes

        # A second apply of a changed service rolls its replicas, one at a time, under
        # continuous requests: none fails, and every replica answers with the new version.
        # The new version autoscales between 2 and 3 replicas (2 requests/s each, over 30 s);
        # the 2 it runs are within that range, so the update only rolls them.
        task_file(world, NAME, service_file(version="2", replicas="2..3", scaling=SCALING))
        with Load(url, token) as load:
            capsys.readouterr()
            code = cli.main(["apply", "-f", path, "-y", "-d"])
            out, err = capsys.readouterr()
            assert code == 0, out + err
            assert "2 replicas rolled to the new version" in out, out
            time.sleep(1)
        with capsys.disabled():
            print("requests during the update: %d of %d answered 200"
                  % (load.codes.count(200), len(load.codes)))
        assert len(load.codes) > 50 and set(load.codes) == {200}, set(load.codes)
        assert set(a["version"] for a in load.answers) == {"1", "2"}
        versions = set((request(url + "hello", token)[1] or {}).get("version")
                       for _attempt in range(12))
        assert versions == {"2"}, versions
        assert replicas_seen(url, token, 2)
        # The same file again (attached, this time): nothing changes.
        before = node_containers(world, NAME)
        capsys.readouterr()
        assert cli.main(["apply", "-f", path, "-y"]) == 0
        assert "is up to date: nothing changed" in capsys.readouterr().out
        assert node_containers(world, NAME) == before

        # A burst (about 40 requests/s) asks for more than 2: a pass of
        # playbooks/reconcile.yml adds a third replica, placed beside the others, which enters
        # once its checks pass. No request fails.
        with Load(url, token) as load:
            time.sleep(5)
            assert reconcile(world) == [NAME]
            scaled_up = time.time()
        with capsys.disabled():
            print("requests while autoscaling to 3: %d of %d answered 200"
                  % (load.codes.count(200), len(load.codes)))
        assert set(load.codes) == {200}, set(load.codes)
        assert_replicas(capsys, url, token, 3)
        # About 2 requests/s ask for one replica, 2 at least. Once the proxy has counted a
        # whole window since it took the third replica in, a pass takes it away again (drained
        # under the load: no request fails).
        with Load(url, token, every=0.5) as load:
            time.sleep(max(0, 31 - (time.time() - scaled_up)))
            wait_for("a pass scaling down", lambda: reconcile(world) == [NAME], seconds=90)
        assert set(load.codes) == {200}, set(load.codes)
        assert_replicas(capsys, url, token, 2)
        boxes = [n for found in node_containers(world, NAME).values() for n, _s in found]
        assert sorted(boxes) == ["%s-0-%d" % (NAME, n) for n in (0, 1)], boxes
    finally:
        assert cli.main(["stop", "-y", NAME]) == 0
    # Stopped: its route is gone (a 404 of the proxy, or nothing listens when it was the last).
    status, _answer = request(url + "hello", token)
    assert status in (404, None), status


def test_replica_groups_each_run_their_own_commands_behind_one_url(world, capsys, token):
    app = base64.b64encode(APP.encode()).decode()
    group = ("  - name: %s\n    count: 1\n    resources:\n      cpu: 1..\n      memory: 1GB..\n"
             "      disk: 1GB..\n    commands:\n      - echo %s | base64 -d > /tmp/app.py\n"
             "      - GROUP=%s MODEL=m python3 /tmp/app.py\n")
    path = task_file(world, GROUPED, "type: service\nname: %s\nport: 8000\n%sreplicas:\n%s%s"
                     % (GROUPED, WAIT, group % ("blue", app, "blue"),
                        group % ("green", app, "green")))
    capsys.readouterr()
    assert cli.main(["apply", "-f", path, "-y", "-d"]) == 0, capsys.readouterr()
    out = capsys.readouterr().out.splitlines()
    try:
        url = (out[out.index("Service is published at:") + 1].strip()
               if "Service is published at:" in out else None)
        record = wait_for("the service running", lambda: running(records(capsys).get(GROUPED)))
        url = url or record["service"]["url"]
        groups = [(j["replica"], j["group"]) for j in record["jobs"]]
        assert groups == [(0, "blue"), (1, "green")], groups
        assert record["service"]["groups"] == [{"name": "blue", "replicas": 1},
                                               {"name": "green", "replicas": 1}]

        def groups_seen():
            seen = set((request(url + "hello", token)[1] or {}).get("group")
                       for _attempt in range(12))
            return seen if seen == {"blue", "green"} else None

        assert wait_for("both groups answering", groups_seen, seconds=120)
        capsys.readouterr()
        assert cli.main(["ps"]) == 0
        lines = capsys.readouterr().out.splitlines()
        assert any(line.startswith("   group=0 replica=0 ") for line in lines), lines
        assert any(line.startswith("   group=1 replica=1 ") for line in lines), lines
    finally:
        assert cli.main(["stop", "-y", GROUPED]) == 0
