# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""How long a host has not answered, as the commands that look at it have seen.

An attached run's watch counts the silence of its hosts itself (tasks.supervisor), and
tasks.interruption fails a job whose host stays silent for JOB_DISCONNECTED_GRACE while its
backend still runs it, as dstack's server does. A detached run has nobody watching: its jobs
are judged by whichever command looks next (``gpufleet ps``, a queue pass from ps, reconcile.yml
or apply). So that the same rule holds there, every such look notes, in the host's cached facts
(fleets/state.py's facts.json, beside its health), when a series of looks that found it silent
began (``silent_since``) and when the last of them was (``silent_seen``); a look that gets an
answer clears both. A host counts as silent when nothing was heard from it (SSH could not reach
it, or no answer came in time: ``NodeError.silent``), not when it answered with an error.

A series ends when no look found the host silent for SERIES_GAP seconds: what happened in
between was not seen (the host may have answered commands that do not keep this note, such as
an attached run's watch), so the next silent look starts counting anew. It is this
controller's cache, not the truth: another controller starts counting at its own first look.
Only hosts an apply on this controller put in the cache are counted. Pure logic in ``update``;
``note`` reads and writes the cache; ``look`` is the survey of ps and the passes, noted.
"""

from __future__ import annotations

import math
import time

from ..fleets import state
from . import surveys
from .supervisor import STATUS_TIMEOUT

SINCE = "silent_since"
SEEN = "silent_seen"
# Longest time between two silent looks of one series: a user's ps now and then, or a pass
# from a timer (examples/systemd runs one every minute), keeps the count.
SERIES_GAP = 600


def _time(value):
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return value if math.isfinite(value) else None


def update(cached, silent, answered, now):
    """``(changes, seconds)`` from what a look found.

    ``cached``: ``{host: (since, seen)}`` as the cache holds them (None where it holds none);
    ``silent``: the hosts nothing was heard from now; ``answered``: those that answered.
    ``changes`` is ``{host: (since, seen)}`` to keep, or ``{host: None}`` to clear; ``seconds``
    is ``{host: seconds silent}`` for every host in ``silent``. A time in the future (a clock
    set back) or not a number starts a new series."""
    changes = {}
    seconds = {}
    for host in silent:
        since, seen = [_time(v) for v in cached.get(host) or (None, None)]
        if since is None or seen is None or not since <= seen <= now or (
                now - seen > SERIES_GAP):
            since = now
        changes[host] = (since, now)
        seconds[host] = now - since
    for host in answered:
        if host not in silent and any(v is not None for v in cached.get(host) or ()):
            changes[host] = None
    return changes, seconds


def look(nodes, root, fleets, survey=None, clock=None, check_mode=False):
    """A look at every host as ps and the queue's passes make it: ``(survey, {host: seconds
    silent})``, the survey being tasks.surveys.survey_with_queues's answer, each host given
    STATUS_TIMEOUT as a run's watch gives it (a host that went away silently would hold the
    look a minute), and the silence noted (``note``). A host that did not answer was silent
    from the look's start (``clock()``, time.time by default). ``survey``: one made a moment
    ago, used instead of asking again."""

    begun = (clock or time.time)()
    if survey is None:
        survey = surveys.survey_with_queues(nodes, timeout=STATUS_TIMEOUT)
    return survey, note(root, fleets, survey[3], survey[0], begun, check_mode)


def note(root, fleets, errors, answered, now=None, check_mode=False):
    """``{host: seconds silent}`` for the hosts in ``errors`` (``{host: error}`` of a look; a
    host that answered with an error counts 0), keeping the series in each host's fleet's
    facts cache under ``root`` (the state dir) and ending it for the hosts in ``answered``.
    Without ``root``, or in ``check_mode``, nothing is written."""
    now = time.time() if now is None else now
    silent = set(h for h, e in errors.items() if getattr(e, "silent", False))
    seconds = dict((host, 0.0) for host in errors)
    if not root:
        return seconds
    fleet_of = {}
    cached = {}
    for fleet in fleets:
        name = fleet.get("name")
        if not isinstance(name, str) or not name:
            continue
        facts = state.read_facts(root, name)
        for inst in fleet.get("instances") or []:
            host = inst.get("name")
            if host in facts:
                fleet_of[host] = name
                cached[host] = (facts[host].get(SINCE), facts[host].get(SEEN))
    changes, counted = update(cached, silent & set(fleet_of), set(answered) & set(fleet_of), now)
    seconds.update(counted)
    if check_mode:
        return seconds
    by_fleet = {}
    for host, value in changes.items():
        by_fleet.setdefault(fleet_of[host], {})[host] = value
    for name, values in sorted(by_fleet.items()):
        try:
            state.edit_facts(root, name, lambda facts, values=values: _noted(facts, values))
        except (OSError, state.StateError):
            pass   # a cache: the next look counts from its own first sight
    return seconds


def _noted(facts, values):
    """``facts`` (a fleet's cache, as read under its lock) with each ``{host: (since, seen)}``
    set, or cleared where it is None; hosts no longer in the cache stay out."""
    edited = dict(facts)
    for host, value in values.items():
        if host in edited:
            fact = dict((k, v) for k, v in edited[host].items() if k not in (SINCE, SEEN))
            if value is not None:
                fact.update({SINCE: value[0], SEEN: value[1]})
            edited[host] = fact
    return edited
