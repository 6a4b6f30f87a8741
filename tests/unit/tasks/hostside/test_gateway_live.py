# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""A gateway's configuration at work: a real HAProxy on loopback with a domain, an HTTP and an
HTTPS port and a self-signed certificate (made here with openssl), in front of a Python HTTP
server as the replica. A service is its host, ``RUN.DOMAIN``, with its whole path; HTTP is
redirected to HTTPS for a service that asks for HTTPS and not for one that does not; the
models' endpoint is ``gateway.DOMAIN``; another host gets 404; an ACME challenge goes to the
ACME client's port, never redirected.

HAProxy and openssl must be installed where the unit tests run: a missing one fails these
tests, it never skips them.
"""

from __future__ import annotations

import http.client
import json
import shutil
import socket
import ssl
import subprocess
import time

import pytest
from ansible_collections.gpufleet.cluster.plugins.module_utils.tasks.hostside import proxyconf

from .fakes import BASE, free_port, haproxy, model, replica, route


DOMAIN = "gw.example.com"


def certificate(folder):
    """A CA and a wildcard certificate of DOMAIN signed by it: (CA file, HAProxy's PEM)."""
    openssl = shutil.which("openssl")
    assert openssl, "openssl is not installed"

    def run(*args):
        subprocess.run([openssl] + list(args), check=True, capture_output=True, cwd=folder)

    run("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj", "/CN=test CA",
        "-keyout", "ca.key", "-out", "ca.crt")
    run("req", "-newkey", "rsa:2048", "-nodes", "-subj", "/CN=*." + DOMAIN,
        "-keyout", "gw.key", "-out", "gw.csr")
    (folder / "ext").write_text("subjectAltName=DNS:*.%s,DNS:%s\n" % (DOMAIN, DOMAIN))
    run("x509", "-req", "-in", "gw.csr", "-CA", "ca.crt", "-CAkey", "ca.key", "-CAcreateserial",
        "-days", "2", "-extfile", "ext", "-out", "gw.crt")
    certs = folder / "certs"
    certs.mkdir()
    (certs / "00-gateway.pem").write_text((folder / "gw.crt").read_text()
                                          + (folder / "gw.key").read_text())
    return str(folder / "ca.crt"), str(certs)


def ask(port, host, path, context=None, token=None):
    """``(status, Location header, decoded JSON or text)`` of GET ``path`` with Host ``host``."""
    if context is None:
        connection = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
    else:
        connection = http.client.HTTPSConnection("127.0.0.1", port, timeout=5, context=context)
    headers = {"Host": host}
    if token:
        headers["Authorization"] = "Bearer " + token
    connection.request("GET", path, headers=headers)
    answer = connection.getresponse()
    body = answer.read()
    connection.close()
    try:
        data = json.loads(body)
    except ValueError:
        data = body.decode()
    return answer.status, answer.getheader("Location"), data


@pytest.fixture
def gateway(tmp_path, monkeypatch):
    ca, certs = certificate(tmp_path)
    monkeypatch.setattr(proxyconf, "PROXY_CERTS", certs)
    server = replica("a")
    acme = replica("acme")
    monkeypatch.setattr(proxyconf, "PROXY_ACME", "127.0.0.1:%d" % acme.server_address[1])
    replicas = [{"replica_num": 0, "job_num": 0, "host": "a", "address": "127.0.0.1",
                 "port": server.server_address[1]}]
    routes = [route("web", replicas=replicas, auth=False, strip_prefix=False),
              route("plain", replicas=replicas, auth=False, https=False),
              route("chat", replicas=replicas, auth=False, model=model("org/llama"))]
    http_port, https_port = free_port(), free_port()
    listen = {"address": "127.0.0.1", "port": http_port, "https_port": https_port,
              "domain": DOMAIN, "certificate": "self-signed", "gateway": "gw"}
    conf = tmp_path / "gpufleet.d"
    conf.mkdir()
    files = proxyconf.proxy_render(routes, listen, {}, conf=lambda name: str(conf / name),
                                   state=lambda name: str(tmp_path / name))
    for name, text in files.items():
        (conf / name).write_text(text)
    base = tmp_path / "haproxy.cfg"
    base.write_text(BASE.format(root=tmp_path))
    process = subprocess.Popen([haproxy(), "-db", "-f", str(base), "-f", str(conf)],
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    deadline = time.time() + 5
    while True:
        try:
            socket.create_connection(("127.0.0.1", https_port), timeout=1).close()
            break
        except OSError:
            assert process.poll() is None, process.stdout.read().decode()
            assert time.time() < deadline, "HAProxy did not listen in 5 s"
            time.sleep(0.05)
    context = ssl.create_default_context(cafile=ca)
    context.check_hostname = False   # asked by address: the certificate's chain is checked
    # The replica's first check passes at once; wait until a request gets through.
    while ask(https_port, "web." + DOMAIN, "/", context)[0] != 200:
        assert time.time() < deadline, "the replica never came up"
        time.sleep(0.05)
    yield {"http": http_port, "https": https_port, "context": context}
    process.terminate()
    process.wait(5)
    for item in (server, acme):
        item.shutdown()
        item.server_close()


def test_a_gateway_serves_each_service_at_its_own_host(gateway):
    http_port, https_port, context = gateway["http"], gateway["https"], gateway["context"]
    # HTTPS, the whole path and query, whatever strip_prefix says (the host is the service's).
    status, _where, body = ask(https_port, "web." + DOMAIN + ":443", "/a/b?x=1", context)
    assert (status, body["replica"], body["path"]) == (200, "a", "/a/b?x=1")
    # Over HTTP, a service with HTTPS is sent there, path and all (dstack's 301), to the
    # gateway's HTTPS port (left out of the URL when it is 443, as the rendering shows).
    status, where, _body = ask(http_port, "web." + DOMAIN, "/a?x=1")
    assert (status, where) == (301, "https://web.%s:%d/a?x=1" % (DOMAIN, https_port))
    rendered = proxyconf.proxy_render([route("web", auth=False)],
                                      {"address": "0.0.0.0", "port": 80, "https_port": 443,
                                       "domain": DOMAIN}, {}, str, str)["services.cfg"]
    assert "http-request redirect scheme https code 301 if !{ ssl_fc } !gf_acme " \
        "{ var(txn.gf_host) -m str web.%s }" % DOMAIN in rendered
    # A service with https: false is served over HTTP as well.
    status, _where, body = ask(http_port, "plain." + DOMAIN, "/p")
    assert (status, body["path"]) == (200, "/p")
    # Models: gateway.DOMAIN, OpenAI's paths with or without /v1.
    status, _where, body = ask(https_port, "gateway." + DOMAIN, "/v1/models", context)
    assert status == 200 and [m["id"] for m in body["data"]] == ["org/llama"]
    # A host that is no service's, and the in-fleet paths on a host that is not theirs: 404.
    assert ask(https_port, "nothing." + DOMAIN, "/", context)[0] == 404
    assert ask(https_port, "127.0.0.1", "/proxy/services/main/web/", context)[0] == 404
    # An ACME challenge goes to the ACME client, over HTTP, on any of its hosts.
    status, _where, body = ask(http_port, "web." + DOMAIN, "/.well-known/acme-challenge/t")
    assert (status, body["replica"]) == (200, "acme")
