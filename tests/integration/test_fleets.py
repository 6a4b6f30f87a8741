"""Fleets become inventory, end to end on this machine's Docker engine.

A local fleet comes up through playbooks/fleet.yml and grows; an SSH fleet is then laid over the
same nodes, reached through one of them as the jump host, with one host whose sudo wants a
password, one whose sshd forbids TCP forwarding and one address nothing answers on. Each bad
host gets its own message while the good one becomes ready; ownership markers keep a host in one
fleet; a second apply changes nothing; delete leaves nothing behind.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
from ansible_collections.gpufleet.cluster.plugins.module_utils.backends import local
from ansible_collections.gpufleet.cluster.plugins.module_utils.backends.docker_cli import Docker

from gpufleet._collection import collections_path
from gpufleet.runner import run_playbook

BIN = Path(sys.executable).parent
SUFFIX = uuid.uuid4().hex[:6]
RIG = "rig-" + SUFFIX        # the local fleet
LAB = "lab-" + SUFFIX        # the SSH fleet over the rig's nodes
OTHER = "other-" + SUFFIX    # a second SSH fleet that wants a host of the first
DEAD = "dead-" + SUFFIX      # an SSH fleet whose only host refuses connections
MARKER = "/etc/gpufleet/fleet.json"


@pytest.fixture(scope="module")
def ctl(tmp_path_factory):
    """One controller of the module's tests (they run in order): its state dir, environment
    (ansible and gpufleet pointed at them) and the Docker engine."""
    base = tmp_path_factory.mktemp("fleets")
    state_dir = base / "state"
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("GPUFLEET_STATE_DIR", str(state_dir))
        yield from _controller(base, state_dir)


def _controller(base, state_dir):
    env = dict(
        os.environ,
        ANSIBLE_COLLECTIONS_PATH=str(collections_path()),
        ANSIBLE_NOCOLOR="1",
        ANSIBLE_LOCALHOST_WARNING="0",
        ANSIBLE_INVENTORY_UNPARSED_WARNING="0",
        ANSIBLE_INVENTORY_ENABLED="gpufleet.cluster.fleet,yaml,ini",
    )
    ctl = {"base": base, "state": state_dir, "env": env, "docker": Docker()}
    local.ensure_node_image(ctl["docker"])
    yield ctl
    # Whatever a failed test left behind goes, without asserting anything here.
    for name in (DEAD, OTHER, LAB, RIG):
        path = base / (name + ".dstack.yml")
        if path.exists():
            run_playbook("delete.yml", {"fleet": str(path), "gpufleet_refuse_busy": False})


def write_fleet(ctl, name, text):
    path = ctl["base"] / (name + ".dstack.yml")
    path.write_text(text)
    return str(path)


def apply(path, check=False):
    # Unreachable hosts are given up on after 15 s instead of the default minute.
    result = run_playbook("fleet.yml", {"fleet": path, "gpufleet_connect_timeout": 15},
                          check=check)
    fleets = result.stats.get("gpufleet_fleets") or []
    assert len(fleets) == 1, result.stdout[-4000:]
    return result, fleets[0]


def ansible_playbook(ctl, playbook, path):
    proc = subprocess.run(
        [str(BIN / "ansible-playbook"), str(Path(__file__).parents[2] / "playbooks" / playbook),
         "-e", "fleet=" + path],
        capture_output=True, text=True, env=ctl["env"], check=False, timeout=900,
    )
    assert "Traceback" not in proc.stdout + proc.stderr, proc.stdout + proc.stderr
    return proc


def recap(stdout):
    """{host: {"ok": n, "changed": n, ...}} from ansible-playbook's PLAY RECAP."""
    found = {}
    for line in stdout.split("PLAY RECAP", 1)[-1].splitlines():
        match = re.match(r"^(\S+)\s+:\s+(.*)$", line)
        if match:
            found[match.group(1)] = dict(
                (k, int(v)) for k, v in re.findall(r"(\w+)=(\d+)", match.group(2)))
    return found


def by_name(record):
    return dict((i["name"], i) for i in record["instances"])


def sh(ctl, container, script, user="root"):
    return ctl["docker"].run("exec", "-u", user, container, "sh", "-c", script)


def test_local_fleet_comes_up_with_nodes_reached_over_ssh(ctl):
    path = write_fleet(ctl, RIG, "type: fleet\nname: %s\nnodes: 2\nplacement: cluster\n"
                                 "backends: [local]\n" % RIG)
    planned, record = apply(path, check=True)
    assert planned.ok, planned.stdout[-3000:]
    assert record["plan"]["create"] == [RIG + "-0", RIG + "-1"]
    assert local.list_nodes(ctl["docker"], RIG) == []  # check mode made nothing

    result, record = apply(path)
    assert result.ok, result.stdout[-3000:]
    instances = by_name(record)
    assert sorted(instances) == [RIG + "-0", RIG + "-1"]
    for instance in instances.values():
        assert instance["status"] == "idle", instance
        assert instance["resources"]["cpus"] >= 1
        assert instance["internal_ip"] == instance["hostname"]
    assert "instance=1" in result.stdout and "NAME" in result.stdout
    # Both nodes are on the fleet's one network, labelled with the fleet and instance number.
    nodes = local.list_nodes(ctl["docker"], RIG)
    assert [n["labels"][local.INSTANCE_LABEL] for n in nodes] == ["0", "1"]
    assert all(list(n["networks"]) == ["gpufleet-" + RIG] for n in nodes)
    assert (ctl["state"] / "fleets" / RIG / "id_ed25519").exists()


def test_reapplying_changes_nothing_and_growing_keeps_existing_nodes(ctl):
    path = str(ctl["base"] / (RIG + ".dstack.yml"))
    before = dict((n["name"], n["id"]) for n in local.list_nodes(ctl["docker"], RIG))
    proc = ansible_playbook(ctl, "fleet.yml", path)
    assert proc.returncode == 0, proc.stdout[-3000:]
    counts = recap(proc.stdout)
    assert set(counts) == {"localhost", RIG + "-0", RIG + "-1"}
    assert all(c["changed"] == 0 and c["failed"] == 0 for c in counts.values()), counts

    write_fleet(ctl, RIG, "type: fleet\nname: %s\nnodes: 3\nplacement: cluster\n"
                          "backends: [local]\n" % RIG)
    result, record = apply(path)
    assert result.ok, result.stdout[-3000:]
    assert record["plan"]["create"] == [RIG + "-2"]
    assert record["plan"]["keep"] == [RIG + "-0", RIG + "-1"]
    after = dict((n["name"], n["id"]) for n in local.list_nodes(ctl["docker"], RIG))
    assert all(after[name] == before[name] for name in before)
    assert len(after) == 3


def test_host_roles_say_why_they_skip_and_a_failing_role_fails_its_host(ctl):
    path = str(ctl["base"] / (RIG + ".dstack.yml"))
    # Local nodes have no GPU, no EFA device and no EC2 metadata service: each role applies
    # its detection on the node, records why it does nothing, and the fleet stays ready.
    result = run_playbook("fleet.yml", {"fleet": path, "gpufleet_connect_timeout": 15,
                                        "gpufleet_fleet_roles": ["amd", "efa", "dcgm"]})
    assert result.ok, result.stdout[-3000:]
    record = result.stats["gpufleet_fleets"][0]
    for instance in record["instances"]:
        assert instance["status"] == "idle", instance
        checks = instance["checks"]
        assert sorted(checks) == ["amd", "dcgm", "efa"]
        assert not any(c["applies"] for c in checks.values()), checks
        assert "NVIDIA" in checks["dcgm"]["reason"], checks["dcgm"]
        assert "%s: efa: skipped: " % instance["name"] in result.stdout
    # A role given a value its argument spec refuses fails the host, naming the variable.
    result = run_playbook("fleet.yml", {"fleet": path, "gpufleet_connect_timeout": 15,
                                        "gpufleet_fleet_roles": ["docker"],
                                        "docker_source": "bogus"})
    assert not result.ok
    record = result.stats["gpufleet_fleets"][0]
    for instance in record["instances"]:
        assert instance["status"] == "failed", instance
        assert "docker_source" in instance["error"], instance["error"]
    # Failed hosts lose their cached facts (placement skips them) until an apply passes again.
    assert json.loads((ctl["state"] / "fleets" / RIG / "facts.json").read_text()) == {}
    result, record = apply(path)
    assert result.ok, result.stdout[-3000:]
    assert all(i["status"] == "idle" for i in record["instances"]), record["instances"]
    cached = json.loads((ctl["state"] / "fleets" / RIG / "facts.json").read_text())
    assert sorted(cached) == sorted(i["name"] for i in record["instances"])


def test_inventory_plugin_lists_the_live_nodes(ctl):
    path = str(ctl["base"] / (RIG + ".dstack.yml"))
    proc = subprocess.run([str(BIN / "ansible-inventory"), "-i", path, "--graph"],
                          capture_output=True, text=True, env=ctl["env"], check=True)
    graph = proc.stdout
    group = "fleet_" + RIG.replace("-", "_")
    for expected in ("@gpufleet:", "@%s:" % group, "@backend_local:", "@cluster:"):
        assert expected in graph, graph
    for num in range(3):
        assert "--%s-%d" % (RIG, num) in graph
    ping = subprocess.run([str(BIN / "ansible"), "-i", path, group, "-m", "ansible.builtin.ping"],
                          capture_output=True, text=True, env=ctl["env"], check=False)
    assert ping.returncode == 0, ping.stdout + ping.stderr
    assert ping.stdout.count("SUCCESS") == 3
    hostvars = json.loads(subprocess.run(
        [str(BIN / "ansible-inventory"), "-i", path, "--host", RIG + "-0"],
        capture_output=True, text=True, env=ctl["env"], check=True).stdout)
    assert hostvars["gpufleet_host"]["cpus"] >= 1          # the facts fleet.yml cached
    assert hostvars["gpufleet_placement"] == "cluster"
    assert hostvars["gpufleet_instance_type"] == "container"
    assert hostvars["gpufleet_created"] and hostvars["gpufleet_spot"] is False
    facts = ctl["state"] / "fleets" / RIG / "facts.json"
    assert facts.stat().st_mode & 0o777 == 0o600


SHOW_VARS = """
- name: Apply the fleet
  ansible.builtin.import_playbook: gpufleet.cluster.fleet

- name: Write down the variables each host has in the play
  hosts: gpufleet_apply
  gather_facts: false
  tasks:
    - name: Write the host's variables as JSON
      ansible.builtin.copy:
        content: >-
          {{ dict(show_names | zip(query('ansible.builtin.vars', *show_names))) | to_json }}
        dest: "{{ show_out }}/{{ inventory_hostname }}.json"
        mode: "0600"
      delegate_to: localhost
"""


def test_the_play_gives_its_hosts_the_inventory_plugins_variables(ctl):
    path = str(ctl["base"] / (RIG + ".dstack.yml"))
    from_inventory = {}
    for num in range(3):
        host = "%s-%d" % (RIG, num)
        from_inventory[host] = json.loads(subprocess.run(
            [str(BIN / "ansible-inventory"), "-i", path, "--host", host],
            capture_output=True, text=True, env=ctl["env"], check=True).stdout)
        del from_inventory[host]["gpufleet_host"]  # the cached facts; the play measures its own
    names = sorted(from_inventory[RIG + "-0"])
    assert "gpufleet_price" in names and "ansible_python_interpreter" in names
    out = ctl["base"] / "play-vars"
    out.mkdir()
    playbook = ctl["base"] / "show-vars.yml"
    playbook.write_text(SHOW_VARS)
    proc = subprocess.run(
        [str(BIN / "ansible-playbook"), str(playbook), "-e", "fleet=" + path,
         "-e", json.dumps({"show_names": names, "show_out": str(out),
                           "gpufleet_connect_timeout": 15})],
        capture_output=True, text=True, env=ctl["env"], check=False, timeout=900)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    for host, expected in from_inventory.items():
        assert json.loads((out / (host + ".json")).read_text()) == expected, host


def rig_subnet(ctl):
    """The CIDR of the rig's network: the SSH fleet's ``network`` (nodes also have docker0)."""
    return ctl["docker"].run("network", "inspect", "--format",
                             "{{(index .IPAM.Config 0).Subnet}}", "gpufleet-" + RIG).strip()


def ssh_fleet_text(ctl, name, hosts, jump):
    key = str(ctl["state"] / "fleets" / RIG / "id_ed25519")
    lines = ["type: fleet", "name: " + name, "placement: cluster", "ssh_config:",
             "  user: gpufleet", "  identity_file: " + key, "  network: " + rig_subnet(ctl),
             "  proxy_jump: {hostname: %s, user: gpufleet, identity_file: %s}" % (jump, key),
             "  hosts:"]
    lines += ["    - " + host for host in hosts]
    return "\n".join(lines) + "\n"


def test_ssh_fleet_checks_each_host_and_names_what_is_wrong(ctl):
    rig = by_name({"instances": local.instance_records(
        local.list_nodes(ctl["docker"], RIG), RIG, 1, None)})
    head, sudo_host, nofwd_host = (rig["%s-%d" % (RIG, n)] for n in range(3))
    # One host's sudo wants a password; another's sshd forbids TCP forwarding.
    sh(ctl, sudo_host["container"],
       "echo 'gpufleet ALL=(ALL) ALL' > /etc/sudoers.d/gpufleet; "
       "echo 'gpufleet:secret' | chpasswd")
    sh(ctl, nofwd_host["container"],
       "echo 'AllowTcpForwarding no' > /etc/ssh/sshd_config.d/00-test.conf")
    network = head["hostname"].rsplit(".", 1)[0]
    nobody = network + ".250"  # on the fleet's network, but no node has it
    hosts = [head["hostname"], sudo_host["hostname"], nofwd_host["hostname"], nobody]
    path = write_fleet(ctl, LAB, ssh_fleet_text(ctl, LAB, hosts, head["hostname"]))

    result, record = apply(path)
    assert not result.ok  # the fleet has bad hosts, so the apply fails ...
    instances = by_name(record)
    good = instances[LAB + "-0"]
    assert good["status"] == "idle", good        # ... but the healthy host got through
    assert good["resources"]["internal_ip"] == head["hostname"]

    sudo = instances[LAB + "-1"]
    assert sudo["status"] == "failed"
    assert "passwordless sudo" in sudo["error"] and "gpufleet" in sudo["error"], sudo["error"]
    assert "NOPASSWD" in sudo["error"]

    nofwd = instances[LAB + "-2"]
    assert nofwd["status"] == "failed"
    assert "AllowTcpForwarding yes" in nofwd["error"], nofwd["error"]

    gone = instances[LAB + "-3"]
    assert gone["status"] == "unreachable"
    assert gone["error"].startswith(
        "cannot reach gpufleet@%s:22 through the jump host gpufleet@%s:22: "
        % (nobody, head["hostname"])), gone["error"]
    # An address nothing has on the fleet's network: the jump host cannot open the connection
    # (no route), a definite answer, given at once, not tried again for the whole
    # gpufleet_connect_timeout (that message would say "within 15 s").
    assert "no answer over SSH: " in gone["error"] and " within " not in gone["error"], \
        gone["error"]
    # The run's failure lists every bad host, once each.
    for name in (LAB + "-1", LAB + "-2", LAB + "-3"):
        assert name in result.stdout
    # Only the healthy host was claimed, and it was reached through the jump host.
    marker = json.loads(sh(ctl, head["container"], "cat " + MARKER))
    assert marker["fleet"] == LAB and marker["instance"] == 0
    assert sh(ctl, sudo_host["container"], "test -e %s && echo yes || echo no" % MARKER
              ).strip() == "no"
    via = subprocess.run(
        [str(BIN / "ansible"), "-i", path, LAB + "-0", "-m", "ansible.builtin.command",
         "-a", "printenv SSH_CONNECTION"],
        capture_output=True, text=True, env=ctl["env"], check=False)
    assert via.returncode == 0, via.stdout + via.stderr
    client_ip = via.stdout.split("\n", 1)[1].split()[0]
    assert client_ip == head["hostname"], via.stdout  # the connection came from the jump host


def test_an_ssh_fleet_whose_only_host_refuses_answers_fast_and_is_never_idle(ctl):
    """gpufleet apply of a new SSH fleet whose only host refuses SSH (through the jump host,
    whose proxy ends at once): one try in the plan, its
    answer carried into the apply, the plan saying it cannot read the host, the fleet not
    active; then delete refuses naming the host it cannot check, and --force deletes."""
    rig = by_name({"instances": local.instance_records(
        local.list_nodes(ctl["docker"], RIG), RIG, 1, None)})
    head = rig[RIG + "-0"]
    # A node's address, on a port where nothing listens: refused, through the jump host.
    text = ssh_fleet_text(ctl, DEAD, ["{hostname: %s, port: 2299}" % head["hostname"]],
                          head["hostname"])
    path = write_fleet(ctl, DEAD, text)

    def gpufleet(*args):
        return subprocess.run([str(BIN / "gpufleet")] + list(args), capture_output=True,
                              text=True, stdin=subprocess.DEVNULL, env=ctl["env"],
                              check=False, timeout=900)

    began = time.monotonic()
    applied = gpufleet("apply", "-f", path, "-y")
    took = time.monotonic() - began
    said = applied.stdout + applied.stderr
    assert applied.returncode == 1, said
    # The plan says it cannot read the host (not "keep"), with SSH's answer.
    assert "cannot read %s-0: cannot reach gpufleet@%s:2299" % (DEAD, head["hostname"]) \
        in applied.stdout, said
    assert "keep %s-0" % DEAD not in applied.stdout
    assert "no answer over SSH: " in said and " within " not in said, said
    # The apply took the plan's answer: its preflight of the host never ran.
    assert ("TASK Take the plan's answer for a host it could not reach\n  %s-0: failed: "
            % DEAD) in applied.stderr, said
    # Not active: in the apply's own table, and when the fleet is listed.
    row = [line.split() for line in applied.stdout.splitlines() if line.startswith(DEAD + " ")]
    assert row and "unreachable" in row[0], applied.stdout
    listed = gpufleet("fleet", "--json", "-f", path)
    fleets = dict((f["name"], f) for f in json.loads(listed.stdout))
    assert fleets[DEAD]["status"] == "unreachable", fleets[DEAD]
    print("refused SSH host, gpufleet apply (plan and apply): %.1f s" % took)

    refused = gpufleet("delete", "-y", "-f", path)
    assert refused.returncode == 1, refused.stdout + refused.stderr
    assert ("Failed to delete fleet %s. Cannot tell whether it is in use: %s-0 could not be "
            "checked (" % (DEAD, DEAD)) in refused.stderr, refused.stderr
    assert "unreachable over SSH" in refused.stderr, refused.stderr
    # --force goes past the check: the fleet goes, and the one host, which cannot be reached,
    # is named as still carrying the fleet's marker (exit 1, as for any host not released).
    forced = gpufleet("delete", "-y", "--force", "-f", path)
    said = forced.stdout + forced.stderr
    assert "could not be checked" not in said and "PLAY Delete the fleet" in said, said
    assert "these hosts could not be released" in said and DEAD + "-0" in said, said
    assert not (ctl["state"] / "fleets" / DEAD).exists()


def test_a_host_belongs_to_one_fleet_until_released(ctl):
    rig = by_name({"instances": local.instance_records(
        local.list_nodes(ctl["docker"], RIG), RIG, 1, None)})
    head, sudo_host, nofwd_host = (rig["%s-%d" % (RIG, n)] for n in range(3))
    # Mend the two broken hosts; the unreachable address leaves the file.
    sh(ctl, sudo_host["container"],
       "echo 'gpufleet ALL=(ALL) NOPASSWD:ALL' > /etc/sudoers.d/gpufleet")
    sh(ctl, nofwd_host["container"], "rm /etc/ssh/sshd_config.d/00-test.conf")
    hosts = [head["hostname"], sudo_host["hostname"], nofwd_host["hostname"]]
    lab = write_fleet(ctl, LAB, ssh_fleet_text(ctl, LAB, hosts, head["hostname"]))
    result, record = apply(lab)
    assert result.ok, result.stdout[-3000:]
    assert record["plan"]["create"] == [LAB + "-1", LAB + "-2"]
    assert record["plan"]["keep"] == [LAB + "-0"]

    # A second apply changes nothing, on the hosts or in the fleet.
    proc = ansible_playbook(ctl, "fleet.yml", lab)
    assert proc.returncode == 0, proc.stdout[-3000:]
    assert all(c["changed"] == 0 for c in recap(proc.stdout).values()), recap(proc.stdout)
    # Its first request to each node reached the others where the first apply measured them,
    # so no node was asked again for its peers ...
    peers_task = proc.stdout.split("TASK [Reach every other node of the cluster", 1)[1]
    peers_task = re.split(r"\n(?:TASK|PLAY) \[", peers_task, maxsplit=1)[0]
    assert sorted(re.findall(r"^(\w+): \[([^\]]+)\]", peers_task, re.M)) == [
        ("skipping", LAB + "-%d" % n) for n in range(3)], peers_task
    # ... but once one node cannot reach another, a re-apply does ask, and says which.
    block = ("iptables %s OUTPUT -p tcp -d " + nofwd_host["hostname"]
             + " --dport 22 -j REJECT --reject-with tcp-reset")
    sh(ctl, sudo_host["container"], block % "-I")
    try:
        result, record = apply(lab)
    finally:
        sh(ctl, sudo_host["container"], block % "-D")
    assert not result.ok
    states = by_name(record)
    assert [states[LAB + "-%d" % n]["status"] for n in range(3)] == ["idle", "failed", "idle"]
    assert "cannot reach %s-2 at %s:22 (connection refused)" % (
        LAB, nofwd_host["hostname"]) in states[LAB + "-1"]["error"], states[LAB + "-1"]["error"]

    # Another fleet cannot take a host the first one holds.
    other = write_fleet(ctl, OTHER, ssh_fleet_text(ctl, OTHER, [nofwd_host["hostname"]],
                                                   head["hostname"]))
    result, record = apply(other)
    assert not result.ok
    error = by_name(record)[OTHER + "-0"]["error"]
    assert "already in fleet %s as instance 2" % LAB in error, error

    # Taking the host out of the first fleet's file releases it; then the other fleet gets it.
    write_fleet(ctl, LAB, ssh_fleet_text(ctl, LAB, hosts[:2], head["hostname"]))
    result, record = apply(lab)
    assert result.ok, result.stdout[-3000:]
    assert record["plan"]["release"] == [nofwd_host["hostname"]]
    assert sh(ctl, nofwd_host["container"], "test -e %s && echo yes || echo no" % MARKER
              ).strip() == "no"
    result, record = apply(other)
    assert result.ok, result.stdout[-3000:]
    marker = json.loads(sh(ctl, nofwd_host["container"], "cat " + MARKER))
    assert marker["fleet"] == OTHER


def test_attach_reaches_a_run_on_an_ssh_fleet_through_its_jump_host(ctl, tmp_path):
    """A 2-node run on the SSH fleet (reached through its jump host): gpufleet attach writes the
    jump host, the host and the container hops, and ssh RUN / ssh RUN-1 land in the jobs."""
    from .task_images import ensure_base_image
    from .task_world import CPU

    lab = str(ctl["base"] / (LAB + ".dstack.yml"))
    run = "via-" + SUFFIX
    task = tmp_path / "via.dstack.yml"
    task.write_text("type: task\nname: %s\nimage: %s\nnodes: 2\nfleets: [%s]\n%s"
                    "stop_duration: 1\ncommands: [sleep infinity]\n"
                    % (run, ensure_base_image(ctl["docker"]), LAB, CPU))
    home = tmp_path / "home"
    (home / ".ssh").mkdir(parents=True)
    env = dict(os.environ, HOME=str(home))
    command = [str(BIN / "gpufleet")]
    submitted = subprocess.run(command + ["apply", "-f", str(task), "-y", "-d", "--fleet-file",
                                          lab], capture_output=True, text=True, env=env,
                               timeout=900, check=False)
    assert submitted.returncode == 0, submitted.stdout + submitted.stderr
    attach = subprocess.Popen(command + ["attach", run, "--no-logs", "--fleet-file", lab],
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                              env=env)
    try:
        seen = []
        for line in attach.stdout:
            seen.append(line)
            if "Press Ctrl+C to detach" in line:
                break
        assert "To connect to the run via SSH, use `ssh %s`." % run in "".join(seen), seen
        ours = (ctl["state"] / "ssh" / "config").read_text()
        assert "ProxyJump %s-jump-host" % run in ours, ours
        ssh = ["ssh", "-F", str(home / ".ssh" / "config"), "-o", "BatchMode=yes"]
        for alias, rank in ((run, "0"), (run + "-1", "1")):
            inside = subprocess.run(ssh + [alias, "echo $DSTACK_NODE_RANK"],
                                    capture_output=True, text=True, timeout=120, check=False)
            assert (inside.returncode, inside.stdout.strip()) == (0, rank), inside.stderr
        attach.send_signal(signal.SIGINT)
        assert attach.wait(timeout=120) == 0
    finally:
        if attach.poll() is None:
            attach.kill()
        subprocess.run(command + ["stop", run, "-y", "--fleet-file", lab], env=env,
                       capture_output=True, timeout=600, check=False)
    assert run not in (ctl["state"] / "ssh" / "config").read_text()


def known_key(known_hosts, hostname):
    """The key lines known_hosts holds for ``hostname`` (port 22), without comments."""
    found = subprocess.run(["ssh-keygen", "-F", hostname, "-f", str(known_hosts)],
                           capture_output=True, text=True, check=False)
    return sorted(line for line in found.stdout.splitlines() if not line.startswith("#"))


def regenerate_host_keys(ctl, container):
    """New host keys on a node, served from the next connection on, and its open SSH sessions
    ended (multiplexed masters, Ansible's and the runner's, would go on using the old one)."""
    sh(ctl, container,
       "rm -f /etc/ssh/ssh_host_*; for type in ecdsa ed25519; do "
       "ssh-keygen -q -t $type -N '' -f /etc/ssh/ssh_host_${type}_key; done; "
       # The node's listening sshd (its first process) reloads; its sessions end.
       "test \"$(cat /proc/1/comm)\" = sshd && kill -HUP 1; "
       "pkill -f '^sshd: [^/]' || true")


def test_a_changed_host_key_is_refused_on_every_path_until_accepted(ctl, monkeypatch):
    """TOFU for SSH fleet hosts: the first contact recorded each host's key; once a host has
    another key, every way gpufleet reaches it refuses, with one line that names the host and
    the command that accepts the new key; after that command, the host is reached again."""
    from gpufleet import api
    from ansible_collections.gpufleet.cluster.plugins.module_utils.fleets import state
    from ansible_collections.gpufleet.cluster.plugins.module_utils.tasks import ssh

    rig = by_name({"instances": local.instance_records(
        local.list_nodes(ctl["docker"], RIG), RIG, 1, None)})
    host = rig[RIG + "-1"]            # LAB-1 (LAB-0, the jump host, keeps its key)
    address = host["hostname"]
    lab = str(ctl["base"] / (LAB + ".dstack.yml"))
    known = Path(state.known_hosts_path(str(ctl["state"]), LAB))
    # The applies before recorded the hosts' keys on first contact, each fleet in its own file.
    old = known_key(known, address)
    assert old, known.read_text() if known.exists() else "no %s" % known
    assert known_key(state.known_hosts_path(str(ctl["state"]), OTHER),
                     rig[RIG + "-2"]["hostname"])
    which = "instance %s of fleet %s" % (LAB + "-1", LAB)
    accept = "ssh-keygen -R %s -f %s" % (address, known)

    def refused(text):
        """The one line of a refusal, as each path shows it."""
        assert "the SSH host key of gpufleet@%s:22 (%s) has changed" % (address, which) in text, \
            text[-3000:]
        assert accept in text, text[-3000:]

    env = dict(ctl["env"], ANSIBLE_HOST_KEY_CHECKING="False")   # what ansible-runner sets
    regenerate_host_keys(ctl, host["container"])
    try:
        # The gpufleet command: the apply fails, naming the host; the other host stays ready.
        cli = subprocess.run([str(BIN / "gpufleet"), "apply", "-f", lab, "-y"],
                             capture_output=True, text=True, env=env, stdin=subprocess.DEVNULL,
                             timeout=900, check=False)
        assert cli.returncode != 0, cli.stdout + cli.stderr
        refused(cli.stdout + cli.stderr)
        assert "REMOTE HOST IDENTIFICATION" not in cli.stdout + cli.stderr  # no wall of text

        # gpufleet.api: the error names the host and carries the fleet record.
        with monkeypatch.context() as patch, pytest.raises(api.GpufleetError) as caught:
            patch.setenv("ANSIBLE_HOST_KEY_CHECKING", "False")
            api.apply(lab)
        assert caught.value.host == LAB + "-1"
        refused(caught.value.message)
        states = by_name(caught.value.record)
        assert (states[LAB + "-0"]["status"], states[LAB + "-1"]["status"]) == (
            "idle", "unreachable")

        # The playbook run by plain ansible-playbook, host key checking off in Ansible.
        proc = subprocess.run(
            [str(BIN / "ansible-playbook"), str(Path(__file__).parents[2] / "playbooks" /
                                                "fleet.yml"), "-e", "fleet=" + lab],
            capture_output=True, text=True, env=env, timeout=900, check=False)
        assert proc.returncode != 0
        refused(proc.stdout)

        # Any play over the inventory plugin's hosts: OpenSSH's own refusal.
        adhoc = subprocess.run(
            [str(BIN / "ansible"), "-i", lab, LAB + "-1", "-m", "ansible.builtin.ping"],
            capture_output=True, text=True, env=env, timeout=300, check=False)
        assert adhoc.returncode != 0 and "UNREACHABLE" in adhoc.stdout, adhoc.stdout
        assert "Host key verification failed" in adhoc.stdout, adhoc.stdout

        # The task runner's own SSH: gpufleet ps names the host, and so does a request.
        ps = subprocess.run([str(BIN / "gpufleet"), "ps", "--fleet-file", lab],
                            capture_output=True, text=True, env=env, timeout=300, check=False)
        refused(ps.stderr)
        instance = by_name(caught.value.record)[LAB + "-1"]
        node = ssh.Node(instance, root=str(ctl["state"]))
        with pytest.raises(ssh.NodeError) as failed:
            node.check("true")
        refused(str(failed.value))
        assert known_key(known, address) == old   # nothing was taken over the old key

        # Accepting the new key, as the message says, lets every path through again.
        subprocess.run(accept.split(), check=True, capture_output=True)
        assert node.check("echo reached").strip() == "reached"
        new = known_key(known, address)
        assert new and new != old
        result, record = apply(lab)
        assert result.ok, result.stdout[-3000:]
        assert by_name(record)[LAB + "-1"]["status"] == "idle"
    finally:
        # Later tests reach the host: trust whatever key it has now.
        subprocess.run(["ssh-keygen", "-R", address, "-f", str(known)], capture_output=True,
                       check=False)


def test_delete_leaves_nothing_behind(ctl):
    for name in (OTHER, LAB):
        path = str(ctl["base"] / (name + ".dstack.yml"))
        result = run_playbook("delete.yml", {"fleet": path})
        assert result.ok, result.stdout[-3000:]
    rig = local.instance_records(local.list_nodes(ctl["docker"], RIG), RIG, 1, None)
    for instance in rig:
        assert sh(ctl, instance["container"], "test -e %s && echo yes || echo no" % MARKER
                  ).strip() == "no"

    proc = ansible_playbook(ctl, "delete.yml", str(ctl["base"] / (RIG + ".dstack.yml")))
    assert proc.returncode == 0, proc.stdout[-3000:]
    docker = ctl["docker"]
    label = "label=%s=%s" % (local.FLEET_LABEL, RIG)
    assert docker.run("ps", "-a", "-q", "--filter", label).strip() == ""
    assert docker.run("network", "ls", "-q", "--filter", label).strip() == ""
    assert docker.run("volume", "ls", "-q", "--filter", label).strip() == ""
    assert not (ctl["state"] / "fleets" / RIG).exists()
    # Deleting again is not an error and changes nothing.
    again = run_playbook("delete.yml", {"fleet": str(ctl["base"] / (RIG + ".dstack.yml"))})
    assert again.ok and "nothing to delete" in again.stdout


def test_the_gpufleet_command_plans_asks_applies_lists_and_deletes(ctl):
    name = "cli-" + SUFFIX
    path = write_fleet(ctl, name, "type: fleet\nname: %s\nnodes: 1\nbackends: [local]\n" % name)
    gpufleet = [str(BIN / "gpufleet")]

    def run(*args):
        return subprocess.run(gpufleet + list(args), capture_output=True, text=True,
                              stdin=subprocess.DEVNULL, env=ctl["env"], check=False,
                              timeout=900)

    # No terminal and no -y: the plan is shown, nothing is changed, and it does not wait.
    asked = run("apply", "-f", path)
    assert asked.returncode == 1, asked.stdout + asked.stderr
    assert "create %s-0" % name in asked.stdout
    assert "pass -y" in asked.stderr
    assert local.list_nodes(ctl["docker"], name) == []

    applied = run("apply", "-f", path, "-y")
    assert applied.returncode == 0, applied.stdout + applied.stderr
    assert "TASK Converge the fleet to its file" in applied.stderr  # progress while it runs
    rows = [line.split() for line in applied.stdout.splitlines()]
    assert ["instance=0", "-", "on-demand", "local", "(local)", "$0", "idle"] == rows[-1][:7]

    listed = run("fleet", "--json")
    assert listed.returncode == 0, listed.stderr
    fleets = dict((f["name"], f) for f in json.loads(listed.stdout))
    assert [i["status"] for i in fleets[name]["instances"]] == ["idle"]
    assert fleets[name]["nodes"] == {"min": 1, "target": 1, "max": 1}  # from the labels alone

    deleted = run("delete", "-f", path, "-y")
    assert deleted.returncode == 0, deleted.stdout + deleted.stderr
    assert "Fleet %s deleted." % name in deleted.stdout
    assert local.list_nodes(ctl["docker"], name) == []
