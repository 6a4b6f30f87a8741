# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""``gpufleet fleet`` (list, the default) and ``gpufleet fleet delete NAME [-i N] [-y]`` without
Ansible: what reaches delete.yml and list.yml, the question and what is printed, as dstack
prints it. ``gpufleet.runner.run_playbook`` is tests/doubles/playbooks.py's fake."""

from __future__ import annotations

import io

import pytest

from gpufleet import api, cli
from tests.doubles.playbooks import run_cli

NO_TERMINAL = "gpufleet: no terminal to ask on; pass -y to go ahead without asking\n"


# The fake playbook runner and no terminal on stdin (conftest.py)
pytestmark = pytest.mark.usefixtures("playbooks", "stdin")


run = run_cli


def fleet(name="web", plan=None, **extra):
    record = {"name": name, "fleet_type": "backend", "status": "active", "instances": [],
              "plan": plan, "removed": {"containers": []}}
    record.update(extra)
    return {"gpufleet_fleets": [record]}


def refused(msg, task="Plan the deletion"):
    return {"rc": 2, "failures": [{"host": "localhost", "task": task, "msg": msg}]}


def calls(playbooks):
    return [(c["playbook"], c["check"], c["extravars"]) for c in playbooks.calls]


# --- delete ----------------------------------------------------------------------------------


def test_delete_a_fleet_by_name_plans_then_deletes_and_says_it_as_dstack(playbooks):
    playbooks.answer(stats=fleet())
    playbooks.answer(stats=fleet(status="terminated"))
    code, out, err = run(playbooks, "fleet", "delete", "web", "-y")
    assert code == 0, err
    assert out == "Fleet web deleted\n"
    assert calls(playbooks) == [("delete.yml", True, {"fleet_name": "web"}),
                                ("delete.yml", False, {"fleet_name": "web"})]
    assert playbooks.calls[1]["streamed"]


def test_delete_instances_passes_their_numbers_and_says_instances_deleted(playbooks):
    plan = {"create": [], "start": [], "keep": ["web-0"], "remove": ["web-1"], "release": []}
    playbooks.answer(stats=fleet(plan=plan))
    playbooks.answer(stats=fleet(plan=plan))
    code, out, err = run(playbooks, "fleet", "delete", "web", "-i", "1", "--instance", "4", "-y")
    assert code == 0
    assert out == "Fleet web instances deleted\n"
    assert err.startswith("gpufleet: fleet web has no instance 4\n")
    assert [c[2] for c in calls(playbooks)] == [
        {"fleet_name": "web", "gpufleet_instances": [1, 4]}] * 2


def test_force_tells_the_playbook_not_to_refuse(playbooks):
    playbooks.answer(stats=fleet())
    playbooks.answer(stats=fleet(status="terminated"))
    code, out, err = run(playbooks, "fleet", "delete", "web", "-y", "--force")
    assert code == 0, err
    assert [c[2] for c in calls(playbooks)] == [
        {"fleet_name": "web", "gpufleet_refuse_busy": False}] * 2


def test_hosts_that_cannot_be_checked_refuse_the_delete_naming_them(playbooks):
    msg = ("Failed to delete fleet web. Cannot tell whether it is in use: web-0 could not be "
           "checked (cannot be checked: its SSH key /s/fleets/web/id_ed25519 is missing)")
    playbooks.answer(**refused(msg))
    code, out, err = run(playbooks, "fleet", "delete", "web", "-y")
    assert (code, out, err) == (1, "", msg + "\n")
    assert len(playbooks.calls) == 1


def test_apply_takes_the_plans_unreachable_ssh_hosts_as_they_are(playbooks, tmp_path):
    """An SSH host the plan could not reach is not waited for again by the apply of the same
    command: the plan's answer goes to fleet.yml as gpufleet_fleet_unreachable."""
    path = tmp_path / "lab.dstack.yml"
    path.write_text("type: fleet\nname: lab\nssh_config:\n  user: u\n  identity_file: k\n"
                    "  hosts: [10.0.0.1, 10.0.0.2]\n")
    error = "cannot reach u@10.0.0.2:22: no answer over SSH: Connection refused. Check ..."
    instances = [{"name": "lab-0", "status": "idle", "error": None},
                 {"name": "lab-1", "status": "unreachable", "error": error}]
    planned = fleet("lab", fleet_type="ssh", instances=instances,
                    plan={"create": ["lab-0"], "unread": ["lab-1"], "keep": []})
    playbooks.answer(stats=planned)
    playbooks.answer(stats=planned)
    code, out, err = run(playbooks, "apply", "-f", str(path), "-y")
    assert "cannot read lab-1: " + error in out
    assert [(c["playbook"], c["check"]) for c in playbooks.calls] == [
        ("fleet.yml", True), ("fleet.yml", False)]
    assert "gpufleet_fleet_unreachable" not in playbooks.calls[0]["extravars"]
    assert playbooks.calls[1]["extravars"]["gpufleet_fleet_unreachable"] == {"lab-1": error}


def test_delete_asks_as_dstack_asks(playbooks, stdin):
    stdin.tty, stdin.answer = True, "y\n"
    playbooks.answer(stats=fleet(plan={"release": ["web-0", "web-2"], "remove": []}))
    playbooks.answer(stats=fleet())
    code, out, _err = run(playbooks, "fleet", "delete", "web", "-i", "0", "-i", "2")
    assert code == 0
    assert out == "Delete the fleet web instances [0, 2]? [y/n] Fleet web instances deleted\n"

    stdin.answer = "n\n"
    playbooks.calls.clear()
    playbooks.answer(stats=fleet())
    code, out, _err = run(playbooks, "fleet", "delete", "web")
    assert code == 1
    assert out == "Delete the fleet web? [y/n] Nothing was deleted.\n"
    assert [c[1] for c in calls(playbooks)] == [True]


def test_delete_without_a_terminal_or_yes_changes_nothing(playbooks, stdin):
    playbooks.answer(stats=fleet())
    code, out, err = run(playbooks, "fleet", "delete", "web")
    assert (code, out, err) == (1, "Nothing was deleted.\n", NO_TERMINAL)
    assert stdin.reads == 0 and [c[1] for c in calls(playbooks)] == [True]


def test_an_unknown_fleet_is_said_as_dstack_says_it(playbooks):
    playbooks.answer(**refused("Fleet web does not exist"))
    code, out, err = run(playbooks, "fleet", "delete", "web", "-y")
    assert (code, out, err) == (1, "", "Fleet web does not exist\n")
    assert len(playbooks.calls) == 1


def test_a_fleet_in_use_is_refused_before_asking(playbooks, stdin):
    stdin.tty = True
    message = ("Failed to delete fleet web instances [1]. Fleet instances are in use: web-1 "
               "runs train (stop it first: gpufleet stop train)")
    playbooks.answer(**refused(message))
    code, out, err = run(playbooks, "fleet", "delete", "web", "-i", "1")
    assert (code, out, err) == (1, "", message + "\n")
    assert stdin.reads == 0


def test_a_host_failure_while_deleting_is_printed_as_every_command_prints_it(playbooks):
    playbooks.answer(stats=fleet())
    playbooks.answer(rc=2, stats=fleet(), failures=[
        {"host": "web-0", "task": "Remove this fleet's marker", "msg": "unreachable"}])
    code, out, err = run(playbooks, "fleet", "delete", "web", "-y")
    assert code == 1 and out == ""
    assert err.endswith("gpufleet: web-0: Remove this fleet's marker: unreachable\n")


def test_instance_numbers_are_numbers():
    with pytest.raises(SystemExit) as info:
        cli.main(["fleet", "delete", "web", "-i", "one"], out=io.StringIO(), err=io.StringIO())
    assert info.value.code == 2


def test_the_api_takes_a_name_and_instance_numbers(playbooks):
    playbooks.answer(stats=fleet())
    assert api.delete_fleet("web", instances=(1, "2"), state_dir="/s")["name"] == "web"
    assert playbooks.calls[0]["extravars"] == {
        "fleet_name": "web", "gpufleet_instances": [1, 2], "gpufleet_state_dir": "/s"}
    with pytest.raises(api.GpufleetError, match="takes a fleet's name"):
        api.delete_fleet("")
    with pytest.raises(api.GpufleetError, match="instance numbers"):
        api.delete_fleet("web", instances=["x"])
    playbooks.answer(**refused("Fleet web does not exist"))
    with pytest.raises(api.GpufleetError) as info:
        api.delete_fleet("web", check=True)
    assert info.value.message == "Fleet web does not exist" and playbooks.calls[-1]["check"]


# --- list ------------------------------------------------------------------------------------


@pytest.mark.parametrize("argv", [["fleet"], ["fleet", "list"]])
def test_fleet_and_fleet_list_both_list(playbooks, argv):
    playbooks.answer(stats={"gpufleet_fleets": []})
    code, out, _err = run(playbooks, *argv)
    assert (code, out) == (0, "No fleets.\n")
    assert calls(playbooks) == [("list.yml", False, {"fleets": []})]


def test_fleet_list_takes_the_list_options(playbooks, tmp_path):
    path = tmp_path / "web.dstack.yml"
    path.write_text("type: fleet\nname: web\nnodes: 1\n")
    record = fleet()["gpufleet_fleets"]
    playbooks.answer(stats={"gpufleet_fleets": record})
    code, out, _err = run(playbooks, "fleet", "list", "-f", str(path), "-v", "--json")
    assert code == 0 and '"name": "web"' in out
    assert calls(playbooks) == [("list.yml", False, {"fleets": [str(path)]})]


# --- the fleet's name, from its file -----------------------------------------------------------

LAB = ("type: fleet\nssh_config:\n  user: ubuntu\n  identity_file: ~/.ssh/id_ed25519\n"
       "  hosts: [10.0.0.1]\n")


def test_delete_of_an_unnamed_file_names_the_fleet_as_applying_it_does(playbooks, stdin, tmp_path):
    """The question names the fleet spec.naming derives from the file (what fleet.yml and
    delete.yml call it), not the file's own name."""
    path = tmp_path / "My_Lab.dstack.yml"
    path.write_text(LAB)
    stdin.tty, stdin.answer = True, "n\n"
    code, out, _err = run(playbooks, "delete", "-f", str(path))
    assert (code, out) == (1, "Delete the fleet my-lab? [y/n] Nothing was deleted.\n")
    assert playbooks.calls == []


def test_delete_of_a_file_that_gives_no_name_says_so_before_asking(playbooks, stdin, tmp_path):
    path = tmp_path / "a.dstack.yml"
    path.write_text(LAB)
    stdin.tty, stdin.answer = True, "y\n"
    code, out, err = run(playbooks, "delete", "-f", str(path))
    assert (code, out) == (1, "")
    assert "add `name: <name>`" in err and "Traceback" not in err
    assert playbooks.calls == [] and stdin.reads == 0
