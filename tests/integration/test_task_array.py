"""Job arrays on a real local fleet: ``gpufleet apply --array 1-6%2``, at most two runs alive,
every index ending done with its own GPUFLEET_ARRAY_INDEX, each run in ps and logs, and
``gpufleet stop`` of the array's name stopping them all.

Uses the shared 3-node task world (tests/integration/task_world.py)."""

from __future__ import annotations

import json

from gpufleet import cli

from .task_world import CPU, FLEET, SUFFIX, logs


def test_an_array_keeps_at_most_n_runs_alive_and_every_index_ends_done(world, tmp_path,
                                                                       capsys):
    name = "arr-" + SUFFIX
    task = tmp_path / "array.dstack.yml"
    task.write_text(
        "type: task\nname: %s\nimage: %s\n%s"
        "commands:\n"
        "  - echo START $(date +%%s.%%N) INDEX $GPUFLEET_ARRAY_INDEX OF $GPUFLEET_ARRAY_COUNT\n"
        "  - sleep 4\n"
        "  - echo END $(date +%%s.%%N)\n" % (name, world["base_image"], CPU))
    assert cli.main(["apply", "-f", str(task), "-y", "--array", "1-6%2", "--fleet", FLEET]) == 0
    out = capsys.readouterr().out
    assert "Job array %s done: 6 done" % name in out
    spans = []
    for index in range(1, 7):
        lines = logs("%s-%d" % (name, index))[0]
        start = lines[0].split()
        assert start[2:] == ["INDEX", str(index), "OF", "6"]
        spans.append((float(start[1]), float(lines[1].split()[1])))
    # never more than two alive: at each start, count the runs that had started and not ended
    for begin, _end in spans:
        assert sum(1 for b, e in spans if b <= begin < e) <= 2, spans
    assert cli.main(["ps", "--json"]) == 0
    listed = [r for r in json.loads(capsys.readouterr().out) if r.get("array") == name]
    assert sorted(r["name"] for r in listed) == ["%s-%d" % (name, i) for i in range(1, 7)]


def test_stopping_an_array_by_its_name_stops_each_run(world, tmp_path, capsys):
    name = "arrstop-" + SUFFIX
    task = tmp_path / "arrstop.dstack.yml"
    task.write_text("type: task\nname: %s\nimage: %s\n%scommands: [sleep infinity]\n"
                    % (name, world["base_image"], CPU))
    assert cli.main(["apply", "-f", str(task), "-y", "-d", "--array", "1-2",
                     "--fleet", FLEET]) == 0
    capsys.readouterr()
    assert cli.main(["stop", "-y", name]) == 0
    assert "Job array %s: 2 containers of 2 runs stopped." % name in capsys.readouterr().out
    assert cli.main(["ps", "--json"]) == 0
    statuses = [r["status"] for r in json.loads(capsys.readouterr().out)
                if r.get("array") == name]
    assert statuses == ["terminated", "terminated"]
