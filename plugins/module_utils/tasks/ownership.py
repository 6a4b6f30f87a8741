# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Whose run it is: the guard ``gpufleet stop`` (the run_stop module) passes before it stops a
run that another user submitted.

Every run names its submitter (the ``gpufleet.user`` label, its queue entry: tasks.listing's
``user``). Stopping another user's run is refused, naming its owner, unless the caller says
``force`` or is an admin of the run's fleet, as the members document on the fleet's hosts says
(teams.members; read with the host helper's ``members`` operation). A run made before runs
named their user belongs to nobody and anyone may stop it, as before.

The guard is a courtesy of the caller's controller, not a lock: the hosts enforce only who may
log in (docs/teams.md says what it is and is not). The queue's own stops (a retry, a duration
that ran out) are the runner's, not a user's, and pass no guard.
"""

from __future__ import annotations

from typing import Any, Callable, Iterable, Mapping, Optional

from ..core.text import shorten
from ..teams import members
from .errors import RunError
from .ssh import NodeError


class NotYours(RunError):
    """A stop of another user's run, refused; the message names the owner and what to do."""


def owners(records: Iterable[Mapping[str, Any]]) -> dict[str, str]:
    """``{run: user}`` of the records that name their submitter."""
    return dict((r["name"], r["user"]) for r in records if r.get("user"))


def fleet_of(record: Mapping[str, Any], fleets: Iterable[Mapping[str, Any]]) -> Optional[str]:
    """The fleet a run record is on: its ``fleet``, else (a run that only waits in the queue)
    the fleet of the host that keeps its entry."""
    if record.get("fleet"):
        return record["fleet"]
    host = record.get("queued_on")
    for fleet in fleets:
        if any(i.get("name") == host for i in fleet.get("instances") or ()):
            return fleet.get("name")
    return None


def members_doc(nodes: Mapping[str, Any], fleets: Iterable[Mapping[str, Any]],
                fleet: Optional[str]) -> Optional[dict]:
    """The members document of ``fleet`` as the first of its hosts that answers keeps it
    (the host helper's ``members`` operation), or None: no such fleet, no host answered, or
    the hosts keep no document (or a helper without that operation): then it has no admins."""
    for record in fleets:
        if fleet is None or record.get("name") != fleet:
            continue
        for inst in sorted(record.get("instances") or (), key=lambda i: i.get("num") or 0):
            node = nodes.get(inst.get("name"))
            if node is None:
                continue
            try:
                answer = node.call("members", {})
            except NodeError:
                continue
            doc = answer.get("doc") if isinstance(answer, dict) else None
            return doc if isinstance(doc, dict) else None
    return None


def check_stop(records: Iterable[Mapping[str, Any]], caller: str, force: bool,
               admin_doc: Callable[[Optional[str]], Optional[dict]],
               fleet_of_record: Callable[[Mapping[str, Any]], Optional[str]]) -> None:
    """Raise NotYours when ``caller`` may not stop every one of ``records`` (a run, or the
    live runs of a job array): one of them is another user's, ``force`` is not given and
    ``caller`` is not an admin of that run's fleet. ``admin_doc(fleet)`` reads the fleet's
    members document (asked once per fleet, only for another user's run)."""
    if force:
        return
    docs: dict[Optional[str], Optional[dict]] = {}
    for record in records:
        owner = record.get("user")
        if not owner or owner == caller:
            continue
        fleet = fleet_of_record(record)
        if fleet not in docs:
            docs[fleet] = admin_doc(fleet)
        if members.is_admin(docs[fleet], caller):
            continue
        raise NotYours(
            "run %s belongs to %s: you (%s) are not an admin of %s; ask %s, or stop it anyway "
            "with --force (the force option)" % (
                shorten(record.get("name") or "?"), shorten(owner), shorten(caller),
                "fleet %s" % shorten(fleet) if fleet else "its fleet", shorten(owner)))
