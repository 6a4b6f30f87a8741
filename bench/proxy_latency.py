"""What latency does the services' proxy add? HAProxy against nginx, both against going direct.

Issue 35 asks to pick the proxy on measurement. On this machine (Debian's ``haproxy`` and
``nginx-light`` packages: ``apt-get install -y haproxy nginx-light``; the script starts its own
instances on loopback ports and never touches the packages' services) it starts:

- the backend: an nginx instance of its own that answers every request with a fixed 3-byte
  body from memory (its own latency is small and steady, which a Python server's is not);
- HAProxy configured as the in-fleet proxy will be for one service: the bearer check against a
  file of SHA-256 digests (401 without the header, 403 for an unknown token), the
  Authorization header removed, the service prefix ``/proxy/services/main/bench/`` stripped,
  one backend server with an active HTTP health check, retries and redispatch;
- nginx configured the closest way it can be without modules Debian's nginx-light lacks: the
  bearer token compared by a ``map`` (plain nginx cannot hash a header), the header removed,
  the prefix stripped by ``proxy_pass``, one upstream with keep-alive connections (open-source
  nginx has no active health check; its passive ``max_fails`` is the nearest).

Each proxy is first checked to answer 200 with the token, 401 without it and 403 with a wrong
one. Then one open-loop load runs against the three targets at once, interleaved: every
1/RATE s, one request to each target, in a rotating order, each on a keep-alive connection of
that target's pool (a new connection is opened only when every pooled one is busy, and
counted). So each target gets RATE requests/s for SECONDS s, under the same machine noise at
the same moment: the differences and ratios between them hold even on a noisy machine. A
request's latency is from just before its bytes are written to its last byte read; how late
the client sent against its schedule is reported too (the client's own pacing quality).

It prints p50, p90, p99 and max per target and each proxy's overhead against direct (p50 and
p99 differences and ratios), ``--json`` for a record. Goal (issue 35): p99 overhead <= 2 ms.
Everything it starts is stopped when it ends, whatever happens.

    .venv/bin/python bench/proxy_latency.py [--rate 200] [--seconds 30] [--connections 8]
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import os
import platform
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

PREFIX = "/proxy/services/main/bench/"
TOKEN = "bench-token-5b1c0e2f"
BODY = b"ok\n"


def free_port():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def nginx_backend_conf(root, port):
    return """
worker_processes 1;
pid %(root)s/backend.pid;
error_log %(root)s/backend.err warn;
events { worker_connections 1024; }
http {
    access_log off;
    client_body_temp_path %(root)s/b-body;
    proxy_temp_path %(root)s/b-proxy;
    fastcgi_temp_path %(root)s/b-fcgi;
    uwsgi_temp_path %(root)s/b-uwsgi;
    scgi_temp_path %(root)s/b-scgi;
    keepalive_requests 1000000;
    keepalive_timeout 120s;
    server {
        listen 127.0.0.1:%(port)d;
        location / { default_type text/plain; return 200 "ok\\n"; }
    }
}
""" % {"root": root, "port": port}


def nginx_proxy_conf(root, port, upstream):
    return """
worker_processes auto;
pid %(root)s/nginx.pid;
error_log %(root)s/nginx.err warn;
events { worker_connections 1024; }
http {
    access_log off;
    client_body_temp_path %(root)s/n-body;
    proxy_temp_path %(root)s/n-proxy;
    fastcgi_temp_path %(root)s/n-fcgi;
    uwsgi_temp_path %(root)s/n-uwsgi;
    scgi_temp_path %(root)s/n-scgi;
    keepalive_requests 1000000;
    keepalive_timeout 120s;
    map $http_authorization $gf_auth {
        default         403;
        ""              401;
        "Bearer %(token)s" 200;
    }
    upstream bench {
        server 127.0.0.1:%(upstream)d max_fails=1 fail_timeout=5s;
        keepalive 32;
    }
    server {
        listen 127.0.0.1:%(port)d;
        location %(prefix)s {
            if ($gf_auth = 401) { return 401; }
            if ($gf_auth = 403) { return 403; }
            proxy_http_version 1.1;
            proxy_set_header Connection "";
            proxy_set_header Authorization "";
            proxy_next_upstream error timeout;
            proxy_pass http://bench/;
        }
    }
}
""" % {"root": root, "port": port, "upstream": upstream, "token": TOKEN, "prefix": PREFIX}


def haproxy_conf(root, port, upstream):
    return """
global
    master-worker
    stats socket %(root)s/admin.sock mode 600 level admin
defaults
    mode http
    timeout connect 5s
    timeout client 120s
    timeout server 120s
    timeout http-keep-alive 120s
    option http-keep-alive
    retries 1
    option redispatch
    retry-on conn-failure empty-response response-timeout
frontend services
    bind 127.0.0.1:%(port)d
    # The route is decided once, on the path as it came: the prefix is stripped below, and an
    # ACL is evaluated again wherever it is used.
    http-request set-var(txn.gf_run) str(bench) if { path_beg %(prefix)s }
    acl svc_bench var(txn.gf_run) -m str bench
    http-request deny deny_status 401 if svc_bench !{ req.hdr(authorization) -m beg "Bearer " }
    http-request set-var(txn.gf_digest) req.hdr(authorization),regsub("^Bearer ",""),sha2(256),hex,lower if svc_bench
    http-request deny deny_status 403 if svc_bench !{ var(txn.gf_digest) -m str -f %(root)s/digests.lst }
    http-request del-header authorization if svc_bench
    http-request replace-path %(prefix_re)s(.*) /\\1 if svc_bench
    use_backend svc_bench if svc_bench
backend svc_bench
    option httpchk GET /
    http-reuse always
    server replica0 127.0.0.1:%(upstream)d check inter 2s fall 2 rise 1
""" % {"root": root, "port": port, "upstream": upstream, "prefix": PREFIX,
       "prefix_re": "^" + PREFIX.replace(".", "\\.")}


class Stack:
    """The three servers, each its own process group, stopped in stop() whatever happened."""

    def __init__(self, root):
        self.root = root
        self.procs = []

    def start(self, name, argv):
        log = open(os.path.join(self.root, name + ".log"), "w")
        proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT,
                                start_new_session=True)
        self.procs.append((name, proc, log))
        return proc

    def stop(self):
        for _name, proc, _log in self.procs:
            if proc.poll() is None:
                try:
                    os.killpg(proc.pid, signal.SIGTERM)
                except ProcessLookupError:
                    pass
        for _name, proc, log in self.procs:
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
            log.close()

    def log(self, name):
        path = os.path.join(self.root, name + ".log")
        with open(path) as f:
            return f.read()[-2000:]


def wait_port(port, what, stack, timeout=10.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return
        except OSError:
            time.sleep(0.05)
    raise SystemExit("proxy_latency: %s did not listen on port %d: %s"
                     % (what, port, stack.log(what)))


async def read_response(reader):
    head = await reader.readuntil(b"\r\n\r\n")
    status = int(head.split(b" ", 2)[1])
    length = 0
    for line in head.split(b"\r\n")[1:]:
        name, _sep, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            length = int(value)
    body = await reader.readexactly(length) if length else b""
    return status, body


def request(path, token):
    auth = ("Authorization: Bearer %s\r\n" % token) if token else ""
    return ("GET %s HTTP/1.1\r\nHost: bench\r\n%s\r\n" % (path, auth)).encode()


async def once(port, path, token):
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(request(path, token))
    await writer.drain()
    status, body = await read_response(reader)
    writer.close()
    return status, body


class Target:
    def __init__(self, name, port, path, token, connections):
        self.name, self.port = name, port
        self.payload = request(path, token)
        self.connections = connections
        self.idle = []
        self.opened = 0
        self.latencies = []
        self.lateness = []
        self.errors = 0

    async def connect(self):
        reader, writer = await asyncio.open_connection("127.0.0.1", self.port)
        writer.transport.get_extra_info("socket").setsockopt(
            socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.opened += 1
        return reader, writer

    async def open_pool(self):
        self.idle = [await self.connect() for _unused in range(self.connections)]
        self.opened = 0

    async def send(self, scheduled, record):
        conn = self.idle.pop() if self.idle else await self.connect()
        reader, writer = conn
        start = time.perf_counter()
        try:
            writer.write(self.payload)
            status, body = await read_response(reader)
        except (OSError, asyncio.IncompleteReadError):
            self.errors += record
            writer.close()
            return
        end = time.perf_counter()
        self.idle.append(conn)
        if record:
            if status != 200 or body != BODY:
                self.errors += 1
            self.latencies.append(end - start)
            self.lateness.append(start - scheduled)

    def close(self):
        for _reader, writer in self.idle:
            writer.close()


async def load(targets, rate, seconds, warmup):
    for target in targets:
        await target.open_pool()
    interval = 1.0 / rate
    ticks = int((warmup + seconds) * rate)
    warm_ticks = int(warmup * rate)
    loop = asyncio.get_running_loop()
    pending = set()
    t0 = time.perf_counter() + 0.05
    for i in range(ticks):
        scheduled = t0 + i * interval
        delay = scheduled - time.perf_counter()
        if delay > 0:
            await asyncio.sleep(delay)
        order = targets[i % len(targets):] + targets[:i % len(targets)]
        for target in order:
            task = loop.create_task(target.send(time.perf_counter(), i >= warm_ticks))
            pending.add(task)
            task.add_done_callback(pending.discard)
    if pending:
        await asyncio.wait(pending, timeout=30)
    for target in targets:
        target.close()


def percentile(values, q):
    ordered = sorted(values)
    if not ordered:
        return float("nan")
    index = min(len(ordered) - 1, max(0, int(round(q / 100.0 * len(ordered) + 0.5)) - 1))
    return ordered[index]


def summary(target):
    ms = [v * 1000.0 for v in target.latencies]
    late = [v * 1000.0 for v in target.lateness]
    return {"requests": len(ms), "errors": target.errors, "extra_connections": target.opened,
            "p50_ms": percentile(ms, 50), "p90_ms": percentile(ms, 90),
            "p99_ms": percentile(ms, 99), "max_ms": max(ms) if ms else float("nan"),
            "send_late_p99_ms": percentile(late, 99)}


async def check_auth(name, port):
    """The proxy answers 200 with the token, 401 without, 403 with another; body as the backend's."""
    path = PREFIX + "v1/x"
    got = {"token": await once(port, path, TOKEN), "none": await once(port, path, None),
           "wrong": await once(port, path, "not-the-token")}
    want = {"token": 200, "none": 401, "wrong": 403}
    bad = {k: v[0] for k, v in got.items() if v[0] != want[k]}
    if bad or got["token"][1] != BODY:
        raise SystemExit("proxy_latency: %s is not configured as expected: %s (want %s)"
                         % (name, bad or got["token"], want))


def machine():
    cpus = os.cpu_count()
    return "%s, %d cores, Python %s" % (platform.platform(terse=True), cpus,
                                        platform.python_version())


def version(argv):
    proc = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, check=False)
    return proc.stdout.decode(errors="replace").splitlines()[0].strip()


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rate", type=float, default=200.0, help="requests/s per target")
    parser.add_argument("--seconds", type=float, default=30.0, help="measured seconds")
    parser.add_argument("--warmup", type=float, default=2.0, help="unrecorded seconds first")
    parser.add_argument("--connections", type=int, default=8,
                        help="keep-alive connections per target")
    parser.add_argument("--json", action="store_true", help="print a JSON record")
    args = parser.parse_args(argv)
    for binary in ("haproxy", "nginx"):
        if not shutil.which(binary, path=os.environ.get("PATH", "") + ":/usr/sbin"):
            raise SystemExit("proxy_latency: %s is not installed: apt-get install -y haproxy "
                             "nginx-light" % binary)
    haproxy_bin = shutil.which("haproxy", path=os.environ.get("PATH", "") + ":/usr/sbin")
    nginx_bin = shutil.which("nginx", path=os.environ.get("PATH", "") + ":/usr/sbin")

    root = tempfile.mkdtemp(prefix="gpufleet-proxy-bench-")
    stack = Stack(root)
    try:
        ports = {"backend": free_port(), "haproxy": free_port(), "nginx": free_port()}
        with open(os.path.join(root, "digests.lst"), "w") as f:
            f.write(hashlib.sha256(b"someone-else").hexdigest() + "\n")
            f.write(hashlib.sha256(TOKEN.encode()).hexdigest() + "\n")
        files = {"backend.conf": nginx_backend_conf(root, ports["backend"]),
                 "nginx.conf": nginx_proxy_conf(root, ports["nginx"], ports["backend"]),
                 "haproxy.cfg": haproxy_conf(root, ports["haproxy"], ports["backend"])}
        for name, text in files.items():
            with open(os.path.join(root, name), "w") as f:
                f.write(text)
        user = ["-g", "daemon off;" + (" user root;" if os.geteuid() == 0 else "")]
        stack.start("backend", [nginx_bin, "-p", root, "-e", root + "/backend.err",
                                "-c", root + "/backend.conf"] + user)
        stack.start("nginx", [nginx_bin, "-p", root, "-e", root + "/nginx.err",
                              "-c", root + "/nginx.conf"] + user)
        stack.start("haproxy", [haproxy_bin, "-W", "-db", "-f", root + "/haproxy.cfg"])
        for name, port in ports.items():
            wait_port(port, name, stack)
        time.sleep(0.5)  # HAProxy's first health check
        asyncio.run(check_auth("haproxy", ports["haproxy"]))
        asyncio.run(check_auth("nginx", ports["nginx"]))

        path = PREFIX + "v1/x"
        targets = [Target("direct", ports["backend"], "/v1/x", None, args.connections),
                   Target("haproxy", ports["haproxy"], path, TOKEN, args.connections),
                   Target("nginx", ports["nginx"], path, TOKEN, args.connections)]
        started = time.time()
        asyncio.run(load(targets, args.rate, args.seconds, args.warmup))
        results = {t.name: summary(t) for t in targets}
        record = {
            "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(started)),
            "machine": machine(), "load_avg": os.getloadavg(),
            "haproxy": version([haproxy_bin, "-v"]), "nginx": version([nginx_bin, "-v"]),
            "rate": args.rate, "seconds": args.seconds, "connections": args.connections,
            "results": results,
        }
    finally:
        stack.stop()
        shutil.rmtree(root, ignore_errors=True)

    direct = results["direct"]
    if args.json:
        print(json.dumps(record, indent=2))
    else:
        print("%s; %s; %s; load average %s" % (record["machine"], record["haproxy"],
                                               record["nginx"],
                                               " ".join("%.2f" % v for v in record["load_avg"])))
        print("%d req/s per target for %gs, interleaved, %d keep-alive connections each"
              % (args.rate, args.seconds, args.connections))
        print("| target | requests | errors | p50 ms | p90 ms | p99 ms | max ms "
              "| p50 overhead | p99 overhead | p99 ratio |")
        print("|---|---|---|---|---|---|---|---|---|---|")
        for name, res in results.items():
            extra = ("| - | - | - |" if name == "direct" else
                     "| %+.3f ms | %+.3f ms | %.2fx |" % (
                         res["p50_ms"] - direct["p50_ms"], res["p99_ms"] - direct["p99_ms"],
                         res["p99_ms"] / direct["p99_ms"]))
            print("| %s | %d | %d | %.3f | %.3f | %.3f | %.3f %s"
                  % (name, res["requests"], res["errors"], res["p50_ms"], res["p90_ms"],
                     res["p99_ms"], res["max_ms"], extra))
        print("client pacing: p99 lateness %.3f ms; extra connections opened: %s"
              % (max(r["send_late_p99_ms"] for r in results.values()),
                 {n: r["extra_connections"] for n, r in results.items()}))
    worst = max(results[n]["p99_ms"] - direct["p99_ms"] for n in ("haproxy", "nginx"))
    errors = sum(r["errors"] for r in results.values())
    print("goal p99 overhead <= 2 ms: haproxy %+.3f ms, nginx %+.3f ms%s"
          % (results["haproxy"]["p99_ms"] - direct["p99_ms"],
             results["nginx"]["p99_ms"] - direct["p99_ms"],
             "; %d failed requests" % errors if errors else ""), file=sys.stderr)
    return 0 if worst <= 2.0 and not errors else 1


if __name__ == "__main__":
    sys.exit(main())
