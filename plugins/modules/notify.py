#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: notify
short_description: Webhooks the fleets' hosts post their events to
version_added: 0.1.0
description:
  - Adds a webhook to every host of the reachable fleets (or of O(fleet)), removes one, or
    lists them with what each host delivered. What C(gpufleet notify) does.
  - The hosts post the events they record (see M(gpufleet.cluster.event_info)) as JSON, or as
    a Slack incoming webhook's body, from a timer on each host, so deliveries go on with the
    controller switched off. A delivery that fails is tried again, 5, 10, 20 s... later (at
    most 5 minutes apart), for a day; a receiver that does not answer never delays a run.
  - The URL is never shown; answers carry its scheme and host only.
author:
  - gpufleet maintainers (@gpufleet)
options:
  operation:
    description: What to do.
    type: str
    choices: [add, remove, list]
    default: list
  url:
    description:
      - The URL to post to (O(operation=add)), http or https. It is a credential (a Slack
        webhook's path is its secret), so it is never logged or returned.
    type: str
  name:
    description:
      - The hook's name (lowercase letters, digits and -); for O(operation=add), a new name
        is made when none is given; O(operation=remove) needs it.
    type: str
  "on":
    description:
      - The event kinds to post (C(job.ended), C(run.status), C(run.queued),
        C(member.granted)...); all of them when empty.
    type: list
    elements: str
    default: []
  fleet:
    description: Only this fleet's hosts, and only its events.
    type: str
  format:
    description: The body posted; C(json) (the event's fields) or C(slack) (C({"text"})).
    type: str
    choices: [json, slack]
    default: json
extends_documentation_fragment:
  - gpufleet.cluster.attributes
  - gpufleet.cluster.attributes.action_group
  - gpufleet.cluster.run_fleets
  - gpufleet.cluster.state
attributes:
  check_mode:
    support: full
    details:
      - In check mode no host is changed; C(changed) is true for an add or a remove.
  diff_mode:
    support: none
  idempotent:
    support: full
    details:
      - Adding a hook that every host keeps as given changes nothing. A hook added without
        O(name) gets a new name each time.
seealso:
  - module: gpufleet.cluster.event_info
"""

EXAMPLES = r"""
- name: Post every run's end to a Slack channel
  gpufleet.cluster.notify:
    operation: add
    name: runs-to-slack
    url: "{{ slack_webhook_url }}"
    "on": [run.status]
    format: slack

- name: List the hooks and what they delivered
  gpufleet.cluster.notify:
  register: hooks
"""

RETURN = r"""
hook:
  description: The hook added (O(operation=add)), its URL cut to scheme and host.
  returned: when operation is add
  type: dict
  sample: {id: runs-to-slack, url: "https://hooks.slack.com/...", "on": [run.status],
           fleet: null, format: slack, by: ann}
set_on:
  description: The hosts that keep the hook now.
  returned: when operation is add
  type: list
  elements: str
removed_from:
  description: The hosts the hook was removed from.
  returned: when operation is remove
  type: list
  elements: str
hooks:
  description: The hooks the hosts keep (URLs cut to scheme and host), each with C(hosts),
    per host what it C(delivered), C(failed) (attempts), C(expired) (dropped after a day),
    C(waiting) and its C(tick) (C(systemd) or C(loop); null when it does not run).
  returned: when operation is list
  type: list
  elements: dict
unreachable:
  description: Hosts that did not answer, with the error.
  returned: success
  type: dict
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.gpufleet.cluster.plugins.module_utils.automation import webhooks
from ansible_collections.gpufleet.cluster.plugins.module_utils.core.module import (
    fail_json_on_error,
)
from ansible_collections.gpufleet.cluster.plugins.module_utils.tasks import notices


def main():
    module = AnsibleModule(argument_spec=notices.NOTIFY_ARGS, supports_check_mode=True,
                           required_if=[("operation", "add", ("url",)),
                                        ("operation", "remove", ("name",))])
    with fail_json_on_error(module):
        module.exit_json(**notices.notify(module.params, webhooks, module.check_mode))


if __name__ == "__main__":
    main()
