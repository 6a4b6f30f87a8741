# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""What the tests of the in-fleet proxy's host side share: a base HAProxy configuration, the
HAProxy binary (a missing one fails the test that asks, it never skips it), routes, probes and
models as the controller sends them; replicas (small Python HTTP servers) and a free port."""

from __future__ import annotations

import http.server
import json
import shutil
import socket
import threading

BASE = """global
    stats socket {root}/admin.sock mode 600 level admin
defaults
    mode http
    timeout connect 5s
    timeout client 60s
    timeout server 60s
"""
LISTEN = {"address": "127.0.0.1", "port": 3000}
TOKEN = "gpufleet-token-of-alice"


def haproxy():
    found = shutil.which("haproxy") or shutil.which("haproxy", path="/usr/sbin:/usr/local/sbin")
    assert found, ("HAProxy is not installed: these tests check the rendered configuration "
                   "with the real haproxy -c (apt-get install haproxy)")
    return found


def route(run="web", **changes):
    made = {"run": run, "user": "alice", "fleet": "f", "project": "main", "port": 8000,
            "auth": True, "strip_prefix": True, "rate_limits": [], "probes": [], "model": None,
            "replicas": [{"replica_num": 0, "job_num": 0, "host": "f-0",
                          "address": "10.0.0.2", "port": 32768},
                         {"replica_num": 1, "job_num": 1, "host": "f-1",
                          "address": "10.0.0.3", "port": 32769}],
            "submitted_at": 1700000000.5}
    made.update(changes)
    return made


def probe(**changes):
    made = {"type": "http", "url": "/health", "method": "get", "headers": [], "body": None,
            "timeout": 10, "interval": 15, "ready_after": 1, "until_ready": False}
    made.update(changes)
    return made


def model(name="llama", prefix="/v1"):
    return {"type": "chat", "name": name, "format": "openai", "prefix": prefix}


def free_port():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class Replica(http.server.BaseHTTPRequestHandler):
    """Answers what it saw: its name, the path, the Authorization header, the body."""
    name = "?"
    healthy = True

    def answer(self):
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        if self.path.startswith("/health") and not self.healthy:
            self.send_response(503)
            self.end_headers()
            return
        data = json.dumps({"replica": self.name, "path": self.path,
                           "authorization": self.headers.get("Authorization"),
                           "body": body.decode()}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    do_GET = do_POST = answer

    def log_message(self, *args):
        pass


def replica(name, healthy=True):
    handler = type("Replica_" + name, (Replica,), {"name": name, "healthy": healthy})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server
