"""A run's output as its hosts keep it: the host side (tasks.hostside.logside), the controller's
paged reader (tasks.joblogs) and the jobs whose containers are gone or never made
(tasks.hostside.nodeside).

Job folders are laid out as the wrapper leaves them (test_wrapper checks the wrapper
writes this layout); a fake node answers ``call`` by running the host's operations here.
"""

from __future__ import annotations

import base64
import datetime
import json
import os

import pytest
from ansible_collections.gpufleet.cluster.plugins.module_utils.tasks import (
    actions,
    joblogs,
    lifecycle,
)
from ansible_collections.gpufleet.cluster.plugins.module_utils.tasks.hostside import (
    logside,
    nodeside,
)
from ansible_collections.gpufleet.cluster.plugins.module_utils.tasks.ssh import NodeError


def job_folder(root, run, num, previous=None, current=b"", base=None, index=(), index1=(),
               container=None, setup_error=None, created=True):
    """A job folder as the wrapper and ``start`` leave it."""
    folder = root / run / str(num)
    state = folder / "state"
    state.mkdir(parents=True)
    labels = {"gpufleet.run": run, "gpufleet.job": str(num), "gpufleet.submission": "0"}
    (folder / "record.json").write_text(json.dumps({
        "container": container or "%s-%d" % (run, num), "labels": labels}))
    if created:
        (folder / "created").write_text("abc\n")
    if previous is not None:
        (state / "output.log.1").write_bytes(previous)
    if current is not None:
        (state / "output.log").write_bytes(current)
    if base is not None:
        (state / "output.base").write_text("%d\n" % base)
    if index:
        (state / "output.idx").write_text("".join("%d %d\n" % e for e in index))
    if index1:
        (state / "output.idx.1").write_text("".join("%d %d\n" % e for e in index1))
    if setup_error is not None:
        (state / "setup_error").write_text(setup_error + "\n")
        if not created:
            return folder
    return folder


def page(run, num, **payload):
    answer = logside.op_logs(dict({"run": run, "jobs": [num]}, **payload))["jobs"][str(num)]
    answer["data"] = base64.b64decode(answer["data"])
    return answer


# ---------------------------------------------------------------------------------------------
# the host side


def test_a_rotated_output_reads_as_one_stream_by_offset(run_root):
    job_folder(run_root, "train", 0, previous=b"aaa\nbbb\n", current=b"ccc\nddd", base=1008)
    whole = page("train", 0)
    assert whole["data"] == b"aaa\nbbb\nccc\nddd"
    assert (whole["first"], whole["start"], whole["next"], whole["end"]) == (1000, 1000,
                                                                             1015, 1015)
    # Pages cross the files' border; a start the rotation dropped says how much is gone.
    assert page("train", 0, limit=5, **{"from": {"0": 1006}})["data"] == b"b\nccc"
    lost = page("train", 0, **{"from": {"0": 990}})
    assert lost["skipped"] == 10 and lost["data"].startswith(b"aaa")


def test_tail_counts_lines_back_from_the_end(run_root):
    job_folder(run_root, "train", 0, previous=b"one\ntwo\n", current=b"three\nfour\n", base=8)
    assert page("train", 0, tail=1)["data"] == b"four\n"
    assert page("train", 0, tail=3)["data"] == b"two\nthree\nfour\n"
    assert page("train", 0, tail=10)["data"] == b"one\ntwo\nthree\nfour\n"
    job_folder(run_root, "open", 0, current=b"one\ntwo")
    assert page("open", 0, tail=1)["data"] == b"two"


def test_since_starts_at_what_was_printed_by_the_last_note_before_it(run_root):
    job_folder(run_root, "train", 0, previous=b"0123456789", current=b"abcdefghij", base=10,
               index1=[(100, 0), (104, 4)], index=[(110, 10), (115, 14), (120, 20)])
    assert page("train", 0, since=50)["data"] == b"0123456789abcdefghij"
    assert page("train", 0, since=106)["data"] == b"456789abcdefghij"
    assert page("train", 0, since=116)["data"] == b"efghij"
    assert page("train", 0, since=500)["data"] == b""
    # tail and since together: the later start wins
    assert page("train", 0, since=116, tail=1)["data"] == b"efghij"


def test_a_job_whose_container_was_never_made_answers_its_error(run_root):
    job_folder(run_root, "train", 1, current=None, setup_error="could not start: no image",
               created=False)
    answer = page("train", 1)
    assert answer["setup_error"] == "could not start: no image"
    assert answer["data"] == b"" and answer["source"] == "none"


def test_a_job_without_a_kept_file_is_read_from_docker(run_root, docker):
    job_folder(run_root, "old", 0, current=None)
    docker.on(["logs"], stdout="from docker\n")
    answer = page("old", 0, since=1700000000, tail=5)
    assert answer["data"] == b"from docker\n" and answer["source"] == "docker"
    assert docker.calls() == [["logs", "--since", "1700000000", "--tail", "5", "old-0"]]


def test_only_regular_files_are_read(run_root, tmp_path):
    secret = tmp_path / "secret"
    secret.write_text("host secret")
    folder = job_folder(run_root, "train", 0, current=None)
    os.symlink(str(secret), str(folder / "state" / "output.log"))
    os.mkfifo(str(folder / "state" / "output.log.1"))
    assert page("train", 0)["data"] == b""


def test_a_copy_that_does_not_match_its_base_is_waited_for_then_left_out(run_root, monkeypatch):
    # The keeper emptied output.log and wrote the new bases, but output.log.1 is still the old
    # copy (it was killed there, or a reader came in between): the copy is not trusted.
    monkeypatch.setattr(logside, "ATTEMPTS", 3)
    naps = []
    monkeypatch.setattr(logside.time, "sleep", naps.append)
    folder = job_folder(run_root, "train", 0, previous=b"old copy\n", current=b"new\n")
    (folder / "state" / "output.base").write_text("100 300\n")
    answer = page("train", 0)
    assert answer["data"] == b"new\n" and answer["first"] == 300 and len(naps) == 2


def test_a_rotation_during_a_read_makes_it_read_again(run_root, monkeypatch):
    folder = job_folder(run_root, "train", 0, current=b"before\n")
    (folder / "state" / "output.base").write_text("0 0\n")
    real = logside._page
    calls = []

    def rotating(output, *args):
        answer = real(output, *args)
        if not calls:   # the keeper rotates while the first read is under way
            (folder / "state" / "output.log.1").write_bytes(b"before\n")
            (folder / "state" / "output.log").write_bytes(b"after\n")
            (folder / "state" / "output.base").write_text("0 7\n")
        calls.append(answer)
        return answer

    monkeypatch.setattr(logside, "_page", rotating)
    monkeypatch.setattr(logside.time, "sleep", lambda s: None)
    answer = logside.read_job("train", 0)
    assert base64.b64decode(answer["data"]) == b"before\nafter\n" and len(calls) == 2


def test_status_fails_when_docker_cannot_say_what_runs(run_root, docker):
    docker.on(["ps"], stdout="abc\n")
    docker.on(["inspect"], stderr="Cannot connect to the Docker daemon", rc=1)
    job_folder(run_root, "train", 0)
    with pytest.raises(nodeside.Failure, match="docker inspect failed"):
        nodeside.op_status({})


def test_logs_refuse_a_name_that_is_no_run_name(run_root):
    with pytest.raises(nodeside.Failure):
        logside.op_logs({"run": "../etc"})


# ---------------------------------------------------------------------------------------------
# jobs without containers, in status


def test_status_reports_jobs_whose_container_is_gone_or_never_made(run_root, docker):
    docker.on(["ps"], stdout="")
    job_folder(run_root, "train", 0)
    (run_root / "train" / "0" / "state" / "exit_code").write_text("3\n")
    (run_root / "train" / "0" / "state" / "running").write_text("1\n")
    job_folder(run_root, "train", 1, current=None, setup_error="could not start container "
               "train-1: no such device", created=False)
    job_folder(run_root, "starting", 0, created=False)
    found = nodeside.op_status({})["containers"]
    by_name = dict((c["name"], c) for c in found)
    assert sorted(by_name) == ["train-0", "train-1"]
    assert by_name["train-0"]["state"] == "gone"
    assert lifecycle.job_status(by_name["train-0"]) == (
        lifecycle.JobStatus.FAILED, lifecycle.CONTAINER_EXITED_WITH_ERROR, 3)
    assert by_name["train-1"]["state"] == "never-created"
    assert lifecycle.job_status(by_name["train-1"]) == (
        lifecycle.JobStatus.FAILED, lifecycle.EXECUTOR_ERROR, None)
    assert by_name["train-1"]["labels"]["gpufleet.job"] == "1"
    assert nodeside.op_status({"run": "starting"})["containers"] == []


def test_a_container_removed_under_a_running_job_ends_it_terminated():
    gone = {"state": "gone", "files": {"running": "1"}}
    assert lifecycle.job_status(gone) == (
        lifecycle.JobStatus.TERMINATED, lifecycle.TERMINATED_BY_USER, None)


def test_start_records_the_job_then_its_container_or_why_it_could_not_be_made(
        run_root, docker):
    job = {"run": "train", "job_num": 0, "container": "train-0", "image": "busybox",
           "files": {"env.sh": {"text": ""}},
           "docker_args": ["--name", "train-0", "--label", "gpufleet.run=train",
                           "--label", "gpufleet.job=0"]}
    docker.on(["container", "inspect"], rc=1)
    docker.on(["run"], stderr="Error: device not found", rc=125)
    with pytest.raises(nodeside.Failure):
        nodeside.op_start({"job": job})
    folder = run_root / "train" / "0"
    record = json.loads((folder / "record.json").read_text())
    assert record == {"container": "train-0",
                      "labels": {"gpufleet.run": "train", "gpufleet.job": "0"}}
    assert "device not found" in (folder / "state" / "setup_error").read_text()
    assert not (folder / "created").exists()


def test_a_job_whose_image_could_not_be_brought_is_recorded_failed(run_root, docker):
    docker.on(["ps"], stdout="")
    (run_root / "train" / "0" / "state").mkdir(parents=True)
    (run_root / "train" / "0" / "state" / "exit_code").write_text("0\n")   # an earlier run
    nodeside.op_record_failure({"run": "train", "job_num": 0, "container": "train-0-0",
                                "labels": {"gpufleet.run": "train", "gpufleet.job": 0},
                                "error": "image x could not be pulled"})
    (found,) = nodeside.op_status({"run": "train"})["containers"]
    assert found["name"] == "train-0-0" and found["state"] == "never-created"
    assert found["labels"] == {"gpufleet.run": "train", "gpufleet.job": "0"}
    assert found["setup_error"] == "image x could not be pulled"
    assert found["files"]["exit_code"] is None
    assert lifecycle.job_status(found)[:2] == (lifecycle.JobStatus.FAILED, lifecycle.EXECUTOR_ERROR)
    with pytest.raises(nodeside.Failure, match="bad run"):
        nodeside.op_record_failure({"run": "../x", "job_num": 0})


# ---------------------------------------------------------------------------------------------
# the controller's reader


class LocalNode(object):
    """A host whose operations run here (on the patched RUN_ROOT)."""

    def __init__(self, fail=False):
        self.calls = []
        self.fail = fail

    def call(self, op, payload, timeout=None):
        self.calls.append((op, payload))
        if self.fail:
            raise NodeError("gpu-1", "ssh: connection refused")
        return json.loads(json.dumps(logside.op_logs(payload)))


def record(*jobs):
    return {"name": "train", "jobs": [{"job_num": n, "host": h, "container": "train-%d" % n}
                                      for n, h in jobs]}


def test_lines_come_rank_by_rank_page_by_page(run_root, monkeypatch):
    monkeypatch.setattr(joblogs, "FIRST_PAGE", 4)
    monkeypatch.setattr(joblogs, "PAGE", 3)
    # "é" is two bytes: a page border falls inside it.
    job_folder(run_root, "train", 0, previous=b"r0 a\n", current="r0 é\nr0 end".encode(),
               base=5)
    job_folder(run_root, "train", 1, current=b"r1 a\n")
    nodes = {"gpu-0": LocalNode(), "gpu-1": LocalNode()}
    got = list(joblogs.lines(nodes, record((1, "gpu-1"), (0, "gpu-0"))))
    assert got == [(0, "r0 a"), (0, "r0 é"), (0, "r0 end"), (1, "r1 a")]
    # one request per host for the first pages, then one per further page
    assert [op for op, _p in nodes["gpu-1"].calls] == ["logs", "logs"]
    total = len(b"r0 a\n" + "r0 é\nr0 end".encode())   # 17 bytes: 4, then 3 at a time
    assert len(nodes["gpu-0"].calls) == 1 + -(-(total - 4) // 3)


def test_a_job_still_printing_is_read_up_to_where_it_was_when_asked(run_root, monkeypatch):
    monkeypatch.setattr(joblogs, "FIRST_PAGE", 4)
    monkeypatch.setattr(joblogs, "PAGE", 4)
    folder = job_folder(run_root, "train", 0, current=b"one\ntwo\n")
    node = LocalNode()
    real = node.call

    def printing(op, payload, timeout=None):
        answer = real(op, payload, timeout)
        with open(str(folder / "state" / "output.log"), "ab") as handle:
            handle.write(b"more\n")   # the job goes on printing after each answer
        return answer

    node.call = printing
    assert list(joblogs.lines({"gpu-0": node}, record((0, "gpu-0")))) == [
        (0, "one"), (0, "two")]


def test_a_job_seen_under_two_names_of_its_machine_is_read_once(run_root):
    job_folder(run_root, "train", 0, current=b"zero\n")
    nodes = {"gpu-0": LocalNode(), "lab-0": LocalNode()}
    both = record((0, "gpu-0"), (0, "lab-0"))
    assert list(joblogs.lines(nodes, both)) == [(0, "zero")]


def test_one_job_and_a_job_that_never_started(run_root):
    job_folder(run_root, "train", 0, current=b"zero\n")
    job_folder(run_root, "train", 1, current=None, setup_error="could not start container "
               "train-1: no such image", created=False)
    nodes = {"gpu-0": LocalNode(), "gpu-1": LocalNode()}
    jobs = record((0, "gpu-0"), (1, "gpu-1"))
    assert list(joblogs.lines(nodes, jobs, job=1)) == [
        (1, "gpufleet: could not start container train-1: no such image")]
    with pytest.raises(joblogs.LogsError, match="run train has no job 5 .jobs: 0, 1."):
        list(joblogs.lines(nodes, jobs, job=5))


def test_a_silent_host_is_an_error_naming_it(run_root):
    job_folder(run_root, "train", 0, current=b"zero\n")
    with pytest.raises(joblogs.LogsError, match="gpu-1"):
        list(joblogs.lines({"gpu-1": LocalNode(fail=True)}, record((0, "gpu-1"))))


@pytest.mark.parametrize("text, expected", [
    ("10s", 990.0), ("5m", 700.0), ("1d", 1000.0 - 86400), ("30", 970.0),
    ("2026-09-24T15:30:00Z",
     datetime.datetime(2026, 9, 24, 15, 30, tzinfo=datetime.timezone.utc).timestamp()),
    ("2026-09-24T17:30:00+02:00",
     datetime.datetime(2026, 9, 24, 15, 30, tzinfo=datetime.timezone.utc).timestamp()),
])
def test_since_takes_dstacks_forms(text, expected):
    assert joblogs.parse_since(text, 1000.0) == expected


@pytest.mark.parametrize("text, message", [
    ("2026-09-24T15:30:00", "has no offset"),
    ("yesterday", "not a duration"),
    ("1h30m", "write a duration"),
])
def test_since_refuses_what_dstack_refuses(text, message):
    with pytest.raises(joblogs.LogsError, match=message):
        joblogs.parse_since(text, 1000.0)


def test_streamed_lines_go_out_in_batches_of_one_rank():
    sent = []
    lines = [(0, "x" * 40000), (0, "y" * 40000), (0, "z"), (1, "a")]
    actions._stream(iter(lines), lambda rank, batch: sent.append((rank, batch)))
    assert sent == [(0, ["x" * 40000, "y" * 40000]), (0, ["z"]), (1, ["a"])]


def test_log_events_print_prefixed_or_raw():
    event = {"kind": "log", "run": "train", "rank": 1, "lines": ["a", "b"]}
    assert actions.event_line(event) == "[train-1] a\n[train-1] b"
    assert actions.event_line(dict(event, raw=True)) == "a\nb"
    assert actions.event_line({"kind": "log", "run": "t", "rank": 0, "line": "x"}) == "[t-0] x"


def test_a_jobs_end_is_said_after_its_last_lines_without_holding_up_the_run():
    import threading

    from ansible_collections.gpufleet.cluster.plugins.module_utils.tasks import supervisor

    said = []
    release = threading.Event()

    class SlowFollower(object):
        """A job's backlog of lines that takes longer than a moment."""

        def __init__(self):
            self.thread = threading.Thread(target=release.wait)
            self.thread.start()

        def wait_briefly(self, seconds=5.0):
            self.thread.join(0.01)

        def join(self):
            self.thread.join()

    jobs = [{"job_num": 0, "host": "gpu-0", "container": "t-0-0", "run": "t", "submission": 0}]
    watch = supervisor.Watch(jobs, {}, {"startup_order": None, "stop_criteria": None,
                                        "retry": None}, said.append)
    watch.followers[0] = SlowFollower()
    watch._report({0: (lifecycle.JobStatus.DONE, None, 0)})
    assert said == [] and 0 in watch.deferred     # its lines are still coming
    release.set()
    watch.followers[0].join()
    watch._say_deferred()
    assert [(e["job_num"], e["status"]) for e in said] == [(0, lifecycle.JobStatus.DONE)]


def test_a_job_whose_host_is_gone_ends_without_waiting_for_lines_that_cannot_come():
    """``docker logs -f`` to a host that went away silently gets nothing more and does not
    end. Once the backend says the host is gone, the job's end is said at once, its follower
    is stopped, and the run's end does not wait on it either."""
    import subprocess
    import time

    from ansible_collections.gpufleet.cluster.plugins.module_utils.tasks import supervisor

    class GoneNode(object):
        sudo = ""

        def popen(self, command, **kwargs):
            return subprocess.Popen(["sleep", "60"], **kwargs)   # no line, no end

    said = []
    jobs = [{"job_num": 0, "host": "gpu-0", "container": "t-0-0", "run": "t", "submission": 0}]
    watch = supervisor.Watch(jobs, {}, {"startup_order": None, "stop_criteria": None,
                                        "retry": None}, said.append, gone={"gpu-0"})
    follower = supervisor.LogFollower(GoneNode(), "t-0-0", 0, said.append).start()
    watch.followers[0] = follower
    begun = time.monotonic()
    watch._report({0: (lifecycle.JobStatus.FAILED, lifecycle.INTERRUPTED_BY_NO_CAPACITY, None)})
    watch._end_followers()
    assert time.monotonic() - begun < 20   # not the 60 s the silent follower would hold
    assert [(e["job_num"], e["status"]) for e in said] == [(0, lifecycle.JobStatus.FAILED)]
    follower.thread.join(5)
    assert not follower.thread.is_alive() and follower.proc.returncode is not None
    # A follower still there when the run ends (its job's end was said before the host went).
    late = supervisor.LogFollower(GoneNode(), "t-0-0", 0, said.append).start()
    watch.followers[0] = late
    begun = time.monotonic()
    watch._end_followers()
    late.thread.join(5)
    assert time.monotonic() - begun < 20 and not late.thread.is_alive()


def test_a_stopped_follower_passes_nothing_more_on():
    """What a follower of a gone host still reads after its job's end was said (a page of kept
    output whose request finished late) is not shown after the run's end."""
    import threading

    from ansible_collections.gpufleet.cluster.plugins.module_utils.tasks import supervisor

    release = threading.Event()

    def kept():
        release.wait(5)
        yield b"a late line\n"

    said = []
    follower = supervisor.LogFollower(None, "t-0-0", 0, said.append, kept=kept).start()
    follower.stop()
    release.set()
    follower.thread.join(5)
    assert not follower.thread.is_alive() and said == []


class HostNode(object):
    """A host whose every operation runs here as the host runs it (nodeside, booking,
    healthside and logside in their order: BOOK_OPS), with the fake docker on PATH."""

    def __init__(self):
        self.calls = []

    def call(self, op, payload=None, timeout=None):
        from ansible_collections.gpufleet.cluster.plugins.module_utils.tasks.hostside import booking

        self.calls.append(op)
        ops = dict(nodeside.OPS, **booking.BOOK_OPS)
        return json.loads(json.dumps(ops[op](payload or {})))


def test_logs_find_the_run_and_read_its_first_pages_in_one_request_per_host(
        run_root, docker, monkeypatch):
    from ansible_collections.gpufleet.cluster.plugins.module_utils.tasks import listing

    from ansible_collections.gpufleet.cluster.plugins.module_utils.tasks.hostside import booking

    monkeypatch.setattr(booking, "BOOK_ROOT", str(run_root.parent / "book"))
    monkeypatch.setattr(joblogs, "FIRST_PAGE", 8)
    monkeypatch.setattr(joblogs, "PAGE", 8)
    docker.on(["ps"], stdout="")   # the containers are gone; their folders stay
    job_folder(run_root, "train", 0, current=b"zero\n")
    job_folder(run_root, "train", 1, current=b"one is longer than a page\n")
    job_folder(run_root, "other", 0, current=b"not this run\n")
    node = HostNode()

    record, lines = listing.run_logs({"gpu-0": node}, "train")

    assert list(lines) == [(0, "zero"), (1, "one is longer than a page")]
    assert record["name"] == "train"
    # The survey brought every first page: only job 1's further pages were asked after it.
    assert node.calls == ["status"] + ["logs"] * 3


def test_a_survey_asked_for_logs_answers_them_beside_the_status(run_root, docker, monkeypatch):
    from ansible_collections.gpufleet.cluster.plugins.module_utils.tasks.hostside import booking

    monkeypatch.setattr(booking, "BOOK_ROOT", str(run_root.parent / "book"))
    docker.on(["ps"], stdout="")
    job_folder(run_root, "train", 0, current=b"zero\n")
    asked = joblogs.first_request("train", since=None, tail=None)

    plain = booking.BOOK_OPS["status"]({})
    both = booking.BOOK_OPS["status"]({"logs": asked})

    assert "logs" not in plain and both["containers"] == plain["containers"]
    assert base64.b64decode(both["logs"]["0"]["data"]) == b"zero\n"
    assert list(joblogs.first_request("train", job=3)["jobs"]) == [3]
