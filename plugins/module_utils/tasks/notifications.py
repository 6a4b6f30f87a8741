# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Webhooks on the fleets' hosts (``gpufleet notify``): a hook set on every host of the
fleets, listed with what each host delivered, removed; and a fleet's hooks copied to its
hosts that lack them (a host a fleet apply added).

The hook itself (its checks, its id, how its URL may be shown) is automation.webhooks'; the
posting is the hosts' (tasks.hostside.notifyside). A hook's URL goes to the hosts inside the
request (stdin of the helper), never in a command line, and comes back from them only to be
copied to another host of the same fleet.
"""

from __future__ import annotations

from typing import Any, Dict, List, Mapping, Tuple

from ..core.errors import GpufleetError
from .ssh import Node, NodeError, parallel


class NotifyError(GpufleetError):
    """A hook that could not be set, removed or listed on the fleets' hosts."""


def _ask(nodes: Mapping[str, Node], op: str, payload: Mapping[str, Any]
         ) -> Tuple[Dict[str, Any], Dict[str, str]]:
    answers = parallel(sorted(nodes), lambda host: nodes[host].call(op, dict(payload),
                                                                    timeout=60))
    done: Dict[str, Any] = {}
    unreachable: Dict[str, str] = {}
    for host, (answer, error) in sorted(answers.items()):
        if error is not None:
            unreachable[host] = str(error.detail if isinstance(error, NodeError) else error)
        else:
            done[host] = answer or {}
    return done, unreachable


def set_hook(nodes: Mapping[str, Node], hook: Dict[str, Any]) -> Dict[str, Any]:
    """Set ``hook`` (automation.webhooks.make_hook) on every host of ``nodes`` (the hosts of
    the fleets it is for). NotifyError when no host took it."""
    done, unreachable = _ask(nodes, "notify_set", {"hook": hook})
    if not done:
        raise NotifyError("no host took the hook: %s" % _said(unreachable))
    return {"set_on": sorted(done), "ticks": dict((h, a.get("tick")) for h, a in done.items()),
            "changed": any(a.get("changed", True) for a in done.values()),
            "unreachable": unreachable}


def remove_hook(nodes: Mapping[str, Node], hook_id: str) -> Dict[str, Any]:
    """Take the hook ``hook_id`` off every host of ``nodes`` that keeps it."""
    done, unreachable = _ask(nodes, "notify_remove", {"id": hook_id})
    removed = sorted(h for h, a in done.items() if a.get("removed"))
    return {"removed_from": removed, "changed": bool(removed), "unreachable": unreachable}


def list_hooks(nodes: Mapping[str, Node]) -> Dict[str, Any]:
    """``{"hooks": [hook as shown, with "hosts": {host: its deliveries}], "unreachable"}``
    from the hosts of ``nodes``."""
    done, unreachable = _ask(nodes, "notify_list", {})
    hooks: Dict[str, Dict[str, Any]] = {}
    for host, answer in sorted(done.items()):
        for hook in answer.get("hooks") or []:
            shown = hooks.setdefault(hook["id"], dict(
                (k, v) for k, v in hook.items() if k != "deliveries"))
            shown.setdefault("hosts", {})[host] = dict(hook.get("deliveries") or {},
                                                       tick=answer.get("tick"))
    return {"hooks": [hooks[k] for k in sorted(hooks)], "unreachable": unreachable}


def copy_to_new_hosts(nodes: Mapping[str, Node]) -> Dict[str, Any]:
    """The hooks the hosts of one fleet keep, set on those of its hosts that never kept any
    (the hosts a fleet apply added); a hook removed on some host after it was set is copied
    nowhere."""
    done, unreachable = _ask(nodes, "notify_export", {})
    removed: Dict[str, float] = {}
    wanted: Dict[str, Dict[str, Any]] = {}
    for answer in done.values():
        for hook_id, when in (answer.get("removed") or {}).items():
            removed[hook_id] = max(float(when or 0), removed.get(hook_id, 0.0))
        for hook_id, hook in (answer.get("hooks") or {}).items():
            if hook_id not in wanted or float(hook.get("set_at") or 0) > float(
                    wanted[hook_id].get("set_at") or 0):
                wanted[hook_id] = hook
    wanted = dict((k, h) for k, h in wanted.items()
                  if removed.get(k, 0.0) < float(h.get("set_at") or 0))
    new = sorted(h for h, a in done.items() if not a.get("kept"))
    if not wanted or not new:
        return {"copied": {}, "unreachable": unreachable}

    def copy(host):
        for hook_id, hook in sorted(wanted.items()):
            nodes[host].call("notify_set", {"hook": hook}, timeout=60)
        return sorted(wanted)

    copied: Dict[str, List[str]] = {}
    for host, (answer, error) in sorted(parallel(new, copy).items()):
        if error is not None:
            unreachable[host] = str(error.detail if isinstance(error, NodeError) else error)
        else:
            copied[host] = answer
    return {"copied": copied, "unreachable": unreachable}


def _said(errors: Mapping[str, str]) -> str:
    return "; ".join("%s: %s" % item for item in sorted(errors.items())) or "no hosts"
