# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The shapes of the task runner's records, for type checking: run records and their jobs
(tasks.listing.run_records and with_queue, read by render.run_table and the gpufleet command),
queue entries (tasks.runbook.entry_of, kept on a queue host by tasks.booking) and the entry
summaries a queue host answers with (tasks.booking.summary, read by tasks.queue).

They describe the dicts as they are built and change nothing in them: the records go to JSON,
container labels and files as they always did. This module imports nothing of gpufleet, so any
module may name these types without an import cycle; the files sent to hosts do not import it.
"""

from __future__ import annotations

from typing import Any, TypedDict


class _Job(TypedDict):
    job_num: int
    host: str
    container: str
    status: str
    reason: str | None
    exit_code: int | None
    started_at: str | None
    finished_at: str | None
    gpus: list[str]
    # What the job was given (tasks.container.resources_of), or the text a container labelled
    # by an earlier version held ("" for a job whose container was never seen).
    resources: dict[str, Any] | str


class JobRecord(_Job, total=False):
    """One job of a run record."""

    # A job on a host that did not answer (tasks.listing): whether it is only unreachable so
    # far, and what happened.
    unreachable: bool
    message: str | None
    # A service's replica (services.replicas): its number, and {"PORT/tcp": host port}.
    replica: int
    published: dict[str, int] | None
    # Its replica group's name, when the service has replica groups.
    group: str | None


class _Run(TypedDict):
    name: str
    run_id: str | None
    submission: int
    submitted: str | None           # when, as ISO 8601 text
    status: str
    reason: str | None
    message: str | None
    fleet: str | None
    backend: str | None
    region: str | None
    price: float | None
    spot: bool | None
    gpu: dict[str, Any] | str | None
    nodes: int
    array: str | None               # the job array's name
    array_count: int | None         # how many runs it has, when the run says
    user: str | None                # who submitted it (None: a run made before users)
    jobs: list[JobRecord]


class RunRecord(_Run, total=False):
    """One run as ``gpufleet ps`` lists it (tasks.listing.run_records); a run that only waits
    in the queue has no jobs and no spec fields (tasks.listing.with_queue)."""

    type: str                       # "task", "dev-environment" or "service"
    stop_criteria: str | None
    # A service: {"url", "model_url", "proxy_host", "proxy_address", "port", "model",
    # "replicas", "respawn", "gateway", "https", "moved_from", "groups"}
    # (tasks.listing.service_of), None for the others.
    service: dict[str, Any] | None
    startup_order: str | None
    # A task with ``schedule``: {"cron", "hosts" (those that keep it for firings to come),
    # "next" (epoch seconds, None once stopped), "firings",
    # "last", "stopped", "waiting" (why its host has not started a due firing yet), "error"
    # (why the last firing could not start its container)}
    # (tasks.listing.schedule_of), None for the others.
    schedule: dict[str, Any] | None
    # From the queue: the host whose queue holds the run, its place and priority there, and
    # the host that keeps a running run's retries.
    queued_on: str
    queue_position: int | None
    priority: int
    retry_kept_on: str


class _QueueEntry(TypedDict):
    version: int
    run: str
    run_id: str
    submitted_at: str
    submitted_epoch: float
    priority: int
    state: str                      # tasks.queue: PENDING, ACTIVE, FAILED, TERMINATED
    reason: str | None
    message: str | None
    fleets: list[str]
    nodes: int
    submissions: int
    retry: dict[str, Any] | None
    policy: dict[str, Any]
    retry_since: float | None
    array: dict[str, Any] | None
    hosts: list[str]
    config: dict[str, Any]
    secrets: dict[str, str]
    environ: dict[str, str]
    files_data: dict[str, Any]
    config_dir: str | None
    image_source: str
    run_args: list[str]
    local_image: str | None
    repo: dict[str, Any] | None


class QueueEntry(_QueueEntry, total=False):
    """A run waiting for capacity or for its next submission (tasks.runbook.entry_of): all that
    is needed to submit it again, kept on its queue host (tasks.booking)."""

    queued_on: str
    # Who submitted the run (teams.identity; tasks.admission reads it for per-user limits and
    # fair share); an entry an earlier version wrote has none.
    user: str | None
    # Set on the queue host: who took the entry to submit it and until when, when it ended,
    # and where a local repo's archive is held.
    taken_by: str | None
    taken_until: float
    ended_at: float
    held_archive: str
    # The runs it runs after ({"run", "after"}: automation.dependencies).
    after: list[dict[str, str]]


class QueueSummary(TypedDict):
    """A queue entry as a queue host lists it (tasks.booking.summary, SUMMARY_FIELDS): without
    what it carries to be submitted. A field the entry does not have is None."""

    run: str
    run_id: str | None
    user: str | None
    priority: int | None
    submitted_at: str | None
    submitted_epoch: float | None
    state: str | None
    reason: str | None
    message: str | None
    fleets: list[str] | None
    nodes: int | None
    taken_by: str | None
    taken_until: float | None
    submissions: int | None
    retry_since: float | None
    retry: dict[str, Any] | None
    array: dict[str, Any] | None
    hosts: list[str] | None
    ended_at: float | None
    queued_on: str | None
    policy: dict[str, Any] | None
    # The runs it runs after ({"run", "after"}: automation.dependencies), or None.
    after: list[dict[str, str]] | None
    # Changes whenever what the entry says changes: its copy on another host
    # (tasks.queue_mirror) is current when the digests match.
    digest: str | None
    # The host it was handed over from, once its queue host was lost (tasks.queue_mirror).
    handed_from: str | None
    # When its host last wrote it (of two entries of one run id, the newer counts).
    written_at: float | None
    # A scheduled run's entry whose re-arming is not done (tasks.rearm).
    rearm: bool | None


class ScaleEvent(TypedDict):
    """What a pass over the queue (tasks.queue.QueuePass) hands the services' hook for a
    running service that autoscales (services.autoscale.follow carries it out)."""

    kind: str                  # "scale"
    run: str
    record: RunRecord          # the run as the pass sees it (tasks.listing)
    entry: QueueEntry          # its whole queue entry, taken by the pass meanwhile
    # runner(config): a Runner of the entry with ``config`` instead (tasks.runs.runner_of).
    runner: Any
    # refresh(): the whole entry read again (taken again), or None when another holds it
    # or it is gone.
    refresh: Any
    # hosts(names): notes in the entry the hosts the run holds once it was scaled.
    hosts: Any
    emit: Any                  # the pass's events (said to the user)
