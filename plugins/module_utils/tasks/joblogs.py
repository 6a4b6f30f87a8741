# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""A run's output as its hosts keep it (tasks.hostside.logside), read page by page: ``gpufleet
logs``.

Every host of the run is asked once, all at once, for the first page of each of its jobs; a
job with more output is then read on, a page at a time, in rank order. Lines are handed on as
soon as they are whole, so the controller holds a page per job at most, whatever the run
printed. ``--since`` takes dstack's forms: a duration back from now (``10s``, ``5m``, ``1d``)
or an RFC 3339 time with its offset (``2026-09-24T15:30:00Z``).
"""

from __future__ import annotations

import base64
import codecs

from ..core.errors import GpufleetError
from ..core.times import parse_time
from ..spec.grammar import Invalid, parse_duration
from .ssh import NodeError, parallel

FIRST_PAGE = 256 * 1024
PAGE = 1024 * 1024


class LogsError(GpufleetError):
    """A run's output cannot be read: a bad --since, a job the run lacks, a silent host."""


def parse_since(value, now):
    """Epoch seconds for ``--since``: a duration before ``now`` or an RFC 3339 time with an
    offset (dstack's rules: a time without one is refused)."""
    text = str(value).strip()
    try:
        return now - parse_duration(text)
    except Invalid:
        pass
    if text[:1].isdigit() and "T" not in text.upper() and ":" not in text:
        raise LogsError("--since %s: write a duration such as 10s, 5m, 2h or 1d, or an RFC "
                        "3339 time such as 2026-09-24T15:30:00Z" % text)
    moment = parse_time(text)
    plain = text.upper().endswith("Z") or text[-6:-5] in ("+", "-")
    if moment is None:
        raise LogsError("--since %s: not a duration (10s, 5m, 1d) nor an RFC 3339 time "
                        "(2026-09-24T15:30:00Z)" % text)
    if not plain:
        raise LogsError("--since %s: the time has no offset; add one, e.g. Z for UTC" % text)
    return moment.timestamp()


class Lines(object):
    """Bytes of one job's output in, whole lines out (decoded as UTF-8, bad bytes replaced)."""

    def __init__(self):
        self.decoder = codecs.getincrementaldecoder("utf-8")("replace")
        self.carry = ""

    def feed(self, data):
        text = self.carry + self.decoder.decode(data)
        lines = text.split("\n")
        self.carry = lines.pop()
        return lines

    def close(self):
        text = self.carry + self.decoder.decode(b"", True)
        self.carry = ""
        return [text] if text else []


def _request(run, nums, containers, since, tail, limit, starts=None):
    payload = {"run": run, "jobs": nums, "limit": limit,
               "containers": dict((str(n), containers[n]) for n in nums or ()
                                  if n in containers)}
    if starts:
        payload["from"] = dict((str(n), v) for n, v in starts.items())
    else:
        if since is not None:
            payload["since"] = since
        if tail:
            payload["tail"] = int(tail)
    return payload


def first_request(run, job=None, since=None, tail=None):
    """The ``logs`` request for the first pages of every job of ``run`` a host keeps (only
    ``job``'s when given), sent with the survey (tasks.surveys.survey_with_queues)."""
    return _request(run, None if job is None else [job], {}, since, tail, FIRST_PAGE)


def pages(nodes, record, job=None, since=None, tail=None, firsts=None):
    """``(job_num, bytes)`` pages of the run's output: every job of ``record``'s submission in
    rank order (only ``job`` when given), and a job whose container could not be made says why
    (``gpufleet: ...``). Raises LogsError when a job's host does not answer. ``firsts``:
    ``{host: {job: page}}`` already answered to first_request; only the other hosts are asked
    for their first pages."""
    jobs, seen = [], set()
    for item in record["jobs"]:
        # A machine two fleets describe shows its containers under both names: once each.
        if item["job_num"] not in seen and (job is None or item["job_num"] == job):
            seen.add(item["job_num"])
            jobs.append(item)
    if job is not None and not jobs:
        raise LogsError("run %s has no job %d (jobs: %s)" % (
            record["name"], job, ", ".join(str(j["job_num"]) for j in record["jobs"])))
    containers = dict((j["job_num"], j["container"]) for j in jobs)
    by_host = {}
    for item in jobs:
        by_host.setdefault(item["host"], []).append(item["job_num"])

    def first(host):
        if host in (firsts or {}):
            return firsts[host]
        if host not in nodes:
            raise LogsError("host %s of run %s is not in any fleet given"
                            % (host, record["name"]))
        return nodes[host].call("logs", _request(record["name"], by_host[host], containers,
                                                 since, tail, FIRST_PAGE))["jobs"]

    answers = {}
    for host, (value, error) in parallel(sorted(by_host), first).items():
        if error is not None:
            raise LogsError(str(error)) from error
        answers[host] = value
    for item in sorted(jobs, key=lambda j: j["job_num"]):
        num, host = item["job_num"], item["host"]
        page = answers[host].get(str(num))
        if page is not None and page.get("setup_error"):
            yield num, ("gpufleet: %s\n" % page["setup_error"]).encode("utf-8")
        # What the job had printed when it was first asked: a job still printing is not
        # chased (gpufleet logs -f follows it).
        stop_at = page.get("end") if page is not None else None
        while page is not None:
            data = base64.b64decode(page.get("data") or "")
            if stop_at is not None and page.get("start") is not None:
                data = data[:max(0, stop_at - page["start"])]
            if page.get("skipped"):
                yield num, ("gpufleet: %d bytes of output were rotated away while they were "
                            "read\n" % page["skipped"]).encode("utf-8")
            if data:
                yield num, data
            if not data or page["next"] >= min(page["end"], stop_at):
                break
            try:
                page = nodes[host].call("logs", _request(
                    record["name"], [num], containers, since, tail, PAGE,
                    starts={num: page["next"]}))["jobs"].get(str(num))
            except NodeError as exc:
                raise LogsError(str(exc)) from exc


def lines(nodes, record, job=None, since=None, tail=None, firsts=None):
    """``(job_num, line)`` of the run's output, as pages() reads it."""
    decoders = {}
    current = None
    for num, data in pages(nodes, record, job=job, since=since, tail=tail, firsts=firsts):
        if num != current and current is not None:
            for line in decoders.pop(current).close():
                yield current, line
        current = num
        for line in decoders.setdefault(num, Lines()).feed(data):
            yield num, line
    if current is not None:
        for line in decoders.pop(current).close():
            yield current, line
