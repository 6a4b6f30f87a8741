# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The task's ``show_plan`` (what ``gpufleet apply -y`` asks for instead of a planning play):
the runner's one ``plan`` event once submission 0 is placed, the action printer's rendering of
it, the option in the module's spec and docs; and the run's SSH key, made early and at
dstack's size.

The Runner runs over the fake hosts of fakes.py (the ``fake_hosts`` fixture of conftest.py).
"""

from __future__ import annotations

import ast
import re
import shutil
import subprocess
import sys
import threading
from pathlib import Path

import pytest
import yaml
from ansible_collections.gpufleet.cluster.plugins.module_utils.render import run_table
from ansible_collections.gpufleet.cluster.plugins.module_utils.spec import parse_data
from ansible_collections.gpufleet.cluster.plugins.module_utils.tasks import actions, growth, runs, surveys
from ansible_collections.gpufleet.cluster.plugins.module_utils.tasks import run_preparation
from ansible_collections.gpufleet.cluster.plugins.module_utils.tasks import lifecycle as lc
from ansible_collections.gpufleet.cluster.plugins.plugin_utils import run_output

from ..configs import task
from .fakes import backend_fleet, facts_of, fleet_with_facts

# New local nodes have a fixed 8-CPU fact here (conftest.py).
pytestmark = pytest.mark.usefixtures("eight_cpu_local_machine")

ROOT = Path(__file__).resolve().parents[3]


def plan_events(cluster):
    return [e for _t, e in cluster.events if e["kind"] == "plan"]


def a_plan():
    """A placement as tasks.placement makes one (two jobs on two hosts)."""
    job = {"backend": "ssh", "region": "remote", "price": None, "blocks": 1, "total_blocks": 1,
           "cpus": 8, "memory_mib": 32768, "disk_mib": 204800, "gpu_vendor": None,
           "gpu_name": None, "gpu_memory_mib": 0, "gpus": []}
    return {"fleet": "gpus", "jobs": [dict(job, job_num=n, host="gpus-%d" % n)
                                      for n in range(2)]}


# ---------------------------------------------------------------------------------------------
# (a) the action printer: a plan event is the plan table and a blank line


def test_the_printer_writes_a_plan_event_as_the_table_then_a_blank_line(tmp_path):
    target = tmp_path / "output"
    config = task(nodes=2)
    emit = run_output.printer(str(target), "/w/task.dstack.yml")
    emit({"kind": "plan", "run": "train", "plan": a_plan(), "config": config})
    lines = run_table.run_plan_lines(config, a_plan(), "/w/task.dstack.yml")
    assert lines[0] == "Configuration  /w/task.dstack.yml"   # the printer's source
    assert target.read_text() == "\n".join(lines) + "\n\n"


def test_the_printer_without_a_source_leaves_the_configuration_out(tmp_path):
    """A task given as ``config`` (no ``path``): no file to name."""
    target = tmp_path / "output"
    config = task(nodes=2)
    run_output.printer(str(target))({"kind": "plan", "plan": a_plan(), "config": config})
    lines = run_table.run_plan_lines(config, a_plan(), None)
    assert not any(line.startswith("Configuration") for line in lines)
    assert target.read_text() == "\n".join(lines) + "\n\n"


def test_the_printer_still_writes_every_other_event_as_its_lines(tmp_path):
    target = tmp_path / "output"
    emit = run_output.printer(str(target), "/w/task.dstack.yml")
    events = [
        {"kind": "job", "run": "train", "job_num": 0, "host": "gpus-0", "status": "running",
         "reason": None, "exit_code": None},
        {"kind": "log", "run": "train", "rank": 1, "lines": ["a", "b"]},
        {"kind": "info", "run": "train", "message": "hello"},
        {"kind": "something-new", "run": "train"},   # no line: nothing written
        {"kind": "run", "run": "train", "status": "done"},
    ]
    for event in events:
        emit(event)
    expected = [actions.event_line(e) for e in events if actions.event_line(e) is not None]
    assert len(expected) == 4
    assert "[train-1] a\n[train-1] b" in expected
    assert target.read_text() == "".join(line + "\n" for line in expected)


def test_the_printer_shows_a_plan_in_one_display_call(monkeypatch):
    """One call: ansible-runner hands one display call over as one event (its lines joined by
    the pty's CRLF), so the table's inner blank line is not an event of its own, dropped."""
    shown = []
    from ansible.utils.display import Display

    # Display is one object per process: the printer's is this one.
    monkeypatch.setattr(Display(), "display", lambda msg, **kw: shown.append(msg))
    config = task(nodes=2)
    emit = run_output.printer(None, "/w/task.dstack.yml")
    emit({"kind": "plan", "plan": a_plan(), "config": config})
    emit({"kind": "log", "run": "train", "rank": 0, "lines": ["step 1"]})
    lines = run_table.run_plan_lines(config, a_plan(), "/w/task.dstack.yml")
    assert shown == ["\n".join(lines) + "\n", "[train-0] step 1"]


def test_event_line_leaves_the_plan_to_the_printer():
    assert actions.event_line({"kind": "plan", "run": "train", "plan": a_plan(),
                               "config": task()}) is None


# ---------------------------------------------------------------------------------------------
# (b) the Runner: one plan event, for submission 0, once it is placed


def test_a_runner_announcing_its_plan_emits_it_once_placed_before_the_runs_lines(fake_hosts):
    config = task(nodes=2)
    runner, cluster = fake_hosts(config, [fleet_with_facts()], program=lambda job: (1, 0))
    runner.announce_plan = True
    assert runner.run()["status"] == lc.RunStatus.DONE
    (event,) = plan_events(cluster)
    assert event["run"] == "train"
    assert event["plan"] == runner.submissions[0].placement
    assert sorted(j["host"] for j in event["plan"]["jobs"]) == ["gpus-0", "gpus-1"]
    assert event["config"] is config
    kinds = [e["kind"] for _t, e in cluster.events]
    assert kinds.index("plan") < kinds.index("job")   # before the first "pulling"


def test_a_runner_not_announcing_emits_no_plan(fake_hosts):
    runner, cluster = fake_hosts(task(), [fleet_with_facts(count=1)], program=lambda job: (1, 0))
    assert runner.announce_plan is False   # the default
    assert runner.run()["status"] == lc.RunStatus.DONE
    assert plan_events(cluster) == []
    assert cluster.events   # the run did say things


def test_a_resubmission_announces_no_plan(fake_hosts):
    config = task(retry={"on_events": ["error"], "duration": "1h"})
    runner, cluster = fake_hosts(config, [fleet_with_facts(count=1)],
                                 lambda job: (1, 3) if job["submission"] == 0 else (1, 0))
    runner.announce_plan = True
    result = runner.run()
    assert (result["status"], result["submissions"]) == (lc.RunStatus.DONE, 2)
    (event,) = plan_events(cluster)
    assert event["plan"] == runner.submissions[0].placement


def test_a_run_that_finds_no_room_announces_no_plan(fake_hosts):
    runner, cluster = fake_hosts(task(resources={"cpu": 64}), [fleet_with_facts()])
    runner.announce_plan = True
    result = runner.run()
    assert (result["status"], result["reason"]) == (lc.RunStatus.FAILED, lc.NO_CAPACITY)
    assert plan_events(cluster) == []


def test_a_dev_environment_announces_its_own_config_not_the_task_it_runs_as(fake_hosts):
    config, _warnings = parse_data({"type": "dev-environment", "name": "dev", "ide": "vscode"})
    runner, cluster = fake_hosts(config, [fleet_with_facts(count=1)])
    runner.announce_plan = True
    runner.submit(0)
    (event,) = plan_events(cluster)
    assert event["config"] is config and event["config"]["type"] == "dev-environment"
    assert runner.config["type"] == "task"
    assert run_table.run_plan_lines(event["config"], event["plan"])[0] == (
        "Type                 dev-environment")


def test_the_plan_names_a_service_by_its_type_as_dstack_does():
    """dstack's run plan adds the node count to a task's type only."""
    config, _warnings = parse_data({"type": "service", "port": 8000, "image": "nginx"})
    lines = run_table.run_plan_lines(config, a_plan(), "/w/svc.dstack.yml")
    assert "Type           service" in lines
    assert run_table.run_plan_lines(task(nodes=2), a_plan(), None)[0].endswith("task (nodes=2)")


def test_a_run_the_playbook_grows_the_fleet_for_announces_the_plan_on_the_grown_fleet(
        fake_hosts):
    """No grower here (the first submission of task.yml): NeedsInstances goes up to the
    playbook, which grows the fleet; the plan says so (new instances, Creates)."""
    empty = backend_fleet(count=0)
    runner, cluster = fake_hosts(task(nodes=2), [empty])
    runner.create = True
    runner.announce_plan = True
    with pytest.raises(runs.NeedsInstances) as info:
        runner.run()
    (event,) = plan_events(cluster)
    assert event["plan"] is info.value.plan
    assert event["plan"]["create"]["instances"] == 2
    assert [j["host"] for j in event["plan"]["jobs"]] == ["new:el-0", "new:el-1"]
    lines = run_table.run_plan_lines(event["config"], event["plan"])
    assert any(line.startswith("Creates") for line in lines)
    assert cluster.ops("start") == []


def test_a_run_that_needs_instances_without_announcing_emits_no_plan(fake_hosts):
    runner, cluster = fake_hosts(task(), [backend_fleet(count=0)])
    runner.create = True
    with pytest.raises(runs.NeedsInstances):
        runner.run()
    assert plan_events(cluster) == []


def test_a_run_that_grows_its_fleet_itself_announces_the_placement_after_growing(
        fake_hosts, monkeypatch):
    """With a grower (grow_first, as a pass over the queue does), the fleet grows here and the
    plan is the placement on what exists then, not the one that asked for instances."""
    empty = backend_fleet(count=0)
    grown = backend_fleet(count=1)
    grown["facts"] = facts_of(grown)
    # The fake hosts are the grown fleet's; the runner starts from the empty fleet.
    _unused, cluster = fake_hosts(task(), [grown], program=lambda job: (1, 0))
    asked = []
    monkeypatch.setattr(surveys, "collect_fleets", lambda files, docker, root: [grown])
    runner = runs.Runner(task(), [empty], emit=cluster.emit, clock=cluster.clock,
                         sleep=cluster.sleep, poll=1.0, environ={},
                         grower=asked.append, grow_first=True)
    runner.announce_plan = True
    runner.submit(0)
    assert [c["instances"] for c in asked] == [1]
    (event,) = plan_events(cluster)
    assert [j["host"] for j in event["plan"]["jobs"]] == ["el-0"]
    assert "create" not in event["plan"]
    assert event["plan"] == runner.submissions[0].placement


def test_a_run_still_short_of_instances_after_growing_itself_announces_nothing(
        fake_hosts, monkeypatch):
    """Grown here and still not enough: NeedsInstances goes up, but no playbook grows the fleet
    next, so there is no plan to show."""
    empty = backend_fleet(count=0)
    _unused, cluster = fake_hosts(task(), [fleet_with_facts(count=1)])
    asked = []
    monkeypatch.setattr(surveys, "collect_fleets", lambda files, docker, root: [empty])
    runner = runs.Runner(task(), [empty], emit=cluster.emit, clock=cluster.clock,
                         sleep=cluster.sleep, poll=1.0, environ={},
                         grower=asked.append, grow_first=True)
    runner.announce_plan = True
    with pytest.raises(runs.NeedsInstances):
        runner.submit(0)
    assert len(asked) == 1
    assert plan_events(cluster) == []


# ---------------------------------------------------------------------------------------------
# (c) the module's option and actions.submit


def test_task_spec_has_show_plan_off_by_default():
    assert actions.TASK_ARGS["show_plan"] == {"type": "bool", "default": False}


class FakeRunner:
    """Stands in for runs.Runner in actions.submit: records what is called, in order."""

    made = []

    def __init__(self, config, fleets, **kwargs):
        self.config = config
        self.name = config["name"]
        self.calls = []
        self.submissions = []
        self.announce_plan = None   # actions.submit must set it, True or False
        self.surveyed_whole = True   # the survey below stands for a look at every host
        self.queue_first = None   # actions.submit sets it when runs that wait go first
        FakeRunner.made.append(self)

    def make_key_early(self):
        self.calls.append("make_key_early")

    def survey(self, whole=False):
        self.calls.append("survey whole" if whole else "survey")
        return ({}, {}, {}, {})

    def reuse_survey(self, survey):
        self.calls.append("reuse_survey")

    def run(self, wait=True, stop_event=None):
        self.calls.append(("run", self.announce_plan))
        return {"run": self.name, "status": lc.RunStatus.DONE, "jobs": []}

    def place(self):
        self.calls.append("place")
        return a_plan()

    def image_and_python(self, placed):
        return "python:3.11", None


@pytest.fixture
def submitted(monkeypatch):
    """actions.submit over FakeRunner: ``submit(show_plan, check_mode)`` gives the runner."""
    FakeRunner.made = []
    monkeypatch.setattr(runs, "Runner", FakeRunner)
    monkeypatch.setattr(actions, "_fleets", lambda params, host_facts=False: ("/state", [fleet_with_facts()]))
    monkeypatch.setattr(actions, "drive_queue", lambda *args, **kwargs: {})
    monkeypatch.setattr(actions, "queue_waiting", lambda survey: False)

    def submit(check_mode=False, **params):
        full = dict((k, v.get("default")) for k, v in actions.TASK_ARGS.items())
        full.update(config={"type": "task", "name": "train", "image": "python:3.11",
                            "commands": ["true"]}, **params)
        result, failed = actions.submit(full, emit=lambda event: None, check_mode=check_mode)
        (runner,) = FakeRunner.made
        return runner, result, failed

    return submit


@pytest.mark.parametrize("given, announced", [({"show_plan": True}, True),
                                              ({"show_plan": False}, False),
                                              ({}, False)])
def test_submit_announces_the_plan_as_show_plan_says_and_makes_the_key_first(
        submitted, given, announced):
    runner, result, failed = submitted(**given)
    assert (result["status"], failed) == (lc.RunStatus.DONE, False)
    assert runner.calls == ["make_key_early", "survey", "reuse_survey", ("run", announced)]
    # What the runner calls when a host it took as free unasked keeps runs that wait: a look
    # at every host, which serves the pass over the queue and then the placement.
    runner.queue_first()
    assert runner.calls[4:] == ["survey whole", "reuse_survey"]


class _Surveyed(object):
    """A runner whose one look at every host found ``queues``."""

    surveyed_whole = True

    def __init__(self, queues):
        self.queues = queues
        self.reused = None

    def survey(self, whole=False):
        return ({}, {}, self.queues, {})

    def reuse_survey(self, answer):
        self.reused = answer


@pytest.mark.parametrize("state, reused", [(None, True), ("failed", True), ("terminated", True),
                                           ("pending", False), ("active", False)])
def test_the_placement_reuses_the_queue_pass_look_unless_an_entry_waits(
        monkeypatch, state, reused):
    """The look that served the queue's pass serves the placement too, when the pass had
    nothing to act on: no entry, or only ended ones (kept a day for ps). An entry that waits
    or follows a run may change the hosts, so the placement looks again."""
    passes = []
    monkeypatch.setattr(actions, "drive_queue",
                        lambda *args, **kwargs: passes.append(kwargs["survey"]) or {})
    queues = {"gpus-0": [] if state is None else [{"run": "old", "state": state}]}
    runner = _Surveyed(queues)
    actions._queue_first(runner, [fleet_with_facts()], "/state", None)
    assert passes == [({}, {}, queues, {})]
    assert (runner.reused is not None) is reused


def test_submit_in_check_mode_makes_no_key(submitted):
    runner, result, _failed = submitted(check_mode=True, show_plan=True)
    assert result["status"] == "planned" and result["plan"] == a_plan()
    assert runner.calls == ["place"]
    assert runner.queue_first is None


def _task_options():
    """The options plugins/modules/task.py documents, with its doc fragments' (other than the
    attributes), parsed from the source as ansible-doc merges them."""
    module = ast.parse((ROOT / "plugins" / "modules" / "task.py").read_text())
    doc = next(node.value.value for node in module.body if isinstance(node, ast.Assign)
               and node.targets[0].id == "DOCUMENTATION")
    doc = yaml.safe_load(doc)
    options = dict(doc["options"])
    for fragment in doc["extends_documentation_fragment"]:
        name = fragment.split(".")[2]
        if name == "attributes":
            continue
        source = ast.parse((ROOT / "plugins" / "doc_fragments" / (name + ".py")).read_text())
        cls = next(n for n in source.body if isinstance(n, ast.ClassDef))
        text = next(n.value.value for n in cls.body if isinstance(n, ast.Assign)
                    and n.targets[0].id == "DOCUMENTATION")
        options.update(yaml.safe_load(text)["options"])
    return options


def test_the_task_modules_docs_match_its_argument_spec():
    """What ansible-test's validate-modules checks (make sanity), for this module's options."""
    documented = _task_options()
    assert sorted(documented) == sorted(actions.TASK_ARGS)
    for name, spec in actions.TASK_ARGS.items():
        doc = documented[name]
        assert doc.get("type", "str") == spec.get("type", "str"), name
        assert doc.get("elements") == spec.get("elements"), name
        assert doc.get("default") == spec.get("default"), name
        assert doc.get("description"), name
    assert documented["show_plan"]["type"] == "bool"
    assert documented["show_plan"]["default"] is False
    assert "gpufleet apply" in " ".join(documented["show_plan"]["description"])


# ---------------------------------------------------------------------------------------------
# (d) the run's key: RSA 2048, made early, used by the first submission


@pytest.mark.skipif(shutil.which("ssh-keygen") is None, reason="no ssh-keygen here")
@pytest.mark.parametrize("maker", ["cryptography", "ssh-keygen"])
def test_run_key_is_a_2048_bit_rsa_key_pair(tmp_path, monkeypatch, maker):
    if maker == "ssh-keygen":
        # As on a controller without the cryptography package.
        monkeypatch.setitem(sys.modules, "cryptography.hazmat.primitives", None)
    spawned = []
    real = run_preparation._run_key_by_ssh_keygen
    monkeypatch.setattr(run_preparation, "_run_key_by_ssh_keygen", lambda: spawned.append(1) or real())
    key = run_preparation.run_key()
    assert spawned == ([1] if maker == "ssh-keygen" else [])
    assert key["private"].startswith("-----BEGIN OPENSSH PRIVATE KEY-----")
    assert re.match(r"ssh-rsa \S+ dstack_job\s*$", key["public"])
    for name, text in (("id.pub", key["public"]), ("id", key["private"])):
        path = tmp_path / name
        path.write_text(text if text.endswith("\n") else text + "\n")
        path.chmod(0o600)
        shown = subprocess.run(["ssh-keygen", "-l", "-f", str(path)], stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, universal_newlines=True, check=True)
        assert re.match(r"2048 SHA256:\S+ .*\(RSA\)$", shown.stdout.strip()), shown.stdout
    # A pair: the public key is the private one's.
    derived = subprocess.run(["ssh-keygen", "-y", "-f", str(tmp_path / "id")],
                             stdout=subprocess.PIPE, universal_newlines=True, check=True)
    assert derived.stdout.split()[:2] == key["public"].split()[:2]


@pytest.fixture
def counted_keys(monkeypatch):
    """run_preparation.run_key numbered: the n-th key made is PRIVATE-n; ``made`` is set at each."""
    made = []
    ready = threading.Event()

    def run_key():
        made.append(len(made) + 1)
        ready.set()
        return {"private": "PRIVATE-%d" % len(made), "public": "PUBLIC-%d" % len(made)}

    def install():
        monkeypatch.setattr(run_preparation, "run_key", run_key)   # over fake_hosts' own fixed key
        return made, ready

    return install


def started_keys(cluster):
    """The private key each started job got, by submission."""
    return sorted((p["job"]["submission"], p["job"]["files"]["ssh/dstack_job"]["text"])
                  for _h, p in cluster.ops("start"))


def test_the_key_made_early_is_the_one_the_first_submission_uses(fake_hosts, counted_keys):
    runner, cluster = fake_hosts(task(nodes=2), [fleet_with_facts()], program=lambda job: (1, 0))
    made, ready = counted_keys()
    runner.make_key_early()
    assert ready.wait(10)   # started at once, before any placement
    assert made == [1] and cluster.log == []
    runner.make_key_early()   # a second call makes no other key
    assert runner.run()["status"] == lc.RunStatus.DONE
    assert made == [1]
    assert started_keys(cluster) == [(0, "PRIVATE-1"), (0, "PRIVATE-1")]


def test_a_resubmission_gets_a_fresh_key(fake_hosts, counted_keys):
    config = task(retry={"on_events": ["error"], "duration": "1h"})
    runner, cluster = fake_hosts(config, [fleet_with_facts(count=1)],
                                 lambda job: (1, 3) if job["submission"] == 0 else (1, 0))
    made, _ready = counted_keys()
    runner.make_key_early()
    assert runner.run()["submissions"] == 2
    assert made == [1, 2]
    assert started_keys(cluster) == [(0, "PRIVATE-1"), (1, "PRIVATE-2")]


def test_without_an_early_key_the_submission_makes_its_own(fake_hosts, counted_keys):
    runner, cluster = fake_hosts(task(), [fleet_with_facts(count=1)], program=lambda job: (1, 0))
    made, _ready = counted_keys()
    assert runner.run()["status"] == lc.RunStatus.DONE
    assert made == [1]
    assert started_keys(cluster) == [(0, "PRIVATE-1")]


def test_new_local_nodes_have_the_fixed_fact_here():
    """The ``eight_cpu_local_machine`` fixture applies to every test here, as in test_growth (new
    local nodes have a fixed 8-CPU fact), so the growth plans above do not depend on this machine."""
    assert growth.local_machine_fact()["cpus"] == 8
