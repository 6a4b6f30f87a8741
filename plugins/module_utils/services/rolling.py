# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""A running service taken to a new version, one replica at a time (``apply`` again).

dstack rolls a service's replicas when its configuration changes; so does this module, with
no server: the ``apply`` that brings the new version does it, in place. The new version's jobs
are prepared (tasks.run_preparation) for the hosts the replicas already hold (each replica's
host kept where it was placed: ``start.json``, read with ``replica_info``), with the run's
own id and submission, so its claims and ``ps`` stay the run's. Then, for each replica whose
version (``config_digest``) is not the new one, in order:

1. its host is asked whether it holds the new version's share (the claim, renewed);
2. the proxy drains it (``proxy_drain``, HAProxy's runtime API, no reload): new requests go
   to the others, and the roll waits until none is in flight on it (DRAIN_TIMEOUT at most; a
   request still running on it then is cut, and tried again on another replica where its
   method allows);
3. its host replaces it (``replace``, one operation under the host's lock: the old container
   removed, the new one started, or the old one made again when the new cannot start);
4. the route takes it back with the new container's port, which HAProxy takes only once its
   checks pass; the next replica waits for that.

Once all run the new version, the route is published whole with the new version's settings
(probes, limits, model). An update holds a lease on the service's proxy host
(``proxy_roll``), so two controllers never roll one service at once. So at every moment all
replicas but one serve. A replica of the new version that never passes its checks (or whose
container ends) stops the roll: the replicas not rolled yet keep the old version, the run
goes on, and applying again resumes where it stopped (replicas already at the new version are
left alone).

A new replica count is part of the same update, before the roll: more replicas are placed
beside the running ones (tasks.runs.Runner.place_beside, under the owner's caps), claimed as shares added to the run's claims
(tasks.hostside.booking), started with the new version and waited for; fewer replicas (the
highest numbers) leave the route, drain, and are ``retire``d by their hosts (their jobs end
``scaled_down``). A change of resources, or a new version that would keep a single replica,
is refused before anything changes: that needs a replica replaced somewhere else.
"""

from __future__ import annotations

import time
from typing import Any, Callable, Mapping, Optional

from ..core.errors import GpufleetError
from ..tasks import listing
from ..tasks.lifecycle import RunStatus
from ..tasks.queue import controller_id
from ..tasks.queue_records import autoscaled
from ..tasks.run_placement import Claimed
from ..tasks.ssh import NodeError, parallel
from . import publish

# How long a new replica has to pass its checks (probes, or a TCP check of its port).
READY_TIMEOUT = 600
# How long a replica that leaves the proxy is given for the requests in flight on it (HAProxy
# drains it and says when none is left); DRAIN_SECONDS is what a proxy that cannot say gets.
DRAIN_TIMEOUT = 30
DRAIN_SECONDS = 2
# How often a long wait renews the update's lease (which lasts READY_TIMEOUT + 300 s).
LEASE_EVERY = 120


def replicas_text(replicas: int) -> str:
    """``1 replica``, ``2 replicas``."""
    return "%d replica%s" % (replicas, "" if replicas == 1 else "s")


def _named(nums: list[int]) -> str:
    """``replica 1`` or ``replicas 1, 2``."""
    return "replica%s %s" % ("" if len(nums) == 1 else "s", ", ".join(str(n) for n in nums))


class RollError(GpufleetError):
    """A roll that cannot start, or that stopped: says which replicas run which version."""


def live_services(nodes: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The run records (tasks.listing) of the services alive on ``nodes``."""
    records, _errors = listing.list_runs(nodes)
    return [r for r in records if r.get("service")
            and r.get("status") not in RunStatus.finished_statuses()]


def live_record(records: list[dict[str, Any]], name: str) -> Optional[dict[str, Any]]:
    """The record (tasks.listing) of the service ``name`` among ``records`` when it runs (one
    being stopped, or still starting, is not rolled: its apply is the usual one)."""
    for record in records:
        if record.get("name") == name and record.get("service") and (
                record.get("status") == "running"):
            return record
    return None


def read_again(nodes: Mapping[str, Any], name: str, hint: str = "") -> dict[str, Any]:
    """The record of the service ``name`` as ``nodes`` show it now, while it runs (a Roll's
    ``fresh``); RollError, ending with ``hint``, when it no longer does."""
    now = live_record(live_services(nodes), name)
    if now is None:
        raise RollError("service %s no longer runs%s" % (name, hint))
    return now


def _layout(groups: list[Any]) -> list[tuple[Any, int]]:
    """``[(group name, count)]`` of the replicas' groups in job order (None: no group)."""
    out: list[tuple[Any, int]] = []
    for name in groups:
        if out and out[-1][0] == name:
            out[-1] = (name, out[-1][1] + 1)
        else:
            out.append((name, 1))
    return out


def _layout_text(layout: list[tuple[Any, int]]) -> str:
    if not layout or layout == [(None, layout[0][1])]:
        return "no replica groups"
    return "replica groups " + ", ".join("%s (%d)" % (name, count) for name, count in layout)


def _this_version(kept: Mapping[str, Any], job: Mapping[str, Any]) -> bool:
    """Whether a running replica (``kept``: replica_info's answer) runs the version of ``job``
    (the new submission's)."""
    digest = kept.get("config_digest")
    return bool(digest) and digest == job["config_digest"]


class Roll(object):
    """One roll of ``record`` (the live service's run record) to ``runner``'s configuration
    (a tasks.runs.Runner made for the new version, not submitted). ``nodes``: ``{host:
    Node}`` of the service's fleet; ``proxy_node``: its proxy host; ``addresses``: ``{host:
    internal address}``; ``config``: the new normalized service config (its route part)."""

    def __init__(self, runner: Any, record: Mapping[str, Any], nodes: Mapping[str, Any],
                 proxy_node: Any, addresses: Mapping[str, str], config: Mapping[str, Any],
                 user: str, fleet: str, listen: Optional[Mapping[str, Any]],
                 emit: Callable[[dict], None], clock: Callable[[], float] = time.time,
                 sleep: Callable[[float], None] = time.sleep,
                 fresh: Optional[Callable[[Mapping[str, Any]], Mapping[str, Any]]] = None,
                 scale_only: bool = False,
                 recheck: Optional[Callable[[Mapping[str, Any]], int]] = None,
                 reach: Optional[Callable[[], Any]] = None, moved: bool = False) -> None:
        self.runner = runner
        # Its proxy host was lost: the queue entry (kept there) is written again.
        self.moved = moved
        # ``reach()``: a gateway's host made able to reach the replicas' hosts before their
        # route changes (publish.reach), also hosts the fleet gained since it was published.
        self.reach = reach or (lambda: None)
        # Only the replica count changes (autoscaling): replicas of another version are left
        # as they are, and the queue entry is the caller's.
        self.scale_only = scale_only
        # ``recheck(record)``: the count wanted, decided again once the lease is held and the
        # record read again (RollError when the change no longer holds).
        self.recheck = recheck
        # ``fresh(record)``: the service's record read again (tasks.listing); RollError when
        # it no longer runs.
        self.fresh = fresh or (lambda record: record)
        self.record = record
        self.name = str(record["name"])
        self.nodes = nodes
        self.proxy_node = proxy_node
        self.addresses = addresses
        self.config = config
        self.user = user
        self.fleet = fleet
        self.listen = listen
        self.emit = emit
        self.clock = clock
        self.sleep = sleep
        self.by = controller_id()

    # -- what runs now --------------------------------------------------------------------

    def _call(self, host: str, op: str, payload: dict[str, Any]) -> dict[str, Any]:
        if host not in self.nodes:
            raise RollError("service %s: its replica's host %s cannot be reached from this "
                            "controller" % (self.name, host))
        try:
            return self.nodes[host].call(op, payload) or {}
        except NodeError as exc:
            raise RollError("service %s: %s" % (self.name, exc)) from exc

    def _kept(self) -> list[dict[str, Any]]:
        jobs = sorted(self.record.get("jobs") or [], key=lambda j: j["job_num"])
        answers = parallel(list(range(len(jobs))), lambda i: self._call(
            jobs[i]["host"], "replica_info", {"run": self.name, "job_num": jobs[i]["job_num"]}))
        kept = []
        for i, job in enumerate(jobs):
            answer, error = answers[i]
            if error is not None:
                raise error if isinstance(error, RollError) else RollError(str(error))
            if not (answer or {}).get("placed"):
                raise RollError("service %s: replica %d was started by an older gpufleet, which "
                                "kept no record to update it from; stop it and apply again"
                                % (self.name, job["job_num"]))
            kept.append(dict(answer, host=job["host"], job_num=job["job_num"]))
        return kept

    def _replicas(self, kept: list[dict[str, Any]], leave_out: Any = None) -> list[Any]:
        """The replicas the hosts report now (but ``leave_out``); RollError when a host that
        holds one does not answer: a route missing it would send nothing there."""
        held = set(k["host"] for k in kept)
        hosts = sorted(held | set(h for h in self.addresses if h in self.nodes))
        answers = parallel(hosts, lambda h: self.nodes[h].call("status", {"run": self.name}))
        for host, (_answer, error) in answers.items():
            if error is not None and host in held:
                raise RollError("service %s: its replica's host %s did not answer: %s"
                                % (self.name, host, error))
        found = dict((h, (a or {}).get("containers") or []) for h, (a, e) in answers.items()
                     if e is None)
        out = set(leave_out) if isinstance(leave_out, (set, list, tuple)) else {leave_out}
        return [r for r in publish.replicas_of(self.config, found, self.addresses)
                if r["replica_num"] not in out]

    def _set_replicas(self, kept: list[dict[str, Any]], leave_out: Any = None) -> None:
        """The route on the proxy takes the replicas now, its other settings kept (the old
        version's probes stay until every replica runs the new one); one the proxy lost is
        published whole."""
        replicas = self._replicas(kept, leave_out)
        self.reach()
        if publish.set_replicas(self.proxy_node, self.name, replicas).get("missing"):
            self._publish(replicas)

    def _publish(self, replicas: list[Any]) -> None:
        """The whole route of the new version (its probes, limits, model...)."""
        route = publish.route_of(self.config, self.name, self.user, self.fleet, replicas,
                                 listen=self.listen)
        self.reach()
        publish.publish(self.proxy_node, route, self.listen)

    def _ready(self, num: int, host: str) -> None:
        """Wait until the proxy has replica ``num`` up; RollError when its container ended or
        the time ran out."""
        deadline = self.clock() + READY_TIMEOUT
        renewed = self.clock()
        while True:
            if self.clock() - renewed >= LEASE_EVERY:   # several slow replicas outlast a lease
                self._lease()
                renewed = self.clock()
            try:
                servers = self.proxy_node.call("proxy_status", {"run": self.name})["servers"]
            except (NodeError, KeyError, TypeError) as exc:
                raise RollError("service %s: could not ask the proxy on %s about replica %d: %s"
                                % (self.name, self.proxy_node.name, num, exc)) from exc
            if any(s.get("replica_num") == num and str(s.get("status")).startswith("UP")
                   for s in servers):
                return
            boxes = self._call(host, "status", {"run": self.name}).get("containers") or []
            mine = [b for b in boxes if str((b.get("labels") or {}).get("gpufleet.job")) ==
                    str(num)]
            if mine and all(b.get("state") not in ("created", "running", "restarting")
                            for b in mine):
                raise RollError("service %s: replica %d of the new version ended before it "
                                "passed its checks (see gpufleet logs %s --replica %d)"
                                % (self.name, num, self.name, num))
            if self.clock() >= deadline:
                raise RollError("service %s: replica %d of the new version did not pass its "
                                "checks within %d s" % (self.name, num, READY_TIMEOUT))
            self.sleep(1.0)

    # -- the roll ---------------------------------------------------------------------------

    def run(self) -> dict[str, Any]:
        """Roll every replica that is not at the new version; returns ``{"rolled": [replica
        numbers], "unchanged": bool}``."""
        kept = self._kept()
        self._check(kept)
        self._lease()
        done: dict[str, Any] = {}
        try:
            # What runs now, read again under the lease: another controller's update may
            # have ended just before it was taken.
            self.record = self.fresh(self.record)
            kept = self._kept()
            self._check(kept)
            if self.recheck is not None:
                self._count(self.recheck(self.record))
            done = self._roll(kept)
            return done
        finally:
            release: dict[str, Any] = {"run": self.name, "by": self.by, "release": True}
            if done.get("added") or done.get("retired"):   # autoscaling's delays count from now
                release["scaled"] = self.record["run_id"]
            try:
                self.proxy_node.call("proxy_roll", release)
            except NodeError:
                pass   # it lapses by itself

    def _lease(self) -> None:
        """Take (or renew) this controller's lease on updating the service, on its proxy host:
        a second controller's update waits for the first to end."""
        try:
            answer = self.proxy_node.call("proxy_roll", {
                "run": self.name, "by": self.by, "seconds": READY_TIMEOUT + 300})
        except NodeError as exc:
            raise RollError("service %s: could not ask its proxy host %s: %s"
                            % (self.name, self.proxy_node.name, exc)) from exc
        if not answer.get("taken"):
            raise RollError("service %s is being updated by %s; apply again once that update "
                            "has ended (its lease lapses by %s at the latest)"
                            % (self.name, answer.get("by"), time.strftime(
                                "%H:%M:%S UTC", time.gmtime(float(answer.get("until") or 0)))))

    def _count(self, wanted: int) -> None:
        """The runner's configuration asks for ``wanted`` replicas (the labels of new ones
        carry it too)."""
        config = self.runner.config
        config["nodes"] = wanted
        if isinstance(config.get("service"), dict):
            config["service"] = dict(config["service"], replicas=wanted)

    def _wanted(self, count: int) -> int:
        wanted = self.runner.config.get("nodes")
        return wanted if isinstance(wanted, int) and wanted >= 1 else count

    def _more(self, kept: list[dict[str, Any]], wanted: int, probe: bool = False
              ) -> list[dict[str, Any]]:
        """Where the replicas a scale-up adds go (placed beside the running ones, numbered
        after them), or [] when none is added; RollError when they do not fit."""
        count = len(kept)
        if wanted <= count:
            return []
        self.runner.run_id = self.record["run_id"]
        try:   # placed beside the running ones, and admitted under the owner's caps
            return self.runner.place_beside([k["placed"] for k in kept], probe)
        except GpufleetError as exc:
            raise RollError("replicas: service %s cannot grow from %d to %d replicas: %s"
                            % (self.name, count, wanted, exc)) from exc

    def _roll(self, kept: list[dict[str, Any]]) -> dict[str, Any]:
        count = len(kept)
        wanted = self._wanted(count)
        more = self._more(kept, wanted)
        placed = {"fleet": self.fleet, "jobs": [k["placed"] for k in kept[:wanted]] + more}
        self.runner.run_id = self.record["run_id"]
        number = int(self.record.get("submission") or 0)
        submission = self.runner.preparing.prepare(number, Claimed(placed, {}, (), ()))
        new = dict((j["job_num"], j) for j in submission.jobs)
        stale = [k for k in kept[:wanted] if not self.scale_only and not _this_version(
            k, new[k["job_num"]])]
        if stale and wanted < 2:
            raise RollError("service %s would run one replica, which cannot be replaced without "
                            "a gap; give it replicas: 2 or more, or stop it and apply again"
                            % self.name)
        if not stale and wanted == count:
            # New autoscaling rules reach the passes; a lost queue host's entry is made again.
            self._entry(submission, changed=self.moved)
            self._publish(self._replicas(kept))   # as it is (again, when it was lost)
            return {"rolled": [], "unchanged": True, "added": [], "retired": []}
        self._entry(submission)
        retired = self._fewer(kept, wanted)
        kept = kept[:wanted]
        added = self._add(kept, [new[j["job_num"]] for j in more])
        kept = kept + [dict(host=j["host"], job_num=j["job_num"]) for j in more]
        rolled: list[int] = []
        for item in stale:
            num, host = item["job_num"], item["host"]
            job = new[num]
            self._lease()   # renewed for each replica
            # The run's own claim taken over (the same run id; the controller that made it
            # may be another one): its share is now the new version's.
            job["claim"] = dict(job["claim"], replace=False, add=True,
                                by=(item.get("claim") or {}).get("by"))
            answer = self._call(host, "claim", job["claim"])
            if not answer.get("claimed"):
                raise RollError("service %s: host %s cannot hold replica %d of the new version: "
                                "%s; %s" % (self.name, host, num, answer.get("reason"),
                                            self._where(rolled, stale)))
            try:
                self._replicas(kept)   # every replica's host answers, before it changes
            except RollError as exc:
                raise RollError("%s; %s" % (exc, self._where(rolled, stale))) from exc
            try:
                self._drain(kept, [num])
                # One host operation under its lock: the old container goes and the new one
                # starts, or the old one comes back (nothing comes between, no respawn).
                self._call(host, "replace", {"job": job})
            except RollError as exc:
                raise RollError("%s; %s" % (exc, self._where(rolled, stale))) from exc
            finally:
                try:
                    self._set_replicas(kept)   # back, with its new port (or its old one)
                finally:
                    # On the same port no reload undid the drain; and the new container, as
                    # one on a new port, enters only once its checks pass.
                    self._undrain([num], fresh=True)
            try:
                self._ready(num, host)
            except RollError as exc:
                raise RollError("%s; %s" % (exc, self._where(rolled, stale, num))) from exc
            rolled.append(num)
            self.emit({"kind": "info", "run": self.name, "message": "replica %d runs the new "
                       "version (%d of %d)" % (num, len(rolled), len(stale))})
        self._publish(self._replicas(kept))   # the new version's settings, now all run it
        return {"rolled": rolled, "unchanged": False, "added": added, "retired": retired}

    def _entry(self, submission: Any, changed: bool = True) -> None:
        """The run's queue entry follows the new version: retry resubmits it from now on, and
        the background pass autoscales it (with the rules of this apply, even when nothing
        else changed); a service that no longer needs one loses it."""
        if self.scale_only:
            return
        if self.runner.keeps_entry():
            if changed or autoscaled(self.runner.config):
                self.runner.keep_entry(submission)
        else:
            self.runner.drop_entry()

    def _fewer(self, kept: list[dict[str, Any]], wanted: int) -> list[int]:
        """Scale down: the replicas after the first ``wanted`` leave the route, get
        drained (``_drain``), and their hosts take them away for good
        (``retire``). Returns their numbers."""
        going = kept[wanted:]
        if not going:
            return []
        nums = [k["job_num"] for k in going]
        self._lease()
        # The replicas that stay say the new count first (their labels keep the old one), so
        # that every look at the run reads it, even once the hosts of those taken away are gone.
        staying = kept[:wanted]
        self._each(staying, "recount", lambda k: {"run": self.name, "job_num": k["job_num"],
                                                  "run_id": self.record["run_id"],
                                                  "replicas": wanted}, "note the new count on")
        self._replicas(kept)   # every replica's host answers, before the proxy changes
        try:
            self._drain(kept, nums)
            self._each(going, "retire", lambda k: {"run": self.name, "job_num": k["job_num"],
                                                   "run_id": self.record["run_id"]},
                       "take away")
        finally:   # one that could not be taken away serves again
            try:
                self._set_replicas(kept)
            finally:
                self._undrain(nums)
        self.emit({"kind": "info", "run": self.name, "message": "%s taken away (%s now)"
                   % (_named(nums), replicas_text(wanted))})
        try:   # its owner's per-user use counts what the service holds now
            self.runner.run_id = self.record["run_id"]
            self.runner.readmit({"fleet": self.fleet, "jobs": [k["placed"] for k in staying]})
        except GpufleetError as exc:
            self.emit({"kind": "info", "run": self.name, "message": "its owner's use still "
                       "counts the replicas taken away until the admission lapses: %s" % exc})
        return nums

    def _drain(self, kept: list[dict[str, Any]], nums: list[int]) -> None:
        """Replicas ``nums`` take no new request and end those in flight (``proxy_drain``: at
        once, without a reload, until HAProxy has none on them, at most DRAIN_TIMEOUT). A
        proxy that cannot drain (an older helper, its socket silent) gets the route without
        them and DRAIN_SECONDS."""
        try:
            answer = self.proxy_node.call("proxy_drain", {
                "run": self.name, "replicas": list(nums), "seconds": DRAIN_TIMEOUT},
                timeout=DRAIN_TIMEOUT + 60)
        except NodeError:
            self._set_replicas(kept, leave_out=nums)
            self.sleep(DRAIN_SECONDS)
            return
        if not answer.get("drained"):
            self.emit({"kind": "info", "run": self.name, "message": "%s still had %d request(s) "
                       "in flight after %d s; they are cut" % (
                           _named(nums), int(answer.get("left") or 0), DRAIN_TIMEOUT)})

    def _undrain(self, nums: list[int], fresh: bool = False) -> None:
        """Undo ``_drain`` of ``nums``; ``fresh``: they run new containers, taken as down
        until their checks pass. A failure is said (a reload of the route undoes the drain
        too, but a replica on the same port changes no route)."""
        try:
            self.proxy_node.call("proxy_drain", {"run": self.name, "replicas": list(nums),
                                                 "ready": True, "fresh": fresh})
        except NodeError as exc:
            message = "the proxy on %s could not take %s back: %s; apply again" % (
                self.proxy_node.name, _named(nums), exc)
            self.emit({"kind": "info", "run": self.name, "message": message})

    def _each(self, replicas: list[dict[str, Any]], op: str,
              payload: Callable[[dict[str, Any]], dict[str, Any]], doing: str) -> None:
        """``op`` on the host of each of ``replicas`` at once; RollError naming those that
        failed."""
        failed = self._on_hosts(replicas, op, payload)
        if failed:
            raise RollError("service %s: could not %s %s; apply again"
                            % (self.name, doing, "; ".join(failed.values())))

    def _on_hosts(self, replicas: list[dict[str, Any]], op: str,
                  payload: Callable[[dict[str, Any]], dict[str, Any]]) -> dict[int, str]:
        """``op`` on the host of each of ``replicas`` at once: ``{index: "replica N on HOST:
        why"}`` of those that failed (every host is asked, whatever the others answer)."""
        def one(i: int) -> Any:
            host = replicas[i]["host"]
            if host not in self.nodes:
                raise NodeError(host, "cannot be reached from this controller")
            return self.nodes[host].call(op, payload(replicas[i]))

        answers = parallel(list(range(len(replicas))), one)
        return dict((i, "replica %d on %s: %s" % (replicas[i]["job_num"], replicas[i]["host"],
                                                  error))
                    for i, (_answer, error) in sorted(answers.items()) if error is not None)

    def _add(self, kept: list[dict[str, Any]], jobs: list[dict[str, Any]]) -> list[int]:
        """Scale up: ``jobs`` (prepared replicas of the new version, numbered after ``kept``)
        are started on the hosts they were placed on, each adding its share to the run's
        claim there; they enter the route and each is waited for until the proxy has it
        up. Returns their numbers."""
        if not jobs:
            return []
        self._lease()
        self.fresh(self.record)   # still running (a stop meanwhile would leave them behind)
        claimed: list[dict[str, Any]] = []
        for job in jobs:
            job["claim"] = dict(job["claim"], add=True, replace=False)
            answer = self._call(job["host"], "claim", job["claim"])
            if not answer.get("claimed"):
                self._release(claimed)
                raise RollError("service %s: host %s cannot hold replica %d: %s; apply again "
                                "once it has room" % (self.name, job["host"], job["job_num"],
                                                      answer.get("reason")))
            claimed.append(job)
        failed = self._on_hosts(jobs, "start", lambda job: {"job": job})
        everyone = kept + [dict(host=j["host"], job_num=j["job_num"]) for j in jobs]
        if failed:
            self._release([jobs[i] for i in failed])   # a start that never answered
            self._set_replicas(everyone)   # those that started serve
            raise RollError("service %s: could not start %s; apply again"
                            % (self.name, "; ".join(failed.values())))
        self._set_replicas(everyone)
        for job in jobs:
            self._ready(job["job_num"], job["host"])
        nums = [j["job_num"] for j in jobs]
        self.emit({"kind": "info", "run": self.name, "message": "%s added (%s now)"
                   % (_named(nums), replicas_text(len(everyone)))})
        return nums

    def _release(self, jobs: list[dict[str, Any]]) -> None:
        """Give back the shares ``jobs`` added to the run's claims (best effort)."""
        self._on_hosts(jobs, "release", lambda job: {
            "run": self.name, "run_id": self.record["run_id"], "jobs": [job["job_num"]]})

    def _check(self, kept: list[dict[str, Any]]) -> None:
        """What an update in place cannot do, refused before anything changes: other
        resources, or other replica groups (names, order, counts)."""
        config = self.runner.config
        now = [(k.get("placed") or {}).get("group") for k in kept]
        asked = [config.get("resources")] * len(kept)
        if config.get("groups") or any(g is not None for g in now):
            wanted = [(g.get("name"), g.get("nodes")) for g in config.get("groups") or []]
            if _layout(now) != wanted:
                raise RollError("groups: service %s runs %s, and this apply asks for %s: a "
                                "running service keeps its replica groups and their counts; "
                                "stop it and apply again to change them" % (
                                    self.name, _layout_text(_layout(now)),
                                    _layout_text(wanted)))
            by_name = dict((g.get("name"), g.get("resources")) for g in config["groups"])
            asked = [by_name.get(g) for g in now]
        for item, resources in zip(kept, asked):
            if item.get("resources") != resources:
                raise RollError("resources: service %s's replicas hold what the old version "
                                "asked for, and a replica is replaced on its own host; stop it "
                                "and apply again to change resources" % self.name)

    def _where(self, rolled: list[int], stale: list[dict[str, Any]],
               failed: Optional[int] = None) -> str:
        old = [k["job_num"] for k in stale if k["job_num"] not in rolled + [failed]]
        text = "replicas rolled to the new version: %s; still on the old one: %s" % (
            ", ".join(str(n) for n in rolled) or "none", ", ".join(str(n) for n in old) or "none")
        if failed is not None:
            text += "; replica %d runs the new version outside the proxy" % failed
        return text + "; apply again to go on, or stop the service"

    def plan(self) -> dict[str, Any]:
        """Where the replicas are, as a plan shows them, after the checks ``run`` makes first
        (nothing is changed)."""
        kept = self._kept()
        self._check(kept)
        wanted = self._wanted(len(kept))
        return {"fleet": self.fleet,
                "jobs": [k["placed"] for k in kept[:wanted]] + self._more(kept, wanted, True)}
