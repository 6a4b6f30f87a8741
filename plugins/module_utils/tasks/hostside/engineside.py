# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The Docker engine of a fleet host, as the helper's requests reach it, and the helper's error.

The first part of the helper the controller sends (tasks.ssh.host_source), before nodeside:
standard library only, Python 3.6+, one namespace with the parts after it. ``Failure`` is the
error every part raises for a request it refuses or cannot do (its message is the answer's).
``_docker`` runs the ``docker`` CLI; the Engine API on the local socket answers the frequent
questions (which containers, their state) and removals in a millisecond or two
(``_engine``), and the CLI is used wherever the API cannot be (another Docker context, an
engine that does not speak its version).
"""

import json
import os
import stat


class Failure(Exception):
    pass


def _docker(args, data=None, check=True):
    import subprocess

    try:
        proc = subprocess.run(["docker"] + list(args), input=data, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, check=False)
    except OSError as exc:
        raise Failure("docker is not installed on this host (install Docker; see "
                      "docs/preflight.md)") from exc
    out = proc.stdout.decode("utf-8", "replace")
    err = proc.stderr.decode("utf-8", "replace")
    if check and proc.returncode != 0:
        raise Failure("docker %s failed (exit %d): %s"
                      % (args[0], proc.returncode, err.strip()[-1500:]))
    return proc.returncode, out, err


# The Docker Engine API on its Unix socket answers what the runner asks most often (which
# containers, their state, an image's config; removals) in a millisecond or two, where each
# ``docker`` command costs tens of milliseconds of CPU to start; with a status poll per host
# every second and several requests per start, that is most of a host's share of a run's start.
# ``docker run`` and the rest stay with the CLI. The API is used only where the CLI would reach
# the same engine: DOCKER_HOST unset (or this socket) and no other Docker context.
DOCKER_SOCKET = "/var/run/docker.sock"
ENGINE_API = "/v1.24"   # the oldest version current engines still serve; enough here
_ENGINE: dict = {}


class _EngineUnavailable(Exception):
    pass


def _engine_socket():
    if "socket" not in _ENGINE:
        _ENGINE["socket"] = _choose_socket()
    return _ENGINE["socket"]


def _choose_socket():
    host = os.environ.get("DOCKER_HOST") or ""
    if host.startswith("unix://"):
        path = host[len("unix://"):]
    else:
        path = None if host else DOCKER_SOCKET   # tcp:// or ssh://: the CLI's business
    if not path or os.environ.get("DOCKER_CONTEXT"):
        return None
    config = os.path.join(os.environ.get("DOCKER_CONFIG") or os.path.expanduser("~/.docker"),
                          "config.json")
    try:
        with open(config) as handle:
            if (json.load(handle) or {}).get("currentContext") not in (None, "", "default"):
                return None
    except (IOError, OSError, ValueError, AttributeError):
        pass
    try:
        if not stat.S_ISSOCK(os.stat(path).st_mode):
            return None
    except OSError:
        return None
    return path


def _engine(method, path, query=None, ok=(200,)):
    """``(status, JSON body)`` of an Engine API request; a status outside ``ok`` and 404 is a
    Failure. _EngineUnavailable when the socket cannot be used (then the CLI is).

    One HTTP/1.0 request per connection, read to its end: http.client would cost more to
    import (its email and ssl modules) than the request takes."""
    import socket

    where = _engine_socket()
    if not where:
        raise _EngineUnavailable()
    url = ENGINE_API + _quote(path, "/:@=") + (
        "?" + "&".join("%s=%s" % (_quote(k), _quote(v)) for k, v in sorted(query.items()))
        if query else "")
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.settimeout(120)
        sock.connect(where)
        sock.sendall(("%s %s HTTP/1.0\r\nHost: docker\r\n\r\n" % (method, url)).encode("ascii"))
        parts = []
        while True:
            chunk = sock.recv(1 << 16)
            if not chunk:
                break
            parts.append(chunk)
        status, body = _http_response(b"".join(parts))
    except (OSError, ValueError) as exc:
        _ENGINE["socket"] = None   # the CLI from now on, in this request
        raise _EngineUnavailable() from exc
    finally:
        sock.close()
    try:
        value = json.loads(body.decode("utf-8")) if body.strip() else None
    except ValueError:
        value = None
    if status not in ok and status != 404:
        if status in (400, 406) or (status >= 500 and "version" in str(value).lower()):
            _ENGINE["socket"] = None   # an engine that does not speak this API version
            raise _EngineUnavailable()
        raise Failure("docker engine: %s %s answered %d: %s" % (
            method, path, status, (value or {}).get("message") if isinstance(value, dict)
            else body[:500]))
    return status, value


def _quote(text, safe=""):
    """Percent-encoding of ``text`` (UTF-8) for a URL, ``safe`` characters kept."""
    keep = set(b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_.-~"
               + safe.encode("ascii"))
    return "".join(chr(b) if b in keep else "%%%02X" % b for b in str(text).encode("utf-8"))


def _http_response(data):
    """``(status, body)`` of a whole HTTP/1.x response; ValueError when it is not one."""
    head, sep, body = data.partition(b"\r\n\r\n")
    lines = head.split(b"\r\n")
    fields = lines[0].split(None, 2)
    if not sep or len(fields) < 2 or not fields[0].startswith(b"HTTP/"):
        raise ValueError("not an HTTP response")
    status = int(fields[1])
    headers = dict((k.strip().lower(), v.strip()) for k, _colon, v in
                   (line.partition(b":") for line in lines[1:]))
    if headers.get(b"transfer-encoding", b"").lower() == b"chunked":
        whole = []
        while True:
            size_line, _crlf, body = body.partition(b"\r\n")
            size = int(size_line.split(b";")[0].strip() or b"0", 16)
            if size == 0:
                break
            whole.append(body[:size])
            body = body[size + 2:]
        body = b"".join(whole)
    elif b"content-length" in headers:
        body = body[:int(headers[b"content-length"])]
    return status, body


def _inspect_all(ids):
    """``docker inspect`` of containers (a list of their JSON), by the API or the CLI."""
    try:
        found = []
        for cid in ids:
            status, value = _engine("GET", "/containers/%s/json" % cid)
            if status == 200 and isinstance(value, dict):
                found.append(value)
        return found
    except _EngineUnavailable:
        pass
    rc, out, err = _docker(["inspect"] + list(ids), check=False)
    if rc != 0 and not out.strip():
        # Without the containers' states, a job folder would look like a removed job.
        raise Failure("docker inspect failed (exit %d): %s" % (rc, err.strip()[-1500:]))
    return json.loads(out or "[]") if out.strip() else []


def _container_ids(label):
    """The ids of every container (running or not) that has ``label`` (``key`` or
    ``key=value``)."""
    try:
        _status, value = _engine("GET", "/containers/json", {
            "all": "1", "filters": json.dumps({"label": [label]})})
        return [item["Id"] for item in value or [] if item.get("Id")]
    except _EngineUnavailable:
        pass
    _rc, out, _err = _docker(["ps", "-a", "-q", "--no-trunc", "--filter", "label=" + label])
    return [line for line in out.split() if line]


def _container_exists(name):
    try:
        return _engine("GET", "/containers/%s/json" % name)[0] == 200
    except _EngineUnavailable:
        pass
    rc, _out, _err = _docker(["container", "inspect", "--format", "{{.Id}}", name], check=False)
    return rc == 0


def _remove_containers(names):
    """``docker rm -f`` of each (one already gone is no error)."""
    try:
        for name in names:
            try:
                _engine("DELETE", "/containers/%s" % name, {"force": "1"}, ok=(200, 204))
            except Failure:
                pass   # as the CLI's, at best: status shows what stayed
        return
    except _EngineUnavailable:
        pass
    _docker(["rm", "-f"] + list(names), check=False)
