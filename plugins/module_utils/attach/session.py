# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""What ``gpufleet attach`` does on the controller (the run_attach module's logic).

Everything comes from the run's hosts, so any controller with the fleet can attach: the jobs
and where they run from their containers' labels, the container addresses from the engine, and
the run's private key from the job folder on the attached job's host (the key the run's nodes
already log in to each other with: nothing new is authorized anywhere, and the fleet's own key
is never copied). On the controller the key is kept 0600 beside our SSH config file, in the
state dir, and both go when the run ends: the next attach, the run's stop, or the end of an
attached run drops the sections of runs that are over.

    result = attach({"name": "train", "job": 0, "state": "present", "forward": True, ...})
"""

from __future__ import annotations

import json
import os
from typing import Any

from ..core.errors import GpufleetError
from ..core.files import write_atomically
from ..core.module import state_options
from ..fleets import state
from ..tasks import lifecycle, listing
from ..tasks.container import INSTANCE_LABEL, RUN_LABEL, RUN_SPEC_LABEL
from ..tasks.errors import RunError
from ..tasks.lifecycle import JobStatus, RunStatus
from . import hosts, ports, sshconfig, tunnel

DEFAULT_USER_CONFIG = "~/.ssh/config"

# The run_attach module's options (its DOCUMENTATION describes them), also what a run's stop
# passes when it forgets the run's aliases (attach/stop.py).
ATTACH_ARGS = dict(
    name=dict(type="str", required=True),
    job=dict(type="int", default=0),
    state=dict(type="str", choices=["present", "absent"], default="present"),
    forward=dict(type="bool", default=False),
    ports=dict(type="dict"),
    ssh_config=dict(type="path", default=DEFAULT_USER_CONFIG),
    include=dict(type="bool", default=True),
    fleets=dict(type="list", elements="path", default=[]),
    **state_options()
)


class AttachError(GpufleetError):
    """The run cannot be attached to; the message says why and what to do."""


def config_path(root: str) -> str:
    return os.path.join(root, "ssh", "config")


def key_path(root: str, run: str) -> str:
    return os.path.join(root, "ssh", "keys", run)


def _write_key(path, text):
    folder = os.path.dirname(path)
    os.makedirs(folder, mode=0o700, exist_ok=True)
    os.chmod(folder, 0o700)
    write_atomically(path, text, 0o600)


def _forget(root, run):
    """Drop a run's section, key and forwards. Returns whether anything was there."""
    changed = sshconfig.set_run(config_path(root), run, None)
    try:
        os.remove(key_path(root, run))
        changed = True
    except FileNotFoundError:
        pass
    return tunnel.close(tunnel.control_path(run)) or changed


def _prune(root, containers, errors, keep):
    """Forget the runs our file has whose containers all ended (not while a host is silent:
    its containers might be alive)."""
    if errors:
        return []
    alive = set()
    for entries in containers.values():
        for entry in entries:
            if lifecycle.job_status(entry)[0] in JobStatus.up_statuses():
                alive.add(entry["labels"].get(RUN_LABEL))
    gone = [run for run in sshconfig.runs(config_path(root)) if run != keep and run not in alive]
    for run in gone:
        _forget(root, run)
    return gone


def _spec(entry):
    try:
        return json.loads(entry["labels"].get(RUN_SPEC_LABEL) or "{}")
    except ValueError:
        return {}


def attach(params: dict[str, Any], nodes: dict[str, Any], root: str) -> dict[str, Any]:
    """The module's result. ``nodes``: ``{instance name: tasks.ssh.Node}`` of the fleets."""
    from ..tasks.surveys import survey_with_queues

    name = params["name"]
    if params.get("state") == "absent":
        return {"run": name, "changed": _forget(root, name), "aliases": [], "forwards": [],
                "config_file": config_path(root)}
    containers, _claims, queues, errors = survey_with_queues(nodes)
    pruned = _prune(root, containers, errors, name)
    record, mine = listing.find_run(nodes, name, (containers, errors), queues)
    if record["status"] == RunStatus.PENDING:
        # Queued (or to be submitted again): dstack's attach waits for it, and so does ours.
        where = ("queue position %s on %s" % (record.get("queue_position"), record["queued_on"])
                 if record.get("queued_on") else "to be submitted again")
        raise AttachError("run %s is pending (%s): it is not running yet; attach again once "
                          "it runs" % (name, where))
    if record["status"] in RunStatus.finished_statuses():
        changed = _forget(root, name)
        raise AttachError("Run %s is %s: there is nothing to attach to (gpufleet logs %s shows "
                          "what it printed)%s" % (name, record["status"], name,
                                                  "; its SSH aliases were removed" if changed
                                                  else ""))
    entries = dict((j["job_num"], e) for h, found in mine.items() for e in found
                   for j in record["jobs"] if j.get("container") == e["name"])
    attached = int(params.get("job") or 0)
    if attached not in entries:
        raise AttachError("run %s has no job %d (jobs: %s)" % (
            name, attached, ", ".join(str(n) for n in sorted(entries))))
    # The instance each job was placed on, as its container says (a machine that two fleets
    # describe shows the same containers under both names).
    host_of = dict((j["job_num"], j["host"]) for j in record["jobs"])
    for num, entry in entries.items():
        placed = entry["labels"].get(INSTANCE_LABEL)
        if placed in nodes:
            host_of[num] = placed
    waiting = [n for n in sorted(entries)
               if lifecycle.job_status(entries[n])[0] != JobStatus.RUNNING]
    if attached in waiting:
        raise AttachError("run %s is %s: job %d is not running yet; attach again once it runs"
                          % (name, record["status"], attached))
    node = nodes[host_of[attached]]
    try:
        key = node.call("run_key", {"run": name, "job_num": attached}).get("key")
    except Exception as exc:  # NodeError and the host's answer: say which host
        raise AttachError("cannot read run %s's key on %s: %s" % (name, node.name, exc)) \
            from exc
    if not key:
        raise AttachError("run %s has no key on %s (a single-node run started by an earlier "
                          "gpufleet): attach works with the runs submitted from now on"
                          % (name, node.name))
    spec = _spec(entries[attached])
    key_file = key_path(root, name)
    _write_key(key_file, key)
    jobs = [{"job_num": n, "instance": nodes[host_of[n]].instance,
             "address": entries[n].get("address"), "user": spec.get("user")}
            for n in sorted(entries) if host_of.get(n) in nodes]
    fleet = node.instance.get("fleet")
    known = state.ensure_known_hosts_dir(root, fleet) if node.instance.get("backend") == "ssh" \
        else None
    blocks = [sshconfig.host_block(aliases, options) for aliases, options in
              hosts.entries(name, jobs, key_file, known, attached)]
    ours = config_path(root)
    changed = sshconfig.set_run(ours, name, blocks)
    warnings = []
    if params.get("include", True):
        try:
            changed = sshconfig.ensure_include(
                params.get("ssh_config") or DEFAULT_USER_CONFIG, ours) or changed
        except sshconfig.SshConfigError as exc:
            warnings.append("%s; add the line 'Include %s' at the top of your SSH config for "
                            "ssh %s to work" % (exc, ours, name))
    control = tunnel.control_path(name)
    forwards = []
    if params.get("forward"):
        tunnel.close(control)
        forwards = ports.choose(spec.get("ports") or [], overrides=params.get("ports"))
        # A dev environment is held open while attached, ports or not (inactivity_duration).
        if forwards or spec.get("type") == "dev-environment":
            tunnel.open_tunnel(ours, name, entries[attached].get("address") or "localhost",
                               forwards, control)
            changed = True
    else:
        changed = tunnel.close(control) or changed
    aliases = [name] + ["%s-%d" % (name, n) for n in sorted(entries)]
    return {"run": name, "job": attached, "status": record["status"], "alias": name,
            "aliases": aliases, "forwards": forwards, "config_file": ours,
            "key_file": key_file, "pruned": pruned, "changed": changed,
            "warnings": warnings}


def attach_entry(params: dict[str, Any]) -> dict[str, Any]:
    """The run_attach module's result, from its parameters; AttachError with the reason."""
    from ..tasks import surveys

    root = state.state_dir(params.get("state_dir"))
    try:
        fleets = surveys.collect_fleets(params.get("fleets") or (), _docker(), root)
        nodes = surveys.nodes_of(fleets, root)
        return attach(params, nodes, root)
    except (RunError, tunnel.TunnelError, ports.PortError, sshconfig.SshConfigError) as exc:
        raise AttachError(str(exc)) from exc


def _docker():
    from ..backends.docker_cli import Docker

    return Docker()
