# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""A run's output as its hosts keep it, read on a fleet host: the ``logs`` operation.

This file travels to the hosts after tasks.hostside.nodeside, tasks.hostside.booking and
tasks.hostside.healthside (tasks.ssh.host_source) and runs in their namespace: standard library
only, Python 3.6+.

Each job's wrapper (tasks.hostside.wrapper) appends everything the job prints to
``state/output.log`` in the job's folder, moves it to ``output.log.1`` when it grows past its half
of the cap, and keeps ``output.base`` (the offset where ``output.log`` begins, counting every byte
the job ever printed) and ``output.idx`` / ``output.idx.1`` (``EPOCH OFFSET`` lines: by EPOCH,
OFFSET bytes had been printed). The folder outlives the container, so this reads a run's output
after its containers are gone, for a job whose container could never be made
(``state/setup_error``), and from any controller. Reads are paged by offset, so a controller never
holds more than one page per job: ``{"run", "jobs": [N, ...] or null, "from": {N: offset}, "since":
epoch, "tail": lines, "limit": bytes}`` answers per job ``{"data": base64, "start", "next", "end",
"first", "skipped", "setup_error", "source"}``; ``next == end`` means nothing more is kept now. A
job started by a wrapper that kept no file (an image without tee) is read from ``docker logs``,
once: its last PAGE_MAX bytes.
"""

import os
import time

try:  # imported as part of the collection (tests, the controller)
    from .booking import BOOK_OPS
    from .nodeside import (Failure, _RUN_NAME, _docker, _json_file, _listdir, _open_regular,
                           _small_file, job_dir)
except ImportError:  # on a host: the other sources run first in this namespace
    pass

PAGE = 1024 * 1024
PAGE_MAX = 8 * 1024 * 1024
INDEX_MAX = 32 * 1024 * 1024
# How many times a read that met a rotation is tried (0.05 s apart) before it is answered.
ATTEMPTS = 20


def _base_text(state):
    """``output.base`` as written ("BASE1 BASE"; an older wrapper wrote "BASE"), or ""."""
    return _small_file(os.path.join(state, "output.base"), 128) or ""


class Output(object):
    """A job's kept output: ``output.log.1`` then ``output.log``, addressed by offset.

    ``consistent`` is False while the wrapper's keeper is between emptying ``output.log`` and
    putting its copy in place (or was killed there): ``output.log.1`` is then not the size its
    base says, and is left out if that lasts."""

    def __init__(self, state, trust_previous=False):
        self.state = state
        self.fds = []
        self.stamp = _base_text(state)
        fields = self.stamp.split()
        numbers = [int(f) for f in fields if f.isdigit()] if len(fields) in (1, 2) else []
        base = numbers[-1] if len(numbers) == len(fields) and numbers else 0
        base1 = numbers[0] if len(numbers) == 2 else None
        current = _open_regular(os.path.join(state, "output.log"))
        self.kept = current is not None
        self.consistent = True
        previous = _open_regular(os.path.join(state, "output.log.1"))
        if previous is not None:
            size = os.fstat(previous).st_size
            start = base - size if base1 is None else base1
            if start >= 0 and start + size == base:
                self.fds.append((start, size, previous))
            else:
                os.close(previous)
                self.consistent = trust_previous
        if current is not None:
            self.fds.append((base, os.fstat(current).st_size, current))
        self.first = self.fds[0][0] if self.fds else base
        self.end = base + (self.fds[-1][1] if current is not None else 0)

    def changed(self):
        """Whether a rotation happened since this was opened (what was read may be wrong)."""
        return _base_text(self.state) != self.stamp

    def close(self):
        for _start, _size, fd in self.fds:
            os.close(fd)

    def read(self, start, limit):
        """Up to ``limit`` bytes from offset ``start`` (at least ``first``)."""
        out = []
        want = limit
        for begin, size, fd in self.fds:
            if want <= 0 or start >= begin + size:
                continue
            at = max(start, begin) - begin
            os.lseek(fd, at, os.SEEK_SET)
            while want > 0 and at < size:
                chunk = os.read(fd, min(want, size - at, PAGE))
                if not chunk:
                    break
                out.append(chunk)
                at += len(chunk)
                want -= len(chunk)
            start = begin + at
        return b"".join(out)

    def tail_start(self, lines):
        """The offset where the last ``lines`` lines begin (a last line without a newline
        counts; the newline that ends the last line begins none)."""
        if self.end <= self.first:
            return self.first
        need = lines + (1 if self.read(self.end - 1, 1) == b"\n" else 0)
        at = self.end
        while at > self.first:
            step = min(65536, at - self.first)
            block = self.read(at - step, step)
            i = len(block)
            while True:
                i = block.rfind(b"\n", 0, i)
                if i < 0:
                    break
                need -= 1
                if need == 0:
                    return at - step + i + 1
            at -= step
        return self.first

    def since_start(self, since):
        """The offset from which every byte was printed at or after ``since`` (epoch seconds):
        what had been printed by the last index entry at or before it, so a line printed up to
        one second earlier may come too."""
        best = None
        for name in ("output.idx.1", "output.idx"):
            fd = _open_regular(os.path.join(self.state, name))
            if fd is None:
                continue
            try:
                size = os.fstat(fd).st_size
                if size > INDEX_MAX:
                    os.lseek(fd, size - INDEX_MAX, os.SEEK_SET)
                text = b""
                while True:
                    chunk = os.read(fd, PAGE)
                    if not chunk:
                        break
                    text += chunk
            finally:
                os.close(fd)
            for line in text.decode("ascii", "replace").splitlines():
                fields = line.split()
                if len(fields) != 2 or not (fields[0].isdigit() and fields[1].isdigit()):
                    continue
                if int(fields[0]) <= since:
                    best = int(fields[1]) if best is None else max(best, int(fields[1]))
        return max(self.first, min(best if best is not None else self.first, self.end))


def _docker_logs(container, since, tail, limit):
    """The output Docker kept of a container whose wrapper kept no file: its last ``limit``
    bytes."""
    args = ["logs"]
    if since is not None:
        args += ["--since", str(int(since))]
    if tail:
        args += ["--tail", str(int(tail))]
    rc, out, err = _docker(args + [container], check=False)
    if rc != 0:
        return None
    data = (out + err).encode("utf-8")
    return data[-limit:]


def read_job(run, num, since=None, tail=None, start=None, limit=PAGE, container=None):
    """One page of job ``num``'s output (see the module's docstring)."""
    folder = job_dir(run, num)
    state = os.path.join(folder, "state")
    setup_error = _small_file(os.path.join(state, "setup_error")) or None
    for attempt in range(ATTEMPTS):
        output = Output(state, trust_previous=attempt == ATTEMPTS - 1)
        try:
            answer = _page(output, setup_error, since, tail, start, limit, container)
            if output.consistent and not output.changed():
                return answer
        finally:
            output.close()
        time.sleep(0.05)   # a rotation under way: it takes a few milliseconds
    return answer


def _page(output, setup_error, since, tail, start, limit, container):
    """One page read from ``output`` (see read_job)."""
    import base64   # here, not at the top: the host helper runs that for every request

    answer = {"setup_error": setup_error, "first": output.first, "end": output.end,
              "skipped": 0, "source": "file"}
    if not output.kept:
        data = None
        if start is None and container and setup_error is None:
            data = _docker_logs(container, since, tail, PAGE_MAX)
        data = data or b""
        answer.update(source="docker" if data else "none", start=0, next=len(data),
                      end=len(data), first=0, data=base64.b64encode(data).decode("ascii"))
        return answer
    if start is not None:
        if start < output.first:
            answer["skipped"] = output.first - start
        begin = max(start, output.first)
    elif tail:
        begin = output.tail_start(int(tail))
        if since is not None:
            begin = max(begin, output.since_start(since))
    elif since is not None:
        begin = output.since_start(since)
    else:
        begin = output.first
    data = output.read(begin, limit)
    answer.update(start=begin, next=begin + len(data),
                  data=base64.b64encode(data).decode("ascii"))
    return answer


def op_logs(payload):
    """Pages of the kept output of run ``run``'s jobs on this host (see the module)."""
    run = str(payload.get("run") or "")
    if not _RUN_NAME.match(run):
        raise Failure("logs: bad run name %r" % run)
    wanted = payload.get("jobs")
    limit = max(1, min(int(payload.get("limit") or PAGE), PAGE_MAX))
    starts = dict((str(k), int(v)) for k, v in (payload.get("from") or {}).items())
    containers = dict((str(k), v) for k, v in (payload.get("containers") or {}).items())
    since = payload.get("since")
    since = float(since) if since is not None else None
    jobs = {}
    for job in _listdir(os.path.dirname(job_dir(run, 0))):
        if not job.isdigit() or (wanted is not None and int(job) not in wanted):
            continue
        record = _json_file(os.path.join(job_dir(run, int(job)), "record.json")) or {}
        jobs[job] = read_job(run, int(job), since=since, tail=payload.get("tail"),
                             start=starts.get(job), limit=limit,
                             container=containers.get(job) or record.get("container"))
    return {"jobs": jobs}


_STATUS_BEFORE_LOGS = BOOK_OPS["status"]


def op_status_logs(payload):
    """The host's status, and with ``logs`` (an op_logs request) the first pages of that run's
    jobs here as well: ``gpufleet logs`` finds the run and reads its output in one request."""
    answer = _STATUS_BEFORE_LOGS(payload)
    if payload.get("logs"):
        answer["logs"] = op_logs(payload["logs"])["jobs"]
    return answer


BOOK_OPS.update({
    "logs": op_logs,
    "status": op_status_logs,
})
