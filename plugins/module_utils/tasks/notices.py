# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The actions of ``gpufleet event`` and ``gpufleet notify``, beside tasks.actions: what the
``event_info`` and ``notify`` modules and gpufleet.direct call, with the modules' parameters.
The hosts' event records are read by tasks.eventlog; the hooks are set on the hosts by
tasks.notifications.
"""

from __future__ import annotations

import uuid

from ..core.errors import GpufleetError
from ..events.query import EventQueryError, Filters
from . import surveys
from .actions import FLEET_OPTIONS, ActionError, fleets_of, submitter
from .eventlog import report
from .notifications import NotifyError, list_hooks, remove_hook, set_hook
from .usage import UsageError, reachable_fleets

EVENT_FILTERS = ("target_fleets", "target_runs", "within_fleets", "within_runs",
                 "include_target_types")
EVENT_INFO_ARGS = dict(since=dict(type="str"), fleet=dict(type="str"),
                       limit=dict(type="int"),
                       **dict((name, dict(type="list", elements="str", default=[]))
                              for name in EVENT_FILTERS[:-1]),
                       include_target_types=dict(type="list", elements="str", default=[],
                                                 choices=["fleet", "instance", "run", "job",
                                                          "user"]),
                       **FLEET_OPTIONS)
NOTIFY_ARGS = dict(operation=dict(type="str", choices=["add", "remove", "list"],
                                  default="list"),
                   url=dict(type="str", no_log=True), name=dict(type="str"),
                   on=dict(type="list", elements="str", default=[]), fleet=dict(type="str"),
                   format=dict(type="str", choices=["json", "slack"], default="json"),
                   **FLEET_OPTIONS)


def event_info(params):
    """The events the reachable fleets' hosts recorded (tasks.eventlog), as ``gpufleet event``
    shows them."""
    root, fleets = fleets_of(params)
    limit = params.get("limit")
    if limit is not None and limit < 1:
        raise ActionError("limit %s: give 1 or more events" % limit)
    try:
        filters = Filters.of(dict((k, params.get(k)) for k in EVENT_FILTERS))
        found = report(fleets, root, since=params.get("since"), filters=filters,
                       fleet=params.get("fleet"), limit=limit)
    except (EventQueryError, UsageError) as exc:
        raise ActionError(str(exc)) from exc
    return {"events": found, "changed": False}


def notify(params, hooks, check_mode=False):
    """``gpufleet notify``: add a webhook to the hosts of the reachable fleets (``fleet``:
    that one's), remove one, or list them. ``hooks`` is automation.webhooks (make_hook,
    public), handed in as the queue's gate is: this package does not import it."""
    root, fleets = fleets_of(params)
    operation = params.get("operation") or "list"
    try:
        if operation == "remove":
            if not params.get("name"):
                raise ActionError("name the hook to remove (gpufleet notify list shows them)")
            hooks.check_id(params["name"], "NAME")
        chosen = reachable_fleets(fleets, params.get("fleet"))
        if not chosen:
            raise ActionError("no fleet this controller can reach: apply one first "
                              "(gpufleet apply -f FLEET_FILE)")
        nodes = surveys.nodes_of(chosen, root)
        if operation == "list":
            found = list_hooks(nodes)
            # Cut again here: a host of an earlier version may have shown more of a URL.
            for hook in found["hooks"]:
                hook["url"] = hooks.shown_url(hook.get("url") or "")
            return dict(found, changed=False)
        if operation == "remove":
            if check_mode:
                return {"removed_from": [], "unreachable": {}, "changed": True}
            return remove_hook(nodes, params["name"])
        hook = hooks.make_hook(params.get("url"), params.get("on"), params.get("fleet"),
                               params.get("format") or "json", params.get("name"),
                               by=submitter(params), made_id="hook-" + uuid.uuid4().hex[:6])
        if check_mode:
            return {"hook": hooks.public(hook), "set_on": [], "unreachable": {},
                    "changed": True}
        return dict(set_hook(nodes, hook), hook=hooks.public(hook))
    except (UsageError, NotifyError) as exc:
        raise ActionError(str(exc)) from exc
    except GpufleetError as exc:
        if isinstance(exc, ActionError):
            raise
        raise ActionError(str(exc)) from exc
