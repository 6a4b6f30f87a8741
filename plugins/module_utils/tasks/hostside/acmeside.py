# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""A lets-encrypt gateway's certificates, on the gateway's host: one per service host name.

This file travels to the hosts after tasks.hostside.proxyconf and before
tasks.hostside.proxyside, which calls it when it publishes a service on a gateway whose
certificate is ``lets-encrypt`` (tasks.ssh.host_source); it runs in their namespace, with the
standard library only.

A name's certificate comes from the ACME server the role gpufleet.cluster.gateway recorded
(``acme`` in its listen file: ``server``, ``email``, ``ca_bundle``, ``timeout``), through
certbot (which the role installed; given ``timeout`` seconds a name, ACME_TIMEOUT without one)
answering the HTTP-01 challenge on its own listener, ``PROXY_ACME``, where HAProxy sends
``/.well-known/acme-challenge/`` of every host (proxyconf). It is written, chain and key, to
``PROXY_CERTS/<name>.pem``, where HAProxy finds it by the name a client asks for.
certbot's own timer renews it and the role's deploy hook hands the renewed one to HAProxy.
"""

import os
import subprocess

try:  # imported as part of the collection (tests, the controller)
    from .proxyconf import PROXY_ACME, PROXY_CERTS
except ImportError:  # on a host: proxyconf's source runs first in this namespace
    pass

# How long one certificate may take by default (dstack's gateway gives certbot as long), then
# its kill; the role's gateway_acme_timeout (the listen file's acme.timeout) sets it per
# gateway, whole seconds within ACME_TIMEOUT_RANGE.
ACME_TIMEOUT = 40
ACME_TIMEOUT_RANGE = (10, 3600)
ACME_KILL_AFTER = 5
ACME_CONFIG = "/etc/letsencrypt"
ACME_CERTBOT = "certbot"
# A certificate this close to its end is obtained again at a publish (certbot's own threshold:
# hosts with no timer to run ``certbot renew``, the local backend's nodes, renew this way).
ACME_RENEW_BEFORE = 30 * 86400


def acme_names(listen, route):
    # type: (dict, dict) -> list
    """The host names of ``route`` on a lets-encrypt gateway whose listen file is ``listen``
    that need a certificate: the service's own when it is served over HTTPS, and the models'
    (``gateway.DOMAIN``) when it publishes a model; none on any other proxy."""
    domain = listen.get("domain")
    if listen.get("certificate") != "lets-encrypt" or not domain or not listen.get("https_port"):
        return []
    names = []
    if route.get("https", True):
        names.append("%s.%s" % (route["run"], domain))
    if route.get("model"):
        names.append("gateway." + domain)
    return names


def acme_pem(name):
    # type: (str) -> str
    """Where HAProxy finds the certificate of ``name``."""
    return os.path.join(PROXY_CERTS, name + ".pem")


def acme_timeout(listen):
    # type: (dict) -> int
    """How many seconds certbot may take for one name: the listen file's ``acme.timeout``,
    ACME_TIMEOUT when it has none (a file the role wrote before it had the setting); ValueError
    naming the setting when it is not whole seconds within ACME_TIMEOUT_RANGE."""
    value = (listen.get("acme") or {}).get("timeout")
    if value is None:
        return ACME_TIMEOUT
    low, high = ACME_TIMEOUT_RANGE
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise ValueError("certbot's time limit (gateway_acme_timeout, gpufleet_gateway_acme's "
                         "timeout) is %r here: it must be whole seconds from %d to %d; apply the "
                         "gateway again with one" % (value, low, high))
    return value


def acme_command(listen, name):
    # type: (dict, str) -> list
    """certbot's command line for ``name``'s certificate (standalone, on PROXY_ACME), limited
    to acme_timeout seconds (ValueError when the listen file's limit is not one)."""
    acme = listen.get("acme") or {}
    address, port = PROXY_ACME.rsplit(":", 1)
    argv = ["timeout", "--kill-after", str(ACME_KILL_AFTER), str(acme_timeout(listen)),
            ACME_CERTBOT, "certonly", "--standalone", "--non-interactive", "--agree-tos",
            "--quiet", "--http-01-address", address, "--http-01-port", port,
            "--config-dir", ACME_CONFIG, "--cert-name", name, "-d", name]
    if acme.get("server"):
        argv += ["--server", acme["server"]]
    argv += ["--email", acme["email"]] if acme.get("email") else [
        "--register-unsafely-without-email"]
    return argv


def acme_obtain(listen, name, run=None):
    # type: (...) -> str | None
    """Obtain ``name``'s certificate and give it to HAProxy (not reloaded here): None, or why
    it could not be had. ``run(argv, env)``: ``(exit status, output)`` (tests pass their own)."""
    env = dict(os.environ)
    bundle = (listen.get("acme") or {}).get("ca_bundle")
    if bundle:
        env["REQUESTS_CA_BUNDLE"] = bundle
    try:
        argv = acme_command(listen, name)
    except ValueError as exc:
        return "could not obtain a TLS certificate of %s: %s" % (name, exc)
    code, out = (run or _acme_run)(argv, env)
    live = os.path.join(ACME_CONFIG, "live", name)
    if code != 0:
        why = "timed out after %d s" % acme_timeout(listen) if code in (124, 137) else (
            out.strip()[-500:] or "certbot exited with %d" % code)
        return ("could not obtain a TLS certificate of %s: %s. Make sure the DNS records of "
                "*.%s point at this gateway and that it is reachable on port 80"
                % (name, why, listen.get("domain")))
    try:
        with open(os.path.join(live, "fullchain.pem"), "rb") as chain, \
                open(os.path.join(live, "privkey.pem"), "rb") as key:
            data = chain.read() + key.read()
    except (IOError, OSError) as exc:
        return "certbot obtained no certificate of %s: %s" % (name, exc)
    temp = acme_pem(name) + ".gpufleet-tmp"
    with open(temp, "wb") as handle:
        handle.write(data)
    os.chmod(temp, 0o600)
    os.rename(temp, acme_pem(name))
    return None


def acme_missing(listen, route, run=None):
    # type: (...) -> list
    """The names of ``route`` whose certificate HAProxy does not have yet, or has one that
    ends within ACME_RENEW_BEFORE (``openssl x509 -checkend``; without openssl, kept)."""
    due = []
    for name in acme_names(listen, route):
        if not os.path.exists(acme_pem(name)):
            due.append(name)
            continue
        code, _out = (run or _acme_run)(["openssl", "x509", "-checkend",
                                         str(ACME_RENEW_BEFORE), "-noout", "-in",
                                         acme_pem(name)], dict(os.environ))
        if code == 1:
            due.append(name)
    return due


def _acme_run(argv, env):
    try:
        proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env)
    except OSError as exc:
        return 127, "%s: %s" % (argv[4] if len(argv) > 4 else argv[0], exc)
    out = proc.communicate()[0]
    return proc.returncode, out.decode("utf-8", "replace")
