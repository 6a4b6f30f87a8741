# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The stop guard (tasks.ownership, called by actions.run_stop, the one sequence of a stop):
another user's run is refused, naming its owner, unless ``force`` or the caller is an admin
of the run's fleet (the members document its hosts keep, read with the ``members`` op)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
import yaml
from ansible_collections.gpufleet.cluster.plugins.module_utils.attach import stop as stopping
from ansible_collections.gpufleet.cluster.plugins.module_utils.tasks import actions, ownership, surveys
from ansible_collections.gpufleet.cluster.plugins.module_utils.tasks.ssh import NodeError

from tests.unit.configs import task
from tests.unit.tasks.fakes import fleet_with_facts

ADMIN_DOC = {"fleet": "gpus", "members": {"carol": {"role": "admin"}, "bob": {"role": "member"}}}


def record(name="train", user="ann", fleet="gpus", **extra):
    return dict({"name": name, "user": user, "fleet": fleet}, **extra)


def check(records, caller, force=False, doc=None):
    asked = []

    def admin_doc(fleet):
        asked.append(fleet)
        return doc

    ownership.check_stop(records, caller, force, admin_doc, lambda r: r.get("fleet"))
    return asked


def test_the_owner_stops_their_own_run_without_reading_the_members():
    assert check([record()], "ann") == []


def test_another_users_run_is_refused_naming_the_owner_and_force():
    with pytest.raises(ownership.NotYours) as info:
        check([record()], "bob", doc=ADMIN_DOC)
    message = str(info.value)
    assert message.startswith("run train belongs to ann: ")
    assert "--force" in message and "fleet gpus" in message and "\n" not in message


def test_force_or_a_fleet_admin_may_stop_it():
    assert check([record()], "bob", force=True) == []
    assert check([record()], "carol", doc=ADMIN_DOC) == ["gpus"]


def test_no_members_document_means_no_admins():
    with pytest.raises(ownership.NotYours):
        check([record()], "carol", doc=None)


def test_a_run_made_before_runs_named_their_user_is_anyones():
    assert check([record(user=None)], "bob") == []


def test_the_members_are_read_once_per_fleet_for_a_job_array():
    runs = [record("hp-1"), record("hp-2"), record("hp-3", user="carol")]
    assert check(runs, "carol", doc=ADMIN_DOC) == ["gpus"]
    with pytest.raises(ownership.NotYours, match="run hp-1 belongs to ann"):
        check(runs, "bob", doc=ADMIN_DOC)


def test_a_queued_run_is_on_the_fleet_of_its_queue_host():
    fleets = [fleet_with_facts("other"), fleet_with_facts("gpus")]
    assert ownership.fleet_of({"queued_on": "gpus-1"}, fleets) == "gpus"
    assert ownership.fleet_of({"fleet": "other", "queued_on": "gpus-1"}, fleets) == "other"
    assert ownership.fleet_of({"queued_on": "elsewhere"}, fleets) is None


class Host:
    def __init__(self, name, answer=None, error=None):
        self.name, self.answer, self.error, self.asked = name, answer, error, []

    def call(self, op, payload=None, timeout=120):
        self.asked.append(op)
        if self.error:
            raise NodeError(self.name, self.error)
        return self.answer


def test_members_doc_asks_the_first_host_that_answers_and_an_unknown_op_is_no_doc():
    fleets = [fleet_with_facts("gpus", count=3)]
    nodes = {"gpus-0": Host("gpus-0", error="unreachable over SSH"),
             "gpus-1": Host("gpus-1", {"doc": ADMIN_DOC}), "gpus-2": Host("gpus-2", {})}
    assert ownership.members_doc(nodes, fleets, "gpus") == ADMIN_DOC
    assert nodes["gpus-2"].asked == []
    old = {"gpus-0": Host("gpus-0", error="unknown op members"),
           "gpus-1": Host("gpus-1", error="unknown op members"),
           "gpus-2": Host("gpus-2", error="unknown op members")}
    assert ownership.members_doc(old, fleets, "gpus") is None
    assert ownership.members_doc({"gpus-0": Host("gpus-0", {"doc": None})}, fleets,
                                 "gpus") is None
    assert ownership.members_doc(nodes, fleets, None) is None


# ---------------------------------------------------------------------------------------------
# Through actions.run_stop (and attach.stop.stop_run) on the fake hosts


@pytest.fixture
def anns_run(fake_hosts, monkeypatch):
    """A 2-node run ann submitted (detached) on a 3-host fleet whose hosts keep ``doc``."""
    monkeypatch.setenv("GPUFLEET_USER", "ann")
    fleets = [fleet_with_facts(count=3)]
    runner, cluster = fake_hosts(task(nodes=2), fleets)
    runner.run(wait=False)
    monkeypatch.setattr(actions, "_fleets", lambda params: ("/state", fleets))
    monkeypatch.setattr(surveys, "nodes_of", lambda found, root=None: dict(cluster.nodes))
    monkeypatch.setattr(actions, "drive_queue", lambda *a, **k: {})
    docs = {}
    for name, node in cluster.nodes.items():
        monkeypatch.setattr(node, "op_members", lambda payload: {"doc": docs.get("doc")},
                            raising=False)
    del cluster.log[:]
    return cluster, docs


def params(**given):
    return dict({"name": "train", "abort": False, "force": False, "fleets": [],
                 "state_dir": None}, **given)


def stops(cluster):
    return sorted(h for h, op, _p in cluster.log if op == "stop")


def test_bobs_stop_of_anns_run_is_refused_and_stops_nothing(anns_run, monkeypatch):
    cluster, _docs = anns_run
    monkeypatch.setenv("GPUFLEET_USER", "bob")
    with pytest.raises(actions.ActionError, match="run train belongs to ann: .*--force"):
        actions.run_stop(params())
    with pytest.raises(actions.ActionError, match="belongs to ann"):
        actions.run_stop(params(), check_mode=True)
    assert stops(cluster) == []
    assert [op for _h, op, _p in cluster.log].count("members") == 2   # one host, each time


def test_bob_stops_anns_run_with_force_and_ann_without(anns_run, monkeypatch):
    cluster, _docs = anns_run
    monkeypatch.setenv("GPUFLEET_USER", "bob")
    answer = actions.run_stop(params(force=True))
    assert answer["changed"] and stops(cluster) == ["gpus-0", "gpus-1"]
    assert "members" not in [op for _h, op, _p in cluster.log]


def test_the_owner_stops_without_asking_for_the_members(anns_run):
    cluster, _docs = anns_run
    assert actions.run_stop(params())["changed"]
    assert "members" not in [op for _h, op, _p in cluster.log]


def test_an_admin_of_the_fleet_stops_anyones_run(anns_run, monkeypatch):
    cluster, docs = anns_run
    docs["doc"] = {"fleet": "gpus", "members": {"ann": {"role": "member"},
                                                "carol": {"role": "admin"}}}
    monkeypatch.setenv("GPUFLEET_USER", "carol")
    assert actions.run_stop(params())["changed"]
    assert stops(cluster) == ["gpus-0", "gpus-1"]


def test_stop_run_the_one_sequence_refuses_too(anns_run, monkeypatch):
    cluster, _docs = anns_run
    monkeypatch.setenv("GPUFLEET_USER", "bob")
    with pytest.raises(actions.ActionError, match="belongs to ann"):
        stopping.stop_run(params())
    assert stops(cluster) == []


def test_the_run_stop_module_takes_force():
    assert actions.RUN_STOP_ARGS["force"] == {"type": "bool", "default": False}
    assert actions.RUN_INFO_ARGS["user"] == {"type": "str"}


def _documented(module):
    """The options plugins/modules/<module>.py documents, with its doc fragments' (other than
    the attributes), as ansible-doc merges them."""
    root = Path(__file__).resolve().parents[3]

    def doc_of(path, body_of=lambda tree: tree.body):
        tree = ast.parse(path.read_text())
        for node in body_of(tree):
            if isinstance(node, ast.Assign) and node.targets[0].id == "DOCUMENTATION":
                return yaml.safe_load(node.value.value)
        raise AssertionError("no DOCUMENTATION in %s" % path)

    doc = doc_of(root / "plugins" / "modules" / (module + ".py"))
    options = dict(doc["options"])
    for fragment in doc["extends_documentation_fragment"]:
        name = fragment.split(".")[2]
        if name != "attributes":
            path = root / "plugins" / "doc_fragments" / (name + ".py")
            options.update(doc_of(path, lambda t: next(
                n for n in t.body if isinstance(n, ast.ClassDef)).body)["options"])
    return options


@pytest.mark.parametrize("module, spec, option", [("run_stop", actions.RUN_STOP_ARGS, "force"),
                                                  ("run_info", actions.RUN_INFO_ARGS, "user")])
def test_the_run_modules_docs_match_their_argument_specs(module, spec, option):
    documented = _documented(module)
    assert sorted(documented) == sorted(spec)
    for name, given in spec.items():
        assert documented[name].get("type", "str") == given.get("type", "str"), name
        assert documented[name].get("default") == given.get("default"), name
    assert documented[option]["description"]
