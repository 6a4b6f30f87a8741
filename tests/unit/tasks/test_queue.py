# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The queue without a server (tasks.queue): pending runs kept on a fleet host, started in
priority order by whatever pass comes next, and detached runs resubmitted under retry.

The fake hosts of fakes.py keep claims and queue entries as tasks.hostside.booking does.
"""

from __future__ import annotations

from ansible_collections.gpufleet.cluster.plugins.module_utils.tasks import lifecycle as lc
from ansible_collections.gpufleet.cluster.plugins.module_utils.tasks import queue, queue_records, runs, surveys
from ansible_collections.gpufleet.cluster.plugins.module_utils.tasks import supervisor

from ..configs import task
from .fakes import (JOB_LABEL, RUN_LABEL, SUB_LABEL, WAIT, a_pass, free, fleet_with_facts,
                    occupy, submit_detached)


def test_a_detached_run_without_capacity_waits_in_the_queue_of_its_fleet(fake_hosts):
    fleets = [fleet_with_facts()]
    runner, cluster = fake_hosts(task(nodes=2, retry=WAIT), fleets)
    occupy(cluster, ["gpus-0"])
    result = runner.run(wait=False)
    assert result["status"] == lc.RunStatus.PENDING
    assert result["message"] == "waiting for capacity (queue position 1, kept on gpus-0)"
    entry = cluster.nodes["gpus-0"].queue["train"]
    assert (entry["state"], entry["priority"], entry["run_id"]) == ("pending", 0, runner.run_id)
    assert "gpus-0: busy" in entry["reason"]
    assert cluster.ops("start") == []


def test_a_pass_starts_the_higher_priority_first_and_keeps_the_other_waiting(fake_hosts):
    fleets = [fleet_with_facts()]
    _runner, cluster = fake_hosts(task(), fleets, program=lambda job: (None, None))
    occupy(cluster, ["gpus-0", "gpus-1"])
    low = task(name="low", nodes=2, priority=10, retry=WAIT)
    high = task(name="high", nodes=2, priority=90, retry=WAIT)
    assert submit_detached(fake_hosts, cluster, low, fleets)["status"] == lc.RunStatus.PENDING
    cluster.now += 1
    assert submit_detached(fake_hosts, cluster, high, fleets)["status"] == lc.RunStatus.PENDING
    # Nothing fits yet: the pass leaves both waiting.
    assert a_pass(cluster, fleets)["started"] == []
    free(cluster)
    report = a_pass(cluster, fleets)
    assert report["started"] == ["high"]
    assert sorted(set(p["job"]["run"] for _h, p in cluster.ops("start"))) == ["high"]
    queued = cluster.nodes["gpus-0"].queue
    assert "high" not in queued   # no retry on error: nothing to keep once started
    assert queued["low"]["state"] == "pending"
    assert queue_records.positions(queue_records.entries_of(
        {"gpus-0": list(queued.values())})) == {"low": 1}


def test_a_detached_run_with_retry_on_error_is_resubmitted_by_the_next_pass(fake_hosts):
    fleets = [fleet_with_facts()]
    config = task(nodes=2, retry={"on_events": ["error"], "duration": "1h"})
    runner, cluster = fake_hosts(config, fleets, program=lambda job: (
        (1, 3) if job["submission"] == 0 and job["job_num"] == 1 else (None, None)))
    result = runner.run(wait=False)
    assert result["status"] not in (lc.RunStatus.FAILED, lc.RunStatus.PENDING)
    entry = cluster.nodes["gpus-0"].queue["train"]
    assert (entry["state"], entry["hosts"]) == ("active", ["gpus-0", "gpus-1"])
    cluster.sleep(1)
    cluster.sleep(1)   # rank 1 exits 3; rank 0 still runs (its peers' stop is the wrapper's)
    report = a_pass(cluster, fleets)
    assert report["resubmitted"] == ["train"] and report["started"] == ["train"]
    subs = sorted((c["labels"][SUB_LABEL], c["labels"][JOB_LABEL])
                  for n in cluster.nodes.values() for c in n.containers)
    assert subs == [("1", "0"), ("1", "1")]   # the failed submission's containers went
    entry = cluster.nodes["gpus-0"].queue["train"]
    assert (entry["state"], entry["submissions"]) == ("active", 1)


def test_a_pass_does_not_take_a_stop_for_a_job_that_ended_by_itself(fake_hosts):
    """Rank 1 failed; rank 0 ran when the pass looked, and ended by itself (code 0) just before
    the pass's stop reached it. Its status is its own, not the stop's: the pass decides
    nothing more on a guess, and the next one reads it and resubmits."""
    fleets = [fleet_with_facts()]
    config = task(nodes=2, retry={"on_events": ["error"], "duration": "1h"})
    runner, cluster = fake_hosts(config, fleets, program=lambda job: (
        (1, 3) if job["submission"] == 0 and job["job_num"] == 1 else (None, None)))
    runner.run(wait=False)
    cluster.sleep(1)
    cluster.sleep(1)   # rank 1 exits 3; rank 0 still runs

    def ends_by_itself(node):
        box = next(c for c in node.containers if c["name"] == "train-0-0")
        box["state"], box["files"]["exit_code"] = "exited", "0"

    cluster.nodes["gpus-0"].before_stop = ends_by_itself
    report = a_pass(cluster, fleets)
    assert report["stopped"] == ["train-0-0"] and report["resubmitted"] == []
    box = next(c for c in cluster.nodes["gpus-0"].containers if c["name"] == "train-0-0")
    assert box["files"]["reason"] is None
    assert lc.job_status(box) == (lc.JobStatus.DONE, None, 0)
    report = a_pass(cluster, fleets)
    assert report["resubmitted"] == ["train"]


def test_a_pending_run_past_its_retry_duration_fails_with_no_capacity(fake_hosts):
    fleets = [fleet_with_facts()]
    _runner, cluster = fake_hosts(task(), fleets)
    occupy(cluster, ["gpus-0", "gpus-1"])
    config = task(name="late", retry={"on_events": ["no-capacity"], "duration": "1m"})
    assert submit_detached(fake_hosts, cluster, config, fleets)["status"] == lc.RunStatus.PENDING
    cluster.now += 61
    assert a_pass(cluster, fleets)["expired"] == ["late"]
    entry = cluster.nodes["gpus-0"].queue["late"]
    assert (entry["state"], entry["reason"]) == ("failed", lc.NO_CAPACITY)


def test_a_stop_while_a_pass_submits_the_entry_wins(fake_hosts):
    fleets = [fleet_with_facts()]
    _runner, cluster = fake_hosts(task(), fleets, program=lambda job: (None, None))
    occupy(cluster, ["gpus-0", "gpus-1"])
    config = task(name="late", retry=WAIT)
    assert submit_detached(fake_hosts, cluster, config, fleets)["status"] == lc.RunStatus.PENDING
    free(cluster)

    def user_stops(node):   # between the pass's take and its start
        entry = cluster.nodes["gpus-0"].queue["late"]
        entry.update(state="terminated", taken_by=None, taken_until=None)

    cluster.nodes["gpus-0"].before_claim = user_stops
    report = a_pass(cluster, fleets)
    assert report["started"] == []
    assert cluster.ops("start") == []
    assert all(c["run"] != "late" for n in cluster.nodes.values() for c in n.claims)
    assert cluster.nodes["gpus-0"].queue["late"]["state"] == "terminated"


def test_ps_lists_one_record_when_a_name_is_queued_on_two_hosts():
    from ansible_collections.gpufleet.cluster.plugins.module_utils.tasks import listing

    old = {"run": "r", "run_id": "a", "state": "failed", "submitted_epoch": 1.0,
           "submitted_at": "2026-01-01T00:00:00Z", "reason": "x"}
    new = dict(old, run_id="b", state="pending", submitted_epoch=2.0,
               submitted_at="2026-01-02T00:00:00Z")
    records = [{"name": "r", "run_id": "c", "submitted": "2025-12-31T00:00:00Z", "jobs": []}]
    out = listing.with_queue(records, {"h0": [old], "h1": [new]})
    assert [(r["name"], r["run_id"], r["status"]) for r in out] == [("r", "b", "pending")]


def test_logs_of_a_queued_run_are_empty_and_follow_waits_for_its_wait_to_end(fake_hosts):
    from ansible_collections.gpufleet.cluster.plugins.module_utils.tasks import listing

    fleets = [fleet_with_facts()]
    _runner, cluster = fake_hosts(task(), fleets)
    occupy(cluster, ["gpus-0", "gpus-1"])
    config = task(name="late", retry=WAIT)
    assert submit_detached(fake_hosts, cluster, config, fleets)["status"] == lc.RunStatus.PENDING
    record, lines = listing.run_logs(cluster.nodes, "late")
    assert (record["status"], list(lines)) == (lc.RunStatus.PENDING, [])
    said, naps = [], []

    def nap(seconds):   # the user stops it while follow waits
        naps.append(seconds)
        cluster.nodes["gpus-0"].queue["late"].update(state="terminated",
                                                     reason=lc.TERMINATED_BY_USER)

    ended = listing.follow_logs(cluster.nodes, "late", said.append, sleep=nap)
    assert ended["status"] == lc.RunStatus.TERMINATED and naps == [listing.QUEUE_POLL]
    assert [e["message"] for e in said] == [
        "pending (queue position 1 on gpus-0): waiting for it to start"]


def test_attach_to_a_queued_run_says_it_is_not_running_yet_and_ps_finds_it(
        fake_hosts, tmp_path):
    from ansible_collections.gpufleet.cluster.plugins.module_utils.attach import session
    from ansible_collections.gpufleet.cluster.plugins.module_utils.tasks import listing

    fleets = [fleet_with_facts()]
    _runner, cluster = fake_hosts(task(), fleets)
    occupy(cluster, ["gpus-0", "gpus-1"])
    config = task(name="late", retry=WAIT)
    assert submit_detached(fake_hosts, cluster, config, fleets)["status"] == lc.RunStatus.PENDING
    containers, _claims, queues, errors = surveys.survey_with_queues(cluster.nodes)
    record, mine = listing.find_run(cluster.nodes, "late", (containers, errors), queues)
    assert (record["status"], mine) == (lc.RunStatus.PENDING, {})
    try:
        session.attach({"name": "late"}, cluster.nodes, str(tmp_path / "state"))
    except session.AttachError as exc:
        # gpufleet attach waits on these words, as dstack's attach waits for a run to start.
        assert "run late is pending (queue position 1 on gpus-0)" in str(exc)
        assert "not running yet" in str(exc)
    else:
        raise AssertionError("attach to a queued run did not refuse")
    # Without its queue entry nothing has that name (what attach says once it stopped waiting).
    try:
        listing.find_run(cluster.nodes, "late", (containers, errors))
    except Exception as exc:
        assert "no run named late" in str(exc)
    else:
        raise AssertionError("a queued run was found among containers")


# ---- services the queue starts or sees end (the pass's ``services`` hook, from above) -------

def service_config(least=2, most=2, scaling=None, **fields):
    """A service's replicas as the runner takes them (services.replicas.runnable)."""
    from ansible_collections.gpufleet.cluster.plugins.module_utils.services import replicas

    config = dict(task(name="svc", commands=["python3 -m http.server 8000"], **fields),
                  type="service", port=8000, replicas={"min": least, "max": most}, groups=None,
                  scaling=scaling, model=None, auth=True, https=None, gateway=None,
                  strip_prefix=True, rate_limits=[], probes=[])
    return replicas.runnable(config, replicas.proxy_of("svc", "gpus-0", "192.0.2.10", None))


class Hook(object):
    """The services' hook as the pass calls it: what it was given; a change for each publish
    and for the first take-off of a run (a route already gone changes nothing, as on the
    proxy host), or ``fails`` raised."""

    def __init__(self, fails=None):
        self.calls = []
        self.fails = fails
        self.off = set()

    def __call__(self, event, fleets, nodes):
        self.calls.append((event["kind"], event.get("run") or event["record"]["name"],
                           event))
        assert fleets and sorted(nodes) == ["gpus-0", "gpus-1"]
        if self.fails is not None:
            raise self.fails
        if event["kind"] == "ended":
            run = event["record"]["name"]
            changed = run not in self.off
            self.off.add(run)
            return {"changed": changed}
        return {"changed": True}

    def kinds(self):
        return [(kind, run) for kind, run, _event in self.calls]


def hooked_pass(cluster, fleets, hook, autoscale=True):
    return queue.QueuePass(fleets, runner_of=runs.runner_of, clock=cluster.clock,
                           sleep=cluster.sleep, poll=1.0, emit=cluster.emit,
                           services=hook, autoscale=autoscale).run()


def test_a_queued_service_that_a_pass_starts_is_published(fake_hosts):
    fleets = [fleet_with_facts()]
    _runner, cluster = fake_hosts(task(), fleets, program=lambda job: (None, None))
    occupy(cluster, ["gpus-0", "gpus-1"])
    config = service_config(retry=WAIT)
    assert submit_detached(fake_hosts, cluster, config, fleets)["status"] == lc.RunStatus.PENDING
    hook = Hook()
    # Still no room: nothing to publish.
    assert hooked_pass(cluster, fleets, hook)["published"] == [] and hook.calls == []
    free(cluster)
    report = hooked_pass(cluster, fleets, hook)
    assert report["started"] == ["svc"] and report["published"] == ["svc"]
    # only the started service: the run that ended ("first") is no service
    assert hook.kinds() == [("started", "svc")]
    entry = hook.calls[0][2]["entry"]
    assert entry["config"]["service"]["proxy_host"] == "gpus-0"
    assert sorted(p["job"]["run"] for _h, p in cluster.ops("start")) == ["svc", "svc"]
    # The next pass has nothing more to do for it: it runs.
    assert hooked_pass(cluster, fleets, hook)["published"] == [] and len(hook.calls) == 1


def test_a_failed_replica_is_started_again_alone_and_published(fake_hosts):
    fleets = [fleet_with_facts()]
    config = service_config(retry={"on_events": ["error"], "duration": "1h"})
    runner, cluster = fake_hosts(config, fleets, program=lambda job: (
        (1, 3) if not job.get("respawns") and job["job_num"] == 1 else (None, None)))
    result = runner.run(wait=False)
    assert result["status"] not in (lc.RunStatus.FAILED, lc.RunStatus.PENDING)
    cluster.sleep(1)
    cluster.sleep(1)   # replica 1 exits 3: retry covers the error, for that replica alone
    hook = Hook()
    report = hooked_pass(cluster, fleets, hook)
    # Replica 0 kept serving: nothing stopped, the run not resubmitted.
    assert report["respawned"] == ["svc-0-1"] and report["stopped"] == []
    assert report["resubmitted"] == [] and report["started"] == []
    # The route follows the new replica's port; it is not taken off.
    assert hook.kinds() == [("respawned", "svc")] and report["unpublished"] == []
    assert report["published"] == ["svc"]
    assert hook.calls[0][2]["record"]["service"]["respawn"] is True
    respawns = [(host, op, p) for host, op, p in cluster.log if op == "respawn"]
    assert [p for _h, _o, p in respawns] == [{"run": "svc", "job_num": 1}]
    cluster.sleep(1)
    # Both replicas run again: the next pass has nothing to do for it.
    report = hooked_pass(cluster, fleets, hook)
    assert report["respawned"] == [] and hook.kinds() == [("respawned", "svc")]


def test_a_running_service_that_autoscales_is_handed_to_the_hook_with_its_entry(fake_hosts):
    fleets = [fleet_with_facts()]
    rules = {"metric": "rps", "target": 5.0, "window": 30, "scale_up_delay": 0,
             "scale_down_delay": 0}
    config = service_config(1, 2, rules)
    runner, cluster = fake_hosts(config, fleets, program=lambda job: (None, None))
    # No retry: the entry is kept for autoscaling alone.
    assert queue_records.keeps_entry(config)
    runner.run(wait=False)
    cluster.sleep(1)

    class Scaler(Hook):
        def __call__(self, event, fleets_, nodes):
            answer = Hook.__call__(self, event, fleets_, nodes)
            if event["kind"] == "scale":
                made = event["runner"](dict(event["entry"]["config"], nodes=2))
                self.made = (made.run_id, made.config["nodes"])
                event["hosts"](["gpus-0", "gpus-1"])
                event["emit"]({"kind": "info", "message": "scaled"})
            return answer

    hook = Scaler()
    report = hooked_pass(cluster, fleets, hook)
    assert hook.kinds() == [("scale", "svc")] and report["scaled"] == ["svc"]
    event = hook.calls[0][2]
    # The whole entry (its config, for a new replica), the run as the pass saw it.
    assert event["entry"]["config"]["service"]["scaling"]["max"] == 2
    assert event["record"]["status"] == lc.RunStatus.RUNNING.value
    assert hook.made == (event["entry"]["run_id"], 2)
    # The entry was taken for the while, then let go with the hosts noted.
    (host,) = [h for h, node in cluster.nodes.items() if node.queue]
    entry = cluster.nodes[host].queue["svc"]
    assert entry["hosts"] == ["gpus-0", "gpus-1"] and entry["taken_by"] is None
    assert entry["state"] == queue_records.ACTIVE
    # A pass inside another command (ps, an apply) leaves autoscaling to scheduled ones.
    hooked_pass(cluster, fleets, hook, autoscale=False)
    assert hook.kinds() == [("scale", "svc")]
    # An apply that makes it a fixed service without retry takes its entry away.
    runner.drop_entry()
    assert "svc" not in cluster.nodes[host].queue


def test_an_attached_autoscaled_services_entry_carries_no_retry(fake_hosts):
    from ansible_collections.gpufleet.cluster.plugins.module_utils.tasks import runbook

    fleets = [fleet_with_facts()]
    rules = {"metric": "rps", "target": 5.0, "window": 30, "scale_up_delay": 0,
             "scale_down_delay": 0}
    config = service_config(1, 2, rules, retry={"on_events": ["error"], "duration": "1h"})
    runner, _cluster = fake_hosts(config, fleets)
    entry = runbook.entry_of(runner, ["gpus"], resubmits=False)
    # The attached process resubmits it; passes only scale it.
    assert entry["retry"] is None and entry["policy"]["retry"] is None
    assert entry["policy"]["scaling"]["max"] == 2
    assert runbook.entry_of(runner, ["gpus"])["policy"]["retry"]["on_events"] == ["error"]


def test_a_service_of_a_fixed_count_is_not_handed_to_the_hook_to_scale(fake_hosts):
    fleets = [fleet_with_facts()]
    config = service_config(retry={"on_events": ["error"], "duration": "1h"})
    runner, cluster = fake_hosts(config, fleets, program=lambda job: (None, None))
    runner.run(wait=False)
    cluster.sleep(1)
    (host,) = [h for h, node in cluster.nodes.items() if node.queue]
    assert cluster.nodes[host].queue["svc"]["state"] == queue_records.ACTIVE   # retry's entry
    hook = Hook()
    hooked_pass(cluster, fleets, hook)
    assert hook.calls == []


def test_a_service_that_ended_by_itself_is_taken_off_its_proxy(fake_hosts):
    fleets = [fleet_with_facts()]
    config = service_config()
    runner, cluster = fake_hosts(config, fleets, program=lambda job: (
        (1, 3) if job["job_num"] == 1 else (None, None)))
    runner.run(wait=False)
    cluster.sleep(1)
    cluster.sleep(1)   # replica 1 exits 3: without retry the service failed
    occupy(cluster, ["gpus-1"], run="other")   # a task: not the hook's
    free(cluster, run="other")
    hook = Hook()
    # The pass stops the replica left (the service failed): its route goes in the same pass.
    report = hooked_pass(cluster, fleets, hook)
    assert report["stopped"] == ["svc-0-0"] and report["unpublished"] == ["svc"]
    ((kind, run, event),) = hook.calls
    assert (kind, run, event["record"]["service"]["proxy_host"]) == ("ended", "svc", "gpus-0")
    # Once: the next pass sees it ended and finds nothing left to take off.
    assert hooked_pass(cluster, fleets, hook)["unpublished"] == []
    assert hook.kinds() == [("ended", "svc"), ("ended", "svc")]
    assert hook.calls[1][2]["record"]["status"] in lc.RunStatus.finished_statuses()


def test_a_task_that_ended_is_not_the_hooks(fake_hosts):
    fleets = [fleet_with_facts()]
    _runner, cluster = fake_hosts(task(), fleets, program=lambda job: (None, None))
    occupy(cluster, ["gpus-0", "gpus-1"])
    free(cluster)   # a task that ended
    hook = Hook()
    assert hooked_pass(cluster, fleets, hook)["unpublished"] == [] and hook.calls == []


def test_a_hook_that_fails_is_said_and_the_pass_goes_on(fake_hosts):
    from ansible_collections.gpufleet.cluster.plugins.module_utils.core.errors import (
        GpufleetError,
    )

    fleets = [fleet_with_facts()]
    _runner, cluster = fake_hosts(task(), fleets, program=lambda job: (None, None))
    occupy(cluster, ["gpus-0", "gpus-1"])
    assert submit_detached(fake_hosts, cluster, service_config(retry=WAIT),
                           fleets)["status"] == lc.RunStatus.PENDING
    free(cluster)
    report = hooked_pass(cluster, fleets, Hook(fails=GpufleetError("the proxy is away")))
    assert report["started"] == ["svc"] and report["published"] == []
    said = [e for _t, e in cluster.events if e["kind"] == "info" and e.get("run") == "svc"]
    assert [e["message"] for e in said] == ["the proxy is away"]


def test_a_pass_without_a_hook_leaves_routes_alone(fake_hosts):
    fleets = [fleet_with_facts()]
    _runner, cluster = fake_hosts(task(), fleets, program=lambda job: (None, None))
    occupy(cluster, ["gpus-0", "gpus-1"])
    submit_detached(fake_hosts, cluster, service_config(retry=WAIT), fleets)
    free(cluster)
    report = a_pass(cluster, fleets)
    assert report["started"] == ["svc"]
    assert (report["published"], report["unpublished"]) == ([], [])


def test_an_attached_service_starts_its_failed_replica_again_itself(fake_hosts):
    import threading

    fleets = [fleet_with_facts()]
    config = service_config(retry={"on_events": ["error"], "duration": "1h"})
    runner, cluster = fake_hosts(config, fleets, program=lambda job: (
        (1, 3) if job["job_num"] == 1 and job.get("respawns", 0) < 2 else (None, None)))
    stop = threading.Event()

    def user(cluster):
        respawned = [e for _t, e in cluster.events if e["kind"] == "replica"]
        if len(respawned) == 2 and cluster.snapshot()[1][0] == "running":
            stop.set()   # the second respawn holds: the user stops the service

    cluster.hook = user
    result = runner.run(wait=True, stop_event=stop)
    respawned = [(t, e) for t, e in cluster.events if e["kind"] == "replica"]
    assert [(e["job_num"], e["status"], e["respawns"]) for _t, e in respawned] == [
        (1, "respawned", 1), (1, "respawned", 2)]
    # A replica that fails at once is not made again on every look.
    assert respawned[1][0] - respawned[0][0] >= supervisor.RESPAWN_EVERY
    # Replica 0 served throughout: only the user's stop ended it.
    assert [e["status"] for e in cluster.job_events(0)].count("terminated") <= 1
    assert result["status"] == lc.RunStatus.TERMINATED


# ---------------------------------------------------------------------------------------------
# runs that run after others (--after): the gate is automation.dependencies.gate


def after_runner(cluster, fleets, config, after):
    from ansible_collections.gpufleet.cluster.plugins.module_utils.automation import dependencies

    return runs.Runner(config, fleets, emit=cluster.emit, clock=cluster.clock,
                       sleep=cluster.sleep, poll=1.0, environ={}, after=after,
                       gate=dependencies.gate)


def gated_pass(cluster, fleets):
    from ansible_collections.gpufleet.cluster.plugins.module_utils.automation import dependencies

    return queue.QueuePass(fleets, runner_of=runs.runner_of, clock=cluster.clock,
                           sleep=cluster.sleep, poll=1.0, emit=cluster.emit,
                           gate=dependencies.gate).run()


def end(cluster, run, code):
    for node in cluster.nodes.values():
        for box in node.containers:
            if box["labels"][RUN_LABEL] == run:
                box["state"] = "exited"
                box["files"]["exit_code"] = str(code)


def test_a_run_after_another_waits_as_pending_and_ends_when_that_one_fails(fake_hosts):
    fleets = [fleet_with_facts()]
    _runner, cluster = fake_hosts(task(), fleets, program=lambda job: (None, None))
    occupy(cluster, ["gpus-0"], run="prep")
    result = after_runner(cluster, fleets, task(name="train"), ["prep"]).run(wait=False)
    assert (result["status"], result["reason"], result["message"]) == (
        lc.RunStatus.PENDING, "dependency", "waiting for prep (ok)")
    entry = cluster.nodes["gpus-0"].queue["train"]
    assert (entry["state"], entry["after"]) == ("pending", ["prep"])
    assert cluster.ops("start") == []
    # eval after train: it waits too; a pass with no gate starts neither
    after_runner(cluster, fleets, task(name="eval"), ["train:ok"]).run(wait=False)
    assert a_pass(cluster, fleets)["started"] == []
    # ps says why each waits
    records = surveys_records(cluster)
    assert (records["train"]["status"], records["train"]["reason"]) == ("pending", "dependency")
    # prep fails: train ends terminated (dependency_failed), and eval with it in one pass
    end(cluster, "prep", 1)
    report = gated_pass(cluster, fleets)
    assert sorted(report["terminated"]) == ["eval", "train"] and report["started"] == []
    entry = cluster.nodes["gpus-0"].queue["train"]
    assert (entry["state"], entry["reason"], entry["message"]) == (
        "terminated", "dependency_failed", "run prep ended failed, and it runs after prep:ok")
    assert cluster.nodes["gpus-0"].queue["eval"]["message"] == (
        "run train ended terminated, and it runs after train:ok")
    # a run submitted after a run that failed ends at once, kept for ps and the runs after it
    result = after_runner(cluster, fleets, task(name="report"), ["prep"]).run(wait=False)
    assert (result["status"], result["reason"]) == (lc.RunStatus.TERMINATED, "dependency_failed")
    assert cluster.nodes["gpus-0"].queue["report"]["state"] == "terminated"
    assert cluster.ops("start") == []


def test_a_run_after_several_starts_once_all_ended_as_asked(fake_hosts):
    fleets = [fleet_with_facts()]
    _runner, cluster = fake_hosts(task(), fleets, program=lambda job: (None, None))
    occupy(cluster, ["gpus-0"], run="prep")
    occupy(cluster, ["gpus-1"], run="fetch")
    runner = after_runner(cluster, fleets, task(name="train"), ["prep", "fetch:any"])
    assert runner.run(wait=False)["message"] == "waiting for prep (ok), fetch (any)"
    end(cluster, "prep", 0)
    assert gated_pass(cluster, fleets)["started"] == []
    assert cluster.nodes["gpus-0"].queue["train"]["message"] == "waiting for fetch (any)"
    end(cluster, "fetch", 3)
    assert gated_pass(cluster, fleets)["started"] == ["train"]
    assert [p["job"]["run"] for _h, p in cluster.ops("start")] == ["train"]


def test_an_unknown_run_or_a_cycle_in_after_is_refused_at_submission(fake_hosts):
    import pytest

    from ansible_collections.gpufleet.cluster.plugins.module_utils.tasks.errors import RunError

    fleets = [fleet_with_facts()]
    _runner, cluster = fake_hosts(task(), fleets, program=lambda job: (None, None))
    with pytest.raises(RunError, match="--after: no run or job array named ghost on any fleet"):
        after_runner(cluster, fleets, task(name="train"), ["ghost"]).run(wait=False)
    occupy(cluster, ["gpus-0"], run="prep")
    after_runner(cluster, fleets, task(name="train"), ["prep"]).run(wait=False)
    after_runner(cluster, fleets, task(name="eval"), ["train"]).run(wait=False)
    with pytest.raises(RunError, match="--after: 'prep:maybe': the condition is ok, notok or "
                                       "any, not 'maybe'"):
        after_runner(cluster, fleets, task(name="fresh"), ["prep:maybe"]).run(wait=False)
    # eval waits for train, which waits for prep: train again, after eval, is a cycle
    with pytest.raises(RunError, match="--after: train would wait for itself: train waits for "
                                       "eval waits for train"):
        after_runner(cluster, fleets, task(name="train"), ["eval"]).run(wait=False)
    assert cluster.ops("start") == []


def surveys_records(cluster):
    from ansible_collections.gpufleet.cluster.plugins.module_utils.tasks import listing

    nodes = dict((name, node) for name, node in cluster.nodes.items())
    records, _errors = listing.list_runs(nodes)
    return dict((r["name"], r) for r in records)


def test_a_run_after_a_job_array_waits_for_every_run_of_it_also_those_not_submitted_yet(
        fake_hosts):
    from ansible_collections.gpufleet.cluster.plugins.module_utils.tasks.container import (
        ARRAY_COUNT_LABEL,
        ARRAY_INDEX_LABEL,
        ARRAY_LABEL,
    )

    fleets = [fleet_with_facts()]
    _runner, cluster = fake_hosts(task(), fleets, program=lambda job: (None, None))
    # sweep has 3 runs (%1): one ended done, the next not submitted yet
    occupy(cluster, ["gpus-0"], run="sweep-1")
    box = cluster.nodes["gpus-0"].containers[-1]
    box["labels"].update({ARRAY_LABEL: "sweep", ARRAY_INDEX_LABEL: "1",
                          ARRAY_COUNT_LABEL: "3"})
    end(cluster, "sweep-1", 0)
    runner = after_runner(cluster, fleets, task(name="report", retry=WAIT), ["sweep"])
    result = runner.run(wait=False)
    assert result["message"] == "waiting for sweep (ok)"
    assert gated_pass(cluster, fleets)["started"] == []
    # a run of the array after its own array is refused
    import pytest

    from ansible_collections.gpufleet.cluster.plugins.module_utils.tasks.errors import RunError

    arrayed = after_runner(cluster, fleets, task(name="sweep-2"), ["sweep"])
    arrayed.array = {"name": "sweep", "index": 2, "count": 3}
    with pytest.raises(RunError, match="run sweep-2 cannot run after itself \\(it is a run of "
                                       "the job array sweep\\)"):
        arrayed.run(wait=False)


def test_a_met_dependency_is_judged_once_and_its_wait_for_capacity_starts_then(fake_hosts):
    fleets = [fleet_with_facts()]
    _runner, cluster = fake_hosts(task(), fleets, program=lambda job: (None, None))
    occupy(cluster, ["gpus-0"], run="prep")
    occupy(cluster, ["gpus-1"], run="other")
    config = task(name="train", nodes=2, retry={"on_events": ["no-capacity"],
                                                "duration": "10m"})
    after_runner(cluster, fleets, config, ["prep:any"]).run(wait=False)
    cluster.now += 3600   # longer than retry's duration: the wait for prep does not count
    end(cluster, "prep", 1)
    report = gated_pass(cluster, fleets)   # prep ended; other still holds gpus-1
    assert report["started"] == [] and report["expired"] == []
    entry = cluster.nodes["gpus-0"].queue["train"]
    assert (entry["state"], entry["after"], entry["reason"]) == ("pending", [], entry["reason"])
    assert "gpus-1" in (entry["reason"] or "")   # now it waits for capacity
    # prep's record going away changes nothing for a run whose dependencies were met
    cluster.nodes["gpus-0"].containers = [c for c in cluster.nodes["gpus-0"].containers
                                          if c["labels"][RUN_LABEL] != "prep"]
    free(cluster, run="other")
    assert gated_pass(cluster, fleets)["started"] == ["train"]
