#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: task
short_description: Run a dstack task across a fleet, one container per node, as dstack does
version_added: 0.1.0
description:
  - "Places a dstack C(type: task) configuration on a fleet (the fleets named in its C(fleets),
    else any fleet whose hosts match its C(resources); C(nodes >= 2) needs a C(placement: cluster)
    fleet and whole hosts) and starts one container per node with dstack's C(DSTACK_*)
    variables, C(/dstack/profile), the MPI hostfile C(/dstack/mpi/hostfile) and SSH between the
    containers on port 10022."
  - Honours C(startup_order), C(stop_criteria), C(retry), C(max_duration), C(stop_duration),
    C(volumes), C(files), C(env) with C(${{ secrets.NAME }}) and C(registry_auth). When one node
    fails, every other node's container is stopped and the run fails naming that node and its
    exit code, unless C(retry) resubmits all nodes.
  - With O(wait) (the default) the module returns when the run has ended; otherwise as soon as
    every container is started.
  - The image is kept when a host has it, else pulled there, else pushed from the controller
    (C(docker save) and C(docker load) over SSH) for hosts that cannot reach a registry.
  - Through its action plugin, each node's status changes (and with O(logs), every log line
    prefixed with the run and rank) are shown while the run goes on.
author:
  - gpufleet maintainers (@gpufleet)
options:
  path:
    description:
      - "A dstack task file (C(type: task)) on the controller."
      - Exactly one of O(path) and O(config) must be given.
    type: path
  config:
    description:
      - The task configuration itself, as the mapping a dstack file holds.
      - Exactly one of O(path) and O(config) must be given.
    type: dict
  name:
    description:
      - The run's name, instead of the task's C(name) (C(dstack apply --name)). Without either,
        the run gets a random name.
    type: str
  env:
    description:
      - Environment variables over the task's C(env) (C(dstack apply --env)), as C(NAME=value)
        strings or a mapping. A bare C(NAME) (or a null value) takes the value the variable has
        where the task is submitted.
    type: raw
  fleet_names:
    description:
      - The fleets the run may use, instead of the task's C(fleets) (C(dstack apply --fleet)),
        as fleet names or C(project/name).
    type: list
    elements: str
    default: []
  array:
    description:
      - Submit a job array, written as Slurm does (C(1-100), C(1,3,5-7), C(0-15:4)), with
        C(%N) for at most N runs alive at a time. Each index runs as its own run
        C(<name>-<index>) with C(GPUFLEET_ARRAY_INDEX), C(GPUFLEET_ARRAY_NAME),
        C(GPUFLEET_ARRAY_COUNT), C(GPUFLEET_ARRAY_MIN) and C(GPUFLEET_ARRAY_MAX).
      - With O(wait), returns when every run has ended; otherwise when the last index is
        submitted (with C(%N), that is when all but N have ended). RV(runs) lists the runs.
    type: str
  after:
    description:
      - Runs this run runs after, Slurm's C(--dependency) way. Each item is C(RUN) or
        C(RUN:ok), C(RUN:notok), C(RUN:any) (C(ok) when not given) and names a run, or a job
        array (every run of it).
      - Until each has ended as asked (C(ok) done, C(notok) failed or terminated, C(any) any
        end), the run waits in its fleet's queue as V(pending) with the reason
        V(dependency); once one can no longer end so, it ends V(terminated) with the reason
        V(dependency_failed). The runs may be on other fleets.
      - A run that is on no fleet, the run itself, or one that waits for this run (a cycle)
        is refused.
    type: list
    elements: str
    default: []
  output_path:
    description:
      - A file or FIFO the lines the action plugin would show (with O(logs), the log lines and the jobs' changes) are appended to
        instead. C(gpufleet.runner.run_playbook(output=...)) passes a FIFO here, so that
        ansible-runner, which holds all that a playbook prints until it ends, never holds a
        run's logs.
    type: path
  ide_version:
    description:
      - For a dev environment whose file sets no C(version), the version of the IDE that will
        connect, so that its server is installed before it does. dstack's CLI reads it from
        the submitter's IDE (C(code --version), C(cursor --version), Windsurf's
        C(product.json)); C(gpufleet apply) does the same and passes it here.
      - The file's own C(version) wins. Given for a task, or for a dev environment without
        C(ide), it is an error. Windsurf takes C(version@commit).
    type: str
  secrets:
    description:
      - Values for C(${{ secrets.NAME }}) in the task's C(env) and C(registry_auth), for example
        from Ansible Vault. They reach the containers' environment only, never output, labels
        or logs.
      - Names the task references but this option lacks are taken from the controller's store
        (C(gpufleet secret set), an Ansible Vault file in the state dir), decrypted with the
        play's vault password (through the action plugin only).
    type: dict
    default: {}
  wait:
    description:
      - Follow the run to its end. When false, return once every container is started (the
        run's jobs keep running; see M(gpufleet.cluster.run_info)).
    type: bool
    default: true
  logs:
    description:
      - Show every job's log lines, prefixed C([<run>-<rank>]), while the run goes on (through
        the action plugin only).
    type: bool
    default: false
  show_plan:
    description:
      - Show where the run goes, once it is placed, as the table C(gpufleet apply) shows
        before it submits (the configuration, the fleet and each job's host), through the
        action plugin only. C(gpufleet apply -y) sets it instead of running a planning play
        first.
    type: bool
    default: false
  image_source:
    description:
      - How the image reaches the hosts. V(auto) uses it where present, pulls it elsewhere and
        pushes it from the controller where the pull fails; V(pull) only pulls; V(push) pushes
        from the controller without trying the registry; V(present) requires it on every host.
    type: str
    choices: [auto, pull, push, present]
    default: auto
  run_args:
    description:
      - The values of C(${{ run.args }}) in the task's commands, shell-quoted and joined.
    type: list
    elements: str
    default: []
  poll_interval:
    description:
      - Seconds between two looks at the run's containers while watching it.
    type: float
    default: 1.0
  create:
    description:
      - Whether the run may make a backend fleet grow (up to C(nodes.max), not with
        C(creation_policy=reuse)) when it does not fit the instances the fleet has.
      - The module itself creates nothing. It returns RV(grow) and does not submit, and the
        caller grows the fleet (C(playbooks/task.yml) applies the fleet's file with
        C(playbooks/fleet.yml)) and calls it again with O(create=false).
      - With O(create=false), a run that does not fit waits in the queue or fails for no
        capacity, as its C(retry) says.
    type: bool
    default: true
  user:
    description:
      - Who submits the run. It is kept in the run's records on the hosts (the containers'
        C(gpufleet.user) label, the job folders, the queue entry, the run index), shown by
        C(gpufleet ps) and returned by M(gpufleet.cluster.run_info).
      - Defaults to the controller's user, C(GPUFLEET_USER) (an AWX job template sets it from
        the AWX user), else the login name. A run the queue submits later, by whichever
        controller, keeps its submitter.
      - Not the user the task's commands run as in the container (the task's own C(user)).
    type: str
extends_documentation_fragment:
  - gpufleet.cluster.attributes
  - gpufleet.cluster.attributes.action_group
  - gpufleet.cluster.attributes.action_plugin
  - gpufleet.cluster.run_fleets
  - gpufleet.cluster.state
attributes:
  action:
    support: full
    details:
      - The run is driven from the controller by the action plugin, in its own process; the
        module is never sent.
  check_mode:
    support: full
    details:
      - In check mode the task is placed but nothing is started; RV(plan) gives the fleet and
        the host of each rank.
  diff_mode:
    support: none
  idempotent:
    support: none
    details:
      - Each call submits a new run. A run of the same name that is still going is refused; one
        that has ended is replaced, as C(dstack apply) does.
seealso:
  - module: gpufleet.cluster.run_info
  - module: gpufleet.cluster.run_logs
  - module: gpufleet.cluster.run_stop
  - module: gpufleet.cluster.fleet
"""

EXAMPLES = r"""
- name: Run a distributed task and wait for it
  gpufleet.cluster.task:
    path: "{{ playbook_dir }}/train.dstack.yml"
    secrets:
      HF_TOKEN: "{{ vault_hf_token }}"
  register: run

- name: Start a task and leave it running
  gpufleet.cluster.task:
    config:
      type: task
      name: hello
      nodes: 2
      commands:
        - echo "rank $DSTACK_NODE_RANK of $DSTACK_NODES_NUM, master $DSTACK_MASTER_NODE_IP"
    wait: false
"""

RETURN = r"""
run:
  description: The run's name (the task's C(name), or a random one).
  returned: always
  type: str
  sample: hello
run_id:
  description: The run's id (C(DSTACK_RUN_ID)).
  returned: when submitted
  type: str
user:
  description: Who submitted the run (O(user)).
  returned: when submitted
  type: str
  sample: ann
status:
  description:
    - The run's status, as dstack names them; V(done), V(failed) or V(terminated) once it has
      ended, V(planned) in check mode, V(pending) when it waits in the queue for capacity (see
      M(gpufleet.cluster.run_queue)), for its fleet to grow (RV(grow)), or, with C(schedule),
      for its first time (RV(next_run)).
  returned: always
  type: str
  sample: done
reason:
  description:
    - Why the run ended (V(all_jobs_done), V(job_failed), V(max_duration_exceeded),
      V(terminated_by_user), V(failed_to_start_due_to_no_capacity)); null while it goes on;
      V(waiting_for_schedule) for a task with C(schedule) kept ready on its hosts.
  returned: when submitted, or in check mode when no fleet has room
  type: str
message:
  description: For a run that did not end done, which job ended it and how.
  returned: when submitted, or in check mode when no fleet has room
  type: str
  sample: job 1 on demo-1 exited with code 3
fleet:
  description: The fleet the run was placed on.
  returned: when submitted
  type: str
next_run:
  description:
    - A task with C(schedule), the first time its hosts start it, in seconds since the epoch
      (UTC). The task is kept ready on its hosts and the module returns at once, also with
      O(wait); its hosts start it at each time with no controller on.
  returned: with schedule
  type: int
submissions:
  description: How many times the run was submitted (more than 1 after retries).
  returned: when submitted
  type: int
jobs:
  description: One entry per job (rank), with its host, container, internal IP, status, reason
    and exit code.
  returned: when submitted
  type: list
  elements: dict
  sample:
    - {job_num: 0, host: demo-0, container: hello-0-0, internal_ip: 172.18.0.2,
       status: done, reason: null, exit_code: 0}
runs:
  description:
    - With O(array), one entry per index, with its run name, index, status, reason and
      message. RV(run) is then the array's name and RV(status) V(done) when every run ended
      done.
  returned: with array
  type: list
  elements: dict
  sample:
    - {run: hp-1, index: 1, status: done, reason: all_jobs_done, message: null}
log_tail:
  description: The last lines of rank 0's log, when the run did not end done.
  returned: when the run failed
  type: list
  elements: str
plan:
  description:
    - In check mode, the placement (fleet and one entry per job with its host); null when no
      fleet has room.
    - When the run makes a fleet grow, C(create) says which fleet, by how many instances, at
      what price, and the jobs on instances still to be made have hosts named C(new:<name>).
  returned: in check mode
  type: dict
waits:
  description: In check mode, why no fleet has room now, for a run whose C(retry) lets it wait
    in the queue (then RV(plan) is null).
  returned: in check mode, when the run would wait
  type: str
grow:
  description:
    - The fleet the run needs to grow first (O(create)), with C(fleet), C(file), C(instances)
      (how many more), C(at_least) (the instance count to converge to), C(price), C(backend),
      C(region) and C(made_for) (C(run), the run's name, and C(idle_duration), the limit the
      new instances keep, the shorter of the fleet's and the run's or 5 minutes when neither is
      set), the value the fleet playbook gives M(gpufleet.cluster.fleet) as
      O(gpufleet.cluster.fleet#module:made_for). Nothing was submitted.
  returned: when the run fits only on a grown fleet
  type: dict
queued_on:
  description: The host that keeps the run's queue entry, when it waits in the queue.
  returned: when the run waits in the queue, not waiting for it (O(wait=false))
  type: str
config:
  description: In check mode, the normalized task configuration that would run.
  returned: in check mode, when the task was placed
  type: dict
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.gpufleet.cluster.plugins.module_utils.automation import dependencies
from ansible_collections.gpufleet.cluster.plugins.module_utils.core.module import (
    fail_json_on_error,
)
from ansible_collections.gpufleet.cluster.plugins.module_utils.services import submit
from ansible_collections.gpufleet.cluster.plugins.module_utils.tasks import actions


def main():
    module = AnsibleModule(
        argument_spec=actions.TASK_ARGS,
        mutually_exclusive=actions.TASK_MUTUALLY_EXCLUSIVE,
        required_one_of=actions.TASK_REQUIRED_ONE_OF,
        supports_check_mode=True,
    )
    with fail_json_on_error(module):
        result, failed = actions.submit(module.params, check_mode=module.check_mode,
                                        services=submit.queue_hook, gate=dependencies.gate)
    if failed:
        module.fail_json(msg=actions.failure_summary(result), **result)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
