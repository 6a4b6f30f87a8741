# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Webhooks (``gpufleet notify``): the hook a user adds, checked, and how it may be shown.

A hook is an id, an http(s) URL, the event kinds it wants (events.records.EventKind; none: all
of them), a fleet (none: every fleet it was added to) and a body format: ``json`` (the event's
fields) or ``slack`` (an incoming webhook's ``{"text": ...}``). The hosts of the fleets keep
it and post to it (tasks.hostside.notifyside); the controller keeps the URL in its secrets
store, as ``GPUFLEET_NOTIFY_<ID>``, because a webhook's URL is its credential. Nothing but the
scheme and host of a URL is ever shown (``shown_url``).
"""

from __future__ import annotations

import re
from typing import Any, Dict, List, Optional, Sequence
from urllib.parse import urlsplit

from ..core.errors import GpufleetError
from ..core.text import shorten
from ..events.records import EventKind

FORMATS = ("json", "slack")
# The kinds a hook may ask for: what the hosts record or are sent, a run's end (run.status)
# included: the host of a run's only job says it, and for a multi-node run its job 0's host.
HOOK_KINDS = tuple(sorted(k.value for k in EventKind.host_kinds() | EventKind.sent_kinds()))
_ID = re.compile(r"[a-z0-9][a-z0-9-]{0,39}\Z")


class WebhookError(GpufleetError):
    """A hook that cannot be added: the message names the option and what to give."""


def shown_url(url: str) -> str:
    """``https://hooks.slack.com/...``: the scheme and host only (a path or query may hold
    the credential; user and password are never shown)."""
    try:
        parts = urlsplit(str(url))
        port = parts.port
    except ValueError:
        return "(a URL that cannot be read)"
    host = parts.hostname or "?"
    if port:
        host = "%s:%d" % (host, port)
    return "%s://%s/..." % (parts.scheme or "?", host)


def check_url(url: Any) -> str:
    text = str(url or "").strip()
    try:
        parts = urlsplit(text)
        parts.port   # a port that is not a number raises here
    except ValueError:
        parts = None
    if parts is None or parts.scheme not in ("http", "https") or not parts.hostname:
        raise WebhookError("URL %s: give an http:// or https:// URL with a host, such as "
                           "https://hooks.slack.com/services/..." % shown_url(text))
    if any(c.isspace() for c in text):
        raise WebhookError("URL %s: a URL has no spaces" % shown_url(text))
    if any(ord(c) < 33 or ord(c) > 126 for c in text):
        raise WebhookError("URL %s: write it in printable ASCII (percent-encode the rest)"
                           % shown_url(text))
    if parts.username is not None or parts.password is not None:
        raise WebhookError("URL %s: a user and password in the URL cannot be posted with; "
                           "put the credential in its path or query, as Slack's webhooks do"
                           % shown_url(text))
    return text


def check_kinds(kinds: Optional[Sequence[str]]) -> List[str]:
    found = []
    for kind in kinds or []:
        if kind not in HOOK_KINDS:
            raise WebhookError("--on %s: the events a hook can be sent are %s"
                               % (shorten(str(kind)), ", ".join(HOOK_KINDS)))
        if kind not in found:
            found.append(kind)
    return found


def check_id(hook_id: Any, option: str = "--name") -> str:
    text = str(hook_id or "")
    if not _ID.match(text):
        raise WebhookError("%s %s: use lowercase letters, digits and -, at most 40, "
                           "starting with a letter or digit" % (option, shorten(text)))
    return text


def make_hook(url: Any, kinds: Optional[Sequence[str]] = None, fleet: Optional[str] = None,
              body: str = "json", hook_id: Optional[str] = None, by: Optional[str] = None,
              made_id: Optional[str] = None) -> Dict[str, Any]:
    """A checked hook; ``made_id`` is the id used when none is given."""
    if body not in FORMATS:
        raise WebhookError("--format %s: give json or slack" % shorten(str(body)))
    return {"id": check_id(hook_id or made_id), "url": check_url(url),
            "on": check_kinds(kinds), "fleet": fleet or None, "format": body, "by": by}


def secret_name(hook_id: str) -> str:
    """The name the controller's secrets store keeps the hook's URL under."""
    return "GPUFLEET_NOTIFY_" + check_id(hook_id).upper().replace("-", "_")


def public(hook: Dict[str, Any]) -> Dict[str, Any]:
    """A hook as it may be shown: its URL cut to scheme and host."""
    shown = dict((k, v) for k, v in hook.items() if k != "url")
    shown["url"] = shown_url(hook.get("url") or "")
    return shown
