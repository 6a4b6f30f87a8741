# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""A webhook (automation.webhooks): checked, named, and never shown beyond its host."""

from __future__ import annotations

import pytest
from ansible_collections.gpufleet.cluster.plugins.module_utils.automation import webhooks
from ansible_collections.gpufleet.cluster.plugins.module_utils.automation.webhooks import (
    WebhookError,
)

URL = "https://hooks.slack.com/services/T000/B000/XXXXsecretXXXX"


def test_a_hook_is_checked_and_keeps_what_was_asked():
    hook = webhooks.make_hook(URL, ["run.status", "job.ended", "run.status"], "gpus", "slack",
                              None, by="ann", made_id="hook-1a2b3c")
    assert hook == {"id": "hook-1a2b3c", "url": URL, "on": ["run.status", "job.ended"],
                    "fleet": "gpus", "format": "slack", "by": "ann"}
    assert webhooks.public(hook)["url"] == "https://hooks.slack.com/..."
    assert webhooks.secret_name("hook-1a2b3c") == "GPUFLEET_NOTIFY_HOOK_1A2B3C"


@pytest.mark.parametrize("url,said", [
    ("ftp://example.com/x", "give an http:// or https:// URL"),
    ("https:///nohost", "give an http:// or https:// URL"),
    ("http://example.com:port/x", "give an http:// or https:// URL"),
    ("https://example.com/a b", "a URL has no spaces"),
])
def test_a_bad_url_is_named_without_its_secret_part(url, said):
    with pytest.raises(WebhookError, match=said) as info:
        webhooks.make_hook(url, made_id="h")
    assert "/x" not in str(info.value) and "a b" not in str(info.value)


def test_unknown_kinds_formats_and_names_are_refused_by_option():
    with pytest.raises(WebhookError, match="--on run.done: the events a hook can be sent are"):
        webhooks.make_hook(URL, ["run.done"], made_id="h")
    with pytest.raises(WebhookError, match="--format teams: give json or slack"):
        webhooks.make_hook(URL, body="teams", made_id="h")
    with pytest.raises(WebhookError, match="--name Ops_Hook"):
        webhooks.make_hook(URL, hook_id="Ops_Hook")


def test_a_hook_can_ask_for_every_kind_the_hosts_post():
    assert "run.status" in webhooks.HOOK_KINDS and "job.ended" in webhooks.HOOK_KINDS
    assert "run.submitted" not in webhooks.HOOK_KINDS   # derived by readers, not posted
    assert "instance.created" in webhooks.HOOK_KINDS and "member.revoked" in webhooks.HOOK_KINDS


def test_a_url_with_a_user_or_odd_characters_is_refused_without_showing_them():
    with pytest.raises(WebhookError, match="a user and password") as info:
        webhooks.make_hook("https://ann:hunter2@hooks.example/x", made_id="h")
    assert "hunter2" not in str(info.value)
    with pytest.raises(WebhookError, match="printable ASCII"):
        webhooks.make_hook("https://hooks.example/\x7fsecret", made_id="h")
    assert webhooks.shown_url("https://example.com?token=SECRET") == "https://example.com/..."
