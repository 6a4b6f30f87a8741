#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: fleet_members
short_description: List, grant, revoke and limit the members of a fleet
version_added: 0.1.0
description:
  - A fleet's members live on its hosts, in a document every host keeps (there is no server).
    The fleet's creator is its first admin; admins grant other people access with their SSH
    public key, take it away again, and set per-user limits.
  - The fleet is found by its name as C(gpufleet fleet delete NAME) finds it, from the file this
    controller applied it from, else from the backends' labels and tags.
  - A grant puts the member's key into the fleet login user's C(authorized_keys) on every host,
    and a revoke takes exactly that line out again, so the member's next SSH connection is
    refused by the hosts themselves. Hosts made later get the document when the fleet is applied.
  - Each change is checked against the document before any host is written (an unknown or
    revoked member, a key file that is not a public key, a limit below zero, a change by someone
    who is not an admin), and each host checks again that its author is an admin.
  - Changes from several controllers at once end in one state on every host (the newest change
    of each entry wins).
  - A member's service token (the Bearer of the fleet's services) reaches the hosts as its SHA-256
    digest only, in the member's own entry. O(operation=token) publishes the digest of the user
    who runs it (O(by)); the token itself stays in the controller's secrets store.
  - The C(gpufleet fleet grant), C(revoke), C(members) and C(limit) commands run this module, and
    C(gpufleet token --publish) and C(--rotate) run O(operation=token).
author:
  - gpufleet maintainers (@gpufleet)
options:
  fleet:
    description:
      - The fleet's name. Required unless O(operation=ensure), or O(operation=token) with
        O(replaces_sha256).
    type: str
  operation:
    description:
      - V(list) reads the members; V(grant), V(revoke) and V(limit) change them.
      - "V(ensure) gives every host of the fleet record O(record) a members document (what
        C(playbooks/fleet.yml) does after it made or grew a fleet): a copy of the one its other
        hosts hold, else the first one, with O(by) as admin and the fleet's own key."
      - V(token) puts O(token_sha256) in the member entry of O(by) on every host of O(fleet)
        (O(by) must be a member), and with O(replaces_sha256) on every fleet this controller
        reaches whose hosts hold that digest for O(by) (a rotated token).
    type: str
    choices: [list, grant, revoke, limit, ensure, token]
    default: list
  user:
    description:
      - The member to grant, revoke or limit (1 to 32 lowercase letters, digits, C(_) or C(-),
        as a login name).
    type: str
  key:
    description:
      - With O(operation=grant), the member's OpenSSH public key file (such as
        C(~/.ssh/id_ed25519.pub)).
    type: path
  admin:
    description: With O(operation=grant), make the member an admin of the fleet.
    type: bool
    default: false
  default:
    description:
      - With O(operation=limit), set the default limits (those of every member without their
        own) instead of one O(user)'s.
    type: bool
    default: false
  runs:
    description: With O(operation=limit), how many runs the user may have going at once.
    type: int
  gpus:
    description: With O(operation=limit), how many GPUs the user's runs may hold at once.
    type: int
  nodes:
    description: With O(operation=limit), how many nodes the user's runs may hold at once.
    type: int
  token_sha256:
    description:
      - With O(operation=token), the lower-case hex SHA-256 of the member's service token.
    type: str
  replaces_sha256:
    description:
      - With O(operation=token), the digest of the token it replaces; the new digest is then
        published on every fleet whose hosts hold this one for the member.
    type: str
  by:
    description:
      - Who makes the change. Defaults to E(GPUFLEET_USER), else the controller's login name.
    type: str
  record:
    description: With O(operation=ensure), the fleet record (as M(gpufleet.cluster.fleet)
      returns it).
    type: dict
extends_documentation_fragment:
  - gpufleet.cluster.attributes
  - gpufleet.cluster.attributes.action_group
  - gpufleet.cluster.state
  - gpufleet.cluster.state.backend_settings
attributes:
  check_mode:
    support: full
    details:
      - In check mode the document is read and the change checked, but no host is written.
  diff_mode:
    support: none
  idempotent:
    support: partial
    details:
      - A grant of the same key and role, or the same limits, again changes nothing.
      - A revoke of a member who is no longer one fails, naming who revoked them and when.
seealso:
  - module: gpufleet.cluster.fleet
"""

EXAMPLES = r"""
- name: Let bob use the fleet
  gpufleet.cluster.fleet_members:
    fleet: my-fleet
    operation: grant
    user: bob
    key: /path/to/bob.pub
  delegate_to: localhost

- name: At most two runs for bob at once
  gpufleet.cluster.fleet_members:
    fleet: my-fleet
    operation: limit
    user: bob
    runs: 2
  delegate_to: localhost

- name: List the members
  gpufleet.cluster.fleet_members:
    fleet: my-fleet
  delegate_to: localhost
  register: team

- name: Take bob out again
  gpufleet.cluster.fleet_members:
    fleet: my-fleet
    operation: revoke
    user: bob
  delegate_to: localhost
"""

RETURN = r"""
fleet:
  description: The fleet's name.
  returned: always
  type: str
members:
  description:
    - One entry per member, admins first, with C(user), C(role) (V(admin) or V(member)),
      C(fingerprint) (of their key), C(limits) (C(runs), C(gpus), C(nodes) that hold for them;
      null is no limit) and C(by) (who granted them). After a change, the members as the hosts
      hold them.
  returned: when O(operation) is not V(ensure)
  type: list
  elements: dict
default_limits:
  description: The default limits, C(runs), C(gpus) and C(nodes) (null is no limit).
  returned: when O(operation=list)
  type: dict
doc:
  description: The members document, merged from what every host holds (null when none has one).
  returned: when O(operation=list)
  type: dict
unread:
  description:
    - The hosts that could not be read, with why. With O(operation=token), the fleets (or
      C(fleet/host)) that did not take the new digest, with why.
  returned: when O(operation) is V(list), V(ensure) or V(token)
  type: dict
change:
  description: The change made (C(kind), C(user), C(by), C(stamp) and what it sets).
  returned: when O(operation) is V(grant), V(revoke) or V(limit)
  type: dict
made:
  description: Whether the first document was made (no host held one).
  returned: when O(operation=ensure)
  type: bool
synced:
  description: The hosts that were given the document (or the entries they lacked).
  returned: when O(operation=ensure)
  type: list
  elements: str
user:
  description: The member whose token digest was published.
  returned: when O(operation=token)
  type: str
published:
  description: The fleets whose hosts hold the new token digest now.
  returned: when O(operation=token)
  type: list
  elements: str
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.gpufleet.cluster.plugins.module_utils.core.module import (
    fail_json_on_error,
)
from ansible_collections.gpufleet.cluster.plugins.module_utils.tasks import membership, surveys


def main():
    module = AnsibleModule(argument_spec=membership.FLEET_MEMBERS_ARGS, supports_check_mode=True)
    with fail_json_on_error(module):
        module.exit_json(**membership.run(module.params, check_mode=module.check_mode,
                                          collect=surveys.collect_fleets))


if __name__ == "__main__":
    main()
