# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Plain helpers the tests of tasks share (the fixtures are in conftest.py).

Fake hosts for the task runner (``Cluster`` of ``FakeNode``: in-memory containers, a fake clock
that moves when the code under test sleeps), the container records and labels they answer with,
hand-built gpufleet_host facts and fleet records, and the fake ``docker`` on PATH for the
node-side helper.
"""

from __future__ import annotations

import base64
import copy
import json
import os
import sys
import threading
import time

from ansible_collections.gpufleet.cluster.plugins.module_utils.tasks import queue, runs, supervisor
from ansible_collections.gpufleet.cluster.plugins.module_utils.tasks.hostside import (
    admitside,
    booking,
    indexside,
)
from ansible_collections.gpufleet.cluster.plugins.module_utils.tasks.ssh import NodeError

RUN_LABEL = supervisor.RUN_LABEL
JOB_LABEL = supervisor.JOB_LABEL
SUB_LABEL = supervisor.SUBMISSION_LABEL
STARTED = "1700000000"

# ---------------------------------------------------------------------------------------------
# Fake hosts
# ---------------------------------------------------------------------------------------------


def container(name, labels, state="created", running=None, reason=None, exit_code=None,
              docker_code=0):
    """A container entry shaped as nodeside.op_status answers it."""
    return {
        "name": name, "labels": dict(labels), "state": state, "exit_code": docker_code,
        "oom_killed": False, "started_at": "2026-01-01T10:00:00Z", "finished_at": None,
        "error": None,
        "files": {"running": running, "reason": reason,
                  "exit_code": None if exit_code is None else str(exit_code)},
    }


class FakeNode:
    """A host with the interface of tasks.ssh.Node, its containers kept in a list."""

    def __init__(self, name, cluster):
        self.name = name
        self.sudo = ""
        self.cluster = cluster
        self.containers = []
        self.left = {}  # container name -> (ticks left running, exit code or None)
        self.down = False
        self.fail_start = None
        self.claims = []
        self.queue = {}
        self.mirror = {}   # copies of another host's entries (tasks.hostside.mirrorside)
        self.handed = {}   # the notes of the copies it adopted
        self.before_claim = None  # a competitor acting between a survey and a claim
        self.before_stop = None   # a job ending by itself between a survey and a stop
        # The run index it keeps as a record host (tasks.hostside.indexside's rules, without files):
        # {fleet: {"entries": {run: {host: noted}}, "completed": time or None}}.
        self.index = {}
        # The members document's caps (tasks.hostside.admitside), or None; the admission
        # ledger it keeps as a queue host ({run: entry}).
        self.limits = None
        self.admitted = {}
        self.usage_24h = None
        self.kept = {}   # (run, job_num) -> the job its start got (op_respawn)

    def call(self, op, payload=None, timeout=120):
        payload = payload or {}
        with self.cluster.lock:
            self.cluster.log.append((self.name, op, copy.deepcopy(payload)))
            if self.down:
                raise NodeError(self.name, "unreachable over SSH: Connection timed out",
                                silent=True)
            return getattr(self, "op_" + op)(payload)

    def op_status(self, payload):
        run = payload.get("run")
        answer = {"containers": [copy.deepcopy(c) for c in self.containers
                                 if run is None or c["labels"].get(RUN_LABEL) == run]}
        if run is None:
            by_sub = booking._containers_by_submission(self.containers)
            answer["claims"] = [c for c in self.claims
                                if booking.claim_live(c, by_sub, self.cluster.now)]
            answer["queue"] = [booking.summary(e) for e in self.queue.values()]
            if self.mirror or self.handed:
                answer["queue_mirror"] = [booking.summary(e) for e in list(
                    self.mirror.values()) + list(self.handed.values())]
            answer["limits"] = copy.deepcopy(self.limits)
            if self.usage_24h is not None:
                answer["usage_24h"] = dict(self.usage_24h)
        if payload.get("index"):
            kept = self.index.get(payload["index"]["fleet"]) or {}
            answer["index"] = indexside.view(kept.get("entries") or {}, kept.get("completed"),
                                             payload["index"]["run"], self.cluster.now)
        return answer

    def op_note(self, payload):
        kept = self.index.setdefault(payload["fleet"], {"entries": {}, "completed": None})
        kept["entries"].update(indexside.noted(kept["entries"], payload["run"], payload["hosts"],
                                               payload.get("idle"), self.cluster.now))
        return {"noted": sorted(kept["entries"][payload["run"]]["hosts"])}

    def op_reindex(self, payload):
        kept = self.index.setdefault(payload["fleet"], {"entries": {}, "completed": None})
        begun = self.cluster.now - payload["age"]
        kept["entries"] = indexside.rewritten(kept["entries"], payload["runs"],
                                              payload["alive"], payload["answered"],
                                              self.cluster.now, begun, set(payload["members"]))
        if payload["complete"]:
            kept["completed"] = begun
        return {"reindexed": True}

    def op_start(self, payload):
        # As booking.op_start_booked: the claim under the lock, the clearing of an earlier run
        # of the name when the claim says "replace", then nodeside's start.
        job = payload["job"]
        if self.fail_start:
            raise NodeError(self.name, self.fail_start)
        claim = job.get("claim")
        if claim:
            answer = self.op_claim(dict(claim, replace=False, image=None, queue=False))
            if not answer["claimed"]:
                raise NodeError(self.name, "taken meanwhile: " + answer["reason"])
            mine = (str(claim["run_id"]), str(claim["submission"]))
            if claim.get("replace") and not any(
                    (c["labels"].get("gpufleet.run-id"), c["labels"].get(SUB_LABEL)) == mine
                    for c in self.containers):
                self.containers = [c for c in self.containers
                                   if c["labels"].get(RUN_LABEL) != claim["run"]]
        if any(c["name"] == job["container"] for c in self.containers):
            return {"started": False, "exists": True}
        self.cluster.started.append((self.name, job["job_num"], self.cluster.snapshot()))
        self.containers.append(container(job["container"], job["labels"]))
        self.left[job["container"]] = self.cluster.program(job)
        self.kept[(job["run"], job["job_num"])] = copy.deepcopy(job)
        return {"started": True, "id": "id-" + job["container"]}

    def op_respawn(self, payload):
        # As booking.op_respawn_booked: a replica that ended is made again from its start's
        # job (``respawns`` counts the times, which ``program`` may read).
        job = self.kept.get((payload["run"], payload["job_num"]))
        if job is None or any(c["name"] == job["container"] and c["state"] in (
                "created", "running") for c in self.containers):
            return {"respawned": False, "why": "not here, or running"}
        job["respawns"] = job.get("respawns", 0) + 1
        self.containers = [c for c in self.containers if c["name"] != job["container"]]
        self.containers.append(container(job["container"], job["labels"]))
        self.left[job["container"]] = self.cluster.program(job)
        return {"respawned": True, "id": "id-" + job["container"], "respawns": job["respawns"]}

    def op_stop(self, payload):
        # As nodeside.op_stop: no reason for a job whose command ended by itself ("ended").
        if self.before_stop is not None:
            self.before_stop, hook = None, self.before_stop
            hook(self)
        names = []
        ended = []
        for item in payload["jobs"]:
            for box in self.containers:
                if box["name"] != item["container"]:
                    continue
                if box["files"]["exit_code"] is not None:
                    ended.append(item["job_num"])
                elif not box["files"]["reason"]:
                    box["files"]["reason"] = payload["reason"]
                if box["state"] in ("created", "running"):
                    box["state"] = "exited"
                    box["exit_code"] = 143
                names.append(box["name"])
        return {"stopped": names, "ended": ended}

    def op_remove(self, payload):
        gone = [c["name"] for c in self.containers if c["labels"].get(RUN_LABEL) == payload["run"]]
        self.containers = [c for c in self.containers if c["name"] not in gone]
        self.claims = [c for c in self.claims
                       if c["run"] != payload["run"] or c.get("run_id") == payload.get("keep")]
        return {"removed": gone}

    def op_record_failure(self, payload):
        return {"recorded": True}

    def op_arm(self, payload):
        # As scheduleside.op_arm: the job kept, no container; the next firing a minute on.
        if self.fail_start:
            raise NodeError(self.name, self.fail_start)
        job = payload["job"]
        self.kept[(job["run"], job["job_num"])] = dict(job, cron=payload["cron"])
        # What its status answers for a job that never fired yet (scheduleside's wrapper).
        kept = container(job["container"], job["labels"], state="scheduled")
        kept["files"]["schedule"] = {"cron": payload["cron"], "next": self.cluster.now + 60,
                                     "firings": 0, "last": None, "stopped": False,
                                     "waiting": None, "error": None}
        self.containers.append(kept)
        return {"armed": True, "next": self.cluster.now + 60}

    def op_image_info(self, payload):
        return {"present": True, "entrypoint": None, "cmd": None, "working_dir": None}

    # Claims, decided by tasks.hostside.booking's own rules over this host's containers.
    def op_claim(self, payload):
        if self.before_claim is not None:
            self.before_claim, hook = None, self.before_claim
            hook(self)
        claim = dict(payload, expires=self.cluster.now + payload.get("lease", 900))
        others = [c for c in self.claims if c["run"] != claim["run"]]
        why = booking.conflict(claim, self.claims, self.containers, self.cluster.now)
        if why:
            return {"claimed": False, "reason": why}
        self.claims = others + [claim]
        answer = {"claimed": True, "claim": claim}
        # What booking.op_claim does besides: clear the run's leftovers, say the image.
        if payload.get("replace"):
            gone = [c["name"] for c in self.containers
                    if c["labels"].get(RUN_LABEL) == payload["run"]]
            self.containers = [c for c in self.containers if c["name"] not in gone]
            answer["replaced"] = gone
        if payload.get("image"):
            answer["image"] = self.op_image_info({"image": payload["image"]})
        if payload.get("queue"):
            answer["queue"] = [booking.summary(e) for e in self.queue.values()]
        return answer

    # The queue, kept as booking keeps it (entries by run name), without files.
    def op_enqueue(self, payload):
        entry = dict(payload["entry"])
        old = self.queue.get(entry["run"])
        if old and old["run_id"] != entry["run_id"] and old["state"] in ("pending", "active"):
            return {"queued": False, "reason": "run %s is already %s" % (entry["run"],
                                                                         old["state"])}
        entry["written_at"] = self.cluster.now
        self.queue[entry["run"]] = entry
        return {"queued": True}

    def op_take(self, payload):
        entry = self.queue.get(payload["run"])
        if not entry or entry["run_id"] != payload["run_id"] or (
                entry["state"] != payload.get("state", "pending")):
            return {"taken": False, "reason": "gone"}
        if (entry.get("taken_until") or 0) > self.cluster.now and (
                entry.get("taken_by") != payload["by"]):
            return {"taken": False, "reason": "taken"}
        entry.update(taken_by=payload["by"], taken_until=self.cluster.now + 600)
        return {"taken": True, "entry": copy.deepcopy(entry)}

    def op_update(self, payload):
        entry = self.queue.get(payload["run"])
        if not entry or entry["run_id"] != payload["run_id"] or any(
                entry.get(k) != v for k, v in (payload.get("expect") or {}).items()):
            return {"updated": False}
        entry.update(payload["changes"], taken_by=None, taken_until=None)
        if payload["changes"]:
            entry["written_at"] = self.cluster.now
        return {"updated": True}

    def op_dequeue(self, payload):
        entry = self.queue.get(payload["run"])
        if not entry or payload.get("run_id") not in (None, entry["run_id"]) or any(
                entry.get(k) != v for k, v in (payload.get("expect") or {}).items()):
            return {"removed": False}
        del self.queue[payload["run"]]
        return {"removed": True}

    # Copies of another host's entries, kept as mirrorside keeps them.
    def op_queue_read(self, payload):
        return {"entry": copy.deepcopy(self.queue.get(payload["run"]))}

    def _handed_here(self, run, run_id):
        own = self.queue.get(run)
        note = self.handed.get(run)
        return (own and own["run_id"] == run_id) or (note and note["run_id"] == run_id)

    def op_mirror_put(self, payload):
        entry = dict(copy.deepcopy(payload["entry"]), held_archive=payload.get("archive"))
        assert entry["state"] in ("pending", "active", "scheduled"), entry
        if self._handed_here(entry["run"], entry["run_id"]):
            return {"kept": False, "reason": "run %s was handed over here" % entry["run"]}
        entry.pop("taken_by", None)
        entry.pop("taken_until", None)
        self.mirror[entry["run"]] = entry
        return {"kept": True}

    def op_mirror_drop(self, payload):
        entry = self.mirror.get(payload["run"])
        if entry is None or payload.get("run_id") not in (None, entry["run_id"]):
            return {"dropped": False}
        del self.mirror[payload["run"]]
        return {"dropped": True}

    def op_mirror_adopt(self, payload):
        entry = self.mirror.get(payload["run"])
        if entry is None or entry["run_id"] != payload["run_id"]:
            return {"adopted": False, "reason": "no copy"}
        if self._handed_here(payload["run"], payload["run_id"]):
            del self.mirror[payload["run"]]
            return {"adopted": False, "dropped": True, "reason": "handed over here before"}
        own = self.queue.get(payload["run"])
        if own and own["state"] in ("pending", "active", "scheduled"):
            return {"adopted": False, "reason": "waits here"}
        adopted = dict(entry, queued_on=payload["host"], handed_from=payload["from"],
                       written_at=self.cluster.now, **(payload.get("changes") or {}))
        self.queue[payload["run"]] = adopted
        del self.mirror[payload["run"]]
        self.handed[payload["run"]] = {"run": payload["run"], "run_id": payload["run_id"],
                                       "state": "handed", "handed_from": payload["from"],
                                       "queued_on": payload["host"],
                                       "ended_at": self.cluster.now}
        return {"adopted": True, "entry": booking.summary(adopted)}

    def op_release(self, payload):
        before = len(self.claims)
        self.claims = [c for c in self.claims if c["run"] != payload["run"]]
        return {"released": len(self.claims) < before}

    def op_admit(self, payload):
        # As admitside.op_admit: one decision at a time (the call holds the cluster's lock).
        kept, answer, entry = admitside.admit_decision(list(self.admitted.values()), payload,
                                                       self.limits, self.cluster.now)
        if payload.get("probe"):
            entry = None
        own = self.admitted.get(payload["run"])
        self.admitted = dict((e["run"], e) for e in kept)
        if entry is not None or own is not None:
            self.admitted[payload["run"]] = entry or own
        return answer

    def op_admit_release(self, payload):
        return {"released": self.admitted.pop(payload["run"], None) is not None}

    def tick(self):
        for box in self.containers:
            ticks, code = self.left.get(box["name"], (None, None))
            if box["state"] == "created":
                box["state"] = "running"
                box["files"]["running"] = STARTED
            elif box["state"] == "running" and not box["files"]["reason"] and ticks is not None:
                ticks -= 1
                self.left[box["name"]] = (ticks, code)
                if ticks <= 0:
                    box["state"] = "exited"
                    box["exit_code"] = code
                    box["files"]["exit_code"] = str(code)

    def run(self, command, data=None, timeout=None):
        return 0, "", ""

    def popen(self, command, **kwargs):
        raise OSError("no logs from a fake host")


class Cluster:
    """Fake hosts, a fake clock and a sleep that moves it and steps every container.

    ``program(job)`` gives each started container ``(ticks, exit_code)``: it runs for that many
    steps after it is up, then exits with that code (``ticks`` None: it runs until stopped).
    ``hook(cluster)`` runs after each step (to take a host down, for example).
    """

    def __init__(self, hosts, program=None, hook=None):
        self.lock = threading.RLock()
        self.now = 1000.0
        self.sleeps = []
        self.log = []
        self.started = []
        self.events = []
        self.program = program or (lambda job: (None, None))
        self.hook = hook
        self.nodes = {h: FakeNode(h, self) for h in hosts}

    def clock(self):
        return self.now

    def sleep(self, seconds):
        self.sleeps.append(seconds)
        if len(self.sleeps) > 300:
            raise AssertionError("the watch never ends")
        time.sleep(0.003)  # let the background stop requests reach the fake hosts
        with self.lock:
            self.now += seconds
            for node in self.nodes.values():
                node.tick()
            if self.hook is not None:
                self.hook(self)

    def emit(self, event):
        self.events.append((self.now, event))

    def snapshot(self):
        """``{job_num: (state, running file)}`` of every container of every host."""
        return {int(c["labels"][JOB_LABEL]): (c["state"], c["files"]["running"])
                for node in self.nodes.values() for c in node.containers}

    def ops(self, op):
        return [(host, payload) for host, name, payload in self.log if name == op]

    def job_events(self, num):
        return [e for _t, e in self.events if e["kind"] == "job" and e["job_num"] == num]

    def run_events(self):
        return [e for _t, e in self.events if e["kind"] == "run"]


# ---------------------------------------------------------------------------------------------
# Hand-built gpufleet_host facts and fleet records
# ---------------------------------------------------------------------------------------------


def eight_cpu_fact(ip):
    """The facts of a host with 8 CPUs, 32 GiB of memory, no GPU, at internal address ``ip``."""
    return {
        "cpus": 8,
        "memory": {"bytes": 32768 * 2**20, "mib": 32768},
        "disk": {"available_bytes": 204800 * 2**20, "available_mib": 204800},
        "internal_ip": ip,
        "gpu": {"vendor": "none", "count": 0, "name": None, "memory_mib": 0, "devices": []},
        "blocks": {"requested": 1, "total": 1},
    }


def fleet_with_facts(name="gpus", count=2):
    """An SSH fleet of ``count`` idle hosts with their facts (``eight_cpu_fact``) under "facts"."""
    instances = []
    facts = {}
    for num in range(count):
        host = "%s-%d" % (name, num)
        instances.append({
            "name": host, "num": num, "fleet": name, "backend": "ssh", "region": "remote",
            "instance_type": None, "price": None, "spot": False, "status": "idle",
            "hostname": "192.0.2.%d" % (num + 1), "internal_ip": None, "blocks": 1,
        })
        facts[host] = eight_cpu_fact("10.1.0.%d" % (num + 2))
    return {"name": name, "placement": "cluster", "instances": instances, "facts": facts}


def cpu_fact(cpus=8, memory_mib=32768, disk_mib=204800, ip="10.1.0.2", **extra):
    """The facts of a host without GPU, of the resources given; ``extra`` overrides keys."""
    fact = {
        "cpus": cpus,
        "memory": {"bytes": memory_mib * 2**20, "mib": memory_mib},
        "disk": {"available_bytes": disk_mib * 2**20, "available_mib": disk_mib},
        "internal_ip": ip,
        "gpu": {"vendor": "none", "count": 0, "name": None, "memory_mib": 0, "devices": []},
        "blocks": {"requested": 1, "total": 1},
    }
    fact.update(extra)
    return fact


def instance(fleet, num, **extra):
    """Instance ``num`` of ``fleet``: an idle SSH host; ``extra`` overrides fields."""
    record = {
        "name": "%s-%d" % (fleet, num), "num": num, "fleet": fleet, "backend": "ssh",
        "region": "remote", "instance_type": None, "price": None, "spot": False,
        "status": "idle", "hostname": "192.0.2.%d" % (num + 1), "internal_ip": None,
        "blocks": 1,
    }
    record.update(extra)
    return record


def fleet_of_instances(name, count, placement="cluster", **extra):
    """A fleet record of ``count`` idle SSH instances (``instance``), without facts."""
    return {"name": name, "placement": placement,
            "instances": [instance(name, num, **extra) for num in range(count)]}


# ---------------------------------------------------------------------------------------------
# Backend fleets that may grow (tasks.growth)
# ---------------------------------------------------------------------------------------------


def backend_fleet(name="el", count=0, nodes=None, file="/f/el.dstack.yml", backends=("local",)):
    instances = [{"name": "%s-%d" % (name, n), "num": n, "fleet": name, "backend": "local",
                  "region": "local", "price": 0.0, "spot": False, "status": "idle",
                  "hostname": "172.30.0.%d" % (n + 2)} for n in range(count)]
    return {"name": name, "fleet_type": "backend", "placement": "cluster",
            "nodes": nodes or {"min": 0, "target": 0, "max": 2}, "backends": list(backends),
            "blocks": 1, "file": file, "instances": instances}


def facts_of(fleet):
    """The facts of ``fleet``'s instances: ``eight_cpu_fact`` at 10.0.0.<num + 2>."""
    return dict((i["name"], eight_cpu_fact("10.0.0.%d" % (i["num"] + 2)))
                for i in fleet["instances"])


# ---------------------------------------------------------------------------------------------
# Placed jobs, as tasks.placement gives them to tasks.rankplan
# ---------------------------------------------------------------------------------------------


RUN = {"name": "train", "id": "3f2a9c", "submission": 2, "submitted_at": "2026-08-01T10:00:00Z"}


def gpu_devices(vendor, count, host=0, ids=None):
    devices = []
    for index in range(count):
        if ids is not None:
            ident = ids[index]
        elif vendor == "nvidia":
            ident = "GPU-%d-%d" % (host, index)
        elif vendor == "amd":
            ident = "/dev/dri/renderD%d" % (128 + index)
        elif vendor == "tenstorrent":
            ident = "board-%d" % index
        else:
            ident = str(index)
        devices.append({"vendor": vendor, "name": "X", "index": index, "id": ident,
                        "bus_id": None})
    return devices


def placed_job(num, ip="10.1.0.%d", vendor="none", gpus=0, whole_host=True, group=None,
               **extra):
    job = {
        "job_num": num, "group": group, "host": "demo-%d" % num, "fleet": "demo",
        "instance_num": num, "backend": "ssh", "region": "remote", "instance_type": None,
        "price": 0.0, "spot": False,
        "internal_ip": (ip % (num + 2)) if ip and "%" in ip else ip,
        "whole_host": whole_host, "blocks": 1, "total_blocks": 1, "cpus": 2,
        "memory_mib": 24000, "disk_mib": 70000, "gpu_vendor": vendor,
        "gpu_name": None, "gpu_memory_mib": 0, "gpus": gpu_devices(vendor, gpus, num),
        "resources": {},
    }
    job.update(extra)
    return job


def placement(*jobs):
    return {"fleet": "demo", "placement": "cluster", "jobs": list(jobs)}


# ---------------------------------------------------------------------------------------------
# The fake docker CLI and what the node-side helper reads back
# ---------------------------------------------------------------------------------------------


FAKE_DOCKER = r'''#!{python}
import json, os, sys
argv = sys.argv[1:]
entry = {{"argv": argv}}
if argv[:1] == ["login"]:
    entry["stdin"] = sys.stdin.read()
with open(os.environ["FAKE_DOCKER_LOG"], "a") as handle:
    handle.write(json.dumps(entry) + "\n")
with open(os.environ["FAKE_DOCKER_RULES"]) as handle:
    rules = json.load(handle)
for rule in rules:
    if argv[:len(rule["prefix"])] == rule["prefix"]:
        sys.stdout.write(rule.get("stdout", ""))
        sys.stderr.write(rule.get("stderr", ""))
        sys.exit(rule.get("rc", 0))
sys.exit(0)
'''


class FakeDocker(object):
    """The fake ``docker`` on PATH: ``on()`` adds an answer, ``calls()`` reads the log."""

    def __init__(self, folder):
        self.bin_dir = folder / "bin"
        self.bin_dir.mkdir()
        self.log = folder / "docker.log"
        self.rules_file = folder / "rules.json"
        self.rules = []
        script = self.bin_dir / "docker"
        script.write_text(FAKE_DOCKER.format(python=sys.executable))
        script.chmod(0o755)
        self._save()

    def _save(self):
        self.rules_file.write_text(json.dumps(self.rules))

    def on(self, prefix, stdout="", stderr="", rc=0):
        """Answer calls whose argv starts with ``prefix`` (earlier rules win)."""
        self.rules.append({"prefix": list(prefix), "stdout": stdout, "stderr": stderr, "rc": rc})
        self._save()

    def entries(self):
        if not self.log.exists():
            return []
        return [json.loads(line) for line in self.log.read_text().splitlines() if line]

    def calls(self):
        return [e["argv"] for e in self.entries()]

    def env(self):
        return {
            "PATH": str(self.bin_dir) + os.pathsep + os.environ.get("PATH", ""),
            "FAKE_DOCKER_LOG": str(self.log),
            "FAKE_DOCKER_RULES": str(self.rules_file),
            # No engine socket there: the helper (in this process or one it starts) uses the
            # fake CLI, not this machine's Docker Engine API.
            "DOCKER_HOST": "unix://" + str(self.bin_dir / "no-engine.sock"),
        }


def inspect_entry(name, run=None, job=None, status="running", exit_code=0, network=None,
                  **extra):
    labels = {"gpufleet.submission": "0"}
    if run is not None:
        labels["gpufleet.run"] = run
    if job is not None:
        labels["gpufleet.job"] = str(job)
    state = {"Status": status, "ExitCode": exit_code, "OOMKilled": False,
             "StartedAt": "2024-05-01T10:00:00Z", "FinishedAt": "0001-01-01T00:00:00Z",
             "Error": ""}
    state.update(extra)
    entry = {"Name": "/" + name, "Config": {"Labels": labels}, "State": state}
    if network == "host":
        entry["HostConfig"] = {"NetworkMode": "host"}
    elif network:
        entry["HostConfig"] = {"NetworkMode": "bridge"}
        entry["NetworkSettings"] = {"Networks": {"bridge": {"IPAddress": network}}}
    return entry


def write_state(root, run, job, **files):
    folder = root / run / str(job) / "state"
    folder.mkdir(parents=True, exist_ok=True)
    for name, text in files.items():
        (folder / name).write_text(text)
    return folder


# A job spec as tasks.rankplan.build_jobs makes one (tasks/test_nodeside.py, test_booking.py).


def job_spec(**changes):
    job = {
        "run": "train",
        "job_num": 1,
        "container": "train-1-0",
        "image": "ubuntu:22.04",
        "docker_args": ["--name", "train-1-0", "--label", "gpufleet.run=train",
                        "--entrypoint", "/bin/sh"],
        "files": {
            "job.sh": {"text": "#!/bin/sh\necho job\n", "mode": 0o755},
            "env.sh": {"text": "export A=1\n", "mode": 0o600},
            "ssh/blob.bin": {"data": base64.b64encode(b"\x00\x01binary\xff").decode("ascii")},
        },
        "mounts": [],
        "conditional": [],
    }
    job.update(changes)
    return job


def replica_spec():
    return job_spec(run="svc", job_num=1, container="svc-0-1",
                    docker_args=["--name", "svc-0-1", "--label", "gpufleet.run=svc",
                                 "--label", 'gpufleet.service={"port": 8000}',
                                 "-p", "10.0.0.5::8000"],
                    claim={"run": "svc", "run_id": "r1", "submission": 0})


class RecordsNode(object):
    """A host that answers a read of the records it keeps (``usage``, ``events``) with
    ``{key: items, "now": now}``, or raises ``error`` as a silent host does; what it was asked
    is kept in ``asked``."""

    def __init__(self, key, items=(), error=None, now=0.0):
        self.key = key
        self.items = list(items)
        self.error = error
        self.now = now
        self.asked = []

    def call(self, op, payload=None, timeout=120):
        self.asked.append((op, payload))
        if self.error:
            raise NodeError("h", self.error, silent=True)
        return {self.key: self.items, "now": self.now}


# Runs and passes over the queue on a Cluster (tests of tasks.queue and tasks.queue_mirror).
WAIT = {"on_events": ["no-capacity"], "duration": "10m"}


def occupy(cluster, hosts, run="first"):
    """A run of another submitter alive on ``hosts``."""
    for num, host in enumerate(hosts):
        cluster.nodes[host].containers.append(container(
            "%s-%d-0" % (run, num), {RUN_LABEL: run, JOB_LABEL: str(num), SUB_LABEL: "0",
                                     "gpufleet.blocks": "1"},
            state="running", running=STARTED))


def free(cluster, run="first"):
    for node in cluster.nodes.values():
        for box in node.containers:
            if box["labels"][RUN_LABEL] == run:
                box["state"] = "exited"
                box["files"]["exit_code"] = "0"


def submit_detached(fake_hosts, cluster, config, fleets):
    runner = runs.Runner(config, fleets, emit=cluster.emit, clock=cluster.clock,
                         sleep=cluster.sleep, poll=1.0, environ={})
    return runner.run(wait=False)


def a_pass(cluster, fleets):
    return queue.QueuePass(fleets, runner_of=runs.runner_of, clock=cluster.clock,
                           sleep=cluster.sleep, poll=1.0, emit=cluster.emit).run()
