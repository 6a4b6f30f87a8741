#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: preflight
short_description: Check that a host can join an SSH fleet before it does
version_added: 0.1.0
description:
  - Checks, on the managed host, what dstack needs from a host of an SSH fleet and only finds
    out by failing later, and fails with one message that says, for every failed check, what is
    wrong and what to do.
  - "V(sudo): the login user has passwordless sudo (C(sudo -n true)). Without it dstack's setup
    fails with C(sudo: a password is required). Passes at once when the module runs as root."
  - "V(docker): Docker is installed (C(docker) on PATH, in C(/usr/bin) or in C(/usr/local/bin))
    and its engine answers C(docker info). Installed and not running are told apart."
  - "V(nvidia_container_toolkit): on a host with NVIDIA GPUs, Docker has the C(nvidia) runtime or
    C(nvidia-ctk) or C(nvidia-container-cli) is installed. Without the toolkit, containers fail
    with C(could not select device driver). On a host without NVIDIA GPUs the check passes with
    the message C(no NVIDIA GPU); it is always listed."
  - "V(tcp_forwarding): sshd's effective settings (C(sshd -T)) allow local TCP forwarding, which
    dstack's tunnels to the host use: C(AllowTcpForwarding) V(yes), V(all) or V(local),
    C(DisableForwarding) not V(yes) and C(PermitOpen) not V(none). The settings are evaluated for
    the login user and the address the SSH connection comes from (C(SSH_CONNECTION)), so
    C(Match) blocks count; when that fails or there is no SSH connection, the global settings
    are used and the message says so."
  - "V(peers): this host opens a TCP connection to every other node of the fleet (O(peers)), all
    at once, as nodes of a C(placement: cluster) fleet must reach each other."
  - The checks only read. Those that need root (V(docker), V(nvidia_container_toolkit),
    V(tcp_forwarding)) run their commands with C(sudo -n) when the module does not run as root,
    and are V(skipped) when passwordless sudo is missing; V(sudo) is then checked too, whether
    chosen or not, and fails. A skipped check never counts as passed.
  - The checks, their messages and the fleet ownership marker are described in
    C(docs/preflight.md) in the collection.
author:
  - gpufleet maintainers (@gpufleet)
options:
  checks:
    description:
      - The checks to run. They run, and are reported, in the order listed in the choices.
      - By default all of them, except V(peers) when O(peers) is empty.
    type: list
    elements: str
    choices: [sudo, docker, nvidia_container_toolkit, tcp_forwarding, peers]
  gpu_vendor:
    description:
      - The host's GPU vendor, for example the C(gpufleet_host.gpu.vendor) fact of
        M(gpufleet.cluster.host_facts). Only V(nvidia) needs the NVIDIA Container Toolkit.
      - By default the vendor is judged from device paths the way dstack does
        (C(/dev/nvidiactl) means NVIDIA GPUs). V(none) turns the toolkit check into a pass.
    type: str
    choices: [nvidia, amd, intel, tenstorrent, none]
  peers:
    description:
      - "The other nodes of the fleet, which this host must reach when the fleet has
        C(placement: cluster)."
      - Giving peers adds V(peers) to the default checks.
      - When O(checks) is given and leaves V(peers) out, the peers are still tried and
        reported in RV(peers), but not judged (P(gpufleet.cluster.peers_reached#filter) can
        tell later whether they were all reached).
    type: list
    elements: dict
    default: []
    suboptions:
      name:
        description:
          - The node's name in messages, for example its inventory host name. The address when
            not given.
        type: str
      address:
        description: The node's internal IP address (or a host name this host resolves).
        type: str
        required: true
      port:
        description: The TCP port to connect to, usually the node's SSH port.
        type: int
        default: 22
  self_name:
    description:
      - The O(peers[].name) of this host. That entry is left out, so the same O(peers) list can
        be passed to every host.
    type: str
  connect_timeout:
    description:
      - Seconds to keep trying to reach the host before the checks run, trying again every
        second, for a host just made whose sshd may not answer yet. A try fails, and is made
        again, when the SSH connection fails (refused, timed out, authentication) or no
        temporary directory can be made for the module (a login user not set up yet). The
        checks run in the same request as the first successful connection.
      - Unlike M(ansible.builtin.wait_for_connection), a host that answers but cannot run the
        module (no Python) fails at once.
      - A host still unreachable when the time is up B(fails) (it is not marked unreachable),
        with RV(reached) false and the last connection error in RV(msg), so that a block's
        C(rescue) can report it.
      - V(0) tries once; an unreachable host is then unreachable as for any module.
      - Handled by the module's action plugin, on the controller.
    type: float
    default: 0
  retry_definite:
    description:
      - With O(connect_timeout), whether a definite answer (connection refused, no route to the
        host, a name that does not resolve, the key refused, a changed host key) is tried again
        until the time is up, as for a host just made whose sshd is not up yet.
      - V(false) (an SSH fleet's hosts, which exist already) fails such a host at once, with
        RV(reached) false and the answer in RV(msg); only a host that does not answer in time
        is waited for.
      - Handled by the module's action plugin, on the controller.
    type: bool
    default: true
  peer_timeout:
    description:
      - Seconds to wait for each connection to a peer. The peers are tried at the same time,
        so the check takes about this long at most, however many peers there are.
    type: float
    default: 5
extends_documentation_fragment:
  - gpufleet.cluster.attributes
  - gpufleet.cluster.attributes.info_module
  - gpufleet.cluster.attributes.action_group
  - gpufleet.cluster.attributes.action_plugin
attributes:
  action:
    support: full
    details:
      - The action plugin tries the host until O(connect_timeout) and then runs the module
        on it.
  platform:
    description: The target systems the module runs on.
    support: full
    platforms: posix
notes:
  - Run it B(without) C(become), as the login user dstack uses, so the V(sudo) check checks that
    user and C(SSH_CONNECTION) is seen; the module calls C(sudo -n) itself where it needs root.
  - A host that dstack will adopt is reached over SSH, so C(sshd) is on it; when it cannot be
    found at C(/usr/sbin/sshd), C(/usr/local/sbin/sshd) or on PATH the V(tcp_forwarding) check
    fails (leave it out of O(checks) for a host running another SSH server).
seealso:
  - module: gpufleet.cluster.host_facts
  - module: gpufleet.cluster.fleet_marker
"""

EXAMPLES = r"""
- name: Check every host of an SSH fleet before adopting it
  gpufleet.cluster.preflight:

- name: Check a cluster fleet, nodes reaching each other on their internal IPs
  gpufleet.cluster.preflight:
    gpu_vendor: "{{ gpufleet_host.gpu.vendor }}"
    peers:
      - {name: node-0, address: 10.0.0.5}
      - {name: node-1, address: 10.0.0.6}
      - {name: node-2, address: 10.0.0.7, port: 2222}
    self_name: "{{ inventory_hostname }}"
    peer_timeout: 3

- name: Only check sshd and Docker, and keep going to report every host
  gpufleet.cluster.preflight:
    checks: [docker, tcp_forwarding]
  register: preflight
  ignore_errors: true

- name: Show what failed
  ansible.builtin.debug:
    msg: "{{ preflight.checks | rejectattr('status', 'equalto', 'ok') | list }}"
"""

RETURN = r"""
ok:
  description: Whether every check that ran passed.
  returned: always
  type: bool
  sample: false
checks:
  description:
    - One entry per check that ran, in the order of the O(checks) choices.
    - C(status) is V(ok), V(failed) or V(skipped) (a check that needs sudo when sudo failed).
  returned: always
  type: list
  elements: dict
  sample:
    - name: sudo
      status: ok
      message: ubuntu has passwordless sudo
    - name: docker
      status: ok
      message: "Docker 27.5.1 is running (runtimes: io.containerd.runc.v2, nvidia, runc)"
    - name: nvidia_container_toolkit
      status: ok
      message: Docker has the nvidia runtime
    - name: tcp_forwarding
      status: failed
      message: >-
        sshd does not allow TCP forwarding (AllowTcpForwarding no, for user ubuntu connecting
        from 10.0.0.1), and dstack reaches the host through SSH local port forwarding: set
        `AllowTcpForwarding yes` in /etc/ssh/sshd_config (or in the Match block that applies to
        ubuntu), then reload sshd (sudo systemctl reload ssh, or sshd on RHEL-like systems)
  contains:
    name:
      description: The check.
      type: str
    status:
      description: V(ok), V(failed) or V(skipped).
      type: str
    message:
      description: What was found and, on failure, what to do.
      type: str
docker:
  description:
    - The running Docker engine (C(version), C(runtimes), C(default_runtime), C(root_dir));
      null when the V(docker) check did not run or failed.
  returned: always
  type: dict
  sample:
    version: 27.5.1
    runtimes: [io.containerd.runc.v2, nvidia, runc]
    default_runtime: runc
    root_dir: /var/lib/docker
peers:
  description:
    - Every peer tried (C(name), C(address), C(port)), whether it was C(reachable) and the
      C(error) when not. Empty when no peers were given.
  returned: always
  type: list
  elements: dict
  sample:
    - {name: node-1, address: 10.0.0.6, port: 22, reachable: true, error: null}
    - {name: node-2, address: 10.0.0.7, port: 22, reachable: false, error: timed out after 5 s}
reached:
  description:
    - Whether the host was reached. V(false) only with O(connect_timeout), when the host did
      not answer in time; nothing was checked then.
  returned: always
  type: bool
  sample: true
msg:
  description:
    - On failure, C(preflight failed:) and the messages of the failed checks, or why the host
      was not reached.
  returned: failure
  type: str
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.gpufleet.cluster.plugins.module_utils.core.module import (
    fail_json_on_error,
)
from ansible_collections.gpufleet.cluster.plugins.module_utils.hosts.preflight import (
    CHECKS,
    DEFAULT_PEER_PORT,
    DEFAULT_PEER_TIMEOUT,
    GPU_VENDORS,
    Host,
    failure_message,
    run_preflight,
)


def main():
    module = AnsibleModule(
        argument_spec=dict(
            checks=dict(type="list", elements="str", choices=list(CHECKS)),
            gpu_vendor=dict(type="str", choices=list(GPU_VENDORS)),
            peers=dict(
                type="list",
                elements="dict",
                default=[],
                options=dict(
                    name=dict(type="str"),
                    address=dict(type="str", required=True),
                    port=dict(type="int", default=DEFAULT_PEER_PORT),
                ),
            ),
            self_name=dict(type="str"),
            peer_timeout=dict(type="float", default=DEFAULT_PEER_TIMEOUT),
            # Handled by the action plugin (plugins/action/preflight.py), which does not pass
            # it on; accepted here so that the module's options are the documented ones.
            connect_timeout=dict(type="float", default=0),
            retry_definite=dict(type="bool", default=True),
        ),
        supports_check_mode=True,
    )
    host = Host(run=module.run_command, which=module.get_bin_path)
    # The preflight code raises only PreflightError; anything else is a bug in it.
    with fail_json_on_error(module, what="gpufleet preflight"):
        result = run_preflight(
            host,
            checks=module.params["checks"],
            peers=module.params["peers"],
            self_name=module.params["self_name"],
            gpu_vendor=module.params["gpu_vendor"],
            peer_timeout=module.params["peer_timeout"],
        )

    message = failure_message(result)
    if message:
        module.fail_json(msg=message, changed=False, **result)
    module.exit_json(changed=False, **result)


if __name__ == "__main__":
    main()
