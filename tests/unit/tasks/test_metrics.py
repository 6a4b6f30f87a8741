# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""gpufleet metrics' pure parts: the samples the wrapper writes (tasks/metrics.py), dstack's
series made from them, and the charts (render/metrics_table.py)."""

from __future__ import annotations

import pytest
from ansible_collections.gpufleet.cluster.plugins.module_utils.render import metrics_table
from ansible_collections.gpufleet.cluster.plugins.module_utils.tasks import metrics

GIB = 1024 ** 3
MIB = 1024 ** 2


def header(epoch, uptime, cpu_usec, memory=2 * GIB, inactive=GIB // 2, limit="max", cpus=4,
           memtotal_kb=16 * 1024 * 1024):
    return "@ %d %s %d %d %d %s %d %d" % (epoch, uptime, cpu_usec, memory, inactive, limit,
                                          cpus, memtotal_kb)


def test_samples_and_gpus_are_read_and_torn_blocks_left_out():
    text = "\n".join([
        "nvidia 1 2 3",                      # before any header: the file was trimmed there
        header(1000, "500.00", 0),
        "nvidia 90 70000 81559",
        "nvidia 10 100 81559",
        "@ 1010 510.00 4000000",             # torn: fewer fields than a header has
        header(1020, "520.00", 40000000, limit="2147483648"),
        "nvidia 95 71000 81559",
    ])
    samples = metrics.parse(text)
    assert [s["epoch"] for s in samples] == [1000, 1020]
    assert samples[0]["gpus"] == [{"util": 90.0, "used_mib": 70000.0, "total_mib": 81559.0},
                                  {"util": 10.0, "used_mib": 100.0, "total_mib": 81559.0}]
    assert samples[0]["limit"] is None and samples[1]["limit"] == 2147483648
    assert samples[1]["memtotal"] == 16 * GIB


def test_cgroup_v1_no_limit_is_no_limit():
    (sample,) = metrics.parse(header(1000, "1.00", 0, limit="9223372036854771712"))
    assert sample["limit"] is None


def test_amd_smi_rows_are_read_by_their_header_in_both_tool_versions():
    # amd-smi 24.7 and 25.3 order the columns differently (as dstack's runner tests show).
    old = ["amd gpu,gfx,gfx_clock,vram_used,vram_total", "amd 0,10,132,283,196300"]
    new = ["amd gpu,gfx_clk,gfx,vram_used,vram_free,vram_total,vram_percent",
           "amd 0,132,10,283,196309,196592,0.0"]
    for lines, total in ((old, 196300.0), (new, 196592.0)):
        (sample,) = metrics.parse("\n".join([header(1000, "1.00", 0)] + lines))
        assert sample["gpus"] == [{"util": 10.0, "used_mib": 283.0, "total_mib": total}]


def test_cpu_is_the_share_of_the_containers_cpus_between_two_samples():
    # 20 CPU-seconds in 10 seconds on 4 CPUs: two of them busy, 50%.
    samples = metrics.parse("\n".join([header(1000, "500.00", 0),
                                       header(1010, "510.00", 20000000)]))
    assert metrics.cpu_percent(samples[0], samples[1]) == 50.0
    # Uptime is finer than epoch: 10.5 s between them.
    samples[1]["uptime"] = 510.5
    assert metrics.cpu_percent(samples[0], samples[1]) == pytest.approx(47.6, abs=0.05)
    # A counter that went back (another container of the same name) is no value.
    assert metrics.cpu_percent(samples[1], samples[0]) is None


def test_a_jobs_series_are_dstacks_over_the_window():
    text = "\n".join([
        header(900, "400.00", 0),            # before the window: only gives the first CPU
        header(1000, "500.00", 10000000),
        "nvidia 90 1024 81559",
        header(1010, "510.00", 30000000, memory=3 * GIB),
        "nvidia 95 2048 81559",
    ])
    series = metrics.job_metrics(metrics.parse(text), since=1000)
    assert series["cpu_percent"] == [[1000, 2.5], [1010, 50.0]]
    assert series["memory_bytes"] == [[1000, int(1.5 * GIB)], [1010, int(2.5 * GIB)]]
    assert series["memory_total_bytes"] == 16 * GIB
    assert series["cpus"] == 4
    assert series["gpus"] == [{"index": 0, "util_percent": [[1000, 90.0], [1010, 95.0]],
                               "memory_bytes": [[1000, GIB], [1010, 2 * GIB]],
                               "memory_total_bytes": 81559 * MIB}]


def test_gpus_the_job_has_but_no_tool_reports_show_as_no_data_with_their_memory():
    series = metrics.job_metrics(metrics.parse(header(1000, "1.00", 0)),
                                 {"cpus": 16, "gpu_count": 2, "gpu_memory_mib": 81920})
    assert [(g["index"], g["util_percent"], g["memory_total_bytes"]) for g in series["gpus"]] \
        == [(0, [], 81920 * MIB), (1, [], 81920 * MIB)]


def test_a_runs_metrics_take_the_hour_before_its_newest_sample():
    record = {"name": "train", "status": "running",
              "jobs": [{"job_num": 0, "host": "gpus-0", "status": "running", "gpus": []},
                       {"job_num": 1, "host": "gpus-1", "status": "running", "gpus": []}]}
    texts = {0: "\n".join([header(1000, "1.00", 0), header(5000, "4001.00", 10 ** 6)]),
             1: ""}
    result = metrics.run_metrics(record, texts)
    assert (result["run"], result["status"], result["newest"]) == ("train", "running", 5000)
    first, second = result["jobs"]
    assert first["memory_bytes"] == [[5000, int(1.5 * GIB)]]   # 1000 is over an hour before
    assert first["cpu_percent"] == [[5000, pytest.approx(0.0, abs=0.01)]]
    assert (second["job_num"], second["cpu_percent"], second["memory_bytes"]) == (1, [], [])
    only = metrics.run_metrics(record, texts, job=1)
    assert [j["job_num"] for j in only["jobs"]] == [1]


def test_sparklines_are_on_a_fixed_scale_and_end_with_the_newest_value():
    assert metrics_table.sparkline([0, 50, 100], 10) == u"\u2581\u2584\u2587"
    # 30 values in 4 cells: three cells of peaks, then the newest value alone.
    values = [0] * 10 + [100] + [0] * 18 + [40]
    assert metrics_table.cells(values, 4) == [0, 100, 0, 40]
    assert metrics_table.memory(579 * GIB) == "579GB" and metrics_table.memory(13 * MIB) == "13MB"


def test_the_table_charts_every_job_and_gpu_with_a_time_axis():
    stamps = list(range(1000, 1000 + 10 * 360, 10))   # an hour: the whole width
    job0 = {"job_num": 0, "cpu_percent": [[t, 33] for t in stamps],
            "memory_bytes": [[t, 579 * GIB] for t in stamps],
            "memory_total_bytes": 960 * GIB,
            "gpus": [{"index": 0, "util_percent": [[t, 93] for t in stamps],
                      "memory_bytes": [[t, 71 * GIB] for t in stamps],
                      "memory_total_bytes": 80 * GIB}]}
    job1 = {"job_num": 1, "cpu_percent": [], "memory_bytes": [], "memory_total_bytes": None,
            "gpus": []}
    lines = metrics_table.metrics_lines({"jobs": [job0, job1]}, columns=80, now=stamps[-1] + 5)
    assert lines[0].split() == ["UTILIZATION", "MEMORY"]
    assert lines[1].startswith("job=0  cpu    ") and lines[1].endswith("579GB/960GB")
    assert u"\u2582" * 22 + " 33%" in lines[1]   # (80 - 30 - 5) // 2 cells, 33% is the 2nd step
    assert lines[2].startswith("       gpu=0  ") and lines[2].endswith("71GB/80GB")
    assert " 93%" in lines[2]
    assert lines[3] == ""
    assert lines[4].split() == ["job=1", "cpu", "no", "data", "no", "data"]
    assert lines[-1].strip().endswith("now")
    assert u"\u2504" in lines[-1]


def test_cpu_is_a_share_of_the_cpus_the_job_was_given_not_of_the_host():
    # A 16-CPU block on a 128-CPU host, all 16 busy: 100%, as dstack shows it.
    samples = metrics.parse("\n".join([header(1000, "500.00", 0, cpus=128),
                                       header(1010, "510.00", 160000000, cpus=128)]))
    assert metrics.job_metrics(samples, {"cpus": 16})["cpu_percent"] == [[1010, 100.0]]
    assert metrics.job_metrics(samples, {"cpus": 16})["cpus"] == 16
    # Resources an earlier version labelled as text: the CPUs the container sees.
    assert metrics.job_metrics(samples, "cpu=16 mem=64GB")["cpu_percent"] == [[1010, 12.5]]


def test_a_run_as_listing_builds_it_charts_gpus_no_sample_reported():
    """A record as tasks.listing.run_records makes it: ``gpus`` the label's ids, ``resources``
    the resources label's data."""
    record = {"name": "train", "status": "running", "jobs": [
        {"job_num": 0, "host": "gpus-0", "status": "running", "gpus": ["0", "1"],
         "resources": {"cpus": 8, "memory_mib": 65536, "disk_mib": 100, "gpu_count": 2,
                       "gpu_name": "H100", "gpu_vendor": "nvidia", "gpu_memory_mib": 81920}}]}
    result = metrics.run_metrics(record, {0: ""})
    (job,) = result["jobs"]
    assert [(g["index"], g["util_percent"], g["memory_total_bytes"]) for g in job["gpus"]] == [
        (0, [], 81920 * MIB), (1, [], 81920 * MIB)]
    lines = metrics_table.metrics_lines(result, columns=80)
    assert [line.split()[0] for line in lines[1:]] == ["job=0", "gpu=0", "gpu=1"]
    assert lines[2].split()[1:] == ["no", "data", "no", "data"]


def test_a_bad_header_takes_its_gpu_lines_with_it():
    text = "\n".join([header(1000, "1.00", 0), "nvidia 1 2 3",
                      "@ 1010 2.00 5 6 7 max 4", "nvidia 9 9 9"])   # MemTotal missing
    (sample,) = metrics.parse(text)
    assert sample["gpus"] == [{"util": 1.0, "used_mib": 2.0, "total_mib": 3.0}]


def test_a_job_that_started_later_starts_later_on_the_chart():
    late = {"job_num": 1, "cpu_percent": [[1900, 10]], "memory_bytes": [[1900, GIB]],
            "memory_total_bytes": 4 * GIB, "gpus": []}
    early = dict(late, job_num=0, cpu_percent=[[1000, 10], [1900, 10]],
                 memory_bytes=[[1000, GIB], [1900, GIB]])
    lines = metrics_table.metrics_lines({"jobs": [early, late]}, columns=50, now=1905)
    row = lines[3]
    chart = row[len("job=1  cpu  "):]
    assert chart.startswith(" " * 9) and chart.strip().startswith(u"\u2581")


def test_the_filter_renders_a_run_metrics_result_and_names_bad_input():
    from ansible.errors import AnsibleFilterError
    from ansible_collections.gpufleet.cluster.plugins.filter.metrics_table import FilterModule

    render = FilterModule().filters()["metrics_table"]
    job = {"job_num": 0, "cpu_percent": [[1000, 50]], "memory_bytes": [[1000, GIB]],
           "memory_total_bytes": 2 * GIB, "gpus": []}
    lines = render({"jobs": [job]})
    assert lines[1].startswith("job=0  cpu") and lines[1].endswith("1GB/2GB")
    with pytest.raises(AnsibleFilterError, match="expects the metrics of a run"):
        render([job])
    with pytest.raises(AnsibleFilterError, match="columns is a width"):
        render({"jobs": []}, columns="wide")
