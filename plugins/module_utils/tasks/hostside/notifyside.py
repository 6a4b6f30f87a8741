# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Webhooks from a fleet host: the hooks it keeps, and the tick that posts its events to them.

This file travels to the hosts after tasks.hostside.eventside (tasks.ssh.host_source) and runs
in the helper's namespace: standard library only, Python 3.6+, every top-level name its own
(``notify``/``_notify`` prefixes).

``NOTIFY_ROOT`` (root's, 0700) holds ``hooks.json`` (0600: each hook's id, URL, the event
kinds it wants, its fleet and body format) and ``state.json`` (0600: how far into the event
record the ticks have read, the deliveries not made yet with their attempts, and per hook
what it delivered). A hook gets the events recorded after it was set.

The **tick** (``tick``, run every TICK_EVERY seconds on the host by a systemd timer, or by a
loop where systemd does not run, such as the local backend's nodes) records what the job
folders show (eventside's sweep), queues the new events each hook wants, then posts what is
due: a 2xx answer delivers it; anything else is tried again after 5, 10, 20... seconds (at
most NOTIFY_BACKOFF_MAX apart) until it is NOTIFY_KEEP seconds old, then dropped and counted.
No request of a controller posts anything, so a receiver that does not answer never delays a
run. ``tick_ensure`` (``notify_set``, and every ``status`` while hooks exist) keeps the timer
or loop there; the tick runs the helper the host last compiled (tasks.hostside.bootstrap's
cache), so it is always the newest one a controller sent.

Each host posts the events it recorded: its jobs' and its queue's. An event a controller wrote
on every host of a fleet (a fleet apply's, a member change) is posted by the one host it was
marked ``deliver`` on. A run all of whose jobs ran here ends with a ``run.status`` event that
this host derives from its jobs' ends (a run on several hosts: each job's end is posted).
"""

import json
import os
import time

try:  # imported as part of the collection (tests, the controller)
    from .booking import BOOK_OPS, _Lock, _write_json
    from .eventside import event_end, event_sweep, event_tail
    from .nodeside import Failure, _json_file, op_status
except ImportError:  # on a host: the files sent before this one run in the same namespace
    pass

NOTIFY_ROOT = "/var/lib/gpufleet/notify"
NOTIFY_HELPER_CACHE = "/var/lib/gpufleet/helper"
NOTIFY_KEEP = 24 * 3600
NOTIFY_BACKOFF_MAX = 300
NOTIFY_TIMEOUT = 5
NOTIFY_PER_TICK = 50
NOTIFY_OUTBOX_MAX = 5000
NOTIFY_SENT_KEPT = 2000   # the last deliveries remembered, so that none is made twice
TICK_EVERY = 15
NOTIFY_FORMATS = ("json", "slack")
_NOTIFY_UNIT = "/etc/systemd/system/gpufleet-tick"
# What the timer (or loop) runs: the helper the host compiled last, its ``serve`` on a tick.
NOTIFY_TICK = (
    "import marshal, os, sys\n"
    "f = %r\n"
    "t = '.' + sys.implementation.cache_tag\n"
    "n = sorted((os.stat(os.path.join(f, x)).st_mtime, x) for x in os.listdir(f)"
    " if x.endswith(t))\n"
    "st = os.lstat(f)\n"
    "if n and st.st_uid == os.geteuid() and not st.st_mode & 0o022:\n"
    "    with open(os.path.join(f, n[-1][1]), 'rb') as h:\n"
    "        c = marshal.load(h)\n"
    "    g = {'__name__': 'gpufleet_node'}\n"
    "    exec(c, g)\n"
    "    g['serve'](b'{\"op\": \"tick\"}')\n"
)


def _notify_path(name):
    return os.path.join(NOTIFY_ROOT, name)


def notify_hooks():
    found = _json_file(_notify_path("hooks.json"))
    return found if isinstance(found, dict) else {}


def _notify_state():
    found = _json_file(_notify_path("state.json"))
    if not isinstance(found, dict):
        found = {}
    found.setdefault("cursor", None)
    found.setdefault("outbox", [])
    found.setdefault("stats", {})
    return found


def _notify_write(name, value):
    path = _notify_path(name)
    _write_json(path, value)
    os.chmod(path, 0o600)


def _notify_public(hook):
    """A hook as it may be shown: its URL cut to scheme and host (the rest may be a secret)."""
    shown = dict((k, v) for k, v in hook.items() if k != "url")
    url = str(hook.get("url") or "")
    scheme, _sep, rest = url.partition("://")
    shown["url"] = "%s://%s/..." % (scheme, rest.split("/", 1)[0].rsplit("@", 1)[-1])
    return shown


def op_notify_set(payload):
    """Keep a hook (a new one, or one of that id replaced); the tick starts if it is not on."""
    hook = payload.get("hook")
    if not isinstance(hook, dict) or not hook.get("id") or not str(hook.get("url") or "") \
            .startswith(("http://", "https://")):
        raise Failure("notify_set needs a hook with an id and an http(s) URL")
    if hook.get("format", "json") not in NOTIFY_FORMATS:
        raise Failure("notify_set: format %r is not one of %s"
                      % (hook.get("format"), ", ".join(NOTIFY_FORMATS)))
    now = time.time()
    with _Lock(NOTIFY_ROOT, private=True):
        hooks = notify_hooks()
        held = dict(hooks.get(str(hook["id"])) or {})
        changed = held.pop("set_at", None) is None or held != dict(
            (k, v) for k, v in hook.items() if k != "set_at")
        if changed:
            hooks[str(hook["id"])] = dict(hook, set_at=now)
            _notify_write("hooks.json", hooks)
        state = _notify_state()
        if state["cursor"] is None:
            # The ticks read the record from here on: nothing recorded before is posted.
            state["cursor"] = event_end()
        _notify_write("state.json", state)
    return {"set": True, "changed": changed, "tick": tick_ensure()}


def op_notify_remove(payload):
    """Drop a hook and what it had still to deliver."""
    hook_id = str(payload.get("id") or "")
    with _Lock(NOTIFY_ROOT, private=True):
        hooks = notify_hooks()
        removed = hooks.pop(hook_id, None) is not None
        if removed:
            _notify_write("hooks.json", hooks)
            state = _notify_state()
            state["stats"].pop(hook_id, None)
            state["outbox"] = [d for d in state["outbox"] if d.get("hook") != hook_id]
            _notify_write("state.json", state)
    return {"removed": removed}


def op_notify_list(payload):
    """The hooks here (their URLs cut short), with what each delivered, failed, dropped and
    still has to deliver."""
    hooks = notify_hooks()
    state = _notify_state()
    found = []
    for hook_id, hook in sorted(hooks.items()):
        shown = _notify_public(hook)
        stats = {"delivered": 0, "failed": 0, "expired": 0}
        stats.update(state["stats"].get(hook_id) or {})
        stats["waiting"] = len([d for d in state["outbox"] if d.get("hook") == hook_id])
        shown["deliveries"] = stats
        found.append(shown)
    return {"hooks": found, "tick": _tick_alive()}


def op_notify_export(payload):
    """The hooks here whole, URLs included: for a controller to copy them to a host of the
    same fleet that lacks them (tasks.notifications.copy_to_new_hosts); never shown."""
    return {"hooks": notify_hooks()}


def _notify_wanted(hook, event):
    kinds = hook.get("on") or []
    if kinds and event.get("kind") not in kinds:
        return False
    if hook.get("fleet") and event.get("fleet") not in (None, hook["fleet"]):
        return False
    return event.get("deliver", True) is not False


def _notify_run_end(event):
    """The ``run.status`` this host says of a run all of whose jobs ran here: one job, not a
    service's replica (None otherwise)."""
    if event.get("kind") != "job.ended" or event.get("nodes") != 1:
        return None
    if (event.get("policy") or {}).get("type") == "service":
        return None
    reason = event.get("reason")
    code = event.get("exit_code")
    if reason in ("done_by_runner",) or (code == 0 and not reason):
        status, why = "done", "all_jobs_done"
    elif reason and (reason.startswith("terminated_") or reason in (
            "max_duration_exceeded", "scaled_down")):
        status, why = "terminated", reason
    else:
        status, why = "failed", "job_failed"
    made = dict((k, event.get(k)) for k in ("at", "run", "run_id", "fleet", "submission",
                                            "recorded"))
    made.update(id="%s/%s/run.status/%s" % (event.get("run"), event.get("submission"), status),
                kind="run.status", status=status, reason=why)
    return made


def _notify_body(hook, event, host):
    if hook.get("format") == "slack":
        parts = [event.get("kind")]
        for key in ("fleet", "run", "instance", "user", "state", "status", "reason"):
            if event.get(key) not in (None, ""):
                parts.append("%s=%s" % (key, event[key]))
        if event.get("job") is not None and event.get("run"):
            parts.append("job=%s" % event["job"])
        if event.get("exit_code") is not None:
            parts.append("exit_code=%s" % event["exit_code"])
        return {"text": "gpufleet on %s: %s" % (host, " ".join(str(p) for p in parts))}
    shown = dict((k, v) for k, v in event.items() if k not in ("policy", "deliver"))
    return {"hook": hook.get("id"), "host": host, "event": shown}


def _notify_post(url, body):
    """``None`` when the receiver took it (2xx), else why not."""
    import urllib.error
    import urllib.request

    data = json.dumps(body).encode("utf-8")
    request = urllib.request.Request(url, data=data, method="POST", headers={
        "Content-Type": "application/json", "User-Agent": "gpufleet-notify"})
    try:
        with urllib.request.urlopen(request, timeout=NOTIFY_TIMEOUT) as answer:
            code = answer.getcode()
    except urllib.error.HTTPError as exc:
        return "HTTP %s" % exc.code
    except Exception as exc:  # refused, timed out, a bad name: tried again later
        return "%s: %s" % (type(exc).__name__, str(exc)[:200])
    return None if 200 <= code < 300 else "HTTP %s" % code


def _notify_key(item):
    return "%s %s" % (item.get("hook"), (item.get("event") or {}).get("id"))


def notify_tick(now=None, post=None, host=None):
    """One tick: queue the new events each hook wants, post what is due. Answers counts.

    The posts are made outside the lock (a receiver may take NOTIFY_TIMEOUT seconds each):
    what is due is picked under it, posted, then the answers are written under it again, so
    that adding or removing a hook never waits for a slow receiver."""
    import socket

    now = time.time() if now is None else now
    post = post or _notify_post
    host = host or socket.gethostname()
    if not notify_hooks():
        return {"hooks": 0}
    try:
        event_sweep(op_status({})["containers"])
    except Exception:  # a sweep that fails leaves the facts in the folders: the next one
        pass
    with _Lock(NOTIFY_ROOT, private=True):
        hooks = notify_hooks()
        state = _notify_state()
        queued = _notify_queue(hooks, state, now)
        due = [dict(item) for item in state["outbox"]
               if item.get("hook") in hooks and float(item.get("expires") or 0) > now
               and float(item.get("next_at") or 0) <= now][:NOTIFY_PER_TICK]
        _notify_write("state.json", state)
    answers = {}
    for item in due:
        hook = hooks[item["hook"]]
        answers[_notify_key(item)] = post(hook["url"], _notify_body(hook, item["event"], host))
    delivered = failed = expired = 0
    with _Lock(NOTIFY_ROOT, private=True):
        hooks = notify_hooks()
        state = _notify_state()
        outbox = []
        for item in state["outbox"]:
            hook_id = item.get("hook")
            if hook_id not in hooks:
                continue   # removed meanwhile: its deliveries went with it
            stats = state["stats"].setdefault(hook_id, {"delivered": 0, "failed": 0,
                                                        "expired": 0})
            key = _notify_key(item)
            if key in answers and answers[key] is None:
                state["sent"] = ((state.get("sent") or []) + [key])[-NOTIFY_SENT_KEPT:]
                delivered += 1
                stats["delivered"] = stats.get("delivered", 0) + 1
                stats["last_delivered_at"] = now
                continue
            if key in answers:
                failed += 1
                item["attempts"] = int(item.get("attempts") or 0) + 1
                item["next_at"] = now + min(NOTIFY_BACKOFF_MAX,
                                            5 * 2 ** (item["attempts"] - 1))
                stats["failed"] = stats.get("failed", 0) + 1
                stats["last_error"] = answers[key]
            elif float(item.get("expires") or 0) <= now:
                expired += 1
                stats["expired"] = stats.get("expired", 0) + 1
                continue
            outbox.append(item)
        state["outbox"] = outbox
        _notify_write("state.json", state)
    return {"hooks": len(hooks), "queued": queued, "delivered": delivered, "failed": failed,
            "expired": expired, "waiting": len(outbox)}


def _notify_queue(hooks, state, now):
    """Put the events recorded since the last tick that each hook wants into the outbox
    (under the lock); a hook gets only what was recorded after it was set."""
    events, state["cursor"] = event_tail(state["cursor"])
    # An event recorded twice (a sweep cut short before it noted what it wrote) goes once.
    known = set(state.get("sent") or []) | set(_notify_key(i) for i in state["outbox"])
    queued = 0
    for event in events:
        for item in [event] + [e for e in [_notify_run_end(event)] if e]:
            for hook_id, hook in sorted(hooks.items()):
                if float(event.get("recorded") or 0) < float(hook.get("set_at") or 0):
                    continue
                made = {"hook": hook_id, "event": item, "attempts": 0, "next_at": now,
                        "expires": now + NOTIFY_KEEP}
                if _notify_wanted(hook, item) and _notify_key(made) not in known:
                    known.add(_notify_key(made))
                    state["outbox"].append(made)
                    queued += 1
    if len(state["outbox"]) > NOTIFY_OUTBOX_MAX:
        state["outbox"] = state["outbox"][-NOTIFY_OUTBOX_MAX:]
    return queued


def op_tick(payload):
    """A tick, unless another one is under way (then nothing)."""
    import fcntl

    if not os.path.isdir(NOTIFY_ROOT):
        return {"hooks": 0}
    with open(_notify_path("tick.lock"), "a") as handle:
        try:
            fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            return {"busy": True}
        return notify_tick()


def _tick_alive():
    if os.path.isdir("/run/systemd/system") and os.path.exists(_NOTIFY_UNIT + ".timer"):
        return "systemd"
    try:
        with open(_notify_path("tick.pid")) as handle:
            pid = int(handle.read().strip())
        os.kill(pid, 0)
    except (IOError, OSError, ValueError):
        return None
    return "loop"


def tick_ensure():
    """Start the tick where it does not run: a systemd timer, else a loop in the background.
    Answers how it runs."""
    import subprocess

    alive = _tick_alive()
    if alive:
        return alive
    program = _notify_path("tick.py")
    with open(program + ".new", "w") as handle:
        handle.write(NOTIFY_TICK % NOTIFY_HELPER_CACHE)
    os.chmod(program + ".new", 0o600)
    os.rename(program + ".new", program)
    command = "/usr/bin/env python3 -S %s" % program
    if os.path.isdir("/run/systemd/system"):
        with open(_NOTIFY_UNIT + ".service", "w") as handle:
            handle.write("[Unit]\nDescription=gpufleet: post events to webhooks\n\n[Service]\n"
                         "Type=oneshot\nExecStart=%s\n" % command)
        with open(_NOTIFY_UNIT + ".timer", "w") as handle:
            handle.write("[Unit]\nDescription=gpufleet: post events to webhooks every %ds\n\n"
                         "[Timer]\nOnBootSec=30\nOnUnitActiveSec=%d\nAccuracySec=1\n\n"
                         "[Install]\nWantedBy=timers.target\n" % (TICK_EVERY, TICK_EVERY))
        subprocess.call(["systemctl", "daemon-reload"])
        subprocess.call(["systemctl", "enable", "--now", "gpufleet-tick.timer"])
        return "systemd"
    loop = "while :; do %s >/dev/null 2>&1; sleep %d; done" % (command, TICK_EVERY)
    with open(os.devnull, "r+") as null:
        child = subprocess.Popen(["/bin/sh", "-c", loop], stdin=null, stdout=null, stderr=null,
                                 close_fds=True, start_new_session=True, cwd="/")
    with open(_notify_path("tick.pid"), "w") as handle:
        handle.write("%d\n" % child.pid)
    return "loop"


_NOTIFY_STATUS_BEFORE = BOOK_OPS["status"]


def op_status_notify(payload):
    """The host's status; a host that keeps hooks gets its tick back when it stopped (a node
    that restarted)."""
    answer = _NOTIFY_STATUS_BEFORE(payload)
    if os.path.exists(_notify_path("hooks.json")) and notify_hooks():
        try:
            tick_ensure()
        except Exception as exc:  # the listing stands; the answer says why the tick is off
            answer["tick_error"] = "%s: %s" % (type(exc).__name__, exc)
    return answer


BOOK_OPS.update({
    "status": op_status_notify,
    "notify_set": op_notify_set,
    "notify_remove": op_notify_remove,
    "notify_list": op_notify_list,
    "notify_export": op_notify_export,
    "tick": op_tick,
})
