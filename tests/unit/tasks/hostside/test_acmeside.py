# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""A lets-encrypt gateway's certificates on its host (acmeside, through proxyside): which
names need one, certbot's command line, the certificate handed to HAProxy, and what a failure
says. certbot itself is a stand-in here; tests/integration/test_gateways.py obtains one for real
from Pebble."""

from __future__ import annotations

import pytest
from ansible_collections.gpufleet.cluster.plugins.module_utils.tasks.hostside import (
    acmeside,
    proxyside,
)

from .fakes import model, route

LISTEN = {"address": "0.0.0.0", "port": 80, "https_port": 443, "gateway": "gw",
          "domain": "example.com", "certificate": "lets-encrypt",
          "acme": {"server": "https://acme.test/dir", "email": "ops@example.com",
                   "ca_bundle": "/etc/haproxy/gpufleet-acme-ca.pem"}}


@pytest.fixture
def acme(tmp_path, monkeypatch):
    certs, config = tmp_path / "certs", tmp_path / "letsencrypt"
    certs.mkdir()
    monkeypatch.setattr(acmeside, "PROXY_CERTS", str(certs))
    monkeypatch.setattr(acmeside, "ACME_CONFIG", str(config))
    monkeypatch.setattr(proxyside, "PROXY_ROOT", str(tmp_path / "proxy"))
    reloads = []
    monkeypatch.setattr(proxyside, "proxy_reload", lambda: reloads.append(1))
    calls = []

    def certbot(argv, env):
        """Writes the certificate as certbot would (a name with "bad" in it fails)."""
        calls.append((argv, env))
        name = argv[argv.index("-d") + 1]
        if "bad" in name:
            return 1, "Challenge failed for domain %s" % name
        live = config / "live" / name
        live.mkdir(parents=True)
        (live / "fullchain.pem").write_text("CHAIN of %s\n" % name)
        (live / "privkey.pem").write_text("KEY of %s\n" % name)
        return 0, ""

    def obtain(listen, name):
        return acmeside.acme_obtain(listen, name, run=certbot)

    # openssl's answer for a certificate held: far from its end.
    monkeypatch.setattr(acmeside, "_acme_run", lambda argv, env: (0, ""))

    return {"certs": certs, "calls": calls, "reloads": reloads, "obtain": obtain}


def test_the_names_a_route_needs_on_a_lets_encrypt_gateway_only():
    assert acmeside.acme_names(LISTEN, route("web")) == ["web.example.com"]
    assert acmeside.acme_names(LISTEN, route("web", https=False)) == []
    assert acmeside.acme_names(LISTEN, route("chat", model=model())) == [
        "chat.example.com", "gateway.example.com"]
    for other in (dict(LISTEN, certificate="self-signed"), dict(LISTEN, domain=None),
                  dict(LISTEN, https_port=None), {"address": "10.0.0.2", "port": 3000}):
        assert acmeside.acme_names(other, route("web")) == []


def test_certbot_answers_the_challenge_on_its_own_listener_with_the_roles_settings():
    argv = acmeside.acme_command(LISTEN, "web.example.com")
    assert argv[:4] == ["timeout", "--kill-after", "5", "40"]
    assert argv[4:6] == ["certbot", "certonly"]
    for pair in (["--http-01-address", "127.0.0.1"], ["--http-01-port", "8402"],
                 ["--server", "https://acme.test/dir"], ["--email", "ops@example.com"],
                 ["--cert-name", "web.example.com"], ["-d", "web.example.com"]):
        at = argv.index(pair[0])
        assert argv[at:at + 2] == pair
    assert "--standalone" in argv and "--non-interactive" in argv
    plain = acmeside.acme_command(dict(LISTEN, acme={}), "web.example.com")
    assert "--register-unsafely-without-email" in plain and "--server" not in plain


def with_timeout(timeout):
    return dict(LISTEN, acme=dict(LISTEN["acme"], timeout=timeout))


def test_certbot_has_the_gateways_time_limit_and_40_s_without_one():
    name = "web.example.com"
    assert acmeside.acme_command(with_timeout(180), name)[:5] == [
        "timeout", "--kill-after", "5", "180", "certbot"]
    for bound in (10, 3600):
        assert acmeside.acme_command(with_timeout(bound), name)[3] == str(bound)
    # A listen file the role wrote before the setting (or without ACME settings): dstack's 40.
    for listen in (LISTEN, with_timeout(None), dict(LISTEN, acme={}), dict(LISTEN, acme=None)):
        assert acmeside.acme_command(listen, name)[:5] == [
            "timeout", "--kill-after", "5", "40", "certbot"]
    said = acmeside.acme_obtain(with_timeout(180), name, run=lambda a, e: (124, ""))
    assert "timed out after 180 s" in said
    said = acmeside.acme_obtain(LISTEN, name, run=lambda a, e: (137, ""))
    assert "timed out after 40 s" in said


@pytest.mark.parametrize("bad", [9, 3601, 0, -40, "180", 40.5, True, [40]])
def test_a_time_limit_that_is_not_whole_seconds_in_range_is_said_and_certbot_not_run(bad):
    with pytest.raises(ValueError) as raised:
        acmeside.acme_command(with_timeout(bad), "web.example.com")
    assert str(raised.value) == (
        "certbot's time limit (gateway_acme_timeout, gpufleet_gateway_acme's timeout) is %r "
        "here: it must be whole seconds from 10 to 3600; apply the gateway again with one"
        % (bad,))
    ran = []
    said = acmeside.acme_obtain(with_timeout(bad), "web.example.com",
                                run=lambda a, e: ran.append(a) or (0, ""))
    assert said == "could not obtain a TLS certificate of web.example.com: " + str(raised.value)
    assert ran == []


def test_a_certificate_is_obtained_once_handed_to_haproxy_and_haproxy_reloaded(acme):
    assert proxyside.proxy_certificates(LISTEN, route("web"), acme["obtain"]) == []
    pem = acme["certs"] / "web.example.com.pem"
    assert pem.read_text() == "CHAIN of web.example.com\nKEY of web.example.com\n"
    assert oct(pem.stat().st_mode & 0o777) == "0o600"
    assert acme["reloads"] == [1]
    argv, env = acme["calls"][0]
    assert env["REQUESTS_CA_BUNDLE"] == "/etc/haproxy/gpufleet-acme-ca.pem"
    # Published again: it has its certificate; nothing asked, nothing reloaded.
    assert proxyside.proxy_certificates(LISTEN, route("web"), acme["obtain"]) == []
    assert len(acme["calls"]) == 1 and acme["reloads"] == [1]


def test_a_certificate_that_cannot_be_had_is_said_and_the_rest_go_on(acme):
    problems = proxyside.proxy_certificates(LISTEN, route("bad", model=model()), acme["obtain"])
    assert problems == [
        "could not obtain a TLS certificate of bad.example.com: Challenge failed for domain "
        "bad.example.com. Make sure the DNS records of *.example.com point at this gateway and "
        "that it is reachable on port 80"]
    # The models' name was obtained, and HAProxy reloaded for it.
    assert (acme["certs"] / "gateway.example.com.pem").exists()
    assert not (acme["certs"] / "bad.example.com.pem").exists()
    assert acme["reloads"] == [1]
    timed_out = acmeside.acme_obtain(LISTEN, "web.example.com", run=lambda a, e: (124, ""))
    assert "timed out after 40 s" in timed_out


def test_a_certificate_near_its_end_is_obtained_again(acme):
    assert proxyside.proxy_certificates(LISTEN, route("web"), acme["obtain"]) == []
    checks = []

    def openssl(argv, env):
        checks.append(argv[:4])
        return (1 if "near" in checks[0] else 0), ""

    assert acmeside.acme_missing(LISTEN, route("web"), run=openssl) == []
    assert checks == [["openssl", "x509", "-checkend", str(30 * 86400)]]
    checks[0].append("near")
    assert acmeside.acme_missing(LISTEN, route("web"), run=openssl) == ["web.example.com"]
    # No openssl on the host: the certificate is kept.
    assert acmeside.acme_missing(LISTEN, route("web"), run=lambda a, e: (127, "")) == []
