# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The in-fleet proxy on its host: a fleet host's service routes and HAProxy's configuration.

This file travels to the hosts after tasks.hostside.memberside and tasks.hostside.proxyconf
(which renders the configuration; tasks.ssh.host_source) and runs
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
docs/services-proxy.md says what the configuration does, request by request.

Operations (joining nodeside's through ``PROXY_OPS``):

- ``proxy_check`` ``{}``: ``{"installed", "version", "running", "listen"}`` (``listen``: what
  the role recorded in ``PROXY_LISTEN_FILE``, None without that file);
- ``proxy_publish`` ``{"route": Route, "listen": {"address", "port"}}``: ``{"changed",
  "routes"}``; the proxy listens where ``PROXY_LISTEN_FILE`` says, the payload's ``listen``
  only on a host without that file;
- ``proxy_unpublish`` ``{"run"}``: ``{"changed", "routes"}``;
- ``proxy_refresh`` ``{}``: the configuration written again (after a member's token changed):
  ``{"changed", "routes"}``;
- ``proxy_status`` ``{"run": name or null}``: ``{"servers": [...], "rates": {run: rps}}``;
- ``proxy_routes`` ``{}``: ``{"routes": {run: {"fleet", "user", "model"}}}``.
"""

import json
import os
import re

try:  # imported as part of the collection (tests, the controller)
    from .acmeside import acme_missing, acme_obtain
    from .booking import _Lock
    from .memberside import _members_read
    from .nodeside import Failure
    from .proxyconf import _PROXY_FLEET, _PROXY_RUN, _proxy_need, proxy_address, proxy_render
    from .proxyconf import proxy_listen_domain, proxy_rate_window, proxy_routes_check
    from .proxyconf import proxy_server_states
except ImportError:  # on a host: the sources sent before this one run first in this namespace
    pass

PROXY_ROOT = "/var/lib/gpufleet/proxy"
PROXY_CONF = "/etc/haproxy/gpufleet.d"
PROXY_BASE = "/etc/haproxy/haproxy.cfg"
PROXY_SOCKET = "/run/haproxy/admin.sock"
PROXY_PIDFILE = "/run/haproxy.pid"
PROXY_BINARY = "haproxy"
# How this host runs services: systemd when this folder is there, else the init script.
PROXY_SYSTEMD = "/run/systemd/system"
PROXY_INIT = "/etc/init.d/haproxy"
# Where the role gpufleet.cluster.gateway records the address and port it resolved for the
# services (gateway_listen_address, gateway_public, gateway_port): ``{"address", "port"}``.
# Outside PROXY_CONF, whose every *.cfg HAProxy loads.
PROXY_LISTEN_FILE = "/etc/haproxy/gpufleet-listen.json"


def proxy_path(*parts):
    # type: (*str) -> str
    """A path under PROXY_ROOT (read when called: tests point it elsewhere)."""
    return os.path.join(PROXY_ROOT, *parts)


def proxy_conf_path(*parts):
    # type: (*str) -> str
    """A path under PROXY_CONF (read when called: tests point it elsewhere)."""
    return os.path.join(PROXY_CONF, *parts)


def proxy_current_states():
    # type: () -> dict
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

def _proxy_lock():
    """The booking lock on ``PROXY_ROOT`` (0700, with its 0700 ``routes``), held for every
    change."""
    lock = _Lock(proxy_path(), private=True)
    routes = proxy_path("routes")
    if not os.path.isdir(routes):
        os.makedirs(routes, 0o700)
    os.chmod(routes, 0o700)
    return lock


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
    # type: () -> dict
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
    # type: () -> str | None
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
    # type: () -> str | None
    """Reload HAProxy (start it when it is not running) the way this host runs it: systemd,
    else the init script, else a signal to its master. None, or the failure's words."""
    import signal

    running = _proxy_pid() is not None
    if os.path.isdir(PROXY_SYSTEMD):
        code, out = _proxy_run(["systemctl", "reload-or-restart", "haproxy"])
    elif os.path.exists(PROXY_INIT):
        code, out = _proxy_run([PROXY_INIT, "reload" if running else "start"])
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
    with _proxy_lock():
        routes = _proxy_routes()
        before = dict(routes)
        listen = json.loads((_proxy_read(proxy_path("listen.json")) or b"{}").decode("utf-8"))
        # The role's record wins at every change (its address or port may have changed).
        listen = change(routes, listen) or proxy_role_listen() or listen
        files = proxy_render(list(routes.values()), listen, proxy_digests(), proxy_conf_path,
                             lambda name: proxy_path("state", name))
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
        # HAProxy is (re)loaded when its files change, and started when routes are published
        # and it is not running (the host restarted, say).
        load = encoded != old or listen_new != listen_old or bool(routes) and _proxy_pid() is None
        if not load and route_new == route_old:
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
        if problem is None and load:
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


# What a gateway's role records besides where it listens: its name, domain, HTTPS port,
# certificate (self-signed, lets-encrypt or none), whether it is the default gateway, and the
# ACME settings of a lets-encrypt one (acmeside).
PROXY_GATEWAY_KEYS = ("gateway", "domain", "https_port", "certificate", "default", "acme")


def proxy_role_listen():
    # type: () -> dict | None
    """``{"address", "port"}`` the role recorded in PROXY_LISTEN_FILE, with a gateway's
    PROXY_GATEWAY_KEYS; None without the file; Failure when it is there but unreadable."""
    data = _proxy_read(PROXY_LISTEN_FILE)
    if data is None:
        return None
    try:
        held = json.loads(data.decode("utf-8"))
        address, port = str(held["address"]), int(held["port"])
        proxy_address(address, port)
        found = {"address": address, "port": port}
        found.update((key, held[key]) for key in PROXY_GATEWAY_KEYS if held.get(key) is not None)
        proxy_listen_domain(found)
        if found.get("gateway"):
            _proxy_need(_PROXY_FLEET, found["gateway"], "the gateway's name")
        if found.get("https_port"):
            proxy_address(address, int(held["https_port"]))
    except (ValueError, TypeError, KeyError, AttributeError, Failure) as exc:
        raise Failure("%s does not say where the proxy listens (%s); play the role "
                      "gpufleet.cluster.gateway on this host again"
                      % (PROXY_LISTEN_FILE, exc)) from exc
    return found


def op_proxy_check(payload):
    # type: (dict) -> dict
    """Whether HAProxy is installed (and which version) and running, and where the role says
    the services listen."""
    code, out = _proxy_run([PROXY_BINARY, "-v"])
    found = re.search(r"version (\S+)", out) if code == 0 else None
    return {"installed": code == 0, "version": found.group(1) if found else None,
            "running": _proxy_pid() is not None, "listen": proxy_role_listen()}


def op_proxy_publish(payload):
    # type: (dict) -> dict
    """Keep the route of one service (replacing its previous one) and publish it, listening
    where the role recorded (PROXY_LISTEN_FILE), else where the payload says."""
    route = payload.get("route")
    listen = proxy_role_listen() or payload.get("listen")
    if not isinstance(route, dict) or not isinstance(listen, dict):
        raise Failure("proxy_publish needs a route and the address to listen on (%s is "
                      "missing: play the role gpufleet.cluster.gateway on this host)"
                      % PROXY_LISTEN_FILE)
    proxy_routes_check([route])
    proxy_address(listen.get("address") or "", listen.get("port") or 0)
    listen = dict(listen, port=int(listen["port"]))

    def change(routes, _held):
        old = routes.get(route["run"]) or {}
        if listen.get("gateway") and old and old.get("fleet") != route.get("fleet"):
            # A gateway publishes the services of several fleets, each at its name's host.
            raise Failure("a service named %s of fleet %s is published on gateway %s already: "
                          "stop it, or give this one another name"
                          % (route["run"], old.get("fleet"), listen["gateway"]))
        # The service's own time is when it was first published (the models list's
        # ``created``): a publish again of the same service changes no file when nothing
        # else changed, so HAProxy is not reloaded (nor its request counts started again).
        first = old.get("submitted_at") if old.get("user") == route.get("user") else None
        routes[route["run"]] = dict(route, submitted_at=first or route.get("submitted_at"))
        return listen

    answer = _proxy_apply(change)
    problems = proxy_certificates(listen, route)
    if problems:
        answer["certificate_error"] = "; ".join(problems)
    return answer


def proxy_certificates(listen, route, obtain=None):
    # type: (...) -> list
    """On a lets-encrypt gateway, the certificates ``route`` lacks, obtained (acmeside) once
    its route is up (the ACME server asks for the challenge through it), and HAProxy reloaded
    to take them; one at a time on the host. Returns what went wrong, said, not raised: the
    service is published, served with the gateway's own certificate until the next publish
    obtains its own."""
    problems = []
    got = False
    with _Lock(proxy_path("acme"), private=True):
        for name in acme_missing(listen, route):
            why = (obtain or acme_obtain)(listen, name)
            problems += [why] if why else []
            got = got or not why
    if got:
        with _proxy_lock():   # no reload while another change writes its files
            problem = proxy_reload()
        if problem is not None:
            problems.append("HAProxy did not take the new certificate: %s" % problem)
    return problems


def op_proxy_replicas(payload):
    # type: (dict) -> dict
    """Give a published service's route the replicas of ``payload`` (a replica made again has
    a new port); a run this host does not publish is left alone (``missing``)."""
    run, replicas = payload.get("run"), payload.get("replicas")
    _proxy_need(_PROXY_RUN, run, "the run name")
    missing = []

    def change(routes, _held):
        if run not in routes:
            missing.append(run)
            return None
        route = dict(routes[run], replicas=replicas)
        proxy_routes_check([route])
        routes[run] = route
        return None

    answer = _proxy_apply(change)
    if missing:
        answer = dict(answer, missing=True)
    return answer


def op_proxy_roll(payload):
    # type: (dict) -> dict
    """A lease on updating service ``run`` (services.rolling), so that two controllers never
    roll one service at once: ``{"by", "seconds"}`` takes or renews it (``taken`` false, with
    the holder and until when, while another controller's lease holds); ``release`` drops the
    caller's, and with ``scaled`` (the run id) notes that the update changed the number of
    replicas: when it did is kept (``proxy_status``'s ``scaled_at``), for autoscaling's
    delays."""
    import time

    run, by = payload.get("run"), str(payload.get("by") or "")
    _proxy_need(_PROXY_RUN, run, "the run name")
    if not by:
        raise Failure("proxy_roll needs who asks (by)")
    with _proxy_lock():
        path = _proxy_roll_path(run)
        held = _proxy_roll_read(run)
        now = time.time()
        mine = held.get("by") in (None, by) or float(held.get("until") or 0) <= now
        kept = dict((k, held[k]) for k in ("scaled_at", "run_id") if k in held)
        if payload.get("release"):
            if payload.get("scaled") and held.get("by") == by:
                kept = {"scaled_at": now, "run_id": str(payload["scaled"])}
            if held.get("by") == by:
                _proxy_put(path, json.dumps(kept).encode("utf-8") if kept else None, 0o600)
            return {"released": held.get("by") == by}
        if not mine:
            return {"taken": False, "by": held.get("by"), "until": held.get("until")}
        until = now + float(payload.get("seconds") or 900)
        _proxy_put(path, json.dumps(dict(kept, by=by, until=until)).encode("utf-8"), 0o600)
        return {"taken": True, "until": until}


def _proxy_roll_path(run):
    folder = proxy_path("rolls")
    if not os.path.isdir(folder):
        os.makedirs(folder, 0o700)
    return os.path.join(folder, str(run) + ".json")


def _proxy_roll_read(run):
    """What the roll file of ``run`` holds (its lease, when it last scaled), or {}."""
    try:
        held = json.loads((_proxy_read(_proxy_roll_path(run)) or b"{}").decode("utf-8"))
    except ValueError:
        held = {}
    return held if isinstance(held, dict) else {}


def op_proxy_unpublish(payload):
    # type: (dict) -> dict
    """Take one service's route out (nothing listens once the last one is out)."""
    run = payload.get("run")
    _proxy_need(_PROXY_RUN, run, "the run name")

    def change(routes, _held):
        routes.pop(run, None)

    return _proxy_apply(change)


def op_proxy_refresh(payload):
    # type: (dict) -> dict
    """Write the configuration again from the routes kept (the members' tokens changed)."""
    return _proxy_apply(lambda routes, _held: None)


def proxy_refresh_if_routed():
    # type: () -> dict | None
    """op_proxy_refresh where this host publishes a service (memberside calls it after a change
    of the members document); nothing where it publishes none."""
    if not _proxy_routes():
        return None
    return op_proxy_refresh({})


def proxy_stat_rows(text):
    # type: (str) -> list
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


def proxy_rate_rows(text):
    # type: (str) -> dict | None
    """``{key: requests}`` from HAProxy's ``show table`` of a rate table (tracked entries
    read ``0x...: key=NAME use=0 exp=... http_req_rate(PERIOD)=COUNT``); None when the answer
    is no table (HAProxy runs a configuration without it: nothing is counted)."""
    if not text.lstrip().startswith("# table:"):
        return None
    found = {}
    for line in text.splitlines():
        match = re.search(r"\skey=(\S+)\s.*\bhttp_req_rate\(\d+\)=(\d+)", line)
        if match:
            found[match.group(1)] = int(match.group(2))
    return found


def proxy_uptime(text):
    # type: (str) -> int
    """The seconds HAProxy's serving process has run (``show info``'s ``Uptime_sec``): its
    counts start again at a reload."""
    match = re.search(r"^Uptime_sec:\s*(\d+)", text, re.M)
    return int(match.group(1)) if match else 0


def op_proxy_status(payload):
    # type: (dict) -> dict
    """The replicas as HAProxy sees them, and each service's requests: per second now
    (``rates``), and counted over its window (``requests``: ``{run: {"count", "window"}}``,
    counted since ``uptime`` seconds ago at most); with ``run``, also when the service last
    changed its number of replicas (``scaled_at``, host time as ``now``, and ``scaled_run_id``)."""
    import time

    wanted = payload.get("run")
    if wanted:
        _proxy_need(_PROXY_RUN, wanted, "the run name")
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
    requests, counted = {}, {}  # type: (dict, dict)
    for run, route in sorted(_proxy_routes().items()):
        if wanted and run != wanted:
            continue
        window = proxy_rate_window(route)
        if window not in counted:
            counted[window] = proxy_rate_rows(_proxy_ask("show table gf_rate_%d" % window))
        table = counted[window]
        if table is not None:
            requests[run] = {"count": table.get(run, 0), "window": window}
    answer = {"servers": servers, "rates": rates, "requests": requests,
              "uptime": proxy_uptime(_proxy_ask("show info")), "now": time.time()}
    if wanted:
        held = _proxy_roll_read(wanted)
        answer.update(scaled_at=held.get("scaled_at"), scaled_run_id=held.get("run_id"))
    return answer


def _proxy_set_servers(backend, servers, setting):
    # type: (str, set, str) -> None
    """``set server BACKEND/SERVER SETTING`` for each of ``servers`` on the runtime socket; a
    server the proxy does not have is left (it takes no request anyway)."""
    for server in sorted(servers):
        answer = _proxy_ask("set server %s/%s %s" % (backend, server, setting)).strip()
        if answer and not answer.startswith("No such"):
            raise Failure("HAProxy did not set %s/%s to %s: %s"
                          % (backend, server, setting.split()[-1], answer[:300]))


def op_proxy_drain(payload):
    # type: (dict) -> dict
    """Take replicas of a service out of new requests at once, without a reload (the runtime
    API: each one's server ``state drain``), then wait until HAProxy has no request in flight
    on any of them (``show stat``'s ``scur`` 0), at most ``seconds``. Answers ``{"drained":
    bool, "left": requests still in flight}``; a replica the proxy does not have counts as
    drained. With ``ready``, the drain is undone instead (a reload of the route forgets it too,
    but a replica made again on the same port changes no route, so nothing reloads); with
    ``fresh`` too, they run new containers: HAProxy takes them as down until their checks
    pass again (``rise`` of them), as a reload does with a replica on a new port."""
    import time

    run, nums = payload.get("run"), payload.get("replicas")
    _proxy_need(_PROXY_RUN, run, "the run name")
    if not isinstance(nums, list) or not all(isinstance(n, int) and n >= 0 for n in nums):
        raise Failure("proxy_drain: replicas must be a list of replica numbers, got %r"
                      % (nums,))
    backend = "gf_service_%s" % run
    servers = set("replica-%d" % n for n in nums)
    _proxy_set_servers(backend, servers, "state ready" if payload.get("ready") else
                       "state drain")
    if payload.get("ready"):
        if payload.get("fresh"):
            _proxy_set_servers(backend, servers, "health down")
        return {"ready": True}
    seconds = payload.get("seconds")
    deadline = time.time() + float(30 if seconds is None else seconds)
    while True:
        left = sum(int(row.get("scur") or 0)
                   for row in proxy_stat_rows(_proxy_ask("show stat"))
                   if row.get("pxname") == backend and row.get("svname") in servers)
        if left == 0 or time.time() >= deadline:
            return {"drained": left == 0, "left": left}
        time.sleep(0.2)


def op_proxy_routes(payload):
    # type: (dict) -> dict
    """What this host publishes, by run: ``{"routes": {run: {"fleet", "user", "model"}}}``
    (``model``: its name, or None), for a clash to be found before a service is placed."""
    return {"routes": dict((run, {"fleet": route.get("fleet"), "user": route.get("user"),
                                  "model": (route.get("model") or {}).get("name")})
                           for run, route in _proxy_routes().items())}


PROXY_OPS = {
    "proxy_drain": op_proxy_drain,
    "proxy_routes": op_proxy_routes,
    "proxy_check": op_proxy_check,
    "proxy_publish": op_proxy_publish,
    "proxy_replicas": op_proxy_replicas,
    "proxy_roll": op_proxy_roll,
    "proxy_unpublish": op_proxy_unpublish,
    "proxy_refresh": op_proxy_refresh,
    "proxy_status": op_proxy_status,
}
