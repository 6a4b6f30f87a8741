# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The rendered configuration at work: a real HAProxy (a throwaway process on loopback ports)
in front of small Python HTTP servers as replicas, asked with urllib. Tokens (401, 403, the
header kept from the replica), strip_prefix, both replicas reached, 429 over a rate limit,
model routing by the body's ``model``, the models list, a replica whose probe fails kept out, a
replica that dies out within 5 s with no request lost; and the operations reloading a running
HAProxy (master and worker): a route published, a replica added while the first serves, the last
route taken out and nothing listening.

The requests each service took are counted where autoscaling reads them.

HAProxy must be installed where the unit tests run (Debian's package ``haproxy``): a missing
binary fails these tests, it never skips them. They take about 5 s together.
"""

from __future__ import annotations

import hashlib
import json
import os
import socket
import subprocess
import time
import urllib.error
import urllib.request

import pytest
from ansible_collections.gpufleet.cluster.plugins.module_utils.tasks.hostside import (
    memberside,
    proxyconf,
    proxyside,
)

from .fakes import BASE, free_port, haproxy, probe, replica, route

TOKEN = "live-token"


def ask(url, token=None, data=None):
    """``(status, decoded JSON or text)``."""
    request = urllib.request.Request(url, data=data)
    if token:
        request.add_header("Authorization", "Bearer " + token)
    try:
        with urllib.request.urlopen(request, timeout=5) as response:
            status, body = response.status, response.read()
    except urllib.error.HTTPError as exc:
        status, body = exc.code, exc.read()
    try:
        return status, json.loads(body)
    except ValueError:
        return status, body.decode()


@pytest.fixture
def proxy(tmp_path, monkeypatch):
    servers = {"a": replica("a"), "b": replica("b"), "unready": replica("unready", False)}

    def replicas(*names):
        return [{"replica_num": num, "job_num": num, "host": name, "address": "127.0.0.1",
                 "port": servers[name].server_address[1]} for num, name in enumerate(names)]

    limit = {"prefix": "/limited", "key": {"type": "ip_address"}, "rps": 1, "burst": 2}
    routes = [route("web", replicas=replicas("a", "b"), rate_limits=[limit]),
              route("chat", replicas=replicas("a"), auth=False,
                    model={"type": "chat", "name": "org/llama", "format": "openai",
                           "prefix": "/v1"}),
              route("raw", replicas=replicas("b"), strip_prefix=False, auth=False),
              route("slow", replicas=replicas("unready"), probes=[probe()], auth=False)]
    port = free_port()
    conf = tmp_path / "gpufleet.d"
    conf.mkdir()
    files = proxyconf.proxy_render(routes, {"address": "127.0.0.1", "port": port},
                                   {"f": [hashlib.sha256(TOKEN.encode()).hexdigest()]},
                                   conf=lambda name: str(conf / name),
                                   state=lambda name: str(tmp_path / name))
    for name, text in files.items():
        (conf / name).write_text(text)
    # As at a reload with nothing running yet: every replica starts down.
    for name, text in proxyconf.proxy_server_states(routes, {}).items():
        (tmp_path / name).write_text(text)
    base = tmp_path / "haproxy.cfg"
    base.write_text(BASE.format(root=tmp_path))
    process = subprocess.Popen([haproxy(), "-db", "-f", str(base), "-f", str(conf)],
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    monkeypatch.setattr(proxyside, "PROXY_SOCKET", str(tmp_path / "admin.sock"))
    deadline = time.time() + 5
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            break
        except OSError:
            assert process.poll() is None, process.stdout.read().decode()
            assert time.time() < deadline, "HAProxy did not listen in 5 s"
            time.sleep(0.05)
    # The replicas whose checks pass come up (the first check is at once).
    while set(server["status"] for server in proxyside.op_proxy_status({})["servers"]
              if server["run"] != "slow") != {"UP"}:
        assert time.time() < deadline, proxyside.op_proxy_status({})
        time.sleep(0.05)
    yield {"url": "http://127.0.0.1:%d" % port, "servers": servers}
    process.terminate()
    process.wait(5)
    for server in servers.values():
        server.shutdown()
        server.server_close()


def test_the_proxy_at_work(proxy):
    url = proxy["url"]
    service = url + "/proxy/services/main/web"
    # A replica whose probe fails never gets a request, from the start.
    assert ask(url + "/proxy/services/main/slow/x")[0] == 503
    assert proxyside.op_proxy_status({"run": "slow"})["servers"][0]["status"].startswith("DOWN")
    # Auth: 401 without a bearer token, 403 with one no member published, else the replica,
    # which never sees the header.
    status, body = ask(service + "/hello?x=1")
    assert (status, body) == (401, {"detail": "Not authenticated"})
    assert ask(service + "/hello", token="guess")[0] == 403
    seen = [ask(service + "/hello?x=1", token=TOKEN) for _number in range(4)]
    assert all(status == 200 for status, _body in seen)
    assert set(body["replica"] for _status, body in seen) == {"a", "b"}
    assert seen[0][1]["path"] == "/hello?x=1" and seen[0][1]["authorization"] is None
    # No trailing slash: a redirect to the prefix; an unknown service: 404.
    assert ask(url + "/proxy/services/main/raw")[1]["path"] == "/proxy/services/main/raw/"
    assert ask(url + "/proxy/services/main/nothing/")[0] == 404
    # strip_prefix: false keeps the whole path.
    assert ask(url + "/proxy/services/main/raw/a/b")[1]["path"] == "/proxy/services/main/raw/a/b"
    # 1 rps with a burst of 2: three at once pass, the fourth is refused; other paths are free.
    statuses = [ask(service + "/limited/x", token=TOKEN)[0] for _number in range(4)]
    assert statuses == [200, 200, 200, 429]
    assert ask(service + "/free", token=TOKEN)[0] == 200
    # Models: by the body's model, under dstack's path and under /v1; the list; unknown: 404.
    data = json.dumps({"messages": [{"role": "user", "content": "hi"}], "model": "org/llama"})
    for path in ("/proxy/models/main/chat/completions", "/proxy/models/main/v1/chat/completions"):
        status, body = ask(url + path, data=data.encode())
        assert status == 200 and body["path"] == "/v1/chat/completions"
        assert json.loads(body["body"])["model"] == "org/llama"
    status, body = ask(url + "/proxy/models/main/v1/chat/completions",
                       data=b'{"model": "other"}')
    assert (status, body) == (404, {"detail": "Model not found"})
    status, body = ask(url + "/proxy/models/main/models")
    assert status == 200 and [model["id"] for model in body["data"]] == ["org/llama"]
    # A replica that dies: no request lost (retried on the other), out within 5 s.
    proxy["servers"]["b"].shutdown()
    proxy["servers"]["b"].server_close()
    died = time.time()
    seen = [ask(service + "/after", token=TOKEN) for _number in range(6)]
    assert [(status, body["replica"]) for status, body in seen] == [(200, "a")] * 6
    while True:
        servers = proxyside.op_proxy_status({"run": "web"})["servers"]
        states = dict((server["replica_num"], server["status"]) for server in servers)
        if states[1].startswith("DOWN"):
            break
        assert time.time() - died < 5, states
        time.sleep(0.1)
    assert states[0] == "UP"
    # What autoscaling follows: each service's requests that passed auth and its limits,
    # counted once each (a retried one too) in the table of its window.
    counted = proxyside.proxy_rate_rows(proxyside._proxy_ask("show table gf_rate_60"))
    assert counted["web"] == 4 + 3 + 1 + 6, counted
    assert counted["raw"] == 2 and "nothing" not in counted


def test_publish_and_unpublish_reload_a_running_haproxy(tmp_path, monkeypatch):
    # HAProxy as a master and its worker, reloaded by a signal (no service manager here).
    conf = tmp_path / "gpufleet.d"
    conf.mkdir()
    (conf / "services.cfg").write_text("# empty\n")
    base = tmp_path / "haproxy.cfg"
    base.write_text(BASE.format(root=tmp_path))
    pidfile = tmp_path / "haproxy.pid"
    for name, value in (("PROXY_ROOT", tmp_path / "proxy"), ("PROXY_CONF", conf),
                        ("PROXY_BASE", base), ("PROXY_PIDFILE", pidfile),
                        ("PROXY_SOCKET", tmp_path / "admin.sock"),
                        ("PROXY_SYSTEMD", tmp_path / "no-systemd"),
                        ("PROXY_INIT", tmp_path / "no-init-script"),
                        ("PROXY_LISTEN_FILE", tmp_path / "gpufleet-listen.json")):
        monkeypatch.setattr(proxyside, name, str(value))
    monkeypatch.setattr(proxyside, "PROXY_BINARY", haproxy())
    monkeypatch.setattr(memberside, "TEAM_ROOT", str(tmp_path / "team"))
    servers = {"a": replica("a"), "b": replica("b")}
    process = subprocess.Popen([haproxy(), "-W", "-db", "-p", str(pidfile), "-f", str(base),
                                "-f", str(conf)],
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        deadline = time.time() + 5
        while not proxyside.op_proxy_check({})["running"]:
            assert process.poll() is None, process.stdout.read().decode()
            assert time.time() < deadline, "HAProxy did not start in 5 s"
            time.sleep(0.05)
        port = free_port()
        listen = {"address": "127.0.0.1", "port": port}
        web = route("web", auth=False, replicas=[
            {"replica_num": 0, "job_num": 0, "host": "a", "address": "127.0.0.1",
             "port": servers["a"].server_address[1]}])
        assert proxyside.op_proxy_publish({"route": web, "listen": listen})["changed"] is True
        url = "http://127.0.0.1:%d/proxy/services/main/web/x" % port

        def replicas_seen(count):
            seen, deadline = set(), time.time() + 5
            while len(seen) < count:
                assert time.time() < deadline, seen
                try:
                    status, body = ask(url)
                except OSError:
                    status = None
                if status == 200:
                    seen.add(body["replica"])
                else:
                    time.sleep(0.1)
            return seen

        assert replicas_seen(1) == {"a"}
        # A second replica: published with a reload, it enters once its check passes, and the
        # first one serves throughout.
        web["replicas"].append({"replica_num": 1, "job_num": 1, "host": "b",
                                "address": "127.0.0.1", "port": servers["b"].server_address[1]})
        proxyside.op_proxy_publish({"route": web, "listen": listen})
        states = open(os.path.join(proxyside.PROXY_ROOT, "state", "gf_service_web")).read()
        assert " replica-1 " in states and " replica-0 " not in states
        assert ask(url)[0] == 200
        assert replicas_seen(2) == {"a", "b"}
        assert proxyside.op_proxy_unpublish({"run": "web"})["routes"] == []
        deadline = time.time() + 5
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
            except OSError:
                break
            assert time.time() < deadline, "the proxy still listens with no service"
            time.sleep(0.1)
    finally:
        process.terminate()
        process.wait(5)
        for server in servers.values():
            server.shutdown()
            server.server_close()
