# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The in-fleet proxy on its host: a fleet host's service routes and HAProxy's configuration.

This file travels to the hosts after tasks.hostside.memberside (tasks.ssh.host_source) and runs
in their namespace, so it uses the standard library only and the Python 3.6+ of any
Ansible-managed host; every top-level name is unique across the files sent with it. The
controller's side is the services package; a route's shape is services.records.Route.

On the host (HAProxy itself, its base configuration and its runtime socket come from the role
gpufleet.cluster.gateway):

- ``PROXY_ROOT`` (``/var/lib/gpufleet/proxy``, root's, 0700): ``routes/<run>.json``, one per
  published service (0600), ``listen.json`` (the address and port the proxy listens on) and
  ``lock``, an exclusive flock held for every change;
- ``PROXY_CONF`` (``/etc/haproxy/gpufleet.d``, loaded by HAProxy after its base file):
  ``services.cfg``, written from every route file at each change, ``models.json`` (the answer
  of ``/v1/models``) and ``tokens-<fleet>.lst``, the SHA-256 digests of the tokens of the
  fleet's members (``token_sha256`` of the entries of the members document,
  tasks.hostside.memberside). These files are this module's: nothing else writes them.

Every change writes the new files, asks ``haproxy -c`` about the whole configuration and puts
the previous files back when it refuses (failing with HAProxy's words), then reloads HAProxy.
docs/services.md says what the configuration does, request by request.

Operations (joining nodeside's through ``PROXY_OPS``):

- ``proxy_check`` ``{}``: ``{"installed", "version", "running"}``;
- ``proxy_publish`` ``{"route": Route, "listen": {"address", "port"}}``: ``{"changed",
  "routes"}``;
- ``proxy_unpublish`` ``{"run"}``: ``{"changed", "routes"}``;
- ``proxy_refresh`` ``{}``: the configuration written again (after a member's token changed):
  ``{"changed", "routes"}``;
- ``proxy_status`` ``{"run": name or null}``: ``{"servers": [...], "rates": {run: rps}}``.
"""

import hashlib
import json
import os
import re

try:  # imported as part of the collection (tests, the controller)
    from .memberside import _members_read
    from .nodeside import Failure
except ImportError:  # on a host: nodeside's and memberside's sources run first in this namespace
    pass

PROXY_ROOT = "/var/lib/gpufleet/proxy"
PROXY_CONF = "/etc/haproxy/gpufleet.d"
PROXY_BASE = "/etc/haproxy/haproxy.cfg"
PROXY_SOCKET = "/run/haproxy/admin.sock"
PROXY_PIDFILE = "/run/haproxy.pid"
PROXY_BINARY = "haproxy"
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
_PROXY_PREFIX = re.compile(r"^/[A-Za-z0-9._~/-]{0,200}$")
_PROXY_ADDRESS = re.compile(r"^[A-Za-z0-9.:-]{1,253}$")
_PROXY_DIGEST = re.compile(r"^[0-9a-f]{64}$")
_PROXY_METHODS = ("get", "post", "put", "delete", "patch", "head", "options")
_PROXY_IDEMPOTENT = "GET HEAD OPTIONS TRACE PUT DELETE"


def proxy_path(*parts):
    """A path under PROXY_ROOT (read when called: tests point it elsewhere)."""
    return os.path.join(PROXY_ROOT, *parts)


def proxy_conf_path(*parts):
    """A path under PROXY_CONF (read when called: tests point it elsewhere)."""
    return os.path.join(PROXY_CONF, *parts)


# ---- the configuration, from the routes: pure ------------------------------------------------

def proxy_word(text, percent=False):
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
    """services.records.service_prefix, for the hosts."""
    return "/proxy/services/%s/%s/" % (PROXY_PROJECT, run)


def proxy_model_prefix():
    """services.records.model_prefix, for the hosts."""
    return "/proxy/models/%s/" % PROXY_PROJECT


def proxy_address(address, port):
    """``address:port`` as HAProxy's bind and server lines take it (IPv6 with its prefix)."""
    _proxy_need(_PROXY_ADDRESS, address, "the address")
    port = int(_proxy_number(port, "a port", 1))
    if port > 65535:
        raise Failure("a port must be at most 65535, not %d" % port)
    return ("ipv6@%s:%d" if ":" in address else "%s:%d") % (address, port)


def proxy_limit_window(limit):
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
    """Failure unless every route can be written into the configuration safely, and no two
    services publish the same model."""
    models = {}
    for route in routes:
        if not isinstance(route, dict):
            raise Failure("a route must be a mapping")
        run = _proxy_need(_PROXY_RUN, route.get("run"), "the run name")
        _proxy_need(_PROXY_FLEET, route.get("fleet"), "the fleet name")
        for replica in route.get("replicas") or []:
            proxy_address(replica.get("address"), replica.get("port"))
            _proxy_number(replica.get("replica_num"), "a replica's number")
        for limit in route.get("rate_limits") or []:
            _proxy_need(_PROXY_PREFIX, limit.get("prefix") or "/", "a rate limit's prefix")
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
            _proxy_need(_PROXY_PREFIX, (probe.get("url") or "/").split("?")[0], "a probe's url")
            proxy_word(probe.get("url") or "/")
            for header in probe.get("headers") or []:
                _proxy_need(_PROXY_HEADER, header.get("name"), "a probe's header name")
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


def proxy_models_document(routes):
    """The answer of ``/v1/models``: OpenAI's shape, as dstack's proxy answers it."""
    data = [{"id": route["model"]["name"], "object": "model",
             "created": int(route.get("submitted_at") or 0), "owned_by": PROXY_PROJECT}
            for route in routes if route.get("model")]
    return json.dumps({"object": "list", "data": data}, sort_keys=True) + "\n"


def _proxy_json(status, detail):
    return ("status %d content-type application/json string %s"
            % (status, proxy_word(json.dumps({"detail": detail}))))


def _proxy_frontend(routes, listen, conf):
    lines = ["frontend gpufleet_services",
             "    bind %s" % proxy_address(listen.get("address"), listen.get("port")),
             "    mode http",
             "    option forwardfor",
             "    acl gf_bearer req.fhdr(authorization) -m reg -i '^bearer [^ ]+$'",
             "    acl gf_models path_beg %s" % proxy_model_prefix(),
             "    acl gf_models_v1 path_beg %sv1/" % proxy_model_prefix(),
             "    acl gf_models_list path %smodels %sv1/models"
             % (proxy_model_prefix(), proxy_model_prefix()),
             "    http-request set-var(txn.gf_token) "
             "req.fhdr(authorization),bytes(7),sha2(256),hex,lower if gf_bearer"]
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
        guarded = sorted(set(route["fleet"] for route in model_routes if route.get("auth", True)))
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
    lines.append("    http-request return %s if !{ var(txn.gf_run) -m found }"
                 % _proxy_json(404, "Not Found"))
    # Auth: a bearer token whose digest a member of the service's fleet published.
    for route in routes:
        if route.get("auth", True):
            run = route["run"]
            lines += ["    http-request return %s hdr www-authenticate Bearer if gf_is_%s "
                      "!gf_bearer" % (_proxy_json(401, "Not authenticated"), run),
                      "    http-request return %s if gf_is_%s !{ var(txn.gf_token) -m str -f "
                      "%s }" % (_proxy_json(403, "Unauthenticated or unauthorized"), run,
                                conf("tokens-%s.lst" % route["fleet"])),
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
            lines += ["    http-request track-sc0 %s table gf_limit_%d if %s" % (fetch, number, mine),
                      "    http-request return %s if %s { sc_gpc_rate(0,0) ge %d }"
                      % (_proxy_json(429, "Too Many Requests"), mine, count),
                      "    http-request sc-inc-gpc(0,0) if %s" % mine]
    for route in routes:
        if route.get("strip_prefix", True) or route.get("model"):
            condition = "gf_is_%s" % route["run"]
            if not route.get("strip_prefix", True):
                condition += " gf_models"
            lines.append("    http-request set-path %%[var(txn.gf_path)] if %s" % condition)
        lines.append("    use_backend gf_service_%s if gf_is_%s" % (route["run"], route["run"]))
    return lines, tables


def _proxy_backend(route, state):
    run = route["run"]
    lines = ["backend gf_service_%s" % run,
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
                send.append("hdr %s %s" % (header["name"], proxy_word(header.get("value") or "",
                                                                       percent=True)))
            if probe.get("body") is not None:
                send.append("body %s" % proxy_word(probe["body"]))
            lines += ["    http-check connect", "    " + " ".join(send),
                      "    http-check expect status 200-299"]
            timeout = max(timeout, int(probe.get("timeout") or 1))
            rise = max(rise, int(probe.get("ready_after") or 1))
        lines.append("    timeout check %ds" % timeout)
    # A replica that is down (not ready yet) is probed every interval, but at least every 2 s.
    down = min([int(probe.get("interval") or 1) for probe in probes] + [2 if probes else 1])
    lines.append("    default-server check %s rise %d downinter %ds" % (PROXY_CHECK, rise,
                                                                     max(1, down)))
    for replica in sorted(route.get("replicas") or [], key=lambda r: r.get("replica_num", 0)):
        lines.append("    server replica-%d %s" % (int(replica["replica_num"]),
                                                  proxy_address(replica["address"],
                                                                replica["port"])))
    return lines


def proxy_render(routes, listen, digests, conf=None, state=None):
    """The files of PROXY_CONF for ``routes`` (route records, any order) published on
    ``listen`` (``{"address", "port"}``), the members of fleet F having the token digests
    ``digests[F]``: ``{file name: text}``. With no route, ``services.cfg`` holds no proxy at
    all (nothing listens). ``conf(name)`` is where a file will be (PROXY_CONF's by default),
    ``state(backend)`` where a backend's server states are (proxy_server_states)."""
    conf = conf or proxy_conf_path
    state = state or (lambda name: proxy_path("state", name))
    routes = sorted(routes, key=lambda route: route.get("run") or "")
    proxy_routes_check(routes)
    head = ["# Written by gpufleet (tasks/hostside/proxyside.py) from the service routes in",
            "# %s: every change replaces it." % proxy_path("routes"), ""]
    files = {"services.cfg": "\n".join(head) + "\n"}
    if not routes:
        return files
    fleets = sorted(set(route["fleet"] for route in routes))
    for fleet in fleets:
        kept = sorted(set(d for d in digests.get(fleet) or [] if _PROXY_DIGEST.match(d or "")))
        files["tokens-%s.lst" % fleet] = "".join(digest + "\n" for digest in kept)
    lines = list(head)
    if any(route.get("model") for route in routes):
        files["models.json"] = proxy_models_document(routes)
        lines += ["global", "    tune.bufsize %d" % PROXY_MODEL_BUFFER, ""]
    frontend, tables = _proxy_frontend(routes, listen, conf)
    lines += frontend + [""]
    for route in routes:
        lines += _proxy_backend(route, state) + [""]
    for number, window, header in tables:
        lines += ["backend gf_limit_%d" % number,
                  "    stick-table type %s size 100k expire %ds store gpc_rate(1,%d)"
                  % ("string len 128" if header else "ipv6", max(60, 2 * window // 1000 + 1),
                     window), ""]
    files["services.cfg"] = "\n".join(lines)
    return files


_PROXY_STATE_FIELDS = ("be_id be_name srv_id srv_name srv_addr srv_op_state srv_admin_state "
                      "srv_uweight srv_iweight srv_time_since_last_change srv_check_status "
                      "srv_check_result srv_check_health srv_check_state srv_agent_state "
                      "bk_f_forced_id srv_f_forced_id srv_fqdn srv_port srvrecord srv_use_ssl "
                      "srv_check_port srv_check_addr srv_agent_addr srv_agent_port")


def proxy_server_states(routes, current):
    """``{backend: text}``: the server-state file HAProxy reads for each service's backend
    when it starts or reloads. HAProxy takes a server it starts as up until its checks say
    otherwise; this file says which start down: every replica but those up now at the same
    address and port (``current``: ``{(backend, server): (state, address, port)}`` from ``show
    servers state``, state 2 being up), so a new replica enters only once its probes (or the
    TCP check) pass and one that is serving keeps serving through the reload."""
    files = {}
    for route in routes:
        backend = "gf_service_%s" % route["run"]
        lines = ["1", "# " + _PROXY_STATE_FIELDS]
        for replica in sorted(route.get("replicas") or [], key=lambda r: r["replica_num"]):
            server = "replica-%d" % int(replica["replica_num"])
            address, port = replica["address"], int(replica["port"])
            if current.get((backend, server)) == ("2", address, str(port)):
                continue
            lines.append("0 %s 0 %s %s 0 0 1 1 0 1 0 0 6 0 0 0 - %d - 0 0 - - 0"
                         % (backend, server, address, port))
        files[backend] = "\n".join(lines) + "\n"
    return files


def proxy_current_states():
    """``{(backend, server): (state, address, port)}`` of the running HAProxy (empty when it
    does not answer)."""
    try:
        text = _proxy_ask("show servers state")
    except Failure:
        return {}
    current = {}
    for line in text.splitlines():
        fields = line.split()
        if len(fields) >= 19 and not line.startswith("#"):
            current[(fields[1], fields[3])] = (fields[5], fields[4], fields[18])
    return current


# ---- the files and HAProxy on the host --------------------------------------------------------

class _ProxyLock(object):
    """An exclusive flock on ``PROXY_ROOT/lock``, held for every change."""

    def __init__(self):
        self.handle = None

    def __enter__(self):
        import fcntl

        for folder in (proxy_path(), proxy_path("routes")):
            if not os.path.isdir(folder):
                os.makedirs(folder, 0o700)
            os.chmod(folder, 0o700)
        self.handle = open(proxy_path("lock"), "a")
        fcntl.flock(self.handle, fcntl.LOCK_EX)
        return self

    def __exit__(self, *exc):
        import fcntl

        fcntl.flock(self.handle, fcntl.LOCK_UN)
        self.handle.close()
        return False


def _proxy_read(path):
    """A file's bytes, or None when it is not there."""
    try:
        with open(path, "rb") as handle:
            return handle.read()
    except (IOError, OSError):
        return None


def _proxy_put(path, data, mode):
    """Write ``data`` (bytes) to ``path`` atomically, or remove it when ``data`` is None."""
    if data is None:
        if os.path.lexists(path):
            os.remove(path)
        return
    folder = os.path.dirname(path)
    if not os.path.isdir(folder):
        os.makedirs(folder, 0o755)
    temp = path + ".gpufleet-tmp"
    with open(temp, "wb") as handle:
        handle.write(data)
        handle.flush()
        os.fsync(handle.fileno())
    os.chmod(temp, mode)
    os.rename(temp, path)


def _proxy_routes():
    """Every route file's record, by run name (a file that cannot be read is left out)."""
    routes = {}
    try:
        names = os.listdir(proxy_path("routes"))
    except OSError:
        return routes
    for name in sorted(names):
        if not name.endswith(".json"):
            continue
        try:
            route = json.loads((_proxy_read(proxy_path("routes", name)) or b"").decode("utf-8"))
        except ValueError:
            continue
        if isinstance(route, dict) and route.get("run") == name[:-5]:
            routes[name[:-5]] = route
    return routes


def proxy_digests():
    """``{fleet: [digest, ...]}`` from this host's members document: the ``token_sha256`` of
    every member (a revoked user has no entry among the members)."""
    doc = _members_read() or {}
    digests = [entry.get("token_sha256") for entry in (doc.get("members") or {}).values()
               if isinstance(entry, dict) and isinstance(entry.get("token_sha256"), str)]
    return {doc.get("fleet"): digests} if doc.get("fleet") else {}


def _proxy_managed():
    """The files of PROXY_CONF this module writes, as they are now: ``{name: bytes}``."""
    try:
        names = os.listdir(proxy_conf_path())
    except OSError:
        names = []
    held = {}
    for name in names:
        if name in ("services.cfg", "models.json") or (name.startswith("tokens-")
                                                       and name.endswith(".lst")):
            held[name] = _proxy_read(proxy_conf_path(name))
    return held


def _proxy_run(argv):
    """``(exit status, output)`` of a command; 127 when it is not there."""
    import subprocess

    try:
        proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    except OSError as exc:
        return 127, str(exc)
    out = proc.communicate()[0]
    return proc.returncode, out.decode("utf-8", "replace")


def proxy_config_check():
    """None when HAProxy takes its whole configuration, else its message."""
    code, out = _proxy_run([PROXY_BINARY, "-c", "-f", PROXY_BASE, "-f", proxy_conf_path()])
    if code == 0:
        return None
    kept = [line.strip() for line in out.splitlines() if "[ALERT]" in line or "[WARNING]" in line]
    return "; ".join(kept[-6:]) or out.strip()[-600:] or "haproxy -c failed (%d)" % code


def _proxy_pid():
    """HAProxy's (master's) process id when it runs, else None."""
    try:
        pid = int((_proxy_read(PROXY_PIDFILE) or b"").split()[0])
        os.kill(pid, 0)
        return pid
    except (IndexError, ValueError, OSError):
        return None


def proxy_reload():
    """Reload HAProxy (start it when it is not running) the way this host runs it: systemd,
    else the init script, else a signal to its master. None, or the failure's words."""
    import signal

    running = _proxy_pid() is not None
    if os.path.isdir("/run/systemd/system"):
        code, out = _proxy_run(["systemctl", "reload-or-restart", "haproxy"])
    elif os.path.exists("/etc/init.d/haproxy"):
        code, out = _proxy_run(["service", "haproxy", "reload" if running else "start"])
    elif running:
        os.kill(_proxy_pid(), signal.SIGUSR2)
        return None
    else:
        return "HAProxy is not running and this host has no service manager to start it"
    return None if code == 0 else (out.strip()[-600:] or "exit status %d" % code)


def _proxy_apply(change):
    """Under the lock: ``change(routes)`` (the routes by run, changed in place; True when it
    changed any), the configuration written from them, checked, and HAProxy reloaded; the
    previous files put back when HAProxy refuses the new ones."""
    with _ProxyLock():
        routes = _proxy_routes()
        before = dict(routes)
        listen = json.loads((_proxy_read(proxy_path("listen.json")) or b"{}").decode("utf-8"))
        listen = change(routes, listen) or listen
        files = proxy_render(list(routes.values()), listen, proxy_digests())
        old = _proxy_managed()
        new = dict((name, files.get(name)) for name in old)
        new.update(files)
        route_old = dict((run, _proxy_read(proxy_path("routes", run + ".json")))
                         for run in set(before) | set(routes))
        route_new = dict((run, None if run not in routes else
                          json.dumps(routes[run], sort_keys=True).encode("utf-8"))
                         for run in route_old)
        listen_old = _proxy_read(proxy_path("listen.json"))
        listen_new = json.dumps(listen, sort_keys=True).encode("utf-8") if listen else None
        encoded = dict((name, None if text is None else text.encode("utf-8"))
                       for name, text in new.items())
        changed = encoded != old or route_new != route_old or listen_new != listen_old
        if not changed:
            return {"changed": False, "routes": sorted(routes)}

        def write(conf, routed, listened):
            for name, data in conf.items():
                _proxy_put(proxy_conf_path(name), data, 0o600 if name.startswith("tokens-")
                           else 0o644)
            for run, data in routed.items():
                _proxy_put(proxy_path("routes", run + ".json"), data, 0o600)
            _proxy_put(proxy_path("listen.json"), listened, 0o600)

        write(encoded, route_new, listen_new)
        problem = proxy_config_check()
        if problem is None and (encoded != old or listen_new != listen_old):
            _proxy_write_states(list(routes.values()))
            problem = proxy_reload()
            if problem is not None:
                write(dict((name, old.get(name)) for name in encoded), route_old, listen_old)
                proxy_reload()
                raise Failure("HAProxy could not be reloaded with the new routes (the previous "
                              "ones are back): %s" % problem)
        elif problem is not None:
            write(dict((name, old.get(name)) for name in encoded), route_old, listen_old)
            raise Failure("HAProxy refused the new routes (the previous ones are back): %s"
                          % problem)
        return {"changed": True, "routes": sorted(routes)}


def _proxy_write_states(routes):
    """The server-state files of ``routes`` (proxy_server_states), the others removed."""
    states = proxy_server_states(routes, proxy_current_states())
    folder = proxy_path("state")
    if not os.path.isdir(folder):
        os.makedirs(folder, 0o700)
    for name in os.listdir(folder):
        if name not in states:
            os.remove(os.path.join(folder, name))
    for name, text in states.items():
        _proxy_put(os.path.join(folder, name), text.encode("utf-8"), 0o600)


def op_proxy_check(payload):
    """Whether HAProxy is installed (and which version) and running."""
    code, out = _proxy_run([PROXY_BINARY, "-v"])
    found = re.search(r"version (\S+)", out) if code == 0 else None
    return {"installed": code == 0, "version": found.group(1) if found else None,
            "running": _proxy_pid() is not None}


def op_proxy_publish(payload):
    """Keep the route of one service (replacing its previous one) and publish it."""
    route = payload.get("route")
    listen = payload.get("listen")
    if not isinstance(route, dict) or not isinstance(listen, dict):
        raise Failure("proxy_publish needs a route and the address to listen on")
    proxy_routes_check([route])
    proxy_address(listen.get("address"), listen.get("port"))

    def change(routes, _held):
        routes[route["run"]] = route
        return {"address": listen["address"], "port": int(listen["port"])}

    return _proxy_apply(change)


def op_proxy_unpublish(payload):
    """Take one service's route out (nothing listens once the last one is out)."""
    run = payload.get("run")
    _proxy_need(_PROXY_RUN, run, "the run name")

    def change(routes, _held):
        routes.pop(run, None)

    return _proxy_apply(change)


def op_proxy_refresh(payload):
    """Write the configuration again from the routes kept (the members' tokens changed)."""
    return _proxy_apply(lambda routes, _held: None)


def proxy_stat_rows(text):
    """The rows of HAProxy's ``show stat`` (CSV, its first line the field names after ``# ``)
    as dicts."""
    lines = [line for line in text.splitlines() if line.strip()]
    if not lines or not lines[0].startswith("#"):
        return []
    names = lines[0].lstrip("# ").split(",")
    return [dict(zip(names, line.split(","))) for line in lines[1:]]


def _proxy_ask(command):
    """HAProxy's answer to one command on its runtime socket."""
    import socket

    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.settimeout(5)
    try:
        sock.connect(PROXY_SOCKET)
        sock.sendall(command.encode("ascii") + b"\n")
        chunks = []
        while True:
            chunk = sock.recv(65536)
            if not chunk:
                break
            chunks.append(chunk)
    except (OSError, socket.error) as exc:
        raise Failure("HAProxy's runtime socket %s did not answer: %s"
                      % (PROXY_SOCKET, exc)) from exc
    finally:
        sock.close()
    return b"".join(chunks).decode("utf-8", "replace")


def op_proxy_status(payload):
    """The replicas as HAProxy sees them, and each service's requests per second now."""
    wanted = payload.get("run")
    servers, rates = [], {}
    for row in proxy_stat_rows(_proxy_ask("show stat")):
        proxy = row.get("pxname") or ""
        if not proxy.startswith("gf_service_"):
            continue
        run = proxy[len("gf_service_"):]
        if wanted and run != wanted:
            continue
        name = row.get("svname") or ""
        if name == "BACKEND":
            rates[run] = int(row.get("rate") or 0)
        elif name.startswith("replica-"):
            address, _sep, port = (row.get("addr") or "").rpartition(":")
            servers.append({"run": run, "replica_num": int(name[len("replica-"):]),
                            "status": row.get("status") or "", "address": address,
                            "port": int(port) if port.isdigit() else None})
    return {"servers": servers, "rates": rates}


PROXY_OPS = {
    "proxy_check": op_proxy_check,
    "proxy_publish": op_proxy_publish,
    "proxy_unpublish": op_proxy_unpublish,
    "proxy_refresh": op_proxy_refresh,
    "proxy_status": op_proxy_status,
}
