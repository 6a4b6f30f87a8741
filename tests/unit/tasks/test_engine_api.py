# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The host helper's use of the Docker Engine API on its Unix socket
(tasks.hostside.engineside._engine).

A small HTTP server on a Unix socket in a temporary folder stands for the engine: it answers
the few requests the helper makes and records them. No ``docker`` command is on PATH unless a
test puts the fake CLI there (the ``docker`` fixture), so an answer can only have come from the
socket.
"""

from __future__ import annotations

import json
import os
import socketserver
import threading
from http.server import BaseHTTPRequestHandler
from urllib.parse import parse_qs, urlparse

import pytest
from ansible_collections.gpufleet.cluster.plugins.module_utils.tasks.hostside import (
    booking,
    engineside,
    nodeside,
)

from tests.unit.tasks.fakes import inspect_entry, write_state


class Engine(object):
    """What the fake engine holds and what it was asked."""

    def __init__(self):
        self.containers = {}   # id -> inspect entry
        self.images = {}       # reference -> inspect entry
        self.requests = []
        self.refuse_version = False


def _handler(engine):
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args):
            pass

        def _answer(self, status, body=None):
            data = json.dumps(body).encode("utf-8") if body is not None else b""
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def _route(self, method):
            url = urlparse(self.path)
            query = parse_qs(url.query)
            engine.requests.append((method, url.path, query))
            if engine.refuse_version:
                return self._answer(400, {"message": "client version 1.24 is too old"})
            parts = url.path.split("/")
            if parts[1] != "v1.24":
                return self._answer(404, {"message": "page not found"})
            path = "/" + "/".join(parts[2:])
            if method == "GET" and path == "/containers/json":
                wanted = json.loads(query["filters"][0])["label"][0]
                key, value = (wanted.split("=", 1) + [""])[:2]
                found = [{"Id": cid} for cid, c in sorted(engine.containers.items())
                         if key in c["Config"]["Labels"] and (
                             not value or c["Config"]["Labels"][key] == value)]
                return self._answer(200, found)
            if path.startswith("/containers/"):
                ident = path[len("/containers/"):]
                if method == "GET" and ident.endswith("/json"):
                    ident = ident[:-len("/json")]
                cid = next((k for k, c in engine.containers.items()
                            if ident in (k, c["Name"].lstrip("/"))), None)
                if cid is None:
                    return self._answer(404, {"message": "No such container: " + ident})
                if method == "DELETE":
                    del engine.containers[cid]
                    return self._answer(204)
                return self._answer(200, engine.containers[cid])
            if method == "GET" and path.startswith("/images/") and path.endswith("/json"):
                ref = path[len("/images/"):-len("/json")]
                if ref not in engine.images:
                    return self._answer(404, {"message": "No such image: " + ref})
                return self._answer(200, engine.images[ref])
            return self._answer(404, {"message": "page not found"})

        def do_GET(self):
            self._route("GET")

        def do_DELETE(self):
            self._route("DELETE")

    return Handler


def _use_socket(monkeypatch, tmp_path, path):
    """The helper's engine is the Unix socket ``path`` (no context, no cached choice)."""
    monkeypatch.setenv("DOCKER_HOST", "unix://" + path)
    monkeypatch.delenv("DOCKER_CONTEXT", raising=False)
    monkeypatch.setenv("DOCKER_CONFIG", str(tmp_path / "dockercfg"))
    monkeypatch.setattr(engineside, "_ENGINE", {})


class _Server(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
    daemon_threads = True


@pytest.fixture
def engine(tmp_path, monkeypatch):
    state = Engine()
    path = str(tmp_path / "docker.sock")
    server = _Server(path, _handler(state))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    empty = tmp_path / "nobin"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))   # no docker command: only the socket answers
    _use_socket(monkeypatch, tmp_path, path)
    yield state
    server.shutdown()
    server.server_close()


def test_status_comes_from_the_engine_api_with_the_state_files(engine, run_root):
    engine.containers["c1"] = inspect_entry("train-0-0", run="train", job=0, network="10.0.0.5")
    engine.containers["c2"] = inspect_entry("train-1-0", run="train", job=1, status="exited",
                                            exit_code=3, network="host")
    engine.containers["c3"] = inspect_entry("other-0-0", run="other", job=0)
    write_state(run_root, "train", 1, exit_code="3\n", reason="done\n")

    found = nodeside.op_status({"run": "train"})["containers"]

    assert [(c["name"], c["state"], c["exit_code"], c["address"]) for c in found] == [
        ("train-0-0", "running", 0, "10.0.0.5"), ("train-1-0", "exited", 3, "localhost")]
    assert found[1]["files"] == {"running": None, "reason": "done", "exit_code": "3"}
    listing = engine.requests[0]
    assert listing[:2] == ("GET", "/v1.24/containers/json")
    assert listing[2]["all"] == ["1"]
    assert json.loads(listing[2]["filters"][0]) == {"label": ["gpufleet.run=train"]}
    # Every task container, when no run is named.
    everything = nodeside.op_status({})["containers"]
    assert sorted(c["name"] for c in everything) == ["other-0-0", "train-0-0", "train-1-0"]


def test_image_info_reads_the_image_config_and_says_when_it_is_missing(engine):
    engine.images["registry:5000/team/img:1"] = {"Config": {
        "Entrypoint": ["/e"], "Cmd": ["run"], "WorkingDir": "/w"}}

    assert nodeside.op_image_info({"image": "registry:5000/team/img:1"}) == {
        "present": True, "entrypoint": ["/e"], "cmd": ["run"], "working_dir": "/w"}
    assert nodeside.op_image_info({"image": "absent:2"}) == {"present": False}
    assert engine.requests[0][1] == "/v1.24/images/registry:5000/team/img:1/json"


def test_remove_and_start_use_the_engine_for_what_it_answers(engine, run_root):
    engine.containers["c1"] = inspect_entry("old-0-0", run="old", job=0, status="exited")
    write_state(run_root, "old", 0, exit_code="0\n")

    assert nodeside.op_remove({"run": "old"}) == {"removed": ["old-0-0"]}
    assert engine.containers == {}
    assert not (run_root / "old").exists()
    assert ("DELETE", "/v1.24/containers/old-0-0", {"force": ["1"]}) in engine.requests
    # start finds an existing container through the engine and keeps it
    engine.containers["c9"] = inspect_entry("new-0-0", run="new", job=0)
    job = {"run": "new", "job_num": 0, "container": "new-0-0", "files": {},
           "docker_args": [], "image": "img"}
    assert nodeside.op_start({"job": job}) == {"started": False, "exists": True}


def test_a_claim_clears_the_earlier_run_and_answers_the_image(
        engine, run_root, monkeypatch, tmp_path):
    monkeypatch.setattr(booking, "BOOK_ROOT", str(tmp_path / "book"))
    engine.containers["c1"] = inspect_entry("train-0-0", run="train", job=0, status="exited")
    write_state(run_root, "train", 0, exit_code="0\n")
    engine.images["img:1"] = {"Config": {"Entrypoint": None, "Cmd": ["sh"], "WorkingDir": ""}}
    claim = {"run": "train", "run_id": "new", "submission": 0, "jobs": [0], "blocks": 1,
             "total_blocks": 1, "gpu_ids": [], "whole": True, "by": "me", "lease": 60}

    answer = booking.op_claim(dict(claim, replace=True, image="img:1"))

    assert answer["claimed"] and answer["replaced"] == ["train-0-0"]
    assert answer["image"] == {"present": True, "entrypoint": None, "cmd": ["sh"],
                               "working_dir": ""}
    assert engine.containers == {} and not (run_root / "train").exists()
    # the new claim stays (the removal took only the old run's containers and folders)
    assert [c["run_id"] for c in booking.live_claims([])] == ["new"]
    # A refused claim removes nothing and asks nothing.
    engine.containers["c2"] = inspect_entry("other-0-0", run="other", job=0, status="exited")
    refused = booking.op_claim(dict(claim, run="other", run_id="x", replace=True,
                                    image="img:1"))
    assert not refused["claimed"] and "image" not in refused and "replaced" not in refused
    assert "c2" in engine.containers


def test_an_engine_that_refuses_the_api_version_leaves_it_to_the_cli(
        engine, docker, run_root):
    engine.refuse_version = True
    docker.on(["ps"], stdout="")

    assert nodeside.op_status({"run": "train"}) == {"containers": []}
    assert docker.calls() == [["ps", "-a", "-q", "--no-trunc", "--filter",
                               "label=gpufleet.run=train"]]
    # and not again in this request
    assert engineside._ENGINE["socket"] is None


@pytest.mark.parametrize("setting", ["tcp", "context", "config", "file", "missing"])
def test_the_socket_is_used_only_where_the_cli_would_reach_the_same_engine(
        tmp_path, monkeypatch, setting):
    sock = tmp_path / "s.sock"
    server = _Server(str(sock), _handler(Engine()))
    try:
        monkeypatch.setenv("DOCKER_HOST", "unix://" + str(sock))
        monkeypatch.delenv("DOCKER_CONTEXT", raising=False)
        config = tmp_path / "cfg"
        config.mkdir()
        monkeypatch.setenv("DOCKER_CONFIG", str(config))
        assert engineside._choose_socket() == str(sock)
        if setting == "tcp":
            monkeypatch.setenv("DOCKER_HOST", "tcp://10.0.0.1:2375")
        elif setting == "context":
            monkeypatch.setenv("DOCKER_CONTEXT", "remote")
        elif setting == "config":
            (config / "config.json").write_text(json.dumps({"currentContext": "remote"}))
        elif setting == "file":
            plain = tmp_path / "plain"
            plain.write_text("")
            monkeypatch.setenv("DOCKER_HOST", "unix://" + str(plain))
        else:
            monkeypatch.setenv("DOCKER_HOST", "unix://" + str(tmp_path / "none.sock"))
        assert engineside._choose_socket() is None
    finally:
        server.server_close()
        if os.path.exists(str(sock)):
            os.remove(str(sock))


def test_without_docker_host_the_default_socket_is_the_one(monkeypatch, tmp_path):
    monkeypatch.delenv("DOCKER_HOST", raising=False)
    monkeypatch.delenv("DOCKER_CONTEXT", raising=False)
    monkeypatch.setenv("DOCKER_CONFIG", str(tmp_path))
    sock = tmp_path / "default.sock"
    server = _Server(str(sock), _handler(Engine()))
    try:
        monkeypatch.setattr(engineside, "DOCKER_SOCKET", str(sock))
        assert engineside._choose_socket() == str(sock)
    finally:
        server.server_close()


def _raw_engine(path, response):
    """A one-shot server on Unix socket ``path`` that reads a request and sends ``response``
    (bytes) whole; returns the list the request is put into."""
    import socket

    asked = []
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    listener.listen(1)

    def serve():
        conn, _addr = listener.accept()
        data = b""
        while b"\r\n\r\n" not in data:
            data += conn.recv(4096)
        asked.append(data)
        conn.sendall(response)
        conn.close()
        listener.close()

    threading.Thread(target=serve, daemon=True).start()
    return asked


def test_a_chunked_answer_is_put_together(monkeypatch, tmp_path):
    """An engine may answer in chunks: the body is their concatenation, whatever the split."""
    path = str(tmp_path / "chunked.sock")
    body = json.dumps([{"Id": "abc"}, {"Id": "d\u00e9f"}]).encode("utf-8")
    chunked = b"".join(b"%x\r\n%s\r\n" % (len(part), part) for part in (body[:7], body[7:]))
    asked = _raw_engine(path, b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                              b"Transfer-Encoding: chunked\r\n\r\n" + chunked + b"0\r\n\r\n")
    _use_socket(monkeypatch, tmp_path, path)

    assert engineside._container_ids("gpufleet.run=a b") == ["abc", "d\u00e9f"]
    request_line = asked[0].split(b"\r\n")[0].decode("ascii")
    method, url, version = request_line.split(" ")
    assert (method, version) == ("GET", "HTTP/1.0")
    path_part, query = url.split("?")
    assert path_part == "/v1.24/containers/json"
    assert parse_qs(query) == {"all": ["1"], "filters": ['{"label": ["gpufleet.run=a b"]}']}


def test_a_broken_answer_leaves_the_rest_of_the_request_to_the_cli(monkeypatch, tmp_path):
    path = str(tmp_path / "broken.sock")
    _raw_engine(path, b"this is not HTTP\r\n\r\n")
    _use_socket(monkeypatch, tmp_path, path)

    with pytest.raises(engineside._EngineUnavailable):
        engineside._engine("GET", "/containers/json")
    assert engineside._ENGINE["socket"] is None   # the CLI from now on in this request
