"""GPU health on a real local node: a stand-in nvidia-smi that reports an uncorrectable ECC error
makes ``gpufleet fleet --refresh`` show the instance as ``idle (failure)`` with the reason, and a
task that needs every node is refused that host. Uses the shared task world (no fleet of its
own); the stand-in goes and the health is read again at the end, so later tests see a healthy
fleet."""

from __future__ import annotations

import json
import shlex

from ansible_collections.gpufleet.cluster.plugins.module_utils.backends import local

from .task_world import CPU, FLEET, SUFFIX

STAND_IN = "/usr/local/bin/nvidia-smi"
# What nvidia-smi prints for the probe's query on a host whose GPU 0 had 2 volatile
# uncorrectable (double-bit) ECC errors; anything else it is asked fails, as on old drivers.
ECC_ERROR = (
    "#!/bin/sh\n"
    "case \"$1\" in\n"
    "  --query-gpu=*)\n"
    "    echo 'index, pci.bus_id, ecc.errors.uncorrected.volatile.total, retired_pages.pending,"
    " retired_pages.single_bit_ecc.count, retired_pages.double_bit.count'\n"
    "    echo '0, 00000000:18:00.0, 2, [N/A], [N/A], [N/A]';;\n"
    "  *) echo 'Invalid combination of input arguments.' >&2; exit 2;;\n"
    "esac\n"
)
MESSAGE = "GPU 0 has 2 volatile uncorrectable (double-bit) ECC error(s)"


def _node_sh(world, command):
    world["docker"].run("exec", local.container_name(FLEET, 2), "sh", "-c", command)


def _rows(text, instance):
    return [line for line in text.splitlines() if "instance=%d " % instance in line + " "]


def test_an_ecc_error_shows_as_failure_and_tasks_leave_the_host_out(world, tmp_path, capsys):
    from gpufleet import cli

    fleet_file = str(world["base"] / "fleet.dstack.yml")
    _node_sh(world, "printf '%%s' %s > %s && chmod 755 %s"
             % (shlex.quote(ECC_ERROR), STAND_IN, STAND_IN))
    try:
        capsys.readouterr()
        assert cli.main(["fleet", "--refresh", "-v", "-f", fleet_file]) == 0
        table = capsys.readouterr().out
        (row,) = _rows(table, 2)
        assert "idle (failure)" in row and row.endswith("health failure: " + MESSAGE), table
        for num in (0, 1):   # no GPU tools there: healthy, shown as plain idle
            (other,) = _rows(table, num)
            assert " idle " in other + " " and "(failure)" not in other, table

        # Within the cache's 5 minutes the listing reads the cache, and --json carries it.
        assert cli.main(["fleet", "--json", "-f", fleet_file]) == 0
        (record,) = json.loads(capsys.readouterr().out)
        by_num = dict((i["num"], i) for i in record["instances"])
        assert by_num[2]["health"]["status"] == "failure"
        assert by_num[2]["health"]["source"] == "nvidia-smi"
        assert by_num[2]["health"]["message"] == MESSAGE
        assert by_num[0]["health"]["status"] == "healthy"

        task = tmp_path / "hl-all.dstack.yml"
        task.write_text("type: task\nname: hl-%s\nimage: %s\nnodes: 3\nfleets: [%s]\n%s"
                        "commands: [\"true\"]\n" % (SUFFIX, world["base_image"], FLEET, CPU))
        assert cli.main(["apply", "-f", str(task), "-y"]) == 1
        err = capsys.readouterr().err
        assert "%s-2: health failure (%s)" % (FLEET, MESSAGE) in err, err
    finally:
        _node_sh(world, "rm -f %s" % STAND_IN)
        capsys.readouterr()
        assert cli.main(["fleet", "--refresh", "--json", "-f", fleet_file]) == 0
        (record,) = json.loads(capsys.readouterr().out)
    assert [i["health"]["status"] for i in record["instances"]] == ["healthy"] * 3
