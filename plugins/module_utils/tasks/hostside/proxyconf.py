# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The in-fleet proxy's HAProxy configuration, rendered from the service routes: pure functions.

This file travels to the hosts after tasks.hostside.memberside and before
tasks.hostside.proxyside, which writes what it renders and runs HAProxy (tasks.ssh.host_source);
it runs in their namespace, so it uses the standard library only and the Python 3.6+ of any
Ansible-managed host, and every top-level name is unique across the files sent with it.
docs/services-proxy.md says what the configuration does, request by request.
"""

import hashlib
import json
import re

try:  # imported as part of the collection (tests, the controller)
    from .nodeside import Failure
except ImportError:  # on a host: nodeside's source runs first in this namespace
    pass

PROXY_PROJECT = "main"          # services.records.PROJECT
# A model request's body is read whole before it is routed (its "model" field): it must fit in
# one HAProxy buffer, raised from 16 kB to this while a model is published.
PROXY_MODEL_BUFFER = 262144
# A replica that stops answering leaves within 5 s: checked every second while up, out after
# two failures, or at once when a request cannot connect to it.
PROXY_CHECK = "inter 1s fastinter 1s fall 2 observe layer4 error-limit 1 on-error mark-down"
_PROXY_RUN = re.compile(r"^[a-z0-9][a-z0-9-]{0,62}$")
_PROXY_FLEET = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,62}$")
_PROXY_HEADER = re.compile(r"^[A-Za-z0-9_-]{1,100}$")
_PROXY_PREFIX = re.compile(r"^/[A-Za-z0-9._~/-]{0,200}$")   # written bare (a model's prefix)
_PROXY_PATH = re.compile(r"^/[^\s\\{}]{0,2047}$")           # written quoted (spec's pattern)
_PROXY_TOKEN = re.compile(r"^[!#$%&'*+.^_`|~0-9A-Za-z-]{1,256}$")   # an HTTP header's name
_PROXY_ADDRESS = re.compile(r"^[A-Za-z0-9.:-]{1,253}$")
_PROXY_DIGEST = re.compile(r"^[0-9a-f]{64}$")
_PROXY_METHODS = ("get", "post", "put", "delete", "patch", "head", "options")
_PROXY_IDEMPOTENT = "GET HEAD OPTIONS TRACE PUT DELETE"
_PROXY_DOMAIN = re.compile(r"^[a-z0-9]([a-z0-9.-]{0,251}[a-z0-9])?$")
# A gateway's certificates (HAProxy loads every file of the folder; SNI picks one, the first
# file by name when none matches): the role puts the gateway's own there, proxyside a service's
# from ACME (gpufleet.cluster.gateway).
PROXY_CERTS = "/etc/haproxy/gpufleet-certs"
# Where an ACME client answers the HTTP-01 challenges a gateway forwards to it.
PROXY_ACME = "127.0.0.1:8402"


def proxy_word(text, percent=False):
    # type: (object, bool) -> str
    """``text`` as one word of HAProxy's configuration: strongly quoted, so that nothing in it
    (spaces, ``#``, ``$``, quotes) is read as syntax; a control character (a new line among
    them) is refused. ``percent``: the word is a log-format string, where ``%`` is doubled."""
    text = "%s" % (text,)
    if any(ord(char) < 32 or ord(char) == 127 for char in text):
        raise Failure("%r holds a control character, which the proxy's configuration cannot "
                      "carry" % (text[:60],))
    if percent:
        text = text.replace("%", "%%")
    return "'" + text.replace("'", "'\\''") + "'"


def _proxy_need(pattern, value, what):
    if not isinstance(value, str) or not pattern.match(value) or "\n" in value:
        raise Failure("%s %r cannot be published by the proxy (allowed: %s)"
                      % (what, value if not isinstance(value, str) else value[:80],
                         pattern.pattern))
    return value


def _proxy_number(value, what, low=0):
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value < low:
        raise Failure("%s must be a number of at least %s, not %r" % (what, low, value))
    return value


def proxy_service_prefix(run):
    # type: (str) -> str
    """services.records.service_prefix, for the hosts."""
    return "/proxy/services/%s/%s/" % (PROXY_PROJECT, run)


def proxy_model_prefix():
    # type: () -> str
    """services.records.model_prefix, for the hosts."""
    return "/proxy/models/%s/" % PROXY_PROJECT


def proxy_address(address, port):
    # type: (str, int) -> str
    """``address:port`` as HAProxy's bind and server lines take it (IPv6 with its prefix)."""
    _proxy_need(_PROXY_ADDRESS, address, "the address")
    port = int(_proxy_number(port, "a port", 1))
    if port > 65535:
        raise Failure("a port must be at most 65535, not %d" % port)
    return ("ipv6@%s:%d" if ":" in address else "%s:%d") % (address, port)


def proxy_limit_window(limit):
    # type: (dict) -> tuple[int, int]
    """``(count, window_ms)`` of a rate limit: at most ``count`` requests in any ``window``.
    nginx's leaky bucket (dstack's gateway) with ``burst`` B and ``nodelay`` takes B + 1
    requests at once and then ``rps`` a second; a window of (B + 1) / rps seconds holding B + 1
    requests takes the same burst and the same rate over time."""
    rps = float(_proxy_number(limit.get("rps"), "a rate limit's rps"))
    if rps <= 0:
        raise Failure("a rate limit's rps must be above 0, not %r" % (limit.get("rps"),))
    count = int(_proxy_number(limit.get("burst") or 0, "a rate limit's burst")) + 1
    return count, max(1, int(round(count * 1000.0 / rps)))


def proxy_routes_check(routes):
    # type: (list) -> None
    """Failure unless every route can be written into the configuration safely, and no two
    services publish the same model."""
    models = {}  # type: dict
    for route in routes:
        if not isinstance(route, dict):
            raise Failure("a route must be a mapping")
        run = _proxy_need(_PROXY_RUN, route.get("run"), "the run name")
        _proxy_need(_PROXY_FLEET, route.get("fleet"), "the fleet name")
        for replica in route.get("replicas") or []:
            proxy_address(replica.get("address"), replica.get("port"))
            _proxy_number(replica.get("replica_num"), "a replica's number")
        for limit in route.get("rate_limits") or []:
            _proxy_need(_PROXY_PATH, limit.get("prefix") or "/", "a rate limit's prefix")
            proxy_word(limit.get("prefix") or "/")
            key = limit.get("key") or {}
            if key.get("type") == "header":
                _proxy_need(_PROXY_HEADER, key.get("header"), "a rate limit's header")
            elif key.get("type") not in (None, "ip_address"):
                raise Failure("a rate limit's key must be ip_address or header, not %r"
                              % (key.get("type"),))
            proxy_limit_window(limit)
        for probe in route.get("probes") or []:
            if (probe.get("method") or "get").lower() not in _PROXY_METHODS:
                raise Failure("a probe's method must be one of %s, not %r"
                              % (", ".join(_PROXY_METHODS), probe.get("method")))
            _proxy_need(_PROXY_PATH, probe.get("url") or "/", "a probe's url")
            proxy_word(probe.get("url") or "/")
            for header in probe.get("headers") or []:
                _proxy_need(_PROXY_TOKEN, header.get("name"), "a probe's header name")
                proxy_word(header.get("value") or "")
            if probe.get("body") is not None:
                proxy_word(probe["body"])
        model = route.get("model")
        if model:
            if (model.get("format") or "openai") != "openai":
                raise Failure("service %s: the in-fleet proxy serves models of format openai "
                              "only, not %r" % (run, model.get("format")))
            name = model.get("name")
            if not isinstance(name, str) or not name:
                raise Failure("service %s: its model has no name" % run)
            _proxy_need(_PROXY_PREFIX, model.get("prefix") or "/", "a model's prefix")
            if name in models and models[name] != run:
                raise Failure("model %s is published by service %s already: stop it first or "
                              "name this service's model differently" % (name, models[name]))
            models[name] = run
        proxy_rate_window(route)


def proxy_rate_window(route):
    # type: (dict) -> int
    """The seconds a route's requests are counted over (a stick table per window)."""
    window = route.get("rate_window") or 60
    if isinstance(window, bool) or not isinstance(window, int) or not 1 <= window <= 3600:
        raise Failure("a route's rate window must be a whole number of seconds from 1 to 3600, "
                      "not %r" % (window,))
    return window


def proxy_models_document(routes):
    # type: (list) -> str
    """The answer of ``/v1/models``: OpenAI's shape, as dstack's proxy answers it."""
    data = [{"id": route["model"]["name"], "object": "model",
             "created": int(route.get("submitted_at") or 0), "owned_by": PROXY_PROJECT}
            for route in routes if route.get("model")]
    return json.dumps({"object": "list", "data": data}, sort_keys=True) + "\n"


def _proxy_json(status, detail):
    return ("status %d content-type application/json string %s"
            % (status, proxy_word(json.dumps({"detail": detail}))))


def proxy_listen_domain(listen):
    # type: (dict) -> str | None
    """A gateway's domain (its services at ``RUN.DOMAIN``), None for the in-fleet proxy."""
    domain = listen.get("domain")
    return None if not domain else _proxy_need(_PROXY_DOMAIN, domain, "the gateway's domain")


def proxy_token_fleet(route, listen):
    # type: (dict, dict) -> str
    """Whose members' tokens open a route: its fleet's on the in-fleet proxy, the gateway's
    own members' on a gateway (the services of several fleets share it)."""
    return listen.get("gateway") or route["fleet"]


def _proxy_gateway(routes, listen):
    """A gateway's requests by host: ``RUN.DOMAIN`` is the service, its whole path under the
    service's prefix; ``gateway.DOMAIN`` the models' endpoint (dstack's gateway); any other host
    gets 404. The path rules that follow then serve them as the in-fleet proxy's paths.
    HTTPS (``https_port``, a certificate): a service that asks for it is redirected there."""
    domain = proxy_listen_domain(listen)
    https = bool(listen.get("https_port"))
    lines = ["    acl gf_acme path_beg /.well-known/acme-challenge/",
             "    http-request set-var(txn.gf_host) req.hdr(host),field(1,:),lower"]
    hosts = [(route["run"] + "." + domain, proxy_service_prefix(route["run"])[:-1],
              https and route.get("https", True)) for route in routes]
    if any(route.get("model") for route in routes):
        hosts.append(("gateway." + domain, proxy_model_prefix()[:-1], https))
    port = int(listen.get("https_port") or 443)
    redirect = ("scheme https" if port == 443 else
                "location https://%%[var(txn.gf_host)]:%d%%[capture.req.uri]" % port)
    for host, prefix, secure in hosts:
        mine = "{ var(txn.gf_host) -m str %s }" % host
        if secure:
            lines.append("    http-request redirect %s code 301 if !{ ssl_fc } !gf_acme %s"
                         % (redirect, mine))
        lines += ["    http-request set-var(txn.gf_known) bool(1) if %s" % mine,
                  "    http-request set-path %s%%[path] if !gf_acme %s" % (prefix, mine)]
    lines.append("    http-request return %s if !gf_acme !{ var(txn.gf_known) -m found }"
                 % _proxy_json(404, "Not Found"))
    return lines


def _proxy_binds(listen):
    address = listen.get("address")
    lines = ["    bind %s" % proxy_address(address, listen.get("port"))]
    if listen.get("https_port") and proxy_listen_domain(listen):
        lines.append("    bind %s ssl crt %s alpn h2,http/1.1"
                     % (proxy_address(address, listen["https_port"]), PROXY_CERTS))
    return lines


def _proxy_frontend(routes, listen, conf):
    domain = proxy_listen_domain(listen)
    lines = ["frontend gpufleet_services"] + _proxy_binds(listen)
    lines += ["    mode http",
              "    option forwardfor",
              "    acl gf_bearer req.fhdr(authorization) -m reg -i '^bearer [^ ]+$'",
              "    acl gf_models path_beg %s" % proxy_model_prefix(),
              "    acl gf_models_v1 path_beg %sv1/" % proxy_model_prefix(),
              "    acl gf_models_list path %smodels %sv1/models"
              % (proxy_model_prefix(), proxy_model_prefix()),
              "    http-request set-var(txn.gf_token) "
              "req.fhdr(authorization),bytes(7),sha2(256),hex,lower if gf_bearer"]
    if domain:
        lines += _proxy_gateway(routes, listen)
    model_routes = [route for route in routes if route.get("model")]
    # Which service a request is for: its path, or its body's model.
    for route in routes:
        prefix = proxy_service_prefix(route["run"])
        lines.append("    http-request redirect location %s code 308 if { path %s }"
                     % (prefix, prefix[:-1]))
        lines.append("    http-request set-var(txn.gf_run) str(%s) if { path_beg %s }"
                     % (route["run"], prefix))
        lines.append("    acl gf_is_%s var(txn.gf_run) -m str %s" % (route["run"], route["run"]))
    if model_routes:
        guarded = sorted(set(proxy_token_fleet(route, listen) for route in model_routes
                             if route.get("auth", True)))
        if guarded:
            # An ACL named twice matches when either does: a token of any of these fleets.
            lines.append("    http-request return %s hdr www-authenticate Bearer if "
                         "gf_models_list !gf_bearer" % _proxy_json(401, "Not authenticated"))
            for fleet in guarded:
                lines.append("    acl gf_any_token var(txn.gf_token) -m str -f %s"
                             % conf("tokens-%s.lst" % fleet))
            lines.append("    http-request return %s if gf_models_list !gf_any_token"
                         % _proxy_json(403, "Unauthenticated or unauthorized"))
        lines += ["    http-request return status 200 content-type application/json file %s "
                  "if gf_models_list" % conf("models.json"),
                  "    http-request wait-for-body time 10s if gf_models",
                  "    http-request set-var(txn.gf_model) "
                  "req.body,json_query('$.model'),sha2(256),hex,lower if gf_models"]
        for route in model_routes:
            digest = hashlib.sha256(route["model"]["name"].encode("utf-8")).hexdigest()
            lines.append("    http-request set-var(txn.gf_run) str(%s) if gf_models "
                         "{ var(txn.gf_model) -m str %s }" % (route["run"], digest))
        lines.append("    http-request return %s if gf_models !{ var(txn.gf_run) -m found }"
                     % _proxy_json(404, "Model not found"))
    lines.append("    http-request return %s if !{ var(txn.gf_run) -m found }%s"
                 % (_proxy_json(404, "Not Found"), " !gf_acme" if domain else ""))
    # Auth: a bearer token whose digest a member of the service's fleet published.
    for route in routes:
        if route.get("auth", True):
            run = route["run"]
            lines += ["    http-request return %s hdr www-authenticate Bearer if gf_is_%s "
                      "!gf_bearer" % (_proxy_json(401, "Not authenticated"), run),
                      "    http-request return %s if gf_is_%s !{ var(txn.gf_token) -m str -f "
                      "%s }" % (_proxy_json(403, "Unauthenticated or unauthorized"), run,
                                conf("tokens-%s.lst" % proxy_token_fleet(route, listen))),
                      "    http-request del-header authorization if gf_is_%s" % run]
    # The path the replica sees: the service's prefix taken off, a model's own prefix put on.
    lines.append("    http-request set-var(txn.gf_path) path,regsub(^/proxy/services/%s/[^/]+,) "
                 "if !gf_models" % PROXY_PROJECT)
    for route in model_routes:
        own = (route["model"].get("prefix") or "/").rstrip("/") + "/"
        for acl, base in (("gf_models_v1", proxy_model_prefix() + "v1/"),
                          ("!gf_models_v1", proxy_model_prefix())):
            lines.append("    http-request set-var(txn.gf_path) path,regsub(^%s,%s) if gf_models "
                         "%s gf_is_%s" % (base, own, acl, route["run"]))
    # Rate limits: the longest prefix of the service's path that has one.
    number = 0
    tables = []
    for route in routes:
        limits = sorted(route.get("rate_limits") or [],
                        key=lambda limit: -len(limit.get("prefix") or "/"))
        for limit in limits:
            number += 1
            count, window = proxy_limit_window(limit)
            key = limit.get("key") or {}
            fetch = ("req.fhdr(%s)" % key["header"] if key.get("type") == "header" else "src")
            tables.append((number, window, key.get("type") == "header"))
            lines.append("    http-request set-var(txn.gf_limit) int(%d) if gf_is_%s "
                         "!{ var(txn.gf_limit) -m found } { var(txn.gf_path) -m beg %s }"
                         % (number, route["run"], proxy_word(limit.get("prefix") or "/")))
            mine = "{ var(txn.gf_limit) -m int %d }" % number
            lines += ["    http-request track-sc0 %s table gf_limit_%d if %s"
                      % (fetch, number, mine),
                      "    http-request return %s if %s { sc_gpc_rate(0,0) ge %d }"
                      % (_proxy_json(429, "Too Many Requests"), mine, count),
                      "    http-request sc-inc-gpc(0,0) if %s" % mine]
    for route in routes:
        # On a gateway the whole host is the service's: its prefix is always taken off.
        strip = route.get("strip_prefix", True) or bool(domain)
        if strip or route.get("model"):
            condition = "gf_is_%s" % route["run"]
            if not strip:
                condition += " gf_models"
            lines.append("    http-request set-path %%[var(txn.gf_path)] if %s" % condition)
    # Requests that passed the checks above are counted, per service, over its window (what
    # autoscaling follows: proxy_status reads the tables).
    for route in routes:
        lines.append("    http-request track-sc1 var(txn.gf_run) table gf_rate_%d if gf_is_%s"
                     % (proxy_rate_window(route), route["run"]))
    if domain:
        lines.append("    use_backend gf_acme if gf_acme")
    for route in routes:
        lines.append("    use_backend gf_service_%s if gf_is_%s" % (route["run"], route["run"]))
    return lines, tables


def proxy_backend_ids(routes):
    # type: (list) -> dict
    """``{run: id}``: the fixed proxy id of each service's backend (its server-state file names
    it, and HAProxy warns of a state whose backend id differs from the running one)."""
    runs = sorted(route["run"] for route in routes)
    return dict((run, 10001 + number) for number, run in enumerate(runs))


def _proxy_backend(route, state, number):
    run = route["run"]
    lines = ["backend gf_service_%s" % run,
             "    id %d" % number,
             "    mode http",
             "    load-server-state-from-file local",
             "    server-state-file-name %s" % state("gf_service_%s" % run),
             "    balance roundrobin",
             "    retries 1",
             "    option redispatch 1",
             "    retry-on conn-failure empty-response response-timeout",
             "    http-request disable-l7-retry unless { method %s }" % _PROXY_IDEMPOTENT]
    probes = route.get("probes") or []
    rise = 1
    if probes:
        lines.append("    option httpchk")
        timeout = 1
        for probe in probes:
            send = ["http-check send meth %s uri %s ver HTTP/1.1 hdr host %s"
                    % ((probe.get("method") or "get").upper(), proxy_word(probe.get("url") or "/"),
                       "localhost")]
            for header in probe.get("headers") or []:
                value = proxy_word(header.get("value") or "", percent=True)
                send.append("hdr %s %s" % (proxy_word(header["name"]), value))
            if probe.get("body") is not None:
                send.append("body %s" % proxy_word(probe["body"]))
            lines += ["    http-check connect", "    " + " ".join(send),
                      "    http-check expect status 200-299"]
            timeout = max(timeout, int(probe.get("timeout") or 1))
            rise = max(rise, int(probe.get("ready_after") or 1))
        lines.append("    timeout check %ds" % timeout)
    # A replica that is down (not ready yet) is probed every interval, but at least every 2 s.
    down = min([int(probe.get("interval") or 1) for probe in probes] + [2 if probes else 1])
    lines.append("    default-server check %s rise %d downinter %ds"
                 % (PROXY_CHECK, rise, max(1, down)))
    for replica in sorted(route.get("replicas") or [], key=lambda r: r.get("replica_num", 0)):
        where = proxy_address(replica["address"], replica["port"])
        lines.append("    server replica-%d %s" % (int(replica["replica_num"]), where))
    return lines


def proxy_render(routes, listen, digests, conf, state):
    # type: (...) -> dict
    """The files of PROXY_CONF for ``routes`` (route records, any order) published on
    ``listen`` (``{"address", "port"}``), the members of fleet F having the token digests
    ``digests[F]``: ``{file name: text}``. With no route, ``services.cfg`` holds no proxy at
    all (nothing listens), except on a gateway, which answers 404. ``conf(name)`` is where a file of these will be, ``state(backend)``
    where a backend's server states are (proxy_server_states)."""
    routes = sorted(routes, key=lambda route: route.get("run") or "")
    proxy_routes_check(routes)
    head = ["# Written by gpufleet (tasks/hostside/proxyside.py) from the service routes it",
            "# keeps: every change replaces this file.", ""]
    files = {"services.cfg": "\n".join(head) + "\n"}
    if not routes and not proxy_listen_domain(listen):   # a gateway answers 404 then
        return files
    fleets = sorted(set(proxy_token_fleet(route, listen) for route in routes))
    for fleet in fleets:
        kept = sorted(set(d for d in digests.get(fleet) or [] if _PROXY_DIGEST.match(d or "")))
        files["tokens-%s.lst" % fleet] = "".join(digest + "\n" for digest in kept)
    lines = list(head)
    if any(route.get("model") for route in routes):
        files["models.json"] = proxy_models_document(routes)
        lines += ["global", "    tune.bufsize %d" % PROXY_MODEL_BUFFER, ""]
    frontend, tables = _proxy_frontend(routes, listen, conf)
    lines += frontend + [""]
    ids = proxy_backend_ids(routes)
    for route in routes:
        lines += _proxy_backend(route, state, ids[route["run"]]) + [""]
    for number, window, header in tables:
        lines += ["backend gf_limit_%d" % number,
                  "    stick-table type %s size 100k expire %ds store gpc_rate(1,%d)"
                  % ("string len 128" if header else "ipv6", max(60, 2 * window // 1000 + 1),
                     window), ""]
    if proxy_listen_domain(listen):
        # An ACME client on the gateway answers HTTP-01 challenges while it obtains a
        # service's certificate (nothing listens there otherwise: 503).
        lines += ["backend gf_acme", "    mode http",
                  "    server acme %s" % PROXY_ACME, ""]
    for window in sorted(set(proxy_rate_window(route) for route in routes)):
        lines += ["backend gf_rate_%d" % window,
                  "    stick-table type string len 64 size 1k expire %ds store http_req_rate(%ds)"
                  % (2 * window, window), ""]
    files["services.cfg"] = "\n".join(lines)
    return files


_PROXY_STATE_FIELDS = (
    "be_id be_name srv_id srv_name srv_addr srv_op_state srv_admin_state srv_uweight "
    "srv_iweight srv_time_since_last_change srv_check_status srv_check_result srv_check_health "
    "srv_check_state srv_agent_state bk_f_forced_id srv_f_forced_id srv_fqdn srv_port "
    "srvrecord srv_use_ssl srv_check_port srv_check_addr srv_agent_addr srv_agent_port")


def proxy_server_states(routes, current):
    # type: (list, dict) -> dict
    """``{backend: text}``: the server-state file HAProxy reads for each service's backend
    when it starts or reloads. HAProxy takes a server it starts as up until its checks say
    otherwise; this file says which start down: every replica but those up now at the same
    address and port (``current``: ``{(backend, server): (state, address, port)}`` from ``show
    servers state``, state 2 being up), so a new replica enters only once its probes (or the
    TCP check) pass and one that is serving keeps serving through the reload."""
    files = {}
    ids = proxy_backend_ids(routes)
    for route in routes:
        backend = "gf_service_%s" % route["run"]
        lines = ["1", "# " + _PROXY_STATE_FIELDS]
        for replica in sorted(route.get("replicas") or [], key=lambda r: r["replica_num"]):
            server = "replica-%d" % int(replica["replica_num"])
            address, port = replica["address"], int(replica["port"])
            if current.get((backend, server)) == ("2", address, str(port)):
                continue
            lines.append("%d %s 0 %s %s 0 0 1 1 0 1 0 0 6 0 1 0 - %d - 0 0 - - 0"
                         % (ids[route["run"]], backend, server, address, port))
        files[backend] = "\n".join(lines) + "\n"
    return files
