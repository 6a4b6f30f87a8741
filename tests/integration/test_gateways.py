"""A gateway (issue 35) end to end: a local gateway with a Let's Encrypt certificate, obtained
for real from Pebble (Let's Encrypt's ACME test server, on this machine), which validates the
HTTP-01 challenge through the gateway's HAProxy to certbot on the gateway, its names resolved
by Pebble's mock DNS to the gateway. A service on the task world's fleet names the gateway:
``apply`` prints ``https://NAME.DOMAIN/``; HTTPS with the certificate Pebble issued for that
name (checked against Pebble's root, by name); 401 without a token, 200 with ``gpufleet
token``'s; HTTP redirected to HTTPS; any other name 404 with the gateway's own certificate
(checked against the CA it copied to the state dir); ``gpufleet gateway`` lists it, ``gpufleet
fleet`` does not; ``stop`` takes the service off (404); ``gpufleet gateway delete`` removes it.

The gateway says ``default: false``: the services of other test files on this fleet keep the
in-fleet proxy.
"""

from __future__ import annotations

import http.client
import json
import shutil
import socket
import ssl
import subprocess
import time
import urllib.request

import pytest

from gpufleet import cli
from gpufleet.runner import run_playbook

from .task_world import CPU, SUFFIX, task_file

GATEWAY = "gw-" + SUFFIX
DOMAIN = "gw%s.test" % SUFFIX
NAME = "gsvc-" + SUFFIX


def host_address():
    """This machine's address that the nodes reach it on (the default route's source: a
    node's own dockerd has a 172.17.0.1 of its own)."""
    out = subprocess.run(["ip", "-4", "route", "get", "1.1.1.1"], capture_output=True,
                         text=True, check=True).stdout.split()
    return out[out.index("src") + 1]


def free_port():
    with socket.socket() as sock:
        sock.bind(("0.0.0.0", 0))
        return sock.getsockname()[1]


@pytest.fixture(scope="module")
def pebble(tmp_path_factory):
    """Pebble and its mock DNS on this machine: ``{"directory", "ca", "root", "dns"}``."""
    folder = tmp_path_factory.mktemp("pebble")
    for tool in ("pebble", "pebble-challtestsrv", "openssl"):
        assert shutil.which(tool), "%s is not installed (scripts/ensure-test-tools.sh)" % tool
    address = host_address()

    def openssl(*args):
        subprocess.run(["openssl"] + list(args), check=True, capture_output=True, cwd=folder)

    openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj",
            "/CN=pebble listener CA", "-keyout", "ca.key", "-out", "ca.crt")
    openssl("req", "-newkey", "rsa:2048", "-nodes", "-subj", "/CN=" + address,
            "-keyout", "pebble.key", "-out", "pebble.csr")
    (folder / "ext").write_text("subjectAltName=IP:%s,IP:127.0.0.1\n" % address)
    openssl("x509", "-req", "-in", "pebble.csr", "-CA", "ca.crt", "-CAkey", "ca.key",
            "-CAcreateserial", "-days", "2", "-extfile", "ext", "-out", "pebble.crt")
    acme, management, dns, dns_management = free_port(), free_port(), free_port(), free_port()
    (folder / "pebble.json").write_text(json.dumps({"pebble": {
        "listenAddress": "0.0.0.0:%d" % acme,
        "managementListenAddress": "127.0.0.1:%d" % management,
        "certificate": str(folder / "pebble.crt"), "privateKey": str(folder / "pebble.key"),
        "httpPort": 80, "tlsPort": 443, "ocspResponderURL": "",
        "externalAccountBindingRequired": False}}))
    logs = [open(folder / name, "w") for name in ("dns.log", "pebble.log")]
    processes = [
        subprocess.Popen(["pebble-challtestsrv", "-defaultIPv4", "127.0.0.1", "-defaultIPv6",
                          "", "-dns01", "127.0.0.1:%d" % dns, "-http01", "", "-https01", "",
                          "-tlsalpn01", "", "-management", "127.0.0.1:%d" % dns_management],
                         stdout=logs[0], stderr=subprocess.STDOUT),
        subprocess.Popen(["pebble", "-config", str(folder / "pebble.json"),
                          "-dnsserver", "127.0.0.1:%d" % dns],
                         stdout=logs[1], stderr=subprocess.STDOUT,
                         env={"PEBBLE_VA_NOSLEEP": "1", "PATH": "/usr/bin:/bin"})]
    unverified = ssl._create_unverified_context()
    deadline = time.time() + 20
    while True:
        try:
            root = urllib.request.urlopen("https://127.0.0.1:%d/roots/0" % management,
                                          context=unverified, timeout=5).read()
            break
        except OSError:
            assert time.time() < deadline, (folder / "pebble.log").read_text()
            time.sleep(0.3)
    (folder / "root.pem").write_bytes(root)

    def resolve_to(ip):
        request = urllib.request.Request("http://127.0.0.1:%d/set-default-ipv4" % dns_management,
                                         data=json.dumps({"ip": ip}).encode(), method="POST")
        urllib.request.urlopen(request, timeout=5).read()

    yield {"directory": "https://%s:%d/dir" % (address, acme), "ca": str(folder / "ca.crt"),
           "root": str(folder / "root.pem"), "resolve_to": resolve_to, "folder": folder}
    for process in processes:
        process.terminate()
        process.wait(10)
    for log in logs:
        log.close()


def ask(address, port, host, path="/", cafile=None, token=None):
    """``(status, Location, body)`` of GET ``path`` at ``address``, for ``host`` (SNI and Host);
    HTTPS checked against ``cafile`` and the name when it is given."""
    headers = {"Host": host}
    if token:
        headers["Authorization"] = "Bearer " + token
    if cafile:
        context = ssl.create_default_context(cafile=cafile)
        connection = http.client.HTTPSConnection(host, port, context=context, timeout=20)
        connection.sock = context.wrap_socket(socket.create_connection((address, port), 20),
                                              server_hostname=host)
    else:
        connection = http.client.HTTPConnection(address, port, timeout=20)
    connection.request("GET", path, headers=headers)
    answer = connection.getresponse()
    body = answer.read()
    connection.close()
    return answer.status, answer.getheader("Location"), body


def one_line(text, *about):
    """``text`` (what a command printed) on one line, for an assertion's message: pytest's
    short summary shows a message's first line only. The lines that say any of ``about``
    first, then the last 30."""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    first = [line for line in lines if any(word in line for word in about)]
    return " | ".join(first + (["..."] if first else []) + lines[-30:])


def said(out, *about):
    """one_line of a CaptureResult: its stderr, then its stdout."""
    return one_line(out.err + "\n" + out.out, *about)


def listed(capsys, *command):
    capsys.readouterr()
    assert cli.main(list(command) + ["--json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_a_service_on_a_gateway_with_a_lets_encrypt_certificate(world, capsys, monkeypatch,
                                                                pebble):
    monkeypatch.setenv("ANSIBLE_VAULT_PASSWORD_FILE", str(world["vault_password"]))
    gateway_file = task_file(world, GATEWAY, "type: gateway\nname: %s\nbackend: local\n"
                             "domain: %s\ndefault: false\ncertificate:\n  type: lets-encrypt\n"
                             % (GATEWAY, DOMAIN))
    # certbot gets 180 s a name (40 by default): Pebble is on this machine, only a loaded one
    # makes it slow.
    result = run_playbook("gateway.yml", {"gateway": gateway_file, "gpufleet_gateway_acme": {
        "server": pebble["directory"], "ca_bundle": pebble["ca"], "timeout": 180}})
    assert result.ok, one_line(result.stdout, "fatal:", "[ERROR]")
    gateway = result.stats["gpufleet_gateway"]
    address = gateway["hostname"]
    assert (gateway["name"], gateway["status"], gateway["domain"], gateway["certificate"],
            gateway["default"]) == (GATEWAY, "running", DOMAIN, "lets-encrypt", False)
    try:
        assert [g["name"] for g in listed(capsys, "gateway")] == [GATEWAY]
        assert GATEWAY not in [f["name"] for f in listed(capsys, "fleet")]
        pebble["resolve_to"](address)   # *.DOMAIN points at the gateway

        service = task_file(world, NAME, "type: service\nname: %s\nport: 8000\ngateway: %s\n%s"
                            "commands:\n  - python3 -m http.server 8000\n"
                            % (NAME, GATEWAY, CPU))
        capsys.readouterr()
        applied = cli.main(["apply", "-f", service, "-y", "-d"])
        out = capsys.readouterr()
        assert applied == 0, said(out, "rror", "could not")
        lines = out.out.splitlines()
        host = "%s.%s" % (NAME, DOMAIN)
        assert "Service is published at:" in lines, said(out, "publish")
        assert lines[lines.index("Service is published at:") + 1].strip() == \
            "https://%s/" % host, said(out, "https://")
        # Pebble issued it: apply says nothing of a certificate that could not be had.
        assert "certificate" not in out.err + out.out, said(out, "certificate")
        assert cli.main(["token", "--json"]) == 0
        token = json.loads(capsys.readouterr().out)["token"]

        # HTTPS with the certificate Pebble issued for the service's name.
        deadline = time.time() + 120
        while ask(address, 443, host, cafile=pebble["root"], token=token)[0] != 200:
            assert time.time() < deadline, "the service never answered through the gateway"
            time.sleep(2)
        assert ask(address, 443, host, cafile=pebble["root"])[0] == 401
        assert ask(address, 443, host, cafile=pebble["root"], token="guess")[0] == 403
        status, where, _body = ask(address, 80, host, "/a?b=1")
        assert (status, where) == (301, "https://%s/a?b=1" % host)
        # Another name: the gateway's own certificate, signed by the CA it copied here; 404.
        assert ask(address, 443, "nothing." + DOMAIN, cafile=gateway["ca_file"])[0] == 404
        (record,) = [r for r in listed(capsys, "ps") if r["name"] == NAME]
        assert (record["service"]["gateway"], record["service"]["https"]) == (GATEWAY, True)

        capsys.readouterr()
        assert cli.main(["stop", NAME, "-y"]) == 0
        assert ask(address, 443, host, cafile=pebble["root"], token=token)[0] == 404
    finally:
        capsys.readouterr()
        cli.main(["stop", NAME, "-y"])
        assert cli.main(["gateway", "delete", GATEWAY, "-y"]) == 0
    assert listed(capsys, "gateway") == []
