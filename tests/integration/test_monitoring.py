"""playbooks/monitoring.yml on the shared local fleet, scraped by a real Prometheus.

The monitoring role installs Debian's own prometheus-node-exporter in every node (the local
nodes reach Debian's mirror; they have no systemd, so the package's init script runs it), bound
to the node's fleet address; the playbook writes the file_sd target file; Debian's Prometheus
(the package's binary, unpacked on this machine, no service installed) scrapes it and answers a
PromQL query over its HTTP API.
"""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

import pytest
from ansible_collections.gpufleet.cluster.plugins.module_utils.backends import local

from gpufleet.runner import run_playbook

from .task_world import FLEET


def prometheus_binary():
    """Prometheus from PATH, else from Debian's package, downloaded once and unpacked into the
    cache (no service is installed or started)."""
    found = shutil.which("prometheus")
    if found:
        return found
    cache = Path.home() / ".cache" / "gpufleet" / "prometheus"
    binary = cache / "usr" / "bin" / "prometheus"
    if not binary.exists():
        download = cache / "download"
        download.mkdir(parents=True, exist_ok=True)
        subprocess.run(["apt-get", "download", "prometheus"], cwd=str(download), check=True,
                       capture_output=True)
        deb = sorted(download.glob("prometheus_*.deb"))[-1]
        subprocess.run(["dpkg-deb", "-x", str(deb), str(cache)], check=True)
    return str(binary)


def free_port():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def query(port, promql):
    url = "http://127.0.0.1:%d/api/v1/query?%s" % (port, urllib.parse.urlencode({"query": promql}))
    with urllib.request.urlopen(url, timeout=5) as response:
        body = json.load(response)
    assert body["status"] == "success", body
    return body["data"]["result"]


@pytest.fixture
def prometheus(tmp_path):
    """A Prometheus on a free port reading gpufleet-*.json targets from tmp_path/targets."""
    targets = tmp_path / "targets"
    targets.mkdir()
    config = tmp_path / "prometheus.yml"
    config.write_text(
        "global:\n  scrape_interval: 2s\n  evaluation_interval: 2s\n"
        "scrape_configs:\n  - job_name: gpufleet\n    file_sd_configs:\n"
        "      - files: ['%s/gpufleet-*.json']\n        refresh_interval: 2s\n" % targets)
    port = free_port()
    log = (tmp_path / "prometheus.log").open("w")
    proc = subprocess.Popen(
        [prometheus_binary(), "--config.file=%s" % config,
         "--storage.tsdb.path=%s" % (tmp_path / "data"),
         "--web.listen-address=127.0.0.1:%d" % port],
        stdout=log, stderr=subprocess.STDOUT)
    try:
        yield {"port": port, "targets": targets, "proc": proc, "log": tmp_path / "prometheus.log"}
    finally:
        proc.terminate()
        proc.wait(timeout=30)
        log.close()


def wait_for(check, seconds, what):
    """Poll ``check()`` until it returns something true; fail naming ``what`` after ``seconds``."""
    deadline = time.monotonic() + seconds
    while True:
        try:
            found = check()
        except (OSError, urllib.error.URLError, AssertionError):
            found = None
        if found:
            return found
        if time.monotonic() > deadline:
            raise AssertionError("no %s after %d s" % (what, seconds))
        time.sleep(1)


def test_prometheus_scrapes_every_node_of_the_fleet(world, prometheus, monkeypatch):
    # A fleet file as the inventory, as docs/monitoring.md says: the plugin enabled.
    monkeypatch.setenv("ANSIBLE_INVENTORY_ENABLED", "gpufleet.cluster.fleet,yaml,ini")
    targets = prometheus["targets"]
    # A fleet that has no hosts any more: its file is emptied, so its targets go away.
    (targets / "gpufleet-gone.json").write_text('[{"targets": ["10.255.0.9:9100"]}]\n')
    fleet_file = world["base"] / "fleet.dstack.yml"
    result = run_playbook("monitoring.yml", {"prometheus_targets_dir": str(targets)},
                          inventory=str(fleet_file))
    assert result.ok, result.stdout[-4000:]

    written = result.stats["gpufleet_prometheus_targets"]
    own = str(targets / ("gpufleet-%s.json" % FLEET))
    assert written.get(own) == {"fleet": FLEET, "groups": 3, "changed": True}, (
        written, result.stdout[-4000:])
    groups = json.loads(Path(own).read_text())
    names = ["%s-%d" % (FLEET, num) for num in range(3)]
    assert [g["labels"] for g in groups] == [
        {"fleet": FLEET, "instance": name, "backend": "local", "gpu": "none", "exporter": "node"}
        for name in names]
    assert sorted(g["targets"][0] for g in groups) == sorted("%s:9100" % ip for ip in world["ips"])
    assert json.loads((targets / "gpufleet-gone.json").read_text()) == []

    # The exporter listens on the node's fleet address only.
    sockets = world["docker"].run("exec", local.container_name(FLEET, 0), "ss", "-ltnH")
    assert "%s:9100 " % world["ips"][0] in sockets, sockets
    assert not any(":9100 " in line and world["ips"][0] not in line
                   for line in sockets.splitlines()), sockets

    def all_nodes():
        found = query(prometheus["port"], 'count by (instance, fleet, backend) '
                      '(node_cpu_seconds_total{fleet="%s"})' % FLEET)
        return found if len(found) == 3 else None

    series = wait_for(all_nodes, 90, "node_cpu_seconds_total for the 3 nodes (log: %s)"
                      % prometheus["log"])
    assert sorted(s["metric"]["instance"] for s in series) == names
    assert all(s["metric"]["fleet"] == FLEET and s["metric"]["backend"] == "local"
               for s in series), series
    up = query(prometheus["port"], 'up{fleet="%s", exporter="node"}' % FLEET)
    assert sorted((s["metric"]["instance"], s["value"][1]) for s in up) == [
        (name, "1") for name in names]
    # The emptied file's target was dropped (Prometheus may have scraped it once before).
    wait_for(lambda: query(prometheus["port"], 'up{instance="10.255.0.9:9100"}') == [], 30,
             "drop of the emptied file's target")
