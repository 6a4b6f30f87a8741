# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Webhooks on a host (tasks.hostside.notifyside): the hooks kept root's only, the tick that
queues what each hook wants from the event record and posts it, tries again with backoff and
drops it after a day, and the timer or loop that runs the tick from the helper the host last
compiled. NOTIFY_ROOT, EVENTS_ROOT and RUN_ROOT point into a temporary folder; nothing is
posted over the network but in the last test, to a server of the test's own.
"""

from __future__ import annotations

import json
import marshal
import os
import stat
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, HTTPServer

import pytest
from ansible_collections.gpufleet.cluster.plugins.module_utils.tasks.hostside import (
    bootstrap,
    eventside,
    nodeside,
    notifyside,
)

T0 = 1780000000.0
URL = "https://hooks.example/services/T0/B1/the-secret"


@pytest.fixture
def host(tmp_path, monkeypatch):
    monkeypatch.setattr(notifyside, "NOTIFY_ROOT", str(tmp_path / "notify"))
    monkeypatch.setattr(eventside, "EVENTS_ROOT", str(tmp_path / "events"))
    monkeypatch.setattr(eventside, "RUN_ROOT", str(tmp_path / "runs"))
    monkeypatch.setattr(nodeside, "RUN_ROOT", str(tmp_path / "runs"))
    monkeypatch.setattr(notifyside, "op_status", lambda payload: {"containers": []})
    monkeypatch.setattr(notifyside, "tick_ensure", lambda: "loop")
    monkeypatch.setattr(notifyside, "tick_stop", lambda: None)
    return tmp_path


class Receiver:
    """Stands in for the URL: answers each post with the next code given (200 when none)."""

    def __init__(self, *codes):
        self.codes = list(codes)
        self.posts = []

    def __call__(self, url, body):
        self.posts.append((url, body))
        code = self.codes.pop(0) if self.codes else 200
        return None if code == 200 else "HTTP %d" % code


def hook(**given):
    made = {"id": "ops", "url": URL, "on": [], "fleet": None, "format": "json", "by": "ann"}
    made.update(given)
    return made


def ended(run="train", job=0, code=0, reason=None, nodes=1, fleet="gpus", at=T0 + 10,
          kind="job.ended"):
    return {"id": "%s/%d/0/%s" % (run, job, kind), "at": at, "kind": kind, "run": run,
            "job": job, "submission": 0, "fleet": fleet, "exit_code": code, "reason": reason,
            "nodes": nodes, "policy": {"type": "task"}}


def test_a_hook_is_kept_for_root_only_and_set_again_unchanged(host):
    assert notifyside.op_notify_set({"hook": hook()}) == {"set": True, "changed": True,
                                                          "tick": "loop"}
    path = host / "notify" / "hooks.json"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE((host / "notify").stat().st_mode) == 0o700
    assert notifyside.op_notify_set({"hook": hook()})["changed"] is False
    assert notifyside.op_notify_set({"hook": hook(format="slack")})["changed"] is True
    with pytest.raises(nodeside.Failure, match="http"):
        notifyside.op_notify_set({"hook": hook(url="file:///etc/shadow")})


def test_the_list_never_shows_more_of_the_url_than_scheme_and_host(host):
    notifyside.op_notify_set({"hook": hook(url="https://user:pw@hooks.example:8443/x?k=v")})
    (shown,) = notifyside.op_notify_list({})["hooks"]
    assert shown["url"] == "https://hooks.example:8443/..."
    assert "pw" not in json.dumps(shown) and "k=v" not in json.dumps(shown)


def test_a_tick_posts_what_was_recorded_after_the_hook_was_set(host):
    eventside.event_append([ended(run="before")])
    notifyside.op_notify_set({"hook": hook()})
    eventside.event_append([ended(), ended(run="dist", nodes=2)])
    receiver = Receiver()

    answer = notifyside.notify_tick(now=T0 + 20, post=receiver, host="gpus-0")

    assert answer["delivered"] == 3 and answer["waiting"] == 0
    events = [body["event"] for _url, body in receiver.posts]
    # A run of one job ends with its job; a run of two jobs is said by its jobs only.
    assert [(e["kind"], e["run"]) for e in events] == [
        ("job.ended", "train"), ("run.status", "train"), ("job.ended", "dist")]
    assert events[1]["status"] == "done" and events[1]["id"] == "train/None/0/run.status/done"
    assert all(url == URL and body["host"] == "gpus-0" and body["hook"] == "ops"
               for url, body in receiver.posts)
    # Nothing twice.
    assert notifyside.notify_tick(now=T0 + 40, post=receiver)["delivered"] == 0


def test_a_run_of_one_job_ends_as_its_job_did():
    statuses = [notifyside._notify_run_end(ended(code=c, reason=r))["status"]
                for c, r in ((0, None), (1, None), (143, "terminated_by_user"),
                             (0, "done_by_runner"), (137, "max_duration_exceeded"))]
    assert statuses == ["done", "failed", "terminated", "done", "terminated"]
    assert notifyside._notify_run_end(ended(nodes=2)) is None
    assert notifyside._notify_run_end(dict(ended(), policy={"type": "service"})) is None


def test_a_multi_node_runs_end_is_posted_once_by_its_job_0s_host(host):
    """Job 0's wrapper wrote the run's end (every job told it theirs): the tick's sweep records
    one run.status, which the hook gets; the host of job 1 says only its job's end."""
    notifyside.op_notify_set({"hook": hook(on=["run.status"])})
    labels = {"gpufleet.run": "dist", "gpufleet.run-id": "id-dist", "gpufleet.submission": "0",
              "gpufleet.fleet": "gpus", "gpufleet.nodes": "2",
              "gpufleet.run-spec": json.dumps({"type": "task"})}
    for num, lines in ((0, "0 0 1 -\n1 3 1 -\n"), (1, None)):
        folder = host / "runs" / "dist" / str(num)
        (folder / "state").mkdir(parents=True)
        (folder / "record.json").write_text(json.dumps({
            "container": "dist-%d-0" % num, "labels": dict(labels, **{"gpufleet.job": str(num)})}))
        (folder / "created").write_text("c%d\n" % num)
        (folder / "state" / "running").write_text("1\n")
        (folder / "state" / "exit_code").write_text("%d\n" % (3 if num else 0))
        if lines:
            (folder / "state" / "run_end").write_text(lines)
    receiver = Receiver()
    notifyside.notify_tick(post=receiver, host="gpus-0")
    notifyside.notify_tick(post=receiver, host="gpus-0")
    assert [(b["event"]["kind"], b["event"]["status"], b["event"]["reason"])
            for _u, b in receiver.posts] == [("run.status", "failed", "job_failed")]
    assert receiver.posts[0][1]["event"]["id"] == "dist/id-dist/0/run.status/failed"


def test_a_hook_gets_only_the_kinds_and_fleet_it_asked_for_and_one_copy(host):
    notifyside.op_notify_set({"hook": hook(on=["run.status"], fleet="gpus")})
    eventside.event_append([ended(code=1), ended(run="other", fleet="cpus"),
                            {"id": "x/fleet", "at": T0, "kind": "fleet.applied",
                             "fleet": "gpus", "deliver": False}])
    receiver = Receiver()
    notifyside.notify_tick(now=T0 + 20, post=receiver)
    assert [(b["event"]["kind"], b["event"]["status"]) for _u, b in receiver.posts] == [
        ("run.status", "failed")]


def test_a_receiver_that_is_down_gets_it_later_with_backoff(host):
    notifyside.op_notify_set({"hook": hook(on=["job.ended"])})
    eventside.event_append([ended()])
    receiver = Receiver(503, 502)

    first = notifyside.notify_tick(now=T0 + 100, post=receiver)
    assert (first["failed"], first["waiting"]) == (1, 1)
    assert notifyside.notify_tick(now=T0 + 102, post=receiver)["failed"] == 0   # not due
    assert notifyside.notify_tick(now=T0 + 106, post=receiver)["failed"] == 1   # 5 s later
    state = json.loads((host / "notify" / "state.json").read_text())
    (item,) = state["outbox"]
    assert item["attempts"] == 2
    assert item["next_at"] == pytest.approx(T0 + 116, abs=1)   # then 10 s after that answer
    assert notifyside.notify_tick(now=T0 + 117, post=receiver)["delivered"] == 1
    assert len(receiver.posts) == 3
    (shown,) = notifyside.op_notify_list({})["hooks"]
    assert shown["deliveries"]["delivered"] == 1 and shown["deliveries"]["failed"] == 2
    assert shown["deliveries"]["last_error"] == "HTTP 502"


def test_a_delivery_that_never_goes_through_is_dropped_after_a_day(host):
    notifyside.op_notify_set({"hook": hook()})
    eventside.event_append([ended(nodes=2)])
    down = Receiver(*([500] * 100))
    notifyside.notify_tick(now=T0, post=down)
    answer = notifyside.notify_tick(now=T0 + notifyside.NOTIFY_KEEP + 1, post=down)
    assert (answer["expired"], answer["waiting"]) == (1, 0)


def test_a_removed_hook_takes_its_deliveries_with_it(host):
    notifyside.op_notify_set({"hook": hook()})
    eventside.event_append([ended(nodes=2)])
    notifyside.notify_tick(now=T0, post=Receiver(500))
    assert notifyside.op_notify_remove({"id": "ops"}) == {"removed": True}
    assert notifyside.op_notify_remove({"id": "ops"}) == {"removed": False}
    assert json.loads((host / "notify" / "state.json").read_text())["outbox"] == []
    assert notifyside.notify_tick(now=T0 + 60, post=Receiver()) == {"hooks": 0}


def test_a_slack_body_is_one_line_of_text(host):
    body = notifyside._notify_body(hook(format="slack"), ended(code=1), "gpus-0")
    assert body == {"text": "gpufleet on gpus-0: job.ended fleet=gpus run=train job=0 "
                            "exit_code=1"}
    plain = notifyside._notify_body(hook(), dict(ended(), deliver=True), "gpus-0")["event"]
    assert "policy" not in plain and "deliver" not in plain


def test_the_record_is_read_on_across_a_rotation(host, monkeypatch):
    eventside.event_append([ended(run="a")])
    cursor = eventside.event_end()
    eventside.event_append([ended(run="b")])
    monkeypatch.setattr(eventside, "EVENTS_ROTATE", 10)
    eventside.event_append([ended(run="c")])   # rotates: a's and b's lines are in log.1
    found, cursor = eventside.event_tail(cursor)
    assert [e["run"] for e in found] == ["b", "c"]
    assert eventside.event_tail(cursor)[0] == []


def test_the_tick_starts_a_loop_where_systemd_does_not_run(host, monkeypatch):
    monkeypatch.undo()
    monkeypatch.setattr(notifyside, "NOTIFY_ROOT", str(host / "notify"))
    os.makedirs(str(host / "notify"))
    started = []
    real = subprocess.Popen

    def popen(argv, **kwargs):
        started.append((argv, kwargs))
        # Stands in for the loop: a process whose command line names the tick's program.
        return real(["/bin/sh", "-c", "sleep 30; : %s" % (host / "notify" / "tick.py")])

    monkeypatch.setattr(subprocess, "Popen", popen)
    # A host without systemd, whatever this machine runs.
    monkeypatch.setattr(notifyside, "NOTIFY_SYSTEMD", str(host / "no-systemd"))
    (host / "notify" / "tick.pid").write_text("%d\n" % os.getpid())   # not the loop
    try:
        assert notifyside.tick_ensure() == "loop"
        ((argv, kwargs),) = started
        assert argv[:2] == ["/bin/sh", "-c"] and "sleep 15" in argv[2]
        assert argv[2].startswith("while :; do %s -S " % sys.executable)
        assert kwargs["start_new_session"] is True
        assert notifyside.tick_ensure() == "loop" and len(started) == 1   # alive: not again
        assert stat.S_IMODE((host / "notify" / "tick.py").stat().st_mode) == 0o600
    finally:
        pid = int((host / "notify" / "tick.pid").read_text())
        os.kill(pid, 9)
        os.waitpid(pid, 0)


def test_the_tick_program_runs_the_helper_kept_for_it(tmp_path):
    assert notifyside.NOTIFY_HELPER_CACHE == bootstrap.HELPER_CACHE
    root = tmp_path / "notify"
    root.mkdir(mode=0o700)
    said = tmp_path / "said"
    helper = "def serve(request):\n    open(%r, 'wb').write(request)\n" % str(said)
    tag = sys.implementation.cache_tag
    with open(str(root / ("helper." + tag)), "wb") as handle:
        marshal.dump(compile(helper, "gpufleet_node", "exec"), handle)
    program = root / "tick.py"
    program.write_text(notifyside.NOTIFY_TICK % str(root))

    subprocess.run([sys.executable, "-S", str(program)], check=True, timeout=30)
    assert json.loads(said.read_text()) == {"op": "tick"}


def test_a_post_reaches_a_real_receiver_and_a_refusal_is_an_error():
    got = []

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self):
            got.append(json.loads(self.rfile.read(int(self.headers["Content-Length"]))))
            self.send_response(204 if len(got) == 1 else 500)
            self.end_headers()

        def log_message(self, *args):
            pass

    server = HTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = "http://127.0.0.1:%d/hook" % server.server_port
    try:
        assert notifyside._notify_post(url, {"text": "hi"}) is None
        assert notifyside._notify_post(url, {"text": "again"}) == "HTTP 500"
    finally:
        server.shutdown()
        server.server_close()
    assert got == [{"text": "hi"}, {"text": "again"}]
    assert "refused" in notifyside._notify_post(url, {"text": "gone"})


def test_an_event_recorded_twice_is_posted_once(host):
    notifyside.op_notify_set({"hook": hook(on=["job.ended"])})
    eventside.event_append([ended(nodes=2)])
    receiver = Receiver()
    notifyside.notify_tick(now=T0, post=receiver)
    eventside.event_append([ended(nodes=2)])   # the same event again
    notifyside.notify_tick(now=T0 + 20, post=receiver)
    assert len(receiver.posts) == 1


def test_a_slow_receiver_never_holds_up_a_change_to_the_hooks(host):
    notifyside.op_notify_set({"hook": hook()})
    eventside.event_append([ended(nodes=2)])
    changed = []

    def post(url, body):
        # While the tick posts, a controller adds a hook: it must not wait for the post.
        changed.append(notifyside.op_notify_set({"hook": hook(id="other")})["changed"])
        return None

    worker = threading.Thread(target=notifyside.notify_tick, kwargs={"now": T0, "post": post})
    worker.start()
    worker.join(timeout=20)
    assert not worker.is_alive() and changed == [True]


def test_no_part_of_a_url_past_its_host_is_ever_shown_or_kept_in_an_error(host):
    notifyside.op_notify_set({"hook": hook(url="https://hooks.example?token=SECRET#frag")})
    (shown,) = notifyside.op_notify_list({})["hooks"]
    assert shown["url"] == "https://hooks.example/..."
    said = notifyside._notify_post("http://127.0.0.1:1/path-SECRET", {"text": "x"})
    assert said.startswith("URLError") and "SECRET" not in said
    said = notifyside._notify_post("https://ann:SECRET@hooks.example/x", {"text": "x"})
    assert "SECRET" not in said


def test_state_beyond_a_small_file_is_read_whole_and_never_reset(host):
    notifyside.op_notify_set({"hook": hook(on=["job.ended"])})
    eventside.event_append([ended(run="r%d" % n, nodes=2) for n in range(400)])
    notifyside.notify_tick(now=T0, post=Receiver(*([500] * 400)))
    assert (host / "notify" / "state.json").stat().st_size > 65536
    receiver = Receiver()
    for step in range(10):
        notifyside.notify_tick(now=T0 + 1000 + step * 400, post=receiver)
    runs = [body["event"]["run"] for _url, body in receiver.posts]
    assert len(runs) == len(set(runs)) == 400
    (host / "notify" / "state.json").write_text("{torn")
    with pytest.raises(nodeside.Failure, match="cannot be read"):
        notifyside.notify_tick(now=T0 + 9000, post=receiver)


def test_the_helper_a_request_runs_is_kept_for_the_tick(host, monkeypatch, tmp_path):
    cache = tmp_path / "helper"
    cache.mkdir()
    tag = sys.implementation.cache_tag
    digest = "a" * 24
    (cache / ("%s.%s" % (digest, tag))).write_bytes(b"compiled")
    (host / "notify").mkdir(mode=0o700, exist_ok=True)
    monkeypatch.setattr(notifyside, "NOTIFY_HELPER_CACHE", str(cache))
    monkeypatch.setattr(sys, "argv", ["-c", digest])
    notifyside._tick_pin()
    assert (host / "notify" / ("helper." + tag)).read_bytes() == b"compiled"
    monkeypatch.setattr(sys, "argv", ["-c"])   # a request without a digest changes nothing
    notifyside._tick_pin()
    assert (host / "notify" / "helper.digest").read_text() == digest + "\n"


def test_the_loop_stops_with_the_last_hook(tmp_path, monkeypatch):
    monkeypatch.setattr(notifyside, "NOTIFY_SYSTEMD", str(tmp_path / "no-systemd"))
    monkeypatch.setattr(notifyside, "NOTIFY_ROOT", str(tmp_path / "notify"))
    monkeypatch.setattr(notifyside, "event_end", lambda: [None, 0])
    os.makedirs(str(tmp_path / "notify"), mode=0o700)
    program = tmp_path / "notify" / "tick.py"
    loop = subprocess.Popen(["/bin/sh", "-c", "sleep 60; : %s" % program],
                            start_new_session=True)
    (tmp_path / "notify" / "tick.pid").write_text("%d\n" % loop.pid)
    # Until the child has exec'd the shell, its command line is still pytest's.
    deadline = time.time() + 10
    while str(program).encode() not in open("/proc/%d/cmdline" % loop.pid, "rb").read():
        assert time.time() < deadline, "the loop's shell never started"
        time.sleep(0.02)
    assert notifyside._tick_alive() == "loop"
    monkeypatch.setattr(notifyside, "tick_ensure", lambda: "loop")
    notifyside.op_notify_set({"hook": hook()})
    notifyside.op_notify_set({"hook": hook(id="other")})

    assert notifyside.op_notify_remove({"id": "ops"}) == {"removed": True}
    assert loop.poll() is None   # a hook is left: the loop goes on
    assert notifyside.op_notify_remove({"id": "other"}) == {"removed": True}
    assert loop.wait(timeout=10) is not None
    assert notifyside._tick_alive() is None
