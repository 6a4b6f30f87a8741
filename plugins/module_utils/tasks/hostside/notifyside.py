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
due, outside the hooks' lock: a 2xx answer delivers it (a redirect does not); anything else is
tried again after 5, 10, 20... seconds (at most NOTIFY_BACKOFF_MAX apart) until it is
NOTIFY_KEEP seconds old, then dropped and counted. A receiver that failed is not asked again
in the same tick, and a tick posts for NOTIFY_TICK_BUDGET seconds at most. No request of a
controller posts anything, so a receiver that does not answer never delays a run or a
command. Deliveries are at least once: a tick killed while it posts posts again what it had
not written down. ``tick_ensure`` (``notify_set``, and every ``status`` while hooks exist)
keeps the timer or loop there (``tick_stop`` ends it with the last hook, unless another part
of the helper still wants it: ``TICK_PARTS``, scheduleside's schedules), run by the
interpreter the requests run with, and keeps for it a copy of the helper the request runs
(``helper.<tag>``), so that a controller of an earlier version, whose helper has no tick,
does not stop it.

Each host posts the events it recorded: its jobs' and its queue's. An event a controller wrote
on every host of a fleet (a fleet apply's, a member change) is posted by the one host it was
marked ``deliver`` on. A run's end is posted as one ``run.status`` event: by the host of its only
job, from that job's end, and for a multi-node run by the host of its job 0, which records it
once every job has told job 0 how it ended (eventside).
"""

import json
import os
import time

try:  # imported as part of the collection (tests, the controller)
    from .booking import BOOK_OPS, _Lock, _write_json
    from .eventside import event_end, event_sweep, event_tail
    from .runendside import runend_id, runend_verdict
    from .nodeside import Failure, op_status
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
NOTIFY_TICK_BUDGET = 60   # seconds of posting in one tick; the rest waits for the next
NOTIFY_FORMATS = ("json", "slack")
_NOTIFY_UNIT = "/etc/systemd/system/gpufleet-tick"
NOTIFY_SYSTEMD = "/run/systemd/system"   # there when systemd runs the host
# What the timer (or loop) runs: the helper kept for it (``_tick_pin``: the compiled code of
# the last request of a controller that has webhooks), its ``serve`` on a tick.
NOTIFY_TICK = (
    "import marshal, os, sys\n"
    "f = %r\n"
    "p = os.path.join(f, 'helper.' + sys.implementation.cache_tag)\n"
    "st = os.lstat(f)\n"
    "if os.path.isfile(p) and st.st_uid == os.geteuid() and not st.st_mode & 0o022:\n"
    "    with open(p, 'rb') as h:\n"
    "        c = marshal.load(h)\n"
    "    g = {'__name__': 'gpufleet_node'}\n"
    "    exec(c, g)\n"
    "    g['serve'](b'{\"op\": \"tick\"}')\n"
)


def _notify_path(name):
    return os.path.join(NOTIFY_ROOT, name)


def _notify_read(name):
    """A file of NOTIFY_ROOT, whole (they are root's own, of any size): None when it is not
    there; a Failure when it cannot be read, so that nothing is reset by mistake."""
    path = _notify_path(name)
    try:
        with open(path) as handle:
            text = handle.read()
    except (IOError, OSError) as exc:
        if os.path.exists(path):
            raise Failure("cannot read %s: %s" % (path, exc)) from exc
        return None
    try:
        return json.loads(text)
    except ValueError:
        raise Failure("%s cannot be read as JSON" % path) from None


def notify_hooks():
    found = _notify_read("hooks.json")
    return found if isinstance(found, dict) else {}


def _notify_removed():
    """``{hook id: when it was removed}``: a hook removed is never copied back."""
    found = _notify_read("removed.json")
    return found if isinstance(found, dict) else {}


def _notify_state():
    found = _notify_read("state.json")
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
    from urllib.parse import urlsplit

    shown = dict((k, v) for k, v in hook.items() if k != "url")
    try:
        parts = urlsplit(str(hook.get("url") or ""))
        host = parts.hostname or "?"
        if parts.port:
            host = "%s:%d" % (host, parts.port)
        shown["url"] = "%s://%s/..." % (parts.scheme, host)
    except ValueError:
        shown["url"] = "(a URL that cannot be read)"
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
            removed = _notify_removed()
            if removed.pop(str(hook["id"]), None) is not None:
                _notify_write("removed.json", removed)
        state = _notify_state()
        if state["cursor"] is None:
            # The ticks read the record from here on: nothing recorded before is posted.
            state["cursor"] = event_end()
        _notify_write("state.json", state)
    answer = {"set": True, "changed": changed}
    try:
        answer["tick"] = tick_ensure()
    except Exception as exc:  # the hook is kept; the answer says why nothing posts it yet
        answer["tick"] = None
        answer["tick_error"] = "%s: %s" % (type(exc).__name__, exc)
    return answer


def op_notify_remove(payload):
    """Drop a hook and what it had still to deliver."""
    hook_id = str(payload.get("id") or "")
    with _Lock(NOTIFY_ROOT, private=True):
        hooks = notify_hooks()
        removed = hooks.pop(hook_id, None) is not None
        marks = _notify_removed()
        marks[hook_id] = time.time()
        _notify_write("removed.json", marks)
        if removed:
            _notify_write("hooks.json", hooks)
            state = _notify_state()
            state["stats"].pop(hook_id, None)
            state["outbox"] = [d for d in state["outbox"] if d.get("hook") != hook_id]
            _notify_write("state.json", state)
        last = not hooks
    answer = {"removed": removed}
    if last and not tick_wanted():
        # Nothing left to post: the tick stops (the next hook starts it again).
        try:
            tick_stop()
        except Exception as exc:  # the hook is gone; the answer says why the tick runs on
            answer["tick_error"] = "%s: %s" % (type(exc).__name__, exc)
    return answer


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
    return {"hooks": notify_hooks(), "removed": _notify_removed(),
            "kept": os.path.exists(_notify_path("hooks.json"))}


def _notify_wanted(hook, event):
    kinds = hook.get("on") or []
    if kinds and event.get("kind") not in kinds:
        return False
    if hook.get("fleet") and event.get("fleet") not in (None, hook["fleet"]):
        return False
    return event.get("deliver", True) is not False


def _notify_run_end(event):
    """The ``run.status`` this host says of a run whose only job ran here, a task's (None
    otherwise); a multi-node run's is recorded by its job 0's host (eventside)."""
    if event.get("kind") != "job.ended" or event.get("nodes") != 1:
        return None
    if (event.get("policy") or {}).get("type") == "service":
        return None
    verdict = runend_verdict({0: event})
    if verdict is None:
        return None
    status, why = verdict[:2]
    made = dict((k, event.get(k)) for k in ("at", "run", "run_id", "fleet", "submission",
                                            "recorded"))
    made.update(id=runend_id(event.get("run"), event.get("run_id"), event.get("submission"),
                             status), kind="run.status", status=status, reason=why)
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

    class _NoRedirect(urllib.request.HTTPRedirectHandler):
        def redirect_request(self, *args, **kwargs):
            return None   # a redirect is an answer that is not 2xx: not delivered

    data = json.dumps(body).encode("utf-8")
    try:
        request = urllib.request.Request(url, data=data, method="POST", headers={
            "Content-Type": "application/json", "User-Agent": "gpufleet-notify"})
        opener = urllib.request.build_opener(_NoRedirect)
        with opener.open(request, timeout=NOTIFY_TIMEOUT) as answer:
            code = answer.getcode()
    except urllib.error.HTTPError as exc:
        return "HTTP %s" % exc.code
    except urllib.error.URLError as exc:
        # Its reason (refused, no such name), never the URL: that may hold the secret.
        reason = exc.reason
        return "URLError: %s" % (reason.strerror if isinstance(reason, OSError) and
                                 reason.strerror else type(reason).__name__)
    except Exception as exc:  # timed out, a URL that cannot be posted to: tried again later
        return type(exc).__name__
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
    started = time.time()
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
    failing = set()
    for item in due:
        if time.time() - started > NOTIFY_TICK_BUDGET:
            break   # the rest waits for the next tick
        if item["hook"] in failing:
            continue   # a receiver that did not answer is not asked again in this tick
        hook = hooks[item["hook"]]
        error = post(hook["url"], _notify_body(hook, item["event"], host))
        # When it was answered: the backoff counts from then, not from the tick's start.
        answers[_notify_key(item)] = (error, now + (time.time() - started))
        if error is not None:
            failing.add(item["hook"])
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
            error, when = answers.get(key, (False, now))
            if key in answers and error is None:
                state["sent"] = ((state.get("sent") or []) + [key])[-NOTIFY_SENT_KEPT:]
                delivered += 1
                stats["delivered"] = stats.get("delivered", 0) + 1
                stats["last_delivered_at"] = now
                continue
            if key in answers:
                failed += 1
                item["attempts"] = int(item.get("attempts") or 0) + 1
                item["next_at"] = when + min(NOTIFY_BACKOFF_MAX,
                                             5 * 2 ** (item["attempts"] - 1))
                stats["failed"] = stats.get("failed", 0) + 1
                stats["last_error"] = error
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
    for item in state["outbox"][:-NOTIFY_OUTBOX_MAX]:
        # The oldest go when too many wait: counted as dropped.
        stats = state["stats"].setdefault(item.get("hook"), {})
        stats["expired"] = stats.get("expired", 0) + 1
    state["outbox"] = state["outbox"][-NOTIFY_OUTBOX_MAX:]
    return queued


# The parts of the helper sent after this one that act on the tick too (scheduleside's
# schedules): ``{name: (wanted(), tick())}``; the tick runs while one of them wants it.
TICK_PARTS = {}  # type: dict


def tick_wanted():
    """Whether the tick has work here: hooks, or a part that wants it."""
    return bool(notify_hooks()) or any(wanted() for wanted, _tick in TICK_PARTS.values())


def op_tick(payload):
    """A tick, unless another one is under way (then nothing): each part's own (schedules
    first: their times should not wait for slow receivers), then the webhooks' posts; a part
    that fails is said in the answer, and the others go on."""
    import fcntl

    if not os.path.isdir(NOTIFY_ROOT):
        return {"hooks": 0}
    with open(_notify_path("tick.lock"), "a") as handle:
        try:
            fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            return {"busy": True}
        answer = {}
        for name, tick in sorted(TICK_PARTS.items()) + [("notify", (None, notify_tick))]:
            try:
                answer[name] = tick[1]()
            except Exception as exc:  # one part's trouble never stops the others
                answer[name] = {"error": "%s: %s" % (type(exc).__name__, exc)}
        return answer


def _tick_systemd():
    return os.path.isdir(NOTIFY_SYSTEMD) and os.path.exists(_NOTIFY_UNIT + ".timer")


def _tick_alive():
    """How the tick runs here now: ``systemd`` (its timer is active), ``loop`` (the loop
    process noted in tick.pid is alive and is the loop), or None."""
    import subprocess

    if _tick_systemd():
        with open(os.devnull, "w") as null:
            active = subprocess.call(["systemctl", "is-active", "--quiet",
                                      "gpufleet-tick.timer"], stdout=null, stderr=null)
        return "systemd" if active == 0 else None
    try:
        with open(_notify_path("tick.pid")) as handle:
            pid = int(handle.read().strip())
        with open("/proc/%d/cmdline" % pid, "rb") as handle:
            command = handle.read()
    except (IOError, OSError, ValueError):
        return None
    # A pid noted before the host restarted may be another process's now.
    return "loop" if _notify_path("tick.py").encode() in command else None


def _tick_pin():
    """Keep the helper this request runs (its compiled code in bootstrap's cache) for the
    tick: a controller of an earlier version, whose helper has no tick, never replaces it."""
    import shutil
    import sys

    digest = sys.argv[1] if len(sys.argv) > 1 else ""
    tag = getattr(sys.implementation, "cache_tag", None)
    if not tag or len(digest) != 24 or digest.strip("0123456789abcdef"):
        return
    source = os.path.join(NOTIFY_HELPER_CACHE, "%s.%s" % (digest, tag))
    pinned = _notify_path("helper.%s" % tag)
    if os.path.isfile(source) and _notify_read_digest() != digest:
        shutil.copyfile(source, pinned + ".new")
        os.chmod(pinned + ".new", 0o600)
        os.rename(pinned + ".new", pinned)
        with open(_notify_path("helper.digest"), "w") as handle:
            handle.write(digest + "\n")


def _notify_read_digest():
    try:
        with open(_notify_path("helper.digest")) as handle:
            return handle.read().strip()
    except (IOError, OSError):
        return None


def tick_stop():
    """Stop the tick: its systemd timer disabled, or its loop ended."""
    import signal
    import subprocess

    if _tick_systemd():
        with open(os.devnull, "w") as null:
            subprocess.call(["systemctl", "disable", "--now", "gpufleet-tick.timer"],
                            stdout=null, stderr=null)
        return
    if _tick_alive() == "loop":
        with open(_notify_path("tick.pid")) as handle:
            pid = int(handle.read().strip())
        os.killpg(pid, signal.SIGTERM)   # the loop leads its own session and group
    if os.path.exists(_notify_path("tick.pid")):
        os.remove(_notify_path("tick.pid"))


def tick_ensure():
    """Start the tick where it does not run: a systemd timer, else a loop in the background
    (one, also when two requests ask at once). Answers how it runs."""
    import fcntl
    import subprocess
    import sys

    if not os.path.isdir(NOTIFY_ROOT):
        os.makedirs(NOTIFY_ROOT, 0o700)
    _tick_pin()
    alive = _tick_alive()
    if alive:
        return alive
    with open(_notify_path("ensure.lock"), "a") as lock:
        fcntl.flock(lock.fileno(), fcntl.LOCK_EX)
        alive = _tick_alive()
        if alive:
            return alive
        program = _notify_path("tick.py")
        with open(program + ".new", "w") as handle:
            handle.write(NOTIFY_TICK % NOTIFY_ROOT)
        os.chmod(program + ".new", 0o600)
        os.rename(program + ".new", program)
        # The interpreter that runs this request, whose cache tag the pinned helper has.
        command = "%s -S %s" % (sys.executable or "/usr/bin/python3", program)
        if os.path.isdir(NOTIFY_SYSTEMD):
            with open(_NOTIFY_UNIT + ".service", "w") as handle:
                handle.write("[Unit]\nDescription=gpufleet: the host's tick (webhooks, "
                             "schedules)\n\n"
                             "[Service]\nType=oneshot\nExecStart=%s\nTimeoutStartSec=%d\n"
                             "StandardOutput=null\n" % (command, NOTIFY_TICK_BUDGET * 3))
            with open(_NOTIFY_UNIT + ".timer", "w") as handle:
                handle.write("[Unit]\nDescription=gpufleet: the host's tick every %ds"
                             "\n\n[Timer]\nOnBootSec=30\nOnUnitActiveSec=%d\nAccuracySec=1"
                             "\n\n[Install]\nWantedBy=timers.target\n"
                             % (TICK_EVERY, TICK_EVERY))
            for argv in (["systemctl", "daemon-reload"],
                         ["systemctl", "enable", "--now", "gpufleet-tick.timer"]):
                if subprocess.call(argv) != 0:
                    raise Failure("%s failed: the webhooks' tick does not run" % " ".join(argv))
            return "systemd"
        loop = "while :; do %s >/dev/null 2>&1; sleep %d; done" % (command, TICK_EVERY)
        with open(os.devnull, "r+") as null:
            child = subprocess.Popen(["/bin/sh", "-c", loop], stdin=null, stdout=null,
                                     stderr=null, close_fds=True, start_new_session=True,
                                     cwd="/")
        with open(_notify_path("tick.pid"), "w") as handle:
            handle.write("%d\n" % child.pid)
        # Until the child has exec'd the shell its command line is this request's, and a
        # request that asked now would start a second loop: hold the lock until it shows.
        for _attempt in range(200):
            if _tick_alive() or child.poll() is not None:
                break
            time.sleep(0.01)
        return "loop"


_NOTIFY_STATUS_BEFORE = BOOK_OPS["status"]


def op_status_notify(payload):
    """The host's status; a host whose tick has work (hooks, schedules) gets it back when it
    stopped (a node that restarted)."""
    answer = _NOTIFY_STATUS_BEFORE(payload)
    if tick_wanted():
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
