# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The in-fleet proxy's host side (tasks.hostside.proxyside): the HAProxy configuration rendered
from the routes (its structure, and that nothing a user wrote can add a line to it), checked by
the real ``haproxy -c`` (HAProxy must be installed where the unit tests run: Debian's package
``haproxy``; a missing binary fails these tests, it never skips them), and the operations on a
fake root: the route files, the rollback when HAProxy refuses, the reload, the status.

PROXY_ROOT, PROXY_CONF, TEAM_ROOT and HAProxy's base file point into a temporary folder.
"""

from __future__ import annotations

import hashlib
import json
import os
import signal
import stat
import subprocess
import time
from pathlib import Path

import pytest
from ansible_collections.gpufleet.cluster.plugins.module_utils.services import records
from ansible_collections.gpufleet.cluster.plugins.module_utils.tasks import ssh
from ansible_collections.gpufleet.cluster.plugins.module_utils.tasks.hostside import (
    memberside,
    nodeside,
    proxyconf,
    proxyside,
)

from .fakes import BASE, LISTEN, TOKEN, haproxy, model, probe, route


@pytest.fixture
def host(tmp_path, monkeypatch):
    """A fake root: the proxy's folders, a base configuration, a members document."""
    conf = tmp_path / "gpufleet.d"
    conf.mkdir()
    base = tmp_path / "haproxy.cfg"
    base.write_text(BASE.format(root=tmp_path))
    monkeypatch.setattr(proxyside, "PROXY_ROOT", str(tmp_path / "proxy"))
    monkeypatch.setattr(proxyside, "PROXY_CONF", str(conf))
    monkeypatch.setattr(proxyside, "PROXY_BASE", str(base))
    monkeypatch.setattr(proxyside, "PROXY_BINARY", haproxy())
    monkeypatch.setattr(proxyside, "PROXY_PIDFILE", str(tmp_path / "haproxy.pid"))
    monkeypatch.setattr(proxyside, "PROXY_SOCKET", str(tmp_path / "admin.sock"))
    monkeypatch.setattr(proxyside, "PROXY_LISTEN_FILE", str(tmp_path / "gpufleet-listen.json"))
    monkeypatch.setattr(memberside, "TEAM_ROOT", str(tmp_path / "team"))
    reloads = []
    monkeypatch.setattr(proxyside, "proxy_reload", lambda: reloads.append(1))
    members(tmp_path, {"alice": hashlib.sha256(TOKEN.encode()).hexdigest()})
    return {"root": tmp_path, "conf": conf, "reloads": reloads}


def members(tmp_path, digests, fleet="f"):
    team = tmp_path / "team"
    team.mkdir(exist_ok=True)
    doc = {"fleet": fleet, "revoked": {"eve": {"stamp": [1, "c"]}}, "limits": {},
           "members": dict((user, {"role": "member", "key": "ssh-ed25519 AAAA",
                                   "token_sha256": digest, "stamp": [1, "c"]})
                           for user, digest in digests.items())}
    (team / "members.json").write_text(json.dumps(doc))


def render(routes, tmp_path, digests=None, base=None):
    """Render into ``tmp_path`` and return services.cfg's text, checked by haproxy -c."""
    conf = tmp_path / "conf"
    conf.mkdir(exist_ok=True)
    files = proxyconf.proxy_render(routes, LISTEN, digests or {"f": []},
                                   conf=lambda name: str(conf / name),
                                   state=lambda name: str(tmp_path / name))
    for name, text in files.items():
        (conf / name).write_text(text)
    for name, text in proxyconf.proxy_server_states(routes, {}).items():
        (tmp_path / name).write_text(text)
    if base is None:
        base = tmp_path / "base.cfg"
        base.write_text(BASE.format(root=tmp_path))
    checked = subprocess.run([haproxy(), "-c", "-f", str(base), "-f", str(conf)],
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT, check=False)
    assert checked.returncode == 0, checked.stdout.decode()
    # Nor a warning, but those of the replicas that start down (their state files).
    warnings = [line for line in checked.stdout.decode().splitlines()
                if "[WARNING]" in line and "changed from server-state" not in line]
    assert warnings == []
    return files


# ---- rendering --------------------------------------------------------------------------------

def test_each_service_is_counted_over_its_window(tmp_path):
    text = render([route(), route("api", rate_window=30), route("chat", rate_window=30)],
                  tmp_path)["services.cfg"]
    lines = [line.strip() for line in text.splitlines()]
    # After auth and the rate limits (a refused request is not counted), before the backend.
    track = lines.index("http-request track-sc1 var(txn.gf_run) table gf_rate_60 if gf_is_web")
    assert "http-request track-sc1 var(txn.gf_run) table gf_rate_30 if gf_is_api" in lines
    assert track > max(i for i, line in enumerate(lines) if line.startswith("http-request return"))
    assert track < lines.index("use_backend gf_service_web if gf_is_web")
    # One table per window, that keeps the rate over it.
    tables = [line for line in lines if "store http_req_rate" in line]
    assert tables == ["stick-table type string len 64 size 1k expire 60s store http_req_rate(30s)",
                      "stick-table type string len 64 size 1k expire 120s store "
                      "http_req_rate(60s)"]
    for bad in (-5, 7200, "60", True):
        with pytest.raises(proxyside.Failure, match="rate window"):
            proxyconf.proxy_render([route(rate_window=bad)], LISTEN, {}, str, str)


def test_no_route_renders_a_configuration_where_nothing_listens(tmp_path):
    files = render([], tmp_path)
    assert list(files) == ["services.cfg"]
    assert [line for line in files["services.cfg"].splitlines()
            if line and not line.startswith("#")] == []


def test_a_service_gets_its_prefix_its_replicas_and_the_tcp_check(tmp_path):
    # A second service whose name starts with the first's: the prefixes end in a slash.
    text = render([route(), route("web-2")], tmp_path)["services.cfg"]
    assert "use_backend gf_service_web-2 if gf_is_web-2" in text
    lines = [line.strip() for line in text.splitlines()]
    prefix = records.service_prefix("web")
    assert "bind 127.0.0.1:3000" in lines
    assert "http-request set-var(txn.gf_run) str(web) if { path_beg %s }" % prefix in lines
    assert "use_backend gf_service_web if gf_is_web" in lines
    # strip_prefix: the replica sees the path after the prefix.
    assert "http-request set-path %[var(txn.gf_path)] if gf_is_web" in lines
    assert "server replica-0 10.0.0.2:32768" in lines
    assert "server replica-1 10.0.0.3:32769" in lines
    # No probes: a TCP check, and a replica that dies is out within 5 s.
    assert "option httpchk" not in lines
    check = [line for line in lines if line.startswith("default-server check")][0]
    assert "inter 1s" in check and "fall 2" in check and "on-error mark-down" in check
    assert "downinter 1s" in check
    # One retry on another replica, L7 retries for idempotent methods only.
    assert "retries 1" in lines and "option redispatch 1" in lines
    assert "http-request disable-l7-retry unless { method GET HEAD OPTIONS TRACE PUT DELETE }" \
        in lines


def test_auth_needs_a_members_token_and_the_header_never_reaches_the_replica(tmp_path):
    digest = hashlib.sha256(TOKEN.encode()).hexdigest()
    files = render([route()], tmp_path, {"f": [digest, "not-a-digest"]})
    assert files["tokens-f.lst"] == digest + "\n"
    text = files["services.cfg"]
    assert "if gf_is_web !gf_bearer" in text
    assert "tokens-f.lst }" in text
    assert "http-request del-header authorization if gf_is_web" in text
    (tmp_path / "open").mkdir()
    open_text = render([route(auth=False)], tmp_path / "open")["services.cfg"]
    assert "gf_is_web !gf_bearer" not in open_text and "del-header" not in open_text


def test_strip_prefix_false_keeps_the_path(tmp_path):
    text = render([route(strip_prefix=False)], tmp_path)["services.cfg"]
    assert "set-path" not in text


def test_http_probes_become_the_check_sequence(tmp_path):
    probes = [probe(), probe(url="/ready?full=1", method="post", headers=[
        {"name": "X-Probe", "value": "a b # c $HOME 100% 'q'"}], body='{"ping": true}',
        timeout=3, interval=2, ready_after=3)]
    text = render([route(probes=probes)], tmp_path)["services.cfg"]
    lines = [line.strip() for line in text.splitlines()]
    assert "option httpchk" in lines
    assert lines.count("http-check connect") == 2
    assert "http-check send meth GET uri '/health' ver HTTP/1.1 hdr host localhost" in lines
    assert ("http-check send meth POST uri '/ready?full=1' ver HTTP/1.1 hdr host localhost "
            "hdr 'X-Probe' 'a b # c $HOME 100%% '\\''q'\\''' body '{\"ping\": true}'") in lines
    assert lines.count("http-check expect status 200-299") == 2
    assert "timeout check 10s" in lines
    check = [line for line in lines if line.startswith("default-server check")][0]
    assert "rise 3" in check and "downinter 2s" in check
    assert "downinter 1s" in render([route(probes=[probe(interval=1)])],
                                    tmp_path)["services.cfg"]


def test_rate_limits_longest_prefix_first_per_ip_or_header(tmp_path):
    limits = [{"prefix": "/", "key": {"type": "ip_address"}, "rps": 10, "burst": 20},
              {"prefix": "/api/slow", "key": {"type": "header", "header": "X-User"},
               "rps": 0.5, "burst": 0}]
    text = render([route(rate_limits=limits)], tmp_path)["services.cfg"]
    lines = [line.strip() for line in text.splitlines()]
    picks = [line for line in lines if line.startswith("http-request set-var(txn.gf_limit)")]
    assert "'/api/slow'" in picks[0] and "'/'" in picks[1]
    assert "http-request track-sc0 req.fhdr(X-User) table gf_limit_1 if " \
           "{ var(txn.gf_limit) -m int 1 }" in lines
    assert "http-request track-sc0 src table gf_limit_2 if { var(txn.gf_limit) -m int 2 }" \
        in lines
    # 0.5 rps and no burst: 1 request in any 2 s; 10 rps with a burst of 20: 21 in 2.1 s.
    assert proxyconf.proxy_limit_window(limits[1]) == (1, 2000)
    assert proxyconf.proxy_limit_window(limits[0]) == (21, 2100)
    assert "stick-table type string len 128 size 100k expire 60s store gpc_rate(1,2000)" in lines
    assert "stick-table type ipv6 size 100k expire 60s store gpc_rate(1,2100)" in lines
    assert any("status 429" in line and "sc_gpc_rate(0,0) ge 21" in line for line in lines)


def test_models_route_by_the_bodys_model_and_list_statically(tmp_path):
    routes = [route(model=model()), route("other", model=model("mistral/7b", "/"), auth=False)]
    files = render(routes, tmp_path)
    listed = json.loads(files["models.json"])
    assert listed["object"] == "list"
    assert [(m["id"], m["object"], m["owned_by"]) for m in listed["data"]] == [
        ("mistral/7b", "model", "main"), ("llama", "model", "main")]
    text = files["services.cfg"]
    digest = hashlib.sha256(b"llama").hexdigest()
    assert ("http-request set-var(txn.gf_run) str(web) if gf_models "
            "{ var(txn.gf_model) -m str %s }" % digest) in text
    assert "req.body,json_query('$.model'),sha2(256),hex,lower" in text
    assert "tune.bufsize %d" % proxyconf.PROXY_MODEL_BUFFER in text
    # The model's prefix (/v1) goes in front of what follows /proxy/models/main/[v1/].
    assert "path,regsub(^/proxy/models/main/v1/,/v1/) if gf_models gf_models_v1 gf_is_web" in text
    assert "path,regsub(^/proxy/models/main/,/) if gf_models !gf_models_v1 gf_is_other" in text
    assert "Model not found" in text


def test_a_model_two_services_publish_is_refused():
    with pytest.raises(nodeside.Failure, match="model llama is published by service a already"):
        proxyconf.proxy_render([route("a", model=model()), route("b", model=model())], LISTEN,
                               {}, str, str)


@pytest.mark.parametrize("changes, message", [
    ({"run": "web\n    bind :80"}, "the run name"),
    ({"run": "Web"}, "the run name"),
    ({"fleet": "../etc"}, "the fleet name"),
    ({"replicas": [{"replica_num": 0, "address": "10.0.0.2 backup", "port": 1}]}, "the address"),
    ({"replicas": [{"replica_num": 0, "address": "10.0.0.2", "port": 70000}]}, "at most 65535"),
    ({"probes": [probe(headers=[{"name": "X-A", "value": "v\n    bind :81"}])]},
     "control character"),
    ({"probes": [probe(headers=[{"name": "X-A b", "value": "v"}])]}, "header name"),
    ({"probes": [probe(url="/a b")]}, "probe's url"),
    ({"probes": [probe(method="get\nx")]}, "probe's method"),
    ({"rate_limits": [{"prefix": "/a }", "key": {"type": "ip_address"}, "rps": 1}]},
     "rate limit's prefix"),
    ({"rate_limits": [{"prefix": "/", "key": {"type": "header", "header": "X)"}, "rps": 1}]},
     "rate limit's header"),
    ({"rate_limits": [{"prefix": "/", "key": {"type": "ip_address"}, "rps": 0}]}, "above 0"),
    ({"model": {"name": "m", "format": "tgi", "prefix": "/"}}, "format openai only"),
    ({"model": model(prefix="/v1,x")}, "model's prefix"),
])
def test_nothing_a_user_wrote_can_add_a_line(changes, message):
    with pytest.raises(nodeside.Failure, match=message):
        proxyconf.proxy_render([route(**changes)], LISTEN, {}, str, str)


def test_what_the_spec_allows_in_paths_and_header_names_is_written_quoted(tmp_path):
    limits = [{"prefix": "/api:v1/#x$y'z", "key": {"type": "ip_address"}, "rps": 1, "burst": 0}]
    probes = [probe(url="/health?x=1&y=#2", headers=[{"name": "X.Odd~Name!", "value": "v"}])]
    text = render([route(rate_limits=limits, probes=probes)], tmp_path)["services.cfg"]
    assert "{ var(txn.gf_path) -m beg '/api:v1/#x$y'\\''z' }" in text
    assert "uri '/health?x=1&y=#2'" in text and "hdr 'X.Odd~Name!' 'v'" in text


def test_words_are_strongly_quoted():
    assert proxyconf.proxy_word("a b") == "'a b'"
    assert proxyconf.proxy_word("it's") == "'it'\\''s'"
    assert proxyconf.proxy_word("100%", percent=True) == "'100%%'"
    with pytest.raises(nodeside.Failure, match="control character"):
        proxyconf.proxy_word("a\rb")


def test_ipv6_addresses_take_haproxys_prefix(tmp_path):
    assert proxyconf.proxy_address("fd00::2", 8000) == "ipv6@fd00::2:8000"
    replicas = [{"replica_num": 0, "job_num": 0, "host": "h", "address": "::1", "port": 9000}]
    assert "server replica-0 ipv6@::1:9000" in render([route(replicas=replicas)],
                                                      tmp_path)["services.cfg"]


# ---- the operations on a fake root ------------------------------------------------------------

def test_publish_writes_the_route_and_the_configuration_and_reloads(host):
    answer = proxyside.op_proxy_publish({"route": route(), "listen": LISTEN})
    assert answer == {"changed": True, "routes": ["web"]}
    path = os.path.join(proxyside.PROXY_ROOT, "routes", "web.json")
    assert json.load(open(path))["run"] == "web"
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    assert stat.S_IMODE(os.stat(proxyside.PROXY_ROOT).st_mode) == 0o700
    conf = host["conf"]
    assert "server replica-1 10.0.0.3:32769" in (conf / "services.cfg").read_text()
    assert (conf / "tokens-f.lst").read_text() == hashlib.sha256(TOKEN.encode()).hexdigest() + "\n"
    assert stat.S_IMODE(os.stat(conf / "tokens-f.lst").st_mode) == 0o600
    assert host["reloads"] == [1]
    # The same route again: nothing changes, no reload, while HAProxy runs.
    (host["root"] / "haproxy.pid").write_text("%d\n" % os.getpid())
    assert proxyside.op_proxy_publish({"route": route(), "listen": LISTEN})["changed"] is False
    assert host["reloads"] == [1]
    # Published again later (an apply that changed nothing): a model's ``created`` is still
    # the first publish's time, so no file changes and HAProxy keeps its counts.
    chat = route(model=model())
    assert proxyside.op_proxy_publish({"route": chat, "listen": LISTEN})["changed"] is True
    again = dict(chat, submitted_at=chat["submitted_at"] + 3600)
    assert proxyside.op_proxy_publish({"route": again, "listen": LISTEN})["changed"] is False
    assert host["reloads"] == [1, 1]
    created = json.loads((conf / "models.json").read_text())["data"][0]["created"]
    assert created == int(chat["submitted_at"])
    # HAProxy not running (the host restarted): the same route starts it.
    (host["root"] / "haproxy.pid").unlink()
    assert proxyside.op_proxy_publish({"route": route(), "listen": LISTEN})["changed"] is True
    assert host["reloads"] == [1, 1, 1]


def test_a_gateway_checks_its_own_members_and_keeps_a_name_to_one_fleet(host):
    """A plain-HTTP gateway (the role's record names it, with its domain): the services of
    fleet f are routed by host name, their tokens are the gateway's members', its routes are
    listed, and a service of that name from another fleet is refused."""
    (host["root"] / "gpufleet-listen.json").write_text(json.dumps(
        {"address": "127.0.0.1", "port": 3000, "gateway": "gw", "domain": "example.com",
         "default": None}))
    digest = hashlib.sha256(TOKEN.encode()).hexdigest()
    members(host["root"], {"alice": digest}, fleet="gw")
    assert proxyside.op_proxy_publish({"route": route(), "listen": LISTEN})["changed"] is True
    conf = host["conf"]
    assert (conf / "tokens-gw.lst").read_text() == digest + "\n"
    assert not (conf / "tokens-f.lst").exists()
    text = (conf / "services.cfg").read_text()
    assert "http-request set-path /proxy/services/main/web%[path] if !gf_acme " \
        "{ var(txn.gf_host) -m str web.example.com }" in text
    assert proxyside.op_proxy_routes({}) == {
        "routes": {"web": {"fleet": "f", "user": "alice", "model": None}}}
    with pytest.raises(nodeside.Failure, match="a service named web of fleet f is published on "
                                               "gateway gw already"):
        proxyside.op_proxy_publish({"route": route(fleet="other"), "listen": LISTEN})
    # With no route left, the gateway still answers (404), unlike the in-fleet proxy.
    proxyside.op_proxy_unpublish({"run": "web"})
    assert "frontend gpufleet_services" in (conf / "services.cfg").read_text()


def test_unpublish_of_the_last_route_leaves_nothing_listening(host):
    proxyside.op_proxy_publish({"route": route(), "listen": LISTEN})
    proxyside.op_proxy_publish({"route": route("chat", model=model()), "listen": LISTEN})
    assert (host["conf"] / "models.json").exists()
    assert proxyside.op_proxy_unpublish({"run": "chat"}) == {"changed": True, "routes": ["web"]}
    assert not (host["conf"] / "models.json").exists()
    assert proxyside.op_proxy_unpublish({"run": "web"}) == {"changed": True, "routes": []}
    text = (host["conf"] / "services.cfg").read_text()
    assert "frontend" not in text and "bind" not in text
    assert not (host["conf"] / "tokens-f.lst").exists()
    assert proxyside.op_proxy_unpublish({"run": "web"})["changed"] is False
    assert len(host["reloads"]) == 4


def test_a_configuration_haproxy_refuses_puts_the_previous_files_back(host, monkeypatch):
    proxyside.op_proxy_publish({"route": route(), "listen": LISTEN})
    before = dict((p.name, p.read_bytes()) for p in host["conf"].iterdir())
    routes_before = sorted(os.listdir(os.path.join(proxyside.PROXY_ROOT, "routes")))
    # A base file that clashes with the new backend's name: haproxy -c refuses.
    with open(proxyside.PROXY_BASE, "a") as handle:
        handle.write("backend gf_service_api\n    mode http\n")
    with pytest.raises(nodeside.Failure, match="HAProxy refused the new routes .*gf_service_api"):
        proxyside.op_proxy_publish({"route": route("api"), "listen": LISTEN})
    assert dict((p.name, p.read_bytes()) for p in host["conf"].iterdir()) == before
    assert sorted(os.listdir(os.path.join(proxyside.PROXY_ROOT, "routes"))) == routes_before
    assert host["reloads"] == [1]


def test_a_failed_reload_puts_the_previous_files_back(host, monkeypatch):
    proxyside.op_proxy_publish({"route": route(), "listen": LISTEN})
    before = (host["conf"] / "services.cfg").read_text()
    answers = iter(["bind failed", None])
    monkeypatch.setattr(proxyside, "proxy_reload", lambda: next(answers))
    with pytest.raises(nodeside.Failure, match="could not be reloaded .*bind failed"):
        proxyside.op_proxy_publish({"route": route("api"), "listen": LISTEN})
    assert (host["conf"] / "services.cfg").read_text() == before
    assert not os.path.exists(os.path.join(proxyside.PROXY_ROOT, "routes", "api.json"))


def test_refresh_takes_a_new_members_token(host):
    proxyside.op_proxy_publish({"route": route(), "listen": LISTEN})
    (host["root"] / "haproxy.pid").write_text("%d\n" % os.getpid())
    assert proxyside.op_proxy_refresh({})["changed"] is False
    members(host["root"], {"alice": "a" * 64, "bob": "b" * 64})
    assert proxyside.op_proxy_refresh({}) == {"changed": True, "routes": ["web"]}
    assert (host["conf"] / "tokens-f.lst").read_text() == "a" * 64 + "\n" + "b" * 64 + "\n"


def test_bad_payloads_get_a_message(host):
    with pytest.raises(nodeside.Failure, match="needs a route"):
        proxyside.op_proxy_publish({"route": route()})
    with pytest.raises(nodeside.Failure, match="the run name"):
        proxyside.op_proxy_unpublish({"run": "../x"})
    with pytest.raises(nodeside.Failure, match="the address"):
        proxyside.op_proxy_publish({"route": route(), "listen": {"address": "a b", "port": 1}})


def test_check_says_installed_version_and_running(host):
    answer = proxyside.op_proxy_check({})
    assert answer["installed"] is True and answer["version"].startswith("2.")
    assert answer["running"] is False
    (host["root"] / "haproxy.pid").write_text("%d\n" % os.getpid())
    assert proxyside.op_proxy_check({})["running"] is True


def test_check_says_where_the_role_has_the_services_listen(host):
    assert proxyside.op_proxy_check({})["listen"] is None   # a host the role did not record
    (host["root"] / "gpufleet-listen.json").write_text('{"address": "10.0.0.9", "port": 8080}')
    assert proxyside.op_proxy_check({})["listen"] == {"address": "10.0.0.9", "port": 8080}
    (host["root"] / "gpufleet-listen.json").write_text('{"address": "10.0.0.9"}')
    with pytest.raises(nodeside.Failure, match="gpufleet-listen.json does not say where the "
                                               "proxy listens .*gpufleet.cluster.gateway"):
        proxyside.op_proxy_check({})


def test_publish_listens_where_the_role_says_and_on_the_payloads_address_without_it(host):
    proxyside.op_proxy_publish({"route": route(), "listen": LISTEN})
    assert "bind 127.0.0.1:3000" in (host["conf"] / "services.cfg").read_text()
    (host["root"] / "gpufleet-listen.json").write_text('{"address": "0.0.0.0", "port": 8080}')
    assert proxyside.op_proxy_publish({"route": route(), "listen": LISTEN})["changed"] is True
    text = (host["conf"] / "services.cfg").read_text()
    assert "bind 0.0.0.0:8080" in text and ":3000" not in text
    # The role's file is enough: a payload without ``listen`` publishes too.
    assert proxyside.op_proxy_publish({"route": route("api")})["routes"] == ["api", "web"]
    listened = json.load(open(os.path.join(proxyside.PROXY_ROOT, "listen.json")))
    assert listened == {"address": "0.0.0.0", "port": 8080}
    # the role played again with another port: the next change binds it
    (host["root"] / "gpufleet-listen.json").write_text('{"address": "0.0.0.0", "port": 8081}')
    assert proxyside.op_proxy_unpublish({"run": "api"})["routes"] == ["web"]
    assert "bind 0.0.0.0:8081" in (host["conf"] / "services.cfg").read_text()


def test_status_reads_show_stat(host, monkeypatch):
    stat_text = ("# pxname,svname,qcur,status,rate,addr,\n"
                 "gpufleet_services,FRONTEND,0,OPEN,9,,\n"
                 "gf_service_web,replica-0,0,UP,3,10.0.0.2:32768,\n"
                 "gf_service_web,replica-1,0,DOWN,0,10.0.0.3:32769,\n"
                 "gf_service_web,BACKEND,0,UP,3,,\n"
                 "gf_service_chat,replica-0,0,MAINT,0,10.0.0.4:1,\n"
                 "gf_service_chat,BACKEND,0,DOWN,0,,\n")
    # The counts of each window's table, HAProxy 2.6's lines (one entry per service).
    tables = {"show table gf_rate_30": (
        "# table: gf_rate_30, type: string, size:1024, used:1\n"
        "0x55d0c2e8: key=web use=0 exp=59000 shard=0 http_req_rate(30000)=45\n"),
        "show table gf_rate_60": "# table: gf_rate_60, type: string, size:1024, used:0\n"}
    asked = []

    def ask(command):
        asked.append(command)
        if command == "show info":
            return "Name: HAProxy\nUptime: 0d 0h01m12s\nUptime_sec: 72\n"
        return tables.get(command, stat_text)

    monkeypatch.setattr(proxyside, "_proxy_ask", ask)
    proxyside.op_proxy_publish({"route": dict(route(run="web"), rate_window=30),
                                "listen": LISTEN})
    proxyside.op_proxy_publish({"route": route(run="chat"), "listen": LISTEN})
    answer = proxyside.op_proxy_status({"run": "web"})
    assert answer.pop("now") == pytest.approx(time.time(), abs=60)
    assert answer == {"rates": {"web": 3}, "servers": [
        {"run": "web", "replica_num": 0, "status": "UP", "address": "10.0.0.2", "port": 32768},
        {"run": "web", "replica_num": 1, "status": "DOWN", "address": "10.0.0.3",
         "port": 32769}], "requests": {"web": {"count": 45, "window": 30}}, "uptime": 72,
        "scaled_at": None, "scaled_run_id": None}
    everything = proxyside.op_proxy_status({})
    assert sorted(everything["rates"]) == ["chat", "web"]
    assert everything["requests"] == {"web": {"count": 45, "window": 30},
                                      "chat": {"count": 0, "window": 60}}
    assert "scaled_at" not in everything
    # A proxy that runs a configuration without the table counts nothing (not 0 requests).
    tables["show table gf_rate_30"] = "Unknown table\n"
    assert proxyside.op_proxy_status({"run": "web"})["requests"] == {}
    # An update that changed the count stamps when, for the service's run id.
    assert proxyside.op_proxy_roll({"run": "web", "by": "a:1"})["taken"]
    proxyside.op_proxy_roll({"run": "web", "by": "a:1", "release": True, "scaled": "r-1"})
    answer = proxyside.op_proxy_status({"run": "web"})
    assert answer["scaled_run_id"] == "r-1"
    assert answer["scaled_at"] == pytest.approx(time.time(), abs=60)
    # A later lease and its plain release keep the stamp.
    assert proxyside.op_proxy_roll({"run": "web", "by": "b:2"})["taken"]
    proxyside.op_proxy_roll({"run": "web", "by": "b:2", "release": True})
    assert proxyside.op_proxy_status({"run": "web"})["scaled_run_id"] == "r-1"


def test_status_without_haproxy_is_a_message(host, monkeypatch):
    monkeypatch.setattr(proxyside, "PROXY_SOCKET", str(host["root"] / "missing.sock"))
    with pytest.raises(nodeside.Failure, match="runtime socket .* did not answer"):
        proxyside.op_proxy_status({})


def test_the_ops_are_sent_to_the_hosts_and_served():
    source = ssh.host_source().decode("utf-8")
    assert "def op_proxy_publish(" in source and '"proxy_status": op_proxy_status' in source
    namespace = {"__name__": "gpufleet_host"}
    exec(compile(source, "host", "exec"), namespace)  # the helper as a host runs it
    assert "proxy_publish" in namespace["PROXY_OPS"]


def test_new_replicas_start_down_and_serving_ones_stay_up_through_a_reload():
    routes = [route()]
    states = proxyconf.proxy_server_states(routes, {
        ("gf_service_web", "replica-0"): ("2", "10.0.0.2", "32768"),      # up, same place
        ("gf_service_web", "replica-1"): ("2", "10.0.0.9", "32769")})     # up, another place
    lines = states["gf_service_web"].splitlines()
    assert lines[0] == "1" and lines[1].startswith("# be_id be_name srv_id srv_name")
    assert lines[2:] == ["10001 gf_service_web 0 replica-1 10.0.0.3 0 0 1 1 0 1 0 0 6 0 1 0 - "
                         "32769 - 0 0 - - 0"]
    assert len(proxyconf.proxy_server_states(routes, {})["gf_service_web"].splitlines()) == 4


def test_current_states_are_read_from_the_runtime_api(host, monkeypatch):
    answer = ("1\n# be_id be_name srv_id srv_name srv_addr srv_op_state ...\n"
              "3 gf_service_web 1 replica-0 10.0.0.2 2 0 1 1 5 15 3 4 6 0 0 0 - 32768 - 0 0 - - "
              "0\n")
    monkeypatch.setattr(proxyside, "_proxy_ask", lambda command: answer)
    assert proxyside.proxy_current_states() == {
        ("gf_service_web", "replica-0"): ("2", "10.0.0.2", "32768")}


def test_publish_writes_the_server_states_before_the_reload(host):
    proxyside.op_proxy_publish({"route": route(), "listen": LISTEN})
    path = os.path.join(proxyside.PROXY_ROOT, "state", "gf_service_web")
    assert len(open(path).read().splitlines()) == 4
    assert "server-state-file-name %s" % path in (host["conf"] / "services.cfg").read_text()
    proxyside.op_proxy_unpublish({"run": "web"})
    assert not os.path.exists(path)


def test_the_services_load_over_the_gateway_roles_base_configuration(tmp_path):
    # The base file the role gpufleet.cluster.gateway writes (its template with its defaults,
    # rendered as Ansible does, the last new line kept):
    # HAProxy takes it and the services together, with no warning.
    import jinja2
    import yaml

    role = Path(__file__).resolve().parents[4] / "roles" / "gateway"
    values = yaml.safe_load((role / "defaults" / "main.yml").read_text())
    values.update({"_gateway_address": "127.0.0.1", "_gateway_services_file": "services.cfg",
                   "_gateway_defaults_file": "/etc/default/haproxy",
                   "_gateway_socket": str(tmp_path / "admin.sock"),
                   "_gateway_metrics_listen": "127.0.0.1:8405"})
    template = jinja2.Template((role / "templates" / "haproxy.cfg.j2").read_text(),
                               undefined=jinja2.StrictUndefined, keep_trailing_newline=True)
    (tmp_path / "gateway.cfg").write_text(template.render(**values))
    limits = [{"prefix": "/", "key": {"type": "ip_address"}, "rps": 10, "burst": 20}]
    routes = [route(rate_limits=limits, probes=[probe()]), route("chat", model=model())]
    render(routes, tmp_path, base=tmp_path / "gateway.cfg")


@pytest.mark.parametrize("systemd, init, running, expected", [
    (True, True, True, ["systemctl", "reload-or-restart", "haproxy"]),
    (False, True, True, ["{init}", "reload"]),
    (False, True, False, ["{init}", "start"]),
])
def test_reload_goes_the_way_the_host_runs_haproxy(tmp_path, monkeypatch, systemd, init,
                                                   running, expected):
    monkeypatch.setattr(proxyside, "PROXY_SYSTEMD", str(tmp_path / "systemd"))
    monkeypatch.setattr(proxyside, "PROXY_INIT", str(tmp_path / "init"))
    monkeypatch.setattr(proxyside, "_proxy_pid", lambda: 4242 if running else None)
    if systemd:
        (tmp_path / "systemd").mkdir()
    if init:
        (tmp_path / "init").write_text("#!/bin/sh\n")
    ran = []
    monkeypatch.setattr(proxyside, "_proxy_run", lambda argv: ran.append(argv) or (0, ""))
    assert proxyside.proxy_reload() is None
    assert ran == [[part.format(init=tmp_path / "init") for part in expected]]
    monkeypatch.setattr(proxyside, "_proxy_run", lambda argv: (1, "Job failed\n"))
    assert proxyside.proxy_reload() == "Job failed"


def test_reload_without_a_service_manager_signals_the_master(tmp_path, monkeypatch):
    monkeypatch.setattr(proxyside, "PROXY_SYSTEMD", str(tmp_path / "systemd"))
    monkeypatch.setattr(proxyside, "PROXY_INIT", str(tmp_path / "init"))
    signals = []
    monkeypatch.setattr(proxyside.os, "kill", lambda pid, sig: signals.append((pid, sig)))
    monkeypatch.setattr(proxyside, "_proxy_pid", lambda: 4242)
    assert proxyside.proxy_reload() is None
    assert signals == [(4242, signal.SIGUSR2)]
    monkeypatch.setattr(proxyside, "_proxy_pid", lambda: None)
    assert "not running" in proxyside.proxy_reload()


def test_a_token_memberside_publishes_reaches_the_proxy_on_refresh(host):
    # The members document as the fleet's apply makes it, then member_token as the service's
    # apply sends it (tasks.hostside.memberside): the proxy's list follows on refresh.
    (host["root"] / "team" / "members.json").unlink()
    memberside.op_members_sync({"doc": {"fleet": "f", "revoked": {}, "limits": {}, "members": {
        "alice": {"role": "admin", "key": "ssh-ed25519 AAAA", "by": "alice",
                  "stamp": [0.0, "c1"]}}}})
    proxyside.op_proxy_publish({"route": route(), "listen": LISTEN})
    assert (host["conf"] / "tokens-f.lst").read_text() == ""
    digest = hashlib.sha256(b"a new token").hexdigest()
    memberside.op_member_token({"fleet": "f", "user": "alice", "token_sha256": digest,
                                "stamp": [1.0, "c1"]})
    assert proxyside.op_proxy_refresh({})["changed"] is True
    assert (host["conf"] / "tokens-f.lst").read_text() == digest + "\n"


def test_a_token_change_on_the_host_reaches_the_proxy_at_once(host, monkeypatch):
    """On a host the two parts share one namespace; here memberside is given proxyside's hook
    as the host source gives it (checked below)."""
    monkeypatch.setattr(memberside, "proxy_refresh_if_routed", proxyside.proxy_refresh_if_routed,
                        raising=False)
    assert memberside.op_member_token({"fleet": "f", "user": "alice", "token_sha256": "c" * 64,
                                       "stamp": [2, "c"]}) == {"applied": True}
    assert not (host["conf"] / "tokens-f.lst").exists()      # no route here: nothing to write
    proxyside.op_proxy_publish({"route": route(), "listen": LISTEN})
    assert (host["conf"] / "tokens-f.lst").read_text() == "c" * 64 + "\n"
    answer = memberside.op_member_token({"fleet": "f", "user": "alice",
                                         "token_sha256": "e" * 64, "stamp": [3, "c"]})
    assert answer == {"applied": True}
    assert (host["conf"] / "tokens-f.lst").read_text() == "e" * 64 + "\n"
    namespace = {"__name__": "gpufleet_host"}
    exec(compile(ssh.host_source(), "host", "exec"), namespace)
    assert callable(namespace["proxy_refresh_if_routed"])
    assert callable(namespace["_members_told_proxy"])


def test_a_proxy_that_refuses_the_refresh_is_said_and_the_change_stands(host, monkeypatch):
    def broken():
        raise nodeside.Failure("haproxy -c refused it")

    monkeypatch.setattr(memberside, "proxy_refresh_if_routed", broken, raising=False)
    answer = memberside.op_member_token({"fleet": "f", "user": "alice",
                                         "token_sha256": "d" * 64, "stamp": [2, "c"]})
    assert answer == {"applied": True, "proxy": "haproxy -c refused it"}
    doc = json.loads((host["root"] / "team" / "members.json").read_text())
    assert doc["members"]["alice"]["token_sha256"] == "d" * 64


def test_one_controller_at_a_time_holds_a_services_update(host, monkeypatch):
    import time

    ask = proxyside.op_proxy_roll
    assert ask({"run": "web", "by": "a:1", "seconds": 60})["taken"]
    assert ask({"run": "web", "by": "a:1", "seconds": 60})["taken"]   # renewed
    held = ask({"run": "web", "by": "b:2", "seconds": 60})
    assert held["taken"] is False and held["by"] == "a:1"
    assert ask({"run": "api", "by": "b:2"})["taken"]   # another service: its own lease
    assert ask({"run": "web", "by": "b:2", "release": True}) == {"released": False}
    assert ask({"run": "web", "by": "a:1", "release": True}) == {"released": True}
    assert ask({"run": "web", "by": "b:2", "seconds": 60})["taken"]
    # A lease that lapsed (its controller died) is taken over.
    later = time.time() + 61
    monkeypatch.setattr(time, "time", lambda: later)
    assert ask({"run": "web", "by": "c:3", "seconds": 60})["taken"]
    path = os.path.join(proxyside.PROXY_ROOT, "rolls", "web.json")
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    with pytest.raises(proxyside.Failure):
        ask({"run": "../x", "by": "a:1"})


def test_drain_takes_replicas_out_at_once_and_waits_for_what_is_in_flight(host, monkeypatch):
    asked = []
    in_flight = [2, 1, 0]
    stuck = [0]

    def ask(command):
        asked.append(command)
        if command.startswith("set server"):
            return "\n" if "replica-9" not in command else "No such server.\n"
        left = in_flight.pop(0) if in_flight else stuck[0]
        return ("# pxname,svname,scur,status,\n"
                "gf_service_web,replica-0,%d,DRAIN,\n"
                "gf_service_web,replica-1,5,UP,\n"
                "gf_service_web,BACKEND,%d,UP,\n" % (left, left + 5))

    monkeypatch.setattr(proxyside, "_proxy_ask", ask)
    monkeypatch.setattr("time.sleep", lambda seconds: None)
    assert proxyside.op_proxy_drain({"run": "web", "replicas": [0, 9]}) == {
        "drained": True, "left": 0}
    assert asked[:2] == ["set server gf_service_web/replica-0 state drain",
                         "set server gf_service_web/replica-9 state drain"]
    assert asked.count("show stat") == 3   # until replica-0 had nothing in flight
    # A request that never ends: the wait has its limit, and says what is left.
    stuck[0] = 1
    answer = proxyside.op_proxy_drain({"run": "web", "replicas": [0], "seconds": 0.01})
    assert answer == {"drained": False, "left": 1}
    asked[:] = []
    assert proxyside.op_proxy_drain({"run": "web", "replicas": [0], "ready": True}) == {
        "ready": True}
    assert asked == ["set server gf_service_web/replica-0 state ready"]
    # Back with a new container on the same port: down until its checks pass again.
    asked[:] = []
    proxyside.op_proxy_drain({"run": "web", "replicas": [0], "ready": True, "fresh": True})
    assert asked == ["set server gf_service_web/replica-0 state ready",
                     "set server gf_service_web/replica-0 health down"]
    with pytest.raises(nodeside.Failure, match="replicas must be a list"):
        proxyside.op_proxy_drain({"run": "web", "replicas": "0"})
    monkeypatch.setattr(proxyside, "_proxy_ask", lambda command: "Unknown command.\n" if (
        command.startswith("set")) else "")
    with pytest.raises(nodeside.Failure, match="did not set gf_service_web/replica-0 to drain"):
        proxyside.op_proxy_drain({"run": "web", "replicas": [0]})
