# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""GPU health, refreshed as dstack's server refreshes it: the verdict from DCGM or from
nvidia-smi's counters and the kernel log (hosts.health), the probe the hosts run
(tasks.hostside.healthside, run here as the hosts run it), the refresh into the facts cache
(tasks.health), the fleet table's status and reason, and placement reading the refreshed
health."""

from __future__ import annotations

import datetime
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from ansible_collections.gpufleet.cluster.plugins.module_utils.fleets import state
from ansible_collections.gpufleet.cluster.plugins.module_utils.hosts import health as judging
from ansible_collections.gpufleet.cluster.plugins.module_utils.render.fleet_table import (
    fleet_table,
    instance_status,
)
from ansible_collections.gpufleet.cluster.plugins.module_utils.tasks import (
    health,
    placement,
    ssh,
    surveys,
)
from ansible_collections.gpufleet.cluster.plugins.module_utils.tasks.hostside import bootstrap
from ansible_collections.gpufleet.cluster.plugins.module_utils.tasks.ssh import NodeError

from ..hosts.test_nodecheck_dcgm import FAILURE_JSON, HEALTHY_JSON, WARNING_JSON, WARNING_TABLE
from .test_placement import cpu_fact, fleet, task

SAMPLES = Path(__file__).parents[1] / "fixtures" / "health"
DRIVER_NOT_LOADED = Path(__file__).parents[1] / "fixtures" / "hostfacts" / "nvidia-smi" / \
    "driver-not-loaded.txt"
NOW = datetime.datetime(2026, 11, 21, 10, 0, tzinfo=datetime.timezone.utc)
NOW_TEXT = "2026-11-21T10:00:00Z"


def sample(name):
    return (SAMPLES / name).read_text()


def ran(out, rc=0, err=""):
    return {"argv": ["tool"], "rc": rc, "out": out, "err": err}


def smi_probe(gpus, remaps=None, xid=()):
    probe = {"nvidia_smi": ran(sample(gpus))}
    probe["remapped_rows"] = ran(sample(remaps)) if remaps else ran("", 2, "not supported")
    probe["xid"] = list(xid)
    return probe


# ---------------------------------------------------------------------------------------------
# The verdict
# ---------------------------------------------------------------------------------------------


def test_dcgm_decides_when_its_host_engine_answers():
    healthy = judging.judge({"dcgmi": ran(HEALTHY_JSON)}, NOW_TEXT)
    assert (healthy["status"], healthy["source"], healthy["message"]) == ("healthy", "dcgm", None)
    assert healthy["checked_at"] == NOW_TEXT
    warning = judging.judge({"dcgmi": ran(WARNING_JSON)})
    assert warning["status"] == "warning"
    assert warning["message"] == "Detected more than 8 PCIe replays per minute for GPU 0 : 13"
    failure = judging.judge({"dcgmi": ran(FAILURE_JSON)})
    assert failure["status"] == "failure"
    # The worst incident's message, as the dcgm role's check picks it.
    assert failure["message"] == "Detected 2 volatile double-bit ECC error(s) in GPU 1."
    assert judging.judge({"dcgmi": ran(WARNING_TABLE)})["status"] == "warning"


def test_without_a_host_engine_nvidia_smi_counters_decide():
    down = ran("", 255, "Error: unable to establish a connection to the specified host: "
                        "localhost\nError: Unable to connect to host engine. Host engine "
                        "connection invalid/disconnected.")
    probe = dict(smi_probe("synthetic.h100-x8.uncorrectable-ecc.csv",
                           "synthetic.h100-x8.remapped-rows.csv"), dcgmi=down)
    judged = judging.judge(probe)
    assert judged["status"] == "failure" and judged["source"] == "nvidia-smi"
    assert judged["message"] == "GPU 3 has 2 volatile uncorrectable (double-bit) ECC error(s)"
    assert judged["incidents"] == [{"entity": "GPU 3", "health": "failure",
                                    "message": judged["message"]}]


def test_a_healthy_h100_host_and_a_gpu_without_ecc_are_healthy():
    judged = judging.judge(smi_probe("synthetic.h100-x8.healthy.csv",
                                     "synthetic.h100-x8.remapped-rows.csv",
                                     sample("synthetic.dmesg.app-errors-only.txt").splitlines()))
    assert (judged["status"], judged["incidents"], judged["error"]) == ("healthy", [], None)
    assert judging.judge(smi_probe("synthetic.rtx4090.no-ecc.csv"))["status"] == "healthy"


def test_a_real_h200_reads_healthy_from_nvidia_smi():
    # Captured on a lent H200 machine (fixtures/health/README.md).
    judged = judging.judge(smi_probe("captured.h200.healthy.csv",
                                     "captured.h200.remapped-rows.csv"))
    assert (judged["status"], judged["incidents"], judged["error"]) == ("healthy", [], None)


def test_a_real_h200_metrics_sample_parses():
    from ansible_collections.gpufleet.cluster.plugins.module_utils.tasks import metrics

    (block,) = metrics.parse(sample("captured.h200.metrics-sample.txt"))
    assert block["gpus"] == [{"util": 0.0, "used_mib": 0.0, "total_mib": 143771.0}]
    assert block["cpus"] == 16 and block["cpu_usec"] is None


def test_row_remapping_pending_warns_and_failed_fails():
    judged = judging.judge(smi_probe("synthetic.h100-x8.healthy.csv",
                                     "synthetic.h100-x8.remapped-rows.pending-and-failed.csv"))
    assert judged["status"] == "failure"
    assert [(i["entity"], i["health"]) for i in judged["incidents"]] == [
        ("GPU 3", "warning"), ("GPU 7", "failure")]
    assert judged["message"] == "GPU 7 failed to remap a memory row"


def test_retired_pages_pending_warn_and_sixty_fail():
    judged = judging.judge(smi_probe("synthetic.v100-x4.retired-pages.csv"))
    assert [(i["entity"], i["health"], i["message"]) for i in judged["incidents"]] == [
        ("GPU 1", "warning", "GPU 1 has a page pending retirement (reset the GPU)"),
        ("GPU 2", "failure", "GPU 2 has 61 retired pages, the limit is 60"),
    ]
    assert judged["status"] == "failure"


def test_xid_lines_count_by_their_meaning_once_per_gpu():
    judged = judging.judge(smi_probe("synthetic.h100-x8.healthy.csv",
                                     "synthetic.h100-x8.remapped-rows.csv",
                                     sample("synthetic.dmesg.xid.txt").splitlines()))
    # 13 and 43 are the application's; 94 warns; 79 (twice) fails once.
    assert [(i["entity"], i["health"]) for i in judged["incidents"]] == [
        ("GPU 4", "warning"), ("GPU 7", "failure")]
    assert judged["message"] == ("GPU 7: XID 79 in the kernel log (the GPU has fallen off "
                                 "the bus)")


def test_a_failing_nvidia_smi_keeps_the_old_health_unless_the_kernel_says_why():
    probe = {"nvidia_smi": ran(DRIVER_NOT_LOADED.read_text(), 9), "xid": []}
    judged = judging.judge(probe)
    assert judged["status"] is None
    assert judged["error"].startswith("nvidia-smi failed (exit status 9): NVIDIA-SMI has failed")
    probe["xid"] = sample("synthetic.dmesg.xid.txt").splitlines()
    judged = judging.judge(probe)
    assert judged["status"] == "failure" and judged["error"]
    assert "XID 79" in judged["message"]


def test_no_tools_is_healthy_and_a_broken_dcgmi_alone_is_unknown():
    assert judging.judge({})["status"] == "healthy"
    judged = judging.judge({"dcgmi": ran("", None, "no answer within 20 s")})
    assert judged["status"] is None and "did not finish" in judged["error"]


# ---------------------------------------------------------------------------------------------
# The probe, as a host runs it
# ---------------------------------------------------------------------------------------------


def _tool(folder, name, text):
    path = folder / name
    path.write_text("#!/bin/sh\n" + text)
    path.chmod(0o755)


def host_answer(tmp_path, request, tools):
    """Run the host source (nodeside, booking, healthside) as tasks.ssh sends it, with
    ``tools`` (name: shell body) first on PATH."""
    folder = tmp_path / "bin"
    folder.mkdir(exist_ok=True)
    for name, body in tools.items():
        _tool(folder, name, body)
    data = ssh.host_source() + b"\n" + bootstrap.SEPARATOR + b"\n" + json.dumps(request).encode()
    env = dict(os.environ, PATH="%s:%s" % (folder, os.environ.get("PATH", "")))
    proc = subprocess.run([sys.executable, "-c", bootstrap.BOOTSTRAP], input=data,
                          stdout=subprocess.PIPE, env=env, check=True, timeout=60)
    return json.loads(proc.stdout.decode().strip().splitlines()[-1])


def test_the_host_reads_nvidia_smi_and_the_kernel_log_when_dcgm_does_not_answer(tmp_path):
    csv_path = SAMPLES / "synthetic.h100-x8.uncorrectable-ecc.csv"
    xid_path = SAMPLES / "synthetic.dmesg.xid.txt"
    answer = host_answer(tmp_path, {"op": "health"}, {
        "dcgmi": "echo 'Error: unable to establish a connection to the specified host: "
                 "localhost' >&2; exit 255\n",
        "nvidia-smi": 'case "$1" in --query-gpu=*) cat %s;; *) echo "No devices"; exit 2;; '
                      "esac\n" % csv_path,
        "dmesg": "echo '[    1.0] Linux version'; cat %s\n" % xid_path,
    })
    probe = answer["health"]
    assert probe["dcgmi"]["rc"] == 255
    assert probe["nvidia_smi"]["argv"][1] == "--query-gpu=" + (
        "index,pci.bus_id,ecc.errors.uncorrected.volatile.total,retired_pages.pending,"
        "retired_pages.single_bit_ecc.count,retired_pages.double_bit.count")
    assert probe["remapped_rows"]["rc"] == 2
    # Only the XID lines come back, not the rest of the kernel log.
    assert probe["xid"] == [line for line in xid_path.read_text().splitlines()
                            if "NVRM: Xid" in line]
    assert len(probe["xid"]) == 6
    judged = judging.judge(probe)
    assert judged["status"] == "failure"
    assert [i["entity"] for i in judged["incidents"]] == ["GPU 3", "GPU 4", "GPU 7"]


def test_the_host_stops_at_dcgm_when_it_answers_and_status_asks_only_when_told(tmp_path):
    report = tmp_path / "report.json"
    report.write_text(WARNING_JSON)
    tools = {"dcgmi": "cat %s\n" % report, "nvidia-smi": "exit 99\n",
             "docker": "exit 0\n"}
    probe = host_answer(tmp_path, {"op": "health"}, tools)["health"]
    assert list(probe) == ["dcgmi"]
    assert judging.judge(probe)["status"] == "warning"
    answer = host_answer(tmp_path, {"op": "status", "payload": {"health": True}}, tools)
    assert answer["health"]["dcgmi"]["rc"] == 0 and answer["containers"] == []
    assert "health" not in host_answer(tmp_path, {"op": "status"}, tools)


# ---------------------------------------------------------------------------------------------
# The refresh and the facts cache
# ---------------------------------------------------------------------------------------------


class StandIn:
    """A tasks.ssh.Node that answers ``health`` with a canned probe (or fails)."""

    def __init__(self, instance, probes, asked):
        self.name = instance["name"]
        self.probes = probes
        self.asked = asked

    def call(self, op, payload=None, timeout=None):
        self.asked.append((self.name, op))
        probe = self.probes[self.name]
        if isinstance(probe, Exception):
            raise probe
        return {"health": probe}


def _fleet_record(name, count, **extra):
    record = fleet(name, count, **extra)
    for inst in record["instances"]:
        inst["fleet"] = name
    return record


@pytest.fixture
def cached(tmp_path):
    root = str(tmp_path / "state")
    state.write_facts(root, "gpus", {
        "gpus-0": cpu_fact(),
        "gpus-1": cpu_fact(health_checked_at="2026-11-21T09:58:00Z", health="warning",
                           health_message="earlier"),
        "gpus-2": cpu_fact(),
    })
    return root


def test_refresh_asks_stale_hosts_keeps_their_health_and_carries_it(cached):
    asked = []
    probes = {
        "gpus-0": smi_probe("synthetic.h100-x8.uncorrectable-ecc.csv"),
        "gpus-2": NodeError("gpus-2", "unreachable over SSH: no route to host"),
    }
    record = _fleet_record("gpus", 4)
    records = health.refresh([record], cached, max_age=300, now=NOW,
                             node_factory=lambda inst: StandIn(inst, probes, asked))
    # gpus-1 was read 2 minutes ago, gpus-3 has no cached facts (never ready): not asked.
    assert sorted(asked) == [("gpus-0", "health"), ("gpus-2", "health")]
    by_name = dict((i["name"], i) for i in records[0]["instances"])
    assert by_name["gpus-0"]["health"]["status"] == "failure"
    assert by_name["gpus-0"]["health"]["checked_at"] == NOW_TEXT
    assert by_name["gpus-1"]["health"]["message"] == "earlier"
    assert by_name["gpus-2"]["health"]["status"] == "healthy"
    assert "no route" in by_name["gpus-2"]["health_unreachable"]
    assert by_name["gpus-3"]["health"] is None
    facts = state.read_facts(cached, "gpus")
    assert facts["gpus-0"]["health"] == "failure"
    assert facts["gpus-0"]["health_source"] == "nvidia-smi"
    assert facts["gpus-0"]["cpus"] == 8   # the rest of the facts stay
    assert "health_checked_at" not in facts["gpus-2"]
    assert "gpus-3" not in facts


def test_refresh_with_max_age_zero_asks_all_and_check_mode_writes_nothing(cached):
    asked = []
    probes = dict.fromkeys(("gpus-0", "gpus-1", "gpus-2"),
                           smi_probe("synthetic.v100-x4.retired-pages.csv"))
    before = state.read_facts(cached, "gpus")
    records = health.refresh([_fleet_record("gpus", 3)], cached, max_age=0, now=NOW,
                             check_mode=True,
                             node_factory=lambda inst: StandIn(inst, probes, asked))
    assert len(asked) == 3
    assert state.read_facts(cached, "gpus") == before
    assert [i["health"]["status"] for i in records[0]["instances"]] == ["failure"] * 3


def test_a_probe_that_cannot_say_keeps_the_health_and_notes_why(cached):
    probes = {"gpus-1": {"nvidia_smi": ran(DRIVER_NOT_LOADED.read_text(), 9), "xid": []}}
    records = health.refresh([_fleet_record("gpus", 2)], cached, max_age=0, now=NOW,
                             node_factory=lambda inst: StandIn(
                                 inst, dict(probes, **{"gpus-0": {}}), []))
    gpus1 = records[0]["instances"][1]["health"]
    assert gpus1["status"] == "warning" and gpus1["message"] == "earlier"
    assert gpus1["error"].startswith("nvidia-smi failed (exit status 9)")
    assert gpus1["checked_at"] == NOW_TEXT


class SurveyNode:
    def __init__(self, probe):
        self.probe = probe
        self.payloads = []

    def call(self, op, payload=None, timeout=None):
        self.payloads.append((op, payload))
        answer = {"containers": [], "claims": [], "queue": []}
        if payload and payload.get("health"):
            answer["health"] = self.probe
        return answer


def test_the_survey_reads_health_only_where_asked_and_placement_reads_the_cache(cached):
    nodes = {"gpus-0": SurveyNode(smi_probe("synthetic.h100-x8.uncorrectable-ecc.csv")),
             "gpus-1": SurveyNode({})}
    raw = {}
    surveys.survey_with_queues(nodes, probe=["gpus-0"], health=raw)
    assert nodes["gpus-0"].payloads == [("status", {"health": True})]
    assert nodes["gpus-1"].payloads == [("status", {})]
    said = health.from_survey(raw, "gpus", cached, NOW)
    assert health.summary(said) == {
        "gpus-0": "failure: GPU 3 has 2 volatile uncorrectable (double-bit) ECC error(s)"}
    # Placement reads the cache the survey refreshed: gpus-0 is out, gpus-1 (warning) is used.
    facts = state.read_facts(cached, "gpus")
    fleets = [_fleet_record("gpus", 2)]
    plan = placement.place(task(), fleets, facts)
    assert plan["jobs"][0]["host"] == "gpus-1"
    with pytest.raises(placement.NoHostFits) as info:
        placement.place(task(nodes=2), fleets, facts)
    assert ("gpus-0: health failure (GPU 3 has 2 volatile uncorrectable (double-bit) ECC "
            "error(s))") in str(info.value)


def test_update_facts_merges_into_hosts_already_cached_only(tmp_path):
    root = str(tmp_path)
    state.write_facts(root, "f", {"f-0": {"cpus": 2}})
    assert state.update_facts(root, "f", {"f-0": {"health": "failure"}, "f-9": {"x": 1}})
    assert state.read_facts(root, "f") == {"f-0": {"cpus": 2, "health": "failure"}}
    assert not state.update_facts(root, "f", {"f-0": {"health": "failure"}})


# ---------------------------------------------------------------------------------------------
# The fleet table
# ---------------------------------------------------------------------------------------------


def _instance(num, status="idle", health_=None, **extra):
    record = {"num": num, "name": "gpus-%d" % num, "backend": "ssh", "status": status,
              "health": health_}
    record.update(extra)
    return record


def _health(status, message=None, error=None):
    return {"status": status, "message": message, "source": "nvidia-smi", "incidents": [],
            "checked_at": NOW_TEXT, "error": error}


def test_status_shows_warning_and_failure_as_dstack_does():
    assert instance_status(_instance(0, health_=_health("healthy"))) == "idle"
    assert instance_status(_instance(0, health_=_health("failure"))) == "idle (failure)"
    assert instance_status(_instance(0, "busy", _health("warning"))) == "busy (warning)"
    blocks = _instance(0, "busy", _health("warning"), blocks=8, busy_blocks=2)
    assert instance_status(blocks) == "2/8 busy (warning)"
    # Unreachable wins, as in dstack; a gone instance shows no health.
    assert instance_status(_instance(0, health_=_health("failure"), unreachable=True)) == \
        "idle (unreachable)"
    assert instance_status(_instance(0, "terminated", _health("failure"))) == "terminated"
    # The dcgm role's health, in the measured resources, counts too.
    assert instance_status(_instance(0, resources={"health": "warning"})) == "idle (warning)"


def test_the_verbose_table_says_why_and_the_short_one_does_not():
    record = {"name": "gpus", "fleet_type": "ssh", "hosts": 2, "instances": [
        _instance(0, health_=_health("failure", "GPU 3 has 2 volatile uncorrectable "
                                                "(double-bit) ECC error(s)")),
        _instance(1, health_=_health("warning", "earlier",
                                     "nvidia-smi failed (exit status 9): no driver")),
    ]}
    short = fleet_table([record], now=NOW_TEXT)
    assert "idle (failure)" in short[2] and "idle (warning)" in short[3]
    assert len(short) == 4 and "ECC" not in "\n".join(short)
    verbose = fleet_table([record], now=NOW_TEXT, verbose=True)
    assert verbose[2].endswith("health failure: GPU 3 has 2 volatile uncorrectable "
                               "(double-bit) ECC error(s)")
    assert verbose[3].endswith("health warning: earlier; health not read: nvidia-smi failed "
                               "(exit status 9): no driver")


class StatusNode:
    """A tasks.ssh.Node that answers ``status`` as a host does: its containers and claims, and
    the health probe when the payload asks for it."""

    def __init__(self, instance, answers, asked):
        self.name = instance["name"]
        self.answers = answers
        self.asked = asked

    def call(self, op, payload=None, timeout=None):
        self.asked.append((self.name, op, dict(payload or {})))
        answer = self.answers[self.name]
        if isinstance(answer, Exception):
            raise answer
        answer = dict(answer)
        if not (payload or {}).get("health"):
            answer.pop("health", None)
        return answer


def test_gpufleet_fleet_asks_every_host_what_runs_there_and_shows_busy(cached):
    healthy = smi_probe("synthetic.h100-x8.healthy.csv")
    running = {"name": "train-0-0", "state": "running", "exit_code": 0,
               "labels": {"gpufleet.run": "train", "gpufleet.submission": "0",
                          "gpufleet.job": "0", "gpufleet.blocks": "1"},
               "files": {"running": "1", "reason": None, "exit_code": None}}
    answers = {
        # A claim of a run being placed: busy before its container exists.
        "gpus-0": {"containers": [], "claims": [{"run": "next", "submission": 0, "blocks": 1,
                                                 "gpu_ids": []}], "health": healthy},
        "gpus-1": {"containers": [running], "claims": [], "health": healthy},
        "gpus-2": {"containers": [dict(running, state="exited")], "claims": [],
                   "health": healthy},
    }
    asked = []
    record = _fleet_record("gpus", 3)
    for inst in record["instances"]:
        inst["status"] = "idle"
    records = health.refresh([record], cached, max_age=300, now=NOW, occupancy=True,
                             node_factory=lambda inst: StatusNode(inst, answers, asked))
    # Every host is asked once; only those whose health is stale read it (gpus-1: 2 min old).
    assert sorted(asked) == [("gpus-0", "status", {"health": True}),
                             ("gpus-1", "status", {}),
                             ("gpus-2", "status", {"health": True})]
    by_name = dict((i["name"], i) for i in records[0]["instances"])
    assert [(n, by_name[n]["status"], by_name[n]["busy_blocks"]) for n in sorted(by_name)] == [
        ("gpus-0", "busy", 1), ("gpus-1", "busy", 1), ("gpus-2", "idle", 0)]
    assert by_name["gpus-0"]["health"]["status"] == "healthy"
    assert by_name["gpus-1"]["health"]["message"] == "earlier"   # not read again
    # dstack's words in the table: busy, with the health's warning.
    assert instance_status(by_name["gpus-1"]) == "busy (warning)"


def test_a_host_that_does_not_answer_keeps_its_status(cached):
    answers = {"gpus-0": NodeError("gpus-0", "unreachable over SSH: timed out"),
               "gpus-1": {"containers": [], "claims": []}, "gpus-2": {"containers": []}}
    record = _fleet_record("gpus", 3)
    for inst in record["instances"]:
        inst["status"] = "idle"
    records = health.refresh([record], cached, max_age=300, now=NOW, occupancy=True,
                             node_factory=lambda inst: StatusNode(inst, answers, []))
    gpus0 = records[0]["instances"][0]
    assert gpus0["status"] == "idle" and "busy_blocks" not in gpus0
    assert "timed out" in gpus0["health_unreachable"]
    assert records[0]["status"] == "active"   # the others answered


def test_a_fleet_whose_only_host_does_not_answer_is_not_shown_active(cached):
    answers = {"gpus-0": NodeError("gpus-0", "unreachable over SSH: Connection refused")}
    record = _fleet_record("gpus", 1)
    record["instances"][0]["status"] = "idle"
    records = health.refresh([record], cached, max_age=300, now=NOW, occupancy=True,
                             node_factory=lambda inst: StatusNode(inst, answers, []))
    assert records[0]["status"] == "unreachable"
    assert "Connection refused" in records[0]["instances"][0]["health_unreachable"]


def test_gpufleet_fleet_asks_an_ssh_host_never_found_ready_too(cached):
    """An SSH fleet applied while its only host refused: no cached facts, but the listing asks
    it, sees it does not answer and does not show the fleet active."""
    asked = []
    answers = {"lab-0": NodeError("lab-0", "unreachable over SSH: Connection refused")}
    record = dict(_fleet_record("lab", 1), fleet_type="ssh")
    record["instances"][0].update(status="pending", backend="ssh")
    records = health.refresh([record], cached, max_age=300, now=NOW, occupancy=True,
                             node_factory=lambda inst: StatusNode(inst, answers, asked))
    assert [a[0] for a in asked] == ["lab-0"]
    assert records[0]["status"] == "unreachable"
