# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Run records as text (runtable): the ``dstack ps`` table, job lines and the run plan."""

from __future__ import annotations

import pytest
from ansible_collections.gpufleet.cluster.plugins.module_utils.render import run_table as runtable
from ansible_collections.gpufleet.cluster.plugins.module_utils.render.fleet_table import FleetTableError

from ..configs import task

NOW = "2026-01-01T10:05:00Z"


def job(num, status, reason=None, exit_code=None, host=None, **extra):
    record = {"job_num": num, "host": host or "gpus-%d" % num, "container": "r-%d-0" % num,
              "status": status, "reason": reason, "exit_code": exit_code,
              "started_at": None, "finished_at": None, "gpus": []}
    record.update(extra)
    return record


def run(name, status, jobs, reason=None, submitted="2026-01-01T10:00:00Z", **extra):
    record = {"name": name, "run_id": "id", "submission": 0, "submitted": submitted,
              "status": status, "reason": reason, "fleet": "gpus", "backend": "ssh",
              "region": "remote", "price": None, "spot": False, "gpu": "H100:80GB:1",
              "nodes": len(jobs), "jobs": jobs}
    record.update(extra)
    return record


# ---------------------------------------------------------------------------------------------
# run_table
# ---------------------------------------------------------------------------------------------


def test_a_single_job_run_is_one_row():
    lines = runtable.run_table([run("train", "running", [job(0, "running")], user="ann")],
                               now=NOW)
    assert lines == [
        "NAME   USER  BACKEND       GPU          PRICE  STATUS   SUBMITTED",
        "train  ann   ssh (remote)  H100:80GB:1         running  5 mins ago",
    ]


def test_a_failed_single_job_run_shows_the_exit_code():
    lines = runtable.run_table([run("train", "failed", [job(0, "failed", "container_exited_"
                                                            "with_error", 3)],
                                    reason="job_failed", price=0.5, spot=True)], now=NOW)
    assert lines == [
        "NAME   USER  BACKEND       GPU          PRICE        STATUS      SUBMITTED",
        "train  -     ssh (remote)  H100:80GB:1  $0.5 (spot)  failed (3)  5 mins ago",
    ]


def three_job_failed_run():
    return run("dist", "failed", [
        job(0, "terminated", "terminated_by_server", 143),
        job(1, "failed", "container_exited_with_error", 3),
        job(2, "terminated", "terminated_by_server", 143),
    ], reason="job_failed", gpu="")


def test_a_multi_node_run_has_a_row_per_job():
    lines = runtable.run_table([three_job_failed_run()], now=NOW)
    assert lines == [
        "NAME      USER  BACKEND       GPU  PRICE  STATUS      SUBMITTED",
        "dist      -                               failed      5 mins ago",
        "   job=0        ssh (remote)  -           terminated",
        "   job=1        ssh (remote)  -           failed (3)",
        "   job=2        ssh (remote)  -           terminated",
    ]


def test_verbose_adds_resources_and_error():
    single = run("train", "done", [job(0, "done", None, 0, resources="cpu=2 mem=8GB")],
                 reason="all_jobs_done", submitted="2026-01-01T09:00:00Z", user="bob")
    lines = runtable.run_table([three_job_failed_run(), single], now=NOW, verbose=True)
    assert lines == [
        ("NAME      USER  BACKEND       RESOURCES      INSTANCE TYPE  PRICE  STATUS      "
         "SUBMITTED   ERROR"),
        ("dist      -                                                        failed      "
         "5 mins ago  JOB_FAILED"),
        ("   job=0        ssh (remote)                 gpus-0                terminated      "
         "        terminated by server"),
        ("   job=1        ssh (remote)                 gpus-1                failed (3)      "
         "        container exited with error"),
        ("   job=2        ssh (remote)                 gpus-2                terminated      "
         "        terminated by server"),
        "train     bob   ssh (remote)  cpu=2 mem=8GB  gpus-0                done        1 hour ago",
    ]


def test_a_job_whose_host_does_not_answer_says_so_until_its_verdict():
    waiting = run("dist", "running", [job(0, "running"), job(1, "running", unreachable=True)])
    lines = runtable.run_table([waiting], now=NOW, verbose=True)
    assert [line.rstrip().endswith("host not answering") for line in lines] == [
        False, False, False, True]
    judged = run("dist", "terminating", [job(0, "running"), job(
        1, "failed", "instance_unreachable", unreachable=False)])
    assert runtable.run_table([judged], now=NOW, verbose=True)[3].endswith("instance unreachable")
    alone = run("one", "running", [job(0, "running", unreachable=True)])
    assert runtable.run_table([alone], now=NOW, verbose=True)[1].endswith(
        "running  5 mins ago  host not answering")


def test_done_jobs_show_no_error_and_rows_keep_the_given_order():
    master_done = run("md", "done", [job(0, "done", None, 0),
                                     job(1, "done", "done_by_runner", 143)],
                      reason="all_jobs_done", submitted="2026-01-01T10:04:00Z")
    older = run("old", "terminated", [job(0, "terminated", "terminated_by_user", 143)],
                reason="terminated_by_user", submitted="2025-12-31T10:00:00Z", gpu=None,
                backend=None)
    lines = runtable.run_table([master_done, older], now=NOW, verbose=True)
    assert lines == [
        "NAME      USER  BACKEND       RESOURCES  INSTANCE TYPE  PRICE  STATUS      SUBMITTED  ERROR",
        "md        -                                                    done        1 min ago",
        "   job=0        ssh (remote)             gpus-0                done",
        "   job=1        ssh (remote)             gpus-1                done",
        "old       -                              gpus-0                terminated  yesterday  TERMINATED_BY_USER",
    ]


def test_an_empty_list_is_the_header_alone():
    assert runtable.run_table([], now=NOW) == [
        "NAME  USER  BACKEND  GPU  PRICE  STATUS  SUBMITTED"]
    assert runtable.run_table([], now=NOW, verbose=True) == [
        "NAME  USER  BACKEND  RESOURCES  INSTANCE TYPE  PRICE  STATUS  SUBMITTED  ERROR"]


@pytest.mark.parametrize("runs, words", [
    ({"name": "train"}, "expected a list of run records, got dict"),
    ("train", "expected a list of run records, got str"),
    ([{"status": "running"}], "a run record needs a name"),
    (["train"], "a run record needs a name"),
    ([None], "a run record needs a name"),
])
def test_bad_input_raises_fleet_table_error(runs, words):
    with pytest.raises(FleetTableError) as info:
        runtable.run_table(runs, now=NOW)
    assert words in str(info.value)


def test_a_bad_now_raises_fleet_table_error():
    with pytest.raises(FleetTableError, match="now must be an ISO 8601"):
        runtable.run_table([run("train", "running", [job(0, "running")])], now="soon")


def test_verbose_header_is_dstacks():
    header = runtable.run_table([], now=NOW, verbose=True)[0].split("  ")
    assert [h.strip() for h in header if h.strip()] == [
        "NAME", "USER", "BACKEND", "RESOURCES", "INSTANCE TYPE", "PRICE", "STATUS", "SUBMITTED",
        "ERROR"]


# ---------------------------------------------------------------------------------------------
# job_lines
# ---------------------------------------------------------------------------------------------


def test_job_lines():
    jobs = [
        job(0, "terminated", "terminated_by_server", 143, internal_ip="10.1.0.2"),
        job(1, "failed", "container_exited_with_error", 3, internal_ip="10.1.0.3"),
        job(2, "done", None, 0),
        job(3, None),
    ]
    assert runtable.job_lines(jobs, run="dist") == [
        "dist job 0 on gpus-0 (10.1.0.2): terminated (exit code 143, terminated_by_server)",
        "dist job 1 on gpus-1 (10.1.0.3): failed (exit code 3, container_exited_with_error)",
        "dist job 2 on gpus-2: done (exit code 0)",
        "dist job 3 on gpus-3: unknown",
    ]
    assert runtable.job_lines([job(0, "running")]) == ["run job 0 on gpus-0: running"]
    assert runtable.job_lines(None) == [] and runtable.job_lines([]) == []


# ---------------------------------------------------------------------------------------------
# job_resources and run_plan_lines
# ---------------------------------------------------------------------------------------------


def h100_devices(count):
    return [{"vendor": "nvidia", "name": "H100", "memory_mib": 81559, "index": i,
             "id": "GPU-%d" % i, "bus_id": None} for i in range(count)]


def placed(num, host, gpus=0, blocks=1, total_blocks=1, price=None, backend="ssh",
           region="remote"):
    return {"job_num": num, "host": host, "backend": backend, "region": region,
            "price": price, "blocks": blocks, "total_blocks": total_blocks,
            "cpus": 16, "memory_mib": 262144, "disk_mib": 1000000,
            "gpu_vendor": "nvidia" if gpus else "none", "gpu_name": "H100" if gpus else None,
            "gpu_memory_mib": 81920 if gpus else 0, "gpus": h100_devices(gpus)}


@pytest.mark.parametrize("job, text", [
    (placed(0, "h0", gpus=8), "cpu=16 mem=256GB disk=976.6GB gpu=H100:80GB:8"),
    (placed(0, "h0"), "cpu=16 mem=256GB disk=976.6GB"),
    ({"cpus": 2, "memory_mib": 24576, "disk_mib": 71680}, "cpu=2 mem=24GB disk=70GB"),
    ({"cpus": 4, "memory_mib": 8192, "disk_mib": 0, "gpus": [{"id": "x"}],
      "gpu_vendor": "amd"}, "cpu=4 mem=8GB disk=0GB gpu=amd:1"),
])
def test_job_resources(job, text):
    assert runtable.job_resources(job) == text


def test_run_plan_lines_of_a_two_node_run():
    config = task(nodes=2, resources={"gpu": "H100:8"}, retry=True, max_duration="2h")
    plan = {"fleet": "gpus", "jobs": [placed(0, "gpus-0", gpus=8),
                                      placed(1, "gpus-1", gpus=8, price=1.5,
                                             backend="aws", region="us-east-1")]}
    assert runtable.run_plan_lines(config, plan, path="train.dstack.yml") == [
        "Configuration  train.dstack.yml",
        "Type           task (nodes=2)",
        "Fleet          gpus",
        "Resources      cpu=2.. mem=8GB.. disk=100GB.. gpu=H100:8",
        "Spot policy    on-demand",
        "Max price      off",
        "Retry policy   1h[no-capacity, interruption, error]",
        "Max duration   2h",
        "",
        "#  BACKEND          RESOURCES                                      INSTANCE  PRICE",
        "0  ssh (remote)     cpu=16 mem=256GB disk=976.6GB gpu=H100:80GB:8  gpus-0    $0",
        "1  aws (us-east-1)  cpu=16 mem=256GB disk=976.6GB gpu=H100:80GB:8  gpus-1    $1.5",
    ]


def test_run_plan_lines_show_blocks_and_leave_out_an_unknown_path():
    config = task(resources={"cpu": 4}, max_price=0.25, spot_policy="auto",
                  retry={"on_events": ["no-capacity"], "duration": 90})
    plan = {"fleet": "gpus", "jobs": [placed(0, "big-0", blocks=2, total_blocks=8)]}
    lines = runtable.run_plan_lines(config, plan)
    assert not any(line.startswith("Configuration") for line in lines)
    assert [line[:12].rstrip() for line in lines[:7]] == [
        "Type", "Fleet", "Resources", "Spot policy", "Max price", "Retry policy",
        "Max duration"]
    assert [line[12:].strip() for line in lines[:7]] == [
        "task (nodes=1)", "gpus", "cpu=4 mem=8GB.. disk=100GB.. gpu=0..", "auto", "$0.25",
        "90s[no-capacity]", "off"]
    assert lines[7] == ""
    assert lines[8:] == [
        "#  BACKEND       RESOURCES                      INSTANCE     PRICE",
        "0  ssh (remote)  cpu=16 mem=256GB disk=976.6GB  big-0 (2/8)  $0",
    ]


def test_run_plan_header_is_aligned_on_the_keys_shown():
    plan = {"fleet": "gpus", "jobs": [placed(0, "h0")]}
    lines = runtable.run_plan_lines(task(), plan)
    assert lines[0] == "Type          task (nodes=1)"
    assert lines[5] == "Retry policy  off"


def test_a_dev_environment_says_so_in_the_verbose_table():
    env = dict(run("my-env", "running", [job(0, "running")]), type="dev-environment")
    assert runtable.run_table([env], now=NOW)[1].split()[0] == "my-env"
    assert runtable.run_table([env], now=NOW, verbose=True)[1].startswith(
        "my-env (dev-environment)  ")


def test_a_run_held_back_by_its_owners_cap_says_user_limit_in_error():
    waiting = [run("capped", "pending", [], reason="user limit", queue_position=2,
                   gpu=None, backend=None, region=None),
               run("waits", "pending", [], queue_position=1, gpu=None, backend=None,
                   region=None)]
    text = "\n".join(runtable.run_table(waiting, now=NOW, verbose=True))
    assert "user limit, queue #2" in text
    assert "no capacity, queue #1" in text


def test_a_run_waiting_for_others_says_dependency_and_one_that_cannot_start_why():
    rows = [run("after", "pending", [], reason="dependency", queue_position=1, gpu=None,
                backend=None, region=None),
            run("never", "terminated", [], reason="dependency_failed", gpu=None, backend=None,
                region=None)]
    lines = runtable.run_table(rows, now=NOW, verbose=True)
    assert lines[1].split()[0] == "after" and lines[1].rstrip().endswith("dependency")
    assert lines[2].rstrip().endswith("DEPENDENCY_FAILED")


# ---------------------------------------------------------------------------------------------
# services
# ---------------------------------------------------------------------------------------------


SERVICE = {"url": "http://192.0.2.1:3000/proxy/services/main/svc/", "proxy_host": "b-0",
           "model_url": None, "replicas": 2}


def test_a_services_rows_are_its_replicas_and_ps_v_names_its_proxy():
    record = run("svc", "running", [job(0, "running", replica=0), job(1, "running", replica=1)],
                 type="service", service=SERVICE, gpu="")
    lines = runtable.run_table([record], now=NOW)
    assert [line.split()[0] for line in lines[1:]] == ["svc", "replica=0", "replica=1"]
    assert lines[2].startswith("   replica=0")
    verbose = runtable.run_table([record], now=NOW, verbose=True)
    assert verbose[1].startswith("svc (service via b-0)")
    # one replica is one row, as dstack ps shows it
    single = run("svc", "running", [job(0, "running", replica=0)], type="service",
                 service=SERVICE)
    assert len(runtable.run_table([single], now=NOW)) == 2


def test_the_lines_of_a_published_service_are_dstacks():
    assert runtable.service_lines(SERVICE) == [
        "Service is published at:", "  http://192.0.2.1:3000/proxy/services/main/svc/"]
    model = dict(SERVICE, model_url="http://192.0.2.1:3000/proxy/models/main/")
    assert runtable.service_lines(model, "tiny")[2:] == [
        "Model tiny is published at:", "  http://192.0.2.1:3000/proxy/models/main/"]
    assert runtable.service_lines(None) == [] and runtable.service_lines({"url": None}) == []
